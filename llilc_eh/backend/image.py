"""The final image: the main body, then the funclets in *our* order, every reference fixed.

LLVM lays out the parent function, its funclets (`?catch$N@?0?<parent>@4HA`,
`?dtor$N@...`) and the outlined filter functions in an order of its own. The CLR wants
the main body first and contiguous, then the handlers; we put them in the funclet model's
`layout` (clause order, RyuJIT's), each filter immediately before its filter handler
(DESIGN decision 9). `link_final_image(recovered, coff, model, parent)` builds that image
in named steps, as a pass reads in LLVM:

    match funclets  →  stray tails  →  lay out  →  copy  →  frame constants
    →  fix references  →  read-only data (jump tables)  →  unwind and .pdata

and `FinalImage.verify()` is the one check at the end.

Matching model funclets to LLVM's funclets
------------------------------------------
A funclet symbol's number is a MachineBasicBlock number: at O0 it follows the module's
block order, at O2 blocks are renumbered and pads moved or deleted, so the name is no key;
nor is LLVM's funclet order (the module's at O0, not at O2).

With the reader's `Options.pad_markers` (off by default: the markers keep LLVM from
deleting empty cleanups) the pad marker decides: the reader puts a zero-byte
`# llilc.pad N` right after every catchpad and cleanuppad (`Funclet.pad_marker`), and `recover` finds it in the code of the
object funclet that holds that pad (`CodeFunction.pads`), so an object funclet carrying
marker N *is* the model funclet with marker N -- even one without a single call (an empty
`catch {}`, a finally that only stores locals), which nothing else tells apart from its
siblings. The rest of the evidence must agree: a pad marker the other evidence rules out,
one no model funclet has, or one in two object funclets is a `BackendError`
(`funclet-match`) naming the object funclet and the model funclet. Several pad markers in
one object funclet: at O2 SimplifyCFG merges a cleanup that ends in a cleanupret to a next
cleanup into it when it is that cleanup's only way in (the first pad stays, the next one's
code is appended), so the markers must name such a chain of cleanups (else an error); the
funclet is the one of them the rest of the evidence picks (its calls), else the chain's
head, and the others have no code of their own (`absent`; `FinalImage.merged` says where
their code went). Objects without pad markers (the default) are matched by the evidence
alone; an object funclet without one among funclets with them is
too. The evidence, per object funclet, all of it read from the object and held against the
model:

* its kind, and from LLVM's CLR table (`llvm_table`) the clause flags and class token of
  its clauses: catch with token t = our CATCH of class t, token 0 = a FILTER_HANDLER (the
  reader's catchpad says `i32 0`), finally = FINALLY, fault = FAULT;
* the call-site identities of its calls (the reader's `# llilc.callsite N` markers,
  `recover`'s `CallSite.callsites`, the model's `CallSite.callsite`): a call marked N is a
  call of the model funclet whose blocks hold call N. Without identities (an object from
  before them), the callees instead: every callee the model knows must be one the model
  funclet calls;
* where its try is: a handler's primary (non-duplicate) clauses cover invokes of the
  funclet that holds its pad, so that function maps to the model funclet's parent;
* for every invoke, the handlers whose clauses cover it, inner to outer (primaries, then
  duplicates, in table order): the model invoke(s) it is -- by identity, else any with its
  callee -- sit in the mapped funclet and have exactly that dispatch chain
  (`FuncletModel.protecting`), restricted to the funclets that have code.

Domains (pad markers pin theirs to one funclet) are narrowed by propagation, then searched.
With pad markers the assignment is unique. Without them, and with call-site identities, it
is unique where every handler LLVM keeps covers some invoke; funclets without calls can be
interchangeable (two sibling finallys that only store locals). If several assignments still
fit, the one that keeps LLVM's funclet order = the module's pad order wins (always right at
O0, a guess at O2), then the one whose invokes keep the module's block order;
`FinalImage.ambiguous` names the funclets concerned and `decided_by` what chose (measured:
none among the 5,693 EH methods of the corpus at O2, nor the sample, Python.Runtime and
CoreLib at O0; where pad markers are on, their assignment equals the evidence-only one). A model funclet LLVM removed (an
empty cleanup -- only without pad markers, which keep it; a pad no invoke reaches any more;
a cleanup merged into another) has no code of its own: `FinalImage.absent`; a filter whose
handler is absent is not placed.

Layout and references
---------------------
Each piece starts at the `.text` alignment (LLVM's `.p2align 4`), so the alignment of
everything inside a piece is kept; the gaps are int3 (never executed). A filter function
is copied once per FILTER funclet (the model gives every copy of a filter handler its own
filter). Then every field that can reach across a moved boundary:

* assembler-resolved relative fields (no relocation): `jmp`/`jcc`/`call` rel8/rel32 and
  rip-relative memory operands -- the catchret's `lea rax, [rip + continuation]` in a
  catch funclet pointing back into its parent. A target inside the same piece keeps its
  distance; any other is re-encoded to where its target went (a rel8 that no longer
  reaches is an error);
* REL32..REL32_5 relocations against symbols defined in `.text` (S + A is the target);
* REL32 relocations against read-only data (`.rdata`: jump tables, constants): the data
  is placed after the code in the same image and the field resolved;
* relocations against external symbols (helpers, string literals, handles) stay
  relocations, at their final offsets (`FinalImage.relocations`, same type and addend),
  in the code and in the read-only data (O2 turns some switches into lookup tables of
  static field addresses: ADDR64 entries);
* `<parent>$psp_slot_offset` / `<parent>$fp_offset`: the filter frame constants, resolved.

Jump tables: LLVM's Win64 tables live in `.rdata`, one 32-bit entry per case holding
`target - table`, written as REL32 relocations against `.text` whose addend folds in the
entry's distance from the table (value = S + A - P - 4 once linked). The table's start is
where the dispatching code's `lea reg, [rip + table]` points; the original target is
S + A - (P - table) - 4; the entry becomes final target - final table address. Entries in
any other form (ADDR64 / ADDR32NB, absolute) are rejected with `kind="relink"`.

Filter frame constants
----------------------
The CLR calls every funclet with the establisher frame -- the parent's Initial-SP on x64
-- and the PSPSym lies at the same offset from the Initial-SP in the main body and in every
funclet; LLVM's CoreCLR prologs show both: the main body stores `mov [rsp + D], rsp`
right after its prolog, every funclet does `mov rcx, [rcx + D]`, `mov [rsp + D], rcx`,
`lea rbp, [rcx + F]` (`mov rbp, rcx` when F = 0, as with the SysV convention's smaller
frames). So psp_slot_offset = D, read from the parent's code after
`SizeOfProlog`; fp_offset = F = the parent's frame pointer minus its Initial-SP: the
UNWIND_INFO's SET_FPREG offset plus whatever the prolog allocates or pushes after it.
Both are cross-checked against every funclet prolog. The filter code uses them as
`lea reg, [rip + sym]` (REL32): rewritten in place to `mov reg, imm32` (7 bytes both);
ADDR32 / ADDR64 fields get the value itself.

Targets
-------
`link_final_image(..., target=, cells=)` asks the target (llilc_eh.target) two things. Its
funclet entry thunk (linux-x64: `mov rcx, rdi; mov rdx, rsi`, as the runtime calls a funclet
with RDI/RSI and LLVM's CoreCLR prolog reads RCX/RDX) is placed at the start of every handler
funclet's piece (`_Piece.prefix`, `PlacedRange.entry_thunk`): the segments start after it,
so the offset maps, the relink of every crossing reference and the clause ranges need
nothing new, while the range, its RUNTIME_FUNCTION and the handler start begin at the thunk
and its UNWIND_INFO has the prolog size and every code offset grown by the thunk's size.
Outlined filters are our own functions in our convention: no thunk. `cells` names the
external symbols that are 8-byte data cells (the reader's `External.cell`): each referenced
one gets a zeroed slot after the read-only data (8-aligned, `FinalImage.cells`), the code's
REL32 to it is resolved there (fixup kind `cell`), and an ADDR64 `ImageRelocation` naming the
symbol at the slot tells the installer to write the runtime's value into it. So the code's
remaining relocations are the rel32 of calls (and tail jumps) only.

Unwind data: each range's UNWIND_INFO in the CLR's form (`unwind.to_clr`); a frameless
leaf filter, which LLVM gives no `.pdata`, gets an empty one (version 1, no codes);
`runtime_functions` is the new `.pdata` (image offsets, unwind offsets into
`unwind_data`).

Stray blocks: at O2 LLVM sometimes lays a funclet's catchret block out at the end of the
parent's range (inside the parent's `.pdata` entry, reached only by the funclet's
branches). Such a tail moves to the end of its funclet's range (`Segment`s of a
`PlacedRange`; see `_stray_tails`), so every range holds exactly its own code.

Not handled (each a `BackendError` naming the field, never a silent guess): any other
branch from one range into another (`funclet-split`: no range would hold all of a
funclet's code);
relocations against `.text` other than REL32..REL32_5 (absolute code addresses: ADDR64,
ADDR32, ADDR32NB); read-only data entries against defined symbols other than
table-relative REL32 against `.text` (absolute jump tables, pointers between constants),
or an entry before any table the code points to; references to
writable or other sections (`.data`, `.bss`, `.xdata`); a reference from outside a filter
function into it, or a jump table of a filter function, when that function is placed more
than once (its target is ambiguous); a rel8 branch whose target moved out of reach;
chained UNWIND_INFO; the frame constants in any form but `lea r64, [rip + sym]`, ADDR32,
ADDR64. Discardable sections (`.debug$S` line tables, `.llvm_addrsig`) are not carried:
their code offsets go through `FinalImage.map`. The image has no GC info.

Errors: `BackendError` kinds `funclet-match`, `relink`, `funclet-split`, `frame-constants`.
"""

from __future__ import annotations

import bisect
import dataclasses
import struct
from collections import defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple

import capstone
from capstone import x86 as cs_x86

from ..assembly.native import CodeRange
from ..errors import BackendError, LlilcEhError
from ..funclets.model import FuncletKind, FuncletModel
from ..target import DEFAULT_TARGET, Target
from ..unwind import (
    RuntimeFunction,
    UnwindInfo,
    UnwindOpKind,
    decode_unwind_info,
    encode_unwind_info,
    to_clr,
)
from . import structs
from .codegen import object_symbol
from .coff import CoffObject, RelocationType, SectionFlags
from .llvm_table import decode_llvm_clr_table
from .recover import CodeFunction, RecoveredCode

PSP_SLOT_SUFFIX = "$psp_slot_offset"
FP_OFFSET_SUFFIX = "$fp_offset"
PADDING_BYTE = 0xCC            # int3 between ranges: never executed, traps if it is
SEARCH_BUDGET = 50_000         # search nodes the funclet matcher may visit before it gives up
MAX_SOLUTIONS = 64             # consistent assignments it collects to choose from

_REL32 = {RelocationType.REL32: 0, RelocationType.REL32_1: 1, RelocationType.REL32_2: 2,
          RelocationType.REL32_3: 3, RelocationType.REL32_4: 4, RelocationType.REL32_5: 5}
_CODE_KINDS = {"catch": (FuncletKind.CATCH, FuncletKind.FILTER_HANDLER),
               "cleanup": (FuncletKind.FINALLY, FuncletKind.FAULT)}


def _error(reason: str, kind: str = "relink", offset: int | None = None) -> BackendError:
    return BackendError(reason, kind=kind, offset=offset)


# --------------------------------------------------------------------------------------------
# Values


@dataclass(frozen=True)
class Segment:
    """A run of the object's code and where it went: normally a function's whole range; a
    block LLVM laid out in the wrong function's range moves on its own (see `_stray_tails`)."""

    function: str                    # the object function whose symbol range held it
    source: CodeRange                # in the object's .text
    start: int                       # final offset

    @property
    def end(self) -> int:
        return self.start + self.source.size

    def __str__(self) -> str:
        return (f"[{self.start:#06x}, {self.end:#06x}) <- .text [{self.source.start:#06x}, "
                f"{self.source.end:#06x}) of {self.function}")


@dataclass(frozen=True)
class PlacedRange:
    """One code range of the final image: the main body, a handler, or a filter."""

    funclet: int                     # model funclet index (0: the main body)
    kind: FuncletKind
    function: str                    # the object symbol whose code this is
    code_range: CodeRange            # in the final image
    source: CodeRange                # the function's range in the object's .text
    unwind: UnwindInfo               # CLR form (no language handler)
    unwind_synthesized: bool = False  # a frameless leaf LLVM gave no .pdata: an empty one
    segments: tuple[Segment, ...] = ()  # what the range is made of, in order (usually the
                                        # whole source; see `_stray_tails`)
    entry_thunk: bytes = b""         # the target's funclet entry thunk, at `begin`, before the segments

    @property
    def begin(self) -> int:
        return self.code_range.start

    @property
    def end(self) -> int:
        return self.code_range.end

    @property
    def size(self) -> int:
        return self.code_range.size

    def __str__(self) -> str:
        unwind = "unwind synthesized" if self.unwind_synthesized else \
            f"prolog {self.unwind.prolog_size}, {len(self.unwind.codes)} codes"
        line = (f"[{self.begin:#06x}, {self.end:#06x})  {self.kind.value:<14} funclet {self.funclet:<3} "
                f"from .text [{self.source.start:#06x}, {self.source.end:#06x})  {unwind}  {self.function}")
        if self.entry_thunk:
            line += f"\n      entry thunk {self.entry_thunk.hex(' ')} at {self.begin:#06x}"
        if len(self.segments) > 1 or self.segments and self.segments[0].source != self.source:
            line += "".join(f"\n      segment {s}" for s in self.segments)
        return line


@dataclass(frozen=True)
class FilterConstants:
    """The parent frame constants an outlined filter needs, read from the compiled parent."""

    psp_slot_offset: int             # PSPSym slot, from the establisher frame (Initial-SP)
    fp_offset: int                   # the parent's frame pointer minus its Initial-SP
    evidence: tuple[str, ...] = ()   # where each was read and what agreed

    def __str__(self) -> str:
        lines = [f"filter constants: psp_slot_offset {self.psp_slot_offset}, fp_offset {self.fp_offset}"]
        lines += [f"  {e}" for e in self.evidence]
        return "\n".join(lines)


@dataclass(frozen=True)
class ImageRelocation:
    """A field that still names an external symbol (the JIT-EE resolves it), at its final
    offset, with the object's type and inline addend."""

    offset: int
    type: RelocationType | int
    symbol: str
    addend: int

    def __str__(self) -> str:
        kind = self.type.name if isinstance(self.type, RelocationType) else f"0x{self.type:X}"
        return f"{self.offset:#06x} {kind:<8} {self.symbol}{self.addend:+d}"


@dataclass(frozen=True)
class Fixup:
    """One reference re-encoded because its site and its target moved apart."""

    kind: str                # branch | rip-relative | rel32 | rodata | jump-table | frame-constant
    site: int                # final offset of the field
    size: int                # bytes of the field
    source: int              # original .text offset of the instruction (data offset for tables)
    target: int              # final offset of the target (the value, for a frame constant)
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.site:#06x} {self.kind:<14} -> {self.target:#06x}  (was at .text+{self.source:#x}) {self.detail}".rstrip()


@dataclass(frozen=True)
class ImageFinding:
    """One thing `FinalImage.verify` found wrong."""

    rule: str
    offset: int
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.offset:#06x}: {self.detail}"


@dataclass(frozen=True)
class _Source:
    """What verify() needs of the object: the original code and its relocations."""

    text: bytes
    relocations: dict                # .text field offset -> (type, symbol name, section name, value, inline)
    frame_symbols: dict              # symbol name -> which constant
    rodata_targets: dict             # symbol name (data section) -> image offset of its section + value
    jump_tables: tuple               # (final entry offset, final table offset, original .text target)
    decoded: dict                    # object function -> its instructions, as the link decoded them
    cells: dict = field(default_factory=dict)   # cell (or stack probe) symbol -> its final offset


@dataclass(frozen=True)
class FinalImage:
    """The code of one method as the CLR gets it: offsets are from the start of the main
    body (the method's entry), the space CORINFO_EH_CLAUSE and GC info measure in."""

    parent: str
    code: bytes
    main: CodeRange
    ranges: tuple[PlacedRange, ...]              # final order; ranges[0] is the main body
    runtime_functions: tuple[RuntimeFunction, ...]   # the new .pdata: image offsets
    unwind_data: bytes                           # CLR-form UNWIND_INFOs, runtime_functions point here
    filter_constants: FilterConstants | None
    relocations: tuple[ImageRelocation, ...] = ()
    fixups: tuple[Fixup, ...] = ()
    read_only_data: bytes = b""                  # placed at read_only_data_offset, after the code
    read_only_data_offset: int = 0
    absent: tuple[int, ...] = ()                 # model funclets without code (LLVM removed them)
    ambiguous: tuple[int, ...] = ()              # handler funclets the evidence leaves interchangeable
    decided_by: str = ""                         # then: "module order" | "invoke order" | "search order"
    call_site_identities: bool = True            # the matching had the call-site markers to go by
    pad_identities: bool = True                  # every object funclet carried its pad marker
    merged: tuple[tuple[int, tuple[int, ...]], ...] = ()  # (funclet, absent cleanups LLVM merged into its code)
    _source: _Source | None = field(default=None, repr=False, compare=False)
    cells: tuple[tuple[int, str], ...] = ()      # (final offset, symbol): 8-byte data cells in the read-only data
    target: str = DEFAULT_TARGET.name            # whose code (llilc_eh.target)
    stack_probe: int | None = None               # offset of our stack probe routine (STACK_PROBE_CODE), if placed

    # -- questions --------------------------------------------------------------------------

    @property
    def code_size(self) -> int:
        return len(self.code)

    @property
    def padding(self) -> int:
        """Bytes of the code that belong to no range (alignment between ranges), our stack
        probe routine not counted."""
        probe = len(STACK_PROBE_CODE) if self.stack_probe is not None else 0
        return len(self.code) - sum(r.size for r in self.ranges) - probe

    def range_of(self, funclet: int) -> PlacedRange | None:
        return next((r for r in self.ranges if r.funclet == funclet), None)

    @property
    def funclet_code(self) -> dict[int, str]:
        """Model funclet index -> the object symbol of its code: the funclet match the image
        was laid out by (`match_funclets(...).code`), for whoever reads the object again."""
        return {r.funclet: r.function for r in self.ranges}

    def map(self, function: str, offset: int, *, funclet: int | None = None) -> int:
        """The final offset of what was at `.text` offset `offset` of `function` (an object
        symbol; offsets as `RecoveredCode` gives them: labels, call sites; a function's end
        maps to the end of its code). A filter function placed more than once (one copy per
        filter funclet) needs `funclet`."""
        return self._map(offset, function, funclet)

    def map_text(self, offset: int) -> int:
        """The final offset of `.text` offset `offset`, whichever function it is in."""
        return self._map(offset, None, None)

    def _map(self, offset: int, function: str | None, funclet: int | None) -> int:
        def found(strict: bool):
            return [(r, s) for r in self.ranges if funclet is None or r.funclet == funclet for s in r.segments
                    if (function is None or s.function == function)
                    and (s.source.start <= offset < s.source.end if strict else offset == s.source.end)]
        hits = found(True) or found(False)
        what = f"{function} " if function else ""
        if not hits:
            known = function is None or any(s.function == function for r in self.ranges for s in r.segments)
            raise BackendError(f"{what}.text+0x{offset:x} is not placed in the final image",
                               kind="no-label" if known else "no-function", offset=offset)
        if len(hits) > 1:
            raise BackendError(f"{what}.text+0x{offset:x} is placed {len(hits)} times (funclets "
                               f"{', '.join(str(r.funclet) for r, _ in hits)}): say which funclet",
                               kind="no-function", offset=offset)
        _, s = hits[0]
        return s.start + offset - s.source.start

    def pdata(self) -> bytes:
        """`runtime_functions` as RUNTIME_FUNCTION records (begin, end, unwind: image offsets)."""
        return b"".join(structs.RuntimeFunction.build({"begin_rva": f.begin_rva, "end_rva": f.end_rva,
                                                           "unwind_rva": f.unwind_rva})
                        for f in self.runtime_functions)

    # -- the check --------------------------------------------------------------------------

    def verify(self) -> list[ImageFinding]:
        """Re-disassemble the whole image and check every reference against the object: each
        instruction is the original one (same length and bytes, relative fields aside), each
        relative field reaches the final place of its original target, external relocations
        are where their fields went, filter constants hold their values, jump-table entries
        reach their targets, ranges are disjoint and in order, .pdata and unwind data agree
        with the ranges. Empty: the image is sound."""
        return _verify(self)

    def __str__(self) -> str:
        lines = [(f"final image of {self.parent}: {len(self.code)} bytes of code in {len(self.ranges)} ranges "
                 f"({self.padding} bytes padding), {len(self.read_only_data)} bytes read-only data at "
                 f"{self.read_only_data_offset:#06x}, {len(self.fixups)} fixups, {len(self.relocations)} relocations")]
        lines += [f"  {r}" for r in self.ranges]
        if self.absent:
            lines.append(f"  without code (removed by LLVM): funclets {', '.join(map(str, self.absent))}")
        if self.ambiguous:
            lines.append(f"  ambiguous, decided by {self.decided_by}: funclets {', '.join(map(str, self.ambiguous))}")
        if not self.call_site_identities:
            lines.append("  funclets matched without call-site identities (by callees)")
        if not self.pad_identities:
            lines.append("  funclets matched without pad markers (by calls, clauses and invokes)")
        for kept, gone in self.merged:
            lines.append(f"  the code of funclets {', '.join(map(str, gone))} runs in funclet {kept} "
                         f"(LLVM merged the cleanups)")
        if self.stack_probe is not None:
            lines.append(f"  stack probe routine (ours, in no range): [{self.stack_probe:#06x}, "
                         f"{self.stack_probe + len(STACK_PROBE_CODE):#06x})")
        if self.cells:
            lines.append(f"  {len(self.cells)} data cell(s) at {self.cells[0][0]:#06x}..{self.cells[-1][0] + 8:#06x}")
        if self.filter_constants is not None:
            lines.append("  " + str(self.filter_constants).replace("\n", "\n  "))
        lines.append("  .pdata:")
        lines += [f"    {f}" for f in self.runtime_functions]
        if self.fixups:
            lines.append("  fixups:")
            lines += [f"    {f}" for f in self.fixups]
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# The driver


def link_final_image(recovered: RecoveredCode, coff: CoffObject, model: FuncletModel, parent: str, *,
                     target: Target = DEFAULT_TARGET, cells: frozenset[str] | set[str] = frozenset()) -> FinalImage:
    """The final image of `parent` (its object symbol, or its LLVM name `@"..."`) from the
    recovered object, in the order of `model.layout`, for `target` (its funclet entry thunk
    starts every handler range); `cells`: the external symbols that are 8-byte data cells
    (the reader's `External.cell`), placed in the read-only data (module docstring, "Targets")."""
    parent = object_symbol(parent) if parent.startswith("@") else parent
    if object_symbol(model.parent) != parent:
        raise _error(f"the model is of {model.parent}, not {parent}", "funclet-match").with_method(parent)
    try:
        match = match_funclets(recovered, coff, model, parent)
        text = coff.section(".text").data
        placed = [recovered.function(name) for name in dict.fromkeys(match.code.values())]
        decoded = {f.name: _decode(_md(), text, f.start, f.end, f.name) for f in placed}
        tails = _stray_tails([f for f in placed if f.name == parent or f.is_funclet], decoded)
        pieces = _lay_out(recovered, coff, model, match, tails, target.funclet_entry_thunk)
        code = _copy(coff, pieces)
        probe = _place_stack_probe(coff, pieces, code, target.stack_probe)
        rodata, rodata_offset, rodata_places = _place_read_only_data(coff, len(code))
        rodata, cell_places, cell_relocations = _place_cells(coff, pieces, cells, rodata, rodata_offset)
        constants = _frame_constants_if_needed(recovered, coff, parent, pieces)
        fixups, relocations, source = _fix_references(coff, parent, pieces, code, constants,
                                                     rodata_places, decoded, cell_places, probe)
        rodata, table_fixups, tables, data_relocations = _fix_jump_tables(coff, pieces, rodata, rodata_offset,
                                                                          rodata_places, source)
        for r in data_relocations:
            if r.symbol in cells:
                raise _error(f"the read-only data at {r.offset:#x} holds the address of the cell {r.symbol} "
                             "(a table of cells): not supported")
        ranges, runtime_functions, unwind_data = _unwind(recovered, model, pieces)
    except BackendError as e:
        raise e.with_method(parent)
    source = _Source(source.text, source.relocations, source.frame_symbols, source.rodata_targets, tables,
                     decoded, {**cell_places, **probe})
    return FinalImage(parent, bytes(code), ranges[0].code_range, ranges, runtime_functions, unwind_data,
                      constants, tuple(relocations + data_relocations + cell_relocations),
                      tuple(fixups + table_fixups), bytes(rodata),
                      rodata_offset, match.absent, match.ambiguous, match.decided_by, match.identities,
                      match.pads, match.merged, source,
                      tuple(sorted((at, name) for name, at in cell_places.items())), target.name,
                      next(iter(probe.values()), None))


# --------------------------------------------------------------------------------------------
# Step 1: match the model's funclets to the object's


@dataclass(frozen=True)
class FuncletMatch:
    code: dict[int, str]             # model funclet index -> object symbol of its code
    absent: tuple[int, ...]          # model funclets without code
    ambiguous: tuple[int, ...] = ()  # handler funclets the evidence leaves interchangeable
    decided_by: str = ""             # then: "module order" | "invoke order" | "search order"
    identities: bool = True          # call-site identities were there to use
    pads: bool = True                # every object funclet carried a pad marker naming its model funclet
    merged: tuple[tuple[int, tuple[int, ...]], ...] = ()   # (funclet, cleanups LLVM merged into its code)

    def __str__(self) -> str:
        lines = [f"  funclet {i:3d} <- {name}" for i, name in sorted(self.code.items())]
        if self.absent:
            lines.append(f"  absent: {', '.join(map(str, self.absent))}")
        if self.ambiguous:
            lines.append(f"  ambiguous: {', '.join(map(str, self.ambiguous))} (decided by {self.decided_by})")
        lines += [f"  merged into {kept}: {', '.join(map(str, gone))}" for kept, gone in self.merged]
        return "\n".join(lines)


@dataclass(frozen=True)
class _ObjectInvoke:
    function: str                    # the object function holding it
    callee: str                      # its callee, "?" if the model does not know it
    callsites: tuple[int, ...]       # the reader's call-site identities that reach it
    cover: tuple[str, ...]           # handler symbols of the clauses covering it, dispatch order


@dataclass(frozen=True)
class _ModelInvoke:
    funclet: int
    callee: str | None
    chain: tuple[int, ...]           # handler funclets in dispatch order
    position: int                    # in module order (model.calls is)
    callsite: int | None


def match_funclets(recovered: RecoveredCode, coff: CoffObject, model: FuncletModel, parent: str) -> FuncletMatch:
    """Which object function holds the code of each model funclet (see the module docstring)."""
    parent_fn = recovered.function(parent)
    functions = recovered.method_functions(parent)
    symbols = [f.name for f in functions if f.name != parent]
    handlers = [f for f in model.funclets if f.kind.is_handler]
    table = decode_llvm_clr_table(coff, parent) if symbols else None
    clauses = [(c, s) for c, s in zip(table.clauses, table.handler_symbols) if s is not None] if table else []
    base = parent_fn.start

    def function_at(offset: int) -> str | None:
        return next((f.name for f in functions if f.start <= offset < f.end), None)

    # What LLVM's table says of each funclet: clause kind and token; where its try is.
    labels: dict[str, set] = defaultdict(set)
    homes: dict[str, set] = defaultdict(set)
    for clause, symbol in clauses:
        flags = int(clause.flags) & 7
        labels[symbol].add((flags, clause.class_token_or_filter if flags == 0 else 0))
        if not clause.is_duplicate:
            homes[symbol].add(function_at(base + clause.try_start - 1))
    home = {s: next(iter(h)) for s, h in homes.items() if len(h) == 1 and None not in h}

    # The model's pads by marker: decisive where the object funclet carries one.
    by_pad = {f.pad_marker: f for f in handlers if getattr(f, "pad_marker", None) is not None}
    pinned: dict[str, list] = {}     # object funclet symbol -> the model funclets its pad markers name

    # The model's calls: by identity, and by funclet (callees).
    by_identity = {c.callsite: c for c in model.calls if getattr(c, "callsite", None) is not None}
    identities = bool(by_identity) and any(site.callsites for f in functions for site in f.calls
                                           if getattr(site, "callsites", ()))
    model_callees: dict[int, set] = defaultdict(set)
    for c in model.calls:
        model_callees[c.funclet].add(_callee(c.callee))
    known = set().union(*model_callees.values()) - {None}

    domains: dict[str, set[int]] = {}
    for symbol in symbols:
        fn = recovered.function(symbol)
        label = labels.get(symbol, set())
        if len(label) > 1:
            raise _error(f"LLVM's table gives {symbol} clauses of different kinds: {sorted(label)}", "funclet-match")
        by_kind = {f.index for f in handlers if f.kind in _CODE_KINDS.get(fn.kind, ())}
        domain = {i for i in by_kind if _label_fits(model.funclets[i], next(iter(label), None))}
        by_table = set(domain)
        if identities:
            # each marked call of the funclet's code is a call of the model funclet's blocks
            for site in fn.calls:
                owners = {by_identity[n].funclet for n in getattr(site, "callsites", ()) if n in by_identity}
                if owners:
                    domain &= owners
        else:
            called = {c.callee for c in fn.calls if c.callee in known}
            domain = {i for i in domain if called <= model_callees[i]}
        pads = tuple(dict.fromkeys(getattr(fn, "pads", ())))
        if by_pad and pads:
            named = _pinned_funclets(symbol, pads, by_pad, pinned, model)
            if not domain & {f.index for f in named} and len(named) > 1 and identities \
                    and {f.index for f in named} <= by_table:
                raise _error(f"LLVM's {symbol} holds the code of the cleanups " + ", ".join(
                    f"{f.index} ({f.label}, pad marker {f.pad_marker})" for f in named) + ", merged by LLVM, and "
                    "calls of more than one of them: no single model funclet stands for it", "funclet-match")
            if not domain & {f.index for f in named}:
                why = [f"it is a {fn.kind} funclet" if f.index not in by_kind else
                       f"LLVM's CLR table gives it clauses {sorted(label)}" if f.index not in by_table else
                       "its calls are calls of other model funclets" if identities else
                       "it calls what that model funclet does not" for f in named]
                raise _error(f"LLVM's {symbol} carries " + "; ".join(
                    f"pad marker {f.pad_marker} of model funclet {f.index} ({f.label}), but {w}"
                    for f, w in zip(named, why)), "funclet-match")
            domain &= {f.index for f in named}
            if len(domain) > 1:
                # merged cleanups whose code tells nothing apart: the funclet is the chain's head,
                # the pad that opens it (LLVM keeps the first pad and appends the others' code)
                domain = {next(f.index for f in named if f.index in domain)}
        domains[symbol] = domain

    invokes = []
    for fn in functions:
        for site in fn.calls:
            if not site.is_invoke:
                continue
            at = site.offset + 1 - base
            covering = [(c, s) for c, s in clauses if c.try_start <= at < c.try_end]
            cover = tuple(s for c, s in covering if not c.is_duplicate) + \
                tuple(s for c, s in covering if c.is_duplicate)
            marks = tuple(n for n in getattr(site, "callsites", ()) if n in by_identity) if identities else ()
            invokes.append(_ObjectInvoke(fn.name, site.callee if site.callee in known else "?", marks, cover))
    model_invokes = [_ModelInvoke(c.funclet, _callee(c.callee), tuple(s.funclet for s in model.protecting(c)),
                                  n, getattr(c, "callsite", None))
                     for n, c in enumerate(model.calls) if c.invoke and c.state is not None]

    solver = _Matcher(parent, symbols, domains, home, invokes, model_invokes,
                      {f.index: f.parent for f in model.funclets},
                      {s: ", ".join(f"pad marker {f.pad_marker} = funclet {f.index} ({f.label})" for f in named)
                       for s, named in pinned.items()})
    chosen, ambiguous, decided = solver.solve()
    code = {0: parent}
    code.update({f: s for s, f in chosen.items()})
    for f in model.funclets:
        if f.kind is FuncletKind.FILTER and f.handler in code:
            name = object_symbol(f.function)
            try:
                recovered.function(name)
            except BackendError:
                raise _error(f"the filter function {name} of funclet {f.index} is not in the object",
                             "funclet-match") from None
            code[f.index] = name
    absent = tuple(f.index for f in model.funclets if f.index not in code)
    merged = tuple((chosen[s], tuple(f.index for f in named if f.index != chosen[s]))
                   for s, named in pinned.items() if len(named) > 1)
    return FuncletMatch(code, absent, ambiguous, decided, identities, len(pinned) == len(symbols), merged)


def _pinned_funclets(symbol: str, pads: tuple[int, ...], by_pad: dict, pinned: dict[str, list], model):
    """The model funclets the pad markers of object funclet `symbol` name (recorded in
    `pinned`): one, or a chain of cleanups LLVM merged into one funclet, entry's pad first."""
    for n in pads:
        if n not in by_pad:
            raise _error(f"LLVM's {symbol} carries pad marker {n}, which no model funclet has", "funclet-match")
        other = next((s for s, named in pinned.items() if by_pad[n] in named), None)
        if other is not None:
            raise _error(f"LLVM's {other} and {symbol} both carry pad marker {n} of model funclet "
                         f"{by_pad[n].index} ({by_pad[n].label})", "funclet-match")
    named = [by_pad[n] for n in pads]
    if len(named) > 1:
        chain = _cleanup_chain(model, named)
        if chain is None:
            raise _error(f"LLVM's {symbol} carries the pad markers of several funclets, "
                         + ", ".join(f"{f.pad_marker} ({f.label})" for f in named)
                         + ", which are no chain of cleanups LLVM could have merged", "funclet-match")
        named = chain
    pinned[symbol] = named
    return named


def _cleanup_chain(model: FuncletModel, funclets: list) -> list | None:
    """`funclets` in the order of a chain of cleanups each of which ends in a cleanupret to the
    next (what LLVM's SimplifyCFG merges into one funclet when each is the next one's only way
    in), else None."""
    if any(f.kind not in (FuncletKind.FINALLY, FuncletKind.FAULT) or f.state is None for f in funclets):
        return None
    by_state = {f.state: f for f in funclets}
    targets = {model.states[f.state].enclosing for f in funclets
               if model.states[f.state].enclosing_from == "cleanupret"}
    heads = [f for f in funclets if f.state not in targets]
    if len(heads) != 1:
        return None
    chain = heads
    while len(chain) < len(funclets):
        state = model.states[chain[-1].state]
        nxt = by_state.get(state.enclosing) if state.enclosing_from == "cleanupret" else None
        if nxt is None or nxt in chain:
            return None
        chain.append(nxt)
    return chain


def _callee(name: str) -> str | None:
    return object_symbol(name) if name.startswith("@") else None


def _label_fits(f, label: tuple[int, int] | None) -> bool:
    if label is None:
        return True
    flags, token = label
    if flags == 0:
        if token == 0:
            return f.kind is FuncletKind.FILTER_HANDLER
        return f.kind is FuncletKind.CATCH and (f.class_token is None or f.class_token == token)
    return {2: FuncletKind.FINALLY, 4: FuncletKind.FAULT}.get(flags) is f.kind


class _Matcher:
    """Propagation and search for an assignment object funclet symbol -> model funclet index."""

    def __init__(self, parent, symbols, domains, home, invokes, model_invokes, model_parent, pinned=None):
        self.parent = parent
        self.pinned = pinned or {}   # symbol -> what its pad markers name, in words
        self.symbols = symbols
        self.domains = domains
        self.home = home
        self.invokes = invokes
        self.model_invokes = model_invokes
        self.model_parent = model_parent
        self.by_identity = {m.callsite: m for m in model_invokes if m.callsite is not None}
        self.tried = 0

    def _dom(self, d: dict, symbol: str) -> set[int]:
        return {0} if symbol == self.parent else d[symbol]

    def candidates(self, i: _ObjectInvoke) -> list[_ModelInvoke]:
        """The model invokes an object invoke can be: those its identities name (all of them,
        where LLVM merged calls), else those with its callee."""
        named = [self.by_identity[n] for n in i.callsites if n in self.by_identity]
        return named or [m for m in self.model_invokes if i.callee == "?" or i.callee == m.callee]

    def propagate(self, d: dict) -> bool:
        """Narrow the domains `d` in place; False when one becomes empty."""
        changed = True

        def narrow(symbol: str, allowed: set[int]) -> bool:
            nonlocal changed
            if symbol == self.parent:
                return 0 in allowed
            new = d[symbol] & allowed
            if new != d[symbol]:
                d[symbol] = new
                changed = True
            return bool(new)

        while changed:
            changed = False
            for s in self.symbols:          # every funclet's code is one model funclet
                if len(d[s]) == 1:
                    for t in self.symbols:
                        if t != s and not narrow(t, d[t] - d[s]):
                            return False
            for s, h in self.home.items():  # its try is in its parent's code
                parents = self._dom(d, h)
                if not narrow(s, {f for f in d[s] if self.model_parent[f] in parents}):
                    return False
                if h != self.parent and not narrow(h, {self.model_parent[f] for f in d[s]}):
                    return False
            for i in self.invokes:          # its covering handlers are its model invoke's chain
                homes = self._dom(d, i.function)
                fits = [m for m in self.candidates(i) if m.funclet in homes and len(m.chain) >= len(i.cover)
                        and all(d[s] & set(m.chain) for s in i.cover)]
                exact = bool(i.callsites) and all(n in self.by_identity for n in i.callsites)
                if not fits or (exact and len(fits) < len(self.candidates(i))):
                    return False
                if not narrow(i.function, {m.funclet for m in fits}):
                    return False
                for s in i.cover:
                    reach = set.intersection(*(set(m.chain) for m in fits)) if exact else \
                        set().union(*(m.chain for m in fits))
                    if not narrow(s, reach):
                        return False
        return True

    def _fits(self, i: _ObjectInvoke, m: _ModelInvoke, a: dict[str, int], present: set[int]) -> bool:
        home = 0 if i.function == self.parent else a[i.function]
        return m.funclet == home and tuple(f for f in m.chain if f in present) == tuple(a[s] for s in i.cover)

    def consistent(self, a: dict[str, int]) -> bool:
        present = set(a.values())
        for i in self.invokes:
            fits = [self._fits(i, m, a, present) for m in self.candidates(i)]
            exact = bool(i.callsites) and all(n in self.by_identity for n in i.callsites)
            if not (all(fits) if exact else any(fits)):
                return False
        return True

    def solve(self) -> tuple[dict[str, int], tuple[int, ...], str]:
        """The assignment, the model funclets other consistent assignments place elsewhere,
        and what chose between them ("" when nothing had to)."""
        solutions: list[dict[str, int]] = []
        d0 = {s: set(v) for s, v in self.domains.items()}
        if not self.propagate(d0):
            raise _error(self._why(d0), "funclet-match")

        def search(d: dict) -> None:
            self.tried += 1
            if self.tried > SEARCH_BUDGET:
                raise _error(f"no funclet assignment settled within {SEARCH_BUDGET} tries", "funclet-match")
            open_ = [s for s in self.symbols if len(d[s]) > 1]
            if not open_:
                a = {s: next(iter(d[s])) for s in self.symbols}
                if len(set(a.values())) == len(a) and self.consistent(a):
                    solutions.append(a)
                return
            s = min(open_, key=lambda x: (len(d[x]), self.symbols.index(x)))
            for value in sorted(d[s]):
                trial = {k: set(v) for k, v in d.items()}
                trial[s] = {value}
                if self.propagate(trial):
                    search(trial)
                if len(solutions) >= MAX_SOLUTIONS:
                    return

        search(d0)
        if not solutions:
            raise _error("no assignment of LLVM's funclets to the model's fits the clauses and invokes "
                         "of the object" + self._pins(), "funclet-match")
        if len(solutions) == 1:
            return solutions[0], (), ""
        # Evidence exhausted: prefer LLVM's funclet order = the module's pad order (always so
        # at O0), then the invokes' code order = the module's block order.
        keys = [(self.inversions(a), self.disorder(a)) for a in solutions]
        best = min(range(len(solutions)), key=lambda n: (keys[n], n))
        chosen = solutions[best]
        moved = {f for a in solutions for s in self.symbols if a[s] != chosen[s] for f in (a[s], chosen[s])}
        rivals = [k for n, k in enumerate(keys) if n != best]
        decided = ("module order" if all(k[0] != keys[best][0] for k in rivals) else
                   "invoke order" if all(k != keys[best] for k in rivals) else "search order")
        return chosen, tuple(sorted(moved)), decided

    def inversions(self, a: dict[str, int]) -> int:
        """Pairs of funclets LLVM laid out in the opposite order of their pads in the module."""
        seq = [a[s] for s in self.symbols]
        return sum(1 for x in range(len(seq)) for y in range(x + 1, len(seq)) if seq[x] > seq[y])

    def disorder(self, a: dict[str, int]) -> int:
        """Pairs of invokes whose code order is the opposite of the module order of the model
        invokes they match under `a`, per function."""
        present = set(a.values())
        by_function: dict[str, list[int]] = defaultdict(list)
        for i in self.invokes:
            positions = [m.position for m in self.candidates(i) if self._fits(i, m, a, present)]
            if positions:
                by_function[i.function].append(min(positions))
        return sum(1 for seq in by_function.values()
                   for x in range(len(seq)) for y in range(x + 1, len(seq)) if seq[x] > seq[y])

    def _why(self, d: dict) -> str:
        empty = [s for s in self.symbols if not d[s]]
        if empty and empty[0] in self.pinned:
            return (f"LLVM's {empty[0]} carries {self.pinned[empty[0]]}, but the clauses and invokes of the "
                    f"object say otherwise (its try, or a dispatch chain)" + self._pins())
        if empty:
            return f"no model funclet fits LLVM's {empty[0]} (kind, class token, calls, try, invokes)" + self._pins()
        return "the invokes of the object fit no invoke of the model" + self._pins()

    def _pins(self) -> str:
        if not self.pinned:
            return ""
        return "; pad markers: " + "; ".join(f"{s}: {what}" for s, what in self.pinned.items())


# --------------------------------------------------------------------------------------------
# Step 2-3: lay out and copy


@dataclass(frozen=True)
class _Piece:
    funclet: int
    kind: FuncletKind
    function: CodeFunction           # the function whose symbol starts the range
    start: int                       # final offset (of the entry thunk, when there is one)
    segments: tuple[Segment, ...]
    prefix: bytes = b""              # the target's funclet entry thunk, before the segments

    @property
    def end(self) -> int:
        return self.segments[-1].end

    def final(self, offset: int) -> int:
        """The final offset of .text `offset`; a segment's end counts as its own."""
        for s in self.segments:
            if s.source.start <= offset < s.source.end:
                return s.start + offset - s.source.start
        for s in self.segments:
            if offset == s.source.end:
                return s.end
        raise _error(f".text+0x{offset:x} is not in the range of funclet {self.funclet}", offset=offset)

    def holds(self, offset: int) -> bool:
        for s in self.segments:     # (a plain loop: asked of every relocation for every piece)
            if s.source.start <= offset < s.source.end:
                return True
        return False


def _lay_out(recovered: RecoveredCode, coff: CoffObject, model: FuncletModel, match: FuncletMatch,
             tails: dict[str, list[tuple[str, int, int]]], thunk: bytes = b"") -> list[_Piece]:
    """Pieces in the model's layout, each at the .text alignment; `tails` moves stray blocks
    ({receiving function: [(giving function, start, end)]}) to the end of their funclet;
    `thunk` (the target's funclet entry thunk) goes before the code of every handler funclet
    -- not the main body, not an outlined filter (our own function, called in our convention)."""
    alignment = coff.section(".text").alignment or 16
    cut = {giver: start for taker in tails.values() for giver, start, _ in taker}
    pieces, cursor = [], 0
    for i in model.layout:
        name = match.code.get(i)
        if name is None:
            continue
        fn = recovered.function(name)
        cursor = -(-cursor // alignment) * alignment
        start, segments = cursor, []
        prefix = thunk if model.funclets[i].kind.is_handler and i != 0 else b""
        cursor += len(prefix)
        runs = [(name, fn.start, cut.get(name, fn.end))] + list(tails.get(name, ()))
        for owner, begin, end in runs:
            segments.append(Segment(owner, CodeRange(begin, end), cursor))
            cursor += end - begin
        pieces.append(_Piece(i, model.funclets[i].kind, fn, start, tuple(segments), prefix))
    if not pieces or pieces[0].funclet != 0:
        raise _error("the model's layout does not start with the main body")
    return pieces


def _copy(coff: CoffObject, pieces: list[_Piece]) -> bytearray:
    text = coff.section(".text").data
    code = bytearray([PADDING_BYTE]) * (pieces[-1].end if pieces else 0)
    for p in pieces:
        code[p.start:p.start + len(p.prefix)] = p.prefix
        for s in p.segments:
            code[s.start:s.end] = text[s.source.start:s.source.end]
    return code


def _locate(pieces: list[_Piece], offset: int, near: _Piece | None = None) -> int:
    """The final offset of `.text` offset `offset`: in `near` if it lies there, else in the one
    piece that holds it (a function's end counts as its own)."""
    if near is not None and (near.holds(offset) or any(offset == s.source.end for s in near.segments)):
        return near.final(offset)
    holders = [p for p in pieces if p.holds(offset)] or \
              [p for p in pieces if any(offset == s.source.end for s in p.segments)]
    if len(holders) != 1:
        what = ("code that is not placed" if not holders else
                f"{', '.join(sorted({p.function.name for p in holders}))}, placed {len(holders)} times")
        raise _error(f"a reference reaches .text+0x{offset:x}, in {what}", offset=offset)
    return holders[0].final(offset)


_NO_FALLTHROUGH = ("ret", "jmp", "ud2", "int3")


def _stray_tails(functions: list[CodeFunction], decoded: dict[str, list[_Insn]]) -> dict[str, list]:
    """Blocks LLVM laid out at the end of the wrong function's range.

    At O2 LLVM sometimes puts a funclet's catchret block (`lea rax, [continuation]`, the
    funclet's epilogue, `ret`) after the parent's last block, before the funclet's symbol:
    inside the parent's range and `.pdata` entry, reached only by the funclet's branches
    (2 of 5,693 framework EH methods). Such a tail -- from a branch target to the end of
    its function, entered by no fall-through, referenced by no other function's code --
    belongs to the funclet that branches there: {funclet: [(function, start, end)]}."""
    by_name = {f.name: f for f in functions}
    wanted: dict[tuple[str, int], set[str]] = defaultdict(set)
    for f in functions:
        for insn in decoded[f.name]:
            if insn.rel is None or f.start <= insn.rel[2] < f.end:
                continue
            target = insn.rel[2]
            home = next((g for g in functions if g.start <= target < g.end), None)
            if home is not None and insn.is_branch and not insn.mnemonic.startswith("call"):
                wanted[(home.name, target)].add(f.name)
    tails: dict[str, list] = defaultdict(list)
    givers = [name for name, _ in wanted]
    for (name, start), takers in wanted.items():
        giver = by_name[name]
        if givers.count(name) != 1:
            continue
        insns = decoded[name]
        before = [i for i in insns if i.end == start]
        if len(takers) != 1 or not before or not before[0].mnemonic.startswith(_NO_FALLTHROUGH):
            continue
        reached = [(f.name, i) for f in functions for i in decoded[f.name] if i.rel is not None
                   and start <= i.rel[2] < giver.end and not (f.name == name and i.address >= start)]
        if {f for f, _ in reached} != takers:
            continue
        tails[next(iter(takers))].append((name, start, giver.end))
    return dict(tails)


# --------------------------------------------------------------------------------------------
# Step 4: the filter frame constants


def _frame_constants_if_needed(recovered, coff, parent, pieces) -> FilterConstants | None:
    text = coff.section(".text")
    names = {parent + PSP_SLOT_SUFFIX, parent + FP_OFFSET_SUFFIX}
    needed = any(r.symbol in names and p.holds(r.offset) for r in text.relocations for p in pieces)
    if needed or any(p.kind is FuncletKind.FILTER for p in pieces):
        return read_frame_constants(recovered, coff, parent)
    try:
        return read_frame_constants(recovered, coff, parent)
    except BackendError:
        return None                   # nothing needs them, and this parent has no such frame


_MD_DETAIL = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
_MD_DETAIL.detail = True


def _md() -> capstone.Cs:
    return _MD_DETAIL


def _is_reg(op, reg) -> bool:
    return op.type == cs_x86.X86_OP_REG and op.reg == reg


def _is_mem(op, base) -> bool:
    return (op.type == cs_x86.X86_OP_MEM and op.mem.base == base and op.mem.index == 0
            and op.mem.segment == 0)


def _detailed(md, data: bytes, start: int, end: int, chunk: int = 4):
    """`md.disasm(data[start:end], start)`, decoded a few instructions at a time: a reader
    that stops at the first branch would otherwise pay for the details of the whole range."""
    while start < end:
        insns = list(md.disasm(data[start:end], start, chunk))
        yield from insns
        if len(insns) < chunk:
            return
        start = insns[-1].address + insns[-1].size


def read_frame_constants(recovered: RecoveredCode, coff: CoffObject, parent: str) -> FilterConstants:
    """psp_slot_offset and fp_offset of the compiled parent (see the module docstring)."""
    text = coff.section(".text").data
    fn = recovered.function(parent)
    info = fn.unwind
    if info is None:
        raise _error(f"{parent} has no UNWIND_INFO", "frame-constants")
    if info.frame_register != 5:
        raise _error(f"{parent} establishes no RBP frame (frame register {info.frame_register_name})",
                     "frame-constants")
    setfp = [op for op in info.codes if op.op == UnwindOpKind.SET_FPREG]
    if len(setfp) != 1:
        raise _error(f"{parent}: {len(setfp)} SET_FPREG codes", "frame-constants")
    after = 0
    for op in info.codes:  # what the prolog does to RSP after RBP is set
        if op.code_offset > setfp[0].code_offset:
            if op.op in (UnwindOpKind.ALLOC_SMALL, UnwindOpKind.ALLOC_LARGE):
                after += op.size
            elif op.op == UnwindOpKind.PUSH_NONVOL:
                after += 8
            elif op.op not in (UnwindOpKind.SAVE_NONVOL, UnwindOpKind.SAVE_NONVOL_FAR,
                               UnwindOpKind.SAVE_XMM128, UnwindOpKind.SAVE_XMM128_FAR):
                raise _error(f"{parent}: {op.op.name} after SET_FPREG", "frame-constants")
    fp_offset = info.frame_offset + after
    evidence = [f"UNWIND_INFO of {parent}: SET_FPREG RBP, offset {info.frame_offset:#x}"
                + (f", then {after} bytes allocated" if after else "")]

    md = _md()
    psp = None
    start = fn.start + info.prolog_size
    for insn in _detailed(md, text, start, fn.end):
        ops = insn.operands if insn.id == cs_x86.X86_INS_MOV else ()   # (operands are costly)
        if (len(ops) == 2 and _is_mem(ops[0], cs_x86.X86_REG_RSP)
                and _is_reg(ops[1], cs_x86.X86_REG_RSP) and ops[0].size == 8):
            psp = ops[0].mem.disp
            evidence.append(f"{parent} +{insn.address - fn.start:#x} (after the prolog): "
                            f"{insn.mnemonic} {insn.op_str}")
            break
        if insn.group(capstone.CS_GRP_JUMP) or insn.group(capstone.CS_GRP_CALL) or insn.group(capstone.CS_GRP_RET):
            break
    if psp is None:
        raise _error(f"{parent} stores no PSPSym (mov [rsp + D], rsp) before its first branch or call "
                     "after the prolog", "frame-constants")

    agree = 0
    for f in recovered.funclets_of(parent):
        if f.unwind is None:
            continue
        loads, copies, frames = [], [], []
        for insn in md.disasm(text[f.start:f.start + f.unwind.prolog_size], f.start):
            if insn.id not in (cs_x86.X86_INS_MOV, cs_x86.X86_INS_LEA):
                continue        # (before its operands, which are costly)
            ops = insn.operands
            if len(ops) != 2:
                continue
            if insn.id == cs_x86.X86_INS_MOV and _is_reg(ops[0], cs_x86.X86_REG_RCX) \
                    and _is_mem(ops[1], cs_x86.X86_REG_RCX):
                loads.append(ops[1].mem.disp)
            elif insn.id == cs_x86.X86_INS_MOV and _is_mem(ops[0], cs_x86.X86_REG_RSP) \
                    and _is_reg(ops[1], cs_x86.X86_REG_RCX):
                copies.append(ops[0].mem.disp)
            elif insn.id == cs_x86.X86_INS_LEA and _is_reg(ops[0], cs_x86.X86_REG_RBP) \
                    and _is_mem(ops[1], cs_x86.X86_REG_RCX):
                frames.append(ops[1].mem.disp)
            elif insn.id == cs_x86.X86_INS_MOV and _is_reg(ops[0], cs_x86.X86_REG_RBP) \
                    and _is_reg(ops[1], cs_x86.X86_REG_RCX):
                frames.append(0)    # `mov rbp, rcx`: LLVM's form of a zero frame offset (seen with SysV)
        if loads != [psp] or copies != [psp] or frames != [fp_offset]:
            raise _error(f"funclet {f.name} prolog: PSPSym load {loads}, copy {copies}, frame {frames}; "
                         f"the parent says {psp} and {fp_offset}", "frame-constants")
        agree += 1
    evidence.append(f"{agree} funclet prolog(s) agree: mov rcx, [rcx + {psp:#x}]; mov [rsp + {psp:#x}], rcx; "
                    f"lea rbp, [rcx + {fp_offset:#x}]")
    return FilterConstants(psp, fp_offset, tuple(evidence))


# --------------------------------------------------------------------------------------------
# Step 5: fix every reference of the code


@dataclass
class _SourceBuilder:
    text: bytes
    relocations: dict = field(default_factory=dict)
    frame_symbols: dict = field(default_factory=dict)
    rodata_targets: dict = field(default_factory=dict)


def _read_only_sections(coff: CoffObject) -> list:
    skip = SectionFlags.MEM_DISCARDABLE | SectionFlags.LNK_REMOVE | SectionFlags.LNK_INFO | SectionFlags.MEM_WRITE
    return [s for s in coff.sections
            if s.name not in (".xdata", ".pdata") and not s.is_code
            and s.characteristics & SectionFlags.CNT_INITIALIZED_DATA and s.characteristics & SectionFlags.MEM_READ
            and not s.characteristics & skip and s.data]


def _place_read_only_data(coff: CoffObject, code_end: int) -> tuple[bytearray, int, dict[int, int]]:
    sections = _read_only_sections(coff)
    if not sections:
        return bytearray(), code_end, {}
    alignment = max(s.alignment or 1 for s in sections)
    origin = -(-code_end // alignment) * alignment
    blob, places = bytearray(), {}
    for s in sections:
        at = -(-len(blob) // (s.alignment or 1)) * (s.alignment or 1)
        blob += bytes(at - len(blob))
        places[s.number] = origin + at
        blob += s.data
    return blob, origin, places


CELL_SIZE = 8

# Our stack probe (llilc_eh.target.stack_probe), with the contract LLVM's Win64 prologs and
# dynamic allocas expect of __chkstk: the size in RAX (preserved), R10, R11 and the flags
# clobbered, RSP unchanged. It reads one word per page from the caller's RSP down to the
# RSP the caller is about to set, so the guard page is met in order (as RyuJIT's probes).
# Assembled with GNU as; tests/backend/test_stack_probe.py disassembles it.
STACK_PROBE_CODE = bytes.fromhex(
    "4c8d5c2408"        # lea  r11, [rsp + 8]     the caller's RSP before its call
    "4d89da"            # mov  r10, r11
    "4929c2"            # sub  r10, rax           the RSP the caller will set
    "4981eb00100000"    # loop: sub r11, 0x1000   one page down
    "4d39d3"            # cmp  r11, r10
    "7205"              # jb   last               below the new RSP: done with the pages
    "4d851b"            # test [r11], r11         touch the page
    "ebef"              # jmp  loop
    "4d8512"            # last: test [r10], r10   touch the new RSP
    "c3")               # ret


def _place_stack_probe(coff: CoffObject, pieces: list[_Piece], code: bytearray, name: str | None) -> dict[str, int]:
    """Append STACK_PROBE_CODE after the last range (16-aligned, int3 before it) when the
    placed code calls `name` (the target's probe symbol); {name: its offset}, else {}. It
    belongs to no range: a frameless leaf that never moves RSP, so an unwinder that finds
    no RUNTIME_FUNCTION for it (a leaf) is right."""
    if not name:
        return {}
    text = coff.section(".text")
    if not any(coff.symbol_at_index(r.symbol_index).name == name and any(p.holds(r.offset) for p in pieces)
               for r in text.relocations):
        return {}
    code += bytes([PADDING_BYTE]) * (-len(code) % 16)
    at = len(code)
    code += STACK_PROBE_CODE
    return {name: at}


def _place_cells(coff: CoffObject, pieces: list[_Piece], cells, rodata: bytearray,
                 rodata_offset: int) -> tuple[bytearray, dict[str, int], list[ImageRelocation]]:
    """One 8-byte slot, zero, per cell symbol the placed code references, after the
    read-only data (8-aligned, in the order of first reference); each slot is an ADDR64
    image relocation against its symbol: the installer writes the runtime's value there."""
    if not cells:
        return rodata, {}, []
    text = coff.section(".text")
    used: dict[str, None] = {}
    for reloc in sorted(text.relocations, key=lambda r: r.offset):
        symbol = coff.symbol_at_index(reloc.symbol_index)
        if not symbol.is_defined and symbol.name in cells and any(p.holds(reloc.offset) for p in pieces):
            used[symbol.name] = None
    if not used:
        return rodata, {}, []
    blob = bytearray(rodata)
    blob += bytes(-(rodata_offset + len(blob)) % CELL_SIZE)
    places, relocations = {}, []
    for name in used:
        places[name] = rodata_offset + len(blob)
        relocations.append(ImageRelocation(places[name], RelocationType.ADDR64, name, 0))
        blob += bytes(CELL_SIZE)
    return blob, places, relocations


def _inline(data: bytes, offset: int, rtype) -> int:
    if rtype == RelocationType.ADDR64:
        return struct.unpack_from("<q", data, offset)[0]
    return struct.unpack_from("<i", data, offset)[0]


class _Insn(NamedTuple):
    """One decoded instruction; `rel`: (field offset in it, field size, target) of a relative
    branch or a rip-relative memory operand. A tuple: every method decodes thousands."""

    address: int
    size: int
    mnemonic: str
    op_str: str
    raw: bytes
    rel: tuple[int, int, int] | None

    @property
    def end(self) -> int:
        return self.address + self.size

    @property
    def is_branch(self) -> bool:
        return self.rel is not None and "rip" not in self.op_str


_MD_LITE = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
_RELATIVE_MNEMONICS = ("j", "call", "loop", "xbegin")


def _relative_field(insn) -> tuple[int, int, int] | None:
    if insn.group(capstone.CS_GRP_BRANCH_RELATIVE) and insn.imm_size:
        for op in insn.operands:
            if op.type == cs_x86.X86_OP_IMM:
                return insn.imm_offset, insn.imm_size, op.imm
    for op in insn.operands:
        if op.type == cs_x86.X86_OP_MEM and op.mem.base == cs_x86.X86_REG_RIP:
            return insn.disp_offset, insn.disp_size, insn.address + insn.size + op.mem.disp
    return None


def _plain_branch(raw: bytes, address: int) -> tuple[int, int, int] | None:
    """The relative field of an unprefixed call/jmp/jcc (most of them), without capstone's
    costly details: E8/E9 rel32, EB/7x rel8, 0F 8x rel32."""
    op = raw[0]
    if op in (0xE8, 0xE9) and len(raw) == 5 or op == 0x0F and len(raw) == 6 and 0x80 <= raw[1] <= 0x8F:
        return len(raw) - 4, 4, address + len(raw) + int.from_bytes(raw[-4:], "little", signed=True)
    if (op == 0xEB or 0x70 <= op <= 0x7F) and len(raw) == 2:
        return 1, 1, address + 2 + int.from_bytes(raw[1:], "little", signed=True)
    return None


# Opcodes that take a ModRM operand and no immediate: lea, mov r/m, cmp r/m, movsxd.
_RIP_OPERAND_OPCODES = frozenset({0x8D, 0x8B, 0x89, 0x3B, 0x39, 0x63})


def _plain_rip_operand(raw: bytes, address: int) -> tuple[int, int, int] | None:
    """The rip-relative field of `[REX] op ModRM(00 reg 101) disp32` with an opcode of
    `_RIP_OPERAND_OPCODES` (most rip-relative instructions), without capstone's details: no
    SIB, no immediate, so the disp32 ends the instruction."""
    at = 1 if 0x40 <= raw[0] <= 0x4F else 0
    if len(raw) == at + 6 and raw[at] in _RIP_OPERAND_OPCODES and raw[at + 1] & 0xC7 == 0x05:
        return at + 2, 4, address + len(raw) + int.from_bytes(raw[at + 2:], "little", signed=True)
    return None


def _relative(md, address: int, raw: bytes, mnemonic: str, op_str: str) -> tuple[int, int, int] | None:
    """`_Insn.rel` of an instruction; capstone's details (costly) only for those that may
    hold a relative field and that the plain encodings do not cover."""
    if not (mnemonic.startswith(_RELATIVE_MNEMONICS) or "rip" in op_str):
        return None
    rex = 1 if len(raw) > 1 and 0x40 <= raw[0] <= 0x4F else 0
    if raw[rex] == 0xFF and "rip" not in op_str:
        return None     # FF /2../5: an indirect call or jump through a register or memory
    return (_plain_branch(raw, address) or _plain_rip_operand(raw, address)
            or _relative_field(next(md.disasm(raw, address, 1))))


def _decode(md, data: bytes, start: int, end: int, what: str, *, relative: bool = True) -> list[_Insn]:
    """The instructions of data[start:end] (addresses as offsets into `data`). Without
    `relative`, `rel` stays None: for a caller that asks `_relative` only of the few
    instructions whose relative field it reads."""
    out = []
    covered = start
    for address, size, mnemonic, op_str in _MD_LITE.disasm_lite(data[start:end], start):
        raw = bytes(data[address:address + size])
        rel = _relative(md, address, raw, mnemonic, op_str) if relative else None
        out.append(_Insn(address, size, mnemonic, op_str, raw, rel))
        covered = address + size
    if covered != end:
        raise _error(f"capstone stops at +0x{covered:x} inside {what} (ends at 0x{end:x})", offset=covered)
    return out


def _put(code: bytearray, at: int, size: int, value: int, what: str) -> None:
    limit = 1 << (8 * size - 1)
    if not -limit <= value < limit:
        raise _error(f"{what}: displacement {value} does not fit {size} byte(s) any more", offset=at)
    code[at:at + size] = value.to_bytes(size, "little", signed=True)


def _fix_references(coff, parent, pieces, code, constants, rodata_places, decoded, cells=None, probe=None):
    text = coff.section(".text")
    data = text.data
    frame = {parent + PSP_SLOT_SUFFIX: "psp_slot_offset", parent + FP_OFFSET_SUFFIX: "fp_offset"}
    source = _SourceBuilder(data)
    cell_places = {**(cells or {}), **(probe or {})}    # external symbols the image placed itself
    fixups: list[Fixup] = []
    relocations: list[ImageRelocation] = []
    for reloc in text.relocations:
        symbol = coff.symbol_at_index(reloc.symbol_index)
        inline = _inline(data, reloc.offset, reloc.type)
        source.relocations[reloc.offset] = (reloc.type, symbol.name, symbol.section_name, symbol.value, inline)
        if symbol.name in frame:
            source.frame_symbols[symbol.name] = frame[symbol.name]
        if symbol.section_number in rodata_places:
            source.rodata_targets[symbol.name] = rodata_places[symbol.section_number] + symbol.value

    for p in pieces:
        insns = [i for seg in p.segments for i in decoded[seg.function]
                 if seg.source.start <= i.address < seg.source.end]
        at_field = {insn.address + insn.rel[0]: (insn, insn.rel) for insn in insns if insn.rel is not None}
        relocated = set()
        for reloc in text.relocations:
            if not p.holds(reloc.offset):
                continue
            relocated.add(reloc.offset)
            symbol = coff.symbol_at_index(reloc.symbol_index)
            site = p.final(reloc.offset)
            inline = _inline(data, reloc.offset, reloc.type)
            bias = _REL32.get(reloc.type)
            where = f"{p.function.name} .text+0x{reloc.offset:x}"
            if symbol.name in frame:
                if constants is None:
                    raise _error(f"{where}: {symbol.name} but no frame constants", "frame-constants")
                value = getattr(constants, frame[symbol.name]) + inline
                fixups.append(_patch_frame_constant(code, reloc, insns, p, value, symbol.name))
            elif symbol.name in cell_places and not symbol.is_defined:
                if bias is None:
                    kind = reloc.type.name if isinstance(reloc.type, RelocationType) else hex(reloc.type)
                    raise _error(f"{where}: {kind} relocation against the cell {symbol.name}: only rip-relative "
                                 "(REL32) loads of a cell are supported")
                target = cell_places[symbol.name] + inline
                _put(code, site, 4, target - (site + 4 + bias), where)
                kind = "stack-probe" if symbol.name in (probe or {}) else "cell"
                fixups.append(Fixup(kind, site, 4, _insn_at(insns, reloc.offset), target, symbol.name))
            elif not symbol.is_defined:
                relocations.append(ImageRelocation(site, reloc.type, symbol.name, inline))
            elif symbol.section_name == ".text" and bias is not None:
                target = _locate(pieces, symbol.value + inline, p)
                _put(code, site, 4, target - (site + 4 + bias), where)
                fixups.append(Fixup("rel32", site, 4, _insn_at(insns, reloc.offset), target,
                                    f"{symbol.name}{inline:+d}"))
            elif symbol.section_number in rodata_places and bias is not None:
                target = rodata_places[symbol.section_number] + symbol.value + inline
                _put(code, site, 4, target - (site + 4 + bias), where)
                fixups.append(Fixup("rodata", site, 4, _insn_at(insns, reloc.offset), target,
                                    f"{symbol.section_name}:{symbol.name}{inline:+d}"))
            else:
                kind = reloc.type.name if isinstance(reloc.type, RelocationType) else hex(reloc.type)
                raise _error(f"{where}: {kind} relocation against {symbol.name} in {symbol.section_name}: "
                             "not supported in a final image")
        for address, (insn, (offset, size, target)) in sorted(at_field.items()):
            if address in relocated:
                continue              # the relocation says it
            new_target = _locate(pieces, target, p)
            end = p.final(insn.address) + insn.size
            if new_target - end == target - insn.end:
                continue              # the distance is unchanged
            if insn.is_branch and not insn.mnemonic.startswith("call") and not p.holds(target):
                home = next((q.function.name for q in pieces if q.holds(target)), "code that is not placed")
                raise _error(f"{p.function.name} branches into {home} (`{insn.mnemonic} {insn.op_str}` at "
                             f".text+0x{insn.address:x}): LLVM laid a block of one funclet out inside "
                             "another's range, so no range holds all of its code", "funclet-split",
                             insn.address)
            site = p.final(address)
            _put(code, site, size, new_target - end, f"{insn.mnemonic} {insn.op_str} at .text+0x{insn.address:x}")
            kind = "branch" if insn.is_branch else "rip-relative"
            fixups.append(Fixup(kind, site, size, insn.address, new_target, f"{insn.mnemonic} {insn.op_str}"))
    return fixups, relocations, source


def _insn_at(insns, field_offset: int) -> int:
    for insn in insns:
        if insn.address <= field_offset < insn.end:
            return insn.address
    return field_offset


def _patch_frame_constant(code, reloc, insns, piece, value, name) -> Fixup:
    insn = next((i for i in insns if i.address <= reloc.offset < i.end), None)
    if insn is None:
        raise _error(f"{name} at .text+0x{reloc.offset:x} is in no instruction", "frame-constants")
    start = piece.final(insn.address)
    raw = insn.raw
    if reloc.type == RelocationType.REL32:
        # lea r64, [rip + sym] -> mov r64, imm32 (sign-extended): REX.W [R] 8D modrm(00 reg 101) disp32
        # becomes REX.W [B] C7 modrm(11 000 reg) imm32, 7 bytes either way.
        if (insn.mnemonic != "lea" or len(raw) != 7 or raw[0] & 0xF8 != 0x48 or raw[1] != 0x8D
                or raw[2] & 0xC7 != 0x05 or reloc.offset != insn.address + 3):
            raise _error(f"{name} used by `{insn.mnemonic} {insn.op_str}` at .text+0x{insn.address:x}: "
                         "only `lea r64, [rip + sym]` is rewritten", "frame-constants")
        if not -(1 << 31) <= value < 1 << 31:
            raise _error(f"{name} = {value} does not fit an imm32", "frame-constants")
        rex = 0x48 | (0x01 if raw[0] & 0x04 else 0)
        code[start:start + 7] = bytes([rex, 0xC7, 0xC0 | (raw[2] >> 3) & 7]) + value.to_bytes(4, "little", signed=True)
        return Fixup("frame-constant", start + 3, 4, insn.address, value,
                     f"{name.rsplit('$', 1)[-1]}: {insn.mnemonic} {insn.op_str} -> mov imm32")
    site = piece.final(reloc.offset)
    if reloc.type == RelocationType.ADDR64:
        code[site:site + 8] = value.to_bytes(8, "little", signed=True)
        return Fixup("frame-constant", site, 8, insn.address, value, f"{name.rsplit('$', 1)[-1]}: ADDR64")
    if reloc.type == RelocationType.ADDR32:
        _put(code, site, 4, value, name)
        return Fixup("frame-constant", site, 4, insn.address, value, f"{name.rsplit('$', 1)[-1]}: ADDR32")
    raise _error(f"{name}: {reloc.type!r} relocation at .text+0x{reloc.offset:x} is not supported",
                 "frame-constants")


# --------------------------------------------------------------------------------------------
# Step 6: jump tables in read-only data


def _fix_jump_tables(coff, pieces, rodata, rodata_offset, rodata_places, source):
    """Resolve the relocations inside the read-only data sections: jump-table entries are
    re-encoded, fields naming external symbols stay relocations."""
    fixups, tables, relocations = [], [], []
    # Where the code points into each data section: the table starts.
    starts: dict[int, set[int]] = defaultdict(set)
    text = coff.section(".text")
    for reloc in text.relocations:
        symbol = coff.symbol_at_index(reloc.symbol_index)
        if symbol.section_number in rodata_places and any(p.holds(reloc.offset) for p in pieces):
            starts[symbol.section_number].add(symbol.value + _inline(text.data, reloc.offset, reloc.type))
    for number, place in rodata_places.items():
        section = coff.section_by_number(number)
        for reloc in section.relocations:
            symbol = coff.symbol_at_index(reloc.symbol_index)
            where = f"{section.name}+0x{reloc.offset:x}"
            if not symbol.is_defined:     # e.g. a lookup table of static field addresses
                relocations.append(ImageRelocation(place + reloc.offset, reloc.type, symbol.name,
                                                   _inline(section.data, reloc.offset, reloc.type)))
                continue
            if reloc.type != RelocationType.REL32 or symbol.section_name != ".text":
                kind = reloc.type.name if isinstance(reloc.type, RelocationType) else hex(reloc.type)
                raise _error(f"{where}: {kind} against {symbol.name} ({symbol.section_name}); only jump "
                             "tables of table-relative entries (REL32 against .text) are supported")
            below = [s for s in starts[number] if s <= reloc.offset]
            if not below:
                raise _error(f"{where}: a REL32 entry before any table the code points to")
            table = max(below)
            inline = _inline(section.data, reloc.offset, reloc.type)
            target = symbol.value + inline - (reloc.offset - table) - 4
            new_target = _locate(pieces, target)
            site = place + reloc.offset
            value = new_target - (place + table)
            at = site - rodata_offset
            rodata[at:at + 4] = value.to_bytes(4, "little", signed=True)
            fixups.append(Fixup("jump-table", site, 4, target, new_target, f"{where}, table at +0x{table:x}"))
            tables.append((site, place + table, target))
    return rodata, fixups, tuple(tables), relocations


# --------------------------------------------------------------------------------------------
# Step 7: unwind data and .pdata


def _unwind(recovered, model, pieces):
    ranges, runtime, blob = [], [], bytearray()
    for p in pieces:
        fn = p.function
        info, synthesized = fn.unwind, False
        if info is None:
            info, synthesized = UnwindInfo(), True
        if info.chained is not None:
            raise _error(f"{fn.name}: chained unwind info is not supported")
        info = _after_thunk(to_clr(info), len(p.prefix), fn.name)
        ranges.append(PlacedRange(p.funclet, p.kind, fn.name, CodeRange(p.start, p.end), fn.code_range,
                                  info, synthesized, p.segments, p.prefix))
        at = len(blob)
        blob += encode_unwind_info(info)   # (memoised: a few prologs recur)
        blob += bytes(-len(blob) % 4)
        runtime.append(RuntimeFunction(p.start, p.end, at))
    return tuple(ranges), tuple(runtime), bytes(blob)


def _after_thunk(info: UnwindInfo, size: int, function: str) -> UnwindInfo:
    """The UNWIND_INFO of a range that starts with an entry thunk of `size` bytes: the thunk
    (register moves, no stack change) becomes part of the prolog, so the prolog size and
    every code offset (measured from the start of the range) grow by `size`."""
    if not size:
        return info
    if info.version != 1:
        raise _error(f"{function}: UNWIND_INFO version {info.version}: only version 1 can take an entry thunk")
    if info.prolog_size + size > 0xFF:
        raise _error(f"{function}: a prolog of {info.prolog_size} bytes plus the {size}-byte entry thunk "
                     "does not fit SizeOfProlog")
    codes = tuple(dataclasses.replace(op, code_offset=op.code_offset + size) for op in info.codes)
    return dataclasses.replace(info, prolog_size=info.prolog_size + size, codes=codes)


# --------------------------------------------------------------------------------------------
# The check


def _verify(image: FinalImage) -> list[ImageFinding]:
    out: list[ImageFinding] = []
    src = image._source
    if src is None:
        return [ImageFinding("no-source", 0, "the image carries no source to check against")]
    code = image.code
    md = _md()
    pieces = [_Piece(r.funclet, r.kind, CodeFunction(r.function, "", None, r.source.start, r.source.end,
                                                     None, None), r.begin, r.segments, r.entry_thunk)
              for r in image.ranges]
    # ranges: in order, disjoint, main body first, made of their segments back to back
    previous = 0
    for n, r in enumerate(image.ranges):
        if (n == 0 and (r.funclet != 0 or r.begin != 0)) or r.begin < previous or r.end > len(code):
            out.append(ImageFinding("range-order", r.begin, f"range of funclet {r.funclet} out of place"))
        starts = [s.start for s in r.segments]
        if r.entry_thunk and code[r.begin:r.begin + len(r.entry_thunk)] != r.entry_thunk:
            out.append(ImageFinding("entry-thunk", r.begin, f"range of funclet {r.funclet} does not start with "
                                    f"its entry thunk {r.entry_thunk.hex(' ')}"))
        if not r.segments or starts[0] != r.begin + len(r.entry_thunk) or r.segments[-1].end != r.end or \
                any(a.end != b.start for a, b in zip(r.segments, r.segments[1:])):
            out.append(ImageFinding("range-size", r.begin, f"range of funclet {r.funclet} is not its segments"))
        previous = r.end
    relocations = {rel.offset: rel for rel in image.relocations}
    reloc_offsets = sorted(src.relocations)
    for p in pieces:
        try:
            # the final bytes decoded afresh; the object's as the link decoded them
            final = _decode(md, code, p.start + len(p.prefix), p.end, f"final range of funclet {p.funclet}",
                            relative=False)
            original = {i.address: i for seg in p.segments for i in _object_instructions(md, src, seg)}
        except BackendError as e:
            out.append(ImageFinding("undecodable", e.offset or p.start, e.reason))
            continue
        spans = [(g.start, g.end, g.source.start) for g in p.segments]
        for insn in final:
            for start, end, source in spans:
                if start <= insn.address < end:
                    origin = source + insn.address - start
                    break
            else:
                origin = -1
            old = original.get(origin)
            if old is None or old.size != insn.size:
                out.append(ImageFinding("instruction-boundary", insn.address,
                                        f"{insn.mnemonic} {insn.op_str}: not an instruction of the object at "
                                        f".text+0x{origin:x}"))
                continue
            k = bisect.bisect_left(reloc_offsets, old.address)
            inside = []
            while k < len(reloc_offsets) and reloc_offsets[k] < old.end:
                inside.append(reloc_offsets[k])
                k += 1
            # (most instructions hold nothing relocated or relative and are the object's bytes:
            # nothing to check field by field)
            if inside or old.rel is not None or insn.raw != old.raw:
                out.extend(_check_instruction(image, src, pieces, p, insn, old, inside, relocations))
    for r in image.relocations:
        if r.offset >= image.read_only_data_offset:     # a field of the read-only data
            at = r.offset - image.read_only_data_offset
            held = _inline(image.read_only_data, at, r.type) if at + 4 <= len(image.read_only_data) else None
            if held != r.addend:
                out.append(ImageFinding("relocation", r.offset, f"read-only data field for {r.symbol} "
                                        f"holds {held}, its addend is {r.addend}"))
    for site, table, target in src.jump_tables:
        at = site - image.read_only_data_offset
        value = struct.unpack_from("<i", image.read_only_data, at)[0]
        try:
            want = _locate(pieces, target)
        except BackendError as e:
            out.append(ImageFinding("jump-table", site, e.reason))
            continue
        if table + value != want:
            out.append(ImageFinding("jump-table", site, f"entry reaches {table + value:#x}, its target "
                                    f".text+0x{target:x} is at {want:#x}"))
    for r, f in zip(image.ranges, image.runtime_functions):
        if (f.begin_rva, f.end_rva) != (r.begin, r.end):
            out.append(ImageFinding("pdata", r.begin, f"RUNTIME_FUNCTION {f} for range [{r.begin:#x}, {r.end:#x})"))
        try:
            decoded = decode_unwind_info(image.unwind_data, f.unwind_rva)
        except LlilcEhError as e:
            decoded = e
        if decoded != r.unwind:
            out.append(ImageFinding("unwind", r.begin, "the unwind data does not decode to the range's UNWIND_INFO"))
    if len(image.runtime_functions) != len(image.ranges):
        out.append(ImageFinding("pdata", 0, f"{len(image.runtime_functions)} RUNTIME_FUNCTIONs for "
                                f"{len(image.ranges)} ranges"))
    return out


def _object_instructions(md, src: _Source, seg: Segment) -> list[_Insn]:
    """The object's instructions in `seg`: those the link decoded of its function where the
    segment starts and ends between two of them (always, in an image `link_final_image`
    made: a linear sweep from an instruction of the sweep goes on as the sweep did), else
    decoded afresh."""
    insns = src.decoded.get(seg.function, [])
    index = {i.address: k for k, i in enumerate(insns)}
    lo = index.get(seg.source.start)
    hi = len(insns) if insns and insns[-1].end == seg.source.end else index.get(seg.source.end)
    if lo is not None and hi is not None and lo < hi:
        return insns[lo:hi]
    return _decode(md, src.text, seg.source.start, seg.source.end, seg.function)


def _check_instruction(image, src, pieces, p, insn: _Insn, old: _Insn, inside: list[int],
                       relocations: dict) -> list[ImageFinding]:
    """The final `insn` against the object's `old`, whose relocated fields start at `inside`
    (`insn` is decoded without its `rel`: read here only when the object's is relative)."""
    out = []
    skip = set()
    desc = f"{insn.mnemonic} {insn.op_str} (was .text+0x{old.address:x}: {old.mnemonic} {old.op_str})"
    for field_offset in inside:
        rtype, name, section, value, inline = src.relocations[field_offset]
        site = insn.address + field_offset - old.address
        size = 8 if rtype == RelocationType.ADDR64 else 4
        skip.update(range(field_offset - old.address, field_offset - old.address + size))
        bias = _REL32.get(rtype)
        if name in src.cells and section == "IMAGE_SYM_UNDEFINED":
            got = site + 4 + (bias or 0) + struct.unpack_from("<i", image.code, site)[0]
            if bias is None or got != src.cells[name] + inline:
                out.append(ImageFinding("cell", site, f"{desc}: reaches {got:#x}, the cell of {name} is at "
                                        f"{src.cells[name]:#x}"))
        elif name in src.frame_symbols:
            want = getattr(image.filter_constants, src.frame_symbols[name]) + inline
            got = _constant_value(insn, rtype, site)
            if got != want:
                out.append(ImageFinding("frame-constant", site, f"{desc}: {got}, want {name} = {want}"))
            skip.update(range(insn.size))   # the instruction itself was rewritten
        elif section == "IMAGE_SYM_UNDEFINED":
            r = relocations.get(site)
            held = _inline(image.code, site, rtype)
            if r is None or r.symbol != name or r.type != rtype or r.addend != inline or held != inline:
                out.append(ImageFinding("relocation", site, f"{desc}: no image relocation for {name}{inline:+d} "
                                        f"(the field holds {held:+d})"))
        elif bias is not None:
            got = site + 4 + bias + struct.unpack_from("<i", image.code, site)[0]
            try:
                want = (src.rodata_targets[name] + inline if name in src.rodata_targets
                        else _locate(pieces, value + inline, p))
            except BackendError as e:
                out.append(ImageFinding("reference", site, f"{desc}: {e.reason}"))
                continue
            if got != want:
                out.append(ImageFinding("reference", site, f"{desc}: reaches {got:#x}, its target is at {want:#x}"))
    if old.rel is not None and not inside:
        offset, size, target = old.rel
        skip.update(range(offset, offset + size))
        try:
            want = _locate(pieces, target, p)
        except BackendError as e:
            out.append(ImageFinding("reference", insn.address + offset, f"{desc}: {e.reason}"))
            want = None
        rel = _relative(_md(), insn.address, insn.raw, insn.mnemonic, insn.op_str)
        if rel is None or rel[:2] != (offset, size):
            out.append(ImageFinding("reference", insn.address + offset, f"{desc}: no longer the same reference"))
        elif want is not None and rel[2] != want:
            out.append(ImageFinding("reference", insn.address + offset,
                                    f"{desc}: reaches {rel[2]:#x}, its target .text+0x{target:x} is at {want:#x}"))
    if any(a != b for n, (a, b) in enumerate(zip(insn.raw, old.raw)) if n not in skip):
        out.append(ImageFinding("instruction-bytes", insn.address, f"{desc}: bytes differ from the object's"))
    return out


def _constant_value(insn: _Insn, rtype, site) -> int | None:
    """The constant a rewritten frame-constant instruction puts in its register."""
    if rtype == RelocationType.REL32:      # REX.W C7 /0 imm32: mov r64, imm32
        raw = insn.raw
        if len(raw) == 7 and raw[0] & 0xFA == 0x48 and raw[1] == 0xC7 and raw[2] & 0xF8 == 0xC0:
            return int.from_bytes(raw[3:7], "little", signed=True)
        return None
    size = 8 if rtype == RelocationType.ADDR64 else 4
    at = site - insn.address
    return int.from_bytes(insn.raw[at:at + size], "little", signed=True)


__all__ = [
    "FilterConstants", "FinalImage", "Fixup", "FuncletMatch", "ImageFinding", "ImageRelocation",
    "PlacedRange", "Segment", "link_final_image", "match_funclets", "read_frame_constants",
]
