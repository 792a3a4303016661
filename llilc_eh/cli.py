"""`llilc-eh`: the command line of the pipeline.

    llilc-eh                                   the embedded sample, every method with EH
    llilc-eh il ASSEMBLY --method NAME|0x06..  one method: IL listing, regions, clauses
    llilc-eh validate ASSEMBLY|FOLDER ...      every method with EH: region checks, summary

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
from .errors import LlilcEhError
from .il.listing import render, to_json
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


def cmd_validate(args) -> int:
    files = batch.expand_inputs(args.inputs)
    if not files:
        raise LlilcEhError(f"no assemblies in {' '.join(args.inputs)}")
    t0 = time.perf_counter()
    reports = batch.run(files, jobs=args.jobs, progress=not args.quiet)
    wall = time.perf_counter() - t0
    if args.json:
        Path(args.json).write_text(batch.json_report(reports))
    print(batch.summary(reports, wall))
    if args.list_failures:
        for r in reports:
            for f in r.failures:
                print(f"{Path(r.path).name}: [{f['stage']}:{f['kind']}] {f['method']}, "
                      + (f"IL_{f['offset']:04x}: " if f["offset"] is not None else "") + f["reason"])
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="llilc-eh", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command")
    p = sub.add_parser("il", help="IL listing with regions, raw clauses and the region tree")
    _add_method_args(p)
    p.set_defaults(func=cmd_il)
    p = sub.add_parser("validate", help="region checks over every method with EH")
    p.add_argument("inputs", nargs="+", help="assemblies or folders")
    p.add_argument("--jobs", "-j", type=int, default=1, help="worker processes")
    p.add_argument("--json", metavar="FILE", help="write the full report (deterministic) to FILE")
    p.add_argument("--list-failures", action="store_true", help="print every failure")
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
