"""Every artifact of one method as a file (`translate --emit-dir D`).

    method.ll     the reader's module (IR: parent + outlined filters)
    method.obj    LLVM's COFF object          method.s     LLVM's assembly text
    image.bin     the final code              rodata.bin   the read-only data after it (if any)
    clauses.bin   CORINFO_EH_CLAUSE records   pdata.bin    RUNTIME_FUNCTIONs (image offsets)
    unwind.bin    the UNWIND_INFOs .pdata points into, and unwind.json: one record per range
                  (kind, range, offsets into unwind.bin)
    report.json   what `--json` prints         layout.svg   the layout picture

A run that stopped writes what it produced. Same input, byte-identical files (no timings
in report.json unless asked for).

Output paths (`--emit-dir`, and every FILE option of the command line) are checked before
any work by `prepare_folder` and `check_output_file`: a batch must not find out after an
hour that its report cannot be written. They try what the run will do (create the folder,
open the file) rather than ask `os.access`, which says yes to root everywhere.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from pathlib import Path

from ..errors import LlilcEhError

from .method import MethodView
from .report import report
from .svg import layout_svg

ARTIFACTS = ("method.ll", "method.obj", "method.s", "image.bin", "rodata.bin", "clauses.bin", "pdata.bin",
             "unwind.bin", "unwind.json", "report.json", "layout.svg")


def dumps(value) -> str:
    """The one JSON text form of the view's documents."""
    return json.dumps(value, indent=1) + "\n"


def unwind_records_json(view: MethodView) -> list[dict]:
    im = view.image
    if im is None:
        return []
    return [{"range": n, "kind": rec.kind.value, "funclet": rec.funclet, "start": rec.start, "end": rec.end,
             "offset": im.runtime_functions[n].unwind_rva, "size": len(rec.data), "synthesized": rec.synthesized}
            for n, rec in enumerate(view.unwind)]


def _refuse(option: str, path: str | Path, why: str) -> LlilcEhError:
    return LlilcEhError(f"{option} {path}: {why}", kind="bad-output-path")


def prepare_folder(folder: str | Path, option: str = "--emit-dir") -> Path:
    """The output folder, created (with its parents) if missing; an `LlilcEhError` naming it
    when it is a file, cannot be created or cannot be written into."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise _refuse(option, folder, "exists and is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise _refuse(option, folder, f"cannot write into it: {e.strerror}") from None
    return folder


def check_output_file(path: str | Path, option: str) -> Path:
    """A FILE the run will write at its end, checked now: its folder exists, and the file can
    be opened for writing (an existing file is opened for appending, so it is left as it was;
    a new one is created and removed again)."""
    path = Path(path)
    if path.is_dir():
        raise _refuse(option, path, "is a folder")
    parent = path.parent
    if not parent.is_dir():
        raise _refuse(option, path, f"its folder {parent} does not exist")
    existed = path.exists()
    # Non-blocking: a FIFO without a reader would block the open (ENXIO instead); one with a
    # reader, such as `--json /dev/stdout | jq`, is fine.
    flags = os.O_WRONLY | os.O_NONBLOCK | (os.O_APPEND if existed else os.O_CREAT | os.O_EXCL)
    try:
        os.close(os.open(path, flags, 0o666))
    except OSError as e:
        why = "a FIFO that no process reads" if e.errno == errno.ENXIO else e.strerror
        raise _refuse(option, path, f"cannot be written: {why}") from None
    if not existed:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return path


def emit(view: MethodView, folder: str | Path, *, timings: bool = False) -> list[Path]:
    """Write the artifacts into `folder` (created); the paths written, in a fixed order. An
    artifact this run does not have (rodata.bin of a method without read-only data, the later
    stages' files of a run that stopped) is removed, so the folder never mixes two runs."""
    folder = prepare_folder(folder)
    run = view.run
    files: list[tuple[str, bytes | str]] = []
    if run.reader is not None:
        files.append(("method.ll", run.reader.module))
    if run.codegen is not None:
        files += [("method.obj", run.codegen.obj), ("method.s", run.codegen.asm)]
    im = run.image
    if im is not None:
        files.append(("image.bin", im.code))
        if im.read_only_data:
            files.append(("rodata.bin", im.read_only_data))
    if run.clauses is not None:
        files.append(("clauses.bin", run.clause_bytes))
    if im is not None:
        files += [("pdata.bin", im.pdata()), ("unwind.bin", im.unwind_data),
                  ("unwind.json", dumps(unwind_records_json(view)))]
    files += [("report.json", dumps(report(view, timings=timings))), ("layout.svg", layout_svg(view))]
    written = []
    for name, data in files:
        path = folder / name
        if isinstance(data, str):
            path.write_text(data, encoding="utf-8", newline="\n")
        else:
            path.write_bytes(data)
        written.append(path)
    for name in ARTIFACTS:
        if name not in {p.name for p in written}:
            (folder / name).unlink(missing_ok=True)
    return written


__all__ = ["ARTIFACTS", "check_output_file", "dumps", "emit", "prepare_folder", "unwind_records_json"]
