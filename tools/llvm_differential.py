#!/usr/bin/env python3
"""Our clause tables against LLVM's own CoreCLR tables over the EH methods of real assemblies.

Usage: tools/llvm_differential.py ASSEMBLY... [--limit N] [--opt 0|2] [--jobs J] [--show K]

ASSEMBLY is a path or a corpus file name (System.Private.CoreLib.dll, Python.Runtime.dll).
Per EH method, the whole pipeline (`llilc_eh.pipeline`): read the IL, translate, build the
funclet model, compile in LLVM's workers, recover the code, link the final image, generate
our table from it, validate it, then generate ours in LLVM's layout and compare with
LLVM's (`llilc_eh.clauses.differential`). Also: every model call found in the machine code
by its call-site marker (or why not), and our final-image tables validated for all three
profiles. Prints counts by classification, the quirks normalised, the differences by reason
with examples, failures by stage and kind, and timings. A tool, not a test: it never stops
at a method's failure."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.loader import Assembly
from llilc_eh.backend.codegen import CodegenPool
from llilc_eh.clauses import validate
from llilc_eh.clauses.generate import generate_clauses, match_call_sites
from llilc_eh.errors import LlilcEhError
from llilc_eh.funclets import FuncletKind
from llilc_eh.pipeline import Pipeline, eh_methods

PROFILES = ("coreclr-psp", "coreclr-net10", "nativeaot")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("assemblies", nargs="+")
    ap.add_argument("--limit", type=int, help="at most N EH methods per assembly")
    ap.add_argument("--opt", type=int, choices=(0, 2), default=2)
    ap.add_argument("--jobs", type=int, default=4, help="LLVM worker processes")
    ap.add_argument("--show", type=int, default=3, help="examples per difference reason")
    args = ap.parse_args()

    seconds: Counter = Counter()
    counts: Counter = Counter()
    classes: Counter = Counter()
    quirks: Counter = Counter()
    reasons: Counter = Counter()
    examples: dict[str, list[str]] = defaultdict(list)
    failures: Counter = Counter()
    failure_examples: dict[str, str] = {}
    calls: Counter = Counter()
    deleted: Counter = Counter()
    findings: Counter = Counter()

    def fail(stage_kind: str, where: str, e: BaseException) -> None:
        failures[stage_kind] += 1
        failure_examples.setdefault(stage_kind, f"{where}: {e}")

    with CodegenPool(args.jobs) as pool:
        for path in args.assemblies:
            t0 = time.perf_counter()
            asm = Assembly(Corpus().locate(path))
            pipeline = Pipeline(asm, pool, opt=args.opt)
            rids = eh_methods(asm)[:args.limit] if args.limit else eh_methods(asm)
            seconds["assembly load, find EH"] += time.perf_counter() - t0
            runs = pipeline.run_many(rids)
            for run in runs:
                counts["EH methods"] += 1
                for stage, t in run.seconds.items():
                    seconds[stage] += t
                if run.error is not None:
                    fail(f"{run.error.stage}/{run.error.kind}", run.name, run.error)
                    continue
                name = f"{Path(path).name} {run.name}"
                model = run.model
                try:
                    match = match_call_sites(model, run.recovered, run.image.funclet_code)
                except LlilcEhError as e:
                    fail(f"{e.stage}/{e.kind}", name, e)
                    continue
                calls["model calls"] += len(model.calls)
                calls["found once"] += sum(1 for offs in match.found.values() if len(offs) == 1)
                calls["duplicated by LLVM"] += len(match.duplicated)
                calls["merged machine calls"] += len(match.merged)
                calls["invokes demoted to calls"] += len(match.demoted)
                calls["deleted by LLVM"] += len(match.deleted)
                calls["problems"] += len(match.problems)
                for reason in match.deleted.values():
                    deleted[reason.split(":")[0]] += 1
                for p in match.problems:
                    fail("callsite/problem", name, Exception(p))
                for f in run.image_findings:
                    fail(f"image/{f.rule}", name, Exception(str(f)))
                d = run.differential
                has_filter = any(f.kind is FuncletKind.FILTER for f in model.funclets)
                classes[("with filters" if has_filter else "without filters", d.classification)] += 1
                quirks.update(d.quirks)
                for diff in d.differences:
                    reasons[(diff.reason, "explained" if diff.explained else "UNEXPLAINED")] += 1
                    if len(examples[diff.reason]) < args.show:
                        examples[diff.reason].append(f"{name}: {diff.detail}")
                t = time.perf_counter()
                for profile in PROFILES:
                    fs = validate(generate_clauses(model, run.placed, profile), profile)
                    findings[("final image", profile, "tables with findings" if fs else "clean")] += 1
                    for f in fs:
                        fail(f"validate/{f.rule}", f"{name} ({profile})", Exception(f.message))
                seconds["validate (3 profiles)"] += time.perf_counter() - t
                counts["compared"] += 1

    print(f"{counts['EH methods']} EH methods, {counts['compared']} compared at O{args.opt}")
    print("classification (methods):")
    for (group, cls), n in sorted(classes.items()):
        print(f"  {group:<16} {cls:<12} {n:6d}")
    print("LLVM quirks normalised (occurrences):")
    for k, n in quirks.most_common():
        print(f"  {k:<24} {n:6d}")
    print("differences by reason:")
    for (reason, tag), n in sorted(reasons.items()):
        print(f"  {reason:<20} {tag:<12} {n:6d}")
        for ex in examples[reason]:
            print(f"      e.g. {ex}")
    print("call sites (DESIGN decision 8):")
    for k in ("model calls", "found once", "duplicated by LLVM", "merged machine calls", "deleted by LLVM",
              "invokes demoted to calls", "problems"):
        print(f"  {k:<22} {calls[k]:6d}")
    for k, n in deleted.most_common():
        print(f"    deleted: {k:<16} {n:6d}")
    print("validator over our tables:")
    for k, n in sorted(findings.items()):
        print(f"  {k[0]:<12} {k[1]:<14} {k[2]:<22} {n:6d}")
    print("failures by stage/kind:" if failures else "failures: none")
    for k, n in failures.most_common():
        print(f"  {k:<40} {n:6d}   e.g. {failure_examples[k][:160]}")
    print("seconds:")
    for k, v in seconds.items():
        print(f"  {k:<30} {v:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
