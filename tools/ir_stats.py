#!/usr/bin/env python3
"""IR instructions per IL instruction: how much LLVM IR the reader hands LLVM for each IL
instruction, per method and in aggregate, over the EH methods of real assemblies.

Usage: tools/ir_stats.py [ASSEMBLY ...] [--jsonl FILE] [--top N] [--by-opcode] [--digest]

Default: System.Private.CoreLib.dll of the corpus. Only the reader runs (IL, then IR): no
LLVM, no lint. A figure, not a test: a method the reader refuses is counted apart.

Why: LLVM's time grows with the IR it parses, verifies and optimises (issue 16 item 4: "less
IR for LLVM to chew"); a JIT need not emit what it already knows (a null check on a value
known non-null, a spill reloaded in the same block). This counts, in the reader's own text
(before LLVM sees it), the instructions of every function of the module (the parent and its
outlined filters): every non-blank line inside a function body that is not a label or a
comment. `--by-opcode` splits them by IR opcode (`call` by callee family) so a change shows
where it bit. `--digest` prints one sha256 over every method's IR text in token order: a
refactoring that must not change the IR keeps it (the reader split of issue 16 item 5).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llilc_eh.assembly.corpus import Corpus  # noqa: E402
from llilc_eh.assembly.loader import Assembly  # noqa: E402
from llilc_eh.errors import LlilcEhError  # noqa: E402
from llilc_eh.il.method import analyze  # noqa: E402
from llilc_eh.pipeline import eh_methods  # noqa: E402
from llilc_eh.reader.jitee import JitEE  # noqa: E402
from llilc_eh.reader.translate import translate  # noqa: E402

_OPCODE = re.compile(r"^(?:%[^=]+=\s*)?(?:tail\s+|musttail\s+|notail\s+)?([a-z_]+)")
_CALLEE = re.compile(r'@(?:"([^"]*)"|([\w.$]+))')


def instructions(module: str):
    """Every instruction line of every function body in `module` (LLVM IR text)."""
    inside = False
    for raw in module.splitlines():
        line = raw.strip()
        if raw.startswith("define "):
            inside = True
            continue
        if raw.startswith("}"):
            inside = False
            continue
        if not inside or not line or line.startswith(";") or (line.endswith(":") and " " not in line):
            continue
        if re.match(r"^[\w.$\"-]+:(\s*;.*)?$", line):
            continue          # a label
        yield line


def opcode(line: str) -> str:
    """`load`, `store`, `icmp`, ... ; calls and invokes by callee family (`call llvm.*`,
    `call helper` for CORINFO_HELP_*, `call method` otherwise)."""
    m = _OPCODE.match(line)
    op = m.group(1) if m else "?"
    if op == "call" and " asm " in line:
        return "call asm (call-site marker)"
    if op in ("call", "invoke"):
        c = _CALLEE.search(line.split("(", 1)[0] if "@" in line.split("(", 1)[0] else line)
        name = (c.group(1) or c.group(2)) if c else ""
        if name.startswith("llvm."):
            family = "llvm." + name.split(".")[1]
        elif name.startswith("CORINFO_HELP_"):
            family = "helper"
        else:
            family = "method"
        return f"{op} {family}"
    return op


def measure(path: Path):
    """(records, failures) for the EH methods of one assembly."""
    asm = Assembly(path)
    ee = JitEE(asm)
    records, failed = [], Counter()
    for rid in eh_methods(asm):
        try:
            il = analyze(asm.body(rid))
            if il.errors:
                raise il.errors[0]
            result = translate(asm, il, ee)
        except LlilcEhError as e:
            failed[f"{e.stage}:{e.kind}"] += 1
            continue
        ops = Counter(opcode(line) for line in instructions(result.module))
        n_ir = sum(ops.values())
        records.append({"file": path.name, "token": f"0x{il.body.token:08X}", "name": il.body.name,
                        "il": len(il.instructions), "ir": n_ir,
                        "ratio": round(n_ir / max(1, len(il.instructions)), 3),
                        "ops": dict(sorted(ops.items())),
                        "sha256": hashlib.sha256(result.module.encode()).hexdigest()})
    return records, failed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("assemblies", nargs="*")
    p.add_argument("--jsonl", help="one JSON line per method (token order)")
    p.add_argument("--top", type=int, default=5, help="methods with the highest ratio to show")
    p.add_argument("--by-opcode", action="store_true", help="IR instructions by opcode, aggregate")
    p.add_argument("--digest", action="store_true", help="sha256 over every method's IR text")
    args = p.parse_args(argv)
    paths = [Path(a) for a in args.assemblies] or [Corpus().framework_dir / "System.Private.CoreLib.dll"]
    all_records, all_failed = [], Counter()
    for path in paths:
        records, failed = measure(path)
        all_records += records
        all_failed += failed
    if not all_records:
        print("no method translated", file=sys.stderr)
        return 2
    il = sum(r["il"] for r in all_records)
    ir = sum(r["ir"] for r in all_records)
    ratios = [r["ratio"] for r in all_records]
    print(f"methods {len(all_records)} (reader refused {sum(all_failed.values())}"
          + (f": {dict(sorted(all_failed.items()))}" if all_failed else "") + ")")
    print(f"IL instructions {il}, IR instructions {ir}: {ir / il:.3f} IR per IL (aggregate); "
          f"per method median {statistics.median(ratios):.3f}, mean {statistics.fmean(ratios):.3f}")
    for r in sorted(all_records, key=lambda r: (-r["ratio"], r["token"]))[:args.top]:
        print(f"  {r['ratio']:7.3f}  {r['il']:5d} IL {r['ir']:6d} IR  {r['token']} {r['name']}")
    if args.by_opcode:
        total = Counter()
        for r in all_records:
            total.update(r["ops"])
        for op, n in total.most_common():
            print(f"  {op:24s} {n:8d}  {n / il:6.3f} per IL")
    if args.digest:
        h = hashlib.sha256()
        for r in all_records:
            h.update(f"{r['file']} {r['token']} {r['sha256']}\n".encode())
        print(f"IR digest {h.hexdigest()}")
    if args.jsonl:
        with open(args.jsonl, "w") as f:
            for r in all_records:
                f.write(json.dumps(r, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    import toolmain     # tools/ (the script's folder is on sys.path)
    toolmain.run(main)
