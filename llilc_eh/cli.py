"""`llilc-eh`: the command line of the pipeline.

    llilc-eh                                   the embedded sample, every method with EH
    llilc-eh il ASSEMBLY --method NAME|0x06..  one method: IL listing, regions, clauses
    llilc-eh translate ASSEMBLY --method NAME --stage ir   the LLVM module (parent + outlined filters)
    llilc-eh r2r ASSEMBLY --method NAME|0x06.. RyuJIT's native clauses (ReadyToRun) beside the IL's
    llilc-eh validate ASSEMBLY|FOLDER ...      every method with EH: region checks, and for
                                               ReadyToRun images RyuJIT's tables validated,
                                               compared with the IL, their unwind info decoded

Errors about the input exit with status 1 and print the reason with its location; they
never print a Python traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from importlib import resources
from pathlib import Path

from . import batch
from .assembly.loader import Assembly
from .assembly.r2r.reader import ReadyToRunImage
from .errors import LlilcEhError
from .il.listing import clause_text, render, to_json
from .il.method import analyze


def sample_path() -> Path:
    """The embedded sample: our tests/il programs assembled into one DLL, shipped in the package."""
    return Path(str(resources.files("llilc_eh") / "data" / "sample.dll"))


def _add_method_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("assembly", nargs="?", help="the assembly (default: the embedded sample)")
    p.add_argument("--method", "-m", help="Ns.Type::Name, Ns.Outer/Inner::Name, Name(int32,string) "
                   "for an overload, or a token 0x06xxxxxx")
    p.add_argument("--token", help="the method's MethodDef token, 0x06xxxxxx")
    p.add_argument("--index", type=int, help="which overload, counting from 0 in table order")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _methods(asm: Assembly, args) -> list:
    query = args.token or args.method
    if query:
        return [asm.find_method(query, index=args.index)]
    return [asm.method(rid) for rid in asm.methods_with_il() if asm.body(rid).has_eh]


def cmd_il(args) -> int:
    asm = Assembly(args.assembly or sample_path())
    names = asm.names
    out = []
    for ref in _methods(asm, args):
        m = analyze(asm.body(ref.rid))
        if args.json:
            out.append(to_json(m, names.token, names.type_name))
        else:
            print(render(m, names.token, names.type_name))
            print()
    if args.json:
        print(json.dumps(out if len(out) != 1 else out[0], indent=1))
    return 0


def _side_by_side(left: list[str], right: list[str], width: int = 78) -> list[str]:
    rows = max(len(left), len(right))
    left = left + [""] * (rows - len(left))
    right = right + [""] * (rows - len(right))
    return [f"{a:<{width}} | {b}".rstrip() for a, b in zip(left, right)]


def render_r2r(asm: Assembly, check) -> str:
    """IL clauses beside RyuJIT's native clauses, the code ranges, the verdicts, the unwind info."""
    m = check.method
    names = asm.names
    lines = [str(m).splitlines()[0]]
    ranges = [("main", m.main)] + [(f"funclet {i + 1}", f) for i, f in enumerate(m.funclets)]
    for (what, rf), info in zip(ranges, check.unwind):
        lines.append(f"  {what:<10} [0x{rf.begin_rva - m.rva:04x}, 0x{rf.end_rva - m.rva:04x})  "
                     f"RVA 0x{rf.begin_rva:08X}  unwind 0x{rf.unwind_rva:08X}")
    il = [clause_text(c, names.type_name) for c in (check.il_clauses or ())]
    roles = check.comparison.native_roles if check.comparison else ("",) * len(m.native.clauses)
    native = []
    for i, (c, role) in enumerate(zip(m.native.clauses, roles)):
        name = f" {names.type_name(c.class_token)}" if c.class_token else ""
        native.append(f"{i}  {c}{name}  <- {role}" if role else f"{i}  {c}{name}")
    lines.append("")
    lines.extend(_side_by_side(["IL clauses" if check.il_clauses is not None else "IL clauses: none (stub)"]
                               + il, ["native clauses (RyuJIT, offsets from the method start)"] + native))
    if check.comparison:
        fates = ", ".join(f"#{i} {f}" for i, f in enumerate(check.comparison.il_fates))
        lines.append(f"\ncomparison: {check.comparison.classification()}  ({fates})")
        lines.extend(f"  {p}" for p in check.comparison.problems)
    lines.append(f"validator: {len(check.findings)} finding(s)")
    lines.extend(f"  {f}" for f in check.findings)
    for (what, rf), info in zip(ranges, check.unwind):
        lines.append(f"\nunwind info of {what} (RVA 0x{rf.unwind_rva:08X}):")
        lines.extend("  " + line for line in str(info).splitlines())
    return "\n".join(lines)


def cmd_r2r(args) -> int:
    from .check.r2r import check_method

    asm = Assembly(args.assembly)
    image = ReadyToRunImage(asm)
    out = []
    refs = _methods(asm, args) if (args.method or args.token) else \
        [asm.method(m.tokens[0] & 0xFFFFFF) for m in image.methods(eh_only=True) if m.tokens]
    cache: dict = {}
    for ref in refs:
        bodies = image.methods_for_token(ref.token)
        if not bodies:
            raise LlilcEhError(f"{ref} has no precompiled code in this image", method=str(ref))
        for m in bodies:
            check = check_method(asm, image, m, unwind_cache=cache)
            if args.json:
                out.append(_r2r_json(ref, check))
            else:
                print(f"// method {ref}")
                print(render_r2r(asm, check))
                print()
    if args.json:
        print(json.dumps(out if len(out) != 1 else out[0], indent=1))
    return 0


def _r2r_json(ref, check) -> dict:
    m = check.method
    return {
        "method": str(ref), "tokens": [f"0x{t:08X}" for t in m.tokens], "rva": m.rva,
        "instantiation": m.is_instantiation, "stub": m.is_stub,
        "ranges": [{"start": rf.begin_rva - m.rva, "end": rf.end_rva - m.rva, "unwind_rva": rf.unwind_rva}
                   for rf in m.runtime_functions],
        "il_clauses": [{"index": c.index, "kind": c.kind.word, "try": [c.try_start, c.try_end],
                        "handler": [c.handler_start, c.handler_end], "class_token": c.class_token,
                        "filter": c.filter_start} for c in (check.il_clauses or ())],
        "native_clauses": [{"flags": int(c.flags), "kind": c.kind, "try": [c.try_start, c.try_end],
                            "handler": [c.handler_start, c.handler_end],
                            "class_token_or_filter": c.class_token_or_filter}
                           for c in m.native.clauses],
        "comparison": None if check.comparison is None else {
            "classification": check.comparison.classification(),
            "il_fates": list(check.comparison.il_fates),
            "native_roles": list(check.comparison.native_roles),
            "problems": list(check.comparison.problems)},
        "findings": [{"rule": f.rule, "clauses": list(f.clauses), "message": f.message} for f in check.findings],
        "unwind": [str(u) for u in check.unwind],
    }


def cmd_translate(args) -> int:
    from .reader.jitee import JitEE
    from .reader.lint import check_module
    from .reader.translate import Options, translate

    asm = Assembly(args.assembly or sample_path())
    ee = JitEE(asm)
    options = Options(clone_finally=args.clone_finally)
    out = []
    for ref in _methods(asm, args):
        m = analyze(asm.body(ref.rid)).raise_first()
        result = translate(asm, m, ee, options)
        check_module(result.module, method=m.name)   # funclet lint, then LLVM's verifier
        if args.json:
            out.append({"method": str(ref), "module": result.module, "parent": result.parent,
                        "filters": list(result.filters), "catchswitches": result.catchswitches,
                        "catchpads": result.catchpads, "cleanuppads": result.cleanuppads,
                        "selector_cases": result.selector_cases, "helper_calls": result.helper_calls})
        else:
            print(result.module)
    if args.json:
        print(json.dumps(out if len(out) != 1 else out[0], indent=1))
    return 0


def cmd_validate(args) -> int:
    files = batch.expand_inputs(args.inputs)
    if not files:
        raise LlilcEhError(f"no assemblies in {' '.join(args.inputs)}")
    t0 = time.perf_counter()
    reports = batch.run(files, jobs=args.jobs, progress=not args.quiet, translate=args.translate)
    wall = time.perf_counter() - t0
    if args.json:
        Path(args.json).write_text(batch.json_report(reports))
    print(batch.summary(reports, wall))
    if args.list_failures:
        for r in reports:
            for f in r.failures + r.reader_failures:
                print(f"{Path(r.path).name}: [{f['stage']}:{f['kind']}] {f['method']}, "
                      + (f"IL_{f['offset']:04x}: " if f["offset"] is not None else "") + f["reason"])
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="llilc-eh", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command")
    p = sub.add_parser("il", help="IL listing with regions, raw clauses and the region tree")
    _add_method_args(p)
    p.set_defaults(func=cmd_il)
    p = sub.add_parser("translate", help="translate a method: LLVM IR in LLVM's Windows EH model")
    _add_method_args(p)
    p.add_argument("--stage", choices=["ir"], default="ir", help="how far to go (ir: the verified module)")
    p.add_argument("--clone-finally", action="store_true",
                   help="give every leave its own normal-path copy of each finally (default: continuation selectors)")
    p.set_defaults(func=cmd_translate)
    p = sub.add_parser("r2r", help="RyuJIT's native clauses, funclets and unwind info beside the IL's")
    _add_method_args(p)
    p.set_defaults(func=cmd_r2r)
    p = sub.add_parser("validate", help="region checks over every method with EH (and R2R tables)")
    p.add_argument("inputs", nargs="+", help="assemblies or folders")
    p.add_argument("--jobs", "-j", type=int, default=1, help="worker processes")
    p.add_argument("--json", metavar="FILE", help="write the full report (deterministic) to FILE")
    p.add_argument("--list-failures", action="store_true", help="print every failure")
    p.add_argument("--translate", action="store_true", help="also run the reader: IR, funclet lint, LLVM verify")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_validate)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = build_parser()
    args = ap.parse_args(argv or ["il"])
    if not getattr(args, "func", None):
        ap.print_help()
        return 2
    try:
        return args.func(args)
    except LlilcEhError as e:
        print(f"llilc-eh: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
