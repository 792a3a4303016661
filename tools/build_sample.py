#!/usr/bin/env python3
"""Build the embedded sample assembly llilc_eh/data/sample.dll from all tests/il programs.

Usage: tools/build_sample.py [--check]

The sample is every tests/il/*.il program in one DLL, so that the CLI and the tests have
a small real assembly with every EH shape we care about, without the corpus. Each
program's two header lines (`.assembly extern mscorlib {}`, `.assembly <name> {}`) and
its `.entrypoint` line are dropped (a DLL has no entry point); the programs do not clash
because each lives in its own namespace Tests.<CamelCaseName>. The concatenated source
is written to llilc_eh/data/sample.il too and committed, so the DLL can be rebuilt and
compared.

Mono's ilasm is not deterministic: every run writes a fresh random MVID (the Module
table's GUID) and the current time in the PE header's TimeDateStamp, so two builds of
the same source differ in those bytes. --check rebuilds and compares sample.il exactly
and the DLL up to those fields (it reports where they differ).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llilc_eh.check.toolchain import assemble  # noqa: E402

IL_DIR = REPO / "tests" / "il"
DATA_DIR = REPO / "llilc_eh" / "data"
HEADER = [".assembly extern mscorlib {}", ".assembly sample {}"]


def program_body(path: Path) -> list[str]:
    """A program's lines without its two .assembly header lines and its .entrypoint."""
    lines = path.read_text().splitlines()
    expected_header = [".assembly extern mscorlib {}", f".assembly {path.stem} {{}}"]
    if lines[:2] != expected_header:
        raise SystemExit(f"{path}: the first two lines must be {expected_header}, got {lines[:2]}")
    return [line for line in lines[2:] if line.strip() != ".entrypoint"]


def sample_source() -> str:
    out = list(HEADER)
    for path in sorted(IL_DIR.glob("*.il")):
        out += ["", f"// ---- tests/il/{path.name} ----"]
        out += program_body(path)
    return "\n".join(out) + "\n"


def build(out_dir: Path) -> tuple[Path, Path]:
    """Write sample.il into out_dir and assemble it there; return (il, dll)."""
    il = out_dir / "sample.il"
    il.write_text(sample_source())
    return il, assemble(il, out_dir, dll=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="rebuild into a temporary directory and compare with the committed files")
    args = ap.parse_args()
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            il, dll = build(Path(tmp))
            same_il = il.read_bytes() == (DATA_DIR / "sample.il").read_bytes()
            old, new = (DATA_DIR / "sample.dll").read_bytes(), dll.read_bytes()
            diff = [i for i in range(min(len(old), len(new))) if old[i] != new[i]]
            print(f"sample.il {'identical' if same_il else 'DIFFERS'}; sample.dll sizes {len(old)}/{len(new)}, "
                  f"{len(diff)} differing bytes" + (f" at {diff[0]:#x}..{diff[-1]:#x}" if diff else ""))
            return 0 if same_il and len(old) == len(new) else 1
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    il, dll = build(DATA_DIR)
    print(f"wrote {il.relative_to(REPO)} and {dll.relative_to(REPO)} ({dll.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
