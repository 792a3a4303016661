"""The clause generator: funclet model + placed code → the CORINFO_EH_CLAUSE table.

    generate_clauses(model, placed, profile="coreclr-psp") -> NativeMethod
    encode_clauses(native) -> bytes        decode_clauses(data) -> tuple[NativeClause, ...]

`placed` (`PlacedCode`) says where, in ONE code layout, everything of the method is:
the main body, each funclet of the model (by model index; filters included) and every
machine call with its call-site identity N (the reader's marker, DESIGN decision 8), its
start and its return address, all method-relative. `placed_from_recovered` builds it from
LLVM's own layout (the object as LLVM emitted it); the relinker builds it for the final
image. The generator knows nothing of LLVM: it walks the model's dispatch chains over the
placed calls, as `emitCLRExceptionTable` walks LLVM's states over the machine code.

What the runtime looks up, and so what a try range is
-----------------------------------------------------
Every exception our code raises comes out of a call: implicit exceptions are explicit calls
to throw helpers (decision 6), `throw` is a helper call, and there are no faulting
instructions. So the only code offsets the runtime ever looks up in our clauses are
return addresses: on x64 the unwinder reports a non-leaf frame's ControlPc as the return
address of its call, and CoreCLR x64 does not adjust it (the `ControlPCForEHSearch -=
STACKWALK_CONTROLPC_ADJUST_OFFSET` step is ADJUST_PC_UNWOUND_TO_CALL, ARM/ARM64 only);
a clause covers it when TryStartPC <= offset < TryEndPC (ClauseCoversPC). Hence:

    a call [start, return) protected by a try covers (start, return], i.e. [start+1, return+1)

and a try range is [first call's start + 1, last call's return + 1) over a run of calls.
This is LLVM's own convention (its EH labels + 1: "the IP associated with a call ... is
the IP of the next instruction"; "+1 to the start ... so that the ranges reported for all
clauses are disjoint"), tightened to the call instructions: LLVM's begin label sits before
the argument set-up. The half-open call ranges (start, return] of distinct calls never
overlap even when one call starts exactly at another's return address, so runs of
different tries are disjoint or nested and no return address is ever claimed by a try
that does not protect it. RyuJIT gets the same guarantee differently: its try ranges are
whole blocks and it puts a `nop` after a call that ends a try; LLVM's Win64 target does
likewise (`call; nop` before an EH label), so both readings agree on every return address.

Primaries
---------
One handler funclet per EH state (copies are distinct states). A call protects a handler
when the handler is on its dispatch chain (`FuncletModel.protecting`: the invoke's state,
then `next` links). A handler's *try region* is the code the pad sits in (the parent
funclet: the main body, or the handler funclet holding the try). The primary clauses of a
handler are the maximal runs, in layout order, of its try region's calls that it
protects; a call it does not protect -- a call of another try, a plain call, a call LLVM
made itself that may throw -- ends a run, and the next run is another clause with the same
handler (a *split try*, which the validator accepts: one handler, disjoint tries in one code
region). That is LLVM's rule (one clause per maximal run of an EH state; a may-throw call
to the caller closes every open clause), done slightly better: calls that raise nothing in
this frame do not split a run -- tail jumps (the frame is gone when the callee throws) and
LLVM's own `__chkstk`/`memcpy`-family calls (`NON_THROWING_CALLEES`), where LLVM's walk
splits. Non-contiguity arises already at O0 (the normal-path copy of a finally, which the
finally does not protect, laid out between two halves of its try, as the reader creates the
blocks) and more at O2, where block placement moves a try's cold blocks past code of
another try. Calls in handler funclets nested inside the try are not the primary's: they
are the duplicates' business (below).

Kinds: catch (flags 0, the class token), filter (flag 1, FilterOffset = the FILTER funclet's
start, which must end where the handler starts), finally (2), fault (4).

Order (decision 10): inner before outer, then lower before higher -- a topological order
of "a is nested in b" (b's try strictly contains a's, in one region; or a's try lies in
b's handler funclet or in a funclet nested in it; or identical tries where b comes later
on a's dispatch chain: mutual-protect handlers in handler order, and distinct tries that
protect the very same calls, the inner first), taking among the free clauses the lowest
try first. Clauses of one try stay consecutive.

Duplicates (coreclr-psp, coreclr-net10)
---------------------------------------
A handler funclet runs in its own frame; when an exception escapes it, CoreCLR looks for
the enclosing handlers among the clauses covering the funclet's own code (and skips the
parent frame's). So every handler funclet F that lies inside an enclosing try gets, for
each handler of that try chain -- `chain(enclosing state of F)`, inner to outer -- a
DUPLICATED (8) copy of the handler's clause whose try is all of F (RyuJIT's genReportEH
rule, which the validator's `duplicate-coverage` judges). LLVM instead duplicates only the
runs of F's invokes; the whole-funclet form covers the same return addresses (every call
in F unwinds, through F's own tries, to that chain: checked here) and is what the runtime
has been fed for years. Duplicates come after all primaries, funclets in layout order,
each funclet's duplicates inner to outer. No duplicates for filter funclets (an exception
never escapes a filter).

Profiles
--------
`coreclr-psp`: as above, no SAMETRY (the .NET Core 3.1 runtime we run knows no such bit).
`coreclr-net10`: as above plus SAMETRY (0x10) on each clause that repeats the previous
clause's try for another handler of the same try (the managed EH relies on it).
`nativeaot`: SAMETRY, no duplicate clauses (NativeAOT finds a funclet's enclosing clauses
from the clause order and SAMETRY).

What LLVM removes
-----------------
At O2 LLVM deletes calls (a folded implicit-exception check, code behind a folded branch),
merges calls (tail merging: one `call THROW` for several markers) and duplicates them (tail
duplication): the generator works on the calls that are there, each with the chain of its
marker(s). LLVM also deletes an empty cleanup (a finally or fault that only updates dead
locals: SimplifyCFG's removeEmptyCleanup), turning invokes that reached only it into plain
calls: such a handler has no code, protects nothing and drops out of every chain. A catch or
filter handler without code while a call reaches it is an error.

Layouts
-------
`placed_from_image(model, image, recovered)` is the real input: the final image
(`backend.image.link_final_image`) -- main body, then the funclets in the model's layout,
each filter right before its handler -- with every call moved where the relinker put it.
`placed_from_recovered(model, recovered, coff)` reads LLVM's own layout (the object as LLVM
emitted it), which the LLVM differential needs: LLVM's own table describes that layout. In
it a filter function lies after all funclets, nowhere near its handler, so a filter clause
there cannot be valid. Both layouts identify machine funclets with one matcher, the final
image's (`backend.match.match_funclets`: call-site markers, LLVM's table, dispatch chains).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from construct import ConstructError

from ..assembly.native import ClauseFlags, CodeRange, NativeClause, NativeMethod
from ..backend.codegen import object_symbol
from ..backend.coff import CoffObject
from ..backend.image import FinalImage, funclet_match
from ..backend.recover import CallSite as MachineCall
from ..backend.recover import RecoveredCode
from ..errors import ClauseError
from ..funclets.model import CallSite, FuncletKind, FuncletModel
from ..reader.helpers import IMPLICIT_CHECKS
from .structs import CLAUSE_SIZE, ClauseTable
from .validate import DEFAULT_PROFILE, Profile

# Calls LLVM makes on its own that raise no managed exception: they need not end a try's run.
NON_THROWING_CALLEES = frozenset({"__chkstk", "memcpy", "memset", "memmove"})
# Throw helpers of the implicit checks: a missing call to one of them is a check LLVM folded.
CHECK_HELPERS = frozenset(c.helper for c in IMPLICIT_CHECKS.values())
FUNCLET_ALIGNMENT = 16    # placed_in_clr_order: funclet starts, as LLVM aligns functions


class PlacedCall(NamedTuple):
    """One machine call in the placed code: (N, call start, return address)."""

    callsite: int | None      # the model call's marker N; None: a call of LLVM's own that may throw
    start: int
    return_address: int


@dataclass(frozen=True)
class PlacedCode:
    """The method's code in one layout, method-relative offsets (see the module docstring)."""

    main: CodeRange
    funclet_ranges: Mapping[int, CodeRange]      # model funclet index -> its code (filters too)
    calls: tuple[PlacedCall, ...]                # every call of the main body and the handler funclets

    def __post_init__(self):
        object.__setattr__(self, "funclet_ranges", dict(self.funclet_ranges))
        object.__setattr__(self, "calls", tuple(PlacedCall(*c) for c in self.calls))

    def __str__(self) -> str:
        lines = [f"main [{self.main.start:#06x}, {self.main.end:#06x})"]
        lines += [f"funclet {i} [{r.start:#06x}, {r.end:#06x})"
                  for i, r in sorted(self.funclet_ranges.items(), key=lambda x: (x[1].start, x[0]))]
        lines += [f"call {'#' + str(c.callsite) if c.callsite is not None else '(LLVM)':>6} "
                  f"[{c.start:#06x}, {c.return_address:#06x})" for c in self.calls]
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# The generator


@dataclass(frozen=True)
class _Call:
    start: int
    ret: int
    region: int                 # model funclet index of the code holding it (0: main body)
    chain: tuple[int, ...]      # the states it may reach, in dispatch order
    ids: tuple[int | None, ...]


@dataclass
class _Primary:
    state: int
    region: int
    try_start: int
    try_end: int
    calls: tuple[_Call, ...]
    clause: NativeClause | None = field(default=None, repr=False)


def generate_clauses(model: FuncletModel, placed: PlacedCode, profile: Profile | str = DEFAULT_PROFILE) -> NativeMethod:
    """The clause table of `model`'s method as laid out by `placed` (module docstring)."""
    profile = Profile(profile)
    g = _Generator(model, placed)
    primaries = g.order(g.primaries())
    clauses = [g.clause(p) for p in primaries]
    if profile is not Profile.CORECLR_PSP:
        clauses = _mark_same_try(g, primaries, clauses)
    if profile.duplicate_clauses:
        clauses += g.duplicates(primaries)
    ranges = sorted(set(placed.funclet_ranges.values()), key=lambda r: (r.start, r.end))
    return NativeMethod(placed.main, tuple(ranges), tuple(clauses))


class _Generator:
    def __init__(self, model: FuncletModel, placed: PlacedCode):
        self.model, self.placed = model, placed
        self.where = model.parent
        self.regions = sorted([(placed.main.start, placed.main.end, 0)]
                              + [(r.start, r.end, i) for i, r in placed.funclet_ranges.items()])
        # LLVM deletes an empty cleanup (a finally or fault whose code does nothing that
        # lasts: SimplifyCFG's removeEmptyCleanup) and unwinds past it; such a handler has
        # no code and protects nothing, so it drops out of every dispatch chain. A catch
        # or filter handler cannot vanish that way: one missing is an error (range_of).
        self.removed = {s.number for s in model.states if s.funclet not in placed.funclet_ranges
                        and s.kind in (FuncletKind.FINALLY, FuncletKind.FAULT)}
        self.state_chain = {s.number: self._chain(s.number) for s in model.states}
        self.calls = self._calls()

    def _chain(self, state: int) -> tuple[int, ...]:
        return tuple(x.number for x in self.model.chain(state) if x.number not in self.removed)

    def fail(self, reason: str, offset: int | None = None, kind: str = "inconsistent") -> ClauseError:
        return ClauseError(reason, method=self.where, offset=offset, kind=kind)

    def region_at(self, offset: int) -> int | None:
        hits = [i for s, e, i in self.regions if s <= offset < e]
        return hits[0] if hits else None

    def range_of(self, funclet: int) -> CodeRange:
        if funclet == 0:
            return self.placed.main
        r = self.placed.funclet_ranges.get(funclet)
        if r is None:
            raise self.fail(f"{self.model.funclets[funclet].label} (funclet {funclet}) has no code in the placed "
                            f"layout, but a call reaches it", kind="handler-without-code")
        return r

    def try_region(self, state: int) -> int:
        return self.model.funclets[self.model.states[state].funclet].parent

    # -- the calls, with their dispatch chains -----------------------------------------------

    def _calls(self) -> list[_Call]:
        model = self.model
        by_id = {c.callsite: c for c in model.calls if c.callsite is not None}
        merged: dict[tuple[int, int], list[int | None]] = defaultdict(list)
        for call in self.placed.calls:
            merged[(call.start, call.return_address)].append(call.callsite)
        out = []
        for (start, ret), ids in sorted(merged.items()):
            region = self.region_at(start)
            if region is None or self.region_at(ret - 1) != region:
                raise self.fail(f"the call [{start:#x}, {ret:#x}) lies in no code range of the method", start,
                                "call-outside-code")
            if model.funclets[region].kind is FuncletKind.FILTER:
                continue   # filters hold no tries; their calls are numbered in the filter's own space
            chains = set()
            for n in ids:
                if n is None:
                    chains.add(())
                    continue
                c = by_id.get(n)
                if c is None:
                    raise self.fail(f"call-site marker {n} names no call of the model", start, "unknown-callsite")
                if c.funclet != region:
                    raise self.fail(f"call #{n} ({c.where}) is placed in funclet {region}, the model has it in "
                                    f"funclet {c.funclet}", start, "callsite-region")
                chains.add(self.state_chain.get(c.state, ()) if c.invoke else ())
            if len(chains) > 1:
                raise self.fail(f"calls {sorted(ids, key=str)} share the machine call at {start:#x} but reach "
                                f"different handlers: {sorted(chains)}", start, "merged-calls-disagree")
            out.append(_Call(start, ret, region, chains.pop(), tuple(ids)))
        return out

    # -- primaries ----------------------------------------------------------------------------

    def primaries(self) -> list[_Primary]:
        by_region: dict[int, list[_Call]] = defaultdict(list)
        for c in self.calls:
            by_region[c.region].append(c)
        out = []
        for region, calls in by_region.items():
            self._check_chains(region, calls)
            local = sorted({s for c in calls for s in c.chain if self.try_region(s) == region})
            for state in local:
                run: list[_Call] = []
                for c in calls + [None]:
                    if c is not None and state in c.chain:
                        run.append(c)
                        continue
                    if run:
                        out.append(self._primary(state, region, run))
                        run = []
        return out

    def _primary(self, state: int, region: int, run: list[_Call]) -> _Primary:
        code = self.range_of(region)
        start, end = run[0].start + 1, run[-1].ret + 1
        if end > code.end:
            raise self.fail(f"the call at {run[-1].start:#x} ends its code range: its return address "
                            f"{run[-1].ret:#x} is outside it", run[-1].start, "call-ends-code")
        return _Primary(state, region, start, end, tuple(run))

    def _check_chains(self, region: int, calls: list[_Call]) -> None:
        """Every call of a region reaches, past the region's own tries, exactly the handlers an
        exception escaping the region reaches: what the duplicates (whole funclet) assume."""
        f = self.model.funclets[region]
        outer = () if region == 0 else self.state_chain.get(self.model.states[f.state].enclosing, ()) \
            if f.state is not None else ()
        for c in calls:
            rest = tuple(s for s in c.chain if self.try_region(s) != region)
            local = c.chain[:len(c.chain) - len(rest)]
            if rest != outer or any(self.try_region(s) != region for s in local):
                raise self.fail(f"the call at {c.start:#x} in {f.label} reaches {list(c.chain)}; an exception "
                                f"leaving {f.label} reaches {list(outer)}", c.start, "chain-mismatch")

    def order(self, primaries: list[_Primary]) -> list[_Primary]:
        """Inner before outer, then lower before higher: a topological sort of both relations
        (lower-before-higher binds unrelated tries of one code region only), lowest try first.
        The handlers of one try (mutual protection) are one unit of the sort, so they stay
        consecutive in handler order even when a clause nested in one of their handlers must
        precede that handler (SAMETRY links a clause to the one right before it)."""
        n = len(primaries)
        inside = {i: self._funclet_and_descendants(self.model.states[p.state].funclet)
                  for i, p in enumerate(primaries)}
        key = lambda i: (primaries[i].try_start, -primaries[i].try_end,
                         -len(self.state_chain[primaries[i].state]), primaries[i].state, i)
        unit = list(range(n))               # primary -> the first primary of its try's unit
        for a, pa in enumerate(primaries):
            for b in range(a + 1, n):
                if self._same_try(pa, primaries[b]):
                    unit[b] = unit[a] = min(unit[a], unit[b])
        members: dict[int, list[int]] = defaultdict(list)
        for i in sorted(range(n), key=key):
            members[unit[i]].append(i)
        before: dict[int, set[int]] = defaultdict(set)      # unit b -> the units that must precede it
        for a, pa in enumerate(primaries):
            for b, pb in enumerate(primaries):
                if unit[a] != unit[b] and (self._nested(pa, pb, inside[b])
                                           or (pa.region == pb.region and pa.try_end <= pb.try_start)):
                    before[unit[b]].add(unit[a])
        after: dict[int, list[int]] = defaultdict(list)
        for b, preds in before.items():
            for a in preds:
                after[a].append(b)
        waiting = {b: len(preds) for b, preds in before.items()}
        heap = [key(members[u][0]) for u in members if not waiting.get(u)]
        heapq.heapify(heap)
        out = []
        while heap:
            u = unit[heapq.heappop(heap)[-1]]
            out += [primaries[i] for i in members[u]]
            for b in after[u]:
                waiting[b] -= 1
                if waiting[b] == 0:
                    heapq.heappush(heap, key(members[b][0]))
        if len(out) != n:
            raise self.fail("the primary clauses' nesting has a cycle", kind="nesting-cycle")
        return out

    def _same_try(self, a: _Primary, b: _Primary) -> bool:
        """Are a and b handlers of one IL try (mutual protection), over the same calls?"""
        return ((a.try_start, a.try_end, a.region) == (b.try_start, b.try_end, b.region)
                and a.state != b.state and b.state in self.model.states[a.state].try_states)

    def _nested(self, a: _Primary, b: _Primary, b_funclets: set[int]) -> bool:
        """Must primary a come before primary b?"""
        if a.region in b_funclets:
            return True
        if a.region != b.region or not (b.try_start <= a.try_start and a.try_end <= b.try_end):
            return False
        if (a.try_start, a.try_end) != (b.try_start, b.try_end):
            return True
        return b.state in self.state_chain[a.state] and a.state != b.state

    def _funclet_and_descendants(self, funclet: int) -> set[int]:
        """A handler funclet, every funclet nested in it, and its filter."""
        out, todo = set(), [funclet]
        while todo:
            f = todo.pop()
            out.add(f)
            todo.extend(g.index for g in self.model.children(f))
        filt = self.model.funclets[funclet].filter
        if filt is not None:
            out.add(filt)
        return out

    def clause(self, p: _Primary) -> NativeClause:
        model = self.model
        f = model.funclets[model.states[p.state].funclet]
        handler = self.range_of(f.index)
        if f.kind is FuncletKind.FILTER_HANDLER:
            flags, extra = ClauseFlags.FILTER, self._filter_start(f.filter, handler)
        elif f.kind is FuncletKind.CATCH:
            flags, extra = ClauseFlags.NONE, f.class_token or 0
        elif f.kind is FuncletKind.FINALLY:
            flags, extra = ClauseFlags.FINALLY, 0
        elif f.kind is FuncletKind.FAULT:
            flags, extra = ClauseFlags.FAULT, 0
        else:
            raise self.fail(f"state {p.state} is {f.label}, no handler", kind="not-a-handler")
        p.clause = NativeClause(flags, p.try_start, p.try_end, handler.start, handler.end, extra)
        return p.clause

    def _filter_start(self, filter_index: int | None, handler: CodeRange) -> int:
        if filter_index is None or filter_index not in self.placed.funclet_ranges:
            raise self.fail(f"the filter of the handler at {handler.start:#x} has no code in the placed layout",
                            handler.start, "filter-without-code")
        return self.placed.funclet_ranges[filter_index].start

    # -- duplicates ---------------------------------------------------------------------------

    def duplicates(self, primaries: list[_Primary]) -> list[NativeClause]:
        model = self.model
        first = {}
        for p in primaries:
            first.setdefault(p.state, p.clause)
        out = []
        handler_funclets = sorted((r.start, r.end, i) for i, r in self.placed.funclet_ranges.items()
                                  if model.funclets[i].kind.is_handler)
        for start, end, i in handler_funclets:
            state = model.funclets[i].state
            for q in self.state_chain.get(model.states[state].enclosing, ()):
                primary = first.get(q)
                if primary is None:
                    raise self.fail(f"{model.funclets[i].label} lies inside the try of state {q}, which has no "
                                    f"primary clause (no call of its try region reaches it)", start,
                                    "duplicate-without-primary")
                out.append(NativeClause(primary.flags | ClauseFlags.DUPLICATED, start, end, primary.handler_start,
                                        primary.handler_end, primary.class_token_or_filter))
        return out


def _mark_same_try(g: _Generator, primaries: list[_Primary], clauses: list[NativeClause]) -> list[NativeClause]:
    """SAMETRY on each clause that repeats the previous one's try for another handler of one try."""
    out = list(clauses)
    for k in range(1, len(primaries)):
        a, b = primaries[k - 1], primaries[k]
        if g._same_try(a, b):
            c = out[k]
            out[k] = NativeClause(c.flags | ClauseFlags.SAMETRY, c.try_start, c.try_end, c.handler_start,
                                  c.handler_end, c.class_token_or_filter)
    return out


# --------------------------------------------------------------------------------------------
# Encoding


def encode_clauses(native: NativeMethod | Iterable[NativeClause]) -> bytes:
    """The table as the runtime receives it: CORINFO_EH_CLAUSE records back to back."""
    clauses = native.clauses if isinstance(native, NativeMethod) else tuple(native)
    return ClauseTable.build([dict(flags=int(c.flags), try_start=c.try_start, try_end=c.try_end,
                                   handler_start=c.handler_start, handler_end=c.handler_end,
                                   class_token_or_filter_offset=c.class_token_or_filter) for c in clauses])


def decode_clauses(data: bytes) -> tuple[NativeClause, ...]:
    if len(data) % CLAUSE_SIZE:
        raise ClauseError(f"a clause table of {len(data)} bytes is no whole number of {CLAUSE_SIZE}-byte clauses",
                          kind="bad-table")
    try:
        raw = ClauseTable.parse(data)
    except ConstructError as e:
        raise ClauseError(f"the clause table does not parse: {e}", kind="bad-table") from None
    return tuple(NativeClause(ClauseFlags(c.flags), c.try_start, c.try_end, c.handler_start, c.handler_end,
                              c.class_token_or_filter_offset) for c in raw)


# --------------------------------------------------------------------------------------------
# Call-site identities in the machine code


@dataclass(frozen=True)
class CallSiteMatch:
    """How the model's calls fare in LLVM's machine code (DESIGN decision 8)."""

    found: Mapping[int, tuple[int, ...]]     # N -> offsets of the machine calls it marks
    merged: Mapping[int, tuple[int, ...]]    # machine call offset -> its Ns, where LLVM merged calls
    deleted: Mapping[int, str]               # N -> why LLVM no longer has it
    problems: tuple[str, ...]                # disagreements (never expected)
    demoted: Mapping[int, str] = field(default_factory=dict)   # invokes LLVM made plain calls, and why

    @property
    def duplicated(self) -> dict[int, tuple[int, ...]]:
        """Calls LLVM emitted more than once (tail duplication)."""
        return {n: offs for n, offs in self.found.items() if len(offs) > 1}


def match_call_sites(model: FuncletModel, recovered: RecoveredCode,
                     funclets: Mapping[int, str] | None = None) -> CallSiteMatch:
    """Find every model call of the parent in the machine code by its marker; say why a
    missing one is missing; check callee and invoke-ness of every match. An invoke whose
    handlers are all cleanups LLVM removed (empty: see `generate_clauses`) becomes a plain
    call; `funclets` (`match_funclets`) lets that be checked, else any all-cleanup chain
    is taken for it."""
    parent = object_symbol(model.parent)
    by_id = {c.callsite: c for c in model.calls if c.callsite is not None}
    found: dict[int, list[int]] = defaultdict(list)
    merged: dict[int, tuple[int, ...]] = {}
    demoted: dict[int, str] = {}
    problems = []
    for f in recovered.method_functions(parent):
        for s in f.calls:
            if len(s.callsites) > 1:
                merged[s.offset] = s.callsites
            for n in s.callsites:
                found[n].append(s.offset)
                c = by_id.get(n)
                if c is None:
                    problems.append(f"{f.name}: marker {n} at {s.offset:#x} names no call of the model")
                    continue
                if s.callee is not None and c.callee.startswith("@") and object_symbol(c.callee) != s.callee:
                    problems.append(f"#{n} ({c.where}) calls {c.callee}, the machine call at {s.offset:#x} "
                                    f"calls {s.callee}")
                if c.invoke and not s.is_invoke and _removed_cleanups_only(model, c, funclets):
                    demoted[n] = (f"demoted: LLVM removed the empty cleanup(s) {c.where} unwinds to and made "
                                  f"the invoke a call")
                elif s.is_invoke != c.invoke and s.kind != "tail-jump":
                    problems.append(f"#{n} ({c.where}) is {'an invoke' if c.invoke else 'a call'}, the machine "
                                    f"call at {s.offset:#x} is {'' if s.is_invoke else 'not '}between EH labels")
    deleted = {}
    for c in model.calls:
        if c.callsite is None:
            problems.append(f"{c.where}: a call without a call-site marker")
        elif c.callsite not in found:
            deleted[c.callsite] = _deletion_reason(c)
    return CallSiteMatch({n: tuple(v) for n, v in found.items()}, merged, deleted, tuple(problems), demoted)


def _removed_cleanups_only(model: FuncletModel, c: CallSite, funclets: Mapping[int, str] | None) -> bool:
    chain = model.protecting(c)
    return bool(chain) and all(s.kind in (FuncletKind.FINALLY, FuncletKind.FAULT)
                               and (funclets is None or s.funclet not in funclets) for s in chain)


def _deletion_reason(c: CallSite) -> str:
    if object_symbol(c.callee) in CHECK_HELPERS:
        return (f"check-folded: LLVM proved the implicit-exception check at {c.where} never fires and "
                f"deleted its throw block ({c.callee})")
    return f"unreachable: LLVM deleted the code of {c.where} as unreachable (a branch to it was folded)"


# --------------------------------------------------------------------------------------------
# Layouts: LLVM's and the final image's


def placed_from_recovered(model: FuncletModel, recovered: RecoveredCode, coff: CoffObject,
                          code: Mapping[int, str] | None = None) -> PlacedCode:
    """The method as LLVM laid it out: offsets from the parent's start (LLVM's CLR table's
    base), funclets and filter functions where LLVM put them (a filter's range is shared by
    all copies of its handler: LLVM emits the function once). Funclets are identified by the
    final image's matcher (`backend.match.match_funclets`: the evidence of the object), or by
    `code` when the caller has that match already (`FinalImage.funclet_code`)."""
    parent = recovered.function(object_symbol(model.parent))
    base = parent.start
    if code is None:
        code = funclet_code(model, recovered, coff)
    code = {i: recovered.function(name) for i, name in code.items()}
    ranges = {i: CodeRange(f.start - base, f.end - base) for i, f in code.items() if i != 0}
    calls = []
    for f in recovered.method_functions(parent.name):
        calls += _placed_calls(f.calls, -base)
    return PlacedCode(CodeRange(parent.start - base, parent.end - base), ranges, tuple(calls))


def funclet_code(model: FuncletModel, recovered: RecoveredCode, coff: CoffObject) -> dict[int, str]:
    """Model funclet index -> the object symbol holding its code (absent: LLVM removed it)."""
    return funclet_match(recovered, coff, model, object_symbol(model.parent)).code


def placed_from_image(model: FuncletModel, image: FinalImage, recovered: RecoveredCode) -> PlacedCode:
    """The method as the final image lays it out (DESIGN decision 9): offsets from the main
    body's start, each range where the relinker put it, every call of the main body and the
    handler funclets moved with the segment that holds it. A filter's part of the code is
    [its start, its handler's start): the alignment padding between the two (int3, never
    executed) belongs to it, as the CLR knows a filter's end only as its handler's start."""
    ranges: dict[int, CodeRange] = {}
    calls: list[PlacedCall] = []
    for i, r in enumerate(image.ranges):
        if r.kind is FuncletKind.FILTER:
            handler = image.range_of(model.funclets[r.funclet].handler)
            if handler is None or i + 1 >= len(image.ranges) or image.ranges[i + 1] is not handler:
                raise ClauseError(f"the filter of funclet {r.funclet} is not right before its handler in the "
                                  f"final image", method=model.parent, offset=None, kind="filter-placement")
            ranges[r.funclet] = CodeRange(r.begin, handler.begin)
            continue
        if r.funclet != 0:
            ranges[r.funclet] = r.code_range
        for seg in r.segments:
            inside = [s for s in recovered.function(seg.function).calls
                      if seg.source.start <= s.offset < seg.source.end]
            calls += _placed_calls(inside, seg.start - seg.source.start)
    return PlacedCode(image.main, ranges, tuple(calls))


def _placed_calls(sites: Iterable[MachineCall], shift: int) -> list[PlacedCall]:
    out = []
    for s in sites:
        if s.return_offset is None:
            continue        # a tail jump: this frame is gone when the callee throws
        if s.callsites:
            out += [PlacedCall(n, s.offset + shift, s.return_offset + shift) for n in s.callsites]
        elif s.callee not in NON_THROWING_CALLEES:
            out.append(PlacedCall(None, s.offset + shift, s.return_offset + shift))
    return out


__all__ = [
    "CHECK_HELPERS",
    "NON_THROWING_CALLEES",
    "CallSiteMatch",
    "PlacedCall",
    "PlacedCode",
    "decode_clauses",
    "encode_clauses",
    "funclet_code",
    "generate_clauses",
    "match_call_sites",
    "placed_from_image",
    "placed_from_recovered",
]
