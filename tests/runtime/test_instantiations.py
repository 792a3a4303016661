"""Code per exact generic instantiation compiled by llilc-eh (runtime/instantiation.py): the
runtime asks for `Pair<int>::Pick`, `Pair<long>::Pick`, `Describe<double>`, `Growing<Measure>::Add`,
an iterator's MoveNext over int and long, `Registry<int>::Note` with statics of its own ... each
its own code in which !0 / !!0 are known; the reader binds them (JitEE.bind_instantiation) and
the installer resolves every token in the method's own exact context.

Oracle: the same program with RyuJIT only (tests/runtime/programs/instantiations.cs). Each
instantiation must be compiled *by us* (the report's `instantiation` names them one by one).
Negative control: damage "instantiation-int64" binds every int32 type argument as int64 in the
reader while the runtime runs the int32 code -- with metadata layouts Pair<int>'s B is then read
at the wrong offset, and the output changes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llilc_eh.check.toolchain import compile_cs, run_on_coreclr

PROGRAM = Path(__file__).resolve().parent / "programs" / "instantiations.cs"
LINQ = Path(__file__).resolve().parent / "programs" / "instantiations_linq.cs"
#: every exact instantiation of the program's own generic code the runtime asks for
INSTANTIATIONS = {
    "Pair`1<int32>::Pick", "Pair`1<int64>::Pick", "Pair`1<uint8>::Pick", "Pair`1<Measure>::Pick",
    "Pair`1<Named>::Pick", "Program::Describe<Named>", "Program::Second<Named>",
    "Program::Describe<int32>", "Program::Describe<int64>", "Program::Describe<Measure>",
    "Program::Describe<float64>", "Program::Describe<uint8>",
    "Program::Second<int32>", "Program::Second<uint8>", "Program::Second<Measure>",
    "Growing`1<int32>::Add", "Growing`1<Measure>::Add", "Growing`1<int32>::Get", "Growing`1<Measure>::Get",
    "Program/<Checked>c__Iterator0`1<int32>::MoveNext", "Program/<Checked>c__Iterator0`1<int64>::MoveNext",
    "Registry`1<int32>::Note", "Registry`1<Measure>::Note", "Registry`1<int64>::Note",
    # generic value types as arguments; unbox.any of a Nullable (null -> no value: UNBOX_NULLABLE)
    "Program::Unbox<System.Nullable`1<int32>>", "Program::Unbox<System.Nullable`1<int64>>", "Program::Unbox<int32>",
    "Program::Describe<System.Nullable`1<int32>>", "Program::Describe<System.Collections.Generic.KeyValuePair`2<int32,int64>>",
    # nested value types: Left/Item and Right/Item (one name), List<int>'s Enumerator (CoreLib has nine)
    "Program::Describe<Left/Item>", "Program::Describe<Right/Item>",
    "Program::Describe<System.Collections.Generic.List`1/Enumerator<int32>>",
}
FRAMEWORK_INSTANTIATIONS = {
    "System.String::JoinCore<int32>", "System.Linq.Enumerable::Count<int32>",
    "System.Linq.Enumerable::TryGetFirst<int32>", "System.Collections.Generic.LinkedList`1<int32>::.ctor",
    "System.Linq.Lookup`2<int32,int32>::Create", "System.Collections.Generic.GenericArraySortHelper`1<Ordered>::Sort",
}
CONFIGS = {"O0": dict(opt=0), "O2": dict(opt=2), "O2-clone": dict(opt=2, clone_finally=True),
           "O2-metadata": dict(opt=2, jitee="metadata")}


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    exe = compile_cs(PROGRAM, tmp_path_factory.mktemp("inst") / "instantiations.exe", "-optimize+")
    return exe, run_on_coreclr(exe)


def _compiled(report) -> dict[str, dict]:
    return {c["instantiation"]: c for c in report["compiled"] if c.get("instantiation")}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_exact_instantiations_equal_ryujit(program, run_captured, config):
    exe, oracle = program
    assert "Pick: 3 4 -6 201 20u2" in oracle.stdout     # the program does what it says
    out = run_captured(exe, **CONFIGS[config])
    assert out.stdout.decode() == oracle.stdout, out.stderr.decode()[-3000:]
    assert out.exit_code == oracle.returncode == 0
    compiled = _compiled(out.report)
    assert set(compiled) == INSTANTIATIONS, out.stderr.decode()[-3000:]
    assert out.report["declined"] == [], out.report["declined"]
    # one body per instantiation of one definition: Pick's MethodDef, compiled five times
    picks = [c for c in out.report["compiled"] if c["method"] == "Pair`1::Pick"]
    assert len(picks) == 5 and len({c["token"] for c in picks}) == 1


def test_selected_by_name(program, run_captured):
    """--methods on the definition's name selects every instantiation of it, none declined."""
    exe, oracle = program
    out = run_captured(exe, methods=["Pair`1::Pick"])
    assert out.stdout.decode() == oracle.stdout
    assert out.exit_code == 0 and out.report["declined"] == []
    assert set(_compiled(out.report)) == {n for n in INSTANTIATIONS if n.startswith("Pair`1<")}


def test_one_instantiation_selected_by_its_name(program, run_captured):
    """--methods on an instantiation's name selects that one alone: the other instantiations of
    the same definition stay RyuJIT's, not even declined."""
    exe, oracle = program
    out = run_captured(exe, methods=["Pair`1<int32>::Pick", "Program::Describe<float64>"])
    assert out.stdout.decode() == oracle.stdout
    assert set(_compiled(out.report)) == {"Pair`1<int32>::Pick", "Program::Describe<float64>"}
    assert out.report["declined"] == []


def test_all_eh_compiles_framework_instantiations(program, run_captured):
    """Under --all-eh the framework's value-type instantiations the program uses (List<int>,
    Dictionary<int,long> ...) are compiled by us too, and the output is still RyuJIT's."""
    exe, oracle = program
    out = run_captured(exe, all_eh=True)
    assert out.stdout.decode() == oracle.stdout, out.stderr.decode()[-3000:]
    compiled = _compiled(out.report)
    assert INSTANTIATIONS <= set(compiled)
    # measured: the framework's generic code with EH the program reaches over value types --
    # CoreLib code over the program's own struct among them (Ordered: found by its assembly's file)
    assert FRAMEWORK_INSTANTIATIONS <= {n for n, c in compiled.items() if c["assembly"] != "instantiations"}, \
        sorted(compiled)
    assert not [d for d in out.report["declined"] if "code per instantiation not supported" in d["reason"]]


def test_negative_control_wrong_binding_changes_the_output(program, run_captured):
    """With the layouts from metadata (--jitee metadata) a wrong binding is wrong code. (With the
    runtime answering, measured, the output stays RyuJIT's: the runtime's field offsets and sizes
    of the exact instantiation override the metadata's, as for "metadata-field-offset".)"""
    exe, oracle = program
    out = run_captured(exe, opt=2, damage="instantiation-int64", jitee="metadata")
    assert "Pair`1<int32>::Pick" in _compiled(out.report)
    text = out.stdout.decode()
    assert text != oracle.stdout
    # measured: Pair<int>'s B and Tag read at int64's offsets 8 and 16 (Tag's bytes, or beyond
    # the 12-byte struct: "Pick: 3 7", or a negative tag caught), then a crash (SIGSEGV)
    assert "Pick: 3 4 -6 201 20u2\n" not in text


#: framework instantiations the LINQ program reaches (measured), among them iterators' MoveNext
#: and Dispose, HashSet<int32> and SortedSet<float64>, one over the program's struct
LINQ_INSTANTIATIONS = {
    "System.Linq.Enumerable::Sum<int32>", "System.Linq.Enumerable::Max<Point>",
    "System.Linq.Enumerable::ToDictionary<int32,int32,float64>", "System.Linq.Enumerable::Aggregate<int32,int32>",
    "System.Linq.Enumerable/<ZipIterator>d__243`3<int32,int64,int64>::MoveNext",
    "System.Linq.Enumerable/<ZipIterator>d__243`3<int32,int64,int64>::System.IDisposable.Dispose",
    "System.Linq.Enumerable/<ExceptIterator>d__80`1<int32>::MoveNext", "System.Linq.Set`1<int32>::UnionWith",
    "System.Collections.Generic.HashSet`1<int32>::SymmetricExceptWithEnumerable",
    "System.Collections.Generic.SortedSet`1<float64>::IntersectWithEnumerable", "System.String::JoinCore<Point>",
}
#: the exact instantiations whose finally ran while a selector's exception unwound through them
UNWOUND = {f"System.Linq.Enumerable{n}" for n in ("::Sum", "::All", "::Single", "::ToDictionary", "::Aggregate",
                                                   "/SelectEnumerableIterator`2::ToList")}


def test_framework_generics_over_value_types_with_exceptions_through_them(tmp_path, run_captured, monkeypatch):
    """Under --all-eh the framework's generic code over int/long/double/a struct is ours, and an
    exception thrown by a selector unwinds through it: each of those frames runs its finally
    (the enumerator's Dispose), counted by the runtime's exception events (events.py)."""
    exe = compile_cs(LINQ, tmp_path / "instantiations_linq.exe", "-optimize+")
    monkeypatch.setenv("COMPlus_ReadyToRun", "0")          # the oracle JIT-compiles the framework too
    monkeypatch.setenv("COMPlus_TieredCompilation", "0")
    oracle = run_on_coreclr(exe)
    assert oracle.returncode == 0 and "Sum throws: ArgumentOutOfRangeException (disposed 2)" in oracle.stdout
    out = run_captured(exe, all_eh=True)
    assert out.stdout.decode() == oracle.stdout, out.stderr.decode()[-3000:]
    compiled = _compiled(out.report)
    assert LINQ_INSTANTIATIONS <= set(compiled), sorted(compiled)
    exceptions = out.report["exceptions"]
    finallies = {m["method"].split("!")[1] for m in exceptions["by_method"] if m["finally"]}   # ASSEMBLY!Ns.Type::Name
    assert UNWOUND <= finallies, exceptions["by_method"]
    assert exceptions["handlers_ours"]["finally"] >= len(UNWOUND)
