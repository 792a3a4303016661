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
"""

from __future__ import annotations

import json
from pathlib import Path

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


def emit(view: MethodView, folder: str | Path, *, timings: bool = False) -> list[Path]:
    """Write the artifacts into `folder` (created); the paths written, in a fixed order. An
    artifact this run does not have (rodata.bin of a method without read-only data, the later
    stages' files of a run that stopped) is removed, so the folder never mixes two runs."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
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


__all__ = ["ARTIFACTS", "dumps", "emit", "unwind_records_json"]
