"""Batch driver: run the pipeline over every method with EH in one or many assemblies.

The rule of the house is that one bad method or file never ends a corpus run: every
failure becomes a record with its stage, kind, method and IL offset, and the run goes on.
Work is split by file across `--jobs` worker processes; the report is sorted (file, then
token) and carries no timings, so the same input gives a byte-identical JSON report.
Timings go to the human summary only.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import stat
import sys
import time
import traceback
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from .assembly.loader import Assembly
from .assembly.r2r.reader import ReadyToRunImage
from .clauses.validate import ERROR
from .errors import AssemblyError, LlilcEhError
from .il.method import analyze
from .il.regions import RegionKind

# Cyclic GC thresholds for a process that runs many methods (`tune_gc`). The pipeline keeps
# a large long-lived heap (an assembly's metadata, the JIT-EE's caches) and allocates many
# short-lived containers per method; at CPython's defaults (700, 10, 10) a full collection
# comes every ~70,000 surviving allocations and scans that whole heap. Measured with
# `gc.callbacks` over `validate --translate` of System.Net.Http (255 EH methods, three runs
# each): GC 1.0 s = 10% of the process's CPU at the defaults (8 full collections), 0.34 s =
# 4% at these (none). The cost: at most 10,000 more container objects awaiting a collection.
GC_THRESHOLDS = (10_000, 20, 20)


def tune_gc() -> None:
    """Set this process's GC thresholds for a run over many methods (`GC_THRESHOLDS`);
    forked workers inherit them."""
    gc.set_threshold(*GC_THRESHOLDS)


@dataclass
class FileReport:
    path: str
    methods: int = 0
    with_il: int = 0
    with_eh: int = 0
    clauses: Counter = field(default_factory=Counter)
    max_try_depth: int = 0
    try_in_handler: int = 0
    mutual_protect: int = 0
    failures: list[dict] = field(default_factory=list)
    file_error: dict | None = None
    native: NativeReport | None = None   # ReadyToRun images only
    translated: int | None = None          # with translate: methods through the whole pipeline, clean
    translate_failures: list[dict] = field(default_factory=list)
    differential: Counter = field(default_factory=Counter)   # LLVM differential classification
    dispatch: Counter = field(default_factory=Counter)       # check.dispatch on our tables: methods, sites, ...
    decided_by_order: int = 0       # methods whose funclet match the evidence left to LLVM's order
    seconds: float = 0.0                                     # timings: not in the JSON report
    stage_seconds: Counter = field(default_factory=Counter)
    method_seconds: list[tuple[float, str]] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)       # --per-method (view.records): not in the JSON report

    def as_dict(self) -> dict:
        return {"path": self.path, "methods": self.methods, "with_il": self.with_il,
                "with_eh": self.with_eh, "clauses": dict(sorted(self.clauses.items())),
                "max_try_depth": self.max_try_depth, "try_in_handler": self.try_in_handler,
                "mutual_protect": self.mutual_protect, "failures": self.failures,
                "file_error": self.file_error,
                "native": self.native.as_dict() if self.native else None,
                "translated": self.translated, "translate_failures": self.translate_failures,
                "differential": dict(sorted(self.differential.items())),
                "dispatch": dict(sorted(self.dispatch.items())),
                "decided_by_order": self.decided_by_order}


@dataclass
class NativeReport:
    """RyuJIT's side of a ReadyToRun image: its tables validated, compared, unwound."""

    bodies: int = 0
    eh_bodies: int = 0
    stub_eh_bodies: int = 0
    runtime_functions: int = 0
    funclets: int = 0
    clauses: Counter = field(default_factory=Counter)        # by kind
    clause_flags: Counter = field(default_factory=Counter)   # by raw flags, hex
    unwind_infos: int = 0            # distinct UNWIND_INFOs decoded
    unwind_round_trip_failures: int = 0
    findings: list[dict] = field(default_factory=list)
    comparison: Counter = field(default_factory=Counter)     # classification -> bodies
    comparison_details: Counter = field(default_factory=Counter)  # fate/role -> clauses
    dispatch: Counter = field(default_factory=Counter)       # check.dispatch on RyuJIT's tables

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items()}
        for k in ("clauses", "clause_flags", "comparison", "comparison_details", "dispatch"):
            d[k] = dict(sorted(d[k].items()))
        return d


def offset_text(failure: dict) -> str:
    """A failure record's offset as its stage means it: IL offsets up to the reader, code
    offsets (from the method's start or in the object) from the backend on."""
    at = failure["offset"]
    return f"+0x{at:x}" if failure["stage"] in ("backend", "clauses") else f"IL_{at:04x}"


def _failure(exc: BaseException, method: str | None) -> dict:
    if isinstance(exc, LlilcEhError):
        d = exc.as_dict()
        d["method"] = d["method"] or method
        return d
    # A bug of ours, not of the input: still one method's failure, with where it happened.
    tb = traceback.extract_tb(exc.__traceback__)[-1]
    return {"stage": "internal", "kind": type(exc).__name__, "method": method, "offset": None,
            "reason": f"{exc} ({Path(tb.filename).name}:{tb.lineno})"}


def validate_file(path: str, translate: bool = False, opt: int = 2, references: tuple[str, ...] = (), *,
                  only: tuple[int, ...] | None = None, native: bool = True, clone_finally: bool = False,
                  profile: str = "coreclr-psp", records: bool = False, record_seconds: bool = False,
                  html_dir: str | None = None) -> FileReport:
    """IL region checks on every method with EH of one assembly; for ReadyToRun images
    RyuJIT's tables too; with `translate`, the whole pipeline (`pipeline.Pipeline.stream`:
    IR, lint, verify, model, LLVM codegen at `opt`, final image, clauses, validator, LLVM
    differential) on every EH method whose IL is sound, its references also looked up in the
    `references` folders (`--reference`).

    `only` (MethodDef rids, in table order) and `native=False` make one part of the file's
    work, for `cluster`, which splits a large assembly into chunks of methods plus one part
    for RyuJIT's tables and merges the parts back into this same report (`cluster.merge`)."""
    t0 = time.perf_counter()
    report = FileReport(path=path)
    try:
        asm = Assembly(path)
        report.methods = asm.method_count
        rids = list(asm.methods_with_il())
    except Exception as exc:  # noqa: BLE001 - a damaged file is a record, not a crash
        report.file_error = _failure(exc, None)
        report.seconds = time.perf_counter() - t0
        return report
    report.with_il = len(rids)
    analyzed = {}
    for rid in rids if only is None else only:
        where = f"0x{0x06000000 | rid:08X}"
        try:
            body = asm.body(rid)
            if not body.has_eh:
                continue
            report.with_eh += 1
            where = f"{where} {body.name}"
            m = analyze(body)
        except Exception as exc:  # noqa: BLE001
            report.failures.append(_failure(exc, where))
            continue
        for c in body.clauses:
            report.clauses[c.kind.word] += 1
        tree = m.regions
        report.max_try_depth = max(report.max_try_depth, tree.max_try_depth)
        if any(r.kind is RegionKind.TRY and tree.enclosing_handler(r) is not None for r in tree.regions):
            report.try_in_handler += 1
        if any(len(r.handlers) > 1 for r in tree.regions):
            report.mutual_protect += 1
        report.failures.extend(e.as_dict() for e in m.errors)
        if not m.errors:
            analyzed[rid] = m
    _emit("start", path, report.with_eh)
    if translate:
        _translate(asm, analyzed, opt, report, references, clone_finally=clone_finally, profile=profile,
                   records=records, record_seconds=record_seconds, html_dir=html_dir)
    report.native = _validate_native(asm, report, analyzed) if native else None
    report.seconds = time.perf_counter() - t0
    return report


_POOL = None


def _pool():
    """This process's LLVM worker (one: a batch process overlaps it with its own Python
    work, `Pipeline.stream`); closed at exit."""
    global _POOL
    if _POOL is None:
        import atexit

        from .backend.codegen import CodegenPool
        _POOL = CodegenPool(1)
        atexit.register(_POOL.close)
    from .backend.cache import from_environment
    _POOL.cache = from_environment()    # read per file: `--no-cache` (cache.disabled) may differ per call
    return _POOL


def _translate(asm: Assembly, analyzed: dict, opt: int, report: FileReport, references: tuple[str, ...] = (), *,
               clone_finally: bool = False, profile: str = "coreclr-psp", records: bool = False,
               record_seconds: bool = False, html_dir: str | None = None) -> None:
    """The whole pipeline over the analysed EH methods; every shortfall is a failure record
    with a named reason: a stage's error, a validator rule, an image finding, an unexplained
    difference from LLVM's own table. `records`: one `view.records` record per EH method too
    (those the IL checks stopped included), RyuJIT's side from the file's ReadyToRun code."""
    from .pipeline import Pipeline
    from .reader.translate import Options
    report.translated = 0
    pipeline = Pipeline(asm, _pool(), opt=opt, references=references, profile=profile,
                        options=Options(clone_finally=clone_finally))
    record = _recorder(asm, report, opt, profile, clone_finally, record_seconds, html_dir) if records else None
    rids = list(analyzed)
    runs = pipeline.stream(rids, analyzed=analyzed)
    for rid in rids:
        try:
            run = next(runs)
        except Exception as exc:  # noqa: BLE001 - a bug of ours: this method's record, then go on
            report.translate_failures.append(_failure(exc, f"0x{0x06000000 | rid:08X} {analyzed[rid].body.name}"))
            runs = pipeline.stream(rids[rids.index(rid) + 1:], analyzed=analyzed)
            continue
        report.stage_seconds.update(run.seconds)
        report.method_seconds.append((sum(v for k, v in run.seconds.items() if k != "codegen-wait"), run.name))
        if run.differential is not None:
            report.differential[run.differential.classification] += 1
        if run.dispatch is not None:
            report.dispatch.update(dispatch_counts(run.dispatch))
        report.decided_by_order += bool(run.image is not None and run.image.ambiguous)
        failures = run_failures(run)
        report.translate_failures.extend(failures)
        report.translated += not failures
        if record is not None:
            record(run)
        _emit("method", report.path)


def _recorder(asm: Assembly, report: FileReport, opt: int, profile: str, clone_finally: bool, seconds: bool,
              html_dir: str | None = None):
    """`--per-method`: a function recording one run (`view.records.method_record`); the methods
    whose IL checks failed are recorded now, from their failure records. `html_dir`: each run's
    page is written there too (`view.html`, `validate --html`)."""
    from .view.records import failed_record, method_record
    options = {"opt": opt, "profile": profile, "clone_finally": clone_finally}
    name = Path(report.path).name
    try:
        image = ReadyToRunImage(asm)
    except AssemblyError:
        image = None
    recorded = set()
    for f in report.failures:
        rec = failed_record(name, f, options)
        if rec is not None and rec["token"] not in recorded:
            recorded.add(rec["token"])
            report.records.append(rec)
    if html_dir is None:
        return lambda run: report.records.append(method_record(name, run, asm, image, options, seconds=seconds))

    def record(run):
        from .view.html import write_method_page
        rec = method_record(name, run, asm, image, options, seconds=seconds)
        report.records.append(rec)
        write_method_page(html_dir, rec, run, asm, image, clone_finally)
    return record


def dispatch_counts(check) -> Counter:
    """One method's dispatch check as summary counts (`unchecked: REASON` per reason)."""
    c = Counter(methods=1, call_sites=len(check.sites), scenarios=check.scenarios,
                mismatches=len(check.mismatches), explained=len(check.mismatches) - len(check.unexplained),
                weakly_explained=sum(1 for m in check.mismatches if m.explanation and "WEAK" in m.explanation))
    c.update({f"unchecked: {k}": v for k, v in check.unchecked.items()})
    return c


def dispatch_line(ours: list[Counter], ryujit: list[Counter]) -> str:
    """The summary's dispatch line: call sites and scenarios checked, mismatches, for our
    tables and for RyuJIT's (ReadyToRun debug info), and what could not be checked."""
    def part(counters: list[Counter]) -> str:
        c = sum(counters, Counter())
        text = (f"{c['methods']} methods, {c['call_sites']} call sites, {c['scenarios']} scenarios, "
                f"{c['mismatches']} mismatches" + (f" ({c['explained']} explained, {c['weakly_explained']} of them "
                                                   f"weakly)" if c["explained"] else ""))
        rest = sorted((k.split(": ", 1)[1], v) for k, v in c.items() if k.startswith("unchecked: "))
        judged = [(k.split(": ", 1)[1], v) for k, v in rest if k.startswith("of them: ")]
        rest = [(k, v) for k, v in rest if not k.startswith("of them: ")]
        if judged:
            text += " (call sites judged at another IL offset: " + ", ".join(f"{v} {k}" for k, v in judged) + ")"
        return text + (" (not checked: " + ", ".join(f"{v} {k}" for k, v in rest) + ")" if rest else "")
    parts = []
    if ours:
        parts.append("ours " + part(ours))
    if any(ryujit):
        parts.append("RyuJIT's (ReadyToRun debug info) " + part(ryujit))
    return "dispatch: " + ("; ".join(parts) or "nothing checked")


def run_failures(run) -> list[dict]:
    """A pipeline run's shortfalls as failure records (`validate --translate` records them,
    `translate` exits 2 on them): the stage error, or every validator finding on our table
    (conventions too: our generator promises RyuJIT's order, decision 10), every image
    finding and every unexplained difference from LLVM's own table."""
    if run.error is not None:
        return [run.error.as_dict()]
    out = [{"stage": "clauses", "kind": f"validator:{f.rule}", "method": run.name, "offset": None,
            "reason": f.message} for f in run.findings]
    out += [{"stage": "backend", "kind": f"image-verify:{f.rule}", "method": run.name, "offset": f.offset,
             "reason": f.detail} for f in run.image_findings]
    if run.differential is not None:
        out += [{"stage": "clauses", "kind": f"llvm-differential:{d.reason}", "method": run.name, "offset": None,
                 "reason": d.detail} for d in run.differential.unexplained]
    if getattr(run, "dispatch", None) is not None:
        out += [{"stage": "clauses", "kind": "dispatch-mismatch", "method": run.name, "offset": m.pc,
                 "reason": str(m)} for m in run.dispatch.mismatches]
    return out


def _validate_native(asm: Assembly, report: FileReport, analyzed: dict | None = None) -> NativeReport | None:
    """For a ReadyToRun image: validate, compare and unwind every body with native EH.
    `analyzed`: rid -> the IL analysis `validate_file` already made (clean ones), reused by
    the dispatch check instead of analysing each body's IL again."""
    from .check.r2r import check_method, decode_unwind

    try:
        image = ReadyToRunImage(asm)
        bodies = list(image.methods())
    except AssemblyError as exc:
        if exc.kind != "not-ready-to-run":
            report.failures.append(_failure(exc, None))
        return None
    except Exception as exc:  # noqa: BLE001
        report.failures.append(_failure(exc, None))
        return None
    native = NativeReport(bodies=len(bodies), runtime_functions=len(image.runtime_functions))
    analyzed = dict(analyzed or {})     # and every other body's IL analysis, once per MethodDef
    cache: dict = {}
    dispatch_state: dict = {}
    for rf in image.runtime_functions:
        if rf.unwind_rva not in cache:
            try:
                cache[rf.unwind_rva] = decode_unwind(image, rf.unwind_rva)
            except LlilcEhError as exc:
                report.failures.append(_failure(exc, f"unwind info at RVA 0x{rf.unwind_rva:X}"))
                cache[rf.unwind_rva] = None
    native.unwind_infos = sum(1 for v in cache.values() if v is not None)
    native.unwind_round_trip_failures = sum(1 for v in cache.values() if v is not None and not v[1])
    for m in bodies:
        if not m.has_eh:
            continue
        native.eh_bodies += 1
        native.stub_eh_bodies += m.is_stub
        native.funclets += len(m.funclets)
        for c in m.native.clauses:
            native.clauses[c.kind] += 1
            native.clause_flags[f"0x{int(c.flags):X}"] += 1
        where = ", ".join(f"0x{t:08X}" for t in m.tokens) or f"body at RVA 0x{m.rva:X}"
        try:
            checked = check_method(asm, image, m, unwind_cache=cache)
        except Exception as exc:  # noqa: BLE001
            report.failures.append(_failure(exc, where))
            continue
        for f in checked.findings:
            native.findings.append({"body": where, "rule": f.rule, "clauses": list(f.clauses),
                                    "severity": f.severity, "message": f.message})
        if checked.comparison is not None:
            native.comparison[checked.comparison.classification()] += 1
            native.comparison_details.update(checked.comparison.counts())
            try:
                dispatch = _ryujit_dispatch(asm, image, m, checked, dispatch_state, analyzed)
            except Exception as exc:  # noqa: BLE001 - a bug of ours or a damaged image: this body's record
                report.failures.append(_failure(exc, where))
                continue
            if dispatch is not None:
                native.dispatch.update(dispatch_counts(dispatch))
                for mm in dispatch.unexplained:
                    native.findings.append({"body": where, "rule": "dispatch-mismatch", "clauses": [],
                                            "severity": "error", "message": str(mm)})
    return native


def _ryujit_dispatch(asm: Assembly, image: ReadyToRunImage, m, checked, state: dict, analyzed: dict):
    """check.dispatch on one RyuJIT body, its IL offsets from the image's DEBUG_INFO (None
    when the IL does not analyse cleanly: the IL checks report that). The IL analysis is
    `analyzed`'s when it has the method (a ReadyToRun image holds one body per
    instantiation, all of one MethodDef's IL: CoreLib's 1,228 bodies with EH are 689
    methods; analysing each again cost ~0.3 ms)."""
    from .assembly.r2r.debuginfo import DebugInfo
    from .check.dispatch import TypeOracle, check_ryujit
    from .il.method import analyze
    from .reader.jitee import JitEE
    if "debug" not in state:
        state["debug"] = DebugInfo(image)
        state["oracle"] = TypeOracle(JitEE(asm))
    rid = m.tokens[0] & 0xFFFFFF
    il = analyzed.get(rid)
    if il is None:
        il = analyzed[rid] = analyze(asm.body(rid))
    if il.errors:
        return None
    return check_ryujit(asm, m, state["debug"].bounds(m.main.index), il, checked.comparison, state["oracle"],
                        synchronized=asm.is_synchronized(rid))


def expand_inputs(inputs: list[str]) -> list[str]:
    """Files as given, folders expanded to their regular *.dll and *.exe files (symlinks to
    them included), sorted for determinism.

    A path named on the command line must exist and be a folder or a regular file: anything
    else is unusable input (`LlilcEhError`, exit 1, before any work). Inside a folder only
    regular files are taken: a FIFO or a device named `x.dll` would block or never end a read.
    """
    files: list[str] = []
    for item in inputs:
        p = Path(item)
        try:
            mode = p.stat().st_mode
        except OSError as e:
            raise LlilcEhError(f"{item}: {e.strerror}", kind="bad-input") from None
        if stat.S_ISDIR(mode):
            files.extend(str(f) for f in sorted(p.rglob("*"))
                         if f.suffix.lower() in (".dll", ".exe") and f.is_file())
        elif stat.S_ISREG(mode):
            files.append(str(p))
        else:
            raise LlilcEhError(f"{item}: not a regular file or a folder", kind="bad-input")
    return files


def _worker_init(events=None) -> None:
    """A batch worker leaves stopping to the parent: Ctrl-C at a terminal reaches the whole
    process group, and a worker that took it would print its own traceback; SIGTERM (the
    parent's way to stop it) ends it at once, whatever handler the parent had installed.
    `events`: the parent's progress queue (`_emit`)."""
    global _EVENTS
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _EVENTS = events.put if events is not None else None


# Where progress events go (`view.progress.BatchProgress.event`): set by `run` in this process,
# a queue's put in a worker; None (no progress wanted, or a cluster worker) drops them.
_EVENTS = None


def _emit(*event) -> None:
    if _EVENTS is not None:
        _EVENTS(event)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """End an interrupted pool now: cancel what has not started and terminate the workers
    (they ignore SIGINT, and a file such as CoreLib takes minutes to finish)."""
    # The executor has no public way to end its workers (3.14's terminate_workers); its own
    # list of them is dropped by shutdown, so it is taken first.
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.join()


def run(files: list[str], jobs: int = 1, progress: bool = True, translate: bool = False,
        opt: int = 2, finished: dict[str, FileReport] | None = None,
        references: tuple[str, ...] = (), **file_options) -> list[FileReport]:
    """Validate every file, `jobs` worker processes at a time; results in input order.

    `finished` (a dict the caller owns) receives each file's report as soon as it is done, so
    that a caller interrupted by Ctrl-C still has the reports of the files that finished.
    Progress (`view.progress`): on a terminal rich's bar counted in EH methods with the time
    remaining, else one line per finished file on stderr."""
    global _EVENTS
    from .view.progress import BatchProgress
    results: dict[str, FileReport] = finished if finished is not None else {}
    bar = BatchProgress(files, enabled=progress)

    def tick(r: FileReport) -> None:
        results[r.path] = r
        bar.file_done(r.path, r.with_eh)

    # Largest files first keeps both workers busy to the end (CoreLib alone is ~25% of the work).
    order = sorted(files, key=lambda f: -os.path.getsize(f) if os.path.exists(f) else 0)
    with bar, _event_queue(bar if bar.tty else None, jobs) as events:
        if jobs <= 1:
            _EVENTS = bar.event if bar.tty else None
            try:
                for f in order:
                    tick(validate_file(f, translate, opt, tuple(references), **file_options))
            finally:
                _EVENTS = None
        else:
            args = (translate, opt, tuple(references))
            pending = order
            while pending:
                broken = _pool_round(pending, jobs, events, args, file_options, tick)
                pending = _find_worker_killer(broken, events, args, file_options, tick)
    return [results[f] for f in files]


def _pool_round(files, jobs, events, args, file_options, tick) -> list[str]:
    """Validate `files` in a pool of `jobs` workers; return the files left undone because a
    worker process died (a crash in native code, the OOM killer) and broke the pool -- the
    executor then fails every unfinished task, whichever file killed it."""
    from concurrent.futures.process import BrokenProcessPool
    pool = ProcessPoolExecutor(max_workers=jobs, initializer=_worker_init, initargs=(events,))
    broken = []
    try:
        futures = {pool.submit(_validate_in_worker, f, *args, **file_options): f for f in files}
        for future in as_completed(futures):
            try:
                tick(future.result())
            except BrokenProcessPool:
                broken.append(futures[future])
    except BaseException:
        _stop_workers(pool)
        raise
    pool.shutdown()
    lost = set(broken)
    return [f for f in files if f in lost]


def _find_worker_killer(broken, events, args, file_options, tick) -> list[str]:
    """Run the files a broken pool left undone one at a time, each in a pool of its own, until
    one kills its worker alone: that file becomes a `batch/worker-lost` file error (a batch
    goes on and loses nothing); the files after it go back to a parallel round."""
    for i, f in enumerate(broken):
        if _pool_round([f], 1, events, args, file_options, tick):
            report = FileReport(path=f)
            report.file_error = {"stage": "batch", "kind": "worker-lost", "method": None, "offset": None,
                                 "reason": "the worker process validating this file died (a crash below "
                                           "Python, or killed); run it alone with --jobs 1 to see how"}
            tick(report)
            return broken[i + 1:]
    return []


# Fault injection for the tests (a real worker death, not a mock): a worker validating a file
# whose name is the value of this variable kills its own process with SIGKILL.
FAULT_ENV = "LLILC_EH_BATCH_FAULT"


def _validate_in_worker(path: str, *args, **kwargs) -> FileReport:
    if os.environ.get(FAULT_ENV) and Path(path).name == os.environ[FAULT_ENV]:
        os.kill(os.getpid(), signal.SIGKILL)
    return validate_file(path, *args, **kwargs)


@contextlib.contextmanager
def _event_queue(bar, jobs: int):
    """The workers' progress events, read by a thread into `bar` (None: no queue)."""
    if bar is None or jobs <= 1:
        yield None
        return
    import multiprocessing
    import threading
    queue = multiprocessing.get_context().Queue()

    def pump():
        while (event := queue.get()) is not None:
            bar.event(event)
    reader = threading.Thread(target=pump, name="progress-events", daemon=True)
    reader.start()
    try:
        yield queue
    finally:
        queue.put(None)
        reader.join(timeout=5)


def failure_records(report: FileReport) -> list[dict]:
    """Every failure of one file's run, as records with stage, kind, method, offset, reason:
    the file error (stage `file`), the methods' region and R2R checks, the pipeline runs
    (`--translate`), and the validator's error findings on RyuJIT's tables (stage
    `r2r-validator`; conventions are RyuJIT's habit there, not a requirement). None means a
    clean file: `validate` exits 0 only when every file has none."""
    out = []
    if report.file_error:
        out.append({**report.file_error, "stage": "file"})
    out += report.failures + report.translate_failures
    if report.native is not None:
        out += [{"stage": "r2r-validator", "kind": f["rule"], "method": f["body"], "offset": None,
                 "reason": f["message"]} for f in report.native.findings if f["severity"] == ERROR]
    return out


def failure_line(reports: list[FileReport]) -> str:
    """The summary's last word, counted from `failure_records`: how many, in how many methods
    and files, by stage:kind; `failures: none` only for a clean run."""
    records = [(r, f) for r in reports for f in failure_records(r)]
    if not records:
        return "failures: none"
    kinds = Counter(f"{f['stage']}:{f['kind']}" for _, f in records)
    methods = len({(r.path, f["method"]) for r, f in records if f["stage"] != "file" and f["method"]})
    files = sum(1 for r in reports if r.file_error)
    return (f"failures: {len(records)} ({methods} method{'s' * (methods != 1)}, {files} unreadable "
            f"file{'s' * (files != 1)}): " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))


def summary(reports: list[FileReport], wall: float | None = None, *, interrupted: tuple[int, int] | None = None
            ) -> str:
    """The human summary; `interrupted` = (files finished, files named) when Ctrl-C stopped
    the run: the summary then covers the finished files only, and says so."""
    total = Counter()
    kinds = Counter()
    depth = 0
    for r in reports:
        total.update(methods=r.methods, with_il=r.with_il, with_eh=r.with_eh,
                     try_in_handler=r.try_in_handler, mutual_protect=r.mutual_protect)
        kinds.update(r.clauses)
        depth = max(depth, r.max_try_depth)
    bad_methods = sum(len({f["method"] for f in r.failures}) for r in reports)
    lines = [f"{'assembly':<48} {'methods':>8} {'IL':>8} {'EH':>6} {'clauses':>8} {'depth':>5} {'bad':>5}"]
    for r in reports:
        name = Path(r.path).name
        if r.file_error:
            lines.append(f"{name:<48} error: [{r.file_error['kind']}] {r.file_error['reason'][:60]}")
            continue
        lines.append(f"{name:<48} {r.methods:>8} {r.with_il:>8} {r.with_eh:>6} "
                     f"{sum(r.clauses.values()):>8} {r.max_try_depth:>5} "
                     f"{len({f['method'] for f in r.failures}):>5}")
    lines.append("-" * 92)
    lines.append(f"{'total (' + str(len(reports)) + ' files)':<48} {total['methods']:>8} {total['with_il']:>8} "
                 f"{total['with_eh']:>6} {sum(kinds.values()):>8} {depth:>5} {bad_methods:>5}")
    lines.append("clauses: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    lines.append(f"methods with a try inside a handler: {total['try_in_handler']}; "
                 f"with mutual-protect tries: {total['mutual_protect']}; max try depth: {depth}")
    natives = [r.native for r in reports if r.native]
    if natives:
        n = NativeReport()
        for x in natives:
            for k in ("bodies", "eh_bodies", "stub_eh_bodies", "runtime_functions", "funclets",
                      "unwind_infos", "unwind_round_trip_failures"):
                setattr(n, k, getattr(n, k) + getattr(x, k))
            for k in ("clauses", "clause_flags", "comparison", "comparison_details", "dispatch"):
                getattr(n, k).update(getattr(x, k))
            n.findings.extend(x.findings)
        lines.append(f"ReadyToRun ({len(natives)} images): {n.bodies} bodies, {n.eh_bodies} with native EH "
                     f"({n.stub_eh_bodies} without IL), {sum(n.clauses.values())} native clauses, "
                     f"{n.funclets} funclets, {n.runtime_functions} runtime functions")
        lines.append("  native clauses: " + ", ".join(f"{k} {v}" for k, v in sorted(n.clauses.items()))
                     + "; by flags: " + ", ".join(f"{k} {v}" for k, v in sorted(n.clause_flags.items())))
        lines.append(f"  unwind infos decoded {n.unwind_infos}, re-encoded differently "
                     f"{n.unwind_round_trip_failures}")
        rules = Counter(f["rule"] for f in n.findings)
        lines.append(f"  validator findings on RyuJIT's tables: {len(n.findings)}"
                     + (" (" + ", ".join(f"{k} {v}" for k, v in sorted(rules.items())) + ")" if rules else ""))
        lines.append("  IL vs native, bodies: " + ", ".join(f"{k} {v}" for k, v in n.comparison.most_common()))
        lines.append("  IL vs native, clauses: " + ", ".join(f"{k} {v}" for k, v in
                                                               sorted(n.comparison_details.items())))
        if n.dispatch:
            lines.append("  " + dispatch_line([], [n.dispatch]))
    translated = [r for r in reports if r.translated is not None]
    if translated:
        lines += _translate_summary(translated)
    lines.append(failure_line(reports))
    if interrupted is not None:
        lines.append(f"interrupted: {interrupted[0]} of {interrupted[1]} files finished; this summary covers "
                     "those only")
    if wall is not None:
        lines.append(f"wall time {wall:.2f} s")
    return "\n".join(lines)


def _translate_summary(reports: list[FileReport]) -> list[str]:
    """The pipeline's part of the summary: coverage per assembly (those with EH methods),
    failures by reason, the LLVM differential, time per stage and the slowest methods."""
    ok = sum(r.translated for r in reports)
    tried = ok + sum(len({f["method"] for f in r.translate_failures}) for r in reports)
    lines = ["", f"{'pipeline (end to end)':<48} {'EH':>6} {'ok':>6} {'failed':>6} {'coverage':>9} {'s':>7}"]
    for r in reports:
        failed = len({f["method"] for f in r.translate_failures})
        if r.translated + failed:
            lines.append(f"{Path(r.path).name:<48} {r.translated + failed:>6} {r.translated:>6} {failed:>6} "
                         f"{100.0 * r.translated / (r.translated + failed):>8.1f}% {r.seconds:>7.1f}")
    lines.append(f"pipeline: {ok} of {tried} EH methods end to end clean "
                 f"({100.0 * ok / tried if tried else 100:.1f}%): verified IR, O-level code, final image, "
                 f"clauses, unwind, validator")
    reasons = Counter(f"{f['stage']}:{f['kind']}" for r in reports for f in r.translate_failures)
    for reason, n in reasons.most_common():
        lines.append(f"  {n:>6}  {reason}")
    diff = Counter()
    for r in reports:
        diff.update(r.differential)
    lines.append("LLVM differential: " + (", ".join(f"{k} {v}" for k, v in sorted(diff.items())) or "none"))
    lines.append(dispatch_line([r.dispatch for r in reports],
                               [r.native.dispatch for r in reports if r.native is not None]))
    lines.append(f"funclet matches the evidence left to LLVM's order: {sum(r.decided_by_order for r in reports)} "
                 f"methods")
    stages = Counter()
    for r in reports:
        stages.update(r.stage_seconds)
    if stages:
        total = sum(v for k, v in stages.items() if k != "codegen-wait")
        lines.append("seconds by stage (all processes): " + ", ".join(
            f"{k} {v:.1f}" for k, v in stages.items()) + f"; LLVM codegen {100 * stages['codegen'] / total:.0f}%"
            f" of {total:.1f}")
        times = sorted((t for r in reports for t in r.method_seconds), reverse=True)
        if times:
            median = times[len(times) // 2][0]
            lines.append(f"per method: median {1000 * median:.1f} ms; slowest: "
                         + "; ".join(f"{n} {1000 * t:.0f} ms" for t, n in times[:3]))
    return lines


def timings_report(reports: list[FileReport]) -> str:
    """Per-method pipeline time (this process's stages + the LLVM worker's), slowest first:
    `seconds<TAB>assembly<TAB>method`. Timings vary run to run, so they live here and in the
    summary, never in the deterministic JSON report."""
    rows = sorted(((t, Path(r.path).name, name) for r in reports for t, name in r.method_seconds),
                  key=lambda x: (-x[0], x[1], x[2]))
    return "seconds\tassembly\tmethod\n" + "".join(f"{t:.4f}\t{a}\t{m}\n" for t, a, m in rows)


def json_report(reports: list[FileReport]) -> str:
    return json.dumps({"files": [r.as_dict() for r in reports]}, indent=1, sort_keys=True) + "\n"
