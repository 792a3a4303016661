#!/usr/bin/env python3
"""Our clause tables against LLVM's own CoreCLR tables over the EH methods of real assemblies.

Usage: tools/llvm_differential.py ASSEMBLY... [--limit N] [--opt 0|2] [--jobs J] [--show K]

ASSEMBLY is a path or a corpus file name (System.Private.CoreLib.dll, Python.Runtime.dll).
Per EH method: read the IL, translate, build the funclet model, compile in LLVM's workers,
recover the code, decode LLVM's table, generate ours in LLVM's layout and compare
(`llilc_eh.clauses.differential`). Also: every model call found in the machine code by its
call-site marker (or why not), and our tables validated for the three profiles -- in
LLVM's layout for methods without filters, in CLR order (`placed_in_clr_order`) for all.
Prints counts by classification, the quirks normalised, the differences by reason with
examples, failures by stage and kind, and timings. A tool, not a test: it never stops at
a method's failure.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llilc_eh.assembly.corpus import Corpus  # noqa: E402
from llilc_eh.assembly.loader import Assembly  # noqa: E402
from llilc_eh.backend.codegen import CodegenPool, object_symbol  # noqa: E402
from llilc_eh.backend.llvm_table import decode_llvm_clr_table  # noqa: E402
from llilc_eh.backend.recover import recover  # noqa: E402
from llilc_eh.clauses import validate  # noqa: E402
from llilc_eh.clauses.differential import compare_with_llvm, quiet_calls  # noqa: E402
from llilc_eh.clauses.generate import (  # noqa: E402
    generate_clauses,
    match_call_sites,
    match_funclets,
    placed_from_recovered,
    placed_in_clr_order,
)
from llilc_eh.errors import LlilcEhError  # noqa: E402
from llilc_eh.funclets import FuncletKind, build_funclet_model  # noqa: E402
from llilc_eh.il.method import analyze  # noqa: E402
from llilc_eh.reader.jitee import JitEE  # noqa: E402
from llilc_eh.reader.translate import translate  # noqa: E402

PROFILES = ("coreclr-psp", "coreclr-net10", "nativeaot")


def _path(name: str) -> str:
    p = Path(name)
    return str(p) if p.exists() else str(Corpus().find(name).location)


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
            asm = Assembly(_path(path))
            ee = JitEE(asm)
            seconds["assembly load"] += time.perf_counter() - t0
            work = []
            for rid in asm.methods_with_il():
                if args.limit and len(work) >= args.limit:
                    break
                try:
                    t = time.perf_counter()
                    body = asm.body(rid)
                    seconds["method bodies (all, to find EH)"] += time.perf_counter() - t
                    if not body.has_eh:
                        continue
                    name = f"{Path(path).name} {body.name}"
                    t = time.perf_counter()
                    m = analyze(body)
                    seconds["il"] += time.perf_counter() - t
                    t = time.perf_counter()
                    reader = translate(asm, m, ee)
                    t2 = time.perf_counter()
                    model = build_funclet_model(reader.module, reader.parent, m)
                    seconds["reader"] += t2 - t
                    seconds["funclet model"] += time.perf_counter() - t2
                    work.append((name, reader, model))
                except LlilcEhError as e:
                    fail(f"{e.stage}/{e.kind}", str(rid), e)
                counts["EH methods"] += 1
            t = time.perf_counter()
            results = pool.compile_many([r.module for _, r, _ in work], args.opt, methods=[n for n, _, _ in work])
            seconds["LLVM codegen (wall, parallel)"] += time.perf_counter() - t
            for (name, reader, model), result in zip(work, results):
                if isinstance(result, LlilcEhError):
                    fail(f"{result.stage}/{result.kind}", name, result)
                    continue
                try:
                    t = time.perf_counter()
                    code = recover(result.obj, result.asm)
                    table = decode_llvm_clr_table(result.obj, object_symbol(reader.parent))
                    t2 = time.perf_counter()
                    seconds["recover + LLVM table"] += t2 - t
                    match = match_call_sites(model, code, match_funclets(model, code, table))
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
                    placed = placed_from_recovered(model, code, table)
                    ours = generate_clauses(model, placed)
                    t3 = time.perf_counter()
                    seconds["generate"] += t3 - t2
                    d = compare_with_llvm(ours, table.clauses if table else (),
                                          [c.return_address for c in placed.calls],
                                          quiet_calls(code, object_symbol(model.parent)))
                    t4 = time.perf_counter()
                    seconds["differential"] += t4 - t3
                    has_filter = any(f.kind is FuncletKind.FILTER for f in model.funclets)
                    classes[("with filters" if has_filter else "without filters", d.classification)] += 1
                    quirks.update(d.quirks)
                    for diff in d.differences:
                        reasons[(diff.reason, "explained" if diff.explained else "UNEXPLAINED")] += 1
                        if len(examples[diff.reason]) < args.show:
                            examples[diff.reason].append(f"{name}: {diff.detail}")
                    clr = placed_in_clr_order(model, code, table)
                    for profile in PROFILES:
                        layouts = [("clr order", clr)] + ([] if has_filter else [("LLVM layout", placed)])
                        for layout, where in layouts:
                            fs = validate(generate_clauses(model, where, profile), profile)
                            findings[(layout, profile, "tables with findings" if fs else "clean")] += 1
                            for f in fs:
                                fail(f"validate/{f.rule}", f"{name} ({layout}, {profile})", Exception(f.message))
                    seconds["validate (6 tables)"] += time.perf_counter() - t4
                    counts["compared"] += 1
                except LlilcEhError as e:
                    fail(f"{e.stage}/{e.kind}", name, e)

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
