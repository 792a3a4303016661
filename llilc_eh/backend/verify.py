"""The final image checked against the object it was made from: `FinalImage.verify()`.

Why a module of its own, apart from the relink: a check that shares the code it checks
proves little. This one decodes the final bytes afresh (`backend.x86`) and holds every
instruction against the object's -- same length and bytes, relative fields aside -- and
every relative field, relocation, cell, frame constant and jump-table entry against where
its original target went (`relink.locate`, over the ranges' segments as the image records
them); then the ranges (in order, disjoint, main body first, made of their segments), the
entry thunks, `.pdata` and the unwind data (decoded again), our stack probe's included. It
reuses of the relink only its record (`Source`: the object's relocations and the
instructions the link decoded, so an object is not decoded twice) and the offset map. A
transformation with one verify step at its end, as LLVM's WinEHPrepare has (STYLE.md).

Findings are values (`ImageFinding`: rule, offset, detail), never exceptions: the pipeline
records them beside the image (`MethodRun.image_findings`), and a method with any is not
clean.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import BackendError, LlilcEhError
from ..unwind import decode_unwind_info
from . import x86
from .coff import RelocationType
from .recover import CodeFunction
from .relink import PROBE_UNWIND, REL32_BIAS, STACK_PROBE_CODE, Piece, Segment, inline_addend, locate

if TYPE_CHECKING:
    from .image import FinalImage

@dataclass(frozen=True)
class ImageFinding:
    """One thing `FinalImage.verify` found wrong."""

    rule: str
    offset: int
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.offset:#06x}: {self.detail}"


@dataclass(frozen=True)
class Source:
    """What verify() needs of the object: the original code and its relocations."""

    text: bytes
    relocations: dict                # .text field offset -> (type, symbol name, section name, value, inline)
    frame_symbols: dict              # symbol name -> which constant
    rodata_targets: dict             # symbol name (data section) -> image offset of its section + value
    jump_tables: tuple               # (final entry offset, final table offset, original .text target)
    decoded: dict                    # object function -> its instructions, as the link decoded them
    cells: dict = field(default_factory=dict)   # cell (or stack probe) symbol -> its final offset


def verify_image(image: FinalImage) -> list[ImageFinding]:
    """`FinalImage.verify()`: every finding, empty when the image is sound."""
    out: list[ImageFinding] = []
    src = image._source
    if src is None:
        return [ImageFinding("no-source", 0, "the image carries no source to check against")]
    code = image.code
    md = x86.md()
    pieces = [Piece(r.funclet, r.kind, CodeFunction(r.function, "", None, r.source.start, r.source.end,
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
            final = x86.decode(md, code, p.start + len(p.prefix), p.end, f"final range of funclet {p.funclet}",
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
            held = inline_addend(image.read_only_data, at, r.type) if at + 4 <= len(image.read_only_data) else None
            if held != r.addend:
                out.append(ImageFinding("relocation", r.offset, f"read-only data field for {r.symbol} "
                                        f"holds {held}, its addend is {r.addend}"))
    for site, table, target in src.jump_tables:
        at = site - image.read_only_data_offset
        value = struct.unpack_from("<i", image.read_only_data, at)[0]
        try:
            want = locate(pieces, target)
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
    # then our stack probe's RUNTIME_FUNCTION, a leaf: the runtime needs one for every IP it
    # may interrupt (backend.image, "Unwind data")
    probe = () if image.stack_probe is None else ((image.stack_probe, image.stack_probe + len(STACK_PROBE_CODE)),)
    for (begin, end), f in zip(probe, image.runtime_functions[len(image.ranges):]):
        if (f.begin_rva, f.end_rva) != (begin, end):
            out.append(ImageFinding("pdata", begin, f"RUNTIME_FUNCTION {f} for the stack probe [{begin:#x}, {end:#x})"))
        try:
            decoded = decode_unwind_info(image.unwind_data, f.unwind_rva)
        except LlilcEhError as e:
            decoded = e
        if decoded != PROBE_UNWIND:
            out.append(ImageFinding("unwind", begin, "the stack probe's unwind data is not a frameless leaf's"))
    if len(image.runtime_functions) != len(image.ranges) + len(probe):
        out.append(ImageFinding("pdata", 0, f"{len(image.runtime_functions)} RUNTIME_FUNCTIONs for "
                                f"{len(image.ranges)} ranges" + (" and the stack probe" if probe else "")))
    return out


def _object_instructions(md, src: Source, seg: Segment) -> list[x86.Insn]:
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
    return x86.decode(md, src.text, seg.source.start, seg.source.end, seg.function)


def _check_instruction(image, src, pieces, p, insn: x86.Insn, old: x86.Insn, inside: list[int],
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
        bias = REL32_BIAS.get(rtype)
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
            held = inline_addend(image.code, site, rtype)
            if r is None or r.symbol != name or r.type != rtype or r.addend != inline or held != inline:
                out.append(ImageFinding("relocation", site, f"{desc}: no image relocation for {name}{inline:+d} "
                                        f"(the field holds {held:+d})"))
        elif bias is not None:
            got = site + 4 + bias + struct.unpack_from("<i", image.code, site)[0]
            try:
                want = (src.rodata_targets[name] + inline if name in src.rodata_targets
                        else locate(pieces, value + inline, p))
            except BackendError as e:
                out.append(ImageFinding("reference", site, f"{desc}: {e.reason}"))
                continue
            if got != want:
                out.append(ImageFinding("reference", site, f"{desc}: reaches {got:#x}, its target is at {want:#x}"))
    if old.rel is not None and not inside:
        offset, size, target = old.rel
        skip.update(range(offset, offset + size))
        try:
            want = locate(pieces, target, p)
        except BackendError as e:
            out.append(ImageFinding("reference", insn.address + offset, f"{desc}: {e.reason}"))
            want = None
        rel = x86.relative_field(x86.md(), insn.address, insn.raw, insn.mnemonic, insn.op_str)
        if rel is None or rel[:2] != (offset, size):
            out.append(ImageFinding("reference", insn.address + offset, f"{desc}: no longer the same reference"))
        elif want is not None and rel[2] != want:
            out.append(ImageFinding("reference", insn.address + offset,
                                    f"{desc}: reaches {rel[2]:#x}, its target .text+0x{target:x} is at {want:#x}"))
    if any(a != b for n, (a, b) in enumerate(zip(insn.raw, old.raw)) if n not in skip):
        out.append(ImageFinding("instruction-bytes", insn.address, f"{desc}: bytes differ from the object's"))
    return out


def _constant_value(insn: x86.Insn, rtype, site) -> int | None:
    """The constant a rewritten frame-constant instruction puts in its register."""
    if rtype == RelocationType.REL32:      # REX.W C7 /0 imm32: mov r64, imm32
        raw = insn.raw
        if len(raw) == 7 and raw[0] & 0xFA == 0x48 and raw[1] == 0xC7 and raw[2] & 0xF8 == 0xC0:
            return int.from_bytes(raw[3:7], "little", signed=True)
        return None
    size = 8 if rtype == RelocationType.ADDR64 else 4
    at = site - insn.address
    return int.from_bytes(insn.raw[at:at + size], "little", signed=True)


__all__ = ["ImageFinding", "Source", "verify_image"]
