"""GCINFO v2 (AMD64) as a value: decode what the 3.1 runtime reads, encode what RyuJIT writes.

`decode(data)` follows `GcInfoDecoder` (src/vm/gcinfodecoder.cpp, v3.1.23) through the
header, the safe points, the interruptible ranges and the slot table, and reads the live
states far enough to know every bit the runtime may touch (`decode_sized` says how many
bytes that is). `encode(info)` makes the choices `GcInfoEncoder::Build` makes (slim or fat
header, live-set indirection or not, simple or run-length slot vectors, pointer widths), so
that for RyuJIT's GC info `encode(decode(x))` gives back `x` byte for byte; where the
encoder's choice depends on state a decoded value cannot know (the order of the distinct live
sets, which RyuJIT takes from a hash table) the value records the order as found.

The value keeps the wire model, not RyuJIT's inputs: slots already sorted and deleted slots
gone, call sites as the runtime looks them up (return address - 1), transitions per 64-byte
chunk of interruptible code.
"""

from __future__ import annotations

from dataclasses import dataclass

from .bitstream import BitReader, BitWriter, ceil_of_log2, number, size_of_var_unsigned
from .errors import GcInfoError
from .structs import (GENERICS_INST_CONTEXT_MASK, GENERICS_INST_CONTEXT_SHIFT, GC_INFO_FLAGS_BIT_SIZE,
                      HEADER_FIELDS, LIVESTATE_RLE_RUN_ENCBASE, LIVESTATE_RLE_SKIP_ENCBASE,
                      NUM_NORM_CODE_OFFSETS_PER_CHUNK, NUM_REGISTERS, NUM_STACK_SLOTS, NUM_UNTRACKED_SLOTS,
                      POINTER_SIZE, RANGE_LENGTH_MINUS_ONE, RANGE_START_DELTA, RBP, REGISTER, REGISTER_DELTA,
                      RLE_RUN, RLE_SKIP, SIZE_OF_RETURN_KIND_IN_FAT_HEADER, SIZE_OF_RETURN_KIND_IN_SLIM_HEADER,
                      SLOT_FLAGS, STACK_SLOT, STACK_SLOT_BASE, STACK_SLOT_BASE_NAMES, STACK_SLOT_DELTA,
                      STACK_SLOT_SHIFT, TRANSITION_OFFSET, GcInfoHeaderFlags, GcSlotFlags, GcStackSlotBase,
                      GenericsInstContextKind, ReturnKind)

_GPR = ("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi",
        "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15")


def _register_name(number: int) -> str:
    return _GPR[number] if 0 <= number < len(_GPR) else f"register {number}"


# ====================================================================== values

@dataclass(frozen=True)
class GcSlot:
    """One slot of the table: a register, or a stack location relative to `base`."""

    register: int | None = None
    offset: int | None = None                     # bytes, for a stack slot
    base: GcStackSlotBase | None = None
    flags: GcSlotFlags = GcSlotFlags.BASE        # INTERIOR | PINNED as written
    untracked: bool = False                       # live for the whole method (reported by the leaf only)

    @property
    def is_register(self) -> bool:
        return self.register is not None

    def __str__(self) -> str:
        if self.is_register:
            where = _register_name(self.register)
        else:
            where = f"[{STACK_SLOT_BASE_NAMES.get(self.base, self.base)}{self.offset:+#x}]"
        tags = [n.lower() for n in ("INTERIOR", "PINNED") if self.flags & GcSlotFlags[n]]
        if self.untracked:
            tags.append("untracked")
        return where + (f" ({', '.join(tags)})" if tags else "")


@dataclass(frozen=True)
class Chunk:
    """The lifetimes of one 64-byte chunk of interruptible code (offsets relative to the
    interruptible ranges laid end to end): slots that could be live in it, the ones live at
    its end, and the transitions (slot, offset in chunk) that flip a slot's state."""

    could_be_live: tuple[int, ...]
    final_live: tuple[int, ...]
    transitions: tuple[tuple[int, int], ...]     # (slot, offset 1..63), by slot then as written


@dataclass(frozen=True)
class GcInfo:
    """One method's GC info (GCINFO_VERSION 2, AMD64).

    Offsets of stack slots (PSPSym, GS cookie, generic context, security object) are bytes;
    the PSPSym is relative to the Initial-SP (RSP after the prolog). `prolog_size` is present
    when the GS cookie, the security object or a generic context needs it; `epilog_size` with
    the GS cookie only."""

    code_length: int
    return_kind: int = ReturnKind.SCALAR
    is_vararg: bool = False
    prolog_size: int | None = None
    epilog_size: int | None = None
    security_object_offset: int | None = None
    gs_cookie_offset: int | None = None
    psp_sym_offset: int | None = None
    generics_inst_context: GenericsInstContextKind | None = None
    generics_inst_context_offset: int | None = None
    stack_base_register: int | None = None
    wants_report_only_leaf: bool = False
    edit_and_continue_preserved_area: int | None = None
    reverse_pinvoke_frame_slot: int | None = None
    size_of_stack_area: int = 0          # outgoing argument + scratch area (fat header only)
    safe_points: tuple[int, ...] = ()    # call return address - 1, ascending
    interruptible_ranges: tuple[tuple[int, int], ...] = ()   # [start, stop)
    slots: tuple[GcSlot, ...] = ()       # registers, tracked stack slots, untracked stack slots
    # Live tracked slots at the safe points: the distinct sets in the order they are stored,
    # and for each safe point the index of its set. Empty when nothing is tracked.
    live_sets: tuple[tuple[int, ...], ...] = ()
    safe_point_live_set: tuple[int, ...] = ()
    # Fully interruptible code: one entry per 64-byte chunk (None: no pointer); empty when no
    # chunk has any (the pointer size is then 0).
    chunks: tuple[Chunk | None, ...] = ()

    # ---------------------------------------------------------------- derived

    @property
    def header_flags(self) -> GcInfoHeaderFlags:
        f = GcInfoHeaderFlags(0)
        pairs = ((self.is_vararg, GcInfoHeaderFlags.IS_VARARG),
                 (self.security_object_offset is not None, GcInfoHeaderFlags.HAS_SECURITY_OBJECT),
                 (self.gs_cookie_offset is not None, GcInfoHeaderFlags.HAS_GS_COOKIE),
                 (self.psp_sym_offset is not None, GcInfoHeaderFlags.HAS_PSP_SYM),
                 (self.stack_base_register is not None, GcInfoHeaderFlags.HAS_STACK_BASE_REGISTER),
                 (self.wants_report_only_leaf, GcInfoHeaderFlags.WANTS_REPORT_ONLY_LEAF),
                 (self.edit_and_continue_preserved_area is not None,
                  GcInfoHeaderFlags.HAS_EDIT_AND_CONTINUE_PRESERVED_SLOTS),
                 (self.reverse_pinvoke_frame_slot is not None, GcInfoHeaderFlags.REVERSE_PINVOKE_FRAME))
        for on, flag in pairs:
            if on:
                f |= flag
        if self.generics_inst_context is not None:
            f |= GcInfoHeaderFlags(int(self.generics_inst_context) << GENERICS_INST_CONTEXT_SHIFT)
        return f

    @property
    def slim(self) -> bool:
        """The encoder's rule for the 3-field slim header (GcInfoEncoder::Build)."""
        plain = self.header_flags & ~GcInfoHeaderFlags.HAS_STACK_BASE_REGISTER
        return (not plain and not self.interruptible_ranges and self.size_of_stack_area == 0
                and self.stack_base_register in (None, RBP) and self.return_kind <= 3)

    @property
    def num_registers(self) -> int:
        return sum(s.is_register for s in self.slots)

    @property
    def num_tracked(self) -> int:
        return sum(not s.untracked for s in self.slots)

    @property
    def num_untracked(self) -> int:
        return sum(s.untracked for s in self.slots)

    def live_at_safe_point(self, index: int) -> tuple[int, ...]:
        """Tracked slots live at safe point `index`."""
        return self.live_sets[self.safe_point_live_set[index]] if self.live_sets else ()

    def live_slots(self, offset: int) -> tuple[int, ...] | None:
        """Tracked slots the runtime reports live at code `offset` (EnumerateLiveSlots): at a
        safe point (pass the return address - 1, as the stack walker does for a caller) its
        live set; inside an interruptible range the state its chunk gives (the final states,
        flipped by each transition after the offset; a chunk without a pointer inherits the
        end state of the last one with); None where the GC info says nothing (no safe point,
        no range: the frame reports no tracked slot)."""
        if offset in self.safe_points:
            return self.live_at_safe_point(self.safe_points.index(offset))
        pseudo, covered = None, 0
        for start, stop in self.interruptible_ranges:
            if start <= offset < stop:
                pseudo = covered + offset - start
            covered += stop - start
        if pseudo is None:
            return None
        n = pseudo // NUM_NORM_CODE_OFFSETS_PER_CHUNK
        for k in range(min(n, len(self.chunks) - 1), -1, -1):
            chunk = self.chunks[k]
            if chunk is None:
                continue
            live = set(chunk.final_live)
            if k == n:
                delta = pseudo % NUM_NORM_CODE_OFFSETS_PER_CHUNK
                for slot, at in chunk.transitions:
                    if at > delta:
                        live ^= {slot}
            return tuple(sorted(live))
        return ()

    def __str__(self) -> str:
        rk = ReturnKind(self.return_kind).name if self.return_kind in ReturnKind._value2member_map_ \
            else str(self.return_kind)
        flags = "|".join(f.name for f in GcInfoHeaderFlags if f in self.header_flags and f.name) or "none"
        lines = [f"GC info v2 ({'slim' if self.slim else 'fat'} header): code length {self.code_length}, "
                 f"return kind {rk}, flags {flags}"]
        for name, value in (("prolog size", self.prolog_size), ("epilog size", self.epilog_size),
                            ("EnC preserved area", self.edit_and_continue_preserved_area),
                            ("reverse P/Invoke frame slot", self.reverse_pinvoke_frame_slot)):
            if value is not None:
                lines.append(f"  {name}: {value}")
        for name, offset in (("security object", self.security_object_offset),
                             ("GS cookie", self.gs_cookie_offset),
                             ("PSPSym (Initial-SP relative)", self.psp_sym_offset)):
            if offset is not None:
                lines.append(f"  {name} at sp{offset:+#x}")
        if self.generics_inst_context is not None:
            lines.append(f"  generics instantiation context: {self.generics_inst_context.name} at "
                         f"{self.generics_inst_context_offset:+#x}")
        if self.stack_base_register is not None:
            lines.append(f"  stack base register: {_register_name(self.stack_base_register)}")
        if self.size_of_stack_area:
            lines.append(f"  stack parameter scratch area: {self.size_of_stack_area}")
        if self.safe_points:
            lines.append(f"  safe points ({len(self.safe_points)}, return address - 1): " +
                         " ".join(f"{p:#x}" for p in self.safe_points))
        for start, stop in self.interruptible_ranges:
            lines.append(f"  interruptible [{start:#x}, {stop:#x})")
        lines.append(f"  slots: {len(self.slots)} ({self.num_registers} registers, "
                     f"{self.num_tracked - self.num_registers} tracked stack, {self.num_untracked} untracked)")
        lines += [f"    #{i} {s}" for i, s in enumerate(self.slots)]
        for i, offset in enumerate(self.safe_points):
            if self.live_sets:
                live = " ".join(f"#{s}" for s in self.live_at_safe_point(i)) or "-"
                lines.append(f"    live at {offset:#x}: {live}")
        for n, chunk in enumerate(self.chunks):
            if chunk is not None:
                lines.append(f"    chunk {n}: could be live {list(chunk.could_be_live)}, live at end "
                             f"{list(chunk.final_live)}, {len(chunk.transitions)} transition(s)")
        return "\n".join(lines)


# ====================================================================== decode

def decode(data: bytes | memoryview) -> GcInfo:
    """The GC info at the start of `data` (more may follow: the runtime reads no length)."""
    return decode_sized(data)[0]


def decode_sized(data: bytes | memoryview) -> tuple[GcInfo, int]:
    """The GC info and how many bytes of `data` the runtime's decoder may read of it."""
    r = BitReader(data)
    slim = r.bit() == 0
    if slim:
        flags = GcInfoHeaderFlags.HAS_STACK_BASE_REGISTER if r.bit() else GcInfoHeaderFlags(0)
        return_kind = r.bits(SIZE_OF_RETURN_KIND_IN_SLIM_HEADER)
    else:
        flags = GcInfoHeaderFlags(r.bits(GC_INFO_FLAGS_BIT_SIZE))
        return_kind = r.bits(SIZE_OF_RETURN_KIND_IN_FAT_HEADER)
    values: dict[str, int | None] = {}
    for f in HEADER_FIELDS:
        values[f.name] = f.denormalize(r.read(f.encoding)) if f.present(flags, slim) else None
    if flags & GcInfoHeaderFlags.HAS_STACK_BASE_REGISTER and slim:
        values["stack_base_register"] = RBP
    code_length = values["code_length"]
    if code_length >> 32:
        raise GcInfoError(f"code length {number(code_length)} does not fit the runtime's UINT32",
                          offset=r.pos, kind="bad-gcinfo")
    num_safe_points = values.pop("num_safe_points")
    num_ranges = values.pop("num_interruptible_ranges") or 0
    if values["size_of_stack_area"] is None:
        values["size_of_stack_area"] = 0
    context = (flags & GENERICS_INST_CONTEXT_MASK) >> GENERICS_INST_CONTEXT_SHIFT

    # Safe points: CeilOfLog2(code length) bits each.
    safe_points: tuple[int, ...] = ()
    if num_safe_points:
        if code_length == 0:
            raise GcInfoError(f"{number(num_safe_points)} safe point(s) in a method of code length 0",
                              offset=r.pos, kind="bad-gcinfo")
        width = ceil_of_log2(code_length)
        _room(r, num_safe_points * max(width, 1), "safe points")
        safe_points = tuple(r.bits(width) for _ in range(num_safe_points))

    # Interruptible ranges: deltas from the last stop.
    _room(r, num_ranges * 14, "interruptible ranges")
    ranges = []
    last_stop = 0
    for _ in range(num_ranges):
        start = last_stop + r.read(RANGE_START_DELTA)
        stop = start + r.read(RANGE_LENGTH_MINUS_ONE) + 1
        if stop > code_length:   # the encoder asserts it; it also bounds the chunk count
            raise GcInfoError(f"interruptible range ends at {number(stop)}, past the code length {code_length}",
                              offset=r.pos, kind="bad-gcinfo")
        ranges.append((start, stop))
        last_stop = stop

    slots = _decode_slot_table(r)
    num_tracked = sum(not s.untracked for s in slots)

    # Live states. The second part (live sets, chunks) starts at the byte after the first
    # (the encoder's m_Info2). The runtime finds it by aligning after the call-site pointers or
    # after the chunk pointers, whichever it reads: the same place unless a method has both
    # call sites and interruptible ranges, which RyuJIT never writes (none in the corpus).
    live_sets: tuple[tuple[int, ...], ...] = ()
    set_index: tuple[int, ...] = ()
    pointers: tuple[int, ...] = ()
    chunk_pointers: tuple[int, ...] = ()
    if num_tracked and num_safe_points:
        if r.bit():   # indirection: a table of pointers to the distinct live sets
            width = r.read(POINTER_SIZE) + 1
            _room(r, num_safe_points * width, "live-set pointers")
            pointers = tuple(r.bits(width) for _ in range(num_safe_points))
        else:
            _room(r, num_safe_points * num_tracked, "live states")
            vectors = [r.set_bits(num_tracked) for _ in range(num_safe_points)]
            order: dict[tuple[int, ...], int] = {}
            set_index = tuple(order.setdefault(v, len(order)) for v in vectors)
            live_sets = tuple(order)
    num_chunks = 0
    if num_tracked and num_ranges:
        total = sum(stop - start for start, stop in ranges)
        num_chunks = (total + NUM_NORM_CODE_OFFSETS_PER_CHUNK - 1) // NUM_NORM_CODE_OFFSETS_PER_CHUNK
        width = r.read(POINTER_SIZE)
        if width:
            _room(r, num_chunks * width, "chunk pointers")
            chunk_pointers = tuple(r.bits(width) for _ in range(num_chunks))
    first_part_end = r.pos
    r.align_to_byte()
    second = r.pos
    if pointers:
        distinct = sorted(set(pointers))
        sets = []
        for p in distinct:
            r.seek(second + p, "a live-set pointer")
            sets.append(_read_live_vector(r, num_tracked))
        live_sets = tuple(sets)
        set_index = tuple(distinct.index(p) for p in pointers)
    chunks: tuple[Chunk | None, ...] = ()
    if chunk_pointers:
        chunks = tuple(_read_chunk(r, second + p - 1, num_tracked) if p else None for p in chunk_pointers)
    consumed_bits = max(first_part_end, r.high_water)
    info = GcInfo(
        return_kind=return_kind,
        is_vararg=bool(flags & GcInfoHeaderFlags.IS_VARARG),
        generics_inst_context=GenericsInstContextKind(context) if context else None,
        wants_report_only_leaf=bool(flags & GcInfoHeaderFlags.WANTS_REPORT_ONLY_LEAF),
        safe_points=safe_points, interruptible_ranges=tuple(ranges), slots=slots,
        live_sets=live_sets, safe_point_live_set=set_index, chunks=chunks,
        **values)
    return info, (consumed_bits + 7) // 8


def _room(r: BitReader, bits: int, what: str) -> None:
    """Refuse counts the remaining data cannot hold before looping over them."""
    if bits > r.remaining:
        raise GcInfoError(f"{what} need {number(bits)} bits at bit {r.pos}, {r.remaining} remain",
                          offset=r.pos, kind="truncated-gcinfo")


def _decode_slot_table(r: BitReader) -> tuple[GcSlot, ...]:
    num_registers = r.read(NUM_REGISTERS) if r.bit() else 0
    num_stack = num_untracked = 0
    if r.bit():
        num_stack = r.read(NUM_STACK_SLOTS)
        num_untracked = r.read(NUM_UNTRACKED_SLOTS)
    # the smallest slot takes 3 bits (a register delta): bound the counts by the data
    _room(r, 3 * (num_registers + num_stack + num_untracked), "slot table")
    slots: list[GcSlot] = []
    if num_registers:
        reg = r.read(REGISTER)
        flags = r.read(SLOT_FLAGS)
        slots.append(GcSlot(register=reg, flags=GcSlotFlags(flags)))
        for _ in range(num_registers - 1):
            if flags:   # after a slot with flags, the next is written in full
                reg = r.read(REGISTER)
                flags = r.read(SLOT_FLAGS)
            else:
                reg += r.read(REGISTER_DELTA) + 1
            slots.append(GcSlot(register=reg, flags=GcSlotFlags(flags)))
    for count, untracked in ((num_stack, False), (num_untracked, True)):
        if not count:
            continue
        base = r.read(STACK_SLOT_BASE)
        norm = r.read(STACK_SLOT)
        flags = r.read(SLOT_FLAGS)
        slots.append(_stack_slot(base, norm, flags, untracked, r))
        for _ in range(count - 1):
            base = r.read(STACK_SLOT_BASE)
            if flags:
                norm = r.read(STACK_SLOT)
                flags = r.read(SLOT_FLAGS)
            else:
                norm += r.read(STACK_SLOT_DELTA)
            slots.append(_stack_slot(base, norm, flags, untracked, r))
    return tuple(slots)


def _stack_slot(base: int, norm: int, flags: int, untracked: bool, r: BitReader) -> GcSlot:
    if base not in GcStackSlotBase._value2member_map_:
        raise GcInfoError(f"stack slot base {base} is none of caller SP, SP, frame register",
                          offset=r.pos, kind="bad-gcinfo")
    return GcSlot(offset=norm << STACK_SLOT_SHIFT, base=GcStackSlotBase(base), flags=GcSlotFlags(flags),
                  untracked=untracked)


def _read_live_vector(r: BitReader, n: int) -> tuple[int, ...]:
    """A slot-state vector as WriteSlotStateVarLengthVector writes it: simple (0, one bit per
    slot) or run-length (1, then 0: skip first / 1: bases swapped). Returns the set slots."""
    if not r.bit():
        _room(r, n, "live-state vector")
        return r.set_bits(n)
    bases = (RLE_RUN, RLE_SKIP) if r.bit() else (RLE_SKIP, RLE_RUN)
    live: list[int] = []
    i = r.read(bases[0])          # slots skipped before the first live one
    phase = 1
    while i < n:
        count = r.read(bases[phase]) + 1
        if phase:
            live.extend(range(i, min(i + count, n)))
        i += count
        phase ^= 1
    if i > n:
        raise GcInfoError(f"run-length vector covers {number(i)} slots, the table has {n}", offset=r.pos,
                          kind="bad-gcinfo")
    return tuple(live)


def _read_chunk(r: BitReader, pos: int, n: int) -> Chunk:
    r.seek(pos, "a chunk pointer")
    could = _read_live_vector(r, n)
    _room(r, len(could), "chunk final states")
    final_bits = set(r.set_bits(len(could)))
    final = tuple(s for k, s in enumerate(could) if k in final_bits)
    transitions = []
    for s in could:
        while r.bit():
            transitions.append((s, r.read(TRANSITION_OFFSET)))
    return Chunk(could, final, tuple(transitions))


# ====================================================================== encode

def encode(info: GcInfo) -> bytes:
    """The bytes RyuJIT's GcInfoEncoder would write for `info` (see the module docstring)."""
    _check(info)
    w = BitWriter()
    slim = info.slim
    flags = info.header_flags
    if slim:
        w.bits(0, 1)
        w.bits(1 if info.stack_base_register is not None else 0, 1)
        w.bits(info.return_kind, SIZE_OF_RETURN_KIND_IN_SLIM_HEADER)
    else:
        w.bits(1, 1)
        w.bits(int(flags), GC_INFO_FLAGS_BIT_SIZE)
        w.bits(info.return_kind, SIZE_OF_RETURN_KIND_IN_FAT_HEADER)
    values = {f.name: getattr(info, f.name, None) for f in HEADER_FIELDS}
    values["num_safe_points"] = len(info.safe_points)
    values["num_interruptible_ranges"] = len(info.interruptible_ranges)
    for f in HEADER_FIELDS:
        value = values[f.name]
        if not f.present(flags, slim):
            if value is not None and f.name not in _IMPLIED_WHEN_ABSENT:
                raise GcInfoError(f"{f.name} {value} is given but the header does not carry it (it needs a GS "
                                  f"cookie, security object or generic context)", kind="unencodable-gcinfo")
            continue
        if value is None:
            raise GcInfoError(f"{f.name} is needed by the header flags but not given", kind="unencodable-gcinfo")
        if not f.exact(value):
            raise GcInfoError(f"{f.name} {value} cannot be represented (normalisation would lose it)",
                              kind="unencodable-gcinfo")
        w.write(f.encoding, f.normalize(value))

    width = ceil_of_log2(info.code_length)
    for p in info.safe_points:
        w.bits(p, width)
    last_stop = 0
    for start, stop in info.interruptible_ranges:
        w.write(RANGE_START_DELTA, start - last_stop)
        w.write(RANGE_LENGTH_MINUS_ONE, stop - start - 1)
        last_stop = stop

    _encode_slot_table(w, info)
    if not info.slots:
        return w.to_bytes()          # no used slot: nothing follows (lExitSuccess)

    second = BitWriter()
    tracked = info.num_tracked
    if info.safe_points:
        _encode_call_site_states(w, second, info, tracked)
    if info.interruptible_ranges:
        _encode_chunks(w, second, info, tracked)
    return w.to_bytes() + second.to_bytes()


# Fields the header may leave out and still mean: RBP in the slim header, a zero outgoing area.
_IMPLIED_WHEN_ABSENT = frozenset({"stack_base_register", "size_of_stack_area", "num_interruptible_ranges"})


def _check(info: GcInfo) -> None:
    """What the encoder asserts, and what the value's own shape promises, as errors (an
    encoder fed a bad value must say so, not write something the decoder reads differently)."""
    def bad(reason: str) -> GcInfoError:
        return GcInfoError(reason, kind="unencodable-gcinfo")

    if not isinstance(info.code_length, int) or not 0 < info.code_length < 1 << 32:
        raise bad(f"code length {info.code_length!r}: must be positive and fit a UINT32")
    # GcInfoEncoder::SetReturnKind asserts IsValidReturnKind (gcinfotypes.h): RT_Unset is the
    # JIT's "not decided", never a verdict the runtime's return-address hijack may act on
    if info.return_kind not in ReturnKind._value2member_map_ or info.return_kind == ReturnKind.UNSET:
        raise bad(f"return kind {info.return_kind!r}: not a ReturnKind the runtime reads "
                  f"(UNSET and numbers outside gcinfotypes.h are refused)")
    # the stack base register is the frame register slots are reported against: one of the 16
    # AMD64 general registers, and not RSP (RSP-based slots say SP_REL, not a base register)
    if info.stack_base_register is not None and (not isinstance(info.stack_base_register, int)
                                                 or not 0 <= info.stack_base_register < len(_GPR)
                                                 or info.stack_base_register == _GPR.index("rsp")):
        raise bad(f"stack base register {info.stack_base_register!r}: not an AMD64 frame register "
                  f"(0-15, RSP excluded)")
    points = list(info.safe_points)
    if any(not isinstance(p, int) or not 0 <= p < info.code_length for p in points) or \
            any(a >= b for a, b in zip(points, points[1:])):
        raise bad("safe points must ascend strictly and lie inside the code")
    last = 0
    for start, stop in info.interruptible_ranges:
        if not last <= start < stop <= info.code_length:
            raise bad(f"interruptible range [{start}, {stop}) is empty, unsorted, overlapping or past the code")
        last = stop
    for s in info.slots:
        register_shape = isinstance(s.register, int) and s.register >= 0 and s.offset is None and \
            s.base is None and not s.untracked
        stack_shape = s.register is None and isinstance(s.offset, int) and \
            s.base in GcStackSlotBase._value2member_map_
        if not (register_shape or stack_shape) or int(s.flags) not in range(4):
            raise bad(f"slot {s!r} is neither a register nor a stack slot with a base, or has flags "
                      f"other than INTERIOR | PINNED")
    kinds = [(not s.is_register, s.untracked) for s in info.slots]
    if kinds != sorted(kinds):
        raise bad("slots must be registers, then tracked stack slots, then untracked stack slots")
    tracked = info.num_tracked
    if tracked and info.safe_points:
        if not info.live_sets or len(info.safe_point_live_set) != len(info.safe_points):
            raise bad("tracked slots and safe points need live sets and one live-set index per safe point")
        if any(not isinstance(i, int) or not 0 <= i < len(info.live_sets) for i in info.safe_point_live_set):
            raise bad("a live-set index names no live set")
        for live in info.live_sets:
            _check_slot_list(live, tracked, "live set")
    elif info.live_sets or info.safe_point_live_set:
        raise bad("live sets without tracked slots or without safe points")
    if (info.generics_inst_context is None) != (info.generics_inst_context_offset is None):
        raise bad("a generic context needs both its kind and its offset")
    if info.chunks:
        if not tracked or not info.interruptible_ranges:
            raise bad("chunks without tracked slots or without interruptible ranges")
        total = sum(stop - start for start, stop in info.interruptible_ranges)
        expected = (total + NUM_NORM_CODE_OFFSETS_PER_CHUNK - 1) // NUM_NORM_CODE_OFFSETS_PER_CHUNK
        if len(info.chunks) != expected:
            raise bad(f"{len(info.chunks)} chunks for {total} bytes of interruptible code (need {expected})")
        for chunk in info.chunks:
            if chunk is None:
                continue
            _check_slot_list(chunk.could_be_live, tracked, "chunk's could-be-live set")
            could = set(chunk.could_be_live)
            if not set(chunk.final_live) <= could or \
                    any(s not in could or not 0 <= o < NUM_NORM_CODE_OFFSETS_PER_CHUNK
                        for s, o in chunk.transitions):
                raise bad("a chunk's final states and transitions must name its could-be-live slots, "
                          "at offsets inside the chunk")


def _check_slot_list(live: tuple[int, ...], tracked: int, what: str) -> None:
    items = list(live)
    if any(not isinstance(i, int) or not 0 <= i < tracked for i in items) or \
            any(a >= b for a, b in zip(items, items[1:])):
        raise GcInfoError(f"{what} {live!r} is not an ascending list of tracked slot numbers below {tracked}",
                          kind="unencodable-gcinfo")


def _encode_slot_table(w: BitWriter, info: GcInfo) -> None:
    regs = [s for s in info.slots if s.is_register]
    stack = [s for s in info.slots if not s.is_register and not s.untracked]
    untracked = [s for s in info.slots if s.untracked]
    if regs:
        w.bits(1, 1)
        w.write(NUM_REGISTERS, len(regs))
    else:
        w.bits(0, 1)
    if stack or untracked:
        w.bits(1, 1)
        w.write(NUM_STACK_SLOTS, len(stack))
        w.write(NUM_UNTRACKED_SLOTS, len(untracked))
    else:
        w.bits(0, 1)
    previous = None
    for s in regs:
        if previous is None or previous.flags:
            w.write(REGISTER, s.register)
            w.write(SLOT_FLAGS, int(s.flags))
        else:
            if s.flags:
                raise GcInfoError(f"register slot {s} with flags after one without: the delta form "
                                  f"cannot carry them (RyuJIT sorts flagged slots first)", kind="unencodable-gcinfo")
            w.write(REGISTER_DELTA, s.register - previous.register - 1)
        previous = s
    for group in (stack, untracked):
        previous = None
        for s in group:
            if s.offset % 8:
                raise GcInfoError(f"stack slot {s} is not 8-byte aligned", kind="unencodable-gcinfo")
            w.write(STACK_SLOT_BASE, int(s.base))
            norm = s.offset >> STACK_SLOT_SHIFT
            if previous is None or previous.flags:
                w.write(STACK_SLOT, norm)
                w.write(SLOT_FLAGS, int(s.flags))
            else:
                if s.flags:
                    raise GcInfoError(f"stack slot {s} with flags after one without (see registers)",
                                      kind="unencodable-gcinfo")
                w.write(STACK_SLOT_DELTA, norm - (previous.offset >> STACK_SLOT_SHIFT))
            previous = s


def _vector_sizes(live: tuple[int, ...], n: int) -> tuple[int, int, int]:
    """SizeofSlotStateVarLengthVector: (simple, run-length, run-length with swapped bases)."""
    simple = 1 + n
    skip, run = LIVESTATE_RLE_SKIP_ENCBASE, LIVESTATE_RLE_RUN_ENCBASE
    if simple <= 2 + skip + 1 + run + 1:
        return simple, simple + 1, simple + 1
    rle = neg = 2
    for count, is_run in _segments(live, n):
        rle += size_of_var_unsigned(count, run if is_run else skip)
        neg += size_of_var_unsigned(count, skip if is_run else run)
    return simple, rle, neg


def _segments(live: tuple[int, ...], n: int) -> list[tuple[int, bool]]:
    """The counts WriteSlotStateVarLengthVector writes: skipped slots before the first live
    one, then alternately (run - 1) and (skip - 1), then what is left at the end."""
    out: list[tuple[int, bool]] = []
    live_set = set(live)
    start, prev = 0, False
    for i in range(n):
        if (i in live_set) != prev:
            out.append((i - start, prev))
            start, prev = i + 1, not prev
    out.append((n - start, prev))
    return out


def _vector_size(live: tuple[int, ...], n: int) -> int:
    simple, rle, neg = _vector_sizes(live, n)
    if simple <= rle and simple <= neg:
        return simple
    return rle if rle <= neg else neg


def _write_live_vector(w: BitWriter, live: tuple[int, ...], n: int) -> None:
    simple, rle, neg = _vector_sizes(live, n)
    if simple <= rle and simple <= neg:
        w.bits(0, 1)
        live_set = set(live)
        for i in range(n):
            w.bits(1 if i in live_set else 0, 1)
        return
    w.bits(1, 1)
    swapped = neg < rle
    w.bits(1 if swapped else 0, 1)
    skip, run = (RLE_RUN, RLE_SKIP) if swapped else (RLE_SKIP, RLE_RUN)
    for count, is_run in _segments(live, n):
        w.write(run if is_run else skip, count)


def _encode_call_site_states(w: BitWriter, second: BitWriter, info: GcInfo, tracked: int) -> None:
    n_sites = len(info.safe_points)
    sets = info.live_sets if tracked else ((),)
    index = info.safe_point_live_set if tracked else (0,) * n_sites
    if not sets:
        raise GcInfoError("tracked slots and safe points but no live sets", kind="unencodable-gcinfo")
    offsets, total = [], 0
    for s in sets:
        offsets.append(total)
        total += _vector_size(s, tracked)
    largest = offsets[-1]
    width = 1 if largest < 2 else ceil_of_log2(largest + 1)
    indirect = size_of_var_unsigned(width, POINTER_SIZE.base) + n_sites * width + 7 + total
    if indirect < n_sites * tracked:
        w.bits(1, 1)
        w.write(POINTER_SIZE, width - 1)
        for s in sets:
            _write_live_vector(second, s, tracked)
        for i in index:
            w.bits(offsets[i], width)
    else:
        w.bits(0, 1)
        for i in index:
            live = set(sets[i])
            for slot in range(tracked):
                w.bits(1 if slot in live else 0, 1)


def _encode_chunks(w: BitWriter, second: BitWriter, info: GcInfo, tracked: int) -> None:
    chunks = info.chunks if tracked else ()
    pointers = []
    for chunk in chunks:
        if chunk is None:
            pointers.append(0)
            continue
        pointers.append(second.count + 1)
        _write_live_vector(second, chunk.could_be_live, tracked)
        final = set(chunk.final_live)
        for s in chunk.could_be_live:
            second.bits(1 if s in final else 0, 1)
        by_slot: dict[int, list[int]] = {}
        for s, offset in chunk.transitions:
            by_slot.setdefault(s, []).append(offset)
        for s in chunk.could_be_live:
            for offset in by_slot.get(s, ()):
                second.bits(1, 1)
                second.write(TRANSITION_OFFSET, offset)
            second.bits(0, 1)
    largest = max(pointers, default=0)
    width = ceil_of_log2(largest + 1)
    w.write(POINTER_SIZE, width)
    if width:
        for p in pointers:
            w.bits(p, width)


# ====================================================================== what llilc-eh emits

def for_method(code_length: int, psp_sym_offset: int | None, frame_register: int | None,
               has_funclets: bool, *, return_kind: ReturnKind = ReturnKind.SCALAR) -> bytes:
    """The GC info llilc-eh hands `allocGCInfo` for one method (see docs/decisions.md, GC info).

    No slots and no safe points: with nothing tracked the runtime's EnumerateLiveSlots finds no
    safe point, no interruptible range, and reports nothing for the frame (the run sets
    COMPlus_gcConservative=1 to keep our frames' objects alive). What it still needs: the code
    length of the whole method, funclets included (the code manager checks offsets against it);
    for a method with funclets the PSPSym slot (Initial-SP relative), which the runtime reads to
    find the parent frame from a funclet, and WantsReportOnlyLeaf, as RyuJIT reports it for every
    method with funclets (the parent frame of a funclet is then not reported twice); the frame
    register as the stack base register when the method has one. `return_kind` says whether
    the method returns an object or a byref in RAX: the runtime reads it when it hijacks the
    method's return address to suspend the thread (threadsuspend.cpp GetReturnKind)."""
    return encode(method_info(code_length, psp_sym_offset, frame_register, has_funclets,
                              return_kind=return_kind))


def method_info(code_length: int, psp_sym_offset: int | None, frame_register: int | None,
                has_funclets: bool, *, return_kind: ReturnKind = ReturnKind.SCALAR) -> GcInfo:
    """The GcInfo value `for_method` encodes."""
    if has_funclets and psp_sym_offset is None:
        raise GcInfoError("a method with funclets needs its PSPSym slot", kind="unencodable-gcinfo")
    return GcInfo(code_length=code_length,
                  return_kind=return_kind,
                  psp_sym_offset=psp_sym_offset if has_funclets else None,
                  stack_base_register=frame_register,
                  wants_report_only_leaf=has_funclets)


