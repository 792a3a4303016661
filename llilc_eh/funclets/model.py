"""The funclet model of one method: funclets, their tree, CLR EH states, layout order, checks.

`build_funclet_model(module_text, parent, il_method=None, table=None)` reads the reader's
module (our IR, LLVM's Windows EH model) with the reader's side table and answers what the
later stages ask about its EH structure. It is a short list of named steps, as WinEHPrepare is:

    read the module (the lint's reading)  →  funclets (coloring, kinds, clauses, parents)
    →  catchswitches (handler order)  →  layout order  →  EH states  →  call sites

and `FuncletModel.verify()` is the one check at the end (verifyPreparedFunclets' place).

Reading the module
------------------
The structure (blocks, pads, edges, the funclet coloring) is the IR's: the module is parsed
by LLVM and read from its canonical print with the funclet lint's own reader
(`reader.lint.read_functions`, the same reading the lint made of the same text, not a second
one), so the lint and this model can never disagree about which block is in which funclet.
The two facts the IR cannot carry come from the reader's side table (`reader.sidetable`,
`ReaderResult.table`), looked up by name: a pad's IL clause by its token (`%cp3`), a call's
IL offset by its call-site marker N. The lint's rule `reader-table` holds the table to the
IR (every pad and marker has its entry, in the block, of the kind, with the callee, bundle
and unwind edge it says), so the model trusts the lookup. Nothing here reads the IR
comments the reader still writes for people (`; IL clause #k`, `; IL_xxxx:`); before the
table it re-read the reader's text for them and matched it to LLVM's print by position.
The model describes our IR before optimisation; what LLVM made of it (calls and pads O2
deleted or merged) is found in the machine code by the markers (`backend.recover`,
`backend.image`), not here.

Funclets
--------
One per pad (a catchpad: CATCH, or FILTER_HANDLER when it names a filter function;
a cleanuppad: FINALLY for `[]`, FAULT for `[i32 1]`), the ROOT (the parent function's
main body) and one FILTER per catchpad that names an outlined filter function. A filter
funclet is per *handler copy*, not per function: when a filter handler exists in several
copies they all name the same function, and since the CLR wants the filter code right
before its handler, the backend emits the function once per copy. A FILTER's tree parent is
its handler's parent (the filter runs for the frame the catchswitch belongs to).
A funclet's blocks are its color (unreachable blocks have none); catchswitch blocks belong to
no funclet: each is recorded with its catchswitch.

Layout order (the final image)
------------------------------
Root first, then the handler funclets in IL clause order (inner before outer, as the IL table
is), each FILTER immediately before its FILTER_HANDLER. A nested handler has no special
place: its clause index decides, as RyuJIT lays out funclets in EH-table order. Copies of one
clause (a handler inside a finally has a copy under the finally's normal-path code and one
inside the finally's cleanup funclet; `clone_finally` makes more) sit together, the copy
nearest the root first (fewest enclosing funclets), then in module order. Every funclet
says which context its copy belongs to (`Funclet.context`).

EH states (ours; LLVM's calculateClrEHStateNumbers numbers top-down, catches in reverse)
----------------------------------------------------------------------------------------
One state per handler funclet (copies are distinct states), numbered in layout order: state
n is the n-th handler of the final image, so a try's handlers have consecutive states in
clause order, and an inner try's states come before its outer try's (clause order is
inner-before-outer). -1 stands for "no handler": the caller. Per state:

* `try_states` — the states of every handler of the same try (one catchswitch or the one
  cleanuppad), in handler order;
* `next` — where the dispatch goes when this handler does not take the exception: the next
  handler of the same catchswitch, else `enclosing` (LLVM's TryParentState);
* `enclosing` — the first state of the next outer try: the catchswitch's `unwind` target,
  a cleanup's `cleanupret` target; a cleanup without a cleanupret (it never ends: it always
  throws, or loops) takes the target of the unwind edges that leave it, else -1;
* `handler_parent` — the state of the funclet the pad sits in, -1 for the main body.

Every call site carries its identity N (`CallSite.callsite`): the reader writes a zero-byte
inline-asm marker `"# llilc.callsite N"` right before each call and invoke, numbered per
function; the marker is read here (it is no call site itself) and found again in LLVM's
assembly text by `backend.recover`, so machine calls match the model's exactly, whatever
LLVM's block layout (DESIGN decision 8).

With the reader's `Options.pad_markers`, every handler funclet carries its identity N too
(`Funclet.pad_marker`; None without them): the reader writes a zero-byte inline-asm marker `"# llilc.pad N"` right after each catchpad and cleanuppad,
numbered per method, read here from the pad's block (the funclet's entry) and found again
by `backend.recover` in the machine funclet that holds it (`CodeFunction.pads`), so even a
funclet without calls (an empty `catch {}`) has an identity of its own. Neither marker is
a call site.

An invoke's state is the state of the handler its unwind edge reaches (a catchswitch's first
handler, or the cleanuppad); `protecting(call)` walks `next` from there: every handler that
may see an exception raised at that call, in dispatch order. The tries of those states are
the tries that protect the call.

Checks
------
`verify()` returns every violation of `RULES` as a `Finding`. On the module alone: each pad
names its clause, each invoke has an IL offset and reaches a handler pad (so has a state),
each parent chain ends at the root, no block is in two funclets, each filter handler's
filter function exists and its FILTER sits immediately before it, the layout is root first
then clause order, each handler funclet has exactly one pad marker and no other funclet
has the same. Given the IL method, also against its region tree: funclet kinds and
class tokens are their clauses', the funclet tree follows the IL nesting of handlers (a
handler's copy sits in the funclet of its enclosing handler, or — past finallys, whose
normal-path code is no funclet — further out), every funclet copy of a handler holds a copy
of each handler nested in it, a clause whose try holds a call has a pad and no call in a
try is a plain call, catchswitch handler order is clause order, an invoke's state is the
innermost try around its IL offset, and a state's enclosing state is the next outer try.
"""

from __future__ import annotations

import enum
import re
from collections import defaultdict
from dataclasses import dataclass, field

from ..errors import FuncletError, ReaderError
from ..il.regions import Region, RegionKind, RegionTree
from ..reader.lint import read_module
from ..reader.sidetable import ReaderTable
from ..reader.sidetable import CALLSITE_IN_IR, PAD_IN_IR

NO_STATE = -1   # the caller: no handler of this method


class FuncletKind(enum.Enum):
    ROOT = "root"
    CATCH = "catch"
    FILTER_HANDLER = "filter-handler"
    FILTER = "filter"
    FINALLY = "finally"
    FAULT = "fault"

    @property
    def is_handler(self) -> bool:
        """Kinds that have a pad and an EH state (everything but ROOT and FILTER)."""
        return self not in (FuncletKind.ROOT, FuncletKind.FILTER)

    @property
    def region_kind(self) -> RegionKind:
        """The IL region kind this funclet is the code of."""
        return RegionKind(self.value)


@dataclass(frozen=True)
class Funclet:
    """One funclet: the main body, a handler (one copy of it) or an outlined filter."""

    index: int                      # position in FuncletModel.funclets
    kind: FuncletKind
    function: str                   # the LLVM function whose code it is (@name as printed)
    pad: str | None                 # its catchpad/cleanuppad (`%cp3`); None for ROOT and FILTER
    blocks: tuple[str, ...]         # its blocks (the coloring), in module order
    parent: int | None              # the enclosing funclet (None only for ROOT)
    clause: int | None = None       # the IL clause it is the handler (or filter) of
    class_token: int | None = None  # CATCH: the clause's class token (unsigned)
    catchswitch: str | None = None  # CATCH / FILTER_HANDLER: the catchswitch it belongs to
    filter: int | None = None       # FILTER_HANDLER: its FILTER funclet
    handler: int | None = None      # FILTER: its FILTER_HANDLER funclet
    state: int | None = None        # handlers: their EH state
    depth: int = 0                  # enclosing funclets (ROOT 0)
    copy: int = 0                   # rank among the funclets of the same clause and kind
    copies: int = 1
    context: str = "main body"      # which copy this is: where its pad sits
    pad_marker: int | None = None   # handlers: the reader's pad marker N in its entry block (its
                                    # identity in the machine code: recover's CodeFunction.pads)

    @property
    def label(self) -> str:
        if self.kind is FuncletKind.ROOT:
            return "root"
        clause = f" #{self.clause}" if self.clause is not None else " #?"
        copy = f" (copy {self.copy + 1}/{self.copies})" if self.copies > 1 else ""
        return f"{self.kind.value}{clause}{copy}"


@dataclass(frozen=True)
class Catchswitch:
    """One catchswitch: the dispatch of one try, in one context."""

    name: str                       # `%cs2`
    block: str
    parent: int                     # the funclet it sits in
    handlers: tuple[int, ...]       # handler funclets, in the order the dispatch tries them
    unwind: str | None              # the block it unwinds to; None: the caller


@dataclass(frozen=True)
class EHState:
    """One CLR EH state: one handler funclet (see the module docstring for the numbering)."""

    number: int
    funclet: int
    kind: FuncletKind
    clause: int | None
    try_states: tuple[int, ...]     # all handlers of the same try, in handler order
    next: int                       # next handler the dispatch tries, else `enclosing`
    enclosing: int                  # first state of the next outer try; NO_STATE: the caller
    handler_parent: int             # state of the funclet the pad sits in; NO_STATE: main body
    enclosing_from: str             # catchswitch | cleanupret | unwind-edge | nothing leaves it


@dataclass(frozen=True)
class CallSite:
    """A call or invoke of the parent function (intrinsics excluded)."""

    block: str
    funclet: int
    il_offset: int | None           # the IL instruction it was translated from
    callee: str
    invoke: bool
    unwind: str | None = None       # invokes: the pad block the unwind edge reaches
    state: int | None = None        # invokes: the EH state of that pad; None if it is no pad
    callsite: int | None = None     # the reader's call-site marker N right before it (its identity
                                    # in the machine code: recover's CallSite.callsites); None: none

    @property
    def where(self) -> str:
        il = f"IL_{self.il_offset:04x}" if self.il_offset is not None else "IL_????"
        return f"{il} in block %{self.block.lstrip('%')}"


@dataclass(frozen=True)
class Finding:
    """One consistency violation found by `FuncletModel.verify`."""

    rule: str
    where: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.where}: {self.detail}"


RULES = (
    "pad-without-clause",       # a pad without its entry in the reader's side table (its IL clause)
    "invoke-without-il-offset",
    "invoke-without-state",     # an invoke whose unwind edge reaches no handler pad
    "parent-chain",             # a funclet whose parent chain does not end at the root
    "funclet-blocks-overlap",   # a block in two funclets (LLVM would clone it)
    "filter-missing",           # a filter handler whose filter function is not in the module
    "filter-order",             # a filter not immediately before its handler in the layout
    "layout-order",             # root not first, or handlers out of clause order
    "cleanup-exits-disagree",   # cleanuprets of one pad unwinding to different places
    "pad-marker",               # with pad markers: a handler without exactly one of its own
    # with the IL method:
    "clause-without-pad",       # a clause whose try holds a call has no handler funclet
    "unprotected-call",         # a call (not an invoke) inside a try
    "funclet-kind",             # funclet kind or class token differs from its clause
    "funclet-parent",           # the funclet tree disagrees with the IL nesting of handlers
    "missing-copy",             # a funclet copy of a handler lacks a handler nested in it
    "handler-order",            # a catchswitch's handlers not in clause order
    "invoke-state",             # an invoke's state is not the innermost try around its IL offset
    "state-enclosing",          # a state's enclosing state is not the IL's next outer try
)


# --------------------------------------------------------------------------------------------
# The model


@dataclass(frozen=True)
class FuncletModel:
    parent: str                                 # the parent function (as the reader names it)
    funclets: tuple[Funclet, ...]               # [0] is ROOT, then pads in module order, filters
    catchswitches: tuple[Catchswitch, ...]
    states: tuple[EHState, ...]                 # states[n].number == n
    calls: tuple[CallSite, ...]                 # every call and invoke of the parent (module order)
    layout: tuple[int, ...]                     # funclet indices in final-image order
    dispatch_blocks: tuple[str, ...] = ()       # catchswitch blocks (their own color)
    problems: tuple[Finding, ...] = ()          # what building the model noticed
    regions: RegionTree | None = field(default=None, compare=False, repr=False)

    # -- questions --------------------------------------------------------------------------

    @property
    def root(self) -> Funclet:
        return self.funclets[0]

    @property
    def invokes(self) -> tuple[CallSite, ...]:
        return tuple(c for c in self.calls if c.invoke)

    def children(self, funclet: Funclet | int) -> tuple[Funclet, ...]:
        i = funclet if isinstance(funclet, int) else funclet.index
        return tuple(f for f in self.funclets if f.parent == i)

    def handlers_of(self, clause: int) -> tuple[Funclet, ...]:
        """Every handler funclet (every copy) of IL clause `clause`, in layout order."""
        return tuple(self.funclets[i] for i in self.layout
                     if self.funclets[i].clause == clause and self.funclets[i].kind.is_handler)

    def funclet_of_pad(self, pad: str) -> Funclet:
        return next(f for f in self.funclets if f.pad == pad)

    def catchswitch(self, name: str) -> Catchswitch:
        return next(c for c in self.catchswitches if c.name == name)

    def state_of(self, funclet: Funclet | int) -> EHState | None:
        f = self.funclets[funclet] if isinstance(funclet, int) else funclet
        return self.states[f.state] if f.state is not None else None

    def chain(self, state: int) -> tuple[EHState, ...]:
        """The states the dispatch visits from `state` on (`next` links), ending at the caller."""
        out, seen = [], set()
        while state != NO_STATE and state not in seen:
            seen.add(state)
            out.append(self.states[state])
            state = self.states[state].next
        return tuple(out)

    def protecting(self, call: CallSite) -> tuple[EHState, ...]:
        """Every handler that may see an exception raised at `call`, in dispatch order."""
        return self.chain(call.state) if call.invoke and call.state is not None else ()

    def try_clauses(self, state: int) -> tuple[int | None, ...]:
        """The IL clauses of the try a state's handler belongs to (one catchswitch or cleanup)."""
        return tuple(self.states[s].clause for s in self.states[state].try_states)

    # -- the check --------------------------------------------------------------------------

    def verify(self) -> list[Finding]:
        """Every inconsistency, as findings (empty: the model is sound)."""
        out = list(self.problems)
        for check in _CHECKS:
            check(self, out)
        if self.regions is not None:
            for check in _IL_CHECKS:
                check(self, self.regions, out)
        return out

    # -- printing ---------------------------------------------------------------------------

    def __str__(self) -> str:
        lines = [f"funclet model of {self.parent}: {len(self.funclets)} funclets, {len(self.states)} EH states, "
                 + f"{len(self.invokes)} invokes", "funclet tree:"]

        def walk(f: Funclet, indent: int) -> None:
            extra = []
            if f.pad:
                extra.append(f.pad)
            if f.class_token is not None:
                extra.append(f"token 0x{f.class_token:08X}")
            if f.catchswitch:
                extra.append(f"in {f.catchswitch}")
            if f.kind is FuncletKind.FILTER:
                extra.append(f"{f.function} for funclet {f.handler}")
            if f.state is not None:
                extra.append(f"state {f.state}")
            if f.pad_marker is not None:
                extra.append(f"pad marker {f.pad_marker}")
            extra.append(f"{len(f.blocks)} blocks")
            lines.append(f"{'  ' * indent}[{f.index}] {f.label}: " + ", ".join(extra) + f"  — {f.context}")
            for c in self.children(f):
                walk(c, indent + 1)

        walk(self.root, 1)
        if self.catchswitches:
            lines.append("catchswitches (handler order):")
            for cs in self.catchswitches:
                handlers = ", ".join(self.funclets[h].label for h in cs.handlers)
                unwind = f"unwind to {cs.unwind}" if cs.unwind else "unwind to caller"
                lines.append(f"  {cs.name} in {self.funclets[cs.parent].label}: [{handlers}] {unwind}")
        if self.states:
            lines.append("EH states (next / enclosing / handler parent):")
            for s in self.states:
                lines.append(f"  {s.number:3d}  {self.funclets[s.funclet].label:<28} next {s.next:3d}  "
                             f"enclosing {s.enclosing:3d} ({s.enclosing_from})  parent {s.handler_parent:3d}")
        if self.invokes:
            lines.append("invokes (state → handlers that may see it):")
            for c in self.invokes:
                chain = " → ".join(str(s.number) for s in self.protecting(c)) or "?"
                lines.append(f"  {c.where:<34} in {self.funclets[c.funclet].label:<20} {c.callee:<40.40} "
                             f"state {chain}")
        lines.append("layout:")
        for n, i in enumerate(self.layout):
            f = self.funclets[i]
            lines.append(f"  {n:3d}. {f.label}" + (f"  — {f.context}" if f.kind is not FuncletKind.ROOT else ""))
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# The markers, as LLVM prints inline asm

# The reader's zero-byte marker before each call (`Translator.call`): `call void asm sideeffect
# "# llilc.callsite N", ""()`; LLVM prints inline asm as `asm sideeffect "<text>", "<constraints>"`.
_CALLSITE_MARKER = CALLSITE_IN_IR
# The reader's zero-byte marker right after each pad (`Translator.pad_marker`): "# llilc.pad N".
_PAD_MARKER = PAD_IN_IR
_CALLEE = re.compile(r"\b(?:call|invoke)\b[^@%]*?(@(?:\"(?:[^\"\\]|\\.)*\"|[-\w$.]+)|%[-\w$.]+)\(")


# --------------------------------------------------------------------------------------------
# Building


def build_funclet_model(module_text: str, parent: str, il_method=None,
                        table: ReaderTable | None = None) -> FuncletModel:
    """The funclet model of the reader's module (see the module docstring).

    `parent` is the parent function's name as the reader writes it (`ReaderResult.parent`);
    `il_method` (an `ILMethod`), when given, lets `verify` hold the model against the IL;
    `table` is the reader's side table (`ReaderResult.table`): without it no pad has a
    clause and no call an IL offset (`verify` says so).
    """
    where = getattr(il_method, "name", None)
    try:
        _, functions = read_module(module_text)
    except ReaderError as e:
        raise FuncletError(e.reason, method=where, kind="llvm-parse") from None
    index = next((i for i, fn in enumerate(functions) if fn.name == _bare(parent)), None)
    if index is None:
        raise FuncletError(f"the parent function {parent} is not defined in the module", method=where,
                           kind="parent-missing")
    b = _Builder(functions, index, parent, where, table if table is not None else ReaderTable(parent))
    b.funclets()
    b.catchswitches()
    b.layout()
    b.states()
    b.call_sites()
    return b.model(il_method.regions if il_method is not None else None)


class _Builder:
    """The steps of `build_funclet_model`, sharing the reading of the module."""

    def __init__(self, functions, index: int, parent: str, where: str | None, table: ReaderTable):
        self.f = functions[index]
        self.parent = parent
        self.where = where
        self.table = table
        self.problems: list[Finding] = []
        self.functions_by_name = {fn.name: fn for fn in functions}

    # -- step 1: funclets ------------------------------------------------------------------

    def funclets(self) -> None:
        f = self.f
        self.rows: list[dict] = [{"kind": FuncletKind.ROOT, "function": self.parent, "pad": None, "parent": None}]
        self.index_of_pad: dict = {None: 0}
        self.pad_of_row: list = [None]
        for block in f.blocks:
            pad = block.pad
            if pad is None or pad.opcode == "catchswitch":
                continue
            entry = self.table.pad_by_name.get(pad.name)
            row = {"pad": pad.name, "function": self.parent, "clause": entry.clause if entry is not None else None}
            markers = [int(m.group(1)) for inst in block.insts if inst.opcode == "call"
                       and (m := _PAD_MARKER.search(inst.text)) is not None]
            row["pad_marker"] = markers[0] if len(markers) == 1 else None
            if len(markers) > 1:
                self.problems.append(Finding("pad-marker", f"block {block.label}",
                                             f"{pad.name} is followed by {len(markers)} pad markers: {markers}"))
            args = f.catchpad_args(pad)
            if pad.opcode == "catchpad":
                if len(args) >= 2 and args[1].startswith("ptr @"):
                    row.update(kind=FuncletKind.FILTER_HANDLER, filter_function=args[1][4:])
                else:
                    row.update(kind=FuncletKind.CATCH, class_token=_unsigned_i32(args[0]) if args else None)
                row["catchswitch"] = f.pad_parent(pad).name if f.pad_parent(pad) is not None else None
            else:
                row["kind"] = FuncletKind.FAULT if args else FuncletKind.FINALLY
            if row["clause"] is None:
                self.problems.append(Finding("pad-without-clause", f"block {block.label}",
                                             f"{pad.name} has no entry in the reader's table"))
            self.index_of_pad[pad] = len(self.rows)
            self.rows.append(row)
            self.pad_of_row.append(pad)
        for i, pad in enumerate(self.pad_of_row[1:], start=1):
            self.rows[i]["parent"] = self.index_of_pad.get(f.funclet_parent(pad))
        # blocks: the coloring (catchswitch blocks are their own color: dispatch, no funclet)
        blocks: dict[int, list[str]] = defaultdict(list)
        self.dispatch_blocks: list[str] = []
        self.funclet_of_block: dict = {}
        for block in f.blocks:
            colors = f.colors.get(block, [])
            if block.pad is not None and block.pad.opcode == "catchswitch":
                self.dispatch_blocks.append(block.label)
                continue
            for color in colors:
                i = self.index_of_pad[color]
                blocks[i].append(block.label)
                self.funclet_of_block.setdefault(block, i)
            if len(colors) > 1:
                self.problems.append(Finding("funclet-blocks-overlap", f"block {block.label}",
                                             "in " + ", ".join(_pad_name(c) for c in colors)))
        for i, row in enumerate(self.rows):
            row["blocks"] = tuple(blocks[i])
        # filters: one per filter handler (copy), linked both ways; the filter's blocks are its function's
        for i, row in list(enumerate(self.rows)):
            if row["kind"] is not FuncletKind.FILTER_HANDLER:
                continue
            name = row.pop("filter_function")
            fn = self.functions_by_name.get(_bare(name))
            if fn is None:
                self.problems.append(Finding("filter-missing", f"funclet {row['pad']}",
                                             f"names {name}, which the module does not define"))
                continue
            row["filter"] = len(self.rows)
            self.rows.append({"kind": FuncletKind.FILTER, "function": name, "pad": None, "parent": row["parent"],
                              "clause": row["clause"], "handler": i,
                              "blocks": tuple(b.label for b in fn.blocks if b in fn.colors)})
            self.pad_of_row.append(None)
        # depth (parent-chain length); a chain that does not end at the root is a finding
        for i, row in enumerate(self.rows):
            depth, p, seen = 0, row["parent"], {i}
            while p is not None and p not in seen and p != 0:
                seen.add(p)
                depth += 1
                p = self.rows[p]["parent"]
            row["depth"] = depth + (1 if i != 0 else 0)

    # -- step 2: catchswitches -------------------------------------------------------------

    def catchswitches(self) -> None:
        f = self.f
        self.cs_rows = []
        for block in f.blocks:
            cs = block.pad
            if cs is None or cs.opcode != "catchswitch":
                continue
            unwinds = "unwind label" in cs.text
            handler_labels = cs.labels[:-1] if unwinds else cs.labels
            handlers = tuple(self.index_of_pad[f.block_by_label[label].pad] for label in handler_labels)
            self.cs_rows.append({"name": cs.name, "block": block.label,
                                 "parent": self.index_of_pad.get(f.funclet_parent(cs), 0),
                                 "handlers": handlers, "unwind": cs.labels[-1] if unwinds else None})
        self.cs_by_inst = {block.pad: row for block, row in
                           zip((b for b in f.blocks if b.pad is not None and b.pad.opcode == "catchswitch"),
                               self.cs_rows)}

    # -- step 3: layout --------------------------------------------------------------------

    def layout(self) -> None:
        handlers = [i for i, r in enumerate(self.rows) if r["kind"].is_handler]
        inf = float("inf")
        handlers.sort(key=lambda i: (inf if self.rows[i]["clause"] is None else self.rows[i]["clause"],
                                     self.rows[i]["depth"], i))
        order = [0]
        for i in handlers:
            if self.rows[i].get("filter") is not None:
                order.append(self.rows[i]["filter"])
            order.append(i)
        order.extend(i for i, r in enumerate(self.rows) if i not in order)
        self.order = order
        self.handler_order = handlers
        groups: dict[tuple, list[int]] = defaultdict(list)
        for i in order[1:]:
            groups[(self.rows[i]["clause"], self.rows[i]["kind"])].append(i)
        for members in groups.values():
            for rank, i in enumerate(members):
                self.rows[i]["copy"], self.rows[i]["copies"] = rank, len(members)

    # -- step 4: EH states -----------------------------------------------------------------

    def states(self) -> None:
        self.state_of_row = {i: n for n, i in enumerate(self.handler_order)}
        for i, n in self.state_of_row.items():
            self.rows[i]["state"] = n
        n_states = len(self.handler_order)
        try_states = [()] * n_states
        nxt = [NO_STATE] * n_states
        enclosing = [NO_STATE] * n_states
        source = ["nothing leaves it"] * n_states
        for cs in self.cs_rows:
            states = tuple(self.state_of_row[h] for h in cs["handlers"])
            outer = self._dest_state(cs["unwind"])
            for k, s in enumerate(states):
                try_states[s] = states
                enclosing[s], source[s] = outer, "catchswitch"
                nxt[s] = states[k + 1] if k + 1 < len(states) else outer
        # where each cleanup's cleanuprets go, in one walk of the blocks (not one per cleanup)
        self.cleanuprets: dict = defaultdict(set)
        for block in self.f.blocks:
            if (term := block.terminator) is not None and term.opcode == "cleanupret" and block in self.f.colors:
                self.cleanuprets[self.f.exit_pad(term)].add(term.labels[0] if term.labels else None)
        for i, row in enumerate(self.rows):
            if row["kind"] not in (FuncletKind.FINALLY, FuncletKind.FAULT):
                continue
            s = self.state_of_row[i]
            try_states[s] = (s,)
            outer, source[s] = self._cleanup_exit(self.pad_of_row[i])
            enclosing[s] = nxt[s] = outer
        self.state_rows = []
        for n, i in enumerate(self.handler_order):
            parent = self.rows[i]["parent"]
            self.state_rows.append({"number": n, "funclet": i, "kind": self.rows[i]["kind"],
                                    "clause": self.rows[i]["clause"], "try_states": try_states[n], "next": nxt[n],
                                    "enclosing": enclosing[n],
                                    "handler_parent": self.state_of_row.get(parent, NO_STATE),
                                    "enclosing_from": source[n]})

    def _dest_state(self, label: str | None) -> int:
        """The state an unwind edge to `label` reaches (NO_STATE: the caller; None: no pad)."""
        if label is None:
            return NO_STATE
        block = self.f.block_by_label.get(label)
        pad = block.pad if block is not None else None
        if pad is None:
            return None
        if pad.opcode == "catchswitch":
            cs = self.cs_by_inst[pad]
            return self.state_of_row[cs["handlers"][0]] if cs["handlers"] else None
        return self.state_of_row.get(self.index_of_pad.get(pad))

    def _cleanup_exit(self, pad) -> tuple[int, str]:
        """Where an exception continues after cleanup `pad`: its cleanuprets' target, else an
        unwind edge that leaves it (from it or a funclet inside it), else the caller."""
        f = self.f
        rets = self.cleanuprets.get(pad, set())
        if len(rets) > 1:
            self.problems.append(Finding("cleanup-exits-disagree", f"funclet {pad.name}",
                                         "its cleanuprets unwind to " + ", ".join(sorted(map(str, rets)))))
        if rets:
            return self._dest_state(min(rets, key=str)), "cleanupret"
        outside = f.ancestors(pad)
        for block in f.blocks:
            term = block.terminator
            if term is None or block not in f.colors or not term.labels:
                continue
            if term.opcode == "invoke":
                inside = any(c is pad or pad in f.ancestors(c) for c in f.funclets_of(block) if c is not None)
                dest = term.labels[-1]
            elif term.opcode in ("catchswitch", "cleanupret") and "unwind label" in term.text:
                src = term.block.pad if term.opcode == "catchswitch" else f.exit_pad(term)
                inside = src is not None and (pad in f.ancestors(src) or src is pad)
                dest = term.labels[-1]
            else:
                continue
            dest_pad = f.block_by_label[dest].pad if dest in f.block_by_label else None
            if inside and dest_pad is not None and f.funclet_parent(dest_pad) in outside:
                return self._dest_state(dest), "unwind-edge"
        return NO_STATE, "nothing leaves it"

    # -- step 5: call sites ----------------------------------------------------------------

    def call_sites(self) -> None:
        f = self.f
        self.call_rows = []
        for block in f.blocks:
            if block not in f.colors or block not in self.funclet_of_block:
                continue
            marker = None                   # the call-site marker that precedes the next call
            for k in block.calls:           # (the lint's reading lists them)
                inst = block.insts[k]
                if inst.opcode == "callbr":
                    continue
                if "asm" in inst.text:      # (both markers are inline asm: most calls skip both searches)
                    if (m := _CALLSITE_MARKER.search(inst.text)) is not None:
                        marker = int(m.group(1))
                        continue
                    if _PAD_MARKER.search(inst.text) is not None:
                        continue            # a funclet's identity, no call
                m = _CALLEE.search(inst.text)
                callee = m.group(1) if m else "?"
                if callee.startswith(("@llvm.", '@"llvm.')):
                    continue
                entry = self.table.call_by_marker.get((self.parent, marker)) if marker is not None else None
                row = {"block": block.label, "funclet": self.funclet_of_block[block],
                       "il_offset": entry.il_offset if entry is not None else None, "callee": callee,
                       "invoke": inst.opcode == "invoke", "callsite": marker}
                marker = None
                if row["invoke"]:
                    row["unwind"] = inst.labels[-1]
                    row["state"] = self._dest_state(inst.labels[-1])
                self.call_rows.append(row)

    # -- the value -------------------------------------------------------------------------

    def model(self, regions: RegionTree | None) -> FuncletModel:
        rows = self.rows
        for i, row in enumerate(rows):
            row["context"] = _context(rows, i, regions)
        funclets = tuple(Funclet(index=i, kind=r["kind"], function=r["function"], pad=r["pad"],
                                 blocks=r.get("blocks", ()), parent=r["parent"], clause=r.get("clause"),
                                 class_token=r.get("class_token"), catchswitch=r.get("catchswitch"),
                                 filter=r.get("filter"), handler=r.get("handler"), state=r.get("state"),
                                 depth=r["depth"], copy=r.get("copy", 0), copies=r.get("copies", 1),
                                 context=r["context"], pad_marker=r.get("pad_marker"))
                         for i, r in enumerate(rows))
        catchswitches = tuple(Catchswitch(c["name"], c["block"], c["parent"], c["handlers"], c["unwind"])
                              for c in self.cs_rows)
        states = tuple(EHState(**s) for s in self.state_rows)
        calls = tuple(CallSite(**c) for c in self.call_rows)
        return FuncletModel(self.parent, funclets, catchswitches, states, calls, tuple(self.order),
                            tuple(self.dispatch_blocks), tuple(self.problems), regions)


def _context(rows: list[dict], i: int, regions: RegionTree | None) -> str:
    """Which copy a funclet is: the funclet its pad sits in, and (with the IL) the enclosing
    finallys whose normal-path copy it lies in."""
    row = rows[i]
    if row["kind"] is FuncletKind.ROOT:
        return "the main body"
    if row["kind"] is FuncletKind.FILTER:
        return f"outlined, before funclet {row['handler']}"
    p = row["parent"]
    where = "main body" if p in (None, 0) else \
        f"{rows[p]['kind'].value} #{rows[p].get('clause')} funclet {rows[p]['pad']}"
    if regions is None or row.get("clause") is None:
        return f"in the {where}" if p in (None, 0) else f"in {where}"
    funclet_clauses = set()
    q = p
    while q not in (None, 0):
        funclet_clauses.add(rows[q].get("clause"))
        q = rows[q]["parent"]
    normal = [h for h in _enclosing_handlers(regions, _handler_region(regions, row["clause"]))
              if h.clauses[0] not in funclet_clauses and h.kind is RegionKind.FINALLY]
    text = f"in the {where}" if p in (None, 0) else f"in {where}"
    if normal:
        text += ", normal-path copy of " + ", ".join(f"finally #{h.clauses[0]}" for h in normal)
    return text


# --------------------------------------------------------------------------------------------
# The checks


def _check_calls(model: FuncletModel, out: list[Finding]) -> None:
    for c in model.invokes:
        if c.il_offset is None:
            out.append(Finding("invoke-without-il-offset", c.where, f"invoke of {c.callee}"))
        if c.state is None:
            out.append(Finding("invoke-without-state", c.where, f"unwinds to {c.unwind}, which is no handler pad"))


def _check_parents(model: FuncletModel, out: list[Finding]) -> None:
    for f in model.funclets[1:]:
        p, seen = f.parent, {f.index}
        while p is not None and p != 0 and p not in seen and 0 <= p < len(model.funclets):
            seen.add(p)
            p = model.funclets[p].parent
        if p != 0:
            out.append(Finding("parent-chain", f.label, "its parent chain does not end at the root"))


def _check_filters(model: FuncletModel, out: list[Finding]) -> None:
    position = {i: n for n, i in enumerate(model.layout)}
    for f in model.funclets:     # (a filter handler without its filter is `filter-missing`, found building)
        if f.kind is FuncletKind.FILTER and (f.handler is None or f.index not in position
                                             or position.get(f.handler) != position[f.index] + 1):
            out.append(Finding("filter-order", f.label, "the filter is not immediately before its handler"))


def _check_layout(model: FuncletModel, out: list[Finding]) -> None:
    if not model.layout or model.layout[0] != 0 or sorted(model.layout) != list(range(len(model.funclets))):
        out.append(Finding("layout-order", "layout", "the root is not first, or not every funclet is placed once"))
        return
    clauses = [model.funclets[i].clause for i in model.layout[1:]]
    known = [c for c in clauses if c is not None]
    if known != sorted(known):
        out.append(Finding("layout-order", "layout", f"clauses out of order: {clauses}"))


def _check_pad_markers(model: FuncletModel, out: list[Finding]) -> None:
    # (several markers after one pad are found building: that funclet's pad_marker is None)
    # Pad markers are optional (the reader's Options.pad_markers): all handlers or none.
    owners: dict[int, list[Funclet]] = defaultdict(list)
    marked = any(f.pad_marker is not None for f in model.funclets)
    for f in model.funclets:
        if marked and f.kind.is_handler and f.pad_marker is None:
            out.append(Finding("pad-marker", f.label, f"{f.pad} is not followed by exactly one pad marker"))
        if f.pad_marker is not None:
            owners[f.pad_marker].append(f)
    for n, funclets in owners.items():
        if len(funclets) > 1:
            out.append(Finding("pad-marker", ", ".join(f.label for f in funclets), f"all carry pad marker {n}"))


_CHECKS = (_check_parents, _check_calls, _check_filters, _check_layout, _check_pad_markers)


# -- against the IL ----------------------------------------------------------------------------

def _handler_region(tree: RegionTree, clause: int) -> Region | None:
    return next((r for r in tree.regions if r.kind.is_handler and r.clauses == (clause,)), None)


def _enclosing_handlers(tree: RegionTree, region: Region | None) -> list[Region]:
    """The handler regions enclosing `region` (not itself), innermost first."""
    out, r = [], region
    while r is not None and r.parent is not None:
        r = tree.regions[r.parent]
        if r.kind.is_handler or r.kind is RegionKind.FILTER:
            out.append(r)
    return out


def innermost_try(tree: RegionTree, offset: int) -> Region | None:
    """The innermost try region holding IL offset `offset`."""
    r: Region | None = tree.innermost(offset)
    while r is not None and r.kind is not RegionKind.TRY:
        r = tree.regions[r.parent] if r.parent is not None else None
    return r


def enclosing_try(tree: RegionTree, region: Region) -> Region | None:
    """The innermost try strictly enclosing `region`."""
    r = tree.regions[region.parent] if region.parent is not None else None
    while r is not None and r.kind is not RegionKind.TRY:
        r = tree.regions[r.parent] if r.parent is not None else None
    return r


def expected_parent_clauses(tree: RegionTree, clause: int) -> list[int | None]:
    """The clauses a copy of `clause`'s handler may have as its parent funclet: the innermost
    enclosing handler, or past any finallys (whose normal-path copy is not a funclet) the next
    one out; None is the root."""
    out: list[int | None] = []
    for h in _enclosing_handlers(tree, _handler_region(tree, clause)):
        out.append(h.clauses[0])
        if h.kind is not RegionKind.FINALLY:
            return out
    out.append(None)
    return out


def _check_kinds_and_parents(model: FuncletModel, tree: RegionTree, out: list[Finding]) -> None:
    for f in model.funclets:
        if f.kind is FuncletKind.ROOT or f.clause is None:
            continue
        if not 0 <= f.clause < len(tree.clauses):
            out.append(Finding("funclet-kind", f.label, "no such IL clause"))
            continue
        h = _handler_region(tree, f.clause)
        expected = RegionKind.FILTER_HANDLER if f.kind is FuncletKind.FILTER else h.kind
        kind = RegionKind.FILTER_HANDLER if f.kind is FuncletKind.FILTER else f.kind.region_kind
        if kind is not expected:
            out.append(Finding("funclet-kind", f.label, f"the clause is a {h.kind.value}"))
        token = tree.clauses[f.clause].class_token
        if f.kind is FuncletKind.CATCH and token is not None and f.class_token != token:
            out.append(Finding("funclet-kind", f.label, f"class token 0x{f.class_token or 0:08X}, "
                                                        f"the clause says 0x{token:08X}"))
        parent = model.funclets[f.parent] if f.parent is not None else None
        parent_clause = None if parent is None or parent.kind is FuncletKind.ROOT else parent.clause
        allowed = expected_parent_clauses(tree, f.clause)
        if parent_clause not in allowed:
            out.append(Finding("funclet-parent", f.label,
                               f"its parent is {parent.label if parent else 'none'}; the IL nests it in "
                               + " or ".join("the root" if c is None else f"clause #{c}" for c in allowed)))


def _check_copies(model: FuncletModel, tree: RegionTree, out: list[Finding]) -> None:
    # Every copy of a handler's code holds the same IL, so a handler nested in it (through
    # tries only) that has a pad anywhere has one in every funclet copy of the outer handler.
    nested: dict[int | None, list[int]] = defaultdict(list)
    for c in tree.clauses:
        nested[expected_parent_clauses(tree, c.index)[0]].append(c.index)
    has_pad = {f.clause for f in model.funclets if f.kind.is_handler}
    for f in model.funclets:
        if not f.kind.is_handler or f.clause is None:
            continue
        for j in nested.get(f.clause, ()):
            if j in has_pad and not any(g.parent == f.index and g.clause == j and g.kind.is_handler
                                        for g in model.funclets):
                out.append(Finding("missing-copy", f.label, f"clause #{j} is nested in it and has a pad "
                                                            f"elsewhere, but no copy inside this funclet"))


def _check_pads_of_clauses(model: FuncletModel, tree: RegionTree, out: list[Finding]) -> None:
    has_pad = {f.clause for f in model.funclets if f.kind.is_handler}
    tries = {c.index: (c.try_start, c.try_end) for c in tree.clauses}
    for c in model.calls:
        if c.il_offset is None:
            continue
        t = innermost_try(tree, c.il_offset)
        if t is not None and not c.invoke:
            out.append(Finding("unprotected-call", c.where, f"a call of {c.callee} inside {t.label}"))
    offsets = [c.il_offset for c in model.calls if c.il_offset is not None]
    for index, (start, end) in tries.items():
        if index not in has_pad and any(start <= o < end for o in offsets):
            out.append(Finding("clause-without-pad", f"clause #{index}",
                               f"its try IL_{start:04x}..IL_{end:04x} holds a call but the clause has no funclet"))


def _check_handler_order(model: FuncletModel, tree: RegionTree, out: list[Finding]) -> None:
    for cs in model.catchswitches:
        clauses = [model.funclets[h].clause for h in cs.handlers]
        first = _handler_region(tree, clauses[0]) if clauses and clauses[0] is not None else None
        expected = [tree.regions[h].clauses[0] for h in tree.regions[first.try_region].handlers] if first else None
        if clauses != expected:
            out.append(Finding("handler-order", cs.name, f"handlers of clauses {clauses}, the try has {expected}"))


def _check_states(model: FuncletModel, tree: RegionTree, out: list[Finding]) -> None:
    def try_of(state: int) -> Region | None:
        clause = model.states[state].clause
        h = _handler_region(tree, clause) if clause is not None else None
        return tree.regions[h.try_region] if h is not None else None

    for c in model.invokes:
        if c.state is None or c.il_offset is None:
            continue
        il_try = innermost_try(tree, c.il_offset)
        got = try_of(c.state) if c.state != NO_STATE else None
        if got is not il_try:
            out.append(Finding("invoke-state", c.where,
                               f"state {c.state} is {got.label if got else 'no try'}; the IL offset lies innermost "
                               f"in {il_try.label if il_try else 'no try'}"))
    for s in model.states:
        t = try_of(s.number)
        if t is None:
            continue
        il_outer = enclosing_try(tree, t)
        got = try_of(s.enclosing) if s.enclosing != NO_STATE else None
        if got is not il_outer and s.enclosing_from != "nothing leaves it":
            out.append(Finding("state-enclosing", f"state {s.number} ({model.funclets[s.funclet].label})",
                               f"encloses in {got.label if got else 'the caller'}; the IL's next outer try is "
                               f"{il_outer.label if il_outer else 'none'}"))


_IL_CHECKS = (_check_kinds_and_parents, _check_copies, _check_pads_of_clauses, _check_handler_order, _check_states)


# --------------------------------------------------------------------------------------------
# Small helpers


def _unsigned_i32(arg: str) -> int | None:
    m = re.fullmatch(r"i32 (-?\d+)", arg)
    return int(m.group(1)) & 0xFFFFFFFF if m else None


def _bare(name: str) -> str:
    """A global's name as the lint's reading keys functions: without `@` and quotes."""
    name = name.removeprefix("@")
    return name[1:-1] if name.startswith('"') else name


def _pad_name(pad) -> str:
    return "the main body" if pad is None else (pad.name or pad.text)
