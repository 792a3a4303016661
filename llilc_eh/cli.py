"""`llilc-eh`: the command line of the pipeline.

    llilc-eh                                   the translate view of the embedded sample's
                                               default method (filter, finallys, nested tries)
    llilc-eh il ASSEMBLY --method NAME|0x06..  one method: IL listing, regions, clauses
    llilc-eh translate ASSEMBLY --method NAME  one method through the whole pipeline, every
                                               stage side by side: IL, IR, funclet model, final
                                               image with disassembly, clause table, unwind
                                               info, checks, timings (--stage il|ir|funclets|
                                               image|clauses|unwind for one of them, --json,
                                               --emit-dir D for every artifact as a file,
                                               --svg FILE for the layout picture)
    llilc-eh r2r ASSEMBLY --method NAME|0x06.. RyuJIT's native clauses (ReadyToRun) beside the IL's
    llilc-eh validate ASSEMBLY|FOLDER ...      every method with EH: region checks, and for
                                               ReadyToRun images RyuJIT's tables validated,
                                               compared with the IL, their unwind info decoded

Errors about the input print the reason with its location, never a Python traceback
(`--debug` shows one for a bug of ours). A method that fails in a later stage of `translate`
prints what the earlier stages produced, then the error (stage, kind, method, offset).
The exit status says how the run went (`EXIT_STATUS`, printed by `--help`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import signal
import sys
import time
import traceback
from importlib import resources
from pathlib import Path

from .clauses.validate import DEFAULT_PROFILE, Profile
from .errors import LlilcEhError

# The pipeline's modules are imported by `main` (`_import_commands`), after its interrupt
# handling is in place and only when a command runs: the parser and `--help` load no LLVM,
# capstone or metadata reader (and a Ctrl-C while they load is "interrupted", 130).
batch = Assembly = ReadyToRunImage = ERROR = clause_text = render = to_json = analyze = None


def _import_commands() -> None:
    """Bind the names above that are still unbound (a test may have replaced one)."""
    from . import batch
    from .assembly.loader import Assembly
    from .assembly.r2r.reader import ReadyToRunImage
    from .clauses.validate import ERROR
    from .il.listing import clause_text, render, to_json
    from .il.method import analyze
    for name, value in (("batch", batch), ("Assembly", Assembly), ("ReadyToRunImage", ReadyToRunImage),
                        ("ERROR", ERROR), ("clause_text", clause_text), ("render", render),
                        ("to_json", to_json), ("analyze", analyze)):
        if globals()[name] is None:
            globals()[name] = value

# The sample method `llilc-eh` and `llilc-eh translate` show by default: a filter, a filter
# handler holding a try/finally inside a try/catch and a second try/finally -- duplicate
# clauses, a filter placed before its handler, funclets nested in a funclet.
DEFAULT_METHOD = "Tests.TryInFilterHandler.Program::Run"
TRANSLATE_STAGES = ("il", "ir", "funclets", "image", "clauses", "unwind", "all")
_FRONT_STAGES = frozenset({"il", "ir", "funclets"})     # need no LLVM codegen

# The exit status: one policy for every command, documented in README.md and `--help`.
EXIT_CLEAN = 0          # ran, everything clean
EXIT_UNUSABLE = 1       # usage error, or input/output that cannot be used: nothing was judged
EXIT_FINDINGS = 2       # ran, found failures or findings (and: an internal error of ours)
EXIT_SIGNAL = 128       # + the signal's number: 130 Ctrl-C, 143 SIGTERM, 141 the output pipe closed
EXIT_STATUS = """\
exit status:
  0    ran, everything clean
  1    usage error, or unusable input or output: a path that does not exist or is not a
       regular file or folder, a file that is not a .NET assembly (il, translate, r2r), an
       unknown method or one without an IL body, r2r on an image without native code, an
       output path that cannot be written (checked before any work)
  2    ran and found failures or findings: validate -- any method failure, pipeline
       failure (--translate), unreadable file or error finding on RyuJIT's tables;
       translate -- a stage's error, a validator finding on our table (conventions too),
       an image finding or an unexplained LLVM difference; il -- an ECMA-335 violation;
       r2r -- an error finding on RyuJIT's table.  Also an internal error (a bug of ours:
       one line, --debug shows the traceback)
  130  interrupted (Ctrl-C; 143 SIGTERM): validate prints the summary of the files that
       finished
  141  the output pipe closed early (e.g. | head)"""


class UsageError(Exception):
    """A command line argparse refused; `main` prints it with the usage and exits 1."""

    def __init__(self, message: str, usage: str):
        super().__init__(message)
        self.usage = usage


class Interrupted(BaseException):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt so that a batch stops the same way."""

    signum = signal.SIGTERM


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the house's exit status: its own for a usage error is 2, which here means
    "ran and found failures"; ours is 1 (`UsageError`, raised to `main`)."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: error: {message}", self.format_usage())


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
    _add_reference_arg(p)


def _add_reference_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reference", metavar="DIR", action="append", default=[],
                   help="also look for referenced assemblies in DIR, a folder or a GAC (NAME/VERSION__TOKEN/"
                        "NAME.dll), after the assembly's own folder and before its framework (repeatable). "
                        "Only translation binds references: il and r2r show the metadata as written")


def _references(args) -> tuple[str, ...]:
    """The `--reference` folders, each checked to be one (a usage error otherwise)."""
    for folder in args.reference:
        if not Path(folder).is_dir():
            raise LlilcEhError(f"--reference {folder}: not a folder", kind="bad-input")
    return tuple(args.reference)


def _methods(asm: Assembly, args) -> list:
    """The method the user named (--method or --token, not both), or every method with EH."""
    if args.token and args.method:
        raise LlilcEhError(f"--method {args.method} and --token {args.token}: name the method one way")
    if args.index is not None and not (args.token or args.method):
        raise LlilcEhError("--index picks an overload of the --method named")
    query = args.token or args.method
    if query:                               # partial names, C#-like signatures, "did you mean"
        from .view.methods import find_method
        return [find_method(asm, query, index=args.index)]
    return [asm.method(rid) for rid in asm.methods_with_il() if asm.body(rid).has_eh]


def json_document(command: str, assembly: str | Path, methods: list) -> dict:
    """The one shape `--json` prints for every command, one method or many:
    {"command", "assembly" (the file's name), "methods": [one document per method]}."""
    return {"command": command, "assembly": Path(assembly).name, "methods": methods}


def cmd_il(args) -> int:
    _references(args)                       # checked, though a listing binds no reference
    path = args.assembly or sample_path()
    asm = Assembly(path)
    names = asm.names
    out, violations = [], False
    for ref in _methods(asm, args):
        m = analyze(asm.body(ref.rid))
        violations |= bool(m.errors)
        if args.json:
            out.append(to_json(m, names.token, names.type_name))
        else:
            print(render(m, names.token, names.type_name))
            print()
    if args.json:
        print(json.dumps(json_document("il", path, out), indent=1))
    return EXIT_FINDINGS if violations else EXIT_CLEAN


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

    if args.assembly is None:
        raise LlilcEhError("r2r needs an assembly, a ReadyToRun image: llilc-eh r2r ASSEMBLY [--method NAME]")
    _references(args)                       # checked, though RyuJIT's tables bind no reference
    asm = Assembly(args.assembly)
    image = ReadyToRunImage(asm)
    out = []
    refs = _methods(asm, args) if (args.method or args.token) else \
        [asm.method(m.tokens[0] & 0xFFFFFF) for m in image.methods(eh_only=True) if m.tokens]
    cache: dict = {}
    findings = False
    for ref in refs:
        bodies = image.methods_for_token(ref.token)
        if not bodies:
            raise LlilcEhError(f"{ref} has no precompiled code in this image", method=str(ref))
        for m in bodies:
            check = check_method(asm, image, m, unwind_cache=cache)
            findings |= any(f.severity == ERROR for f in check.findings)
            if args.json:
                out.append(_r2r_json(ref, check))
            else:
                print(f"// method {ref}")
                print(render_r2r(asm, check))
                print()
    if args.json:
        print(json.dumps(json_document("r2r", args.assembly, out), indent=1))
    return EXIT_FINDINGS if findings else EXIT_CLEAN


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
    """One method (or every method with EH of a named assembly) through `pipeline.Pipeline`,
    shown by `llilc_eh.view`."""
    from .pipeline import Pipeline
    from .reader.translate import Options
    from .view import build_view, render_text, report
    from .view.emit import check_output_file, dumps, emit, prepare_folder
    from .view.report import reader_json
    from .view.svg import layout_svg
    from .view.text import render_section

    if args.emit_dir:                       # output paths first: no work for a run that cannot write
        prepare_folder(args.emit_dir)
    if args.svg:
        check_output_file(args.svg, "--svg")
    if args.html:
        check_output_file(args.html, "--html")
    path = Path(args.assembly) if args.assembly else sample_path()
    asm = Assembly(path)
    if args.token or args.method or args.assembly:
        refs = _methods(asm, args)
    else:
        refs = [asm.find_method(DEFAULT_METHOD)]
    if not refs:
        raise LlilcEhError(f"{path.name} has no method with EH: name one with --method or --token")
    if (args.emit_dir or args.svg or args.html) and len(refs) != 1:
        raise LlilcEhError(f"--emit-dir, --svg and --html write the files of one method, {path.name} has {len(refs)} "
                           "with EH: name one with --method or --token")
    stage = args.stage
    r2r_image = _compare_r2r_image(asm, path) if args.compare_r2r else None
    from .target import target_named
    options = Options(clone_finally=args.clone_finally, pad_markers=args.pad_markers,
                      target=target_named(args.target))
    rids = [ref.rid for ref in refs]
    if stage in _FRONT_STAGES and not (args.emit_dir or args.svg or args.compare_r2r or args.html):
        pipeline = Pipeline(asm, None, opt=args.opt, profile=args.profile, options=options,
                            references=_references(args))
        runs = [pipeline.front(rid) for rid in rids]        # IL -> IR -> lint + verify -> model
    else:
        from .backend.cache import from_environment
        from .backend.codegen import CodegenPool
        with CodegenPool(1, cache=None if args.no_cache else from_environment()) as pool:
            runs = Pipeline(asm, pool, opt=args.opt, profile=args.profile, options=options,
                            references=_references(args)).run_many(rids)
    names = asm.names
    docs, status = [], EXIT_CLEAN
    for n, (ref, run) in enumerate(zip(refs, runs)):
        if run.il is None:                  # stopped before the body was read: name it as resolved
            run.name = f"0x{ref.token:08X} {ref.name}"
            if run.error is not None:
                run.error.for_method(run.name)
        view = build_view(run, names, path.name, clone_finally=args.clone_finally)
        if args.compare_r2r:                # ours beside RyuJIT instead of the stage view
            _print_compare_r2r(asm, r2r_image, ref, view, docs if args.json else None, n)
        elif args.json:
            if stage == "ir":     # the reader's result, as `--stage ir --json` has always printed
                docs.append(reader_json(view) if run.reader is not None else
                            {"method": view.title, "error": run.error.as_dict() if run.error else None})
            else:
                docs.append(report(view, timings=args.timings, sections=None if stage == "all" else {stage}))
        elif stage == "all":
            print(("\n" if n else "") + render_text(view, timings=not args.no_timings), end="")
        else:
            body = render_section(view, stage)
            if len(runs) > 1:               # several methods: say whose section this is
                print(("\n" if n else "") + f"// method {run.name}")
            if body is not None:
                print(body)
        if args.emit_dir:
            emit(view, args.emit_dir, timings=args.timings)
        if args.svg:
            Path(args.svg).write_text(layout_svg(view), encoding="utf-8", newline="\n")
        if args.html:                       # one self-contained page, RyuJIT's side when the image has it
            from .view.html import compare_material, method_page
            image = r2r_image if r2r_image is not None else _r2r_or_none(asm)
            Path(args.html).write_text(method_page(view, compare=compare_material(asm, image, run)), encoding="utf-8")
        status = max(status, _report_run(run))
    if args.json:
        print(dumps(json_document("translate", path, docs)), end="")
    return status


def _compare_r2r_image(asm: Assembly, path: Path):
    """`--compare-r2r` needs RyuJIT's code: an image without it is unusable input (exit 1)."""
    from .errors import AssemblyError
    try:
        return ReadyToRunImage(asm)
    except AssemblyError as e:
        raise LlilcEhError(f"--compare-r2r: {path.name} has no ReadyToRun code to compare with ({e})",
                           kind="bad-input") from None


def _r2r_or_none(asm: Assembly):
    from .errors import AssemblyError
    try:
        return ReadyToRunImage(asm)
    except AssemblyError:
        return None


def _print_compare_r2r(asm: Assembly, image, ref, view, docs: list | None, n: int) -> None:
    """One method's `--compare-r2r` view (text), or its JSON document with a `compare_r2r` part."""
    from .check.r2r import check_method
    from .view.compare import compare_json, our_side, r2r_body, render_compare, ryujit_disassembly, ryujit_side
    from .view.report import report

    body = r2r_body(image, ref.token, instantiation=True)
    why = None if body is not None else "no ReadyToRun body for this method (not precompiled)"
    check = check_method(asm, image, body) if body is not None else None
    ours, theirs = our_side(view.run), ryujit_side(check) if check is not None else None
    if docs is not None:
        docs.append({**report(view, sections={"clauses"}),
                     "compare_r2r": compare_json(ours, theirs, check, why_no_r2r=why)})
        return
    code = ryujit_disassembly(asm, body) if body is not None else ()
    print(("\n" if n else "") + render_compare(view, ours, theirs, check, code, why_no_r2r=why, names=asm.names),
          end="")


def _report_run(run) -> int:
    """One translated method's exit status, its reasons on stderr: 1 when its body could not
    be read (stage assembly: unusable input), 2 for any failure `validate --translate` would
    record (a stage's error, validator or image findings, unexplained LLVM differences)."""
    e = run.error
    if e is not None:
        print(f"llilc-eh: error: [{e.stage}/{e.kind}] {e.describe()}", file=sys.stderr)
        return EXIT_UNUSABLE if e.stage == "assembly" else EXIT_FINDINGS
    failures = batch.run_failures(run)
    for f in failures:
        at = f", {batch.offset_text(f)}" if f["offset"] is not None else ""
        print(f"llilc-eh: finding: [{f['stage']}/{f['kind']}] method {f['method']}{at}: {f['reason']}",
              file=sys.stderr)
    return EXIT_FINDINGS if failures else EXIT_CLEAN


def cmd_validate(args) -> int:
    from .view.emit import check_output_file

    files = batch.expand_inputs(args.inputs)
    if not files:
        raise LlilcEhError(f"no assemblies (*.dll, *.exe) in {' '.join(args.inputs)}", kind="bad-input")
    if args.json:
        check_output_file(args.json, "--json")
    if args.timings:
        check_output_file(args.timings, "--timings")
    if (args.per_method or args.per_method_seconds) and not args.translate:
        raise LlilcEhError("--per-method records the pipeline's results: it needs --translate", kind="bad-input")
    if args.per_method:
        check_output_file(args.per_method, "--per-method")
    if args.html and not args.translate:
        raise LlilcEhError("--html shows the pipeline's results: it needs --translate", kind="bad-input")
    if args.html:
        from .view.emit import prepare_folder
        prepare_folder(args.html, "--html")
    runner = batch.run
    if args.cluster:                                    # a Dask cluster instead of --jobs (llilc_eh.cluster)
        from . import cluster
        cluster.parse_address(args.cluster)             # an unusable address: exit 1 before any work
        runner = functools.partial(cluster.run, address=args.cluster, chunk=args.chunk, send=args.cluster_send)
    t0 = time.perf_counter()
    finished: dict[str, batch.FileReport] = {}
    from .backend import cache
    try:
        with cache.disabled() if args.no_cache else contextlib.nullcontext():
            reports = runner(files, jobs=args.jobs, progress=not args.quiet, translate=args.translate,
                             opt=args.opt, finished=finished, references=_references(args),
                             clone_finally=args.clone_finally, profile=args.profile,
                             records=bool(args.per_method or args.html), html_dir=args.html,
                             record_seconds=args.per_method_seconds or bool(args.html))
    except (KeyboardInterrupt, Interrupted):
        # What finished is still a result: its summary, no report files (they would pass for whole).
        done = [finished[f] for f in dict.fromkeys(files) if f in finished]
        print(batch.summary(done, time.perf_counter() - t0, interrupted=(len(done), len(set(files)))))
        if args.list_failures:
            _list_failures(done)
        sys.stdout.flush()
        raise
    wall = time.perf_counter() - t0
    if args.json:
        Path(args.json).write_text(batch.json_report(reports))
    if args.timings:
        Path(args.timings).write_text(batch.timings_report(reports))
    if args.per_method:
        from .view.records import dumps_records
        Path(args.per_method).write_text(dumps_records([x for r in reports for x in r.records],
                                                       seconds=args.per_method_seconds), encoding="utf-8")
    if args.html:
        from .view.html import write_index
        write_index(args.html, reports)
    print(batch.summary(reports, wall))
    if args.list_failures:
        _list_failures(reports)
    return EXIT_FINDINGS if any(batch.failure_records(r) for r in reports) else EXIT_CLEAN


def cmd_diff(args) -> int:
    """`llilc-eh diff A B`: what changed between two record files; the changes are the output,
    so a run that compared is clean (0) whatever it found, an unreadable file unusable (1)."""
    from .view.records import diff_records, load_records, versus_ryujit
    a = load_records(args.a)
    if args.b is None:                      # one file: ours beside RyuJIT in it
        print(versus_ryujit(a, name=Path(args.a).name), end="")
        return EXIT_CLEAN
    b = load_records(args.b)
    print(diff_records(a, b, name_a=Path(args.a).name, name_b=Path(args.b).name, limit=None if args.all else 50),
          end="")
    return EXIT_CLEAN


def _list_failures(reports: list[batch.FileReport]) -> None:
    """`--list-failures`: every record `batch.failure_records` counts, file errors included."""
    for r in reports:
        for f in batch.failure_records(r):
            where = ", ".join(x for x in (f["method"], batch.offset_text(f) if f["offset"] is not None else None)
                              if x)
            print(f"{Path(r.path).name}: [{f['stage']}:{f['kind']}] " + (f"{where}: " if where else "") + f["reason"])


def cmd_list(args) -> int:
    """`llilc-eh list ASSEMBLY`: every method with EH, one line each with its full signature and
    shape, narrowed by the shape filters."""
    from .view.methods import list_methods, shape_filter

    asm = Assembly(args.assembly)
    keep = shape_filter(args)
    shapes = [s for s in list_methods(asm) if keep(s)]
    if args.json:
        print(json.dumps(json_document("list", args.assembly, [s.as_dict() for s in shapes]), indent=1))
    else:
        for s in shapes:
            print(s.line())
    return EXIT_CLEAN


def _add_run_parser(sub) -> None:
    """`run` (llilc-eh as CoreCLR's alt JIT) keeps its parser and command in llilc_eh.runtime.driver."""
    from .runtime.driver import add_parser
    add_parser(sub)


def _add_cache_arg(p) -> None:
    p.add_argument("--no-cache", action="store_true",
                   help="run LLVM on every module: do not read or write the LLVM result cache "
                        "($LLILC_EH_LLVM_CACHE, default $LLILC_EH_CACHE/llvm; llilc_eh.backend.cache)")


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="llilc-eh", description=__doc__.splitlines()[0], epilog=EXIT_STATUS,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--debug", action="store_true", help="print the traceback of an internal error")
    sub = ap.add_subparsers(dest="command")
    p = sub.add_parser("il", help="IL listing with regions, raw clauses and the region tree")
    _add_method_args(p)
    p.set_defaults(func=cmd_il)
    p = sub.add_parser("translate", help="one method through the whole pipeline, every stage side by side",
                       description="One method through the whole pipeline: IL with its EH regions, the LLVM "
                       "module, the funclet model, the final image (layout and disassembly), the clause table, "
                       "the unwind info, the checks and the timings, cross-referenced. Without an assembly "
                       f"and a method: {DEFAULT_METHOD} of the embedded sample.")
    _add_method_args(p)
    p.add_argument("--stage", choices=TRANSLATE_STAGES, default="all",
                   help="print only this stage (ir: the verified module, as before); all: every section")
    p.add_argument("--opt", type=int, choices=(0, 1, 2, 3), default=2, help="LLVM optimisation level (default 2)")
    p.add_argument("--profile", choices=[p.value for p in Profile], default=DEFAULT_PROFILE.value,
                   help=f"runtime ABI profile of the clause table (default {DEFAULT_PROFILE.value})")
    p.add_argument("--clone-finally", action="store_true",
                   help="give every leave its own normal-path copy of each finally (default: continuation selectors)")
    p.add_argument("--target", choices=("win-x64", "linux-x64"), default="win-x64",
                   help="whose code: win-x64 (default) or linux-x64, the code `run` installs in CoreCLR on Linux "
                        "(SysV convention, funclet entry thunks, data cells, write barriers; llilc_eh.target)")
    p.add_argument("--pad-markers", action="store_true",
                   help="a zero-byte identity marker in every pad: exact funclet identity, but LLVM then keeps "
                        "empty cleanups (default: identity from the other evidence)")
    p.add_argument("--emit-dir", metavar="DIR", help="write every artifact of the method into DIR: method.ll, "
                   "method.obj, method.s, image.bin, rodata.bin, clauses.bin, pdata.bin, unwind.bin, unwind.json, "
                   "report.json, layout.svg")
    p.add_argument("--svg", metavar="FILE", help="write the picture of the final layout to FILE")
    p.add_argument("--no-timings", action="store_true", help="leave the timings out of the text view "
                   "(the rest is deterministic)")
    p.add_argument("--timings", action="store_true", help="put the timings into the JSON (report.json) too")
    _add_cache_arg(p)
    p.add_argument("--html", metavar="FILE", help="write one self-contained HTML page of the method to FILE: clause "
                   "table, layout picture, IL and disassembly cross-linked (select a clause: its tries, regions, pad and "
                   "funclet light up), RyuJIT's side for a ReadyToRun image")
    p.add_argument("--compare-r2r", action="store_true",
                   help="ours beside RyuJIT (the assembly's ReadyToRun code): counts, code size, funclets, each IL "
                        "clause's fate on both sides, both clause tables with each clause's role, both disassemblies")
    p.set_defaults(func=cmd_translate)
    p = sub.add_parser("list", help="the methods with EH of an assembly, one line each, filtered by shape")
    p.add_argument("assembly")
    p.add_argument("--filter", action="store_true", help="with a filter clause")
    p.add_argument("--fault", action="store_true", help="with a fault clause")
    p.add_argument("--finally", dest="finally_", action="store_true", help="with a finally clause")
    p.add_argument("--catch", action="store_true", help="with a typed catch clause")
    p.add_argument("--mutual-protect", action="store_true", help="with a try that has several handlers")
    p.add_argument("--try-in-handler", action="store_true", help="with a try inside a handler")
    p.add_argument("--min-depth", type=int, default=0, metavar="N", help="tries nested at least N deep")
    p.add_argument("--min-clauses", type=int, default=0, metavar="N", help="at least N EH clauses")
    p.add_argument("--name", metavar="SUBSTR", help="whose signature contains SUBSTR (any case)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("r2r", help="RyuJIT's native clauses, funclets and unwind info beside the IL's")
    _add_method_args(p)
    p.set_defaults(func=cmd_r2r)
    p = sub.add_parser("validate", help="region checks over every method with EH (and R2R tables)")
    p.add_argument("inputs", nargs="+", help="assemblies or folders")
    _add_reference_arg(p)
    p.add_argument("--jobs", "-j", type=int, default=1, help="worker processes")
    p.add_argument("--json", metavar="FILE", help="write the full report (deterministic) to FILE")
    p.add_argument("--list-failures", action="store_true", help="print every failure")
    p.add_argument("--translate", action="store_true",
                   help="also run the whole pipeline on every EH method: IR, lint, verify, LLVM code, final image, "
                        "clauses, unwind, validator, LLVM differential")
    p.add_argument("--opt", type=int, choices=(0, 1, 2, 3), default=2, help="LLVM optimisation level (--translate)")
    p.add_argument("--timings", metavar="FILE",
                   help="with --translate: write every method's pipeline time (TSV, slowest first; not deterministic, "
                        "so not in the JSON report)")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no progress (a bar on a terminal, else a line per finished file on stderr)")
    p.add_argument("--cluster", metavar="ADDRESS", help="run on a Dask distributed cluster instead of --jobs: "
                   "tcp://host:port of a running scheduler, or local[:N] for a local cluster of N worker processes "
                   "(default 2); the same report (docs/cluster.md)")
    p.add_argument("--chunk", type=int, default=64, metavar="N",
                   help="with --cluster: an assembly with more EH methods is split into tasks of N (default 64)")
    p.add_argument("--cluster-send", action="store_true",
                   help="with --cluster: send the assemblies' bytes to the workers (content-addressed, sha256-checked) "
                        "instead of having them open the same paths")
    p.add_argument("--per-method", metavar="FILE", help="with --translate: one JSON line per EH method (IL shape, our "
                   "clauses / duplicates / split tries / copies / code size / funclets, RyuJIT's where the image has "
                   "a body, differential, status, options), sorted by file and token, deterministic")
    p.add_argument("--html", metavar="DIR", help="with --translate: an HTML index of the run in DIR (per-assembly and "
                   "per-method status, ours vs RyuJIT, sortable, plots) and one page per method, self-contained")
    p.add_argument("--per-method-seconds", action="store_true",
                   help="put each method's pipeline seconds into the --per-method records (then not deterministic)")
    p.add_argument("--profile", choices=[p.value for p in Profile], default=DEFAULT_PROFILE.value,
                   help=f"runtime ABI profile of our clause tables (--translate; default {DEFAULT_PROFILE.value})")
    p.add_argument("--clone-finally", action="store_true",
                   help="--translate with a normal-path finally copy per leave (default: continuation selectors)")
    _add_cache_arg(p)
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser("diff", help="two --per-method record files compared, per method and in aggregate; "
                       "one file: ours beside RyuJIT in it")
    p.add_argument("a", metavar="A.jsonl")
    p.add_argument("b", metavar="B.jsonl", nargs="?", help="(none: our tables beside RyuJIT's in A)")
    p.add_argument("--all", action="store_true", help="every changed method (default: the first 50)")
    p.set_defaults(func=cmd_diff)
    _add_run_parser(sub)
    _everywhere(sub)
    return ap


def _everywhere(sub) -> None:
    """The options every subcommand takes after its name too, and the exit status in its help."""
    for p in sub.choices.values():
        with contextlib.suppress(argparse.ArgumentError):      # a subcommand that has its own
            p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                           help="print the traceback of an internal error")
        if not p.epilog:
            p.epilog = EXIT_STATUS
            p.formatter_class = argparse.RawDescriptionHelpFormatter


def main(argv: list[str] | None = None) -> int:
    """The one boundary between the pipeline and the shell: whatever happens becomes an exit
    status (`EXIT_STATUS`) and at most a line on stderr, never a traceback (unless --debug)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv               # before parsing too: building the parser may fail
    with _sigterm_as_interrupt():
        try:
            args = _parse(argv)
            debug = args.debug
            _import_commands()
            batch.tune_gc()
            return args.func(args)
        except UsageError as e:
            sys.stderr.write(f"{e.usage}{e}\n")
            return EXIT_UNUSABLE
        except SystemExit as e:             # --help
            return e.code if isinstance(e.code, int) else EXIT_UNUSABLE
        except LlilcEhError as e:
            print(f"llilc-eh: error: {e}", file=sys.stderr)
            return EXIT_UNUSABLE
        except KeyboardInterrupt:
            print("llilc-eh: interrupted", file=sys.stderr)
            return EXIT_SIGNAL + signal.SIGINT
        except Interrupted as e:
            print(f"llilc-eh: interrupted ({signal.Signals(e.signum).name})", file=sys.stderr)
            return EXIT_SIGNAL + e.signum
        except BrokenPipeError:
            _quiet_stdout()
            return EXIT_SIGNAL + signal.SIGPIPE
        except Exception as e:  # noqa: BLE001 - the boundary: a bug of ours is one line, not a traceback
            if debug:
                traceback.print_exc()
            print(f"llilc-eh: internal error: {type(e).__name__}: {e} (--debug shows the traceback)",
                  file=sys.stderr)
            return EXIT_FINDINGS


def _parse(argv: list[str]) -> argparse.Namespace:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.command is None:                # `llilc-eh [--debug]`: the translate view of the sample
        args = ap.parse_args([*argv, "translate"])
    return args


class _sigterm_as_interrupt:  # noqa: N801 - used as a context manager
    """SIGTERM raises `Interrupted` while a command runs (main thread only), so it stops a
    batch like Ctrl-C does: partial summary, workers ended, status 143."""

    def __enter__(self):
        self.previous = None
        try:
            self.previous = signal.signal(signal.SIGTERM, self._raise)
        except ValueError:                  # not the main thread: leave signals alone
            pass
        return self

    @staticmethod
    def _raise(signum, _frame):
        raise Interrupted()

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
        return False


def _quiet_stdout() -> None:
    """After EPIPE: point stdout at /dev/null so the interpreter's final flush stays silent."""
    import os
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
