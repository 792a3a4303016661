"""The CLR clause validator: does a CORINFO_EH_CLAUSE table say what the runtime needs to hear?

`validate(method, profile)` judges one `NativeMethod` — its main code range, its funclet
ranges and its clause table — and returns `Finding`s, one per violation, each naming its
rule, the clauses involved and the offsets in hex. It knows nothing about who made the
table: RyuJIT's tables read from ReadyToRun images, LLVM's own CoreCLR table and ours are
judged alike, so one can be a differential oracle for another.

The validator is a short list of named rules (`RULES`, the driver at the bottom), each one
function written once, in the spirit of WinEHPrepare's named steps and of RyuJIT's
`fgVerifyHandlerTab`: one place where the table's invariants are written down. Questions
asked of the table by several rules (which funclet is whose handler, which tries
logically enclose a funclet) are answered once, by `ClauseTable`.

Vocabulary
----------
* *primary clause*: a clause without the DUPLICATED flag (0x8) — one per IL handler.
* *duplicate clause*: flag 0x8; it repeats an enclosing primary's handler (same handler
  range, kind and class token / filter offset) with a try range over a handler funclet
  that the funclet split moved out of that primary's try (RyuJIT `genReportEH`).
* *cloned-finally clause*: a recognised pattern of its own, not a duplicate. Flags exactly
  FINALLY|DUPLICATED (0xA), an empty try `try_start == try_end == handler_start`, and a
  "handler" range that is really a call-finally thunk: the code right after a try/finally
  that calls the finally on the normal path. The runtime recognises it by that shape
  (`IsClonedFinally`, eexcp.h) to keep a thread abort from running the same finally
  twice. RyuJIT puts these at the very end of the table (clr-abi.md: "the only exceptions
  are cloned finallys, which always appear at the end"); the thunk lies in the main body
  or, when the try/finally is itself inside a handler, in that handler's funclet
  (measured on CoreLib 3.1: 69 cloned finallys, 2 of them inside funclets).
* *split try*: one handler reached from several disjoint try ranges, one primary clause
  per range -- same handler range, kind and class token / filter offset, tries disjoint and
  in one code region. A JIT whose block layout does not keep a try's code contiguous (LLVM:
  `emitCLRExceptionTable` writes one clause per maximal run of an EH state, so code of
  another try or an unprotected call between two runs splits the clause; our generator
  does the same) needs it; the runtime takes the first clause covering the PC, and only
  one part covers any PC. RyuJIT keeps tries contiguous: its tables never split one.
* *code region*: the main body or one funclet. A try's *region* is the one holding it.
* *logical enclosure*: a try in a handler funclet sits, in IL, inside that handler; so the
  tries that protect a funclet are the ones that strictly contain the try of the clause
  owning the funclet, and, recursively, those that protect the funclet that try sits in.

Identical try ranges are ambiguous natively: `try { try {..} catch {..} } catch {..}` and
the mutual-protect `try {..} catch {..} catch {..}` give two clauses with the same try
range (RyuJIT emits both; 117 such pairs in CoreLib 3.1). Where a rule would need to tell
them apart it accepts either reading — unless SAMETRY (0x10) flags say they are one try.

The rules and where each comes from
-----------------------------------
code-layout         main body at offset 0, funclets after it, non-empty, in order, disjoint.
                    (clr-abi.md "EH Info, GC Info, and Hot & Cold Splitting": funclets are
                    after all of the main function code; R2R RUNTIME_FUNCTION order.)
clause-flags        one kind bit at most; no unknown bits (0x20, R2R's "catches
                    System.Exception", is accepted on catch clauses under the CoreCLR
                    profiles); catch clauses carry a class token (the runtime resolves it,
                    a zero token fails fast); no DUPLICATED under nativeaot (genReportEH
                    reports neither duplicate nor cloned-finally clauses for NativeAOT).
ranges-well-formed  start < end (cloned finally: empty try by definition), inside the code,
                    FilterOffset < HandlerStart (corinfo.h; ClauseCoversPC is [start, end)).
handler-is-funclet  a handler range is exactly one funclet; a filter clause's filter part
                    [FilterOffset, HandlerStart) is exactly one funclet, so it ends where the
                    handler funclet begins; every funclet is some clause's handler or filter.
                    (codeman.cpp IsFilterFunclet: a funclet is a filter iff its start is a
                    FilterOffset; jiteh.cpp BBFilterLast: the filter ends just before the
                    handler; measured: all 1,661 CoreLib 3.1 handler ranges are one funclet.)
handlers-disjoint   handler and filter ranges are disjoint from the main body and from each
                    other; identical ranges only between a primary and its duplicates (the
                    runtime pairs a duplicate with its primary by equal HandlerStartPC and
                    HandlerEndPC: exceptionhandling.cpp, resume-frame search), and between
                    the parts of a split try.
try-placement       a primary's try lies in the main body or inside one handler funclet —
                    never in a filter (filters contain no EH regions: fgNormalizeEH), never
                    inside its own handler.
tries-nested        try ranges are nested or disjoint; identical is legal (ECMA-335 I.12.4.2,
                    fgVerifyHandlerTab; RyuJIT emits identical ranges for distinct tries).
primary-order       a primary nested in another's try, handler or filter comes before it
                    (fgSortEHTable; the runtime takes the first clause covering the PC).
sibling-order       convention, not a runtime requirement: unrelated primaries whose tries
                    lie in the same code region go lower-before-higher (clr-abi.md "EH clause
                    ordering"; design decision 10; RyuJIT's CoreLib tables all satisfy it).
                    Reported with severity "convention".
duplicates-last     every DUPLICATED clause comes after every primary (IsFilterFunclet and
                    the clause scan stop looking for primaries at the first duplicate;
                    clr-abi.md "Duplicated Clauses").
duplicate-matches-primary
                    a duplicate repeats a primary: same handler range, kind and class token /
                    filter offset; its try lies in a handler funclet (never a filter: a
                    filter's exceptions never escape) that the primary's try logically
                    encloses (genReportEH, ehTrueEnclosingTryIndexIL).
duplicate-coverage  CoreCLR profiles: every handler funclet logically inside a primary's try
                    is covered by duplicates of that primary (of any part of its split try:
                    a duplicate names a handler, not one of its parts). Without one, an exception in
                    the funclet skips the parent frame's clauses entirely (HandleFunclets
                    skips to the parent) and the enclosing handler never runs.
duplicate-order     duplicates over the same code keep their primaries' inner-to-outer order
                    (clr-abi.md: "they should maintain the ordering ... as the corresponding
                    original clause"; genReportEH walks the enclosing tries inner to outer).
cloned-finally      the pattern above: the thunk lies inside the main body or one funclet,
                    and no other clause follows a cloned finally.
same-try            SAMETRY (0x10) only on a primary catch or filter clause whose try range is
                    the previous clause's (genReportEH; RyuJIT asserts HasCatchHandler, which
                    is catch or filter).

Profiles
--------
`coreclr-psp`   CoreCLR x64, .NET Core 3.1 – .NET 9, PSPSym in every frame with funclets.
                Duplicate and cloned-finally clauses. SAMETRY is accepted: RyuJIT reports it
                for CoreCLR since .NET 8 (dotnet/runtime#88072, a no-op for the old EH;
                .NET 3.1 tables carry none).
`coreclr-net10` CoreCLR x64 .NET 10, no PSPSym. The PSPSym is a frame-layout and GC-info
                matter (funclets find the parent frame another way); nothing of it is in the
                clause table, so the table rules are the same. What the modern JIT does
                differently in tables is within those rules: SAMETRY on mutual-protect
                clauses, which the managed EH (default since .NET 9) relies on to skip a
                try's other handlers on a collided unwind, and primaries sorted so that
                clauses of one try are contiguous (genReportEH's sort by try index).
                Duplicate and cloned-finally clauses are still reported (the JIT skips them
                for NativeAOT only).
`nativeaot`     No duplicate and no cloned-finally clauses (no DUPLICATED flag at all):
                the NativeAOT runtime finds a funclet's enclosing clauses from the clause
                order and SAMETRY instead.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property

from ..assembly.native import ClauseFlags, CodeRange, NativeMethod


class Profile(str, enum.Enum):
    """The runtime ABI a table is judged for."""

    CORECLR_PSP = "coreclr-psp"
    CORECLR_NET10 = "coreclr-net10"
    NATIVEAOT = "nativeaot"

    @property
    def duplicate_clauses(self) -> bool:
        """Does the runtime expect duplicate (and cloned-finally) clauses?"""
        return self is not Profile.NATIVEAOT

    @property
    def psp_sym(self) -> bool:
        """Does every frame with funclets carry a PSPSym? (Not visible in the table.)"""
        return self is Profile.CORECLR_PSP

    def __str__(self) -> str:
        return self.value


DEFAULT_PROFILE = Profile.CORECLR_PSP

ERROR = "error"            # the runtime would misbehave on this table, or cannot read it
CONVENTION = "convention"  # a layout rule of RyuJIT and ours that the runtime does not need

_KNOWN_BITS = 0x1F
_R2R_SYSTEM_EXCEPTION = 0x20  # COR_ILEXCEPTION_CLAUSE_R2R_SYSTEM_EXCEPTION: a catch of System.Exception


@dataclass(frozen=True)
class Finding:
    """One violation: the rule's short name, the clause indices involved, a message with hex offsets."""

    rule: str
    clauses: tuple[int, ...]
    message: str
    severity: str = ERROR

    def __str__(self) -> str:
        tag = "" if self.severity == ERROR else f" ({self.severity})"
        return f"{self.rule}{tag}: {self.message}"


def _rng(start: int, end: int) -> str:
    return f"[{start:#x}, {end:#x})"


def _contains(outer: tuple[int, int], inner: tuple[int, int]) -> bool:
    return outer[0] <= inner[0] and inner[1] <= outer[1]


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


class ClauseTable:
    """One method's table with the questions the rules ask of it, each answered once."""

    def __init__(self, method: NativeMethod, profile: Profile):
        self.method = method
        self.profile = profile
        self.clauses = method.clauses
        self.code_size = method.code_size
        self.regions: tuple[CodeRange, ...] = (method.main, *method.funclets)  # 0 is the main body
        self._protectors: dict[int, tuple[frozenset[int], frozenset[int]]] = {}
        self._parts: dict[int, tuple[int, ...]] = {}

    # --- clause categories -------------------------------------------------------------

    def is_cloned_finally(self, i: int) -> bool:
        return self.clauses[i].is_cloned_finally

    def is_duplicate(self, i: int) -> bool:
        return self.clauses[i].is_duplicate and not self.is_cloned_finally(i)

    def is_primary(self, i: int) -> bool:
        return not self.clauses[i].is_duplicate

    @cached_property
    def primaries(self) -> list[int]:
        """Well-formed primary clauses (malformed ones are reported by ranges-well-formed)."""
        return [i for i in range(len(self.clauses)) if self.is_primary(i) and self.well_formed(i)]

    @cached_property
    def duplicates(self) -> list[int]:
        return [i for i in range(len(self.clauses)) if self.is_duplicate(i) and self.well_formed(i)]

    def range_problems(self, i: int) -> list[str]:
        """What is wrong with clause i's ranges on their own (the ranges-well-formed rule)."""
        c, size, problems = self.clauses[i], self.code_size, []
        if not self.is_cloned_finally(i) and c.try_start >= c.try_end:
            problems.append(f"try {_rng(c.try_start, c.try_end)} is empty or inverted")
        if c.handler_start >= c.handler_end:
            problems.append(f"handler {_rng(c.handler_start, c.handler_end)} is empty or inverted")
        for what, end in (("try", c.try_end), ("handler", c.handler_end)):
            if end > size:
                problems.append(f"{what} ends at {end:#x}, beyond the code (size {size:#x})")
        if c.filter_start is not None and not c.filter_start < c.handler_start:
            problems.append(f"filter offset {c.filter_start:#x} is not before the handler start "
                            f"{c.handler_start:#x}")
        return problems

    @cached_property
    def _well_formed(self) -> list[bool]:
        return [not self.range_problems(i) for i in range(len(self.clauses))]

    def well_formed(self, i: int) -> bool:
        return self._well_formed[i]

    def label(self, i: int) -> str:
        c = self.clauses[i]
        if self.is_cloned_finally(i):
            return f"clause {i} (cloned finally)"
        extra = [name for flag, name in ((ClauseFlags.DUPLICATED, "duplicate"), (ClauseFlags.SAMETRY, "sametry"))
                 if c.flags & flag]
        return f"clause {i} ({', '.join([c.kind, *extra])})"

    def same_handler(self, a: int, b: int) -> bool:
        """One handler: the same handler range, kind and class token / filter offset."""
        ca, cb = self.clauses[a], self.clauses[b]
        return (ca.handler_start, ca.handler_end) == (cb.handler_start, cb.handler_end) and self.same_kind(a, b)

    def split_parts(self, a: int, b: int) -> bool:
        """Are primaries a and b two parts of one split try (see the vocabulary)?"""
        ca, cb = self.clauses[a], self.clauses[b]
        return (self.is_primary(a) and self.is_primary(b) and self.same_handler(a, b)
                and not _overlap((ca.try_start, ca.try_end), (cb.try_start, cb.try_end))
                and self.try_region(a) is not None and self.try_region(a) == self.try_region(b))

    def parts(self, q: int) -> tuple[int, ...]:
        """Primary q and the other parts of its split try (just (q,) for an unsplit try)."""
        if q not in self._parts:
            self._parts[q] = tuple(p for p in self.primaries if p == q or self.split_parts(p, q))
        return self._parts[q]

    def same_kind(self, a: int, b: int) -> bool:
        """Same kind and the same class token or filter offset."""
        ca, cb = self.clauses[a], self.clauses[b]
        return ca.kind == cb.kind and (ca.kind in ("finally", "fault")
                                       or ca.class_token_or_filter == cb.class_token_or_filter)

    # --- code regions ------------------------------------------------------------------

    def region_name(self, r: int) -> str:
        reg = self.regions[r]
        return f"the main body {_rng(reg.start, reg.end)}" if r == 0 else \
            f"funclet {r - 1} {_rng(reg.start, reg.end)}"

    def region_of(self, start: int, end: int) -> int | None:
        """The code region holding [start, end) entirely (an empty range: holding start)."""
        for r, reg in enumerate(self.regions):
            if reg.start <= start and end <= reg.end and (start < end or start < reg.end):
                return r
        return None

    def funclet_at(self, start: int, end: int) -> int | None:
        """The region index of the funclet that is exactly [start, end)."""
        for r, reg in enumerate(self.regions[1:], 1):
            if (reg.start, reg.end) == (start, end):
                return r
        return None

    def where(self, start: int, end: int) -> str:
        """Where a range lies, in words, for messages."""
        hit = [r for r, reg in enumerate(self.regions) if _overlap((reg.start, reg.end), (start, end))]
        if not hit:
            return "outside every code range"
        if len(hit) == 1 and self.region_of(start, end) == hit[0]:
            return "inside " + self.region_name(hit[0])
        return "across " + " and ".join(self.region_name(r) for r in hit)

    @cached_property
    def _try_regions(self) -> list[int | None]:
        return [self.region_of(c.try_start, c.try_end) for c in self.clauses]

    def try_region(self, i: int) -> int | None:
        return self._try_regions[i]

    @cached_property
    def handler_owner(self) -> dict[int, int]:
        """Funclet region -> the first primary whose handler it is."""
        owners: dict[int, int] = {}
        for i in self.primaries:
            c = self.clauses[i]
            r = self.funclet_at(c.handler_start, c.handler_end)
            if r is not None:
                owners.setdefault(r, i)
        return owners

    @cached_property
    def filter_owner(self) -> dict[int, int]:
        """Funclet region -> the first primary whose filter part it is."""
        owners: dict[int, int] = {}
        for i in self.primaries:
            c = self.clauses[i]
            if c.filter_start is not None:
                r = self.funclet_at(c.filter_start, c.handler_start)
                if r is not None:
                    owners.setdefault(r, i)
        return owners

    @cached_property
    def same_try_groups(self) -> list[int]:
        """Group id per clause: clauses chained by SAMETRY share one (the first clause's index)."""
        group = list(range(len(self.clauses)))
        for i in range(1, len(self.clauses)):
            if self.clauses[i].flags & ClauseFlags.SAMETRY:
                group[i] = group[i - 1]
        return group

    def protectors(self, r: int, _seen: frozenset[int] = frozenset()) -> tuple[frozenset[int], frozenset[int]]:
        """The primaries whose try logically encloses handler funclet r: (certainly, possibly).

        Certainly: tries strictly containing the owner's try, in its region, and recursively
        those protecting the funclet that region is. Possibly adds tries with the owner's very
        range (a distinct enclosing try or a mutual-protect sibling; SAMETRY rules siblings out).
        """
        if r in self._protectors:
            return self._protectors[r]
        owner = self.handler_owner.get(r)
        if owner is None or r in _seen:  # no owner, or a cycle through a malformed table
            return frozenset(), frozenset()
        oc, where = self.clauses[owner], self.try_region(owner)
        inner = (oc.try_start, oc.try_end)
        certain, possible = set(), set()
        for q in self.primaries:
            qc = self.clauses[q]
            if q == owner or self.try_region(q) != where or not _contains((qc.try_start, qc.try_end), inner):
                continue
            if (qc.try_start, qc.try_end) != inner:
                certain.add(q)
            elif self.same_try_groups[q] != self.same_try_groups[owner]:
                possible.add(q)
        if where is not None and where != 0:
            outer_certain, outer_possible = self.protectors(where, _seen | {r})
            certain |= outer_certain
            possible |= outer_possible
        result = frozenset(certain), frozenset(certain | possible)
        self._protectors[r] = result
        return result

    def nested_in(self, a: int, b: int) -> str | None:
        """How primary a sits inside primary b (strictly), or None."""
        ca, cb = self.clauses[a], self.clauses[b]
        ra = self.try_region(a)
        if ra is None:
            return None
        ta, tb = (ca.try_start, ca.try_end), (cb.try_start, cb.try_end)
        if ra == self.try_region(b) and ta != tb and _contains(tb, ta):
            return "try"
        if ra != 0 and _contains((cb.handler_start, cb.handler_end), ta):
            return "handler"
        if ra != 0 and cb.filter_start is not None and _contains((cb.filter_start, cb.handler_start), ta):
            return "filter"
        return None

    @cached_property
    def _primary_of(self) -> dict[int, int | None]:
        found: dict[int, int | None] = {}
        for d in self.duplicates:
            dc = self.clauses[d]
            found[d] = next((q for q in self.primaries
                             if (self.clauses[q].handler_start, self.clauses[q].handler_end)
                             == (dc.handler_start, dc.handler_end) and self.same_kind(q, d)), None)
        return found

    def primary_of(self, d: int) -> int | None:
        """The primary a duplicate repeats: same handler range, kind and token/filter."""
        return self._primary_of.get(d)


# --- the rules ---------------------------------------------------------------------------
# Each rule yields (clause indices, message); the driver adds the rule's name and severity.

Report = Iterator[tuple[tuple[int, ...], str]]


def code_layout(t: ClauseTable) -> Report:
    main = t.method.main
    if main.start != 0:
        yield (), f"the main body {_rng(main.start, main.end)} does not start at the method entry 0x0"
    if main.end <= main.start:
        yield (), f"the main body {_rng(main.start, main.end)} is empty"
    previous, previous_name = main.end, "the main body"
    for k, f in enumerate(t.method.funclets):
        if f.end <= f.start:
            yield (), f"funclet {k} {_rng(f.start, f.end)} is empty"
        if f.start < previous:
            yield (), (f"funclet {k} {_rng(f.start, f.end)} starts before the end {previous:#x} of "
                       f"{previous_name}: funclets follow the main body, in order, disjoint")
        if f.end > previous:
            previous, previous_name = f.end, f"funclet {k}"


def clause_flags(t: ClauseTable) -> Report:
    coreclr = t.profile.duplicate_clauses
    for i, c in enumerate(t.clauses):
        flags = int(c.flags)
        kinds = [f.name.lower() for f in (ClauseFlags.FILTER, ClauseFlags.FINALLY, ClauseFlags.FAULT) if flags & f]
        if len(kinds) > 1:
            yield (i,), f"{t.label(i)} has more than one kind flag ({flags:#x}: {', '.join(kinds)})"
        unknown = flags & ~_KNOWN_BITS
        if unknown == _R2R_SYSTEM_EXCEPTION and c.kind == "catch" and coreclr:
            unknown = 0  # ReadyToRun's "catches System.Exception" bit
        if unknown:
            yield (i,), f"{t.label(i)} has unknown flag bits {unknown:#x} (flags {flags:#x})"
        if c.is_duplicate and not coreclr:
            yield (i,), (f"{t.label(i)} is flagged DUPLICATED (0x8); profile {t.profile} reports "
                         f"no duplicate or cloned-finally clauses")
        if c.kind == "catch" and c.class_token_or_filter == 0:
            yield (i,), f"{t.label(i)} is a catch clause without a class token"


def ranges_well_formed(t: ClauseTable) -> Report:
    for i in range(len(t.clauses)):
        for problem in t.range_problems(i):
            yield (i,), f"{t.label(i)}: {problem}"


def handler_is_funclet(t: ClauseTable) -> Report:
    for i, c in enumerate(t.clauses):
        if t.is_cloned_finally(i) or not t.well_formed(i):
            continue
        if t.funclet_at(c.handler_start, c.handler_end) is None:
            yield (i,), (f"{t.label(i)}: handler {_rng(c.handler_start, c.handler_end)} is not one funclet; "
                         f"it lies {t.where(c.handler_start, c.handler_end)}")
        if c.filter_start is not None and t.funclet_at(c.filter_start, c.handler_start) is None:
            yield (i,), (f"{t.label(i)}: filter part {_rng(c.filter_start, c.handler_start)} is not one funclet "
                         f"ending where the handler begins; it lies {t.where(c.filter_start, c.handler_start)}")
    owned = set(t.handler_owner) | set(t.filter_owner)
    for r in range(1, len(t.regions)):
        if r not in owned:
            yield (), f"{t.region_name(r)} is the handler or filter of no primary clause"


def handlers_disjoint(t: ClauseTable) -> Report:
    main = t.method.main
    parts = []  # (clause, what, start, end): every part that is a sane range on its own
    for i, c in enumerate(t.clauses):
        if t.is_cloned_finally(i):
            continue
        if c.handler_start < c.handler_end <= t.code_size:
            parts.append((i, "handler", c.handler_start, c.handler_end))
        if c.filter_start is not None and c.filter_start < c.handler_start <= t.code_size:
            parts.append((i, "filter", c.filter_start, c.handler_start))
    for i, what, s, e in parts:
        if _overlap((s, e), (main.start, main.end)):
            yield (i,), f"{t.label(i)}: {what} {_rng(s, e)} overlaps the main body {_rng(main.start, main.end)}"
    for a in range(len(parts)):
        i, what_i, si, ei = parts[a]
        for j, what_j, sj, ej in parts[a + 1:]:
            if i == j or not _overlap((si, ei), (sj, ej)):
                continue
            if (si, ei) == (sj, ej) and what_i == what_j and not (t.is_primary(i) and t.is_primary(j)):
                continue  # a primary and its duplicates, or two duplicates of one primary
            if (si, ei) == (sj, ej) and what_i == what_j and t.split_parts(i, j):
                continue  # two parts of one split try
            how = "share the range" if (si, ei) == (sj, ej) else "overlap"
            yield (i, j), (f"{t.label(i)} {what_i} {_rng(si, ei)} and {t.label(j)} {what_j} {_rng(sj, ej)} "
                           f"{how}; only a primary and its duplicates share a handler")


def try_placement(t: ClauseTable) -> Report:
    for i in t.primaries:
        c = t.clauses[i]
        r = t.try_region(i)
        if r is None:
            yield (i,), (f"{t.label(i)}: try {_rng(c.try_start, c.try_end)} is not inside the main body or "
                         f"one funclet; it lies {t.where(c.try_start, c.try_end)}")
        elif r in t.filter_owner:
            yield (i,), (f"{t.label(i)}: try {_rng(c.try_start, c.try_end)} lies in the filter "
                         f"{t.region_name(r)} of clause {t.filter_owner[r]}; filters hold no EH regions")
        elif r != 0 and (t.regions[r].start, t.regions[r].end) == (c.handler_start, c.handler_end):
            yield (i,), f"{t.label(i)}: try {_rng(c.try_start, c.try_end)} lies inside its own handler"


def tries_nested(t: ClauseTable) -> Report:
    tries = [i for i in range(len(t.clauses)) if not t.is_cloned_finally(i) and t.well_formed(i)]
    for a, i in enumerate(tries):
        ti = (t.clauses[i].try_start, t.clauses[i].try_end)
        for j in tries[a + 1:]:
            tj = (t.clauses[j].try_start, t.clauses[j].try_end)
            if _overlap(ti, tj) and not _contains(ti, tj) and not _contains(tj, ti):
                yield (i, j), (f"{t.label(i)} try {_rng(*ti)} and {t.label(j)} try {_rng(*tj)} "
                               f"overlap without nesting")


def primary_order(t: ClauseTable) -> Report:
    ps = t.primaries
    for a, i in enumerate(ps):
        for j in ps[a + 1:]:
            how = t.nested_in(j, i)
            if how:
                cj = t.clauses[j]
                yield (i, j), (f"{t.label(j)} (try {_rng(cj.try_start, cj.try_end)}) is nested in the {how} "
                               f"of {t.label(i)} but comes after it; inner clauses come first")


def sibling_order(t: ClauseTable) -> Report:
    ps = t.primaries
    for a, i in enumerate(ps):
        ci = t.clauses[i]
        for j in ps[a + 1:]:
            cj = t.clauses[j]
            same_region = t.try_region(i) is not None and t.try_region(i) == t.try_region(j)
            if same_region and cj.try_end <= ci.try_start:
                yield (i, j), (f"{t.label(i)} (try {_rng(ci.try_start, ci.try_end)}) comes before the unrelated "
                               f"{t.label(j)} (try {_rng(cj.try_start, cj.try_end)}) that starts lower "
                               f"in the same code range")


def duplicates_last(t: ClauseTable) -> Report:
    last_primary = max((i for i in range(len(t.clauses)) if t.is_primary(i)), default=-1)
    for i in range(last_primary):
        if not t.is_primary(i):
            yield (i, last_primary), (f"{t.label(i)} comes before the primary {t.label(last_primary)}; "
                                      f"the runtime stops looking for primaries at the first duplicate")


def duplicate_matches_primary(t: ClauseTable) -> Report:
    for d in t.duplicates:
        c = t.clauses[d]
        tr = (c.try_start, c.try_end)
        r = t.region_of(*tr)
        if r is None or r == 0:
            yield (d,), f"{t.label(d)}: try {_rng(*tr)} is not inside a handler funclet; it lies {t.where(*tr)}"
            continue
        if r in t.filter_owner:
            yield (d,), (f"{t.label(d)}: try {_rng(*tr)} lies in the filter {t.region_name(r)}; "
                         f"exceptions in a filter never escape it, no duplicate protects one")
            continue
        if r not in t.handler_owner:
            yield (d,), f"{t.label(d)}: try {_rng(*tr)} lies in {t.region_name(r)}, which is no clause's handler"
            continue
        same_range = [q for q in t.primaries
                      if (t.clauses[q].handler_start, t.clauses[q].handler_end) == (c.handler_start, c.handler_end)]
        if not same_range:
            yield (d,), (f"{t.label(d)}: handler {_rng(c.handler_start, c.handler_end)} is no primary "
                         f"clause's handler")
            continue
        q = t.primary_of(d)
        if q is None:
            yield (d, same_range[0]), (f"{t.label(d)} repeats the handler of {t.label(same_range[0])} but not "
                                       f"its kind and class token / filter offset "
                                       f"({c.class_token_or_filter:#x} vs "
                                       f"{t.clauses[same_range[0]].class_token_or_filter:#x})")
            continue
        _, possible = t.protectors(r)
        if not possible.intersection(t.parts(q)):
            owner = t.handler_owner[r]
            qc = t.clauses[q]
            yield (d, q), (f"{t.label(d)} repeats {t.label(q)} over {t.region_name(r)}, the handler of "
                           f"clause {owner}, but the try {_rng(qc.try_start, qc.try_end)} of clause {q} "
                           f"does not enclose clause {owner}")


def duplicate_coverage(t: ClauseTable) -> Report:
    if not t.profile.duplicate_clauses:
        return
    for r, owner in sorted(t.handler_owner.items()):
        funclet = t.regions[r]
        certain, _ = t.protectors(r)
        for q in sorted(certain):
            cover = sorted((t.clauses[d].try_start, t.clauses[d].try_end) for d in t.duplicates
                           if t.primary_of(d) is not None and t.primary_of(d) in t.parts(q)
                           and t.region_of(t.clauses[d].try_start, t.clauses[d].try_end) == r)
            reached = funclet.start
            for s, e in cover:
                if s <= reached:
                    reached = max(reached, e)
            if reached < funclet.end:
                qc = t.clauses[q]
                gap = (f"no duplicate of clause {q} covers it" if reached == funclet.start else
                       f"duplicates of clause {q} cover it only up to {reached:#x}")
                yield (owner, q), (f"{t.region_name(r)}, the handler of {t.label(owner)}, lies inside the try "
                                   f"{_rng(qc.try_start, qc.try_end)} of {t.label(q)}, but {gap}")


def duplicate_order(t: ClauseTable) -> Report:
    # A split try's duplicates rank with its last part: each part of an inner try comes
    # before the outer part that encloses it, so before the outer try's last part.
    ds = [(d, t.primary_of(d)) for d in t.duplicates]
    ds = [(d, max(t.parts(q))) for d, q in ds if q is not None]
    for a, (d1, q1) in enumerate(ds):
        c1 = t.clauses[d1]
        for d2, q2 in ds[a + 1:]:
            c2 = t.clauses[d2]
            if q2 < q1 and _overlap((c1.try_start, c1.try_end), (c2.try_start, c2.try_end)):
                yield (d1, d2), (f"{t.label(d1)} (repeating clause {q1}) comes before {t.label(d2)} (repeating "
                                 f"clause {q2}) over the same code; duplicates keep their primaries' "
                                 f"inner-to-outer order")


def cloned_finally(t: ClauseTable) -> Report:
    n = len(t.clauses)
    for i in range(n):
        if not t.is_cloned_finally(i) or not t.well_formed(i):
            continue
        c = t.clauses[i]
        if t.region_of(c.handler_start, c.handler_end) is None:
            yield (i,), (f"{t.label(i)}: call-finally thunk {_rng(c.handler_start, c.handler_end)} is not inside "
                         f"the main body or one funclet; it lies {t.where(c.handler_start, c.handler_end)}")
        later = next((j for j in range(i + 1, n) if not t.is_cloned_finally(j)), None)
        if later is not None:
            yield (i, later), f"{t.label(i)} comes before {t.label(later)}; cloned finallys end the table"


def same_try(t: ClauseTable) -> Report:
    for i, c in enumerate(t.clauses):
        if not c.flags & ClauseFlags.SAMETRY:
            continue
        if c.is_duplicate or c.kind not in ("catch", "filter"):
            yield (i,), f"{t.label(i)} has SAMETRY (0x10); only primary catch and filter clauses share a try"
        if i == 0:
            yield (i,), f"{t.label(i)} has SAMETRY (0x10) but no clause precedes it"
            continue
        p = t.clauses[i - 1]
        if (p.try_start, p.try_end) != (c.try_start, c.try_end):
            yield (i - 1, i), (f"{t.label(i)} has SAMETRY (0x10) but its try {_rng(c.try_start, c.try_end)} is "
                               f"not the try {_rng(p.try_start, p.try_end)} of the previous clause")


@dataclass(frozen=True)
class Rule:
    name: str
    check: Callable[[ClauseTable], Report]
    severity: str = ERROR


RULES: tuple[Rule, ...] = (
    Rule("code-layout", code_layout),
    Rule("clause-flags", clause_flags),
    Rule("ranges-well-formed", ranges_well_formed),
    Rule("handler-is-funclet", handler_is_funclet),
    Rule("handlers-disjoint", handlers_disjoint),
    Rule("try-placement", try_placement),
    Rule("tries-nested", tries_nested),
    Rule("primary-order", primary_order),
    Rule("sibling-order", sibling_order, CONVENTION),
    Rule("duplicates-last", duplicates_last),
    Rule("duplicate-matches-primary", duplicate_matches_primary),
    Rule("duplicate-coverage", duplicate_coverage),
    Rule("duplicate-order", duplicate_order),
    Rule("cloned-finally", cloned_finally),
    Rule("same-try", same_try),
)

RULE_NAMES: tuple[str, ...] = tuple(rule.name for rule in RULES)


def validate(method: NativeMethod, profile: Profile | str = DEFAULT_PROFILE,
             rules: Iterable[str] | None = None) -> list[Finding]:
    """Every finding of every rule (or of the named `rules`) on one method's table, in rule order."""
    profile = Profile(profile)
    wanted = set(RULE_NAMES if rules is None else rules)
    unknown = wanted - set(RULE_NAMES)
    if unknown:
        raise ValueError(f"unknown rule(s): {', '.join(sorted(unknown))}")
    table = ClauseTable(method, profile)
    return [Finding(rule.name, clauses, message, rule.severity)
            for rule in RULES if rule.name in wanted
            for clauses, message in rule.check(table)]


def error_findings(findings: Iterable[Finding]) -> list[Finding]:
    """The findings the runtime cares about (conventions left out)."""
    return [f for f in findings if f.severity == ERROR]
