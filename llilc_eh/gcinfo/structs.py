"""The GCINFO v2 bit layout for AMD64, declared once: constants, encodings, header fields.

Source: dotnet/coreclr v3.1.23 — `src/inc/gcinfotypes.h` (the AMD64 *_ENCBASE numbers and the
NORMALIZE_* macros), `src/inc/gcinfodecoder.h` (GcInfoHeaderFlags, BitStreamReader),
`src/gcinfo/gcinfoencoder.cpp` (GcInfoEncoder::Build, BitStreamWriter) and
`src/vm/gcinfodecoder.cpp` (the GcInfoDecoder constructor, EnumerateLiveSlots,
GcSlotDecoder::DecodeSlotTable). Names follow those files.

GC info is a bit stream, not a byte layout, so construct does not fit it: bits are taken
least-significant first from consecutive bytes (the runtime reads little-endian size_t
words), and most numbers are variable-length "VLQ-style": chunks of `base` value bits plus
one extension bit above them, lowest chunk first; signed numbers are sign-extended from the
top value bit of the last chunk. Each field names its encoding here; `codec.py` walks these
declarations in both directions, so the reader and the writer cannot disagree.

    header     slim: 0, HAS_STACK_BASE_REGISTER:1, ReturnKind:2
               fat:  1, GcInfoHeaderFlags:10, ReturnKind:4
    then       HEADER_FIELDS below, each present when its condition holds
    then       safe points      NumSafePoints x CeilOfLog2(CodeLength) bits (call return - 1)
               ranges           NumInterruptibleRanges x (start delta, stop delta - 1)
               slot table       [1, NumRegisters] [1, NumStackSlots, NumUntracked] | 0 ...,
                                registers, tracked stack slots, untracked stack slots
               live states      call sites: indirection flag, [pointer size, pointers] or
                                NumSafePoints x NumTracked bits; fully interruptible: chunk
                                pointer size, one pointer per 64-byte chunk
    byte-aligned second part   the live sets and the chunk encodings the pointers point at
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

GCINFO_VERSION = 2   # gcinfo.h; ReadyToRun images from major version 2 on carry this version

# ---------------------------------------------------------------- AMD64 (gcinfotypes.h)

NUM_NORM_CODE_OFFSETS_PER_CHUNK = 64
NUM_NORM_CODE_OFFSETS_PER_CHUNK_LOG2 = 6
STACK_SLOT_SHIFT = 3                  # NORMALIZE_STACK_SLOT(x) ((x)>>3): slots are 8-byte aligned
STACK_AREA_SHIFT = 3                  # NORMALIZE_SIZE_OF_STACK_AREA(x) ((x)>>3)
STACK_BASE_REGISTER_XOR = 5           # NORMALIZE_STACK_BASE_REGISTER(x) ((x)^5): RBP encodes as 0
RBP = 5

PSP_SYM_STACK_SLOT_ENCBASE = 6
GENERICS_INST_CONTEXT_STACK_SLOT_ENCBASE = 6
SECURITY_OBJECT_STACK_SLOT_ENCBASE = 6
GS_COOKIE_STACK_SLOT_ENCBASE = 6
CODE_LENGTH_ENCBASE = 8
SIZE_OF_RETURN_KIND_IN_SLIM_HEADER = 2
SIZE_OF_RETURN_KIND_IN_FAT_HEADER = 4
STACK_BASE_REGISTER_ENCBASE = 3
SIZE_OF_STACK_AREA_ENCBASE = 3
SIZE_OF_EDIT_AND_CONTINUE_PRESERVED_AREA_ENCBASE = 4
REVERSE_PINVOKE_FRAME_ENCBASE = 6
NUM_REGISTERS_ENCBASE = 2
NUM_STACK_SLOTS_ENCBASE = 2
NUM_UNTRACKED_SLOTS_ENCBASE = 1
NORM_PROLOG_SIZE_ENCBASE = 5
NORM_EPILOG_SIZE_ENCBASE = 3
NORM_CODE_OFFSET_DELTA_ENCBASE = 3
INTERRUPTIBLE_RANGE_DELTA1_ENCBASE = 6
INTERRUPTIBLE_RANGE_DELTA2_ENCBASE = 6
REGISTER_ENCBASE = 3
REGISTER_DELTA_ENCBASE = 2
STACK_SLOT_ENCBASE = 6
STACK_SLOT_DELTA_ENCBASE = 4
NUM_SAFE_POINTS_ENCBASE = 2
NUM_INTERRUPTIBLE_RANGES_ENCBASE = 1
NUM_EH_CLAUSES_ENCBASE = 2
POINTER_SIZE_ENCBASE = 3
LIVESTATE_RLE_RUN_ENCBASE = 2
LIVESTATE_RLE_SKIP_ENCBASE = 4

GC_INFO_FLAGS_BIT_SIZE = 10           # fat header flags in version 2 (9 in version 1)
SLOT_FLAGS_BITS = 2                   # a slot's GcSlotFlags as written: INTERIOR | PINNED
STACK_SLOT_BASE_BITS = 2              # GcStackSlotBase as written


class GcInfoHeaderFlags(enum.IntFlag):
    """The fat header's flag word (gcinfodecoder.h), AMD64 meanings."""

    IS_VARARG = 0x1
    HAS_SECURITY_OBJECT = 0x2
    HAS_GS_COOKIE = 0x4
    HAS_PSP_SYM = 0x8
    HAS_GENERICS_INST_CONTEXT_MT = 0x10      # the two bits 0x30 are one field (GenericsInstContextKind)
    HAS_GENERICS_INST_CONTEXT_MD = 0x20
    HAS_STACK_BASE_REGISTER = 0x40
    WANTS_REPORT_ONLY_LEAF = 0x80            # AMD64; HAS_TAILCALLS on ARM
    HAS_EDIT_AND_CONTINUE_PRESERVED_SLOTS = 0x100
    REVERSE_PINVOKE_FRAME = 0x200


GENERICS_INST_CONTEXT_MASK = 0x30
GENERICS_INST_CONTEXT_SHIFT = 4


class GenericsInstContextKind(enum.IntEnum):
    """Where the generic context comes from (GC_INFO_HAS_GENERICS_INST_CONTEXT_*)."""

    MT = 1     # a MethodTable (static method of a generic class)
    MD = 2     # an instantiating MethodDesc
    THIS = 3   # the `this` object


class ReturnKind(enum.IntEnum):
    """gcinfotypes.h ReturnKind (AMD64): two bits per return register in the fat header."""

    SCALAR = 0
    OBJECT = 1
    BYREF = 2
    UNSET = 3
    SCALAR_OBJ = 0x4
    SCALAR_BYREF = 0x8
    OBJ_OBJ = 0x5
    OBJ_BYREF = 0x9
    BYREF_OBJ = 0x6
    BYREF_BYREF = 0xA

    @property
    def is_struct(self) -> bool:
        # IsStructReturnKind: encodings needing more than two bits
        return self.value > 3


class GcSlotFlags(enum.IntFlag):
    """gcinfotypes.h GcSlotFlags; only INTERIOR and PINNED are written per slot, UNTRACKED is
    which part of the table a slot sits in."""

    BASE = 0x0
    INTERIOR = 0x1
    PINNED = 0x2
    UNTRACKED = 0x4


class GcStackSlotBase(enum.IntEnum):
    """What a stack slot's offset is relative to."""

    CALLER_SP_REL = 0
    SP_REL = 1
    FRAMEREG_REL = 2


STACK_SLOT_BASE_NAMES = {GcStackSlotBase.CALLER_SP_REL: "caller.sp", GcStackSlotBase.SP_REL: "sp",
                         GcStackSlotBase.FRAMEREG_REL: "frame"}


# ---------------------------------------------------------------- encodings

@dataclass(frozen=True)
class Bits:
    """`count` plain bits."""

    count: int


@dataclass(frozen=True)
class VarUnsigned:
    """BitStreamWriter::EncodeVarLengthUnsigned: chunks of `base` bits, extension bit above."""

    base: int


@dataclass(frozen=True)
class VarSigned:
    """BitStreamWriter::EncodeVarLengthSigned: as VarUnsigned, sign-extended from the last chunk."""

    base: int


Encoding = Bits | VarUnsigned | VarSigned


# ---------------------------------------------------------------- header fields

@dataclass(frozen=True)
class HeaderField:
    """One header number after the flags and ReturnKind, in stream order.

    `name` is the GcInfo attribute; `present(flags, slim)` is the encoder's and decoder's
    shared condition; `normalize` maps the attribute to the number written and `denormalize`
    back (the *_NORMALIZE macros, and the -1 bias of the prolog size)."""

    name: str
    encoding: Encoding
    present: Callable[[GcInfoHeaderFlags, bool], bool]
    normalize: Callable[[int], int] = lambda v: v
    denormalize: Callable[[int], int] = lambda v: v
    # Values the normalisation cannot represent (a stack offset not a multiple of 8, ...).
    exact: Callable[[int], bool] = lambda v: True


def _has(flag: GcInfoHeaderFlags) -> Callable[[GcInfoHeaderFlags, bool], bool]:
    return lambda flags, slim: bool(flags & flag)


def _has_generics(flags: GcInfoHeaderFlags, slim: bool) -> bool:
    return bool(flags & GENERICS_INST_CONTEXT_MASK)


def _needs_prolog_size(flags: GcInfoHeaderFlags, slim: bool) -> bool:
    return bool(flags & (GcInfoHeaderFlags.HAS_GS_COOKIE | GcInfoHeaderFlags.HAS_SECURITY_OBJECT)) or \
        _has_generics(flags, slim)


def _stack_slot(v: int) -> int:
    return v >> STACK_SLOT_SHIFT


def _stack_slot_back(v: int) -> int:
    return v << STACK_SLOT_SHIFT


def _aligned8(v: int) -> bool:
    return v % 8 == 0


def _always(flags: GcInfoHeaderFlags, slim: bool) -> bool:
    return True


def _fat(flags: GcInfoHeaderFlags, slim: bool) -> bool:
    return not slim


HEADER_FIELDS: tuple[HeaderField, ...] = (
    HeaderField("code_length", VarUnsigned(CODE_LENGTH_ENCBASE), _always),
    # normPrologSize - 1: the first offset at which the GS cookie / generic context is valid
    HeaderField("prolog_size", VarUnsigned(NORM_PROLOG_SIZE_ENCBASE), _needs_prolog_size,
                lambda v: v - 1, lambda v: v + 1, lambda v: v >= 1),
    HeaderField("epilog_size", VarUnsigned(NORM_EPILOG_SIZE_ENCBASE), _has(GcInfoHeaderFlags.HAS_GS_COOKIE)),
    HeaderField("security_object_offset", VarSigned(SECURITY_OBJECT_STACK_SLOT_ENCBASE),
                _has(GcInfoHeaderFlags.HAS_SECURITY_OBJECT), _stack_slot, _stack_slot_back, _aligned8),
    HeaderField("gs_cookie_offset", VarSigned(GS_COOKIE_STACK_SLOT_ENCBASE),
                _has(GcInfoHeaderFlags.HAS_GS_COOKIE), _stack_slot, _stack_slot_back, _aligned8),
    # Initial-SP relative on AMD64 (caller-SP relative on IA64)
    HeaderField("psp_sym_offset", VarSigned(PSP_SYM_STACK_SLOT_ENCBASE),
                _has(GcInfoHeaderFlags.HAS_PSP_SYM), _stack_slot, _stack_slot_back, _aligned8),
    HeaderField("generics_inst_context_offset", VarSigned(GENERICS_INST_CONTEXT_STACK_SLOT_ENCBASE),
                _has_generics, _stack_slot, _stack_slot_back, _aligned8),
    # the slim header implies RBP and writes no number
    HeaderField("stack_base_register", VarUnsigned(STACK_BASE_REGISTER_ENCBASE),
                lambda flags, slim: bool(flags & GcInfoHeaderFlags.HAS_STACK_BASE_REGISTER) and not slim,
                lambda v: v ^ STACK_BASE_REGISTER_XOR, lambda v: v ^ STACK_BASE_REGISTER_XOR),
    HeaderField("edit_and_continue_preserved_area", VarUnsigned(SIZE_OF_EDIT_AND_CONTINUE_PRESERVED_AREA_ENCBASE),
                _has(GcInfoHeaderFlags.HAS_EDIT_AND_CONTINUE_PRESERVED_SLOTS)),
    # The 3.1 encoder writes NORMALIZE_STACK_SLOT(offset) but the decoder reads the number back
    # without DENORMALIZE_STACK_SLOT: we keep the number as written (`reverse_pinvoke_frame_slot`).
    HeaderField("reverse_pinvoke_frame_slot", VarSigned(REVERSE_PINVOKE_FRAME_ENCBASE),
                _has(GcInfoHeaderFlags.REVERSE_PINVOKE_FRAME)),
    HeaderField("size_of_stack_area", VarUnsigned(SIZE_OF_STACK_AREA_ENCBASE), _fat,
                lambda v: v >> STACK_AREA_SHIFT, lambda v: v << STACK_AREA_SHIFT, _aligned8),
    HeaderField("num_safe_points", VarUnsigned(NUM_SAFE_POINTS_ENCBASE), _always),
    HeaderField("num_interruptible_ranges", VarUnsigned(NUM_INTERRUPTIBLE_RANGES_ENCBASE), _fat),
)

# Interruptible ranges: start delta from the previous range's stop, then length - 1.
RANGE_START_DELTA = VarUnsigned(INTERRUPTIBLE_RANGE_DELTA1_ENCBASE)
RANGE_LENGTH_MINUS_ONE = VarUnsigned(INTERRUPTIBLE_RANGE_DELTA2_ENCBASE)

# Slot table (GcSlotDecoder::DecodeSlotTable).
NUM_REGISTERS = VarUnsigned(NUM_REGISTERS_ENCBASE)
NUM_STACK_SLOTS = VarUnsigned(NUM_STACK_SLOTS_ENCBASE)
NUM_UNTRACKED_SLOTS = VarUnsigned(NUM_UNTRACKED_SLOTS_ENCBASE)
REGISTER = VarUnsigned(REGISTER_ENCBASE)
REGISTER_DELTA = VarUnsigned(REGISTER_DELTA_ENCBASE)          # minus one
SLOT_FLAGS = Bits(SLOT_FLAGS_BITS)
STACK_SLOT_BASE = Bits(STACK_SLOT_BASE_BITS)
STACK_SLOT = VarSigned(STACK_SLOT_ENCBASE)                     # normalised offset
STACK_SLOT_DELTA = VarUnsigned(STACK_SLOT_DELTA_ENCBASE)       # normalised, after a slot with no flags

# Live states.
POINTER_SIZE = VarUnsigned(POINTER_SIZE_ENCBASE)
RLE_SKIP = VarUnsigned(LIVESTATE_RLE_SKIP_ENCBASE)
RLE_RUN = VarUnsigned(LIVESTATE_RLE_RUN_ENCBASE)
TRANSITION_OFFSET = Bits(NUM_NORM_CODE_OFFSETS_PER_CHUNK_LOG2)
