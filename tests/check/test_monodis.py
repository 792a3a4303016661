"""The monodis cross-check: our instruction offsets, mnemonics and clause lists against
Mono's disassembler, on the embedded sample (every EH method) and on a deterministic sample
of the corpus (every 10th EH method of Python.Runtime and CoreLib); and proof that the
comparison can fail."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.loader import Assembly
from llilc_eh.check import monodis
from llilc_eh.check.monodis import (class_names_agree, compare, crosscheck, names_agree, our_record,
                                    parse_listing)
from llilc_eh.check.toolchain import assemble

SAMPLE = Path(monodis.__file__).resolve().parents[1] / "data" / "sample.dll"


def _assert_clean(report, *, min_methods, min_instructions, min_clauses):
    assert report.ok, "\n".join(map(str, report.mismatches[:20]))
    assert report.methods == report.selected
    assert report.methods >= min_methods
    assert report.instructions >= min_instructions
    assert report.clauses >= min_clauses
    assert not report.monodis_notes


def test_sample_every_eh_method_agrees():
    report = crosscheck(SAMPLE)
    assert report.selected == report.eh_methods        # the whole sample, no filter
    _assert_clean(report, min_methods=20, min_instructions=500, min_clauses=40)


@pytest.mark.parametrize("name, min_methods", [("Python.Runtime.dll", 30),
                                               ("System.Private.CoreLib.dll", 60)])
def test_corpus_sample_agrees(name, min_methods):
    report = crosscheck(Corpus().find(name).location, every=10)
    assert report.selected < report.eh_methods         # monodis ran with --filter
    _assert_clean(report, min_methods=min_methods, min_instructions=30 * min_methods,
                  min_clauses=min_methods)


@pytest.fixture(scope="module")
def sample_records():
    """(ours, monodis') records of every EH method of the sample."""
    asm = Assembly(SAMPLE)
    listing = parse_listing(monodis.run_monodis(SAMPLE).text)
    return [(our_record(asm, rid), listing[rid]) for rid in monodis.eh_methods(asm)]


def test_records_are_not_empty(sample_records):
    kinds = {c.kind for _, theirs in sample_records for c in theirs.clauses}
    assert kinds == {"catch", "filter", "finally", "fault"}
    assert all(theirs.instructions and theirs.code_size for _, theirs in sample_records)
    assert any(c.filter_start is not None for _, t in sample_records for c in t.clauses)


def _perturbed_clause(record, **changes):
    clauses = list(record.clauses)
    clauses[0] = dataclasses.replace(clauses[0], **changes)
    return dataclasses.replace(record, clauses=tuple(clauses))


def test_perturbed_records_are_mismatches(sample_records):
    ours, theirs = next((o, t) for o, t in sample_records if o.clauses[0].kind == "catch")
    assert compare(ours, theirs) == []
    off_by_one = _perturbed_clause(theirs, handler_end=theirs.clauses[0].handler_end + 1)
    [m] = compare(ours, off_by_one)
    assert m.aspect == "clause" and "handler" in m.detail
    assert compare(ours, _perturbed_clause(theirs, try_start=theirs.clauses[0].try_start + 1))
    assert compare(ours, _perturbed_clause(theirs, kind="finally"))
    assert compare(ours, _perturbed_clause(theirs, class_name="System.Object"))
    assert compare(ours, dataclasses.replace(theirs, clauses=theirs.clauses[1:]))
    shifted = ((theirs.instructions[1][0] + 1, theirs.instructions[1][1]),)
    moved = dataclasses.replace(theirs, instructions=theirs.instructions[:1] + shifted + theirs.instructions[2:])
    assert [m.aspect for m in compare(ours, moved)] == ["instructions"]


def test_truncated_listing_is_reported_not_raised():
    text = monodis.run_monodis(SAMPLE).text
    cut = text[:text.index("} { //")]          # inside a method with a filter
    [last] = [r for r in parse_listing(cut).values() if r.problems]
    assert "listing ends inside the method" in last.problems[0]
    asm = Assembly(SAMPLE)
    assert any(m.aspect == "listing" for m in compare(our_record(asm, last.rid), last))
    assert parse_listing("garbage\n    // method line 7\n\t.try { // 3\n") is not None


def test_name_normalisations():
    assert class_names_agree("[netstandard]System.Exception", "[mscorlib]System.Exception")
    assert class_names_agree("[System.Net.Primitives]System.Net.CookieException",
                             "[System]System.Net.CookieException")
    assert class_names_agree("!!0", "0") and class_names_agree("!1", "1")
    assert class_names_agree("Ns.Outer/Inner", "Ns.Outer/Inner")
    assert not class_names_agree("System.Exception", "[mscorlib]System.Exception")
    assert not class_names_agree("[netstandard]System.Exception", "[mscorlib]System.ArgumentException")
    assert not class_names_agree("!!0", "1")
    assert names_agree("Ns.Outer/Inner::M", "Inner::M") and names_agree("Ns.T::.ctor", "T::.ctor")
    assert names_agree("Ns.T::M", "T::<NULL METHOD SIGNATURE>")
    assert not names_agree("Ns.T::M", "T::N") and not names_agree("Ns.T::M", "U::<NULL METHOD SIGNATURE>")


SHARED_TRY = """\
.assembly extern mscorlib {}
.assembly shared_try {}
.class public auto ansi abstract sealed T extends [mscorlib]System.Object
{
  .method public static void M() cil managed
  {
    .maxstack 2
    A0: nop
    B0: nop
        leave.s DONE
    B1: leave.s DONE
    A1: nop
        leave.s DONE
    H0: pop
        leave.s DONE
    H1: pop
        leave.s DONE
    H2: pop
        leave.s DONE
    DONE: ret
    .try A0 to A1 catch [mscorlib]System.ArgumentException handler H0 to H1
    .try B0 to B1 catch [mscorlib]System.Exception handler H1 to H2
    .try A0 to A1 catch [mscorlib]System.Exception handler H2 to DONE
  }
}
"""


def test_try_shared_with_a_non_adjacent_clause(tmp_path):
    """monodis prints a try once, for the first clause that has it (any earlier clause, not
    only the previous one): clause 2 shares clause 0's try across clause 1."""
    il = tmp_path / "shared_try.il"
    il.write_text(textwrap.dedent(SHARED_TRY))
    dll = assemble(il, tmp_path, dll=True)
    report = crosscheck(dll)
    assert report.ok and report.methods == 1 and report.clauses == 3, str(report)
    [record] = parse_listing(monodis.run_monodis(dll).text).values()
    assert [c.shared_try for c in record.clauses] == [False, False, True]


MONODIS_FAILURES = """\
.assembly extern mscorlib {}
.assembly monodis_failures {}
.class public auto ansi abstract sealed T extends [mscorlib]System.Object
{
  .method public static void First() cil managed
  {
    .maxstack 1
    .try { nop leave.s D } finally { endfinally }
    D: ret
  }
  // Mono cannot load the header (the local's type is missing): monodis prints no body.
  .method public static void LocalOfMissingType() cil managed
  {
    .maxstack 1
    .locals init (class [mscorlib]Missing.Thing x)
    .try { nop leave.s D } finally { endfinally }
    D: ret
  }
  // Mono cannot parse the signature: monodis names it <NULL METHOD SIGNATURE>, lists the body.
  .method public static void Takes(class [mscorlib]Missing.Thing t) cil managed
  {
    .maxstack 1
    .try { nop leave.s D } fault { endfinally }
    D: ret
  }
  // Naming the call's target crashes monodis (SIGSEGV after "Could not load signature").
  .method public static void CallsTakes() cil managed
  {
    .maxstack 2
    .try { ldnull call void T::Takes(class [mscorlib]Missing.Thing) leave.s D } finally { endfinally }
    D: ret
  }
  .method public static void Last() cil managed
  {
    .maxstack 1
    .try { nop leave.s D } catch [mscorlib]System.Exception { pop leave.s D }
    D: ret
  }
}
"""


def test_methods_monodis_fails_on_are_reported_not_compared(tmp_path):
    il = tmp_path / "monodis_failures.il"
    il.write_text(MONODIS_FAILURES)
    report = crosscheck(assemble(il, tmp_path, dll=True))
    assert report.ok, str(report)
    assert report.monodis_runs == 2 and "SIGSEGV" in report.monodis_notes[0]
    failed = {m.method.rpartition("::")[2]: m.detail for m in report.not_compared}
    assert set(failed) == {"LocalOfMissingType", "CallsTakes"}
    assert "no body" in failed["LocalOfMissingType"] and "died" in failed["CallsTakes"]
    assert report.methods == 3 and report.selected == 5 and not report.complete
