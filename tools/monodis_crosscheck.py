#!/usr/bin/env python3
"""Cross-check our assembly + il stages against monodis on every EH method of assemblies.

Usage: tools/monodis_crosscheck.py ASSEMBLY... [--every N] [--limit N] [--json FILE] [--show N]

ASSEMBLY is a path or the file name of a corpus assembly (System.Private.CoreLib.dll,
Python.Runtime.dll, ...). For each one, monodis lists the assembly once and every method
with EH is compared: instruction offsets and mnemonics, clause list (kind, ranges, filter
start, catch class), name and code size. The normalisations applied are listed in
llilc_eh/check/monodis.py. Exit status 1 if any method disagrees (or an assembly cannot be
checked at all), 2 if none disagrees but monodis could not list some methods (it dies on
assemblies whose referenced types Mono's class library lacks).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llilc_eh.assembly.corpus import Corpus  # noqa: E402
from llilc_eh.check.monodis import crosscheck  # noqa: E402
from llilc_eh.check.toolchain import ToolchainError  # noqa: E402
from llilc_eh.errors import LlilcEhError  # noqa: E402


def resolve(name: str) -> Path:
    path = Path(name)
    if path.exists():
        return path
    return Corpus().find(name).location


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("assemblies", nargs="+", metavar="ASSEMBLY", help="a path or a corpus file name")
    ap.add_argument("--every", type=int, default=1, metavar="N",
                    help="compare every N-th EH method only (table order; default: all)")
    ap.add_argument("--limit", type=int, default=None, metavar="N",
                    help="compare at most N EH methods per assembly")
    ap.add_argument("--json", metavar="FILE", help="write the reports (with every mismatch) as JSON")
    ap.add_argument("--show", type=int, default=10, metavar="N",
                    help="mismatches printed in detail per assembly (default 10)")
    args = ap.parse_args()

    start = time.perf_counter()
    reports, failed = [], False
    for name in args.assemblies:
        try:
            report = crosscheck(resolve(name), every=args.every, limit=args.limit)
        except (LlilcEhError, ToolchainError, KeyError, OSError) as e:
            print(f"{name}: cannot cross-check: {e}")
            failed = True
            continue
        reports.append(report)
        print(report.summary())
        for note in report.monodis_notes:
            print(f"  monodis: {note}")
        for m in report.mismatches[:args.show]:
            print(f"  {m}")
        if len(report.mismatches) > args.show:
            print(f"  ... and {len(report.mismatches) - args.show} more")
        for m in report.not_compared[:3]:
            print(f"  not compared: {m}")
        if len(report.not_compared) > 3:
            print(f"  ... and {len(report.not_compared) - 3} more not compared")
    if len(reports) > 1:
        not_compared = sum(len(r.not_compared) for r in reports)
        mismatches = sum(len(r.mismatches) for r in reports)
        print(f"total: {sum(r.methods for r in reports)} EH methods, "
              f"{sum(r.instructions for r in reports)} instructions, {sum(r.clauses for r in reports)} "
              f"clauses compared" + (f", {not_compared} not listed by monodis" if not_compared else "")
              + f"; {mismatches} mismatch(es); {time.perf_counter() - start:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps([r.as_dict() for r in reports], indent=2) + "\n")
    if failed or any(not r.ok for r in reports):
        return 1
    return 2 if any(not r.complete for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
