#!/usr/bin/env python3
"""Time each pipeline stage over the EH methods of real assemblies; print the figures.

Usage: tools/bench.py [ASSEMBLY ...] [--limit N]
Default: System.Private.CoreLib.dll and Python.Runtime.dll from the corpus. One process, one
core: the figures are per-stage seconds and methods per second, Python and LLVM apart
(parse + verify is LLVM's share of the reader stage so far). A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import llvmlite.binding as llvm  # noqa: E402

from llilc_eh.assembly.corpus import Corpus  # noqa: E402
from llilc_eh.assembly.loader import Assembly  # noqa: E402
from llilc_eh.il.method import analyze  # noqa: E402
from llilc_eh.reader.jitee import JitEE  # noqa: E402
from llilc_eh.reader.lint import lint  # noqa: E402
from llilc_eh.reader.translate import translate  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("assemblies", nargs="*")
    ap.add_argument("--limit", type=int, help="at most N EH methods per assembly")
    args = ap.parse_args()
    corpus = Corpus()
    paths = args.assemblies or [str(corpus.find(n).location) for n in ("System.Private.CoreLib.dll",
                                                                        "Python.Runtime.dll")]
    stages = ["body", "il", "reader", "lint (LLVM print + Python)", "llvm parse+verify"]
    seconds: dict[str, float] = defaultdict(float)
    methods = failures = bodies = 0
    for path in paths:
        asm = Assembly(path)
        ee = JitEE(asm)
        count = 0
        for rid in asm.methods_with_il():
            t0 = time.perf_counter()
            body = asm.body(rid)
            t1 = time.perf_counter()
            seconds["body"] += t1 - t0
            bodies += 1
            if not body.has_eh:
                continue
            if args.limit and count >= args.limit:
                break
            count += 1
            m = analyze(body)
            t2 = time.perf_counter()
            seconds["il"] += t2 - t1
            try:
                text = translate(asm, m, ee).module
                t3 = time.perf_counter()
                seconds["reader"] += t3 - t2
                mod = llvm.parse_assembly(text)
                mod.verify()
                t4 = time.perf_counter()
                seconds["llvm parse+verify"] += t4 - t3
                lint(text)
                seconds["lint (LLVM print + Python)"] += time.perf_counter() - t4
            except Exception:  # noqa: BLE001 - counted, the benchmark goes on
                failures += 1
            methods += 1
    total = sum(seconds.values())
    print(f"{methods} EH methods from {len(paths)} assemblies ({failures} failed)")
    print(f"  (body: all {bodies} IL bodies are parsed to find the EH ones; the rates are per EH method)")
    for s in stages:
        print(f"  {s:<28} {seconds[s]:8.2f} s  {methods / seconds[s] if seconds[s] else 0:10.0f} methods/s")
    print(f"  {'end to end':<28} {total:8.2f} s  {methods / total:10.0f} methods/s")
    llvm_share = seconds["llvm parse+verify"] / total if total else 0
    print(f"  share in LLVM (parse+verify): {100 * llvm_share:.0f}%; in Python: {100 * (1 - llvm_share):.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
