"""`bulk_format`: the `struct` format derived from a construct declaration reads what the
declaration reads, for every layout that is read in bulk; `compiled_parser`: construct's
compiled form of a declaration reads what the declaration reads, and fails as it fails."""

import struct

import pytest
from construct import (
    Array,
    Bytes,
    Check,
    Computed,
    Const,
    ConstructError,
    FixedSized,
    GreedyBytes,
    If,
    IfThenElse,
    Int8ul,
    Int16ub,
    Int16ul,
    Int32ul,
    Peek,
    Pointer,
    SizeofError,
    Struct,
    Tell,
    this,
)
from hypothesis import given
from hypothesis import strategies as st

from llilc_eh.assembly.r2r.structs import (
    ExceptionLookupEntry,
    ImportSection,
    MethodDefRowStart,
    RuntimeFunctionAmd64,
)
from llilc_eh.assembly.structs import (
    CorInfoEHClause,
    FatEHClause,
    FatHeaderFlags,
    FatMethodHeader,
    SmallEHClause,
    bulk_format,
    compiled_parser,
)

BULK_LAYOUTS = [FatMethodHeader, SmallEHClause, FatEHClause, CorInfoEHClause, RuntimeFunctionAmd64,
                ExceptionLookupEntry, MethodDefRowStart, ImportSection]


@pytest.mark.parametrize("layout", BULK_LAYOUTS)
@given(st.data())
def test_bulk_reads_what_construct_reads(layout, data):
    raw = data.draw(st.binary(min_size=layout.sizeof(), max_size=layout.sizeof()))
    parsed = layout.parse(raw)
    fields = struct.unpack(bulk_format(layout), raw)
    # A field that is not an integer comes out as its bytes, for its own declaration to parse.
    assert [FatHeaderFlags.parse(value) if sub.name == "flags_and_size" else value
            for sub, value in zip(layout.subcons, fields, strict=True)] == [parsed[sub.name] for sub in layout.subcons]


def test_bulk_format_refuses_what_it_cannot_derive():
    with pytest.raises(TypeError):
        bulk_format(Struct("big" / Int16ub))
    with pytest.raises(SizeofError):
        bulk_format(Struct("n" / Int32ul, "data" / Bytes(this.n)))


# Every construct our compiled layouts use (tests/backend and tests/unwind read those layouts
# through `compiled_parser` too), with sizes, counts, conditions and offsets taken from the data.
_COMPILABLE = Struct(
    "magic" / Const(b"\x7f"),
    "count" / Int8ul,
    Check(this.count < 6),
    "items" / Array(this.count, Int16ul),
    "size" / Int8ul,
    "blob" / Bytes(this.size),
    "at" / Int8ul,
    "far" / Pointer(this.at, Bytes(2)),
    "next" / Peek(Int32ul),
    "flag" / If(this.count > 2, Int8ul),
    "pair" / FixedSized(2, GreedyBytes),
    "rest" / IfThenElse(this.size > 2, Bytes(this.size - 2), Computed(b"")),
    "end" / Tell,
)


@given(st.sampled_from([b"", b"\x7f"]), st.binary(max_size=40))
def test_compiled_parser_reads_and_fails_as_the_declaration(magic, rest):
    data = magic + rest

    def outcome(parse):
        try:
            return parse(data)
        except ConstructError as e:
            return f"{type(e).__name__}: {e}"

    assert outcome(compiled_parser(_COMPILABLE)) == outcome(_COMPILABLE.parse)
