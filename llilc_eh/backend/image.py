"""The final image: the main body, then the funclets in *our* order, every reference fixed.

LLVM lays out the parent function, its funclets (`?catch$N@?0?<parent>@4HA`,
`?dtor$N@...`) and the outlined filter functions in an order of its own. The CLR wants
the main body first and contiguous, then the handlers; we put them in the funclet model's
`layout` (clause order, RyuJIT's), each filter immediately before its filter handler
(DESIGN decision 9). `link_final_image(recovered, coff, model, parent)` builds that image
in named steps, as a pass reads in LLVM:

    match funclets (`backend.match`)  →  stray tails  →  lay out  →  copy  →  stack probe,
    read-only data, cells  →  frame constants (`backend.frame`)  →  fix references  →  jump
    tables (`backend.relink`)  →  unwind and .pdata (here)

and `FinalImage.verify()` (`backend.verify`) is the one check at the end.

This module is the stage's entry point and its result: `FinalImage` (what every later
stage reads: the code, its ranges, relocations, fixups, unwind data, `map()` from object
offsets to final ones) and the driver; each step lives in the module that does that one
job, reading x86 through `backend.x86`. Their docstrings hold the how and the why.

Targets
-------
`link_final_image(..., target=, cells=)` asks the target (llilc_eh.target) two things. Its
funclet entry thunk (linux-x64: `mov rcx, rdi; mov rdx, rsi`, as the runtime calls a funclet
with RDI/RSI and LLVM's CoreCLR prolog reads RCX/RDX) is placed at the start of every handler
funclet's piece (`relink.Piece.prefix`, `PlacedRange.entry_thunk`): the segments start after it,
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
`unwind_data`). Our stack probe routine (`relink.place_stack_probe`), in no range, gets a
RUNTIME_FUNCTION of its own after the ranges' (`relink.PROBE_UNWIND`: a leaf, RSP untouched, the
return address at [RSP]). Why: the runtime suspends a thread for a GC by interrupting it
wherever it runs; on Linux, at an IP of ours that is no safe point, CoreCLR 3.1 asks
`IsIPInProlog`, which reads the UNWIND_INFO of the RUNTIME_FUNCTION holding the IP with only
a debug assert that there is one (excep.cpp; `EEJitManager::LazyGetFunctionEntry` gives NULL
outside every RUNTIME_FUNCTION). Without it a thread caught in the probe crashed the process
(SIGSEGV in IsIPInProlog, measured: a 1 MB stackalloc in a loop beside GC.Collect; see
docs/decisions.md). The runtime takes any RUNTIME_FUNCTION after the first for a funclet's
and does not hijack a thread in a funclet: it retries the suspension later.

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

import dataclasses
from dataclasses import dataclass, field

from ..assembly.native import CodeRange
from ..errors import BackendError
from ..funclets.model import FuncletKind, FuncletModel
from ..target import DEFAULT_TARGET, Target
from ..unwind import (
    RuntimeFunction,
    UnwindInfo,
    encode_unwind_info,
    to_clr,
)
from . import relink, structs, x86
from .codegen import object_symbol
from .coff import CoffObject
from .frame import FilterConstants, frame_constants_if_needed
from .match import FuncletMatch, match_funclets
from .recover import RecoveredCode
from .relink import Fixup, ImageRelocation, Segment
from .verify import ImageFinding, Source, verify_image


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
                                        # whole source; see `relink.stray_tails`)
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
class FinalImage:
    """The code of one method as the CLR gets it: offsets are from the start of the main
    body (the method's entry), the space CORINFO_EH_CLAUSE and GC info measure in."""

    parent: str
    code: bytes
    main: CodeRange
    ranges: tuple[PlacedRange, ...]              # final order; ranges[0] is the main body
    runtime_functions: tuple[RuntimeFunction, ...]   # the new .pdata: image offsets, one per range in
                                                     # order, then our stack probe's when placed
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
    _source: Source | None = field(default=None, repr=False, compare=False)
    cells: tuple[tuple[int, str], ...] = ()      # (final offset, symbol): 8-byte data cells in the read-only data
    target: str = DEFAULT_TARGET.name            # whose code (llilc_eh.target)
    stack_probe: int | None = None               # offset of our stack probe routine (relink.STACK_PROBE_CODE), if placed;
                                                 # its RUNTIME_FUNCTION is the last one

    # -- questions --------------------------------------------------------------------------

    @property
    def code_size(self) -> int:
        return len(self.code)

    @property
    def padding(self) -> int:
        """Bytes of the code that belong to no range (alignment between ranges), our stack
        probe routine not counted."""
        probe = len(relink.STACK_PROBE_CODE) if self.stack_probe is not None else 0
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
        return verify_image(self)

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
            lines.append(f"  stack probe routine (ours, in no range; a RUNTIME_FUNCTION of its own, a leaf): "
                         f"[{self.stack_probe:#06x}, {self.stack_probe + len(relink.STACK_PROBE_CODE):#06x})")
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


def funclet_match(recovered: RecoveredCode, coff: CoffObject, model: FuncletModel, parent: str) -> FuncletMatch:
    """The funclet match as the final image makes it: stray tails found first (their calls are
    the funclet's that branches there), then `match_funclets`."""
    return _match(recovered, coff, model, object_symbol(parent) if parent.startswith("@") else parent)[0]


def _match(recovered, coff, model, parent: str):
    text = coff.section(".text").data
    own = [f for f in recovered.method_functions(parent) if f.name == parent or f.is_funclet]
    decoded = {f.name: x86.decode(x86.md(), text, f.start, f.end, f.name) for f in own}
    tails = relink.stray_tails(own, decoded)
    return match_funclets(recovered, coff, model, parent, tails), decoded, tails


def link_final_image(recovered: RecoveredCode, coff: CoffObject, model: FuncletModel, parent: str, *,
                     target: Target = DEFAULT_TARGET, cells: frozenset[str] | set[str] = frozenset(),
                     reserve: int = 0) -> FinalImage:
    """The final image of `parent` (its object symbol, or its LLVM name `@"..."`) from the
    recovered object, in the order of `model.layout`, for `target` (its funclet entry thunk
    starts every handler range); `cells`: the external symbols that are 8-byte data cells
    (the reader's `External.cell`), placed in the read-only data (module docstring, "Targets").
    `reserve`: bytes left free between the code and the read-only data, for code the installer
    adds to the method (runtime/install.py: its call stubs, which must lie inside the method's
    code with a RUNTIME_FUNCTION of their own); the code and its ranges do not change."""
    parent = object_symbol(parent) if parent.startswith("@") else parent
    if object_symbol(model.parent) != parent:
        raise BackendError(f"the model is of {model.parent}, not {parent}",
                           kind="funclet-match").with_method(parent)
    try:
        text = coff.section(".text").data
        match, decoded, tails = _match(recovered, coff, model, parent)
        placed = [recovered.function(name) for name in dict.fromkeys(match.code.values())]
        decoded.update({f.name: x86.decode(x86.md(), text, f.start, f.end, f.name) for f in placed
                        if f.name not in decoded})
        pieces = relink.lay_out(recovered, coff, model, match, tails, target.funclet_entry_thunk)
        code = relink.copy(coff, pieces)
        probe = relink.place_stack_probe(coff, pieces, code, target.stack_probe)
        rodata, rodata_offset, rodata_places = relink.place_read_only_data(coff, len(code) + reserve)
        rodata, cell_places, cell_relocations = relink.place_cells(coff, pieces, cells, rodata, rodata_offset)
        constants = frame_constants_if_needed(recovered, coff, parent, pieces)
        fixups, relocations, source = relink.fix_references(coff, parent, pieces, code, constants,
                                                            rodata_places, decoded, cell_places, probe)
        rodata, table_fixups, tables, data_relocations = relink.fix_jump_tables(coff, pieces, rodata, rodata_offset,
                                                                                rodata_places, source)
        for r in data_relocations:
            if r.symbol in cells:
                raise BackendError(f"the read-only data at {r.offset:#x} holds the address of the cell "
                                   f"{r.symbol} (a table of cells): not supported", kind="relink")
        ranges, runtime_functions, unwind_data = _unwind(recovered, model, pieces, next(iter(probe.values()), None))
    except BackendError as e:
        raise e.with_method(parent)
    source = Source(source.text, source.relocations, source.frame_symbols, source.rodata_targets, tables,
                    decoded, {**cell_places, **probe})
    return FinalImage(parent, bytes(code), ranges[0].code_range, ranges, runtime_functions, unwind_data,
                      constants, tuple(relocations + data_relocations + cell_relocations),
                      tuple(fixups + table_fixups), bytes(rodata),
                      rodata_offset, match.absent, match.ambiguous, match.decided_by, match.identities,
                      match.pads, match.merged, source,
                      tuple(sorted((at, name) for name, at in cell_places.items())), target.name,
                      next(iter(probe.values()), None))



# --------------------------------------------------------------------------------------------
# Unwind data and .pdata of the final ranges


def _unwind(recovered, model, pieces, probe: int | None = None):
    """A PlacedRange per piece with its UNWIND_INFO in the CLR's form, then one RUNTIME_FUNCTION
    per range; and one more for our stack probe routine when it is placed (`probe`), with
    `relink.PROBE_UNWIND` (module docstring, "Unwind data")."""
    ranges, runtime, blob = [], [], bytearray()
    for p in pieces:
        fn = p.function
        info, synthesized = fn.unwind, False
        if info is None:
            info, synthesized = UnwindInfo(), True
        if info.chained is not None:
            raise BackendError(f"{fn.name}: chained unwind info is not supported", kind="relink")
        info = _after_thunk(to_clr(info), len(p.prefix), fn.name)
        ranges.append(PlacedRange(p.funclet, p.kind, fn.name, CodeRange(p.start, p.end), fn.code_range,
                                  info, synthesized, p.segments, p.prefix))
        at = len(blob)
        blob += encode_unwind_info(info)   # (memoised: a few prologs recur)
        blob += bytes(-len(blob) % 4)
        runtime.append(RuntimeFunction(p.start, p.end, at))
    if probe is not None:
        at = len(blob)
        blob += encode_unwind_info(relink.PROBE_UNWIND)
        blob += bytes(-len(blob) % 4)
        runtime.append(RuntimeFunction(probe, probe + len(relink.STACK_PROBE_CODE), at))
    return tuple(ranges), tuple(runtime), bytes(blob)


def _after_thunk(info: UnwindInfo, size: int, function: str) -> UnwindInfo:
    """The UNWIND_INFO of a range that starts with an entry thunk of `size` bytes: the thunk
    (register moves, no stack change) becomes part of the prolog, so the prolog size and
    every code offset (measured from the start of the range) grow by `size`."""
    if not size:
        return info
    if info.version != 1:
        raise BackendError(f"{function}: UNWIND_INFO version {info.version}: only version 1 can take an "
                           "entry thunk", kind="relink")
    if info.prolog_size + size > 0xFF:
        raise BackendError(f"{function}: a prolog of {info.prolog_size} bytes plus the {size}-byte entry thunk "
                           "does not fit SizeOfProlog", kind="relink")
    codes = tuple(dataclasses.replace(op, code_offset=op.code_offset + size) for op in info.codes)
    return dataclasses.replace(info, prolog_size=info.prolog_size + size, codes=codes)


__all__ = ["FinalImage", "PlacedRange", "link_final_image"]
