"""Shared generic code with runtime lookups, compiled by llilc-eh (runtime/lookup.py,
reader/lookup.py, runtime/generic.py).

programs/shared_lookups.cs: shared code of each context kind -- a generic method (the hidden
MethodDesc), a static method and a struct's method of a generic type (the hidden MethodTable),
an instance method of a generic class (`this`) -- whose bodies find typeof(T), List<T>, T[],
Holder<T>'s class and statics, the MethodDesc of Inner<T,string> and the MethodTable a struct
enumerator's methods take through the generic dictionary, in the main body, catch, finally and
filter funclets, beside catch (E) resolved through the reported context; and code shared in one
type argument but exact in another (Mixed<__Canon,int>, <__Canon,long>, <__Canon,Measure>: a
16-byte struct laid out exactly, <__Canon,KeyValuePair<__Canon,int>>: a struct shared itself;
runtime/generic.py shared_instantiation).

Oracle: the same program with RyuJIT only, byte for byte, with every method ours. Negative
controls (both measured to change the run): every lookup one dictionary slot further
("lookup-offset": the code finds the wrong types), and the GC info without the generic context
("no-generic-context": catch (E) in Guard<E>'s instance and static methods no longer matches).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llilc_eh.check.toolchain import compile_cs, run_on_coreclr
from llilc_eh.runtime.driver import reason_class
from llilc_eh.gcinfo import GenericsInstContextKind, decode

PROGRAM = Path(__file__).resolve().parent / "programs" / "shared_lookups.cs"
FRAMEWORK_PROGRAM = PROGRAM.with_name("shared_framework.cs")
#: the framework's shared code the program's exceptions go through, each ours under --all-eh
FRAMEWORK_SHARED = {
    "System.Linq.Enumerable/SelectEnumerableIterator`2<class System.__Canon,int32>::ToList",  # a throwing selector
    "System.Collections.Generic.ArraySortHelper`1<class System.__Canon>::Sort",               # a throwing comparer
    "Program/<Gen>c__Iterator0`1<class System.__Canon>::MoveNext",                           # its finally runs
    "System.Linq.Enumerable::ToDictionary<class System.__Canon,class System.__Canon,class System.__Canon>",
    "System.Linq.Lookup`2<char,class System.__Canon>::Create",
    "System.Collections.Concurrent.ConcurrentDictionary`2<class System.__Canon,class System.__Canon>::TryAddInternal",
    "System.Lazy`1<class System.__Canon>::ViaFactory",
}
#: method -> the generic context its shared code has (what its GC info must report)
CONTEXTS = {
    "Lookups::Method": GenericsInstContextKind.MD, "Lookups::Inner": GenericsInstContextKind.MD,
    "Lookups::Join": GenericsInstContextKind.MD, "Lookups::Catch": GenericsInstContextKind.MD,
    "Lookups::Mixed": GenericsInstContextKind.MD, "Lookups::Delegates": GenericsInstContextKind.MD,
    "Holder`1::Make": GenericsInstContextKind.MT, "Pair`1::Show": GenericsInstContextKind.MT,
    "Guard`1::RunStatic": GenericsInstContextKind.MT,
    "Holder`1::Describe": GenericsInstContextKind.THIS, "Guard`1::Run": GenericsInstContextKind.THIS,
}
CONFIGS = {"O0": dict(opt=0), "O2": dict(opt=2), "O2-clone": dict(opt=2, clone_finally=True)}


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    exe = compile_cs(PROGRAM, tmp_path_factory.mktemp("lookups") / "shared_lookups.exe", "-optimize+")
    return exe, run_on_coreclr(exe)


def test_the_program_exercises_what_it_says(program):
    exe, oracle = program
    assert oracle.returncode == 0
    text = oracle.stdout
    for line in ("caught Version:92 ice Version[]", "Make: filtered Version 5 too many Version 5",
                 "not a Version 0 [Holder`1 Version[]]", "negative Version Pair`1", "7.8;#1",
                 "static: caught ArgumentException as ArgumentException",
                 "format guard: caught FormatException as FormatException", "counts 124 112 113",
                 "String/Measure 3x1.5 1 0x0 long 3x1.5 5 True", "Version/Int64 123456 1 0 long 123456 6 True",
                 "String/KeyValuePair`2 [key, 5] 1 [, 0] long [key, 5] 8 True",
                 "String:x String:again String[]:8", "Version:y"):
        assert line in text


@pytest.mark.parametrize("config", list(CONFIGS))
def test_shared_code_with_lookups_equals_ryujit(program, run_captured, config):
    exe, oracle = program
    out = run_captured(exe, **CONFIGS[config])
    assert out.stdout.decode() == oracle.stdout, out.stderr.decode()[-3000:]
    assert out.exit_code == oracle.returncode == 0
    assert out.report["declined"] == []
    compiled = {c["method"]: c for c in out.report["compiled"]}
    assert set(CONTEXTS) | {"Lookups::Main"} == set(compiled)
    # Mixed<T,V>: one body per value type V, shared in T (__Canon bound as a reference, V exactly)
    assert sum(c["method"] == "Lookups::Mixed" for c in out.report["compiled"]) == 4
    for name, kind in CONTEXTS.items():
        info = decode(bytes.fromhex(compiled[name]["gc_info"]))
        assert info.generics_inst_context == kind, name
        assert info.generics_inst_context_offset < 0, name      # in the frame, below the caller's SP
    assert decode(bytes.fromhex(compiled["Lookups::Main"]["gc_info"])).generics_inst_context is None


def test_negative_control_a_lookup_one_slot_off_changes_the_run(program, run_captured):
    exe, oracle = program
    out = run_captured(exe, opt=2, damage="lookup-offset")
    # measured: the first shared method's lookups read the wrong slot and the program dies
    # (SIGSEGV, nothing printed) -- the lookups are what the code's types come from
    assert "Lookups::Method" in {c["method"] for c in out.report["compiled"]}
    assert (out.stdout.decode(), out.exit_code) != (oracle.stdout, oracle.returncode)


def test_negative_control_without_the_context_catch_e_misses(program, run_captured):
    exe, oracle = program
    out = run_captured(exe, opt=2, damage="no-generic-context")
    compiled = {c["method"]: c for c in out.report["compiled"]}
    assert {"Guard`1::Run", "Guard`1::RunStatic"} <= set(compiled)
    for c in compiled.values():
        assert decode(bytes.fromhex(c["gc_info"])).generics_inst_context is None
    text = out.stdout.decode()
    assert text != oracle.stdout
    # `this` and the MethodTable contexts are what the runtime resolved E through
    assert "format guard: caught FormatException as FormatException" not in text
    assert "static: caught ArgumentException as ArgumentException" not in text


def test_the_frameworks_shared_code_under_all_eh_equals_ryujit(run_captured, tmp_path):
    """programs/shared_framework.cs under --all-eh: LINQ, Dictionary/Lookup/ConcurrentDictionary,
    HashSet, Lazy, sorting and an iterator over reference types, exceptions thrown through them
    (a selector, a comparer, an iterator): the framework's shared code -- partially shared too,
    SelectEnumerableIterator<__Canon,int32> -- is ours, the output RyuJIT's (R2R off both)."""
    exe = compile_cs(FRAMEWORK_PROGRAM, tmp_path / "shared_framework.exe", "-optimize+")
    oracle = run_on_coreclr(exe, jit_everything=True)
    assert oracle.returncode == 0 and "caught bad item" in oracle.stdout and "gen finally String" in oracle.stdout
    out = run_captured(exe, all_eh=True)
    assert out.stdout.decode() == oracle.stdout, out.stderr.decode()[-3000:]
    assert out.exit_code == 0
    shared = {c["instantiation"] for c in out.report["compiled"] if "__Canon" in (c.get("instantiation") or "")}
    assert FRAMEWORK_SHARED <= shared, sorted(shared)
    assert len(shared) >= 20          # measured: 25
    assert {reason_class(d["reason"]) for d in out.report["declined"]} <= {"IL stub (no IL of its own in a file)"}


def test_shared_code_without_eh_under_methods(program, run_captured):
    """--methods offers methods without EH too: shared code without funclets has no frame
    constants, and its context is not reported unless the runtime asks to keep it alive
    (KEEP_ALIVE: a catch depends on T) -- RyuJIT reports it otherwise only for collectible
    types. Accept<T> (no EH, typeof(T) through a lookup) is ours with no context in its GC info."""
    exe, oracle = program
    out = run_captured(exe, methods=["Lookups::Accept", "Lookups::Method"], opt=2)
    assert out.stdout.decode() == oracle.stdout, out.stderr.decode()[-3000:]
    compiled = {c["method"]: c for c in out.report["compiled"]}
    assert {"Lookups::Accept", "Lookups::Method"} <= set(compiled)
    assert decode(bytes.fromhex(compiled["Lookups::Accept"]["gc_info"])).generics_inst_context is None
    assert decode(bytes.fromhex(compiled["Lookups::Method"]["gc_info"])).generics_inst_context == \
        GenericsInstContextKind.MD


def test_shared_code_whose_il_the_runtime_substitutes_is_declined(run_captured, tmp_path):
    """CoreLib intrinsics whose IL the runtime replaces (getMethodInfoHelper: Interlocked,
    RuntimeHelpers ...) are declined by comparing CORINFO_METHOD_INFO's IL with the file's:
    compiled from the file, JitHelpers.GetObjectHandleOnStack<__Canon> overflowed the stack."""
    exe = compile_cs(FRAMEWORK_PROGRAM, tmp_path / "shared_framework.exe", "-optimize+")
    oracle = run_on_coreclr(exe, jit_everything=True)
    out = run_captured(exe, all_eh=True, methods=["System.Runtime.CompilerServices.RuntimeHelpers::*",
                                                  "System.Collections.Generic.List`1::*"])
    assert out.stdout.decode() == oracle.stdout, out.stderr.decode()[-3000:]
    declined = {d["method"]: d["reason"] for d in out.report["declined"]}
    reason = declined.get("System.Runtime.CompilerServices.RuntimeHelpers::IsReferenceOrContainsReferences", "")
    assert "the runtime compiles IL of its own" in reason, declined
    assert any(c["method"].startswith("System.Collections.Generic.List`1::") and
               "__Canon" in (c.get("instantiation") or "") for c in out.report["compiled"])
