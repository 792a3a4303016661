"""Method bodies: tiny and fat headers, small and fat EH sections, several sections, damage.

Bodies are built with the same construct declarations the parser uses, so each test states
the encoding it means; the corpus tests check the parser on real bodies.
"""

import pytest
from construct import Container
from hypothesis import given, strategies as st

from llilc_eh.assembly.body import ClauseKind, parse_body
from llilc_eh.assembly.structs import (FatEHClause, FatMethodHeader, SectionHeader, SmallEHClause,
                                       TinyMethodHeader)
from llilc_eh.errors import AssemblyError


def fat_header(code_size, *, max_stack=8, more=False, init=True, locals_tok=0x11000001, dwords=3):
    return FatMethodHeader.build(Container(
        flags_and_size=Container(header_dwords=dwords, flags=Container(fat_format=True, more_sects=more,
                                                                       init_locals=init)),
        max_stack=max_stack, code_size=code_size, local_var_sig_tok=locals_tok))


def section(clauses, *, fat, more=False, eh=True):
    layout = FatEHClause if fat else SmallEHClause
    data = b"".join(layout.build(Container(flags=k, try_offset=ts, try_length=tl, handler_offset=hs,
                                           handler_length=hl, class_token_or_filter_offset=x))
                    for k, ts, tl, hs, hl, x in clauses)
    head = SectionHeader.build(Container(kind=Container(eh_table=eh, opt_il_table=False, fat_format=fat,
                                                        more_sects=more), data_size=4 + len(data)))
    return head + data


def pad(b):
    return b + b"\0" * (-len(b) % 4)


def parse(data, start=0):
    return parse_body(data, start, token=0x06000001, name="T::M", rva=0x2050)


def test_tiny_header():
    code = bytes([0x00, 0x2A])  # nop; ret
    body = parse(TinyMethodHeader.build(Container(code_size=2)) + code)
    assert body.tiny and body.code == code and body.max_stack == 8 and not body.clauses


def test_fat_header_small_section():
    code = bytes(16)
    data = pad(fat_header(16, more=True) + code) + section([(0, 0, 4, 4, 6, 0x01000005)], fat=False)
    body = parse(data)
    assert not body.tiny and body.init_locals and body.local_sig_token == 0x11000001
    (c,) = body.clauses
    assert (c.kind, c.try_start, c.try_end, c.handler_start, c.handler_end, c.class_token) == \
        (ClauseKind.CATCH, 0, 4, 4, 10, 0x01000005)
    assert not c.fat and body.sections[0].clause_count == 1


def test_fat_section_filter_finally_fault():
    code = bytes(40)
    clauses = [(1, 0, 4, 12, 8, 4), (2, 0, 20, 20, 10, 0), (4, 0, 30, 30, 10, 0)]
    body = parse(pad(fat_header(40, more=True) + code) + section(clauses, fat=True))
    kinds = [c.kind for c in body.clauses]
    assert kinds == [ClauseKind.FILTER, ClauseKind.FINALLY, ClauseKind.FAULT]
    assert body.clauses[0].filter_start == 4 and body.clauses[0].class_token is None
    assert all(c.fat for c in body.clauses)


def test_several_sections_chain():
    code = bytes(20)
    first = section([(0, 0, 2, 2, 2, 0x02000002)], fat=False, more=True)
    second = section([(2, 0, 10, 10, 10, 0)], fat=True)
    body = parse(pad(fat_header(20, more=True) + code) + first + second)
    assert len(body.sections) == 2 and [c.index for c in body.clauses] == [0, 1]
    assert [c.fat for c in body.clauses] == [False, True]


def test_non_eh_section_is_skipped():
    code = bytes(8)
    other = SectionHeader.build(Container(kind=Container(eh_table=False, opt_il_table=True, fat_format=False,
                                                         more_sects=True), data_size=8)) + bytes(4)
    body = parse(pad(fat_header(8, more=True) + code) + other + section([(0, 0, 2, 2, 2, 0x01000001)], fat=False))
    assert len(body.clauses) == 1 and len(body.sections) == 2


@pytest.mark.parametrize("data, kind", [
    (bytes([0x01, 0x00]), "bad-method-header"),              # format bits 01
    (fat_header(8, dwords=4) + bytes(8), "bad-method-header"),
    (fat_header(100) + bytes(8), "truncated-body"),
    (fat_header(2)[:7], "truncated-body"),
    (bytes([0x0E]), "truncated-body"),                        # tiny, 3 bytes of code missing
    (pad(fat_header(4, more=True) + bytes(4)), "truncated-body"),
    (pad(fat_header(4, more=True) + bytes(4)) + bytes([0x41, 0xFF, 0, 0]), "bad-eh-section"),
    (pad(fat_header(4, more=True) + bytes(4)) + section([(8, 0, 1, 1, 1, 0)], fat=True), "bad-clause-flags"),
    (pad(fat_header(4, more=True) + bytes(4)) + bytes([0x00, 0x04, 0, 0]), "bad-eh-section"),
])
def test_damaged_bodies(data, kind):
    with pytest.raises(AssemblyError) as e:
        parse(data)
    assert e.value.kind == kind
    assert "0x06000001 T::M" in str(e.value)


@given(st.lists(st.tuples(st.sampled_from([0, 1, 2, 4]), st.integers(0, 0xFFFF), st.integers(0, 0xFF),
                          st.integers(0, 0xFFFF), st.integers(0, 0xFF), st.integers(0, 0xFFFFFFFF)),
                min_size=1, max_size=20),
       st.booleans())
def test_clause_encoding_round_trip(clauses, fat):
    body = parse(pad(fat_header(4, more=True) + bytes(4)) + section(clauses, fat=fat))
    got = [(c.kind.value, c.try_start, c.try_end - c.try_start, c.handler_start,
            c.handler_end - c.handler_start,
            c.class_token if c.kind is ClauseKind.CATCH else c.filter_start if c.kind is ClauseKind.FILTER
            else x)
           for c, (_, _, _, _, _, x) in zip(body.clauses, clauses)]
    assert got == [tuple(c) for c in clauses]
