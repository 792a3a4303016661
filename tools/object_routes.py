#!/usr/bin/env python3
"""The two ways a worker makes the object, compared over the EH methods of real assemblies.

Usage: tools/object_routes.py [ASSEMBLY|FOLDER ...] [--limit N] [--opt 0|2] [--jobs J] [--show K]

ASSEMBLY is a path or a corpus file name; a FOLDER means every assembly under it; default:
the whole corpus. Every EH method is read and translated (`Pipeline.front`), then compiled
twice by the same workers: `route="emit"` (the object from a direct codegen run, the text
from a second one on an identical copy) and `route="assemble"` (the text once, the object
assembled from it by LLVM's assembler) -- whatever the pool's policy would pick. Prints,
per assembly and in total, how many objects are byte-identical, how many differ and
whether the module uses `llvm.localescape` (the one case the policy sends to the direct
route, see `llilc_eh.backend.codegen`), examples of each, and the LLVM time of each route.
Exit status 0 when every difference is a localescape module, 1 otherwise. A measurement,
not a test: a method's failure is counted and the run goes on.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llilc_eh.assembly.corpus import Corpus, cache_root
from llilc_eh.assembly.loader import Assembly
from llilc_eh.backend.codegen import CodegenPool, CodegenResult, object_route
from llilc_eh.backend.coff import CoffObject
from llilc_eh.batch import expand_inputs
from llilc_eh.pipeline import Pipeline, eh_methods


def _paths(names: list[str]) -> list[Path]:
    """Folders expanded as `validate` does; a name that is no path is a corpus file name."""
    given = [n if Path(n).is_dir() else str(Corpus().locate(n)) for n in names]
    return [Path(f) for f in expand_inputs(given or [str(cache_root() / "corpus")])]


def _first_difference(a: bytes, b: bytes) -> str:
    """Where two objects first differ: a section's contents (and the offset), else elsewhere."""
    x, y = CoffObject.parse(a), CoffObject.parse(b)
    for s in x.sections:
        t = y.section(s.name) if y.has_section(s.name) else None
        if t is None or s.data != t.data:
            at = "" if t is None else next((i for i, (p, q) in enumerate(zip(s.data, t.data)) if p != q),
                                          min(len(s.data), len(t.data)))
            return f"{s.name} +0x{at:x}" if t is not None else f"{s.name} missing"
    return "headers, symbols or relocations"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("assemblies", nargs="*")
    ap.add_argument("--limit", type=int, help="at most N EH methods per assembly")
    ap.add_argument("--opt", type=int, choices=(0, 1, 2, 3), default=2)
    ap.add_argument("--jobs", type=int, default=2, help="LLVM worker processes")
    ap.add_argument("--show", type=int, default=3, help="examples per outcome")
    args = ap.parse_args()

    totals: Counter = Counter()
    seconds: Counter = Counter()
    examples: dict[str, list[str]] = defaultdict(list)
    rows = []
    with CodegenPool(args.jobs) as pool:
        for path in _paths(args.assemblies):
            asm = Assembly(path)
            pipeline = Pipeline(asm, None, opt=args.opt)
            fronts = [pipeline.front(rid) for rid in eh_methods(asm)[:args.limit]]
            fronts = [r for r in fronts if r.error is None]
            if not fronts:
                continue
            modules = [r.reader.module for r in fronts]
            names = [r.name for r in fronts]
            emitted = pool.compile_many(modules, args.opt, methods=names, route="emit")
            assembled = pool.compile_many(modules, args.opt, methods=names, route="assemble")
            counts: Counter = Counter()
            for name, ir, e, a in zip(names, modules, emitted, assembled):
                if not isinstance(e, CodegenResult) or not isinstance(a, CodegenResult):
                    counts["failed"] += 1
                    examples["failed"].append(f"{path.name} {name}: {e if not isinstance(e, CodegenResult) else a}")
                    continue
                seconds["emit: two codegen runs"] += e.timings.codegen + e.timings.asm
                seconds["assemble: codegen run + assembler"] += a.timings.codegen + a.timings.asm
                seconds["assembler alone"] += a.timings.codegen
                if e.asm != a.asm:
                    outcome = "text differs"
                elif e.obj == a.obj:
                    outcome = "identical"
                else:
                    # the one difference the pool's policy expects: it sends those modules to "emit"
                    expected = object_route(ir, "assemble") == "emit"
                    outcome = "object differs, localescape" if expected else "object differs, UNEXPLAINED"
                    if len(examples[outcome]) < args.show:
                        examples[outcome].append(f"{path.name} {name}: first difference in "
                                                 f"{_first_difference(e.obj, a.obj)}")
                counts[outcome] += 1
            totals.update(counts)
            rows.append((path.name, len(fronts), counts))

    width = max([len(n) for n, _, _ in rows] + [8])
    outcomes = ("identical", "object differs, localescape", "object differs, UNEXPLAINED",
                "text differs", "failed")
    print(f"object routes at O{args.opt}: direct emission vs the text assembled by LLVM's assembler")
    print(f"{'assembly':<{width}} {'methods':>8} " + " ".join(f"{o.split(',')[-1].strip()[:12]:>12}" for o in outcomes))
    for name, n, counts in rows:
        if set(counts) - {"identical"}:
            print(f"{name:<{width}} {n:>8} " + " ".join(f"{counts[o]:>12}" for o in outcomes))
    print(f"{'total':<{width}} {sum(n for _, n, _ in rows):>8} " + " ".join(f"{totals[o]:>12}" for o in outcomes))
    print(f"({len(rows)} assemblies with EH methods; only those with a difference are listed)")
    for outcome in outcomes:
        for line in examples.get(outcome, [])[:args.show]:
            print(f"  {outcome}: {line}")
    print("LLVM time (worker's own, summed):")
    for what, s in seconds.items():
        print(f"  {what:<36} {s:8.2f} s")
    bad = totals["object differs, UNEXPLAINED"] + totals["text differs"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
