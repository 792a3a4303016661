"""GCINFO v2 codec: the bit encodings against the runtime's algorithms worked by hand, the
fields llilc-eh emits (`for_method`) bit by bit, decode(encode(x)) == x over generated values,
and damaged data is always a GcInfoError (never IndexError, never a hang).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from llilc_eh.errors import LlilcEhError
from llilc_eh.gcinfo import (Chunk, GcInfo, GcInfoError, GcSlot, GcSlotFlags, GcStackSlotBase,
                             GenericsInstContextKind, ReturnKind, decode, decode_sized, encode, for_method,
                             method_info)
from llilc_eh.gcinfo.bitstream import BitReader, BitWriter, ceil_of_log2, size_of_var_unsigned
from llilc_eh.gcinfo.structs import HEADER_FIELDS, GcInfoHeaderFlags


def bits_of(data: bytes, count: int | None = None) -> str:
    """The stream as the runtime reads it: bit 0 of byte 0 first."""
    s = "".join(f"{b:08b}"[::-1] for b in data)
    return s if count is None else s[:count]


# ============================================================== bit streams

def test_bits_are_read_least_significant_first():
    r = BitReader(bytes([0b10110001, 0b00000001]))
    assert [r.bit() for _ in range(4)] == [1, 0, 0, 0]
    assert r.bits(5) == 0b11011   # bits 4..8 straddle the byte boundary


@pytest.mark.parametrize("value, base, stream", [
    (0, 2, "000"),                  # one chunk: 2 value bits, extension bit 0
    (3, 2, "110"),
    (4, 2, "001" "100"),            # low chunk 00 + extension, then 1
    (98, 8, "010001100"),           # CODE_LENGTH_ENCBASE: 98 < 256 fits one 9-bit chunk
    (300, 8, "00110100" "1" "100000000"),
])
def test_var_length_unsigned_by_hand(value, base, stream):
    w = BitWriter()
    w.var_unsigned(value, base)
    assert bits_of(w.to_bytes(), w.count) == stream
    assert size_of_var_unsigned(value, base) == len(stream)
    assert BitReader(w.to_bytes()).var_unsigned(base) == value


@pytest.mark.parametrize("value, base, stream", [
    (0, 6, "0000000"),
    (-1, 6, "1111110"),             # top value bit set, value == -1 after the shift: one chunk
    (31, 6, "1111100"),
    (32, 6, "0000011" "0000000"),   # 32 needs a second chunk: its top bit would read as the sign
    (-33, 6, "1111101" "1111110"),   # 31 with "more", then -1
])
def test_var_length_signed_by_hand(value, base, stream):
    w = BitWriter()
    w.var_signed(value, base)
    assert bits_of(w.to_bytes(), w.count) == stream
    assert BitReader(w.to_bytes()).var_signed(base) == value


@given(st.integers(0, 2**40), st.integers(1, 8))
def test_var_unsigned_round_trip(value, base):
    w = BitWriter()
    w.var_unsigned(value, base)
    assert w.count == size_of_var_unsigned(value, base)
    assert BitReader(w.to_bytes()).var_unsigned(base) == value


@given(st.integers(-2**40, 2**40), st.integers(1, 8))
def test_var_signed_round_trip(value, base):
    w = BitWriter()
    w.var_signed(value, base)
    assert BitReader(w.to_bytes()).var_signed(base) == value


@pytest.mark.parametrize("x, expected", [(1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (64, 6), (65, 7)])
def test_ceil_of_log2_as_gcinfotypes(x, expected):
    assert ceil_of_log2(x) == expected


def test_reader_refuses_past_the_end_and_overlong_numbers():
    with pytest.raises(GcInfoError, match="truncated"):
        BitReader(b"\xff").bits(9)
    with pytest.raises(GcInfoError, match="64 bits"):
        BitReader(b"\xff" * 16).var_unsigned(8)   # every chunk says "more"


# ============================================================== what llilc-eh emits

def test_for_method_without_funclets_is_the_slim_header():
    data = for_method(0x41, None, None, False)
    # slim 0, no stack base 0, ReturnKind 00, code length 0x41 (9 bits), 0 safe points (3 bits),
    # slot table: no registers 0, no stack slots 0
    assert bits_of(data, 18) == "0" "0" "00" "100000100" "000" "0" "0"
    assert len(data) == 3   # the 3-byte header ALTJIT.md saw accepted
    assert decode(data) == GcInfo(code_length=0x41)


def test_for_method_with_rbp_frame_sets_the_slim_stack_base_bit():
    data = for_method(0x41, None, 5, False)
    assert bits_of(data, 2) == "01"
    assert decode(data).stack_base_register == 5


def test_for_method_with_funclets_bit_by_bit():
    data = for_method(0x1234, 16, 5, True)
    stream = bits_of(data)
    flags = GcInfoHeaderFlags.HAS_PSP_SYM | GcInfoHeaderFlags.HAS_STACK_BASE_REGISTER | \
        GcInfoHeaderFlags.WANTS_REPORT_ONLY_LEAF
    expected = ("1"                                   # fat header
                + f"{int(flags):010b}"[::-1]          # GcInfoHeaderFlags, 10 bits
                + "0000"                              # ReturnKind scalar, 4 bits
                + "00101100" "1" "01001000" "0"       # code length 0x1234: 0x34 + more, then 0x12
                + "0100000"                           # PSPSym 16 >> 3 = 2, signed base 6
                + "0000"                              # stack base register RBP ^ 5 = 0, base 3
                + "0000"                              # stack area 0, base 3
                + "000"                               # no safe points
                + "00"                                # no interruptible ranges, base 1
                + "0" "0")                            # no registers, no stack slots
    assert stream[:len(expected)] == expected
    assert set(stream[len(expected):]) <= {"0"}       # padding only
    info = decode(data)
    assert info == method_info(0x1234, 16, 5, True)
    assert (info.code_length, info.psp_sym_offset, info.stack_base_register, info.wants_report_only_leaf,
            info.slots, info.safe_points, info.generics_inst_context) == (0x1234, 16, 5, True, (), (), None)


@pytest.mark.parametrize("code_length, psp, frame, funclets", [
    (1, None, None, False), (0x62, 0, 5, True), (0x10000, 40, 5, True), (300, -8, None, True),
    (7, None, 3, False),
])
def test_for_method_decodes_to_what_was_asked(code_length, psp, frame, funclets):
    info, size = decode_sized(for_method(code_length, psp, frame, funclets))
    assert info.code_length == code_length
    assert info.psp_sym_offset == (psp if funclets else None)
    assert info.stack_base_register == frame
    assert info.wants_report_only_leaf == funclets
    assert not info.slots and not info.safe_points and not info.interruptible_ranges
    assert size == len(for_method(code_length, psp, frame, funclets))


def test_for_method_return_kind():
    assert decode(for_method(10, None, None, False, return_kind=ReturnKind.OBJECT)).return_kind == ReturnKind.OBJECT
    assert decode(for_method(10, 8, 5, True, return_kind=ReturnKind.BYREF)).return_kind == ReturnKind.BYREF


@pytest.mark.parametrize("args, match", [
    ((0, None, None, False), "code length"),
    ((10, None, 5, True), "PSPSym"),
    ((10, 12, 5, True), "psp_sym_offset 12"),      # not a multiple of 8: normalisation would lose it
])
def test_for_method_refuses_what_it_cannot_encode(args, match):
    with pytest.raises(GcInfoError, match=match):
        for_method(*args)


@pytest.mark.parametrize("kwargs, match", [
    ({"return_kind": ReturnKind.UNSET}, "return kind"),          # the JIT's "not decided"
    ({"return_kind": 7}, "return kind"),                          # no such ReturnKind
    ({"stack_base_register": 4}, "stack base register"),          # RSP
    ({"stack_base_register": 16}, "stack base register"),         # no such register
    ({"stack_base_register": -1}, "stack base register"),
])
def test_encoder_refuses_an_unset_return_kind_and_a_bogus_stack_base(kwargs, match):
    with pytest.raises(GcInfoError, match=match):
        encode(GcInfo(code_length=10, **kwargs))
    # the control: the same value with a real return kind and RBP encodes and decodes back
    good = GcInfo(code_length=10, return_kind=ReturnKind.OBJECT, stack_base_register=5)
    assert decode(encode(good)) == good


def test_for_method_refuses_an_unset_return_kind():
    with pytest.raises(GcInfoError, match="return kind"):
        for_method(10, 8, 5, True, return_kind=ReturnKind.UNSET)


def test_header_fields_are_declared_once_in_stream_order():
    names = [f.name for f in HEADER_FIELDS]
    assert names == ["code_length", "prolog_size", "epilog_size", "security_object_offset", "gs_cookie_offset",
                     "psp_sym_offset", "generics_inst_context_offset", "stack_base_register",
                     "edit_and_continue_preserved_area", "reverse_pinvoke_frame_slot", "size_of_stack_area",
                     "num_safe_points", "num_interruptible_ranges"]


def test_printable():
    text = str(decode(for_method(0x62, 0, 5, True)))
    assert "code length 98" in text and "PSPSym" in text and "rbp" in text and "WANTS_REPORT_ONLY_LEAF" in text


# ============================================================== generated values

OFFSET8 = st.integers(-512, 4096).map(lambda v: v * 8)


@st.composite
def slot_group(draw, *, register: bool, untracked: bool = False):
    """Flagged slots first (any numbers), then unflagged ones ascending: the order the
    encoder's sort gives and the delta form requires."""
    flagged = draw(st.lists(st.sampled_from([GcSlotFlags.INTERIOR, GcSlotFlags.PINNED,
                                             GcSlotFlags.INTERIOR | GcSlotFlags.PINNED]), max_size=3))
    plain = draw(st.integers(0, 5))
    if register:
        numbers = draw(st.lists(st.integers(0, 15), min_size=len(flagged), max_size=len(flagged)))
        plain_numbers = sorted(draw(st.sets(st.integers(0, 15), min_size=plain, max_size=plain)))
        return [GcSlot(register=r, flags=f) for r, f in zip(numbers, flagged)] + \
            [GcSlot(register=r) for r in plain_numbers]
    offsets = draw(st.lists(OFFSET8, min_size=len(flagged) + plain, max_size=len(flagged) + plain))
    bases = draw(st.lists(st.sampled_from(list(GcStackSlotBase)), min_size=len(offsets), max_size=len(offsets)))
    tail = sorted(offsets[len(flagged):])
    out = [GcSlot(offset=o, base=b, flags=f, untracked=untracked) for o, b, f in zip(offsets, bases, flagged)]
    return out + [GcSlot(offset=o, base=b, untracked=untracked) for o, b in zip(tail, bases[len(flagged):])]


@st.composite
def gc_infos(draw):
    code_length = draw(st.integers(1, 5000))
    gs = draw(st.booleans())
    security = draw(st.booleans())
    context = draw(st.none() | st.sampled_from(list(GenericsInstContextKind)))
    needs_prolog = gs or security or context is not None
    safe_points = tuple(sorted(draw(st.sets(st.integers(0, code_length - 1), max_size=12))))
    cuts = sorted(draw(st.sets(st.integers(0, code_length), max_size=8)))
    ranges = tuple((a, b) for a, b in zip(cuts[::2], cuts[1::2]) if a < b)
    slots = tuple(draw(slot_group(register=True)) + draw(slot_group(register=False)) +
                  draw(slot_group(register=False, untracked=True)))
    tracked = sum(not s.untracked for s in slots)
    live_sets, index = (), ()
    if tracked and safe_points:
        pool = draw(st.lists(st.sets(st.integers(0, tracked - 1)).map(lambda s: tuple(sorted(s))),
                             min_size=1, max_size=4, unique=True))
        chosen = draw(st.lists(st.integers(0, len(pool) - 1), min_size=len(safe_points),
                               max_size=len(safe_points)))
        order: dict[int, int] = {}
        index = tuple(order.setdefault(c, len(order)) for c in chosen)   # first-appearance order
        live_sets = tuple(pool[c] for c in order)
    chunks = ()
    if tracked and ranges:
        total = sum(b - a for a, b in ranges)
        chunks = tuple(draw(st.none() | chunk(tracked)) for _ in range((total + 63) // 64))
        if all(c is None for c in chunks):
            chunks = ()   # the canonical value: no chunk pointers at all
    return GcInfo(
        code_length=code_length,
        return_kind=draw(st.sampled_from([k for k in ReturnKind if k is not ReturnKind.UNSET])),   # refused
        is_vararg=draw(st.booleans()),
        prolog_size=draw(st.integers(1, 200)) if needs_prolog else None,
        epilog_size=draw(st.integers(0, 100)) if gs else None,
        security_object_offset=draw(OFFSET8) if security else None,
        gs_cookie_offset=draw(OFFSET8) if gs else None,
        psp_sym_offset=draw(st.none() | OFFSET8),
        generics_inst_context=context,
        generics_inst_context_offset=draw(OFFSET8) if context is not None else None,
        stack_base_register=draw(st.none() | st.integers(0, 15).filter(lambda r: r != 4)),   # RSP refused
        wants_report_only_leaf=draw(st.booleans()),
        edit_and_continue_preserved_area=draw(st.none() | st.integers(0, 64)),
        reverse_pinvoke_frame_slot=draw(st.none() | st.integers(-100, 100)),
        size_of_stack_area=draw(st.integers(0, 64)) * 8,
        safe_points=safe_points, interruptible_ranges=ranges, slots=slots,
        live_sets=live_sets, safe_point_live_set=index, chunks=chunks)


@st.composite
def chunk(draw, tracked: int):
    could = tuple(sorted(draw(st.sets(st.integers(0, tracked - 1), min_size=1))))
    final = tuple(s for s in could if draw(st.booleans()))
    transitions = tuple((s, o) for s in could for o in draw(st.lists(st.integers(1, 63), max_size=3)))
    return Chunk(could, final, transitions)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gc_infos())
def test_decode_encode_round_trip(info):
    data = encode(info)
    decoded, size = decode_sized(data)
    assert decoded == info
    assert size <= len(data)
    assert encode(decoded) == data


def test_slim_is_chosen_exactly_when_the_encoder_would():
    assert GcInfo(code_length=5, stack_base_register=5).slim
    assert not GcInfo(code_length=5, stack_base_register=3).slim          # only RBP fits the slim header
    assert not GcInfo(code_length=5, wants_report_only_leaf=True).slim
    assert not GcInfo(code_length=5, return_kind=ReturnKind.OBJ_OBJ).slim  # struct returns need 4 bits
    assert GcInfo(code_length=5, return_kind=ReturnKind.OBJECT).slim


def test_live_sets_use_the_indirection_when_it_is_smaller():
    slots = tuple(GcSlot(offset=8 * i, base=GcStackSlotBase.SP_REL) for i in range(20))
    many = GcInfo(code_length=1000, safe_points=tuple(range(0, 600, 10)), slots=slots,
                  live_sets=((1, 2),), safe_point_live_set=(0,) * 60)
    few = GcInfo(code_length=1000, safe_points=(10,), slots=slots, live_sets=((1, 2),), safe_point_live_set=(0,))
    # 60 sites x 20 slots as plain vectors cost 1200 bits; one shared set with 1-bit pointers far less
    assert len(encode(many)) < 60 * 20 // 8
    assert decode(encode(many)) == many and decode(encode(few)) == few


# ============================================================== damaged data

REAL_SHAPES = [
    for_method(0x62, 0, 5, True),
    for_method(0x41, None, None, False),
    encode(GcInfo(code_length=300, safe_points=(5, 40, 99), stack_base_register=5,
                  slots=(GcSlot(register=3), GcSlot(register=6), GcSlot(offset=16, base=GcStackSlotBase.SP_REL),
                         GcSlot(offset=-8, base=GcStackSlotBase.FRAMEREG_REL, untracked=True)),
                  live_sets=((0, 2), ()), safe_point_live_set=(0, 1, 0))),
    encode(GcInfo(code_length=200, interruptible_ranges=((4, 150),), size_of_stack_area=32,
                  slots=(GcSlot(register=0), GcSlot(offset=8, base=GcStackSlotBase.SP_REL)),
                  chunks=(Chunk((0,), (0,), ((0, 5),)), None, Chunk((0, 1), (), ((1, 3), (1, 9)))))),
]


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(REAL_SHAPES), st.data())
def test_damaged_gc_info_is_a_gcinfo_error(data, draw):
    damaged = bytearray(data)
    for _ in range(draw.draw(st.integers(1, 4))):
        i = draw.draw(st.integers(0, len(damaged) - 1))
        damaged[i] ^= 1 << draw.draw(st.integers(0, 7))
    damaged = bytes(damaged[:draw.draw(st.integers(0, len(damaged)))])
    try:
        info = decode(damaged)
    except LlilcEhError as e:
        assert isinstance(e, GcInfoError) and e.stage == "gcinfo"
        return
    assert isinstance(info, GcInfo)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_decode_or_raise_gcinfo_error(data):
    try:
        decode(data)
    except GcInfoError:
        pass


def test_huge_counts_are_refused_before_looping():
    # fat header whose safe-point count says 2**40: refused from the data's size
    w = BitWriter()
    w.bits(1, 1)
    w.bits(0, 10)
    w.bits(0, 4)
    w.var_unsigned(100, 8)       # code length
    w.var_unsigned(0, 3)         # stack area
    w.var_unsigned(2**40, 2)     # safe points
    w.var_unsigned(0, 1)
    with pytest.raises(GcInfoError, match="safe points"):
        decode(w.to_bytes())


JUNK_INT = st.integers(-70, 70) | st.integers(-2**40, 2**40)
JUNK_SLOT = st.builds(GcSlot, register=st.none() | JUNK_INT, offset=st.none() | JUNK_INT,
                      base=st.none() | st.sampled_from(list(GcStackSlotBase)),
                      flags=st.sampled_from([GcSlotFlags(v) for v in range(8)]), untracked=st.booleans())
JUNK_CHUNK = st.builds(Chunk, st.lists(JUNK_INT, max_size=3).map(tuple), st.lists(JUNK_INT, max_size=3).map(tuple),
                       st.lists(st.tuples(JUNK_INT, JUNK_INT), max_size=3).map(tuple))


@settings(max_examples=400, deadline=None)
@given(st.builds(
    GcInfo, code_length=st.integers(1, 300) | JUNK_INT, return_kind=st.integers(0, 20), prolog_size=st.none() | JUNK_INT,
    epilog_size=st.none() | JUNK_INT, gs_cookie_offset=st.none() | JUNK_INT, psp_sym_offset=st.none() | JUNK_INT,
    stack_base_register=st.none() | JUNK_INT, size_of_stack_area=JUNK_INT,
    edit_and_continue_preserved_area=st.none() | JUNK_INT,
    security_object_offset=st.none() | JUNK_INT, is_vararg=st.booleans(), wants_report_only_leaf=st.booleans(),
    generics_inst_context=st.none() | st.sampled_from(list(GenericsInstContextKind)),
    generics_inst_context_offset=st.none() | JUNK_INT, reverse_pinvoke_frame_slot=st.none() | JUNK_INT,
    safe_points=st.lists(JUNK_INT, max_size=4).map(tuple),
    interruptible_ranges=st.lists(st.tuples(JUNK_INT, JUNK_INT), max_size=3).map(tuple),
    slots=st.lists(JUNK_SLOT, max_size=5).map(tuple),
    live_sets=st.lists(st.lists(JUNK_INT, max_size=3).map(tuple), max_size=3).map(tuple),
    safe_point_live_set=st.lists(JUNK_INT, max_size=4).map(tuple),
    chunks=st.lists(st.none() | JUNK_CHUNK, max_size=3).map(tuple)))
def test_encoding_a_bad_value_is_a_gcinfo_error_or_decodes_back(info):
    """encode either refuses (GcInfoError) or writes something that decodes to the same value."""
    try:
        data = encode(info)
    except GcInfoError:
        return
    assert decode(data) == info


@pytest.mark.parametrize("info", [
    GcInfo(code_length=5, prolog_size=3),                  # no GS cookie, security object or context
    GcInfo(code_length=5, epilog_size=3),                  # no GS cookie
    GcInfo(code_length=5, generics_inst_context_offset=8),
    GcInfo(code_length=5, generics_inst_context=GenericsInstContextKind.MT),
    GcInfo(code_length=5, gs_cookie_offset=8),             # GS cookie without its prolog/epilog sizes
    GcInfo(code_length=5, safe_points=(3, 3)),
    GcInfo(code_length=5, interruptible_ranges=((0, 6),)),
    GcInfo(code_length=5, slots=(GcSlot(offset=8, base=GcStackSlotBase.SP_REL), GcSlot(register=1))),
    GcInfo(code_length=5, safe_points=(1,), slots=(GcSlot(register=1),), live_sets=((1,),),
           safe_point_live_set=(0,)),                      # live slot 1 of 1 tracked slot
])
def test_encoder_refuses_values_it_cannot_write_faithfully(info):
    with pytest.raises(GcInfoError):
        encode(info)
