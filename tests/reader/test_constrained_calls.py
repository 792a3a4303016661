"""`constrained. T callvirt M` with a managed pointer `this` (ECMA-335 III.2.1): a reference
type T dereferences it, a primitive or enum T (C#'s `i.ToString()`) boxes a copy and calls M
virtually on it, a struct too, and then the box's value is copied back into the original
(its own M -- an enumerator's MoveNext -- may change `this`). Before, an int32 `this` was
loaded as if it were an object reference (a crash in the runtime, tests/runtime/cs/gc.cs)
and a struct's address was passed as an object."""

from __future__ import annotations

import re

import pytest

from llilc_eh.assembly.loader import Assembly
from llilc_eh.target import LINUX_X64, WIN_X64

from reader_builds import il_library, translate_checked

SOURCE = r"""
.assembly extern mscorlib {}
.assembly constrained_calls {}
.class public sequential ansi sealed beforefieldinit Own extends [mscorlib]System.ValueType
{
  .field public int32 A
  .method public hidebysig virtual instance string ToString() cil managed { ldstr "own" ret }
}
.class public sequential ansi sealed beforefieldinit Refy extends [mscorlib]System.ValueType
{
  .field public object O
  .method public hidebysig virtual instance string ToString() cil managed { ldstr "refy" ret }
}
.class public auto ansi beforefieldinit C extends [mscorlib]System.Object
{
  .method public static string OnRefy(valuetype Refy& o) cil managed
  { ldarg.0  constrained. Refy  callvirt instance string [mscorlib]System.Object::ToString()  ret }
  .method public static string OnInt(int32 i) cil managed
  { ldarga.s i  constrained. [mscorlib]System.Int32  callvirt instance string [mscorlib]System.Object::ToString()  ret }
  .method public static string OnString(string s) cil managed
  { ldarga.s s  constrained. [mscorlib]System.String  callvirt instance string [mscorlib]System.Object::ToString()  ret }
  .method public static string OnOwn(valuetype Own& o) cil managed
  { ldarg.0  constrained. Own  callvirt instance string [mscorlib]System.Object::ToString()  ret }
}
"""


@pytest.fixture(scope="module")
def asm(tmp_path_factory) -> Assembly:
    return il_library(tmp_path_factory.mktemp("constrained"), "constrained_calls", SOURCE)


@pytest.mark.parametrize("target", (WIN_X64, LINUX_X64), ids=lambda t: t.name)
def test_primitive_is_boxed_then_called_virtually(asm, target):
    r = translate_checked(asm, "OnInt", target)
    assert r.helper_calls == {"CORINFO_HELP_BOX": 1, "CORINFO_HELP_VIRTUAL_FUNC_PTR": 1}, r.helper_calls
    assert r.module.index("@CORINFO_HELP_BOX(") < r.module.index("@CORINFO_HELP_VIRTUAL_FUNC_PTR(")
    classes = [e for e in r.externals.values() if e.kind == "class"]
    assert [(e.symbol, e.token >> 24) for e in classes] == [("class:int32", 0x1B)]   # the constrained token (ilasm: a TypeSpec)


@pytest.mark.parametrize("target", (WIN_X64, LINUX_X64), ids=lambda t: t.name)
def test_reference_type_is_dereferenced(asm, target):
    r = translate_checked(asm, "OnString", target)
    assert "CORINFO_HELP_BOX" not in r.helper_calls and r.helper_calls["CORINFO_HELP_VIRTUAL_FUNC_PTR"] == 1
    assert "= load ptr, ptr %arg0" in r.module


@pytest.mark.parametrize("target", (WIN_X64, LINUX_X64), ids=lambda t: t.name)
def test_struct_is_boxed_and_copied_back(asm, target):
    r = translate_checked(asm, "OnOwn", target)
    order = [r.module.index(f"@{h}(") for h in ("CORINFO_HELP_BOX", "CORINFO_HELP_VIRTUAL_FUNC_PTR")]
    assert order == sorted(order)
    # the value goes back from the box (its data after the method-table pointer) to the original
    box = r.module.split("@CORINFO_HELP_BOX(", 1)[1]
    assert re.search(r"getelementptr i8, ptr %v\d+, i64 8", box), box
    assert "CORINFO_HELP_ASSIGN_STRUCT" not in r.helper_calls      # Own holds no reference: a plain copy
    assert "@llvm.memcpy" in box.split("ret ptr", 1)[0]
    # a struct holding a reference goes back with its reference through the barrier on linux-x64
    r = translate_checked(asm, "OnRefy", target)
    assert r.helper_calls.get("CORINFO_HELP_CHECKED_ASSIGN_REF", 0) == (1 if target is LINUX_X64 else 0)


def test_linux_calls_a_value_types_own_method_directly_when_the_runtime_names_it(asm):
    """linux-x64: a `constrained-entry` cell (T's own M, or null -- the installer asks the runtime,
    resolveVirtualMethod + getUnboxedEntry) chooses between M called directly with the managed
    pointer (ECMA-335 III.2.1; changes to `this` in place) and the boxed copy; win-x64 keeps the box."""
    r = translate_checked(asm, "OnOwn", LINUX_X64)
    entries = [e for e in r.externals.values() if e.kind == "constrained-entry"]
    assert len(entries) == 1 and entries[0].cell and entries[0].constrained >> 24 in (0x01, 0x02), entries
    m = re.search(r"%(own\d+) = icmp ne ptr %cell\d+, null\n\s*br i1 %\1, label %(\S+), label %(\S+)", r.module)
    assert m, r.module
    direct = r.module.split(f"\n{m.group(2)}:", 1)[1].split("\n\n", 1)[0].split("br label", 1)[0]
    # the direct path: the cell's entry called with the managed pointer (the argument, %v1), no box
    assert "CORINFO_HELP_BOX" not in direct and re.search(r"call x86_64_sysvcc ptr \(ptr\) %cell\d+\(ptr %v1\)", direct), direct
    assert re.search(r"= phi ptr \[", r.module)
    assert "constrained-entry" not in {e.kind for e in translate_checked(asm, "OnOwn", WIN_X64).externals.values()}
