"""The installer's layout on real pipeline output (linux-x64), without a runtime: what it
writes where, checked by decoding the bytes again -- cells hold the values given, every
call site that needs our stub reaches it and the stub jumps through the cell it names,
the other calls are left to recordRelocation with the right delta; the damaged clause
table of the negative control differs exactly in the try ends."""

from __future__ import annotations

import struct

import capstone
import pytest

from llilc_eh.assembly.loader import Assembly
from llilc_eh.backend.codegen import CodegenPool
from llilc_eh.backend.coff import RelocationType
from llilc_eh.clauses.generate import decode_clauses
from llilc_eh.pipeline import Pipeline
from llilc_eh.reader.translate import Options
from llilc_eh.gcinfo import ReturnKind, decode
from llilc_eh.runtime.install import (CallTarget, damaged, gc_info, lay_out, make_room_for_stubs, uncovered,
                                      unwind_records)
from llilc_eh.runtime.service import Declined
from llilc_eh.runtime.structs import InfoAccessType
from llilc_eh.target import LINUX_X64

METHOD = "Tests.TryCatch.Program::Local"     # calls, helpers, string and class cells


@pytest.fixture(scope="module")
def local_run(il_programs):
    asm = Assembly(il_programs["try_catch"])
    with CodegenPool(1) as pool:
        run = Pipeline(asm, pool, opt=2, options=Options(target=LINUX_X64)).run(asm.find_method(METHOD).rid)
    assert run.error is None
    return run


def _fake_resolution(run, pvalue: set[str]):
    """Distinct made-up addresses: cells get 0x1111_0000_0000 + i, calls 0x2222_0000_0000 + i."""
    externals = run.reader.externals
    values, calls = {}, {}
    for i, symbol in enumerate(sorted({r.symbol for r in run.image.relocations})):
        if externals[symbol].is_call:
            access = InfoAccessType.IAT_PVALUE if symbol in pvalue else InfoAccessType.IAT_VALUE
            calls[symbol] = CallTarget(symbol, access, 0x2222_0000_0000 + i)
        else:
            values[symbol] = 0x1111_0000_0000 + i
    return values, calls


def test_cells_hold_the_values(local_run):
    values, calls = _fake_resolution(local_run, set())
    layout = lay_out(local_run, values, calls)
    cells = [r for r in local_run.image.relocations if r.type == RelocationType.ADDR64]
    assert cells and {r.symbol for r in cells} == set(values)
    for r in cells:
        assert struct.unpack_from("<Q", layout.blob, r.offset)[0] == values[r.symbol]
    assert layout.code_size == len(local_run.image.code)


def test_value_calls_go_to_record_relocation(local_run):
    values, calls = _fake_resolution(local_run, set())
    layout = lay_out(local_run, values, calls)
    sites = {r.offset: r for r in local_run.image.relocations if r.symbol in calls}
    assert sites and not layout.stubs
    assert {(off, calls[sites[off].symbol].address, sites[off].addend) for off in sites} == set(layout.relocations)


def test_pvalue_calls_reach_a_stub_that_jumps_through_the_cell(local_run):
    """A stub is the method's code: right after the image's code, before the read-only data
    (the image linked again with room for it), inside `code_size` and under a leaf
    RUNTIME_FUNCTION of its own, reported last -- the runtime may interrupt a thread there."""
    symbol = next(s for s, e in local_run.reader.externals.items() if e.kind == "method")
    values, calls = _fake_resolution(local_run, {symbol})
    roomy = make_room_for_stubs(local_run, calls)
    image, before = roomy.image, local_run.image
    assert (len(image.code), image.ranges, image.runtime_functions) == \
        (len(before.code), before.ranges, before.runtime_functions)
    assert image.read_only_data_offset > before.read_only_data_offset and not image.verify()
    # only the code's references to the read-only data (cells included) changed
    to_data = {i for f in image.fixups if f.site < len(image.code) and f.target >= image.read_only_data_offset
               for i in range(f.site, f.site + f.size)}
    differ = {i for i in range(len(image.code)) if image.code[i] != before.code[i]}
    assert differ and differ <= to_data
    layout = lay_out(roomy, values, calls)
    stub = layout.stubs[symbol]
    assert len(image.code) <= stub < stub + 12 == layout.code_size <= image.read_only_data_offset
    assert stub % 16 == 0 and layout.stub_range == (stub, stub + 12)
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    insns = list(md.disasm(bytes(layout.blob[stub:stub + 12]), stub))
    assert [(i.mnemonic, i.op_str) for i in insns] == [("movabs", f"rax, 0x{calls[symbol].address:x}"),
                                                      ("jmp", "qword ptr [rax]")]
    for r in image.relocations:
        if r.symbol == symbol:
            field = struct.unpack_from("<i", layout.blob, r.offset)[0]
            assert r.offset + 4 + field - r.addend == stub       # call rel32 lands on the stub
        elif r.type == RelocationType.ADDR64:                     # cells moved with the read-only data
            assert struct.unpack_from("<Q", layout.blob, r.offset)[0] == values[r.symbol]
    assert all(target != calls[symbol].address for _, target, _ in layout.relocations)
    records = unwind_records(roomy, layout)
    last = records[-1]
    assert (last.start, last.end, last.funclet, last.info.prolog_size, last.info.codes) == (stub, stub + 12, None, 0, ())
    assert uncovered(layout, records) == []
    gc = decode(gc_info(roomy, ReturnKind.OBJECT, code_length=layout.code_size))
    assert gc.code_length == layout.code_size


def test_a_stub_without_room_or_entry_is_caught(local_run):
    """Negative controls: the image as the pipeline linked it has no room before its read-only
    data -- laying a stub out there is a decline, not a stub over the data; and a stub whose
    RUNTIME_FUNCTION is left out is code no entry holds (what crashed the runtime)."""
    symbol = next(s for s, e in local_run.reader.externals.items() if e.kind == "method")
    values, calls = _fake_resolution(local_run, {symbol})
    with pytest.raises(Declined, match="no room for 1 call stub"):
        lay_out(local_run, values, calls)
    roomy = make_room_for_stubs(local_run, calls)
    layout = lay_out(roomy, values, calls)
    stub = layout.stubs[symbol]
    assert uncovered(layout, roomy.unwind_records()) == list(range(stub, stub + 12))


def test_damaged_table_moves_every_try_end_by_one(local_run):
    good = decode_clauses(local_run.clause_bytes)
    bad = decode_clauses(damaged(local_run.clause_bytes, "try-end-short"))
    assert [c.try_end - 1 for c in good] == [c.try_end for c in bad]
    assert [(c.try_start, c.handler_start, c.handler_end) for c in good] == \
        [(c.try_start, c.handler_start, c.handler_end) for c in bad]
    assert damaged(local_run.clause_bytes, None) == local_run.clause_bytes


def test_gc_info_covers_the_code_and_not_the_read_only_data(local_run):
    """The GC info's code length is the image's code -- main body, funclets, thunks (and the
    probe when placed; our call stubs when there are any, test above) -- not the read-only data
    after it."""
    from llilc_eh.gcinfo import ReturnKind, decode
    from llilc_eh.runtime.install import gc_info
    image = local_run.image
    values, calls = _fake_resolution(local_run, pvalue=set())
    layout = lay_out(local_run, values, calls)
    info = decode(gc_info(local_run, ReturnKind.OBJECT))
    assert info.code_length == len(image.code) == layout.code_size
    assert image.read_only_data and len(layout.blob) > info.code_length      # there is more, not counted
    assert max(r.end for r in image.ranges) <= info.code_length
    assert info.psp_sym_offset == image.filter_constants.psp_slot_offset
    assert info.return_kind == ReturnKind.OBJECT


def test_gc_info_the_encoder_refuses_is_a_decline(local_run, monkeypatch):
    """A GcInfoError is one method's recorded decline (the service records any Declined), not a
    crash of the compile."""
    import llilc_eh.gcinfo as gcinfo
    from llilc_eh.runtime.install import gc_info
    from llilc_eh.runtime.service import Declined

    def refuse(*args, **kw):
        raise gcinfo.GcInfoError("refused for the test", kind="unencodable-gcinfo")
    monkeypatch.setattr(gcinfo, "for_method", refuse)
    with pytest.raises(Declined, match=r"\[gcinfo/unencodable-gcinfo\] .*refused for the test"):
        gc_info(local_run)
