"""The oracle: RyuJIT's own GC info in the ReadyToRun images of the corpus.

Every decoded GC info must describe its body (code length of main + funclets, safe points
inside the code, a PSPSym exactly when there are funclets, RBP as stack base register) and
re-encode byte for byte. Negative controls show that each check can fail: GC info read from
the wrong place breaks the invariants, a non-canonical encoding does not round-trip.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.r2r import ReadyToRunImage
from llilc_eh.gcinfo import GcInfo, GcInfoError, decode, decode_sized, for_method
from llilc_eh.gcinfo.__main__ import main
from llilc_eh.gcinfo.bitstream import BitWriter
from llilc_eh.gcinfo.r2r import gc_info_bytes, round_trip, survey_image, violations

SMALL_R2R = "System.IO.Compression.Brotli.dll"
SAMPLE_STRIDE = 9   # CoreLib: every body with EH, and every 9th of the others


@pytest.fixture(scope="module")
def corelib() -> ReadyToRunImage:
    return ReadyToRunImage.open(Corpus().find("System.Private.CoreLib.dll").location)


@pytest.fixture(scope="module")
def corelib_sample(corelib):
    eh = {m.rva for m in corelib.methods(eh_only=True)}
    picked = [m for n, m in enumerate(corelib.methods()) if m.rva in eh or n % SAMPLE_STRIDE == 0]
    return [(m, gc_info_bytes(corelib, m)) for m in picked]


def test_corelib_sample_decodes_holds_and_round_trips(corelib_sample):
    decoded = same = 0
    problems = []
    for method, data in corelib_sample:
        info, size = decode_sized(data)
        decoded += 1
        bad = violations(info, method)
        if bad:
            problems.append(f"0x{method.rva:X}: {bad}")
        ok, _ = round_trip(data, info, size)
        same += ok
        if not ok:
            problems.append(f"0x{method.rva:X}: not byte-identical")
    assert decoded > 4000
    assert not problems, problems[:10]
    assert same == decoded


def test_every_funclet_body_reports_psp_sym_report_only_leaf_and_rbp(corelib_sample):
    funclet_infos = [decode(data) for m, data in corelib_sample if m.funclets]
    assert len(funclet_infos) >= 1200     # CoreLib: 1,254 bodies with EH, all with funclets
    for info in funclet_infos:
        assert info.psp_sym_offset is not None and info.psp_sym_offset >= 0
        assert info.wants_report_only_leaf
        assert info.stack_base_register == 5
        # the PSPSym sits right above the outgoing argument area (Initial-SP relative)
        assert info.psp_sym_offset == info.size_of_stack_area


def test_corelib_sample_exercises_every_part_of_the_format(corelib_sample):
    infos = [decode(data) for _, data in corelib_sample]
    assert any(i.slim for i in infos) and any(not i.slim for i in infos)
    assert any(i.safe_points for i in infos)
    assert any(i.interruptible_ranges and any(c is not None for c in i.chunks) for i in infos)
    assert any(i.live_sets and len(i.live_sets) < len(i.safe_points) for i in infos)   # shared live sets
    assert any(i.num_untracked for i in infos)
    assert any(i.gs_cookie_offset is not None and i.epilog_size is not None for i in infos)
    assert any(i.generics_inst_context is not None and i.prolog_size for i in infos)
    assert any(any(s.is_register for s in i.slots) for i in infos)
    # RyuJIT never mixes call sites and interruptible ranges in one method
    assert not any(i.safe_points and i.interruptible_ranges for i in infos)


SYSV_CALLEE_SAVED = {3, 5, 12, 13, 14, 15}   # RBX, RBP, R12-R15: what survives a call on Linux x64


def test_registers_live_across_calls_are_callee_saved(corelib_sample):
    """A semantic check of the decoded live sets and register numbers: at a call's return
    address only a register the callee must preserve can still hold a live reference (RAX,
    the returned one, too). Control: fully interruptible code, where references live in any
    register between calls, does name volatile registers — the check can fail."""
    checked = volatile_in_fully_interruptible = 0
    for _, data in corelib_sample:
        info = decode(data)
        for point in info.safe_points:
            for slot in info.live_slots(point):
                s = info.slots[slot]
                if s.is_register:
                    checked += 1
                    assert s.register in SYSV_CALLEE_SAVED | {0}, (info, point, s)
        if info.interruptible_ranges:
            volatile_in_fully_interruptible += sum(s.is_register and s.register not in SYSV_CALLEE_SAVED | {0}
                                                   for s in info.slots)
    assert checked > 5000
    assert volatile_in_fully_interruptible > 100


def test_live_slots_in_fully_interruptible_code(corelib_sample):
    """Within interruptible code the chunk decoding gives, at the last offset of each chunk
    with a pointer, exactly the chunk's final states (no transition can follow it)."""
    seen = 0
    for _, data in corelib_sample:
        info = decode(data)
        if not info.chunks:
            continue
        starts = []
        covered = 0
        for start, stop in info.interruptible_ranges:
            starts.append((covered, start, stop))
            covered += stop - start
        for k, chunk in enumerate(info.chunks):
            last = min((k + 1) * 64, covered) - 1
            code = next(start + last - c for c, start, stop in starts if c <= last < c + stop - start)
            if chunk is not None:
                assert info.live_slots(code) == chunk.final_live
                seen += 1
        assert info.live_slots(info.code_length) is None
    assert seen > 1000


def test_small_image_survey_is_clean():
    s = survey_image(Corpus().find(SMALL_R2R).location)
    assert s.bodies == s.decoded > 0
    assert (s.decode_errors, s.violations, s.not_round_tripped) == (0, 0, 0)
    assert s.round_tripped == s.distinct
    assert s.report_only_leaf_with_funclets == s.with_funclets


# ============================================================== negative controls

def test_gc_info_read_from_the_wrong_place_breaks_the_invariants(corelib, corelib_sample):
    """Forgetting the personality routine RVA after UNWIND_INFO (reading 4 bytes early) must
    be caught by the invariants: the harness can fail."""
    caught = 0
    for method, _ in corelib_sample[:300]:
        unwind = corelib.unwind_bytes(method.main.unwind_rva)
        early = unwind[(4 + 2 * unwind[2] + 3) & ~3:]     # no room for the personality RVA
        try:
            info = decode(early)
        except GcInfoError:
            caught += 1
            continue
        caught += bool(violations(info, method))
    assert caught >= 295


def test_invariants_catch_a_wrong_code_length_and_a_missing_psp_sym(corelib_sample):
    method, data = next((m, d) for m, d in corelib_sample if m.funclets)
    info = decode(data)
    assert violations(info, method) == []
    assert violations(replace(info, code_length=info.code_length - 1), method)
    assert violations(replace(info, psp_sym_offset=None), method)
    assert violations(replace(info, safe_points=(info.code_length,)), method)


def test_a_non_canonical_encoding_does_not_round_trip():
    """The same header with code length 0x41 written in two 9-bit chunks (0x41, "more", 0):
    the runtime decodes it alike, RyuJIT would never write it, and round_trip says so."""
    w = BitWriter()
    w.bits(0, 1)
    w.bits(0, 1)
    w.bits(0, 2)
    w.bits(0x41 | 0x100, 9)
    w.bits(0, 9)
    w.var_unsigned(0, 2)
    w.bits(0, 2)
    data = w.to_bytes()
    assert decode(data) == GcInfo(code_length=0x41)
    assert round_trip(data) == (False, for_method(0x41, None, None, False))


# ============================================================== command line

def test_command_line_exit_codes(capsys):
    assert main([SMALL_R2R]) == 0
    assert "round trip" in capsys.readouterr().out
    assert main(["mscorlib.dll"]) == 1        # IL-only facade: not a ReadyToRun image
    assert main(["no-such-assembly.dll"]) == 1
    assert main([]) == 1
