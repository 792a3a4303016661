"""UNWIND_INFO as values: decode, encode (byte-identical), print, and the CLR's form.

An `UnwindInfo` is one x64 UNWIND_INFO (Microsoft "x64 exception handling"): the header,
the unwind operations of the prolog in the order they are stored (last prolog instruction
first), the padding slot of an odd code array, and what follows the array: the handler RVA
plus the bytes of handler data the caller says belong to it, or the chained RUNTIME_FUNCTION.
Operations keep their raw encoding (operation, OpInfo, extra-slot value as stored), so every
UNWIND_INFO we accept re-encodes to the same bytes; their meaning (register, allocation
size, save offset) is read through properties. Version-2 EPILOG codes are kept raw.

Decisions, where the format leaves room:
- Operation 7 (UWOP_SPARE_CODE, formerly SAVE_XMM_FAR) and 12-15 are rejected, as is an
  EPILOG code in a version-1 UNWIND_INFO, an ALLOC_LARGE with OpInfo > 1 and an operation
  whose extra slots run past CountOfCodes.
- Operation 11, UWOP_SET_FPREG_LARGE, is CoreCLR's Unix-only extension (win64unwind.h): three
  slots, FrameOffset 15 in the header, the real offset in the extra slots scaled by 16. Our
  ReadyToRun corpus is Linux-compiled, so we read it.
- A handler flag together with CHAININFO is rejected: the handler RVA and the chained entry
  share the same place after the code array.
- Flag bits above CHAININFO are rejected (undefined).
- The padding slot is always part of the layout when CountOfCodes is odd, even with nothing
  after the array (LLVM always writes it; so does the CLR's runtime when it appends its
  personality RVA). Its content is kept, whatever it is.
- LLVM pads a handler-less UNWIND_INFO with no codes to 8 bytes with a zero dword; that dword
  is not part of the UNWIND_INFO (`size` is 4), it is slack before the next one.
"""

from __future__ import annotations

import enum
import io
from dataclasses import dataclass, replace
from functools import lru_cache

from ..assembly.structs import compiled_parser
from ..errors import LlilcEhError
from . import structs


class UnwindError(LlilcEhError):
    """Unwind data cannot be decoded, or an UnwindInfo value cannot be encoded."""

    stage = "unwind"

    def offset_text(self) -> str:
        # Our offsets are byte offsets into the buffer given to the decoder, not IL offsets.
        return f"unwind data +0x{self.offset:x}"


class UnwindFlags(enum.IntFlag):
    """UNW_FLAG_* of the UNWIND_INFO header."""

    NHANDLER = 0
    EHANDLER = 0x1   # a handler for the first (dispatch) pass
    UHANDLER = 0x2   # a handler for the second (unwind) pass ("termination handler")
    CHAININFO = 0x4  # a chained RUNTIME_FUNCTION follows the code array

    def __str__(self) -> str:
        return "|".join(f.name for f in (UnwindFlags.EHANDLER, UnwindFlags.UHANDLER,
                                         UnwindFlags.CHAININFO) if f in self) or "NHANDLER"


HANDLER_FLAGS = UnwindFlags.EHANDLER | UnwindFlags.UHANDLER
_KNOWN_FLAGS = int(HANDLER_FLAGS | UnwindFlags.CHAININFO)  # a plain int: ~ of an IntFlag stays inside it
_HANDLER_BITS, _CHAININFO_BIT = int(HANDLER_FLAGS), int(UnwindFlags.CHAININFO)  # plain ints: IntFlag & is slow


class UnwindOpKind(enum.IntEnum):
    """UWOP_* operation numbers (the UnwindOp nibble)."""

    PUSH_NONVOL = 0       # push of a nonvolatile GPR; OpInfo = register
    ALLOC_LARGE = 1       # OpInfo 0: size/8 in 1 extra slot; OpInfo 1: size in 2 extra slots
    ALLOC_SMALL = 2       # size = OpInfo * 8 + 8 (8..128)
    SET_FPREG = 3         # frame register = RSP + FrameOffset * 16 (both from the header)
    SAVE_NONVOL = 4       # mov [rsp+off], reg; OpInfo = register; off/8 in 1 extra slot
    SAVE_NONVOL_FAR = 5   # the same, off unscaled in 2 extra slots
    EPILOG = 6            # version 2 only: epilog descriptor, kept raw
    SAVE_XMM128 = 8       # movaps [rsp+off], xmmN; OpInfo = N; off/16 in 1 extra slot
    SAVE_XMM128_FAR = 9   # the same, off unscaled in 2 extra slots
    PUSH_MACHFRAME = 10   # hardware frame; OpInfo 1: with an error code
    SET_FPREG_LARGE = 11  # CoreCLR Unix extension: offset/16 in 2 extra slots


# Extra slots each operation takes beyond its own (ALLOC_LARGE depends on OpInfo).
_EXTRA_SLOTS = {
    UnwindOpKind.PUSH_NONVOL: 0, UnwindOpKind.ALLOC_SMALL: 0, UnwindOpKind.SET_FPREG: 0,
    UnwindOpKind.EPILOG: 0, UnwindOpKind.PUSH_MACHFRAME: 0,
    UnwindOpKind.SAVE_NONVOL: 1, UnwindOpKind.SAVE_XMM128: 1,
    UnwindOpKind.SAVE_NONVOL_FAR: 2, UnwindOpKind.SAVE_XMM128_FAR: 2,
    UnwindOpKind.SET_FPREG_LARGE: 2,
}

# Scale of the stored operand of the operations that carry an offset or a size.
_OPERAND_SCALE = {
    UnwindOpKind.SAVE_NONVOL: 8, UnwindOpKind.SAVE_NONVOL_FAR: 1,
    UnwindOpKind.SAVE_XMM128: 16, UnwindOpKind.SAVE_XMM128_FAR: 1,
    UnwindOpKind.SET_FPREG_LARGE: 16,
}

GPR_NAMES = ("RAX", "RCX", "RDX", "RBX", "RSP", "RBP", "RSI", "RDI",
             "R8", "R9", "R10", "R11", "R12", "R13", "R14", "R15")
XMM_NAMES = tuple(f"XMM{i}" for i in range(16))

_GPR_OPS = (UnwindOpKind.PUSH_NONVOL, UnwindOpKind.SAVE_NONVOL, UnwindOpKind.SAVE_NONVOL_FAR)
_XMM_OPS = (UnwindOpKind.SAVE_XMM128, UnwindOpKind.SAVE_XMM128_FAR)

_U16 = 1 << 16
_U32 = 1 << 32


def _bad(reason: str, kind: str, offset: int | None = None) -> UnwindError:
    return UnwindError(reason, kind=kind, offset=offset)


@dataclass(frozen=True)
class UnwindOp:
    """One unwind operation, as stored: it occupies `slots` UNWIND_CODE slots.

    `code_offset` is the CodeOffset byte: for prolog operations the offset, from the start of
    the prolog, of the end of the instruction it describes. `operand` is the value of the
    extra slots as stored (unscaled), 0 when the operation has none.
    """

    code_offset: int
    op: UnwindOpKind
    op_info: int = 0
    operand: int = 0

    def __post_init__(self):
        try:
            object.__setattr__(self, "op", UnwindOpKind(self.op))
        except ValueError:
            raise _bad(f"unknown unwind operation {self.op}", "bad-unwind-op") from None
        if not 0 <= self.code_offset <= 0xFF:
            raise _bad(f"code offset {self.code_offset} does not fit a byte", "bad-unwind-op")
        if not 0 <= self.op_info <= 0xF:
            raise _bad(f"OpInfo {self.op_info} does not fit 4 bits", "bad-unwind-op")
        if self.op == UnwindOpKind.ALLOC_LARGE and self.op_info > 1:
            raise _bad(f"ALLOC_LARGE with OpInfo {self.op_info} (only 0 and 1 exist)", "bad-unwind-op")
        limit = (1, _U16, _U32)[self.extra_slots]
        if not 0 <= self.operand < limit:
            raise _bad(f"{self.op.name} operand {self.operand:#x} does not fit "
                       f"{self.extra_slots} extra slot(s)", "bad-unwind-op")

    # -- construction by meaning, choosing the shortest encoding ------------------------------

    @classmethod
    def push_nonvol(cls, code_offset: int, register: int) -> "UnwindOp":
        return cls(code_offset, UnwindOpKind.PUSH_NONVOL, register)

    @classmethod
    def alloc(cls, code_offset: int, size: int) -> "UnwindOp":
        """ALLOC_SMALL up to 128 bytes, then ALLOC_LARGE with a scaled 16-bit, then 32-bit size."""
        if size <= 0 or size % 8:
            raise _bad(f"stack allocation of {size} bytes is not a positive multiple of 8",
                       "bad-unwind-op")
        if size <= 128:
            return cls(code_offset, UnwindOpKind.ALLOC_SMALL, size // 8 - 1)
        if size // 8 < _U16:
            return cls(code_offset, UnwindOpKind.ALLOC_LARGE, 0, size // 8)
        return cls(code_offset, UnwindOpKind.ALLOC_LARGE, 1, size)

    @classmethod
    def set_fpreg(cls, code_offset: int) -> "UnwindOp":
        return cls(code_offset, UnwindOpKind.SET_FPREG)

    @classmethod
    def save_nonvol(cls, code_offset: int, register: int, offset: int) -> "UnwindOp":
        if offset % 8 == 0 and offset // 8 < _U16:
            return cls(code_offset, UnwindOpKind.SAVE_NONVOL, register, offset // 8)
        return cls(code_offset, UnwindOpKind.SAVE_NONVOL_FAR, register, offset)

    @classmethod
    def save_xmm128(cls, code_offset: int, register: int, offset: int) -> "UnwindOp":
        if offset % 16 == 0 and offset // 16 < _U16:
            return cls(code_offset, UnwindOpKind.SAVE_XMM128, register, offset // 16)
        return cls(code_offset, UnwindOpKind.SAVE_XMM128_FAR, register, offset)

    @classmethod
    def push_machframe(cls, code_offset: int, error_code: bool) -> "UnwindOp":
        return cls(code_offset, UnwindOpKind.PUSH_MACHFRAME, int(error_code))

    # -- meaning ------------------------------------------------------------------------------

    @property
    def extra_slots(self) -> int:
        if self.op == UnwindOpKind.ALLOC_LARGE:
            return 1 if self.op_info == 0 else 2
        return _EXTRA_SLOTS[self.op]

    @property
    def slots(self) -> int:
        """UNWIND_CODE slots this operation occupies (counted by CountOfCodes)."""
        return 1 + self.extra_slots

    @property
    def register(self) -> int | None:
        """The saved or pushed register number (GPR or XMM), for the operations that have one."""
        return self.op_info if self.op in _GPR_OPS or self.op in _XMM_OPS else None

    @property
    def register_name(self) -> str | None:
        if self.op in _GPR_OPS:
            return GPR_NAMES[self.op_info]
        if self.op in _XMM_OPS:
            return XMM_NAMES[self.op_info]
        return None

    @property
    def size(self) -> int | None:
        """Bytes allocated on the stack, for ALLOC_SMALL and ALLOC_LARGE."""
        if self.op == UnwindOpKind.ALLOC_SMALL:
            return self.op_info * 8 + 8
        if self.op == UnwindOpKind.ALLOC_LARGE:
            return self.operand * 8 if self.op_info == 0 else self.operand
        return None

    @property
    def offset(self) -> int | None:
        """Stack offset in bytes of a save, or the frame offset of SET_FPREG_LARGE."""
        scale = _OPERAND_SCALE.get(self.op)
        return None if scale is None else self.operand * scale

    def describe(self, frame_register: int | None = None, frame_offset: int = 0) -> str:
        """The operation as llvm-readobj --unwind prints it.

        SET_FPREG's register and offset live in the UNWIND_INFO header: pass them, or the
        line names neither."""
        op, name = self.op, self.op.name
        if op == UnwindOpKind.PUSH_NONVOL:
            text = f"{name} reg={self.register_name}"
        elif op in (UnwindOpKind.ALLOC_SMALL, UnwindOpKind.ALLOC_LARGE):
            text = f"{name} size={self.size}"
        elif op == UnwindOpKind.SET_FPREG:
            text = name if frame_register is None else \
                f"{name} reg={GPR_NAMES[frame_register]}, offset=0x{frame_offset:X}"
        elif op == UnwindOpKind.SET_FPREG_LARGE:
            reg = "" if frame_register is None else f" reg={GPR_NAMES[frame_register]},"
            text = f"{name}{reg} offset=0x{self.offset:X}"
        elif op in _GPR_OPS or op in _XMM_OPS:
            text = f"{name} reg={self.register_name}, offset=0x{self.offset:X}"
        elif op == UnwindOpKind.PUSH_MACHFRAME:
            text = f"{name} errcode={'yes' if self.op_info else 'no'}"
        else:  # EPILOG, raw
            text = f"{name} info=0x{self.op_info:X}"
        return f"0x{self.code_offset:02X}: {text}"

    def __str__(self) -> str:
        return self.describe()


@dataclass(frozen=True)
class RuntimeFunction:
    """A RUNTIME_FUNCTION: code range [begin_rva, end_rva) and its UNWIND_INFO's RVA."""

    begin_rva: int
    end_rva: int
    unwind_rva: int

    def __str__(self) -> str:
        return f"[0x{self.begin_rva:X}, 0x{self.end_rva:X}) unwind 0x{self.unwind_rva:X}"


@dataclass(frozen=True)
class UnwindInfo:
    """One UNWIND_INFO. `frame_offset` is in bytes (the header stores it divided by 16)."""

    version: int = 1
    flags: UnwindFlags = UnwindFlags.NHANDLER
    prolog_size: int = 0
    frame_register: int = 0          # 0: no frame register
    frame_offset: int = 0
    codes: tuple[UnwindOp, ...] = ()
    padding_slot: int = 0            # the unused slot after an odd code array, as stored
    handler_rva: int | None = None   # with EHANDLER / UHANDLER
    handler_data: bytes = b""        # language-specific data after the handler RVA
    chained: RuntimeFunction | None = None  # with CHAININFO

    def __post_init__(self):
        object.__setattr__(self, "codes", tuple(self.codes))
        object.__setattr__(self, "handler_data", bytes(self.handler_data))
        if self.version not in (1, 2):
            raise _bad(f"UNWIND_INFO version {self.version} (only 1 and 2 exist)", "bad-unwind-version")
        _check_flags(int(self.flags))
        object.__setattr__(self, "flags", UnwindFlags(self.flags))
        has_handler = bool(self.flags & HANDLER_FLAGS)
        if has_handler != (self.handler_rva is not None):
            raise _bad(f"flags {self.flags} but handler RVA {self.handler_rva}", "bad-unwind-flags")
        if not has_handler and self.handler_data:
            raise _bad("handler data without a handler", "bad-unwind-flags")
        if bool(self.flags & UnwindFlags.CHAININFO) != (self.chained is not None):
            raise _bad(f"flags {self.flags} but chained entry {self.chained}", "bad-unwind-flags")
        if not 0 <= self.prolog_size <= 0xFF:
            raise _bad(f"prolog size {self.prolog_size} does not fit a byte", "bad-unwind-info")
        if not 0 <= self.frame_register <= 0xF:
            raise _bad(f"frame register {self.frame_register} does not fit 4 bits", "bad-unwind-info")
        if self.frame_offset % 16 or not 0 <= self.frame_offset <= 240:
            raise _bad(f"frame offset {self.frame_offset} is not 0..240 in steps of 16",
                       "bad-unwind-info")
        if self.count_of_codes > 0xFF:
            raise _bad(f"{self.count_of_codes} unwind code slots (at most 255)", "bad-unwind-info")
        if self.version == 1 and any(op.op == UnwindOpKind.EPILOG for op in self.codes):
            raise _bad("EPILOG code in a version-1 UNWIND_INFO", "bad-unwind-op")
        if not 0 <= self.padding_slot < _U16 or (self.padding_slot and self.count_of_codes % 2 == 0):
            raise _bad(f"padding slot 0x{self.padding_slot:x} with {self.count_of_codes} code slots",
                       "bad-unwind-info")

    @property
    def count_of_codes(self) -> int:
        """CountOfCodes: slots, not operations."""
        return sum(op.slots for op in self.codes)

    @property
    def size(self) -> int:
        """Bytes the UNWIND_INFO occupies (what the decoder consumed, what the encoder writes)."""
        slots = self.count_of_codes
        size = structs.UNWIND_INFO_HEADER_SIZE + structs.UNWIND_CODE_SLOT_SIZE * (slots + slots % 2)
        if self.handler_rva is not None:
            size += 4 + len(self.handler_data)
        if self.chained is not None:
            size += structs.RUNTIME_FUNCTION_SIZE
        return size

    @property
    def frame_register_name(self) -> str | None:
        return GPR_NAMES[self.frame_register] if self.frame_register else None

    def __str__(self) -> str:
        lines = ["UnwindInfo {",
                 f"  Version: {self.version}",
                 f"  Flags: 0x{int(self.flags):X} {self.flags}",
                 f"  PrologSize: {self.prolog_size}"]
        if self.frame_register:
            lines.append(f"  FrameRegister: {self.frame_register_name}")
            lines.append(f"  FrameOffset: 0x{self.frame_offset:X}")
        else:
            lines += ["  FrameRegister: -", "  FrameOffset: -"]
        lines.append(f"  UnwindCodeCount: {self.count_of_codes}")
        lines.append("  UnwindCodes [")
        lines += [f"    {op.describe(self.frame_register, self.frame_offset)}" for op in self.codes]
        lines.append("  ]")
        if self.padding_slot:
            lines.append(f"  PaddingSlot: 0x{self.padding_slot:04X}")
        if self.handler_rva is not None:
            data = f" data {self.handler_data.hex(' ')}" if self.handler_data else ""
            lines.append(f"  Handler: 0x{self.handler_rva:X}{data}")
        if self.chained is not None:
            lines.append(f"  Chained: {self.chained}")
        lines.append("}")
        return "\n".join(lines)


def _check_flags(flags: int, offset: int | None = None) -> None:
    if flags & ~_KNOWN_FLAGS:
        raise _bad(f"undefined UNWIND_INFO flag bits 0x{flags & ~_KNOWN_FLAGS:x}", "bad-unwind-flags", offset)
    if flags & _HANDLER_BITS and flags & _CHAININFO_BIT:
        raise _bad(f"flags 0x{flags:x}: a handler and chained info cannot both follow the codes",
                   "bad-unwind-flags", offset)


# The most an UNWIND_INFO can span besides the caller's handler data: header, 255 slots and a
# padding slot, then a handler RVA or a chained RUNTIME_FUNCTION.
_MAX_FIXED_SIZE = (structs.UNWIND_INFO_HEADER_SIZE + 256 * structs.UNWIND_CODE_SLOT_SIZE
                   + structs.RUNTIME_FUNCTION_SIZE)


def decode_unwind_info(data: bytes | bytearray | memoryview, offset: int = 0, *,
                       handler_data_size: int = 0) -> UnwindInfo:
    """Decode the UNWIND_INFO at `offset` of `data`.

    `handler_data_size`: how many bytes after the handler RVA belong to the handler (the
    format does not say; 0 for CLR images, where the personality RVA ends it). Errors are
    `UnwindError`s whose offset is a byte offset into `data`.
    """
    if not 0 <= offset <= len(data):
        raise _bad(f"offset 0x{offset:x} outside {len(data)} bytes", "truncated-unwind-info", offset)
    # Copy only what this UNWIND_INFO can span, never the rest of a large image.
    chunk = bytes(memoryview(data)[offset:offset + _MAX_FIXED_SIZE + handler_data_size])
    if len(chunk) < structs.UNWIND_INFO_HEADER_SIZE:
        raise _bad(f"UNWIND_INFO header needs 4 bytes, {len(chunk)} left", "truncated-unwind-info", offset)
    header = _header(chunk[:structs.UNWIND_INFO_HEADER_SIZE])
    key = (chunk[:_record_size(header, handler_data_size)], handler_data_size)
    known = _DECODED.get(key)
    if known is not None:
        return known
    info = _decode(chunk, offset, header, handler_data_size)
    if len(_DECODED) >= _DECODED_LIMIT:
        _DECODED.clear()
    _DECODED[key] = info
    return info


# Decoded records by their exact bytes. The pipeline reads each UNWIND_INFO of a method
# several times (recovery, LLVM's table, the image and its check); an UnwindInfo is
# immutable, so one decoding serves every reader.
_DECODED: dict[tuple[bytes, int], UnwindInfo] = {}
_DECODED_LIMIT = 1 << 14


@lru_cache(maxsize=1 << 10)
def _header(data: bytes):
    """The parsed 4-byte header. Real images hold few distinct headers (89 over the whole
    corpus, for 50,000 UNWIND_INFOs) and the header must be parsed before the record's size,
    hence its key in `_DECODED`, is known. Read-only: the container is shared."""
    return structs.UnwindInfoHeader.parse(data)


def _record_size(header, handler_data_size: int) -> int:
    slots = header.count_of_codes
    size = structs.UNWIND_INFO_HEADER_SIZE + structs.UNWIND_CODE_SLOT_SIZE * (slots + slots % 2)
    if header.flags & _HANDLER_BITS:
        size += 4 + handler_data_size
    if header.flags & _CHAININFO_BIT:
        size += structs.RUNTIME_FUNCTION_SIZE
    return size


# An UNWIND_INFO is read piece by piece, each piece by its own declaration, in the order and on
# the conditions of `structs.UnwindInfo` (tests/unwind hold the two to reading the same): the
# header and each UNWIND_CODE are parsed once per distinct bytes (300 methods' 7,872 codes
# are 124 distinct ones), what follows the code array by construct's compiled form of its
# declaration. Parsing the whole record with construct, a BitStruct and a Switch per code and
# a GreedyRange ended by an exception, cost about a millisecond per UNWIND_INFO.
_PADDING_SLOT = compiled_parser(structs.UnwindCodeSlot)
_HANDLER = compiled_parser(structs.HandlerInfo)
_CHAINED = compiled_parser(structs.RuntimeFunction)


@lru_cache(maxsize=1 << 12)
def _code_size(first_slot: bytes) -> int:
    """Bytes of the UNWIND_CODE whose first slot is `first_slot` (its operation says how many
    extra slots follow), as the declaration reads it from that slot and room for the largest
    operand, two slots."""
    stream = io.BytesIO(first_slot + bytes(2 * structs.UNWIND_CODE_SLOT_SIZE))
    structs.UnwindCode.parse_stream(stream)
    return stream.tell()


@lru_cache(maxsize=1 << 12)
def _unwind_op(code: bytes) -> UnwindOp:
    """One UNWIND_CODE, all its slots, as an operation (`UnwindError` for one that is none)."""
    raw = structs.UnwindCode.parse(code)
    return UnwindOp(raw.code_offset, raw.operation.unwind_op, raw.operation.op_info, raw.operand or 0)


def _decode(chunk: bytes, offset: int, header, handler_data_size: int) -> UnwindInfo:
    if header.version not in (1, 2):
        raise _bad(f"UNWIND_INFO version {header.version} (only 1 and 2 exist)", "bad-unwind-version", offset)
    flags, count = header.flags, header.count_of_codes
    _check_flags(flags, offset)
    size = _record_size(header, handler_data_size)
    if len(chunk) < size or (flags & _HANDLER_BITS and handler_data_size < 0):
        raise _bad(f"data ends inside the UNWIND_INFO ({count} code slots, "
                   f"flags 0x{flags:x}, {len(chunk)} bytes left)", "truncated-unwind-info", offset)

    header_size, slot_size = structs.UNWIND_INFO_HEADER_SIZE, structs.UNWIND_CODE_SLOT_SIZE
    end = header_size + slot_size * count
    codes, slot, at = [], 0, header_size
    while at < end:
        length = _code_size(chunk[at:at + slot_size])
        if at + length > end:   # its extra slots run past CountOfCodes: the array ends before it
            break
        where = offset + header_size + slot * slot_size
        try:
            op = _unwind_op(chunk[at:at + length])
        except UnwindError as e:
            raise _bad(f"slot {slot}: {e.reason}", e.kind, where) from None
        if header.version == 1 and op.op == UnwindOpKind.EPILOG:
            raise _bad(f"EPILOG code in slot {slot} of a version-1 UNWIND_INFO", "bad-unwind-op", where)
        codes.append(op)
        slot += op.slots
        at += length
    if slot != count:
        raise _bad(f"the operation in slot {slot} needs more slots than CountOfCodes ({count}) leaves",
                   "bad-unwind-op", offset + header_size + slot * slot_size)

    padding, at = 0, end
    if count % 2:
        padding = _PADDING_SLOT(chunk[at:at + slot_size])
        at += slot_size
    # The rest of the record is the handler or the chained entry (`_check_flags`: not both).
    handler = _HANDLER(chunk[at:size], handler_data_size=handler_data_size) if flags & _HANDLER_BITS else None
    chained = _CHAINED(chunk[at:size]) if flags & _CHAININFO_BIT else None
    return UnwindInfo(
        version=header.version,
        flags=UnwindFlags(flags),
        prolog_size=header.size_of_prolog,
        frame_register=header.frame_register,
        frame_offset=header.frame_offset * 16,
        codes=tuple(codes),
        padding_slot=padding,
        handler_rva=handler.handler_rva if handler is not None else None,
        handler_data=handler.handler_data if handler is not None else b"",
        chained=(RuntimeFunction(chained.begin_rva, chained.end_rva, chained.unwind_rva)
                 if chained is not None else None),
    )


def encode_unwind_info(info: UnwindInfo) -> bytes:
    """The bytes of `info`; `decode_unwind_info` of them gives `info` back."""
    return _encode(info)


# Encodings by value. An UnwindInfo is immutable and hashable, and the same few recur: every
# funclet of a method, and ReadyToRun images (50,000 UNWIND_INFOs, 4,300 distinct) whose
# every one is re-encoded to check the codec; construct's build is the costly part.
@lru_cache(maxsize=_DECODED_LIMIT)
def _encode(info: UnwindInfo) -> bytes:
    count = info.count_of_codes
    value = dict(
        header=dict(flags=int(info.flags), version=info.version, size_of_prolog=info.prolog_size,
                    count_of_codes=count, frame_offset=info.frame_offset // 16,
                    frame_register=info.frame_register),
        codes=[dict(code_offset=op.code_offset,
                    operation=dict(op_info=op.op_info, unwind_op=int(op.op)),
                    operand=op.operand if op.extra_slots else None)
               for op in info.codes],
        padding=info.padding_slot if count % 2 else None,
        handler=(dict(handler_rva=info.handler_rva, handler_data=info.handler_data)
                 if info.handler_rva is not None else None),
        chained=(dict(begin_rva=info.chained.begin_rva, end_rva=info.chained.end_rva,
                      unwind_rva=info.chained.unwind_rva)
                 if info.chained is not None else None),
        end=None,
    )
    return structs.UnwindInfo.build(value, handler_data_size=len(info.handler_data))


def to_clr(info: UnwindInfo) -> UnwindInfo:
    """The UNWIND_INFO in the form a CLR JIT hands it to the runtime: no language handler.

    LLVM writes every funclet-EH function's UNWIND_INFO with UNW_FLAG_EHANDLER|UHANDLER and
    the RVA of the personality routine (`ProcessCLRException` for the CoreCLR personality).
    A CLR JIT does not: RyuJIT reports only the header and the codes (`allocUnwindInfo`, flags
    0), and the runtime itself sets EHANDLER|UHANDLER, pads the code array to a dword and
    appends the RVA of its own personality routine (that is why every ReadyToRun UNWIND_INFO
    has flags 3 and a personality RVA after it). So: clear both handler flags and drop the
    handler RVA and handler data. Chained info is kept (it describes the frame, not EH);
    prolog, frame and codes are unchanged, the padding slot too (the runtime's padding sits
    in the same place).

    The exact blob RyuJIT passes is the first `4 + 2 * count_of_codes` bytes of the
    encoding: the padding slot is the runtime's alignment, not the JIT's.
    """
    return replace(info, flags=info.flags & ~HANDLER_FLAGS, handler_rva=None, handler_data=b"")
