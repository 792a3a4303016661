"""`bulk_format`: the `struct` format derived from a construct declaration reads what the
declaration reads, for every layout that is read in bulk."""

import struct

import pytest
from construct import Bytes, Int16ub, Int32ul, SizeofError, Struct, this
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
