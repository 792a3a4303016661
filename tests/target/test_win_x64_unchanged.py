"""win-x64, the default target, is byte-identical to what llilc-eh made before targets
existed: for every EH method of the embedded sample at O0 and O2, with selectors and with
cloned finallys, a digest of the IR text, the clause table, the final image's code, its
UNWIND_INFOs and its .pdata equals the one in win_x64_golden.json, taken at commit
b757c22 (before llilc_eh.target) from a clean export of that commit.

A deliberate change of the win-x64 output must regenerate the file, and say so in its
commit: `.venv/bin/python tests/target/test_win_x64_unchanged.py` rewrites it from the
current tree.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from target_runs import target_pool, windows  # noqa: E402,F401 (fixtures)

GOLDEN = Path(__file__).with_name("win_x64_golden.json")


def key(opt: int, clone: bool, name: str) -> str:
    return f"O{opt}{' clone' if clone else ''} {name}"


def digest(run) -> str:
    h = hashlib.sha256()
    h.update(str(run.reader.module).encode())
    h.update(b"\0")
    h.update(run.clause_bytes)
    h.update(b"\0")
    h.update(run.image.code)
    h.update(b"\0")
    h.update(run.image.unwind_data)
    h.update(repr(run.image.runtime_functions).encode())
    return h.hexdigest()


def digests(windows) -> dict[str, str]:
    return {key(opt, clone, run.name): digest(run) for (opt, clone), runs in windows.runs.items() for run in runs}


def test_win_x64_output_is_unchanged(windows):
    golden = json.loads(GOLDEN.read_text())
    now = digests(windows)
    assert len(golden) == len(now) == 4 * len(windows.rids), (len(golden), len(now))
    changed = sorted(k for k in golden if now.get(k) != golden[k])
    assert changed == [], f"{len(changed)} of {len(golden)} differ from the golden digests, e.g. {changed[:5]}"


def test_the_digest_sees_a_one_byte_change(windows):
    """Negative control: the digest covers the image bytes (one flipped byte changes it)."""
    import dataclasses
    run = windows.runs[(2, False)][0]
    code = bytearray(run.image.code)
    code[len(code) // 2] ^= 1
    other = dataclasses.replace(run, image=dataclasses.replace(run.image, code=bytes(code)))
    assert digest(other) != digest(run)


if __name__ == "__main__":      # regenerate the golden file from the current tree
    sys.path.insert(0, str(Path(__file__).parent))
    from target_runs import run_sample

    from llilc_eh.backend.codegen import CodegenPool
    from llilc_eh.target import WIN_X64
    with CodegenPool(1) as pool:
        GOLDEN.write_text(json.dumps(digests(run_sample(WIN_X64, pool)), indent=0, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
