"""The clause generator and the LLVM differential, over every method of the embedded sample
(our tests/il programs) at O0 and O2, plus hand-made cases.

(a) Call-site identities: the reader marks every call; the model and the machine code agree
    on every marker; every model invoke is found exactly once or LLVM deleted it, and why.
(b) Our tables: valid under all three profiles (LLVM's layout for methods without filters,
    the final image for all), a runtime-style lookup of every call's return address visits
    exactly the model's dispatch chain, and the encoding round-trips.
(c) The differential: equal to LLVM's own table for every method without filters once
    LLVM's quirks are normalised; with filters only the explained `filter-as-catch`.
(d) Hand-made: known shapes (filter, mutual protection, SAMETRY, duplicates, a split try),
    the differential's quirks and differences on small tables, the generator's errors,
    and the corpus tool.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from llilc_eh.assembly.loader import Assembly
from llilc_eh.assembly.native import ClauseFlags, CodeRange, NativeClause, NativeMethod
from llilc_eh.backend.codegen import CodegenPool, object_symbol
from llilc_eh.backend.coff import CoffObject
from llilc_eh.backend.image import FinalImage
from llilc_eh.backend.llvm_table import LlvmClrTable, decode_llvm_clr_table
from llilc_eh.backend.recover import RecoveredCode
from llilc_eh.clauses import validate
from llilc_eh.clauses.differential import compare_with_llvm, llvm_differential
from llilc_eh.clauses.generate import (
    PlacedCall,
    PlacedCode,
    decode_clauses,
    encode_clauses,
    generate_clauses,
    match_call_sites,
    placed_from_image,
    placed_from_recovered,
)
from llilc_eh.cli import sample_path
from llilc_eh.errors import ClauseError
from llilc_eh.funclets import FuncletKind, FuncletModel
from llilc_eh.pipeline import MethodRun, Pipeline

OPT_LEVELS = (0, 2)
PROFILES = ("coreclr-psp", "coreclr-net10", "nativeaot")
REPO = Path(__file__).resolve().parents[2]
_MARKER = re.compile(r'call void asm sideeffect "# llilc\.callsite (\d+)", ""\(\)')
_CALL = re.compile(r"^\s*(?:%\S+ = )?(?:call|invoke) (?!void asm)", re.MULTILINE)

# Invokes LLVM deletes at O2 for a reason other than a folded implicit-exception check: none
# since the reader zero-initialises `.locals init` locals (an undefined local once let LLVM
# fold a compare and delete TryEndsInEndfinally::LoopInOuterTry's inner try).
KNOWN_UNREACHABLE: dict[str, int] = {}


@dataclass
class Compiled:
    """One sample method through the pipeline (`llilc_eh.pipeline`) at one opt level."""

    run: MethodRun

    @property
    def name(self) -> str:
        return self.run.name

    @property
    def module(self) -> str:
        return self.run.reader.module

    @property
    def model(self) -> FuncletModel:
        return self.run.model

    @property
    def has_filter(self) -> bool:
        return any(f.kind is FuncletKind.FILTER for f in self.model.funclets)

    @property
    def coff(self) -> CoffObject:
        return self.run.coff

    @property
    def code(self) -> RecoveredCode:
        return self.run.recovered

    @property
    def image(self) -> FinalImage:
        return self.run.image

    @property
    def table(self) -> LlvmClrTable | None:
        return decode_llvm_clr_table(self.coff, object_symbol(self.model.parent))

    def placed(self, layout: str) -> PlacedCode:
        """"llvm": LLVM's own layout; "clr": the final image."""
        if layout == "llvm":
            return placed_from_recovered(self.model, self.code, self.coff)
        return placed_from_image(self.model, self.image, self.code)


@pytest.fixture(scope="module")
def sample() -> dict[int, list[Compiled]]:
    asm = Assembly(sample_path())
    rids = list(asm.methods_with_il())
    out = {}
    with CodegenPool(4) as pool:
        for opt in OPT_LEVELS:
            runs = Pipeline(asm, pool, opt=opt, differential=False).run_many(rids)
            assert [r.name for r in runs if r.error is not None] == []
            out[opt] = [Compiled(r) for r in runs]
    return out


def eh_methods(sample, opt):
    return [m for m in sample[opt] if m.model.states]


# --- (a) call-site identities ----------------------------------------------------------------


def test_the_reader_marks_every_call(sample):
    for m in sample[0]:
        for function in m.module.split("\ndefine ")[1:]:
            lines = function.splitlines()
            marks = [int(x.group(1)) for x in map(_MARKER.search, lines) if x]
            calls = [k for k, line in enumerate(lines) if _CALL.match(line) and "@llvm." not in line]
            assert sorted(marks) == list(range(len(marks))), m.name          # 0..n-1, once each
            assert len(calls) == len(marks), m.name
            for k in calls:                                                   # right before its call
                assert _MARKER.search(lines[k - 1]), (m.name, lines[k])
        assert all(c.callsite is not None for c in m.model.calls), m.name
        assert len({c.callsite for c in m.model.calls}) == len(m.model.calls)


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_every_model_invoke_is_found_exactly_once(sample, opt):
    unreachable, checks, merged = Counter(), 0, 0
    for m in sample[opt]:
        match = match_call_sites(m.model, m.code)
        assert match.problems == (), m.name
        for c in m.model.invokes:
            if c.callsite in match.deleted:
                reason = match.deleted[c.callsite]
                assert opt == 2, f"{m.name}: LLVM deleted {c.where} at O0: {reason}"
                if reason.startswith("check-folded"):
                    checks += 1
                else:
                    assert reason.startswith("unreachable"), reason
                    unreachable[m.name] += 1
            elif opt == 0:
                assert len(match.found[c.callsite]) == 1, f"{m.name}: {c.where} is in the code more than once"
            else:   # O2 may clone a call (loop unrolling, tail duplication): every copy is accounted for
                copies = match.found[c.callsite]
                assert len(copies) == 1 or match.duplicated.get(c.callsite) == copies, f"{m.name}: {c.where}"
        if opt == 0:
            assert not match.deleted and not match.merged and not match.duplicated, m.name
        merged += len(match.merged)
    assert dict(unreachable) == ({} if opt == 0 else KNOWN_UNREACHABLE)
    if opt == 2:
        assert checks >= 1 and merged >= 1     # LLVM folds checks and tail-merges throw calls here


def test_a_tail_merged_call_carries_both_markers(sample):
    # Tests.MultiCatch.Program::Throw at O2: two `throw` paths share one `call CORINFO_HELP_THROW`.
    m = next(m for m in sample[2] if m.name.endswith("MultiCatch.Program::Throw"))
    merged = [s for f in m.code.functions for s in f.calls if len(s.callsites) > 1]
    assert merged and all(s.callee == "CORINFO_HELP_THROW" for s in merged)
    assert "#" in str(merged[0])


# --- (b) our tables ---------------------------------------------------------------------------


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_our_tables_are_valid_for_every_profile(sample, opt):
    for m in eh_methods(sample, opt):
        for layout in ("llvm", "clr"):
            if layout == "llvm" and m.has_filter:
                continue        # LLVM puts the filter function after all funclets: no filter clause fits
            placed = m.placed(layout)
            for profile in PROFILES:
                native = generate_clauses(m.model, placed, profile)
                findings = validate(native, profile)
                assert findings == [], f"{m.name} O{opt} {layout} {profile}:\n" + "\n".join(map(str, findings))


def _expected_chain(m: Compiled, call) -> list[int]:
    """Handler starts, in dispatch order, for a placed call (the model's chain, less the
    cleanups LLVM removed)."""
    c = next(c for c in m.model.calls if c.callsite == call.callsite)
    return [s.funclet for s in m.model.protecting(c)]


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_a_runtime_lookup_of_every_return_address_visits_the_dispatch_chain(sample, opt):
    """CoreCLR's lookup: the clauses covering the return address, in table order, primaries
    first (the frame's own tries), then duplicates (a funclet's enclosing tries)."""
    for m in eh_methods(sample, opt):
        placed = m.placed("clr")
        native = generate_clauses(m.model, placed)
        handler_of = {r.start: i for i, r in placed.funclet_ranges.items()}
        filters = [r for i, r in placed.funclet_ranges.items() if m.model.funclets[i].kind is FuncletKind.FILTER]
        for call in placed.calls:
            if call.callsite is None or any(r.start <= call.start < r.end for r in filters):
                continue
            got = [handler_of[c.handler_start] for c in native.clauses
                   if c.try_start <= call.return_address < c.try_end]
            want = [f for f in _expected_chain(m, call) if f in placed.funclet_ranges]
            assert got == want, f"{m.name} O{opt}: call #{call.callsite} at {call.start:#x}"


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_the_handlers_of_one_try_stay_together(sample, opt):
    """Mutual protection: the primaries of one IL try's handlers are consecutive, in handler
    order, and (net10, nativeaot) each after the first carries SAMETRY -- even when a try
    nested in one of those handlers must come before it (Tests.MutualProtect::Run)."""
    groups = 0
    for m in eh_methods(sample, opt):
        placed = m.placed("clr")
        funclet_at = {r.start: i for i, r in placed.funclet_ranges.items()}
        for profile in ("coreclr-net10", "nativeaot"):
            clauses = [c for c in generate_clauses(m.model, placed, profile).clauses if not c.is_duplicate]
            states = [m.model.funclets[funclet_at[c.handler_start]].state for c in clauses]
            by_try = {}
            for k, (c, st) in enumerate(zip(clauses, states)):
                shared = m.model.states[st].try_states
                if len(shared) > 1:
                    by_try.setdefault((c.try_start, c.try_end, tuple(sorted(shared))), []).append(k)
            for (_, _, shared), ks in by_try.items():
                groups += 1
                where = f"{m.name} O{opt} {profile}: clauses {ks}"
                assert ks == list(range(ks[0], ks[0] + len(ks))), where
                assert [states[k] for k in ks] == [s for s in m.model.states[states[ks[0]]].try_states
                                                   if s in {states[k] for k in ks}], where
                assert [ClauseFlags.SAMETRY in clauses[k].flags for k in ks] == [False] + [True] * (len(ks) - 1), where
    assert groups >= 4


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_encoding_round_trips(sample, opt):
    for m in eh_methods(sample, opt):
        native = generate_clauses(m.model, m.placed("clr"), "nativeaot")
        data = encode_clauses(native)
        assert len(data) == 24 * len(native.clauses)
        assert data == b"".join(c.build() for c in native.clauses)
        assert decode_clauses(data) == native.clauses
    with pytest.raises(ClauseError):
        decode_clauses(b"\0" * 25)


# --- (c) the differential ---------------------------------------------------------------------


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_equal_to_llvms_table_without_filters(sample, opt):
    quirks = Counter()
    for m in eh_methods(sample, opt):
        d = llvm_differential(m.model, m.code, m.coff)
        quirks.update(d.quirks)
        if m.has_filter:
            assert not d.unexplained, f"{m.name} O{opt}\n{d}"
            assert {x.reason for x in d.differences} == {"filter-as-catch"}, f"{m.name} O{opt}\n{d}"
        else:
            assert d.clean, f"{m.name} O{opt}\n{d}"
    # The quirks the sample shows at every level (the rest are counted by the corpus tool).
    assert {"try-plus-one", "handler-end-padding", "duplicate-runs", "split-try", "walk-order"} <= set(quirks)


# --- (d) known shapes -------------------------------------------------------------------------


def _method(sample, opt, suffix) -> Compiled:
    return next(m for m in sample[opt] if m.name.endswith(suffix))


def test_catch_filter_catch(sample):
    m = _method(sample, 0, "CatchAndFilter.Program::CatchFilterCatch")
    placed = m.placed("clr")
    native = generate_clauses(m.model, placed)
    catch0, filt, catch2 = native.clauses
    assert [c.kind for c in native.clauses] == ["catch", "filter", "catch"]
    assert (catch0.class_token, catch2.class_token) == (0x01000003, 0x01000002)
    assert filt.flags == ClauseFlags.FILTER
    handler = next(f for f in m.model.funclets if f.kind is FuncletKind.FILTER_HANDLER)
    assert filt.filter_start == placed.funclet_ranges[handler.filter].start
    assert placed.funclet_ranges[handler.filter].end == filt.handler_start
    assert len({(c.try_start, c.try_end) for c in native.clauses}) == 1          # one try, mutual protection
    # SAMETRY for the modern runtimes, not for the 3.1 one.
    for profile, flags in (("coreclr-psp", 0), ("coreclr-net10", 0x10), ("nativeaot", 0x10)):
        cs = generate_clauses(m.model, placed, profile).clauses
        assert [c.flags & 0x10 for c in cs] == [0, flags, flags], profile


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_duplicates_cover_whole_funclets(sample, opt):
    for m in eh_methods(sample, opt):
        placed = m.placed("clr")
        psp = generate_clauses(m.model, placed)
        funclets = {(r.start, r.end) for r in placed.funclet_ranges.values()}
        dups = [c for c in psp.clauses if c.is_duplicate]
        assert all((c.try_start, c.try_end) in funclets for c in dups), m.name
        first_dup = next((i for i, c in enumerate(psp.clauses) if c.is_duplicate), len(psp.clauses))
        assert all(c.is_duplicate for c in psp.clauses[first_dup:])
        aot = generate_clauses(m.model, placed, "nativeaot")
        assert [c for c in aot.clauses if c.is_duplicate] == []
        assert len(aot.clauses) == first_dup
    m = _method(sample, 0, "TryInCatch.Program::Nested")
    assert any(c.is_duplicate for c in generate_clauses(m.model, m.placed("clr")).clauses)


def test_a_split_try_gets_a_clause_per_run_as_in_llvm(sample):
    # At O0 LLVM keeps the IR's block order, which puts the normal-path copy of the finally
    # (whose calls the finally does not protect) between the two halves of its try.
    m = _method(sample, 0, "TryInFinally.Program::Run")
    ours = [c for c in generate_clauses(m.model, m.placed("llvm")).clauses if not c.is_duplicate]
    theirs = [c for c in m.table.clauses if not c.is_duplicate]
    def parts(table):
        return sorted(Counter(c.handler_start for c in table).values())
    assert max(parts(ours)) == 2 and parts(ours) == parts(theirs)


def test_empty_cleanups_llvm_removed_drop_out_of_the_chains(sample):
    # Tests.LocalsInHandlers.Program::Counter at O2: the finally only updates a dead local;
    # LLVM deletes the cleanup and the catchswitch unwinds past it.
    m = _method(sample, 2, "LocalsInHandlers.Program::Counter")
    placed = m.placed("llvm")
    finally_ = next(f for f in m.model.funclets if f.kind is FuncletKind.FINALLY)
    assert finally_.index not in placed.funclet_ranges
    native = generate_clauses(m.model, placed)
    # The fault, the filter, and the filter's duplicate over the fault funclet; no finally.
    assert [(c.kind, c.is_duplicate) for c in native.clauses] == [("fault", False), ("filter", False),
                                                                  ("filter", True)]


# --- (d) the generator's errors ---------------------------------------------------------------


def test_generator_refuses_what_it_cannot_make_sound(sample):
    m = _method(sample, 0, "TryCatch.Program::Local")
    placed = m.placed("llvm")
    invokes = [c for c in placed.calls if any(x.callsite == c.callsite and x.invoke for x in m.model.calls)]
    plain = next(c for c in placed.calls if not any(x.callsite == c.callsite and x.invoke for x in m.model.calls))
    with pytest.raises(ClauseError, match="names no call"):
        generate_clauses(m.model, dataclasses.replace(placed, calls=(*placed.calls, PlacedCall(999, 1, 2))))
    merged = PlacedCall(plain.callsite, invokes[0].start, invokes[0].return_address)
    with pytest.raises(ClauseError) as e:
        generate_clauses(m.model, dataclasses.replace(placed, calls=(*placed.calls, merged)))
    assert e.value.kind in ("merged-calls-disagree", "callsite-region")
    catch = next(i for i in placed.funclet_ranges if m.model.funclets[i].kind is FuncletKind.CATCH)
    no_handler = {i: r for i, r in placed.funclet_ranges.items() if i != catch}
    with pytest.raises(ClauseError, match="no code"):
        generate_clauses(m.model, dataclasses.replace(placed, funclet_ranges=no_handler))
    outside = PlacedCall(None, placed.main.end + 0x1000, placed.main.end + 0x1005)
    with pytest.raises(ClauseError, match="no code range"):
        generate_clauses(m.model, dataclasses.replace(placed, calls=(*placed.calls, outside)))


# --- (d) the differential on small tables -------------------------------------------------------

MAIN, H1, H2 = CodeRange(0, 0x40), CodeRange(0x40, 0x5d), CodeRange(0x60, 0x80)
RETS = [0x10, 0x20, 0x30, 0x48]          # three calls in the main body, one in H1


def _c(flags, t, h, token=0):
    return NativeClause(ClauseFlags(flags), t[0], t[1], h.start, h.end, token)


OURS = NativeMethod(MAIN, (H1, H2), (
    _c(0, (0x0c, 0x21), H1, 0x01000001),          # calls at 0x10 and 0x20 -> H1
    _c(2, (0x0c, 0x31), H2),                      # all three -> H2 (finally)
    _c(2 | 8, (H1.start, H1.end), H2),            # H1 lies in the finally's try
))


def test_differential_normalises_llvms_quirks():
    llvm = [
        _c(0, (0x09, 0x24), CodeRange(0x40, 0x60), 0x01000001),   # labels + 1, handler end padded to 0x60
        _c(2 | 8, (0x45, 0x4b), H2),                              # LLVM's duplicate: the invoke run only
        _c(2, (0x09, 0x35), H2),                                  # a primary after a duplicate
    ]
    d = compare_with_llvm(OURS, llvm, RETS)
    assert d.clean, str(d)
    assert {"try-plus-one", "handler-end-padding", "primary-after-duplicate", "duplicate-runs"} <= set(d.quirks)


def test_differential_classifies_what_remains():
    missing = [_c(0, (0x09, 0x24), H1, 0x01000001)]
    d = compare_with_llvm(OURS, missing, RETS)
    assert {x.reason for x in d.differences} == {"missing-in-llvm", "duplicate-coverage"}
    assert d.classification == "unexplained"
    narrower = [_c(0, (0x09, 0x14), H1, 0x01000001), _c(2, (0x09, 0x35), H2), _c(2 | 8, (0x45, 0x4b), H2)]
    assert [x.reason for x in compare_with_llvm(OURS, narrower, RETS).differences] == ["coverage"]
    other_token = [_c(0, (0x09, 0x24), H1, 0x01000002), _c(2, (0x09, 0x35), H2), _c(2 | 8, (0x45, 0x4b), H2)]
    assert [x.reason for x in compare_with_llvm(OURS, other_token, RETS).differences] == ["token"]
    # LLVM split a run at a call that raises nothing here (a tail jump at 0x25): a quirk when
    # the tail jump is known, an unexplained split otherwise.
    split = [_c(0, (0x09, 0x14), H1, 0x01000001), _c(0, (0x1c, 0x24), H1, 0x01000001),
             _c(2, (0x09, 0x35), H2), _c(2 | 8, (0x45, 0x4b), H2)]
    assert [x.reason for x in compare_with_llvm(OURS, split, RETS).differences] == ["split-run"]
    assert compare_with_llvm(OURS, split, RETS, quiet_calls=[0x15]).clean
    # A filter clause of ours is a catch with token 0 in LLVM's table: explained.
    ours = dataclasses.replace(OURS, clauses=(_c(1, (0x0c, 0x21), H1, 0x41), *OURS.clauses[1:]))
    theirs = [_c(0, (0x09, 0x24), H1, 0), _c(2, (0x09, 0x35), H2), _c(2 | 8, (0x45, 0x4b), H2)]
    d = compare_with_llvm(ours, theirs, RETS)
    assert [x.reason for x in d.differences] == ["filter-as-catch"] and d.classification == "explained"


# --- the corpus tool --------------------------------------------------------------------------


def test_the_corpus_tool_runs():
    out = subprocess.run([sys.executable, str(REPO / "tools" / "llvm_differential.py"), "Python.Runtime.dll",
                          "--limit", "12", "--opt", "2", "--jobs", "2"], capture_output=True, text=True,
                         check=True, timeout=300).stdout
    assert "12 EH methods, 12 compared at O2" in out
    assert "UNEXPLAINED" not in out and "failures: none" in out
