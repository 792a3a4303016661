"""The whole pipeline for one method, stage by stage, every artifact kept.

    IL (decode, regions, checks) → reader (IR) → lint + LLVM verify → funclet model
    → LLVM codegen (worker) → recovery → final image (+ verify) → clause table
    → validator → LLVM differential → dispatch check (check.dispatch: the CLR's two passes over
    our table at every call site vs ECMA-335's over the IL, per scenario)

`translate` shows one `MethodRun` side by side, `validate --translate` and the benchmarks
run many. Why one driver: every consumer needs the same chain with the same choices (which
layout feeds the generator, which profile, when the LLVM differential applies), and the
rule of the house that one method's failure is a value, never an exception out of a batch.

A `MethodRun` holds what each stage produced and, when a stage refused, `error` (the
stage's `LlilcEhError`, which names the method and the IL or code offset); later stages
are then absent. `seconds` times each stage in this process; `codegen` is the worker's
own time (`CodegenTimings.worker`), `codegen-wait` what the caller waited for it (worker
+ pickling + pipes), so a benchmark can split Python from LLVM.

Codegen runs in `backend.codegen`'s worker pool, so a batch first runs the Python front
half of every method (`front`), then compiles all modules at once (`CodegenPool.
compile_many`: both cores busy), then runs the back half (`back`). The clause table is
generated from the *final image* (`clauses.placed_from_image`); the LLVM differential
generates a second table in LLVM's own layout, the only layout LLVM's table describes
(`clauses.llvm_differential`).

Unwind records (`unwind_records`): one per final range, in the CLR's form (no language
handler: the runtime finds the personality from the method, not from UNWIND_INFO) with the
kind the JIT passes to `allocUnwindInfo` -- ROOT for the main body, HANDLER for a catch /
finally / fault / filter-handler funclet, FILTER for a filter; then, when the image placed our
stack probe routine, one for it (HANDLER, a frameless leaf: every IP the runtime may interrupt
needs a RUNTIME_FUNCTION, backend.image "Unwind data"; CoreCLR 3.1's allocUnwindInfo tells only
ROOT from the rest).
"""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .assembly.loader import Assembly
from .assembly.native import NativeMethod
from .backend.codegen import CodegenPool, CodegenResult
from .backend.coff import CoffObject
from .backend.image import FinalImage, link_final_image
from .backend.recover import RecoveredCode, recover
from .backend.relink import PROBE_UNWIND
from .backend.verify import ImageFinding
from .check.dispatch import DispatchCheck, TypeOracle, check_ours
from .clauses.differential import Differential, llvm_differential
from .clauses.generate import (
    PlacedCode,
    encode_clauses,
    generate_clauses,
    placed_from_image,
)
from .clauses.validate import DEFAULT_PROFILE, Finding, Profile, validate
from .errors import BackendError, LlilcEhError
from .funclets.model import FuncletKind, FuncletModel, build_funclet_model
from .il.method import ILMethod, analyze
from .reader.jitee import JitEE
from .reader.lint import check_module
from .reader.translate import Options, ReaderResult, translate
from .unwind import UnwindInfo, encode_unwind_info

STAGES = ("il", "reader", "lint", "model", "codegen", "recover", "image", "clauses", "validate",
          "differential")


class UnwindKind(enum.Enum):
    """CorJitFuncKind: what the JIT tells the runtime each UNWIND_INFO is for."""

    ROOT = "ROOT"
    HANDLER = "HANDLER"
    FILTER = "FILTER"


@dataclass(frozen=True)
class UnwindRecord:
    kind: UnwindKind
    funclet: int | None          # model funclet index (0: the main body); None: our stack probe
    start: int                   # final image offsets of the range it covers
    end: int
    info: UnwindInfo             # CLR form
    synthesized: bool            # a frameless leaf LLVM gave no .pdata: an empty one

    @property
    def data(self) -> bytes:
        return encode_unwind_info(self.info)


@dataclass
class MethodRun:
    """Everything the pipeline made of one method; `error` says where and why it stopped."""

    rid: int
    name: str
    opt: int
    profile: Profile
    il: ILMethod | None = None
    reader: ReaderResult | None = None
    model: FuncletModel | None = None
    codegen: CodegenResult | None = None
    coff: CoffObject | None = None
    recovered: RecoveredCode | None = None
    image: FinalImage | None = None
    image_findings: list[ImageFinding] = field(default_factory=list)
    placed: PlacedCode | None = None
    clauses: NativeMethod | None = None
    clause_bytes: bytes = b""
    findings: list[Finding] = field(default_factory=list)
    differential: Differential | None = None
    dispatch: DispatchCheck | None = None       # the CLR's dispatch over our table vs the IL's (check.dispatch)
    error: LlilcEhError | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def has_eh(self) -> bool:
        return bool(self.il is not None and self.il.body.clauses)

    @property
    def ok(self) -> bool:
        """Every stage ran and every check is clean."""
        return (self.error is None and self.clauses is not None and not self.findings
                and not self.image_findings
                and (self.differential is None or not self.differential.unexplained)
                and (self.dispatch is None or not self.dispatch.mismatches))

    @property
    def stage_reached(self) -> str:
        """The last stage that produced something (the failing one is the next)."""
        done = [s for s, v in (("il", self.il), ("reader", self.reader), ("model", self.model),
                               ("codegen", self.codegen), ("recover", self.recovered), ("image", self.image),
                               ("clauses", self.clauses)) if v is not None]
        return done[-1] if done else "none"

    def unwind_records(self) -> list[UnwindRecord]:
        return unwind_records(self.image) if self.image is not None else []


def unwind_records(image: FinalImage) -> list[UnwindRecord]:
    """One CLR-form UNWIND_INFO per final range, with its CorJitFuncKind."""
    out = []
    for r in image.ranges:
        kind = UnwindKind.ROOT if r.funclet == 0 else \
            UnwindKind.FILTER if r.kind is FuncletKind.FILTER else UnwindKind.HANDLER
        out.append(UnwindRecord(kind, r.funclet, r.begin, r.end, r.unwind, r.unwind_synthesized))
    if image.stack_probe is not None:
        f = image.runtime_functions[len(image.ranges)]
        out.append(UnwindRecord(UnwindKind.HANDLER, None, f.begin_rva, f.end_rva, PROBE_UNWIND, True))
    return out


class _Clock:
    def __init__(self, run: MethodRun):
        self.run, self.t = run, time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.run.seconds[stage] = self.run.seconds.get(stage, 0.0) + now - self.t
        self.t = now


class Pipeline:
    """The pipeline over one assembly: one JIT-EE interface, one worker pool (borrowed; None
    when only `front` is asked for)."""

    def __init__(self, asm: Assembly, pool: CodegenPool | None, *, opt: int = 2,
                 profile: Profile | str = DEFAULT_PROFILE, options: Options | None = None,
                 differential: bool = True, verify_image: bool = True,
                 references: Sequence[str] = (), framework: str | None = None, jitee=None):
        """`jitee(metadata JitEE) -> the JIT-EE the reader asks` chooses the implementation
        (llilc_eh.ee.protocol); None: the metadata one itself."""
        self.asm, self.pool, self.opt = asm, pool, opt
        self._jitee = jitee
        self.references = tuple(references)     # `--reference` folders, for the JIT-EE
        self.framework = framework              # None: the JIT-EE chooses (JitEE.framework)
        self.profile = Profile(profile)
        self.options = options if options is not None else Options()
        self.differential, self.verify_image = differential, verify_image
        self._ee: JitEE | None = None
        self._oracle: TypeOracle | None = None

    @property
    def oracle(self) -> TypeOracle:
        """Catch class tests for the dispatch check, from this assembly's type hierarchy."""
        if self._oracle is None:
            self._oracle = TypeOracle(self.ee)
        return self._oracle

    @property
    def ee(self) -> JitEE:
        if self._ee is None:
            self._ee = JitEE(self.asm, references=self.references, framework=self.framework)
            if self._jitee is not None:
                self._ee = self._jitee(self._ee)
        return self._ee

    # -- the halves ---------------------------------------------------------------------------

    def front(self, rid: int, il: ILMethod | None = None) -> MethodRun:
        """IL → IR → lint + verify → funclet model, in this process (`il`: the method
        already analysed, as a batch that checked its regions has it)."""
        run = MethodRun(rid, f"0x{0x06000000 | rid:08X}", self.opt, self.profile)
        clock = _Clock(run)
        try:
            body = il.body if il is not None else self.asm.body(rid)
            run.name = f"0x{body.token:08X} {body.name}"
            if il is None and self.options.target.data_cells and self.asm.is_synchronized(rid):
                from .clauses.synchronized import analyze_synchronized
                il = analyze_synchronized(body)     # the JIT's own monitor clause
            run.il = il if il is not None else analyze(body)
            clock.lap("il")
            if run.il.errors:       # an ECMA-335 violation: the first one stops the method
                raise run.il.errors[0]
            run.reader = translate(self.asm, run.il, self.ee, self.options)
            clock.lap("reader")
            check_module(run.reader.module, method=run.name, table=run.reader.table)
            clock.lap("lint")
            run.model = build_funclet_model(run.reader.module, run.reader.parent, run.il, table=run.reader.table)
            clock.lap("model")
        except LlilcEhError as e:
            run.error = e.for_method(run.name)
        return run

    def back(self, run: MethodRun, result: CodegenResult | BackendError) -> MethodRun:
        """Object → recovery → final image → clauses → validator → LLVM differential."""
        if run.error is not None:
            return run
        if isinstance(result, LlilcEhError):
            run.error = result.for_method(run.name)
            return run
        run.codegen = result
        run.seconds["codegen"] = result.timings.worker
        run.seconds["codegen-wait"] = result.timings.roundtrip
        clock = _Clock(run)
        try:
            run.coff = CoffObject.parse(result.obj)
            run.recovered = recover(run.coff, result.asm)
            clock.lap("recover")
            run.image = link_final_image(run.recovered, run.coff, run.model, run.reader.parent,
                                         target=self.options.target,
                                         cells={s for s, e in run.reader.externals.items() if e.cell})
            if self.verify_image:
                run.image_findings = run.image.verify()
            clock.lap("image")
            run.placed = placed_from_image(run.model, run.image, run.recovered)
            run.clauses = generate_clauses(run.model, run.placed, self.profile)
            run.clause_bytes = encode_clauses(run.clauses)
            clock.lap("clauses")
            run.findings = validate(run.clauses, self.profile)
            clock.lap("validate")
            if self.differential:
                run.differential = llvm_differential(run.model, run.recovered, run.coff, run.image.funclet_code)
                clock.lap("differential")
            if self.profile.duplicate_clauses:      # CoreCLR's dispatch; NativeAOT's reads SAMETRY instead
                run.dispatch = check_ours(run, self.oracle)
            clock.lap("dispatch")
        except LlilcEhError as e:
            run.error = e.for_method(run.name)
        return run

    # -- whole runs ---------------------------------------------------------------------------

    def run(self, rid: int) -> MethodRun:
        return self.run_many([rid])[0]

    def run_many(self, rids: Iterable[int]) -> list[MethodRun]:
        """All fronts, then every module at once on all workers, then all backs."""
        runs = [self.front(rid) for rid in rids]
        todo = [r for r in runs if r.error is None]
        results = self.pool.compile_many([r.reader.module for r in todo], self.opt,
                                         methods=[r.name for r in todo])
        for r, result in zip(todo, results):
            self.back(r, result)
        return runs

    def stream(self, rids: Iterable[int], ahead: int = 4,
               analyzed: Mapping[int, ILMethod] | None = None) -> Iterator[MethodRun]:
        """The runs in order, with LLVM working while Python does the next fronts: each
        module goes to the pool as soon as its front is done (a thread waits on the worker's
        pipe, without the GIL), at most `ahead` methods in flight. What a batch process with
        one LLVM worker uses to keep two cores busy."""
        pending: deque = deque()
        with ThreadPoolExecutor(max_workers=max(1, self.pool.size)) as waiters:
            def finish_one() -> MethodRun:
                run, future = pending.popleft()
                return self.back(run, future.result()) if future is not None else run
            for rid in rids:
                try:
                    run = self.front(rid, (analyzed or {}).get(rid))
                except Exception:
                    # A bug of ours in this method (not a stage's refusal): the caller must
                    # meet it at this method's turn, not at the turn of a method still in
                    # flight before it (which would be blamed for it), so hand those out first.
                    while pending:
                        yield finish_one()
                    raise
                future = None
                if run.error is None:
                    future = waiters.submit(self._compile, run)
                pending.append((run, future))
                while pending and (len(pending) > ahead or pending[0][1] is None or pending[0][1].done()):
                    yield finish_one()
            while pending:
                yield finish_one()

    def _compile(self, run: MethodRun) -> CodegenResult | BackendError:
        try:
            return self.pool.compile(run.reader.module, self.opt, method=run.name)
        except BackendError as e:
            return e


def eh_methods(asm: Assembly) -> list[int]:
    """Row ids of the methods with IL and at least one EH clause (a bad body is kept: the
    pipeline reports it)."""
    out = []
    for rid in asm.methods_with_il():
        try:
            if asm.body(rid).has_eh:
                out.append(rid)
        except LlilcEhError:
            out.append(rid)
    return out


def summarize(runs: Sequence[MethodRun]) -> dict:
    """Counts a batch reports: ok, failures by stage/kind, validator and image findings."""
    from collections import Counter
    failures = Counter(f"{r.error.stage}/{r.error.kind}" for r in runs if r.error is not None)
    return {"methods": len(runs), "ok": sum(r.ok for r in runs),
            "failures": dict(sorted(failures.items())),
            "validator_findings": sum(len(r.findings) for r in runs),
            "image_findings": sum(len(r.image_findings) for r in runs),
            "differential": dict(sorted(Counter(r.differential.classification for r in runs
                                                if r.differential is not None).items()))}


__all__ = ["STAGES", "MethodRun", "Pipeline", "UnwindKind", "UnwindRecord", "eh_methods", "summarize",
           "unwind_records"]
