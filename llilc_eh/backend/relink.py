"""Lay the matched code out in the CLR's order and fix every reference that moved: the relink.

Why a module of its own: this is the one step that writes bytes. `link_final_image`
(`backend.image`) runs it between the funclet match (`backend.match`), which says which
object function is which funclet, and the unwind data; everything here works on `.text`
offsets, COFF relocations and decoded instructions (`backend.x86`), and knows nothing of
how funclets were told apart. Its record of what it did (`Fixup`, `ImageRelocation`, the
`Segment`s of each range, `SourceBuilder`) is what the final check (`backend.verify`)
holds the bytes against.

Steps, in `link_final_image`'s order: `stray_tails` → `lay_out` (`Piece`s in the model's
layout) → `copy` → `place_stack_probe` → `place_read_only_data` → `place_cells` →
(the filter frame constants, `backend.frame`) → `fix_references` → `fix_jump_tables`.

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

Stray blocks: at O2 LLVM sometimes lays a funclet's catchret block out at the end of the
parent's range (inside the parent's `.pdata` entry, reached only by the funclet's
branches). Such a tail moves to the end of its funclet's range (`Segment`s of a
`PlacedRange`; see `stray_tails`), so every range holds exactly its own code.

The target's funclet entry thunks (`lay_out`), data cells (`place_cells`) and our stack
probe (`place_stack_probe`): `backend.image`, "Targets".
"""

from __future__ import annotations

import struct
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..assembly.native import CodeRange
from ..errors import BackendError
from ..funclets.model import FuncletKind, FuncletModel
from ..unwind import UnwindInfo
from . import x86
from .coff import CoffObject, RelocationType, SectionFlags
from .frame import FP_OFFSET_SUFFIX, PSP_SLOT_SUFFIX
from .recover import CodeFunction, RecoveredCode

if TYPE_CHECKING:
    from .match import FuncletMatch

PADDING_BYTE = 0xCC            # int3 between ranges: never executed, traps if it is

REL32_BIAS = {RelocationType.REL32: 0, RelocationType.REL32_1: 1, RelocationType.REL32_2: 2,
              RelocationType.REL32_3: 3, RelocationType.REL32_4: 4, RelocationType.REL32_5: 5}


def _error(reason: str, kind: str = "relink", offset: int | None = None) -> BackendError:
    return BackendError(reason, kind=kind, offset=offset)


@dataclass(frozen=True)
class Segment:
    """A run of the object's code and where it went: normally a function's whole range; a
    block LLVM laid out in the wrong function's range moves on its own (see `stray_tails`)."""

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



# --------------------------------------------------------------------------------------------
# Lay out and copy


@dataclass(frozen=True)
class Piece:
    """One range of the final image while it is laid out: a model funclet's code (its
    segments) at its final place, with the target's entry thunk before it."""

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


def lay_out(recovered: RecoveredCode, coff: CoffObject, model: FuncletModel, match: FuncletMatch,
             tails: dict[str, list[tuple[str, int, int]]], thunk: bytes = b"") -> list[Piece]:
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
        pieces.append(Piece(i, model.funclets[i].kind, fn, start, tuple(segments), prefix))
    if not pieces or pieces[0].funclet != 0:
        raise _error("the model's layout does not start with the main body")
    return pieces


def copy(coff: CoffObject, pieces: list[Piece]) -> bytearray:
    text = coff.section(".text").data
    code = bytearray([PADDING_BYTE]) * (pieces[-1].end if pieces else 0)
    for p in pieces:
        code[p.start:p.start + len(p.prefix)] = p.prefix
        for s in p.segments:
            code[s.start:s.end] = text[s.source.start:s.source.end]
    return code


def locate(pieces: list[Piece], offset: int, near: Piece | None = None) -> int:
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


def stray_tails(functions: list[CodeFunction], decoded: dict[str, list[x86.Insn]]) -> dict[str, list]:
    """Blocks LLVM laid out at the end of the wrong function's range.

    At O2 LLVM sometimes puts a funclet's catchret block (`lea rax, [continuation]`, the
    funclet's epilogue, `ret`) after the parent's last block, before the funclet's symbol:
    inside the parent's range and `.pdata` entry, reached only by the funclet's branches
    (2 of 5,693 framework EH methods), or a filter handler's throw block (its
    CORINFO_HELP_THROWNULLREF invoke and the `ud2` after it) after a catch's code. Such a tail
    -- from the first branch target to the end of its function, entered by no fall-through,
    referenced by no other function's code -- belongs to the funclet that branches there:
    {funclet: [(function, start, end)]}. The funclet match attributes the tail's calls to that
    funclet too (`match_funclets(tails=...)`)."""
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
    by_giver: dict[str, dict[int, set[str]]] = defaultdict(dict)
    for (name, target), takers in wanted.items():
        by_giver[name][target] = takers
    for name, targets in by_giver.items():
        # a tail may be entered at several of its blocks (a throw block and the `ud2` after its
        # call, both branched to by a filter handler's code): it starts at the first of them
        giver = by_name[name]
        start = min(targets)
        takers = set().union(*targets.values())
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
# Read-only data, cells, the stack probe; then every reference of the code


@dataclass
class SourceBuilder:
    """What the object's relocations say, gathered while fixing them, for the final check
    (`verify.Source`)."""

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


def place_read_only_data(coff: CoffObject, code_end: int) -> tuple[bytearray, int, dict[int, int]]:
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

# Its UNWIND_INFO: a frameless leaf (version 1, no prolog, no codes): RSP never moves, the
# return address stays at [RSP]. The image gives the routine a RUNTIME_FUNCTION of its own with
# it, which the runtime needs to suspend a thread caught there (backend.image, "Unwind data").
PROBE_UNWIND = UnwindInfo()


def place_stack_probe(coff: CoffObject, pieces: list[Piece], code: bytearray, name: str | None) -> dict[str, int]:
    """Append STACK_PROBE_CODE after the last range (16-aligned, int3 before it) when the
    placed code calls `name` (the target's probe symbol); {name: its offset}, else {}. It
    belongs to no range (no funclet, no clause reaches it) but inside the code (the method's
    code size and GC info cover it) and has a RUNTIME_FUNCTION of its own (`PROBE_UNWIND`):
    an unwinder alone would take a leaf without one, but the runtime's GC suspension reads
    the UNWIND_INFO of an interrupted IP (backend.image, "Unwind data")."""
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


def place_cells(coff: CoffObject, pieces: list[Piece], cells, rodata: bytearray,
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


def inline_addend(data: bytes, offset: int, rtype) -> int:
    """The addend a COFF relocation's field holds in place (8 bytes for ADDR64, else 4)."""
    if rtype == RelocationType.ADDR64:
        return struct.unpack_from("<q", data, offset)[0]
    return struct.unpack_from("<i", data, offset)[0]


def _put(code: bytearray, at: int, size: int, value: int, what: str) -> None:
    limit = 1 << (8 * size - 1)
    if not -limit <= value < limit:
        raise _error(f"{what}: displacement {value} does not fit {size} byte(s) any more", offset=at)
    code[at:at + size] = value.to_bytes(size, "little", signed=True)


def fix_references(coff, parent, pieces, code, constants, rodata_places, decoded, cells=None, probe=None):
    text = coff.section(".text")
    data = text.data
    frame = {parent + PSP_SLOT_SUFFIX: "psp_slot_offset", parent + FP_OFFSET_SUFFIX: "fp_offset"}
    source = SourceBuilder(data)
    cell_places = {**(cells or {}), **(probe or {})}    # external symbols the image placed itself
    fixups: list[Fixup] = []
    relocations: list[ImageRelocation] = []
    for reloc in text.relocations:
        symbol = coff.symbol_at_index(reloc.symbol_index)
        inline = inline_addend(data, reloc.offset, reloc.type)
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
            inline = inline_addend(data, reloc.offset, reloc.type)
            bias = REL32_BIAS.get(reloc.type)
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
                target = locate(pieces, symbol.value + inline, p)
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
            new_target = locate(pieces, target, p)
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
# Jump tables in read-only data


def fix_jump_tables(coff, pieces, rodata, rodata_offset, rodata_places, source):
    """Resolve the relocations inside the read-only data sections: jump-table entries are
    re-encoded, fields naming external symbols stay relocations."""
    fixups, tables, relocations = [], [], []
    # Where the code points into each data section: the table starts.
    starts: dict[int, set[int]] = defaultdict(set)
    text = coff.section(".text")
    for reloc in text.relocations:
        symbol = coff.symbol_at_index(reloc.symbol_index)
        if symbol.section_number in rodata_places and any(p.holds(reloc.offset) for p in pieces):
            starts[symbol.section_number].add(symbol.value + inline_addend(text.data, reloc.offset, reloc.type))
    for number, place in rodata_places.items():
        section = coff.section_by_number(number)
        for reloc in section.relocations:
            symbol = coff.symbol_at_index(reloc.symbol_index)
            where = f"{section.name}+0x{reloc.offset:x}"
            if not symbol.is_defined:     # e.g. a lookup table of static field addresses
                relocations.append(ImageRelocation(place + reloc.offset, reloc.type, symbol.name,
                                                   inline_addend(section.data, reloc.offset, reloc.type)))
                continue
            if reloc.type != RelocationType.REL32 or symbol.section_name != ".text":
                kind = reloc.type.name if isinstance(reloc.type, RelocationType) else hex(reloc.type)
                raise _error(f"{where}: {kind} against {symbol.name} ({symbol.section_name}); only jump "
                             "tables of table-relative entries (REL32 against .text) are supported")
            below = [s for s in starts[number] if s <= reloc.offset]
            if not below:
                raise _error(f"{where}: a REL32 entry before any table the code points to")
            table = max(below)
            inline = inline_addend(section.data, reloc.offset, reloc.type)
            target = symbol.value + inline - (reloc.offset - table) - 4
            new_target = locate(pieces, target)
            site = place + reloc.offset
            value = new_target - (place + table)
            at = site - rodata_offset
            rodata[at:at + 4] = value.to_bytes(4, "little", signed=True)
            fixups.append(Fixup("jump-table", site, 4, target, new_target, f"{where}, table at +0x{table:x}"))
            tables.append((site, place + table, target))
    return rodata, fixups, tuple(tables), relocations



__all__ = [
    "CELL_SIZE", "PADDING_BYTE", "PROBE_UNWIND", "REL32_BIAS", "STACK_PROBE_CODE", "Fixup", "ImageRelocation", "Piece", "Segment",
    "SourceBuilder", "copy", "fix_jump_tables", "fix_references", "inline_addend", "lay_out", "locate",
    "place_cells", "place_read_only_data", "place_stack_probe", "stray_tails",
]
