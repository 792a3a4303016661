#!/usr/bin/env python3
"""What the call-site markers cost LLVM's optimiser: code size with and without them.

Usage: tools/marker_cost.py [ASSEMBLY ...] [--opt 2] [--limit N] [--jobs N] [--show N]

Default: the EH methods of System.Private.CoreLib.dll. Each method's IR (the reader's, with a
`call void asm sideeffect "# llilc.callsite N"` before every call: DESIGN decision 8) is
compiled at --opt twice in LLVM's workers, as it is and with every call-site marker line
removed, and the code bytes (the sizes of the COFF code sections) are compared. A figure, not
a test: the markers cannot be switched off in the pipeline (the backend finds every call by
them), so this tells whether they keep LLVM from optimising -- an inline asm with side effects
is a barrier: two throw blocks that differ only in their marker cannot be merged, a call
cannot be moved across one -- and by how much. Both compilations run with the LLVM result
cache off.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llilc_eh.assembly.corpus import Corpus  # noqa: E402
from llilc_eh.assembly.loader import Assembly  # noqa: E402
from llilc_eh.backend.codegen import CodegenPool  # noqa: E402
from llilc_eh.backend.coff import CoffObject, SectionFlags  # noqa: E402
from llilc_eh.errors import LlilcEhError  # noqa: E402
from llilc_eh.il.method import analyze  # noqa: E402
from llilc_eh.pipeline import eh_methods  # noqa: E402
from llilc_eh.reader.jitee import JitEE  # noqa: E402
from llilc_eh.reader.sidetable import CALLSITE_MARKER  # noqa: E402
from llilc_eh.reader.translate import translate  # noqa: E402

_MARKER_LINE = re.compile(rf'^\s*call void asm sideeffect "# {re.escape(CALLSITE_MARKER)} \d+", ""\(\)\n', re.M)


def code_bytes(obj: bytes) -> int:
    return sum(len(s.data) for s in CoffObject.parse(obj).sections if s.characteristics & SectionFlags.CNT_CODE)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("assemblies", nargs="*")
    p.add_argument("--opt", type=int, default=2, choices=(0, 1, 2, 3))
    p.add_argument("--limit", type=int, help="at most N EH methods per assembly (table order)")
    p.add_argument("--jobs", type=int, default=1, help="LLVM worker processes")
    p.add_argument("--show", type=int, default=5, help="methods with the largest difference to show")
    args = p.parse_args(argv)
    paths = [Path(a) for a in args.assemblies] or [Corpus().framework_dir / "System.Private.CoreLib.dll"]
    modules, names = [], []
    for path in paths:
        asm = Assembly(path)
        ee = JitEE(asm)
        rids = eh_methods(asm)[:args.limit] if args.limit else eh_methods(asm)
        for rid in rids:
            try:
                il = analyze(asm.body(rid))
                if il.errors:
                    continue
                modules.append(translate(asm, il, ee).module)
                names.append(f"{path.name} {il.name}")
            except LlilcEhError:
                continue
    stripped = [_MARKER_LINE.sub("", m) for m in modules]
    markers = sum(len(_MARKER_LINE.findall(m)) for m in modules)
    with CodegenPool(args.jobs, cache=None) as pool:
        with_markers = pool.compile_many(modules, args.opt, methods=names)
        without = pool.compile_many(stripped, args.opt, methods=names)
    rows = []
    for name, a, b in zip(names, with_markers, without):
        if isinstance(a, Exception) or isinstance(b, Exception):
            continue
        rows.append((name, code_bytes(a.obj), code_bytes(b.obj), a.timings.worker, b.timings.worker))
    if not rows:
        print("nothing compiled", file=sys.stderr)
        return 2
    total_a = sum(r[1] for r in rows)
    total_b = sum(r[2] for r in rows)
    differ = [r for r in rows if r[1] != r[2]]
    print(f"{len(rows)} methods at O{args.opt}, {markers} call-site markers")
    print(f"code bytes with markers {total_a}, without {total_b}: {100 * (total_a - total_b) / total_b:+.2f}%; "
          f"{len(differ)} methods differ (larger with markers: {sum(r[1] > r[2] for r in rows)}, "
          f"smaller: {sum(r[1] < r[2] for r in rows)})")
    ratios = [r[1] / r[2] for r in rows if r[2]]
    print(f"per method with/without: median {statistics.median(ratios):.3f}, max {max(ratios):.3f}")
    print(f"LLVM worker seconds with markers {sum(r[3] for r in rows):.2f}, without {sum(r[4] for r in rows):.2f}")
    for name, a, b, _, _ in sorted(differ, key=lambda r: r[2] - r[1])[:args.show]:
        print(f"  {a:6d} vs {b:6d}  {name}")
    return 0


if __name__ == "__main__":
    import toolmain     # tools/ (the script's folder is on sys.path)
    toolmain.run(main)
