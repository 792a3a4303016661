"""LLVM's CoreCLR EH table read back from `.xdata`, over every sample method at O0 and O2,
checked against the recovered code (funclets, EH labels, invokes) and the IL clauses; and the
compiled form of its layout against the declaration, on damaged tables."""

from __future__ import annotations

import pytest
from conftest import OPT_LEVELS, parse_outcome
from hypothesis import given
from hypothesis import strategies as st

from llilc_eh.assembly.body import ClauseKind
from llilc_eh.assembly.native import ClauseFlags
from llilc_eh.assembly.structs import compiled_parser
from llilc_eh.backend import structs
from llilc_eh.backend.coff import CoffObject
from llilc_eh.backend.llvm_table import decode_llvm_clr_table, resolved_xdata
from llilc_eh.backend.recover import recover
from llilc_eh.errors import BackendError

_IL_TO_LLVM_KIND = {ClauseKind.CATCH: "catch", ClauseKind.FILTER: "catch",   # LLVM: no filters
                    ClauseKind.FINALLY: "finally", ClauseKind.FAULT: "fault"}

# A parent far from offset 0 (a function before it), one catch and one finally: every field
# kind the table has, parent-relative.
OFFSET_PARENT_IR = """target triple = "x86_64-pc-windows-msvc"
declare void @f()
declare void @g(ptr)
declare i32 @ProcessCLRException(...)
define void @before(ptr %p) {
  call void @g(ptr %p)
  call void @g(ptr %p)
  ret void
}
define void @parent() personality ptr @ProcessCLRException {
entry:
  invoke void @f() to label %a unwind label %dispatch
a:
  invoke void @f() to label %b unwind label %cleanup
b:
  ret void
cleanup:
  %cl = cleanuppad within none []
  call void @f() [ "funclet"(token %cl) ]
  cleanupret from %cl unwind to caller
dispatch:
  %cs = catchswitch within none [label %handler] unwind label %cleanup
handler:
  %cp = catchpad within %cs [i32 7]
  call void @f() [ "funclet"(token %cp) ]
  catchret from %cp to label %a
}
"""


def _tables(sample_compiled, opt):
    for m in sample_compiled[opt]:
        if m.has_eh:
            yield m, decode_llvm_clr_table(m.coff, m.parent)


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_table_matches_the_recovered_code(sample_compiled, opt):
    seen = 0
    for m, table in _tables(sample_compiled, opt):
        code = m.recovered
        parent = code.function(m.parent)
        funclets = code.funclets_of(m.parent)
        assert (table is None) == (not funclets), m.name
        if table is None:
            continue
        seen += 1
        base = parent.start

        def rel(offset: int, base: int = base) -> int:
            return offset - base

        # One handler per funclet; ends: each funclet's start (= the end of what precedes it),
        # then the end of the last funclet.
        assert table.funclet_count == len(funclets)
        assert table.ends == tuple(rel(f.start) for f in funclets) + (rel(funclets[-1].end),)
        starts = {rel(f.start): f for f in funclets}
        eh_labels = {rel(o) for name, o in code.labels.items() if name.startswith(".Ltmp")}
        invoke_returns = [rel(s.return_offset) for f in code.method_functions(m.parent)
                          for s in f.calls if s.is_invoke]
        regions = [(rel(parent.start), rel(parent.end), None)] + \
                  [(rel(f.start), rel(f.end), f) for f in funclets]
        for clause, symbol in zip(table.clauses, table.handler_symbols):
            handler = starts[clause.handler_start]
            assert symbol == handler.name
            assert clause.handler_end == table.ends[table.ends.index(clause.handler_start) + 1]
            assert (handler.kind == "catch") == (clause.kind == "catch")
            # Try ranges: EH labels + 1 at both ends, inside one function or funclet, around
            # at least one invoke's return address.
            assert clause.try_start - 1 in eh_labels and clause.try_end - 1 in eh_labels
            home = [r for r in regions if r[0] <= clause.try_start - 1 and clause.try_end - 1 <= r[1]]
            assert len(home) == 1, (m.name, str(clause))
            assert any(clause.try_start <= r < clause.try_end for r in invoke_returns)
            if home[0][2] is None:
                assert not clause.is_duplicate      # a try in the main body is primary
        # Every handler has a primary clause; every invoke is covered by some clause.
        assert {c.handler_start for c in table.primaries} == set(starts)
        for r in invoke_returns:
            assert any(c.try_start <= r < c.try_end for c in table.clauses)
    assert seen > 20


def test_one_primary_handler_per_il_clause(sample_compiled):
    """At O0, where every IL try can throw (the reader gave each clause one pad) and LLVM has
    no filters to mistranslate, the primaries name exactly one handler per IL clause, of the
    IL clause's kind. (Raw primary counts can be higher: LLVM writes one clause per run of
    invokes, and the normal-path finally copy splits a try's invokes into two runs.)"""
    checked = split = 0
    for m, table in _tables(sample_compiled, 0):
        if m.has_filter or m.pads != len(m.il_clauses) or table is None:
            continue
        checked += 1
        handlers = {}
        for c in table.primaries:
            handlers.setdefault(c.handler_start, c.kind)
        assert len(handlers) == len(m.il_clauses), m.name
        assert sorted(handlers.values()) == sorted(_IL_TO_LLVM_KIND[c.kind] for c in m.il_clauses)
        split += len(table.primaries) > len(m.il_clauses)
    assert checked >= 25 and split >= 1


def test_llvm_quirks_are_kept(sample_compiled):
    """The raw view: a primary after a duplicate (MutualProtect.Run), catch-kind clauses for
    our filter handlers (class token 0, the catchpad's marker)."""
    m = next(m for m in sample_compiled[0] if "MutualProtect.Program::Run" in m.name)
    flags = [c.is_duplicate for c in decode_llvm_clr_table(m.coff, m.parent).clauses]
    assert any(not dup and any(flags[:i]) for i, dup in enumerate(flags))
    m = next(m for m in sample_compiled[0] if "CatchAndFilter.Program::CatchFilterCatch" in m.name)
    table = decode_llvm_clr_table(m.coff, m.parent)
    assert [c.flags for c in table.clauses] == [ClauseFlags.NONE] * 3
    assert [c.class_token_or_filter for c in table.clauses] == [0x01000003, 0, 0x01000002]
    assert len({(c.try_start, c.try_end) for c in table.clauses}) == 1   # mutual protection
    assert "3 funclets, 3 clauses" in str(table)


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_parent_not_at_offset_zero(pool, opt):
    """S + A - P - 4 gives parent-relative offsets wherever the parent sits in .text."""
    result = pool.compile(OFFSET_PARENT_IR, opt)
    code = recover(result.obj, result.asm)
    parent = code.function("parent")
    assert parent.start > 0
    table = decode_llvm_clr_table(result.obj, "parent")
    cleanup, catch = code.funclets_of("parent")
    assert (cleanup.kind, catch.kind) == ("cleanup", "catch")
    assert table.ends == (cleanup.start - parent.start, catch.start - parent.start,
                          catch.end - parent.start)
    by_kind = {c.kind: c for c in table.clauses}
    assert by_kind["catch"].handler_start == catch.start - parent.start
    assert by_kind["catch"].class_token == 7
    assert by_kind["finally"].handler_start == cleanup.start - parent.start
    first_invoke = parent.calls[0]
    assert by_kind["catch"].try_start == code.label(first_invoke.invoke[0]) - parent.start + 1
    assert table.offset % 4 == 0
    assert decode_llvm_clr_table(result.obj, "before") is None   # no EH, no table


def test_resolved_xdata_changes_only_rel32_fields(sample_compiled):
    m = next(m for m in sample_compiled[0] if m.has_eh and m.pads)
    xdata = m.coff.section(".xdata")
    resolved = resolved_xdata(m.coff)
    changed = {i // 4 * 4 for i, (a, b) in enumerate(zip(xdata.data, resolved)) if a != b}
    rel32 = {r.offset for r in xdata.relocations if r.type.name == "REL32"}
    assert changed <= rel32 and len(resolved) == len(xdata.data)


def test_rel32_field_outside_xdata_is_a_backend_error(sample_compiled):
    """A REL32 relocation of .xdata whose field lies past the section's end (a damaged object):
    a bad-llvm-table `BackendError`, not struct's error."""
    m = next(m for m in sample_compiled[0] if m.has_eh and m.pads)
    data = bytearray(m.result.obj)
    raw = structs.CoffFile.parse(bytes(data))
    number, section = next((n, s) for n, s in enumerate(raw.sections)
                           if s.header.name.rstrip(b"\0") == b".xdata")
    first_rel32 = next(i for i, r in enumerate(m.coff.sections[number].relocations) if r.type.name == "REL32")
    at = section.header.pointer_to_relocations + structs.RELOCATION_SIZE * first_rel32
    data[at:at + 4] = (section.header.size_of_raw_data - 2).to_bytes(4, "little")   # VirtualAddress
    with pytest.raises(BackendError) as info:
        resolved_xdata(CoffObject.parse(bytes(data)))
    assert info.value.kind == "bad-llvm-table" and "outside the section" in info.value.reason


_DWORDS = st.integers(0, 0xFFFFFFFF)
_COMPILED_TABLE = compiled_parser(structs.LlvmClrTable)


@st.composite
def _damaged_tables(draw):
    """A table as the declaration builds it, maybe with a few bytes rewritten (a count, the
    sentinel), maybe cut short, maybe with bytes after it."""
    ends = draw(st.lists(_DWORDS, min_size=1, max_size=5))
    clauses = draw(st.lists(st.fixed_dictionaries({name: _DWORDS for name in (
        "flags", "try_start", "try_end", "handler_start", "handler_end", "class_token_or_filter_offset")}),
        max_size=4))
    data = bytearray(structs.LlvmClrTable.build({
        "sentinel": structs.LLVM_CLR_TABLE_SENTINEL, "funclet_count": len(ends) - 1, "ends": ends,
        "clause_count": len(clauses), "clauses": clauses, "end": None}) + draw(st.binary(max_size=8)))
    for at, value in draw(st.lists(st.tuples(st.integers(0, len(data) - 1), st.integers(0, 255)), max_size=2)):
        data[at] = value
    return bytes(data[:draw(st.integers(0, len(data)))]) if draw(st.booleans()) else bytes(data)


@given(_damaged_tables())
def test_the_compiled_table_layout_reads_as_declared(data):
    """`decode_llvm_clr_table` reads `LlvmClrTable` by its compiled form: same values, same errors."""
    assert parse_outcome(_COMPILED_TABLE, data) == parse_outcome(structs.LlvmClrTable.parse, data)
