"""Binary layouts of the IL method body (ECMA-335 II.25.4), each declared once with construct.

Parsing and building use the same declaration, so a body we write (tests patch real bodies
to make malformed ones) is encoded exactly as we read it. Meaning (which flag is which, what
a clause kind is) lives in `body.py`; this file is layout only.

Records read by the thousand (clauses, method headers, and the other stages' COFF and
ReadyToRun records) are also read in bulk: `bulk_format` derives a `struct` format from the
declaration, so the layout is still stated in one place while one `struct.unpack` replaces a
construct parse per record (tens of times cheaper). Layouts of variable shape read once per
method (a COFF object, LLVM's CLR table) go through `compiled_parser`: construct's compiled
form of the same declaration, a few times cheaper than its interpreted parse.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from construct import (BitsInteger, BitStruct, Byte, ByteSwapped, Const, Construct, ConstructError, FlagsEnum,
                       FormatField, IfThenElse, Int16ul, Int24ul, Int32ul, Padding, Renamed, StreamError, Struct, this)

# II.25.4.2: a tiny header is one byte, the code size in its upper six bits, format 0b10.
TinyMethodHeader = BitStruct(
    "code_size" / BitsInteger(6),
    "format" / Const(2, BitsInteger(2)),
)

# II.25.4.3: a fat header is 12 bytes. Its first 16 bits, little-endian, hold the header size in
# dwords (upper 4 bits, always 3) and the flags (lower 12 bits, format 0b11 in the lowest two).
FatHeaderFlags = ByteSwapped(BitStruct(
    "header_dwords" / BitsInteger(4),
    "flags" / FlagsEnum(BitsInteger(12), fat_format=0x3, more_sects=0x8, init_locals=0x10),
))

FatMethodHeader = Struct(
    "flags_and_size" / FatHeaderFlags,
    "max_stack" / Int16ul,
    "code_size" / Int32ul,
    "local_var_sig_tok" / Int32ul,
)

# II.25.4.5: every extra data section starts 4-byte aligned with a header whose size field
# counts the header itself; the fat form widens it to 24 bits.
SectionHeader = Struct(
    "kind" / FlagsEnum(Byte, eh_table=0x01, opt_il_table=0x02, fat_format=0x40, more_sects=0x80),
    "data_size" / IfThenElse(this.kind.fat_format, Int24ul, Byte),
    IfThenElse(this.kind.fat_format, Padding(0), Padding(2)),
)

# II.25.4.6: the two clause encodings; both carry lengths, not end offsets.
SmallEHClause = Struct(
    "flags" / Int16ul,
    "try_offset" / Int16ul,
    "try_length" / Byte,
    "handler_offset" / Int16ul,
    "handler_length" / Byte,
    "class_token_or_filter_offset" / Int32ul,
)

FatEHClause = Struct(
    "flags" / Int32ul,
    "try_offset" / Int32ul,
    "try_length" / Int32ul,
    "handler_offset" / Int32ul,
    "handler_length" / Int32ul,
    "class_token_or_filter_offset" / Int32ul,
)

SECTION_HEADER_SIZE = 4
SMALL_CLAUSE_SIZE = SmallEHClause.sizeof()
FAT_CLAUSE_SIZE = FatEHClause.sizeof()
FAT_HEADER_SIZE = FatMethodHeader.sizeof()

# CORINFO_EH_CLAUSE (corinfo.h) as a CLR JIT reports it and ReadyToRun stores it: the same six
# dwords as a fat IL clause, but the two middle "length" fields carry *end* offsets of native
# code, relative to the method's start.
CorInfoEHClause = Struct(
    "flags" / Int32ul,
    "try_start" / Int32ul,
    "try_end" / Int32ul,
    "handler_start" / Int32ul,
    "handler_end" / Int32ul,
    "class_token_or_filter_offset" / Int32ul,
)

# PE/COFF 3.1-3.2 (ECMA-335 II.25.2.1): an image opens with the MS-DOS header, of which a reader
# needs the "MZ" magic and e_lfanew, the file offset of the 4-byte "PE\0\0" signature. Checked on
# the first bytes before a file is read whole (`loader.read_image`).
DosHeader = Struct(
    "e_magic" / Const(b"MZ"),
    Padding(0x3A),
    "e_lfanew" / Int32ul,
)
PeSignature = Const(b"PE\0\0")


def bulk_format(layout: Struct) -> str:
    """The `struct` format of a fixed-size layout, for reading records of it in bulk: a
    little-endian integer field unpacks as an int, any other field (`Bytes(n)`, bit fields) as
    its raw bytes, which the caller parses with that field's own declaration if it needs to."""
    codes = []
    for sub in layout.subcons:
        field = sub.subcon if isinstance(sub, Renamed) else sub
        if not isinstance(field, FormatField):
            codes.append(f"{field.sizeof()}s")   # SizeofError for a field of variable size
        elif field.fmtstr[0] == "<" or field.length == 1:
            codes.append(field.fmtstr[1:])
        else:
            raise TypeError(f"{sub} is not little-endian")
    return "<" + "".join(codes)


class _ExactReads(io.BytesIO):
    """A stream whose every sized read returns exactly the bytes asked for, or raises: the
    code construct compiles reads a `Bytes(n)` field with a bare `read(n)`, which would give a
    truncated field instead of an error. Only `GreedyBytes` reads without a size."""

    def read(self, size: int | None = None) -> bytes:
        if size is None:
            return super().read()
        data = super().read(size) if size >= 0 else b""
        if len(data) != size:
            raise StreamError(f"read of {size} bytes, {len(data)} left")
        return data


def compiled_parser(layout: Construct) -> Callable[..., Any]:
    """`layout.parse` by construct's compiled form of the declaration, several times faster
    than its interpreted parse.

    The compiled form reads what the declaration reads (the tests of each layout read with it
    hold it to that), but it does not fail like it: it reads a field short without a word, and
    reports a failed `Const` or `Check` without the path to the field. So it reads through
    `_ExactReads`, and when it fails, the declaration's own parse runs and decides: it raises
    the very error it always raised. Parameters (`this._params`) pass as with `parse`."""
    compiled = layout.compile()

    def parse(data: bytes, **params: Any) -> Any:
        try:
            return compiled.parse_stream(_ExactReads(data), **params)
        except ConstructError:
            return layout.parse(data, **params)

    return parse
