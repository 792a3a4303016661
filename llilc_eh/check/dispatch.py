"""Dispatch equivalence: does a native clause table dispatch every exception as the IL says?

Two independent models of one throw, compared event by event:

* `clr_dispatch` -- what CoreCLR 3.1's two-pass model does with a *native* clause table for
  a frame whose ControlPc is `pc` (dotnet/coreclr v3.1.23 src/vm/exceptionhandling.cpp,
  ExceptionTracker::ProcessManagedCallFrame; Documentation/botr/clr-abi.md). On x64 `pc` is
  the call's return address itself, unadjusted (../shared/ALTJIT.md), and a clause covers it
  when TryStart <= pc < TryEnd (ClauseCoversPC: the "length" fields hold end offsets). First
  pass: the clauses in *table order* that cover pc and are not finally/fault -- a typed catch
  tests the thrown class (ClassToken mdTypeRefNil catches everything), a filter is called and
  only 1 selects its handler; the first that says yes is the catcher, the search stops.
  Second pass: the finally/fault clauses covering pc, in table order, run until the catching
  clause is reached (the "limit clause"); then the catch runs, or the exception leaves the
  method. A funclet is its own frame: pc inside a funclet is looked up like any other, so
  the enclosing tries are found through the duplicate clauses (flag 8) covering the funclet
  and the parent frame is skipped -- nothing else to model in one method. A cloned-finally
  clause (0xA, empty try) covers no pc. No clause's meaning is taken from the clause
  generator (clauses/generate.py): this reads a table as the runtime reads it.

* `il_dispatch` -- ECMA-335 I.12.4.2 for the IL offset of the throwing instruction over the
  region tree: the tries enclosing it, innermost outward (a handler's enclosing tries are
  those of its try's parent, never its own try), each try's handlers in clause order
  (mutual protection); catches test the class, filters run, in the first pass; the finally
  and fault handlers of the tries left run in the second pass, then the catching handler.

Events are `Event(kind, clause, verdict)`: `test` (a typed catch's class test, verdict),
`filter` (a filter called, verdict), `cleanup` (a finally or fault runs; RyuJIT turns a
cloned finally into a fault: the same event), `catch` (the handler that catches), `leaves`
(the exception leaves the method). Native events name native clauses; `compare` maps them to
IL clauses (the caller says how: through the funclet model for ours, through the clause
alignment of check.compare for RyuJIT's) and then the two sequences must be equal.

Scenarios (`scenarios`): an exception of exactly each catch class on either chain; a class
no typed catch names (derived from System.Exception: only catches of Exception or Object take
it); that unnamed class with each filter in turn accepting (every other filter declining).
Class tests go through `TypeOracle`, the metadata type hierarchy (JitEE.class_ancestry): a
catch of a base class catches a derived exception.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from ..assembly.body import ClauseKind, ILClause
from ..assembly.native import NativeClause
from ..errors import LlilcEhError
from ..il.regions import RegionKind, RegionTree

CATCH_ALL_TOKEN = 0x01000000        # mdTypeRefNil: the runtime's catch-everything class token
_ROOT_CLASSES = ("System.Exception", "System.Object")
MONITOR = "monitor"                 # the synchronized method's own fault (releases the lock)


class Event(NamedTuple):
    kind: str                        # test | filter | cleanup | catch | leaves
    clause: int | str | None         # clause index on its side (IL or native); MONITOR; None: leaves
    verdict: bool | None = None      # test / filter: said yes

    def __str__(self) -> str:
        if self.kind == "leaves":
            return "leaves"
        c = f"#{self.clause}" if isinstance(self.clause, int) else str(self.clause)
        if self.kind == "filter":
            return f"filter {c}->{int(bool(self.verdict))}"
        if self.kind == "test":
            return f"test {c} {'yes' if self.verdict else 'no'}"
        return f"{self.kind} {c}"


@dataclass(frozen=True)
class Scenario:
    """One thrown exception and the filters' verdicts."""

    exception: int | None            # a catch clause's class token (exactly that class); None: unnamed
    accepting: int | None = None     # the IL clause whose filter returns 1 (all others return 0)

    def __str__(self) -> str:
        exc = f"0x{self.exception:08X}" if self.exception is not None else "unnamed"
        return exc + (f", filter #{self.accepting} accepts" if self.accepting is not None else "")


class TypeOracle:
    """Class tests from the metadata type hierarchy; one per assembly (cached answers)."""

    def __init__(self, ee):
        self.ee = ee
        self._cache: dict[int, tuple[str, ...]] = {}

    def ancestry(self, token: int) -> tuple[str, ...]:
        hit = self._cache.get(token)
        if hit is None:
            if token >> 24 == 0x1B:      # a TypeSpec (generic instantiation, !T): itself only
                hit = (f"typespec 0x{token:08X}",)
            else:
                try:
                    hit = self.ee.class_ancestry(token)
                except LlilcEhError:     # unresolvable: the token is its own identity
                    hit = (f"token 0x{token:08X}",)
            self._cache[token] = hit
        return hit

    def matches(self, catch_token: int | None, scenario: Scenario) -> bool:
        if catch_token is None or catch_token == CATCH_ALL_TOKEN or not catch_token & 0xFFFFFF:
            return True
        named = self.ancestry(catch_token)[0]
        if scenario.exception is None:
            return named.split("]", 1)[-1] in _ROOT_CLASSES
        return named in self.ancestry(scenario.exception)


class Dispatch(NamedTuple):
    events: tuple[Event, ...]
    catcher: int | str | None        # clause index of the catching handler; None: leaves the method


def _covers(c: NativeClause, pc: int) -> bool:
    return c.try_start <= pc < c.try_end


def clr_dispatch(clauses: Sequence[NativeClause], pc: int, scenario: Scenario, oracle: TypeOracle,
                 filter_clause: Callable[[int], int | str | None]) -> Dispatch:
    """CoreCLR's two passes over a native table for a frame at `pc` (module docstring).
    `filter_clause(i)`: the IL clause native clause i is the filter of, to ask the scenario
    whether that filter accepts."""
    events: list[Event] = []
    catcher = None
    for i, c in enumerate(clauses):
        if c.kind in ("finally", "fault") or not _covers(c, pc):
            continue
        if c.kind == "filter":
            ok = scenario.accepting is not None and filter_clause(i) == scenario.accepting
            events.append(Event("filter", i, ok))
        else:
            ok = oracle.matches(c.class_token, scenario)
            events.append(Event("test", i, ok))
        if ok:
            catcher = i
            break
    for i, c in enumerate(clauses):
        if i == catcher:
            break               # the limit clause: terminating handlers past it are outside the catch
        if c.kind in ("finally", "fault") and _covers(c, pc):
            events.append(Event("cleanup", i))
    events.append(Event("catch", catcher) if catcher is not None else Event("leaves", None))
    return Dispatch(tuple(events), catcher)


def enclosing_tries(tree: RegionTree, il_offset: int) -> list:
    """The try regions protecting the instruction at `il_offset`, innermost first."""
    out = []
    r = tree.innermost(il_offset)
    while r is not None:
        if r.kind is RegionKind.TRY:
            out.append(r)
        r = tree.regions[r.parent] if r.parent is not None else None
    return out


def in_filter(tree: RegionTree, il_offset: int) -> bool:
    """Inside a filter part: an exception there is swallowed (the filter declines)."""
    r = tree.innermost(il_offset)
    while r is not None:
        if r.kind is RegionKind.FILTER:
            return True
        r = tree.regions[r.parent] if r.parent is not None else None
    return False


def il_dispatch(tree: RegionTree, il_offset: int, scenario: Scenario, oracle: TypeOracle, *,
                synchronized: bool = False, dropped: frozenset = frozenset()) -> Dispatch:
    """ECMA-335 I.12.4.2 for a throw at `il_offset` (module docstring). `dropped`: IL finally
    clauses the JIT removed as empty (their running is unobservable); `synchronized`: the
    method's lock is released (MONITOR) when the exception leaves it."""
    tries = enclosing_tries(tree, il_offset)
    events: list[Event] = []
    catcher, caught_in = None, len(tries)
    for depth, t in enumerate(tries):
        for h in t.handlers:
            k = tree.regions[h].clauses[0]
            c: ILClause = tree.clauses[k]
            if c.kind is ClauseKind.CATCH:
                ok = oracle.matches(c.class_token, scenario)
                events.append(Event("test", k, ok))
            elif c.kind is ClauseKind.FILTER:
                ok = scenario.accepting == k
                events.append(Event("filter", k, ok))
            else:
                continue
            if ok:
                catcher = k
                break
        if catcher is not None:
            caught_in = depth
            break
    for t in tries[:caught_in + 1]:
        for h in t.handlers:
            k = tree.regions[h].clauses[0]
            if k == catcher:
                break           # a finally sharing the catching try after it is not left
            if tree.clauses[k].kind in (ClauseKind.FINALLY, ClauseKind.FAULT) and k not in dropped:
                events.append(Event("cleanup", k))
    if catcher is None and synchronized:
        events.append(Event("cleanup", MONITOR))
    events.append(Event("catch", catcher) if catcher is not None else Event("leaves", None))
    return Dispatch(tuple(events), catcher)


def scenarios(tree: RegionTree, il_offset: int, native: Sequence[NativeClause] = (),
              pc: int | None = None, il_of: Mapping[int, int | str | None] | None = None) -> list[Scenario]:
    """The scenarios of one call site: the catch classes and filters of the IL chain and of
    the native clauses covering `pc` (so that a native catch the IL lacks is exercised too)."""
    classes: list[int] = []
    filters: list[int] = []
    for t in enclosing_tries(tree, il_offset):
        for h in t.handlers:
            c = tree.clauses[tree.regions[h].clauses[0]]
            if c.kind is ClauseKind.CATCH and c.class_token not in classes:
                classes.append(c.class_token)
            elif c.kind is ClauseKind.FILTER and c.index not in filters:
                filters.append(c.index)
    if pc is not None:
        for i, c in enumerate(native):
            if not _covers(c, pc):
                continue
            if c.kind == "catch" and c.class_token not in classes:
                classes.append(c.class_token)
            elif c.kind == "filter" and il_of is not None:
                k = il_of.get(i)
                if isinstance(k, int) and k not in filters:
                    filters.append(k)
    out = [Scenario(t) for t in classes]
    out.append(Scenario(None))
    out += [Scenario(None, f) for f in filters]
    return out


def map_events(events: Sequence[Event], il_of: Mapping[int, int | str | None]) -> tuple[Event, ...]:
    """Native events with IL clause numbers (`il_of`: native index -> IL index, MONITOR, or
    None when the native clause stands for no IL clause: then '?n', which equals nothing)."""
    out = []
    for e in events:
        if isinstance(e.clause, int):
            k = il_of.get(e.clause)
            out.append(e._replace(clause=k if k is not None else f"?{e.clause}"))
        else:
            out.append(e)
    return tuple(out)


# --------------------------------------------------------------------------------------------
# One method


@dataclass(frozen=True)
class ScenarioResult:
    scenario: Scenario
    native: tuple[Event, ...]        # IL clause numbers (mapped)
    il: tuple[Event, ...]

    @property
    def equal(self) -> bool:
        return self.native == self.il


@dataclass(frozen=True)
class SiteCheck:
    """One call site: where it is, which IL instruction it came from, every scenario."""

    il_offset: int
    callsite: int | None             # our call-site id (the reader's marker); None for RyuJIT
    pc: int                          # the return address, method-relative
    results: tuple[ScenarioResult, ...]
    explanation: str | None = None   # why a mismatch here is no defect of the table (RyuJIT's bounds)

    @property
    def equal(self) -> bool:
        return all(r.equal for r in self.results)

    @property
    def covering(self) -> tuple[str, ...]:
        """What the CLR visits in the scenario that reaches furthest: the unnamed class, every
        filter declining (every test and filter on the chain, every cleanup)."""
        r = next((r for r in self.results if r.scenario == Scenario(None)), None)
        return tuple(str(e) for e in r.native) if r else ()


@dataclass(frozen=True)
class Mismatch:
    method: str
    il_offset: int
    pc: int
    scenario: Scenario
    native: tuple[Event, ...]
    il: tuple[Event, ...]
    explanation: str | None = None

    def __str__(self) -> str:
        return (f"{self.method} IL_{self.il_offset:04x} at {self.pc:#06x} ({self.scenario}): "
                f"CLR [{', '.join(map(str, self.native))}] vs IL [{', '.join(map(str, self.il))}]"
                + (f" -- explained: {self.explanation}" if self.explanation else ""))


@dataclass(frozen=True)
class DispatchCheck:
    """Every checked call site of one method, and what could not be checked, by reason."""

    method: str
    sites: tuple[SiteCheck, ...]
    unchecked: Mapping[str, int] = field(default_factory=dict)

    @property
    def scenarios(self) -> int:
        return sum(len(s.results) for s in self.sites)

    @property
    def mismatches(self) -> list[Mismatch]:
        return [Mismatch(self.method, s.il_offset, s.pc, r.scenario, r.native, r.il, s.explanation)
                for s in self.sites for r in s.results if not r.equal]

    @property
    def unexplained(self) -> list[Mismatch]:
        return [m for m in self.mismatches if m.explanation is None]

    def summary(self) -> dict:
        return {"call_sites": len(self.sites), "scenarios": self.scenarios,
                "mismatches": len(self.mismatches), "unexplained": len(self.unexplained),
                "unchecked": dict(sorted(self.unchecked.items()))}

    def __str__(self) -> str:
        lines = [f"dispatch of {self.method}: {len(self.sites)} call sites, {self.scenarios} scenarios, "
                 f"{len(self.mismatches)} mismatches"
                 + "".join(f"; {n} {why}" for why, n in sorted(self.unchecked.items()))]
        for s in self.sites:
            mark = "equal" if s.equal else "DIFFERS"
            cs = f"#{s.callsite}" if s.callsite is not None else "-"
            lines.append(f"  IL_{s.il_offset:04x}  call-site {cs:>4}  ret {s.pc:#06x}  "
                         f"CLR visits [{', '.join(s.covering)}]  {mark}")
            for r in s.results:
                if not r.equal:
                    lines.append(f"      {r.scenario}: CLR [{', '.join(map(str, r.native))}] "
                                 f"IL [{', '.join(map(str, r.il))}]")
            if s.explanation and not s.equal:
                lines.append(f"      explained: {s.explanation}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {**self.summary(), "sites": [
            {"il_offset": s.il_offset, "callsite": s.callsite, "return_address": s.pc,
             "equal": s.equal, "explanation": s.explanation,
             "scenarios": [{"scenario": str(r.scenario), "clr": [str(e) for e in r.native],
                            "il": [str(e) for e in r.il], "equal": r.equal} for r in s.results]}
            for s in self.sites]}


def check_sites(method: str, tree: RegionTree, clauses: Sequence[NativeClause],
                sites: Sequence[tuple[int, int | None, int]], il_of: Mapping[int, int | str | None],
                oracle: TypeOracle, *, synchronized: bool = False, dropped: frozenset = frozenset(),
                unchecked: Counter | None = None,
                filter_of: Mapping[int, int | str | None] | None = None,
                memo: dict | None = None) -> DispatchCheck:
    """Compare the CLR's dispatch over `clauses` with the IL's at every (il_offset, id, pc).
    `filter_of`: native filter clause -> the IL clause whose filter code it calls (default:
    `il_of`, the handler's). `memo`: (il_offset, pc) -> a site's results, shared by calls
    that pass the same table, tree and maps (RyuJIT's check judges each site before
    checking them all: the same scenarios twice otherwise)."""
    unchecked = Counter() if unchecked is None else unchecked
    filter_of = (filter_of if filter_of is not None else il_of).get
    out = []
    for il_offset, callsite, pc, *why in sites:
        if in_filter(tree, il_offset):
            unchecked["in a filter (swallowed)"] += 1
            continue
        results = memo.get((il_offset, pc)) if memo is not None else None
        if results is None:
            results = []
            for sc in scenarios(tree, il_offset, clauses, pc, il_of):
                native = clr_dispatch(clauses, pc, sc, oracle, filter_of)
                il = il_dispatch(tree, il_offset, sc, oracle, synchronized=synchronized, dropped=dropped)
                results.append(ScenarioResult(sc, map_events(native.events, il_of), il.events))
            results = tuple(results)
            if memo is not None:
                memo[(il_offset, pc)] = results
        out.append(SiteCheck(il_offset, callsite, pc, results, why[0] if why else None))
    return DispatchCheck(method, tuple(out), dict(unchecked))


def tries_without_sites(tree: RegionTree, il_offsets: Sequence[int]) -> int:
    """IL tries that hold no checked call site: nothing in them can throw to a handler here
    (counted, never silently skipped)."""
    return sum(1 for t in tree.tries if not any(t.start <= o < t.end for o in il_offsets))


__all__ = ["CATCH_ALL_TOKEN", "Dispatch", "DispatchCheck", "Event", "MONITOR", "Mismatch", "Scenario",
           "ScenarioResult", "SiteCheck", "TypeOracle", "check_sites", "clr_dispatch", "enclosing_tries",
           "il_dispatch", "map_events", "scenarios", "tries_without_sites"]


# --------------------------------------------------------------------------------------------
# Our tables: call sites from the final image, clauses mapped through the funclet model


def our_clause_map(clauses: Sequence[NativeClause], image, model, *, filters: bool = False) -> dict[int, int | None]:
    """Native clause -> the IL clause of the funclet its handler starts in (the funclet
    model's `clause`), found through the final image's ranges; `filters`: of the funclet its
    FilterOffset starts in instead (the code the runtime calls in the first pass)."""
    out: dict[int, int | None] = {}
    for i, c in enumerate(clauses):
        out[i] = None
        at = c.filter_start if filters else c.handler_start
        if at is None:
            continue
        for r in image.ranges:
            if r.funclet and r.begin <= at < r.end:
                out[i] = model.funclets[r.funclet].clause
                break
    return out


def check_ours(run, oracle: TypeOracle) -> DispatchCheck | None:
    """The dispatch check of a pipeline `MethodRun` that reached its clause table (None
    otherwise). Call sites: every call the final image holds in the main body and the
    handler funclets (`run.placed`: where the relinker put each call and its call-site id),
    each mapped to its IL offset through the funclet model's call sites. Counted, not
    checked: model calls absent from the code (LLVM removed them), calls in filters (an
    exception there is swallowed), calls LLVM made itself (no IL offset), tries holding no
    call site."""
    if run.clauses is None or run.placed is None or run.model is None or run.il is None:
        return None
    tree = run.il.regions
    model = run.model
    by_id = {c.callsite: c for c in model.calls if c.callsite is not None}
    unchecked: Counter = Counter()
    sites, seen = [], set()
    for p in run.placed.calls:
        call = by_id.get(p.callsite) if p.callsite is not None else None
        if call is None:
            unchecked["calls LLVM made itself"] += 1
            continue
        seen.add(p.callsite)
        if call.il_offset is None:
            unchecked["calls without an IL offset"] += 1
            continue
        sites.append((call.il_offset, p.callsite, p.return_address))
    tail = {n for f in (run.recovered.functions if run.recovered is not None else ())
            for c in f.calls if c.return_offset is None for n in c.callsites}
    for c in model.calls:
        if c.callsite is None or c.callsite in seen:
            continue
        if model.funclets[c.funclet].kind.value == "filter":
            unchecked["in a filter (swallowed)"] += 1
        elif c.callsite in tail:
            unchecked["calls LLVM turned into tail jumps (the frame is gone)"] += 1
        else:
            unchecked["calls LLVM removed (folded checks, dead code)"] += 1
    # Outlined filters are functions of their own, outside the model's calls: an exception
    # raised in one is swallowed (the filter declines), so their calls are counted only.
    in_filters = sum(1 for r in run.image.ranges if r.kind.value == "filter" and run.recovered is not None
                     for seg in r.segments for c in run.recovered.function(seg.function).calls
                     if seg.source.start <= c.offset < seg.source.end and c.return_offset is not None)
    if in_filters:
        unchecked["in a filter (swallowed)"] += in_filters
    empty = tries_without_sites(tree, [s[0] for s in sites])
    if empty:
        unchecked["tries without a call site"] = empty
    # A finally or fault LLVM deleted as empty (it only updated dead locals: SimplifyCFG's
    # removeEmptyCleanup) has no code: running it is unobservable, the IL side skips it.
    present = {model.funclets[r.funclet].clause for r in run.image.ranges if r.funclet}
    dropped = frozenset(f.clause for f in model.funclets
                        if f.clause is not None and f.kind.value in ("finally", "fault")
                        and f.clause not in present)
    if dropped:
        unchecked["empty cleanups LLVM removed (not expected to run)"] = len(dropped)
    clauses = run.clauses.clauses
    il_of = our_clause_map(clauses, run.image, model)
    return check_sites(run.name, tree, clauses, sites, il_of, oracle, unchecked=unchecked, dropped=dropped,
                       filter_of=our_clause_map(clauses, run.image, model, filters=True))


# --------------------------------------------------------------------------------------------
# RyuJIT's tables: ReadyToRun bodies, call sites from capstone, IL offsets from DEBUG_INFO


_CS = None


def _disassembler():
    """One capstone decoder for every body of the process: making a `Cs` costs as much as
    decoding a small body (CoreLib has 1,228 R2R bodies with EH), and `disasm_lite` keeps no
    state between calls (skipdata and mode are all it is set up with)."""
    global _CS
    if _CS is None:
        import capstone
        md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        md.skipdata = True
        _CS = md
    return _CS


def code_range_finder(code_ranges: Sequence[tuple[int, int]]) -> Callable[[int], int | None]:
    """offset -> the index of the first of `code_ranges` ([begin, end)) holding it, or None.
    The check asks it for every call and every debug-info entry (400,000 times per CoreLib
    with a scan of the ranges): disjoint ranges are found by bisection over their sorted
    starts; overlapping ones (a damaged image) keep the scan in the given order, so the
    answer is the first holder either way."""
    order = sorted(range(len(code_ranges)), key=lambda i: code_ranges[i])
    if any(code_ranges[a][1] > code_ranges[b][0] for a, b in zip(order, order[1:])):
        return lambda offset: next((i for i, (b, e) in enumerate(code_ranges) if b <= offset < e), None)
    starts = [code_ranges[i][0] for i in order]

    def find(offset: int) -> int | None:
        j = bisect.bisect_right(starts, offset) - 1
        if j < 0:
            return None
        i = order[j]
        return i if offset < code_ranges[i][1] else None
    return find


def r2r_calls(asm, m) -> list[tuple[int, int, int | None, int | None]]:
    """(call start, return address, direct target, cell) of every call instruction of a
    ReadyToRun body, method-relative (the cell: the address a `call [rip+d]` reads, an import
    cell; None when the call goes through a register). Each RUNTIME_FUNCTION range is decoded
    on its own (no desync across padding)."""
    md = _disassembler()
    out = []
    base = m.main.begin_rva
    for rf in m.runtime_functions:
        start = asm.rva_to_offset(rf.begin_rva)
        if start is None:
            continue
        code = bytes(asm.data[start:start + rf.size])
        for addr, size, mnemonic, ops in md.disasm_lite(code, rf.begin_rva - base):
            if mnemonic != "call":
                continue
            target = cell = None
            if ops.startswith("0x"):
                target = int(ops, 16)
            elif "[rip + 0x" in ops:
                cell = addr + size + int(ops.split("[rip + ", 1)[1].rstrip("]"), 16)
            elif "[rip - 0x" in ops:
                cell = addr + size - int(ops.split("[rip - ", 1)[1].rstrip("]"), 16)
            out.append((addr, addr + size, target, cell))
    return out


def cloned_finally_candidates(il_method, il_offset: int, statement_starts: Sequence[int], callee,
                              funclet_callees: Mapping[int, set]) -> list[int]:
    """The IL finallys a RyuJIT call the bounds put at `il_offset` may be a normal-path copy
    of (RyuJIT clones finallys and attributes the copy to the statement that leaves, or to
    the try's first statement): the finallys of the tries around `il_offset` and those a
    `leave` of its statement exits ([il_offset, the next IL offset the bounds name)), each
    only when its handler funclet makes a call to the very same callee (`callee`: a direct
    target or an import cell; `funclet_callees`: IL clause -> the callees of its funclet's
    calls) -- the structural evidence that this call is a copy of that finally's code.
    Innermost first."""
    if callee is None:
        return []
    tree = il_method.regions
    i = bisect.bisect_right(statement_starts, il_offset)
    end = statement_starts[i] if i < len(statement_starts) else il_method.body.code_size
    points = [il_offset] + [ins.offset for ins in il_method.instructions
                            if il_offset <= ins.offset < end and ins.op.name in ("leave", "leave.s")]
    out: list[int] = []
    for at in points:
        for t in enclosing_tries(tree, at):
            for h in t.handlers:
                k = tree.regions[h].clauses[0]
                c = tree.clauses[k]
                if c.kind is ClauseKind.FINALLY and callee in funclet_callees.get(k, ()) \
                        and c.handler_start not in out:
                    out.append(c.handler_start)
    return out


def ryujit_clause_maps(il_method, native, comparison, bounds, *, synchronized: bool = False
                       ) -> tuple[dict, dict, frozenset]:
    """Native clause -> IL clause for RyuJIT's table, by where its handler's code comes from:
    the IL offsets the debug info bounds give inside [HandlerStart, HandlerEnd), each in the
    innermost IL handler of the clause's kind (a finally turned into a fault stays a
    cleanup); a filter clause's filter code likewise from its FilterOffset. Cloned-finally
    markers stand for no clause (they cover nothing); the synchronized method's fault that no
    IL handler's code explains is MONITOR. Where the bounds name no IL offset in a handler
    (common: a catch funclet is prolog, NO_MAPPING and epilog), check.compare's alignment
    decides (it aligns in order and can pair an empty finally RyuJIT removed with the next
    one's fault: the bounds do not), for a duplicate that of its primary. Also the IL finallys RyuJIT removed as empty
    (their running is unobservable): IL cleanups no native clause stands for, as long as
    there are no more of them than check.compare counts removed."""
    from .compare import REMOVED
    tree = il_method.regions
    clauses = native.clauses
    entries = bounds.entries if bounds is not None else ()
    aligned = dict((i, k) for k, i in comparison.matches)

    def from_code(start: int, end: int, kinds) -> int | None:
        for e in entries:
            if start <= e.native_offset < end and e.il_offset >= 0:
                r = tree.innermost(e.il_offset)
                while r is not None and not (r.kind in kinds):
                    r = tree.regions[r.parent] if r.parent is not None else None
                if r is not None:
                    return r.clauses[0]
        return None

    handler_kinds = {"catch": (RegionKind.CATCH,), "filter": (RegionKind.FILTER_HANDLER,),
                     "finally": (RegionKind.FINALLY, RegionKind.FAULT), "fault": (RegionKind.FINALLY, RegionKind.FAULT)}
    il_of: dict[int, int | str | None] = {}
    filter_of: dict[int, int | str | None] = {}
    for i, c in enumerate(clauses):
        if c.is_cloned_finally:
            il_of[i] = None
            continue
        k = from_code(c.handler_start, c.handler_end, handler_kinds[c.kind])
        if k is None:
            k = aligned.get(i)
        if k is None and c.is_duplicate:
            k = next((aligned.get(j) for j, p in enumerate(clauses) if not p.is_duplicate
                      and (p.handler_start, p.handler_end) == (c.handler_start, c.handler_end)), None)
        if k is None and synchronized and c.kind == "fault" and not c.is_duplicate:
            k = MONITOR
        il_of[i] = k
        if c.filter_start is not None:
            f = from_code(c.filter_start, c.handler_start, (RegionKind.FILTER,))
            filter_of[i] = f if f is not None else k
    mapped = {k for k in il_of.values() if isinstance(k, int)}
    unmapped = [k for k, c in enumerate(il_method.body.clauses)
                if k not in mapped and c.kind in (ClauseKind.FINALLY, ClauseKind.FAULT)]
    removed = sum(1 for fate in comparison.il_fates if fate == REMOVED)
    dropped = frozenset(unmapped) if len(unmapped) <= removed else frozenset()
    return il_of, filter_of, dropped


CLONED = "of them: calls in a finally's normal-path copy (same callee as its funclet)"
MISPLACED = "the debug info misplaces the call: IL_{:04x}, {}, dispatches alike"


def _judge(il_method, il: int, statements, ret: int, callee, funclet_callees, clauses, il_of, filter_of,
           oracle, synchronized: bool, dropped, unchecked: Counter, same_code=None,
           nearby: Sequence[int] = (), memo: dict | None = None) -> tuple[int, str | None]:
    """The IL offset to judge a RyuJIT call at, and an explanation should it still differ.
    The bounds' own offset if it dispatches alike; else a finally this call is a normal-path
    copy of (`cloned_finally_candidates`: structural evidence only; `same_code(k)`: the
    finally's try lies in the code range -- main body or funclet -- holding the call, where
    its normal-path copy must be), counted. Otherwise the
    bounds' offset stays and the call is a mismatch -- *explained* when an IL offset the call
    may really come from dispatches alike: one inside its statement as the bounds delimit it
    ([offset, the next IL offset they name): sparse bounds skip a try's first statement), or
    another statement the bounds name in the same code range (`nearby`: main body or
    funclet; code that loop cloning or tail duplication moved keeps the last entry before
    it); weakly, any region of the method (where the bounds name no statement in the region
    that covers the call: the explanation says WEAK, and the counts keep it apart);
    unexplained otherwise."""
    tree = il_method.regions

    def alike(k: int) -> bool:
        return not check_sites("", tree, clauses, [(k, None, ret)], il_of, oracle, synchronized=synchronized,
                               dropped=dropped, filter_of=filter_of, memo=memo).mismatches

    if alike(il):
        return il, None
    for k in cloned_finally_candidates(il_method, il, statements, callee, funclet_callees):
        if same_code is not None and not same_code(k):
            continue
        if alike(k):
            unchecked[CLONED] += 1
            return k, None
    tried = {tree.innermost(il).index}
    i = bisect.bisect_right(statements, il)
    end = statements[i] if i < len(statements) else il_method.body.code_size
    inside = [ins.offset for ins in il_method.instructions if il < ins.offset < end]
    anywhere = [r.start for r in tree.regions if r.kind is not RegionKind.ROOT] + [0]
    for where, offsets in (("inside the statement the bounds name", inside),
                           ("a statement the bounds name in the same code range", nearby),
                           ("WEAK: only some region of the method -- the bounds place no statement there", anywhere)):
        for k in offsets:
            r = tree.innermost(k).index
            if r not in tried:
                tried.add(r)
                if alike(k):
                    return il, MISPLACED.format(k, where)
    return il, None


def check_ryujit(asm, m, bounds, il_method, comparison, oracle: TypeOracle, *,
                 synchronized: bool = False) -> DispatchCheck:
    """The dispatch check of one RyuJIT ReadyToRun body (`m`, an R2RMethod) against its IL
    (`il_method`, analysed): every call instruction, its IL offset from the body's debug
    info bounds (`bounds`, None: the image keeps none for it), judged by `_judge`. Counted,
    not checked: calls in code the bounds map to no IL offset (prolog, epilog, NO_MAPPING:
    cloned finallys, throw-helper blocks), calls at an IL offset that starts no instruction,
    RyuJIT's call-finally calls of its own finally funclets."""
    unchecked: Counter = Counter()
    memo: dict = {}          # check_sites' results per (IL offset, pc): _judge's and the final check's
    calls = r2r_calls(asm, m)
    sites = []
    starts = {i.offset for i in il_method.instructions}
    tree = il_method.regions
    base = m.main.begin_rva
    funclets = [(f.begin_rva - base, f.end_rva - base) for f in m.funclets]
    code_ranges = [(0, m.main.end_rva - base)] + funclets

    range_of = code_range_finder(code_ranges)
    # the IL offsets the bounds name in each code range (main body, each funclet): `nearby`
    nearby_in: dict[int | None, list[int]] = {}
    for e in bounds.entries if bounds is not None else ():
        if e.il_offset >= 0:
            nearby_in.setdefault(range_of(e.native_offset), []).append(e.il_offset)
    nearby_in = {h: sorted(set(offsets)) for h, offsets in nearby_in.items()}
    statements = sorted({e.il_offset for e in bounds.entries if e.il_offset >= 0}) if bounds is not None else []
    il_of, filter_of, dropped = ryujit_clause_maps(il_method, m.native, comparison, bounds,
                                                   synchronized=synchronized)
    funclet_callees: dict[int, set] = {}
    for i, c in enumerate(m.native.clauses):
        k = il_of.get(i)
        if isinstance(k, int) and c.kind in ("finally", "fault") and not c.is_duplicate:
            funclet_callees.setdefault(k, set()).update(
                t if t is not None else cell for s0, _, t, cell in calls
                if c.handler_start <= s0 < c.handler_end and (t is not None or cell is not None))
    for start, ret, target, cell in calls:
        il = bounds.il_offset_at(start) if bounds is not None else None
        if target is not None and any(b <= target < e for b, e in funclets):
            # RyuJIT's call-finally: the finally funclet runs in its own frame, whose
            # duplicate clauses dispatch what it throws; the call's return address is no
            # throw point of this frame
            unchecked["calls of the body's own finally funclets (call-finally)"] += 1
        elif il is None:
            unchecked["calls without an IL offset in the debug info"] += 1
        elif il not in starts:
            unchecked["calls at an IL offset that starts no instruction"] += 1
        else:
            holder = range_of(start)

            def same_code(handler_start: int) -> bool:
                k = next((c.index for c in il_method.body.clauses if c.handler_start == handler_start), None)
                return any(range_of(c.try_start) == holder for i, c in enumerate(m.native.clauses)
                           if il_of.get(i) == k and not c.is_duplicate and not c.is_cloned_finally)

            nearby = nearby_in.get(holder, [])
            il, why = _judge(il_method, il, statements, ret, target if target is not None else cell,
                             funclet_callees, m.native.clauses, il_of, filter_of, oracle, synchronized,
                             dropped, unchecked, same_code, nearby, memo)
            sites.append((il, None, ret, why))
    empty = tries_without_sites(tree, [s[0] for s in sites])
    if empty:
        unchecked["tries without a call site"] = empty
    if dropped:
        unchecked["empty finallys RyuJIT removed (not expected to run)"] = len(dropped)
    return check_sites(il_method.name, tree, m.native.clauses, sites, il_of, oracle,
                       synchronized=synchronized, dropped=dropped, unchecked=unchecked, filter_of=filter_of,
                       memo=memo)
