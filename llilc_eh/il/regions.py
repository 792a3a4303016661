"""The EH region tree of one method: tries, their handlers and filters, properly nested.

One `Region` per lexical EH region (as RyuJIT keeps one EHblkDsc per clause, but split into
the pieces a JIT reasons about): the try (shared by all clauses with the same try range:
mutual protection), each handler (catch, filter handler, finally, fault) and each filter
part. Every region knows its parent, so "which regions enclose this instruction" is a walk
up the tree, and the questions later stages ask of a region are small properties here.

Building the tree is also where the structural ECMA-335 rules (II.19, I.12.4.2) are
checked, once: ranges inside the body and on instruction boundaries, proper nesting,
handlers disjoint from their try and enclosed by the same regions as it, the filter part
ending in `endfilter`, and inner-before-outer clause order. The control-flow rules live in
`checks.py`. Violations are collected, not raised one by one, because a researcher looking
at a bad method wants all of them.
"""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass, field

from ..assembly.body import ClauseKind, ILClause
from ..errors import ILError


class RegionKind(enum.Enum):
    __hash__ = object.__hash__   # identity: cheaper than Enum's name hash (see il.opcodes.OperandKind)

    ROOT = "root"
    TRY = "try"
    CATCH = "catch"
    FILTER = "filter"                  # the filter part: runs in the first pass, ends in endfilter
    FILTER_HANDLER = "filter-handler"  # the handler that runs when the filter said 1
    FINALLY = "finally"
    FAULT = "fault"

    @property
    def is_handler(self) -> bool:
        return self in _HANDLERS

    @property
    def is_catchlike(self) -> bool:
        """Handlers that receive the exception object and are left by `leave` (catchret)."""
        return self in (RegionKind.CATCH, RegionKind.FILTER_HANDLER)

    @property
    def is_cleanup(self) -> bool:
        """Handlers that end in `endfinally` and continue the search (cleanuppad)."""
        return self in (RegionKind.FINALLY, RegionKind.FAULT)

    @property
    def leave_may_exit(self) -> bool:
        """`leave` may exit tries and catch-like handlers, never a finally, fault or filter."""
        return self in (RegionKind.TRY, RegionKind.CATCH, RegionKind.FILTER_HANDLER)


_HANDLERS = frozenset({RegionKind.CATCH, RegionKind.FILTER_HANDLER, RegionKind.FINALLY, RegionKind.FAULT})

_HANDLER_KIND = {
    ClauseKind.CATCH: RegionKind.CATCH,
    ClauseKind.FILTER: RegionKind.FILTER_HANDLER,
    ClauseKind.FINALLY: RegionKind.FINALLY,
    ClauseKind.FAULT: RegionKind.FAULT,
}


@dataclass(frozen=True)
class Region:
    """One region; `start`..`end` are IL offsets, end exclusive."""

    index: int
    kind: RegionKind
    start: int
    end: int
    parent: int | None                   # index of the enclosing region (None for the root)
    clauses: tuple[int, ...] = ()        # clause indices: all of a try's; a handler's or filter's own
    try_region: int | None = None        # for handlers and filters: their try
    handlers: tuple[int, ...] = ()       # for tries: handler regions, in clause order
    filter_region: int | None = None     # for filter handlers: their filter part
    children: tuple[int, ...] = field(default=(), compare=False)
    depth: int = 0                       # number of enclosing regions

    def contains(self, offset: int) -> bool:
        return self.start <= offset < self.end

    def encloses(self, other: "Region") -> bool:
        return self.start <= other.start and other.end <= self.end

    @property
    def label(self) -> str:
        clause = f"#{','.join(map(str, self.clauses))} " if self.clauses else ""
        return f"{self.kind.value} {clause}IL_{self.start:04x}..IL_{self.end:04x}"


@dataclass(frozen=True)
class RegionTree:
    """All regions of a method; index 0 is the root (the whole body)."""

    regions: tuple[Region, ...]
    clauses: tuple[ILClause, ...]
    errors: tuple[ILError, ...] = ()
    # innermost region index per instruction start offset, filled by `locate`
    _starts: tuple[int, ...] = field(default=(), repr=False, compare=False)
    _innermost: tuple[int, ...] = field(default=(), repr=False, compare=False)

    @property
    def root(self) -> Region:
        return self.regions[0]

    @property
    def tries(self) -> list[Region]:
        return [r for r in self.regions if r.kind is RegionKind.TRY]

    def innermost(self, offset: int) -> Region:
        """The innermost region holding the instruction at `offset`."""
        i = bisect.bisect_right(self._starts, offset) - 1
        return self.regions[self._innermost[i]] if i >= 0 else self.root

    def innermost_each(self, offsets: list[int]) -> list[Region]:
        """`innermost` of every offset of `offsets`: no search when they are the instruction
        offsets the tree was located for (`build_region_tree`), as the il checks ask."""
        if tuple(offsets) == self._starts:
            regions = self.regions
            return [regions[i] for i in self._innermost]
        return [self.innermost(offset) for offset in offsets]

    def path(self, region: Region) -> list[Region]:
        """The regions from the root down to `region`, inclusive."""
        chain = []
        r: Region | None = region
        while r is not None:
            chain.append(r)
            r = self.regions[r.parent] if r.parent is not None else None
        chain.reverse()
        return chain

    def enclosing_handler(self, region: Region) -> Region | None:
        """The innermost handler or filter region enclosing (or equal to) `region`, skipping tries."""
        r: Region | None = region
        while r is not None and not (r.kind.is_handler or r.kind is RegionKind.FILTER):
            r = self.regions[r.parent] if r.parent is not None else None
        return r

    def try_depth(self, region: Region) -> int:
        return sum(1 for r in self.path(region) if r.kind is RegionKind.TRY)

    @property
    def max_try_depth(self) -> int:
        return max((self.try_depth(r) for r in self.tries), default=0)

    @property
    def max_depth(self) -> int:
        return max(r.depth for r in self.regions)

    def __str__(self) -> str:
        lines: list[str] = []

        def walk(i: int, indent: int) -> None:
            r = self.regions[i]
            extra = ""
            if r.kind is RegionKind.TRY and len(r.handlers) > 1:
                extra = f"  ({len(r.handlers)} handlers: mutual protection)"
            lines.append("  " * indent + r.label + extra)
            for c in r.children:
                walk(c, indent + 1)

        walk(0, 0)
        return "\n".join(lines)


def build_region_tree(clauses: tuple[ILClause, ...], code_size: int,
                      instruction_offsets: tuple[int, ...], *, method: str | None = None,
                      last_instruction_names: dict[int, str] | None = None) -> RegionTree:
    """Build the tree from the clauses and check the structural rules.

    `instruction_offsets` are the start offsets of every decoded instruction (ascending);
    `last_instruction_names` maps a region end offset to the mnemonic of the instruction just
    before it (used for the filter-ends-in-endfilter rule); the caller derives both from the
    decoded instructions.
    """
    errors: list[ILError] = []

    def err(reason: str, offset: int | None, kind: str) -> None:
        errors.append(ILError(reason, method=method, offset=offset, kind=kind))

    boundaries = set(instruction_offsets)
    boundaries.add(code_size)

    # 1. Ranges: inside the body, non-empty, on instruction boundaries.
    usable: list[ILClause] = []
    for c in clauses:
        spans = [("try", c.try_start, c.try_end), ("handler", c.handler_start, c.handler_end)]
        if c.kind is ClauseKind.FILTER:
            spans.append(("filter", c.filter_start, c.handler_start))
        ok = True
        for what, s, e in spans:
            if e > code_size or s >= code_size:
                err(f"clause #{c.index}: {what} IL_{s:04x}..IL_{e:04x} lies outside the body "
                    f"(code size {code_size})", s, "clause-outside-body")
                ok = False
            elif s >= e:
                err(f"clause #{c.index}: {what} IL_{s:04x}..IL_{e:04x} is empty", s, "empty-region")
                ok = False
            else:
                for edge in (s, e):
                    if edge not in boundaries:
                        err(f"clause #{c.index}: {what} boundary IL_{edge:04x} is not an instruction "
                            f"boundary", edge, "region-boundary-not-instruction")
                        ok = False
        if ok:
            usable.append(c)

    # 2. Regions: one try per distinct try range (mutual protection), a handler per clause and
    #    a filter part per filter clause.
    protos: list[dict] = []
    try_of_range: dict[tuple[int, int], dict] = {}
    for c in usable:
        t = try_of_range.get(c.try_range)
        if t is None:
            t = {"kind": RegionKind.TRY, "start": c.try_start, "end": c.try_end, "clauses": [],
                 "handlers": []}
            try_of_range[c.try_range] = t
            protos.append(t)
        t["clauses"].append(c.index)
        h = {"kind": _HANDLER_KIND[c.kind], "start": c.handler_start, "end": c.handler_end,
             "clauses": [c.index], "try": t}
        t["handlers"].append(h)
        protos.append(h)
        if c.kind is ClauseKind.FILTER:
            f = {"kind": RegionKind.FILTER, "start": c.filter_start, "end": c.handler_start,
                 "clauses": [c.index], "try": t, "handler": h}
            h["filter"] = f
            protos.append(f)

    # Sort outer-first: by start, then longest first; ties (identical ranges, always illegal
    # between distinct regions) fall back to creation order so the result is deterministic.
    order = sorted(range(len(protos)), key=lambda i: (protos[i]["start"], -protos[i]["end"], i))
    for new_index, i in enumerate(order, start=1):
        protos[i]["index"] = new_index
    parents: dict[int, int] = {}
    stack: list[dict] = []
    for i in order:
        p = protos[i]
        while stack and stack[-1]["end"] <= p["start"]:
            stack.pop()
        if stack and stack[-1]["end"] < p["end"]:
            q = stack[-1]
            err(f"{p['kind'].value} IL_{p['start']:04x}..IL_{p['end']:04x} (clause #{p['clauses'][0]}) "
                f"overlaps {q['kind'].value} IL_{q['start']:04x}..IL_{q['end']:04x} "
                f"(clause #{q['clauses'][0]}) without nesting", p["start"], "overlapping-regions")
        elif stack and stack[-1]["start"] == p["start"] and stack[-1]["end"] == p["end"]:
            q = stack[-1]
            err(f"{p['kind'].value} (clause #{p['clauses'][0]}) and {q['kind'].value} "
                f"(clause #{q['clauses'][0]}) cover the same range IL_{p['start']:04x}..IL_{p['end']:04x}",
                p["start"], "overlapping-regions")
        parents[p["index"]] = stack[-1]["index"] if stack else 0
        stack.append(p)

    by_index = {p["index"]: p for p in protos}
    children: dict[int, list[int]] = {0: []}
    for idx in sorted(by_index):
        children.setdefault(idx, [])
        children.setdefault(parents[idx], []).append(idx)
    depth = {0: 0}
    for idx in sorted(by_index):  # parents always have smaller indices
        depth[idx] = depth[parents[idx]] + 1

    regions = [Region(0, RegionKind.ROOT, 0, code_size, None, children=tuple(children[0]))]
    for idx in sorted(by_index):
        p = by_index[idx]
        regions.append(Region(
            index=idx, kind=p["kind"], start=p["start"], end=p["end"], parent=parents[idx],
            clauses=tuple(p["clauses"]),
            try_region=p["try"]["index"] if "try" in p else None,
            handlers=tuple(h["index"] for h in p.get("handlers", ())),
            filter_region=p["filter"]["index"] if "filter" in p else None,
            children=tuple(children[idx]), depth=depth[idx]))

    # 3. Handlers and filters: disjoint from their try, enclosed by the same regions as it.
    for r in regions:
        if r.try_region is None:
            continue
        t = regions[r.try_region]
        c = r.clauses[0]
        if t.encloses(r) or r.encloses(t):
            err(f"clause #{c}: {r.kind.value} IL_{r.start:04x}..IL_{r.end:04x} is nested with its own try "
                f"IL_{t.start:04x}..IL_{t.end:04x}", r.start, "handler-overlaps-try")
        elif r.parent != t.parent and not errors_touch(errors, c):
            err(f"clause #{c}: {r.kind.value} IL_{r.start:04x}..IL_{r.end:04x} is enclosed by "
                f"{regions[r.parent].label} but its try by {regions[t.parent].label}",
                r.start, "handler-nesting-mismatch")

    # 4. A filter part ends with endfilter (its last instruction, just before the handler).
    if last_instruction_names is not None:
        for r in regions:
            if r.kind is RegionKind.FILTER and last_instruction_names.get(r.end) != "endfilter":
                err(f"clause #{r.clauses[0]}: filter IL_{r.start:04x}..IL_{r.end:04x} does not end with "
                    f"endfilter", r.start, "filter-without-endfilter")

    # 5. Clause order (II.19): a clause whose try or handler encloses another clause's try comes
    #    after it. Mutual-protect clauses (same try) keep their relative order.
    for a in usable:
        for b in usable:
            if a.index < b.index and a.try_range != b.try_range and _clause_encloses(a, b):
                err(f"clause #{a.index} encloses clause #{b.index} but comes before it "
                    f"(inner clauses must come first)", b.try_start, "clause-order")

    tree = RegionTree(tuple(regions), tuple(clauses), tuple(errors))
    return _with_locator(tree, instruction_offsets)


def errors_touch(errors: list[ILError], clause: int) -> bool:
    """Whether an earlier error already concerns this clause (avoid cascades of the same fault)."""
    tag = f"clause #{clause}"
    return any(tag in e.reason for e in errors)


def _clause_encloses(outer: ILClause, inner: ILClause) -> bool:
    spans = [outer.try_range, outer.handler_range]
    if outer.kind is ClauseKind.FILTER:
        spans.append((outer.filter_start, outer.handler_start))
    return any(s <= inner.try_start and inner.try_end <= e and (s, e) != inner.try_range
               for s, e in spans)


def _with_locator(tree: RegionTree, instruction_offsets: tuple[int, ...]) -> RegionTree:
    """Precompute the innermost region of every instruction by one sweep over sorted regions."""
    regions = tree.regions
    events = sorted(regions[1:], key=lambda r: (r.start, -r.end, r.index))
    innermost: list[int] = []
    stack = [regions[0]]
    k = 0
    for off in instruction_offsets:
        while len(stack) > 1 and stack[-1].end <= off:
            stack.pop()
        while k < len(events) and events[k].start <= off:
            r = events[k]
            k += 1
            while len(stack) > 1 and stack[-1].end <= r.start:
                stack.pop()
            if r.end > off:
                stack.append(r)
        # an overlapping (malformed) tree can leave a stale region on top: fall back to a scan
        top = stack[-1]
        innermost.append(top.index if top.start <= off < top.end else _scan(regions, off))
    object.__setattr__(tree, "_starts", tuple(instruction_offsets))
    object.__setattr__(tree, "_innermost", tuple(innermost))
    return tree


def _scan(regions: tuple[Region, ...], off: int) -> int:
    best = regions[0]
    for r in regions[1:]:
        if r.contains(off) and r.depth >= best.depth:
            best = r
    return best.index
