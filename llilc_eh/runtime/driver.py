"""`llilc-eh run`: a program on the pinned CoreCLR 3.1.23 with llilc-eh as its alt JIT.

What the driver does, in order:
  1. builds the C alt JIT if its source changed (build.ensure_built) and copies it into the
     runtime folder of the cache (CoreCLR 3.1 looks COMPlus_AltJitName up there only);
  2. writes the program's runtimeconfig (check.toolchain.write_runtimeconfig) and our run
     config (service.RunConfig: selection, --opt, --clone-finally, the events file);
  3. runs `dotnet PROGRAM ARGS...` with stdin/stdout/stderr inherited -- the program's output
     and exit code pass through untouched -- and the environment:
       COMPlus_AltJit=*  COMPlus_AltJitName=<ours>   every method is offered to us first;
       COMPlus_gcConservative=1   our GC info reports no slots: the stacks are scanned
                                  conservatively (said in the summary);
       COMPlus_TieredCompilation=0   each method is compiled once, at full opt, and stays
                                  ours (with tiering a hot method would be re-jitted at tier 1
                                  and offered again);
       LLILC_EH_*                 where the embedded Python finds the venv and the config;
  4. reads the events the service appended (one JSON line per selected method) and prints the
     summary on stderr after the program ended; `--report FILE` gets it as JSON;
  5. unless --no-exception-count: holds the program at its start until an EventPipe session on
     the runtime's exception events is on, and counts the exceptions thrown and the handlers
     run, in our methods and in all, against the program's own first-chance count
     (runtime/events.py: the startup hook, the session, why out of process).

Exit status: the program's own, except 2 with --require-all when a selected method was
declined, 1 when the run could not start (no program, no runtime, no gcc), 130 on Ctrl-C.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import LlilcEhError
from .build import ALTJIT_NAME, BuildError, ensure_built, install_into_runtime
from .service import CONFIG_ENV, RunConfig

REPO_ROOT = Path(__file__).resolve().parents[2]


class RunError(LlilcEhError):
    """`run` could not start the program (missing program, runtime or compiler)."""

    stage = "run"


@dataclass
class RunOutcome:
    exit_code: int        # the program's (128+N for a signal)
    report: dict
    stdout: bytes | None = None   # when captured (stdout=subprocess.PIPE)
    stderr: bytes | None = None


def program_assembly_name(program: Path) -> str:
    """The program's assembly name from its metadata (the Assembly table), else the file stem."""
    from ..assembly.loader import Assembly
    try:
        pe = Assembly(program).pe
        table = pe.net.mdtables.Assembly
        if table is not None and table.rows:
            return str(table.rows[0].Name)
    except LlilcEhError as e:
        raise RunError(f"{program}: {e.reason}", kind="bad-program") from None
    return program.stem


def environment(config_path: Path, events: Path, selection_by_name: bool, all_eh: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    if all_eh:
        # the framework's precompiled (ReadyToRun) bodies are not used: the runtime JIT-compiles
        # CoreLib and the rest, and every one of their methods with EH is offered to us
        env["COMPlus_ReadyToRun"] = "0"
    env.update({
        "COMPlus_AltJit": "*",
        "COMPlus_AltJitName": ALTJIT_NAME,
        "COMPlus_gcConservative": "1",
        "COMPlus_TieredCompilation": "0",
        "DOTNET_CLI_TELEMETRY_OPTOUT": "1",
        "DOTNET_NOLOGO": "1",
        CONFIG_ENV: str(config_path),
        "LLILC_EH_EVENTS": str(events),     # for the C side's own startup failure
        "LLILC_EH_PYTHON": sys.executable,
        "LLILC_EH_REPO": str(REPO_ROOT),
        "LLILC_EH_ALL_METHODS": "1" if selection_by_name else "0",
    })
    return env


def read_events(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:      # a line cut short by a crash of the program
            continue
    return out


def build_report(events: list[dict], config: RunConfig, exit_code: int) -> dict:
    compiled = [{k: e.get(k) for k in ("method", "instantiation", "assembly", "token", "code_bytes", "clauses", "funclets", "jit_ms", "opt",
                                       "jitee", "return_kind", "psp_slot", "frame_register", "gc_info",
                                       "il_clauses", "synchronized", "stubs")}
                for e in events if e.get("event") == "compiled"]
    declined = [{"method": e.get("method"), "reason": e.get("reason"),
                 **({"instantiation": e["instantiation"]} if e.get("instantiation") else {}),
                 **({"traceback": e["traceback"]} if e.get("traceback") else {})}
                for e in events if e.get("event") == "declined"]
    # the alt JIT could not start Python: nothing was compiled by us, and that is a failure
    declined += [{"method": "*", "reason": f"the alt JIT did not start: {e.get('reason')}"}
                 for e in events if e.get("event") == "startup-failed"]
    jitee = [{"method": e.get("method"), **a} for e in events if e.get("event") == "jitee" for a in e["answers"]]
    report = {"program": config.program, "assembly": config.assembly, "exit_code": exit_code,
            "selection": config.methods or ["every method with EH" + ("" if config.all_eh else " of " + config.assembly)],
            "opt": config.opt, "clone_finally": config.clone_finally, "jitee_impl": config.jitee,
            "gc": "conservative", "tiered_compilation": False,
            "compiled": compiled, "declined": declined, "all_eh": config.all_eh}
    offered = [e["methods"] for e in events if e.get("event") == "offered"]
    # methods the runtime JIT-compiled (ReadyToRun code is not compiled, not counted): ours, and
    # RyuJIT's = the rest; unknown (None) when the program died before the runtime's exit
    report["jitted"] = offered[-1] if offered else None
    report["requested"] = len(compiled) + len(declined)     # selected methods the runtime asked for
    report["declined_by_reason"] = declined_by_reason(declined)
    report["jit_ms_total"] = round(sum(m.get("jit_ms") or 0 for m in compiled), 3)
    report["jitted_by_ryujit"] = offered[-1] - len(compiled) if offered else None
    if config.compare_jitee:
        report["jitee"] = jitee
    return report


_DETAILS = [(re.compile(r"0x[0-9A-Fa-f]+"), "0x…"), (re.compile(r"'[^']*'"), "'…'"),
            (re.compile(r"IL_[0-9A-Fa-f]{4}"), "IL_…"), (re.compile(r"\b\d+\b"), "N")]


def reason_class(reason: str) -> str:
    """A decline reason without what names one method (tokens, symbols, offsets, numbers): the
    key the summary aggregates by. A pipeline refusal is its `[stage/kind]`."""
    m = re.match(r"\[[^\]]+\]", reason)
    if m:
        return m.group(0)
    reason = re.sub(r"^calls .*?, a JIT intrinsic", "calls …, a JIT intrinsic", reason)
    reason = re.sub(r"^resolving \S+:", "resolving …:", reason)
    for pattern, repl in _DETAILS:
        reason = pattern.sub(repl, reason)
    return reason.split(":")[0] if reason.startswith("internal error") else reason


def declined_by_reason(declined: list[dict]) -> list[dict]:
    """[{"reason", "count", "methods"}] by reason class, most frequent first (then by name)."""
    groups: dict[str, list[str]] = {}
    for d in declined:
        groups.setdefault(reason_class(d["reason"] or ""), []).append(d["method"] or "?")
    return [{"reason": r, "count": len(ms), "methods": sorted(ms)}
            for r, ms in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def exception_lines(report: dict) -> list[str]:
    if "exceptions" not in report:
        return []
    from .events import summary_lines
    return summary_lines(report["exceptions"])


def summary(report: dict) -> str:
    c, d = report["compiled"], report["declined"]
    lines = [f"llilc-eh run: {len(c)} method(s) compiled by llilc-eh, {len(d)} declined (compiled by RyuJIT); "
             f"O{report['opt']}{', clone-finally' if report['clone_finally'] else ''}; "
             "GC conservative (COMPlus_gcConservative=1); tiered compilation off; "
             f"program exit code {report['exit_code']}"]
    if report.get("all_eh"):
        share = f" ({100 * len(c) / report['requested']:.1f}%)" if report["requested"] else ""
        lines.append(f"  --all-eh (ReadyToRun off): {report['requested']} method(s) with EH requested by the runtime, "
                     f"{len(c)} compiled by llilc-eh{share}, {len(d)} declined; llilc-eh JIT time "
                     f"{report['jit_ms_total'] / 1000:.1f} s")
        for g in report["declined_by_reason"]:
            lines.append(f"    {g['count']:5d}  declined: {g['reason']}")
    if report.get("jitted") is not None:
        lines.append(f"  the runtime JIT-compiled {report['jitted']} method(s): {len(c)} by llilc-eh, "
                     f"{report['jitted_by_ryujit']} by RyuJIT (ReadyToRun code not counted)")
    for m in ([] if report.get("all_eh") else c):
        monitor = " (synchronized: the JIT's monitor clause, none in its IL)" if m.get("synchronized") and \
            not m.get("il_clauses") else ""
        lines.append(f"  compiled  {m.get('instantiation') or m['method']}  {m['code_bytes']} bytes, {m['clauses']} clause(s)"
                     f"{monitor}, {m['funclets']} funclet(s), {m['jit_ms']:.1f} ms")
    for m in ([] if report.get("all_eh") else d):     # --all-eh: by reason above; each in --report
        lines.append(f"  declined  {m.get('instantiation') or m['method']}: {m['reason']}")
    lines.extend(exception_lines(report))
    if "jitee" in report:
        differ = [a for a in report["jitee"] if a["agree"] is False]
        unanswered = [a for a in report["jitee"] if a["agree"] is None]
        lines.append(f"  JIT-EE: {len(report['jitee'])} metadata answer(s) asked of the runtime, {len(differ)} differ"
                     + (f", {len(unanswered)} metadata could not answer" if unanswered else "")
                     + f" (reader's questions answered by the {report.get('jitee_impl', 'runtime')})")
        counts: dict[str, int] = {}
        for a in report["jitee"]:
            counts[a["question"]] = counts.get(a["question"], 0) + 1
        lines.append("    " + ", ".join(f"{q} {n}" for q, n in sorted(counts.items())))
        lines.extend(f"    differs  {a['method']}: {a['question']} {a['token']}: metadata {a['metadata']}, "
                     f"runtime {a['runtime']}" for a in differ)
        lines.extend(f"    metadata has no answer  {a['method']}: {a['question']} {a['token']}: runtime {a['runtime']}"
                     for a in unanswered)
    return "\n".join(lines)


def run(program: str | os.PathLike, args: list[str], *, methods: list[str] = (), opt: int = 2,
        clone_finally: bool = False, damage: str | None = None, compare_jitee: bool = False,
        jitee: str = "runtime", all_eh: bool = False, limit: int | None = None, only: list[str] = (),
        count_exceptions: bool = True, stdout=None, stderr=None,
        timeout: float | None = None) -> RunOutcome:
    """Run the program (stdout/stderr: inherited unless given, as for subprocess.Popen; a
    `timeout` -- for tests -- kills the program and raises subprocess.TimeoutExpired).
    `count_exceptions`: the report's `exceptions` (events.py)."""
    from ..assembly.corpus import Corpus
    from ..check.toolchain import write_runtimeconfig

    program = Path(program).resolve()
    if not program.is_file():
        raise RunError(f"{program}: no such program", kind="no-program")
    corpus = Corpus()
    dotnet = corpus.dotnet
    if not dotnet.is_file():
        raise RunError(f"the CoreCLR host {dotnet} is missing (run tools/bootstrap --corpus)", kind="no-runtime")
    try:
        install_into_runtime(corpus.framework_dir, ensure_built())
    except (BuildError, OSError) as e:
        raise RunError(f"cannot build or install the alt JIT: {e}", kind="altjit-build") from None
    write_runtimeconfig(program)
    with tempfile.TemporaryDirectory(prefix="llilc-eh-run-") as tmp:
        events = Path(tmp) / "events.jsonl"
        config = RunConfig(program=str(program), assembly=program_assembly_name(program),
                           search_dirs=[str(program.parent), str(corpus.framework_dir)],
                           events=str(events), methods=list(methods), opt=opt,
                           clone_finally=clone_finally, damage=damage, compare_jitee=compare_jitee, jitee=jitee,
                           all_eh=all_eh, limit=limit, only=list(only))
        config_path = Path(tmp) / "config.json"
        config.dump(config_path)
        env = environment(config_path, events, bool(methods), all_eh)
        watch = None
        if count_exceptions:
            from ..check.toolchain import ToolchainError
            from .events import ExceptionWatch
            try:
                watch = ExceptionWatch()
            except (ToolchainError, OSError) as e:
                raise RunError(f"cannot build the exception-counting startup hook: {e} "
                               "(--no-exception-count runs without it)", kind="hook-build") from None
            env = watch.environment(env)
        try:
            proc = subprocess.Popen([str(dotnet), str(program), *args], stdout=stdout, stderr=stderr, env=env,
                                    pass_fds=watch.child_fds if watch else ())
        except OSError as e:
            if watch:
                watch.abandon()
            raise RunError(f"cannot start {dotnet}: {e.strerror}", kind="no-runtime") from None
        if watch:
            watch.attach(proc.pid)
        try:
            out, err = proc.communicate(timeout=timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise
        code = 128 - code if code < 0 else code
        raw = read_events(events)
        report = build_report(raw, config, code)
        if watch:
            from .events import count
            report["exceptions"] = count(watch.finish(), [e for e in raw if e.get("event") == "compiled"])
        return RunOutcome(code, report, out, err)


def main(args) -> int:
    """The `run` subcommand (args from cli.py's parser)."""
    only = []
    if args.only:
        try:
            only = [ln.strip() for ln in Path(args.only).read_text().splitlines() if ln.strip()]
        except OSError as e:
            raise RunError(f"--only {args.only}: {e.strerror}", kind="bad-only") from None
    outcome = run(args.program, args.args, methods=args.methods or [], opt=args.opt,
                  clone_finally=args.clone_finally, compare_jitee=args.compare_jitee, jitee=args.jitee,
                  all_eh=args.all_eh, limit=args.limit, only=only,
                  count_exceptions=not args.no_exception_count)
    sys.stdout.flush()
    print(summary(outcome.report), file=sys.stderr)
    if args.report:
        Path(args.report).write_text(json.dumps(outcome.report, indent=1) + "\n")
    if args.require_all and outcome.report["declined"]:
        return 2
    return outcome.exit_code





def command(args) -> int:
    """The `run` subcommand: main(), with Ctrl-C as exit status 130."""
    try:
        return main(args)
    except KeyboardInterrupt:
        return 130


def add_parser(sub) -> None:
    """`llilc-eh run ...` on cli.py's subparsers."""
    import argparse
    p = sub.add_parser("run", help="run a program on CoreCLR 3.1 with llilc-eh as the JIT of its EH methods",
                       description="Run PROGRAM.exe on the pinned CoreCLR 3.1.23 with llilc-eh as its alt JIT: "
                       "every method with EH of the program's assembly (or those --methods names) is compiled by "
                       "llilc-eh, everything else by RyuJIT. The program's output and exit code pass through; "
                       "the summary follows on stderr. Options go before the program, the rest is the program's.")
    p.add_argument("--methods", action="append", metavar="GLOB",
                   help="compile the methods whose Ns.Type::Name matches GLOB, or whose exact generic "
                        "instantiation does ('Pair`1<int32>::*', 'Program::M<float64>'; repeatable; default: "
                        "every method with EH of the program's own assembly)")
    p.add_argument("--opt", type=int, choices=(0, 1, 2, 3), default=2, help="LLVM optimisation level (default 2)")
    p.add_argument("--clone-finally", action="store_true",
                   help="give every leave its own normal-path copy of each finally (default: continuation selectors)")
    p.add_argument("--all-eh", action="store_true",
                   help="ReadyToRun off (COMPlus_ReadyToRun=0): every method with EH the runtime JIT-compiles, "
                        "CoreLib and the framework included, is compiled by llilc-eh; the summary counts requested, "
                        "compiled and declined by reason")
    p.add_argument("--limit", type=int, metavar="N",
                   help="bisection: compile only the first N selected methods, decline the rest (named as such)")
    p.add_argument("--only", metavar="FILE",
                   help="bisection: compile only the selected methods named in FILE (one Ns.Type::Name a line)")
    p.add_argument("--report", metavar="FILE", help="write the summary as JSON to FILE")
    p.add_argument("--require-all", action="store_true",
                   help="exit 2 if any selected method was declined (else the program's exit code)")
    p.add_argument("--compare-jitee", action="store_true",
                   help="also ask the runtime the questions the metadata JIT-EE answered for each compiled method "
                        "(field offsets, value classes, class sizes) and report any difference")
    p.add_argument("--jitee", choices=("runtime", "metadata"), default="runtime",
                   help="who answers the reader's layout questions (field offsets, sizes, value classes, GC "
                        "layouts, SysV classification, method flags): the runtime through ICorJitInfo (default) "
                        "or metadata alone, as `translate` does")
    p.add_argument("--no-exception-count", action="store_true",
                   help="do not count exceptions and handlers (default: an EventPipe session on the runtime's "
                        "exception events, the program held at start until it is on; runtime/events.py)")
    p.add_argument("program", help="the program (.exe)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the program's arguments")
    p.set_defaults(func=command)
__all__ = ["RunError", "RunOutcome", "add_parser", "build_report", "command", "environment", "main", "run", "summary"]
