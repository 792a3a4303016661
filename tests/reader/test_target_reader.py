"""The reader's target-dependent translation (llilc_eh.target): write barriers, data
cells, no C library calls, the value-type ABI refusal and the externals table, on a small
IL program assembled by the real ilasm, for linux-x64 against win-x64 (which must show
none of it: the negative control of every count)."""

from __future__ import annotations

import re

import pytest

from llilc_eh.assembly.loader import Assembly
from llilc_eh.check.toolchain import assemble
from llilc_eh.errors import ReaderError
from llilc_eh.il.method import analyze
from llilc_eh.reader.jitee import JitEE
from llilc_eh.reader.lint import check_module
from llilc_eh.reader.translate import Options, translate
from llilc_eh.target import LINUX_X64, WIN_X64

SOURCE = r"""
.assembly extern mscorlib {}
.assembly target_reader {}
.class public sequential ansi sealed beforefieldinit S extends [mscorlib]System.ValueType
{ .field public object O  .field public int32 I }
.class public sequential ansi sealed beforefieldinit P extends [mscorlib]System.ValueType
{ .field public int32 A  .field public int32 B }
.class public auto ansi beforefieldinit C extends [mscorlib]System.Object
{
  .field public object F
  .field public int32 N
  .field public valuetype S VS
  .field public static object SF
  .method public static void Stores(class C c, object o, object& r, valuetype S& s, valuetype S& t,
                                    valuetype S[] arr, valuetype P& p, valuetype P& q) cil managed
  {
    .maxstack 4
    .locals init (object loc, valuetype S ls)
    ldarg.0  ldarg.1  stfld object C::F                  // barrier 1
    ldarg.1  stsfld object C::SF                         // barrier 2
    ldarg.2  ldarg.1  stind.ref                          // barrier 3
    ldarg.2  ldarg.2  cpobj [mscorlib]System.Object      // barrier 4
    ldarg.3  ldarg.s t  ldobj S  stobj S                 // struct 1
    ldarg.3  ldarg.s t  cpobj S                          // struct 2
    ldarg.s arr  ldc.i4.0  ldarg.3  ldobj S  stelem S    // struct 3
    ldarg.0  ldarg.3  ldobj S  stfld valuetype S C::VS   // struct 4
    ldarg.0  ldc.i4.7  stfld int32 C::N                  // no barrier: an int
    ldarg.s p  ldarg.s q  ldobj P  stobj P               // no barrier: no references
    ldarg.1  stloc.0                                     // no barrier: a local
    ldloca.s ls  ldarg.3  ldobj S  stobj S               // a barrier (CHECKED is right for any address)
    ret
  }
  .method public static float64 Blocks(uint8* d, uint8* s, int32 n, float64 x, float64 y) cil managed
  {
    .maxstack 4
    .locals init (native int l)
    ldarg.0  ldarg.1  ldarg.2  cpblk
    ldarg.0  ldc.i4.0  ldarg.2  initblk
    ldarg.2  localloc  stloc.0
    ldstr "hello"  pop
    ldftn void C::Target()  pop
    ldarg.3  ldarg.s y  rem
    ret
  }
  .method public static void Target() cil managed { ret }
  .method public static void TakesStruct(valuetype P p) cil managed { ret }
  .method public static valuetype P ReturnsStruct() cil managed { .locals init (valuetype P v) ldloc.0 ret }
  .method public static void PassesStruct(valuetype P& p) cil managed
  { ldarg.0 ldobj P call void C::TakesStruct(valuetype P) ret }
  .method public static void GetsStruct() cil managed
  { call valuetype P C::ReturnsStruct() pop ret }
  .method public static void TypeOf() cil managed
  { ldtoken C call class [mscorlib]System.Type [mscorlib]System.Type::GetTypeFromHandle(valuetype [mscorlib]System.RuntimeTypeHandle) pop ret }
}
"""


@pytest.fixture(scope="module")
def asm(tmp_path_factory) -> Assembly:
    path = tmp_path_factory.mktemp("target_reader") / "target_reader.il"
    path.write_text(SOURCE)
    return Assembly(assemble(path, path.parent, dll=True))


def _translate(asm, name, target):
    rid = asm.find_method(f"C::{name}").rid
    result = translate(asm, analyze(asm.body(rid)), JitEE(asm), Options(target=target))
    check_module(result.module, method=name)
    return result


def test_write_barriers(asm):
    linux, win = _translate(asm, "Stores", LINUX_X64), _translate(asm, "Stores", WIN_X64)
    assert linux.helper_calls.get("CORINFO_HELP_CHECKED_ASSIGN_REF") == 4, linux.helper_calls
    assert linux.helper_calls.get("CORINFO_HELP_ASSIGN_STRUCT") == 5, linux.helper_calls
    assert not {"CORINFO_HELP_CHECKED_ASSIGN_REF", "CORINFO_HELP_ASSIGN_STRUCT"} & set(win.helper_calls)
    # no reference is stored plainly anywhere but into the method's own slots (allocas)
    allocas = set(re.findall(r"(%[\w.]+) = alloca", linux.module))
    plain = [m for m in re.findall(r"store ptr %[\w.]+, ptr (%[\w.]+)", linux.module) if m not in allocas]
    assert plain == [], plain
    assert re.findall(r"store ptr %[\w.]+, ptr (%[\w.]+)", win.module), "the control stores references plainly"
    # the struct barrier names its class: the field's type for stfld, the token otherwise
    kinds = {e.kind for e in linux.externals.values()}
    assert {"field-class", "class", "static"} <= kinds
    # a struct without references is copied inline, never by a C library call
    assert "llvm.memcpy.inline" in linux.module and "@llvm.memcpy.p0" not in linux.module
    assert "@llvm.memcpy.p0" in win.module


def test_cells_helpers_instead_of_libcalls(asm):
    linux, win = _translate(asm, "Blocks", LINUX_X64), _translate(asm, "Blocks", WIN_X64)
    assert {"CORINFO_HELP_MEMCPY": 1, "CORINFO_HELP_MEMSET": 2, "CORINFO_HELP_DBLREM": 1}.items() \
        <= linux.helper_calls.items(), linux.helper_calls
    assert "frem" not in linux.module and "frem" in win.module
    assert "@llvm.memset" not in linux.module and "@llvm.memcpy" not in linux.module
    # ldstr: the cell holds the handle's address, so two loads
    string = next(e for e in linux.externals.values() if e.kind == "string")
    assert string.cell and string.token >> 24 == 0x70
    assert re.search(r'(%cell\d+) = load ptr, ptr @"str:0x70000001"\n\s*%str\d+ = load ptr, ptr \1', linux.module)
    assert re.search(r'%str\d+ = load ptr, ptr @"str:0x70000001"', win.module)
    # ldftn: the entry point is data here, loaded from a cell
    entry = next(e for e in linux.externals.values() if e.kind == "method-entry")
    assert entry.cell and entry.symbol.startswith("entry:") and "C::Target()" in entry.symbol
    win_entry = next(e for e in win.externals.values() if e.kind == "method-entry")
    assert not win_entry.cell and "declare void @" in win.module
    # every external global of the linux module is a cell of the table (frame constants aside)
    for name in re.findall(r'^@"([^"]+)" = external global (\w+)', linux.module, re.M):
        assert linux.externals[name[0]].cell and name[1] == "ptr", name


@pytest.mark.parametrize("name, offset, what", [
    ("TakesStruct", None, "parameter 0"),
    ("ReturnsStruct", None, "return type"),
    ("PassesStruct", 0x0006, "argument 0"),
    ("GetsStruct", 0x0000, "returns a value type"),
    ("TypeOf", 0x0005, "argument 0"),
])
def test_value_types_by_value_are_refused_on_linux(asm, name, offset, what):
    _translate(asm, name, WIN_X64)      # the control: our own convention takes them
    with pytest.raises(ReaderError) as e:
        _translate(asm, name, LINUX_X64)
    err = e.value
    assert err.kind == "abi-unsupported" and f"C::{name}" in str(err) and what in str(err), str(err)
    assert err.offset == offset, str(err)


def test_externals_describe_every_symbol(asm):
    for name in ("Stores", "Blocks"):
        for target in (LINUX_X64, WIN_X64):
            result = _translate(asm, name, target)
            named = set(re.findall(r'@"([^"]+)"', result.module)) | set(re.findall(r"@(CORINFO_HELP_\w+)",
                                                                                   result.module))
            named -= {n for n in named if n.startswith(("llvm.", "C::")) or n == result.parent[2:-1]}
            named = {n for n in named if not n.startswith("C::" + name)}
            assert named <= set(result.externals), (name, target.name, sorted(named - set(result.externals)))
            for e in result.externals.values():
                if e.kind == "helper":
                    assert e.helper == e.symbol and e.prototype
