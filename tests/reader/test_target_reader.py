"""The reader's target-dependent translation (llilc_eh.target): write barriers, data
cells, no C library calls, SysV struct passing (reader/abi.py) and what it refuses, and
the externals table, on a small
IL program assembled by the real ilasm, for linux-x64 against win-x64 (which must show
none of it: the negative control of every count)."""

from __future__ import annotations

import re

import pytest

from llilc_eh.assembly.loader import Assembly
from llilc_eh.errors import ReaderError
from llilc_eh.target import LINUX_X64, WIN_X64

from reader_builds import il_library, translate_checked

SOURCE = r"""
.assembly extern mscorlib {}
.assembly extern System.Runtime.Intrinsics {}
.assembly target_reader {}
.class public sequential ansi sealed beforefieldinit FloatBuffer extends [mscorlib]System.ValueType
{ .pack 0 .size 16 .field public float32 FixedElementField }
.class public sequential ansi sealed beforefieldinit FB extends [mscorlib]System.ValueType
{ .field public valuetype FloatBuffer F }
.class public explicit ansi sealed beforefieldinit Blob4 extends [mscorlib]System.ValueType { .pack 1 .size 4 }
.data Bytes = bytearray (01 02 03 04)
.class public sequential ansi sealed beforefieldinit Empty extends [mscorlib]System.ValueType { }
.class public sequential ansi sealed beforefieldinit Packed extends [mscorlib]System.ValueType
{ .pack 1 .field public uint8 A  .field public int32 B }
.class public sequential ansi sealed beforefieldinit S extends [mscorlib]System.ValueType
{ .field public object O  .field public int32 I }
.class public sequential ansi sealed beforefieldinit P extends [mscorlib]System.ValueType
{ .field public int32 A  .field public int32 B }
.class public sequential ansi sealed beforefieldinit Q extends [mscorlib]System.ValueType
{ .field public int64 A  .field public int64 B }
.class public sequential ansi sealed beforefieldinit R extends [mscorlib]System.ValueType
{ .field public float64 X  .field public float64 Y }
.class public sequential ansi sealed beforefieldinit F3 extends [mscorlib]System.ValueType
{ .field public float32 A  .field public float32 B  .field public float32 C }
.class public sequential ansi sealed beforefieldinit B3 extends [mscorlib]System.ValueType
{ .field public int64 A  .field public int64 B  .field public int64 C }
.class public explicit ansi sealed beforefieldinit X extends [mscorlib]System.ValueType
{ .field [0] public int64 A  .field [0] public float64 B }
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
  .method public static valuetype B3 Wide(int64 a, int64 b, int64 c, int64 d, int64 e, valuetype Q q,
                                        valuetype R r, valuetype F3 f, valuetype P p) cil managed
  { .locals init (valuetype B3 v) ldloc.0 ret }
  .method public static bool Small(int8 a, uint16 b) cil managed { ldc.i4.1 ret }
  .method public static void TakesVector(valuetype [System.Runtime.Intrinsics]System.Runtime.Intrinsics.Vector128`1<int32> v)
  cil managed { ret }
  .method public static void TakesFixed(valuetype FB f) cil managed { ret }
  .method public static void TakesPacked(valuetype Packed p) cil managed { ret }
  .method public static void TakesEmpty(valuetype Empty e, int64 x) cil managed { ret }
  .field public static int32 PerThread
  .custom instance void [mscorlib]System.ThreadStaticAttribute::.ctor() = ( 01 00 00 00 )
  .method public static int32 ReadsThreadStatic() cil managed { ldsfld int32 C::PerThread  ret }
  .field public static valuetype Blob4 Rva at Bytes
  .field public static valuetype P Boxed
  .method public static int32 StaticStructs() cil managed
  { ldsflda valuetype Blob4 C::Rva  ldind.i1  ldsflda valuetype P C::Boxed  ldfld int32 P::A  add  ret }
  .method public static void TakesExplicit(valuetype X x) cil managed { ret }
  .method public static void PassesExplicit(valuetype X& x) cil managed
  { ldarg.0 ldobj X call void C::TakesExplicit(valuetype X) ret }
  .method public static void Jumps() cil managed { jmp void C::Target() }
  .method public static void TypeOf() cil managed
  { ldtoken C call class [mscorlib]System.Type [mscorlib]System.Type::GetTypeFromHandle(valuetype [mscorlib]System.RuntimeTypeHandle) pop ret }
}
"""


@pytest.fixture(scope="module")
def asm(tmp_path_factory) -> Assembly:
    return il_library(tmp_path_factory.mktemp("target_reader"), "target_reader", SOURCE)


def test_write_barriers(asm):
    linux, win = translate_checked(asm, "Stores", LINUX_X64), translate_checked(asm, "Stores", WIN_X64)
    # 4 reference stores, and 5 stores of S (one reference each): copied, then its reference
    # stored again through the barrier
    assert linux.helper_calls.get("CORINFO_HELP_CHECKED_ASSIGN_REF") == 4 + 5, linux.helper_calls
    assert "CORINFO_HELP_ASSIGN_STRUCT" not in linux.helper_calls
    assert not {"CORINFO_HELP_CHECKED_ASSIGN_REF", "CORINFO_HELP_ASSIGN_STRUCT"} & set(win.helper_calls)
    # no reference is stored plainly anywhere but into the method's own slots (allocas)
    allocas = set(re.findall(r"(%[\w.]+) = alloca", linux.module))
    plain = [m for m in re.findall(r"store ptr %[\w.]+, ptr (%[\w.]+)", linux.module) if m not in allocas]
    assert plain == [], plain
    assert re.findall(r"store ptr %[\w.]+, ptr (%[\w.]+)", win.module), "the control stores references plainly"
    # per-field barriers need no class handle (ASSIGN_STRUCT would: the field's type for stfld)
    kinds = {e.kind for e in linux.externals.values()}
    assert "static" in kinds and "field-class" not in kinds
    # a struct without references is copied inline, never by a C library call
    assert "llvm.memcpy.inline" in linux.module and "@llvm.memcpy.p0" not in linux.module
    assert "@llvm.memcpy.p0" in win.module


def test_cells_helpers_instead_of_libcalls(asm):
    linux, win = translate_checked(asm, "Blocks", LINUX_X64), translate_checked(asm, "Blocks", WIN_X64)
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


@pytest.mark.parametrize("name, shape", [
    ("TakesStruct", r'define x86_64_sysvcc void @"C::TakesStruct\$0x[0-9A-F]+"\(i64 %a0\.0\)'),
    ("ReturnsStruct", r'define x86_64_sysvcc i64 @"C::ReturnsStruct\$0x[0-9A-F]+"\(\)'),
    ("PassesStruct", r'call x86_64_sysvcc void @"\[target_reader\]C::TakesStruct\(valuetype '
                     r'\[target_reader\]P\)"\(i64 %eb\d+\)'),
    ("GetsStruct", r'= call x86_64_sysvcc i64 @"\[target_reader\]C::ReturnsStruct\(\)"\(\)'),
    ("TypeOf", r'call x86_64_sysvcc ptr @"\[mscorlib\]System.Type::GetTypeFromHandle\(valuetype '
               r'\[mscorlib\]System.RuntimeTypeHandle\)"\(i64 %eb\d+\)'),
    ("Wide", r'define x86_64_sysvcc ptr @"C::Wide\$0x[0-9A-F]+"\(ptr %retbuf, i64 %a0, i64 %a1, i64 %a2, '
             r'i64 %a3, i64 %a4, ptr byval\(\[16 x i8\]\) align 8 %a5, double %a6\.0, double %a6\.1, '
             r'<2 x float> %a7\.0, float %a7\.1, ptr byval\(\[8 x i8\]\) align 8 %a8\)'),
    ("Small", r'define x86_64_sysvcc zeroext i8 @"C::Small\$0x[0-9A-F]+"\(i8 signext %a0, i16 zeroext %a1\)'),
    # CoreCLR never enregisters the SIMD types, whatever their size
    ("TakesVector", r'define x86_64_sysvcc void @"C::TakesVector\$0x[0-9A-F]+"\(ptr byval\(\[16 x i8\]\) align 8 %a0\)'),
    # a fixed buffer counts as its elements: four floats, two SSE eightbytes
    # a packed struct (a field off its alignment): memory, as CoreCLR
    ("TakesPacked", r'define x86_64_sysvcc void @"C::TakesPacked\$0x[0-9A-F]+"\(ptr byval\(\[5 x i8\]\) align 8 %a0\)'),
    # a struct without fields: memory (CoreCLR: size 1, not enregistered)
    ("TakesEmpty", r'define x86_64_sysvcc void @"C::TakesEmpty\$0x[0-9A-F]+"\(ptr byval\(\[1 x i8\]\) align 8 %a0, i64 %a1\)'),
    ("TakesFixed", r'define x86_64_sysvcc void @"C::TakesFixed\$0x[0-9A-F]+"\(<2 x float> %a0\.0, <2 x float> %a0\.1\)'),
])
def test_value_types_by_value_travel_by_sysv_classification(asm, name, shape):
    """Under linux-x64 a struct of at most 16 bytes travels as its eightbytes (i64 for
    INTEGER, double / float / <2 x float> for SSE) while registers last, else and above 16
    bytes in memory (byval); a result above 16 bytes through the return buffer (returned);
    small integers are extended at the boundary. win-x64 keeps its pointer to a copy."""
    linux = translate_checked(asm, name, LINUX_X64)
    assert re.search(shape, linux.module), linux.module
    win = translate_checked(asm, name, WIN_X64)
    assert "x86_64_sysvcc" not in win.module and "byval" not in win.module


@pytest.mark.parametrize("name, offset, what", [
    ("TakesExplicit", None, "parameter 0"),
    ("PassesExplicit", 0x0006, "argument 0 of the call to"),
    ("Jumps", 0x0000, "jmp"),
])
def test_what_sysv_cannot_place_is_refused(asm, name, offset, what):
    translate_checked(asm, name, WIN_X64)      # the control: our own convention takes them
    with pytest.raises(ReaderError) as e:
        translate_checked(asm, name, LINUX_X64)
    err = e.value
    assert err.kind == "abi-unsupported" and f"C::{name}" in str(err) and what in str(err), str(err)
    assert err.offset == offset, str(err)


def test_thread_statics_go_through_the_thread_static_helper_on_linux(asm):
    """A [ThreadStatic] field has storage per thread: one data cell cannot reach it. linux-x64
    calls CORINFO_HELP_GETSHARED_NONGCTHREADSTATIC_BASE(module id, class id) -- an int32 is a
    non-GC static -- and adds the field's offset, three cells the installer fills from the
    runtime (getClassModuleIdForStatics, getClassDomainID, getFieldInfo), as RyuJIT 3.1 outside
    ReadyToRun; no `static` cell (one address for every thread) is named. win-x64 names it."""
    translate_checked(asm, "ReadsThreadStatic", WIN_X64)
    linux = translate_checked(asm, "ReadsThreadStatic", LINUX_X64)
    stem = "static:[target_reader]C::PerThread"
    kinds = {e.symbol: e.kind for e in linux.externals.values()}
    assert {kinds.get(stem + s) for s in ("$module", "$classid", "$tls")} == \
        {"statics-module", "statics-class-id", "thread-static"} and stem not in kinds, kinds
    tls = linux.externals[stem + "$tls"]
    assert (tls.helper, tls.boxed, tls.cell) == ("CORINFO_HELP_GETSHARED_NONGCTHREADSTATIC_BASE", False, True)
    assert re.search(r"call [^\n]*@CORINFO_HELP_GETSHARED_NONGCTHREADSTATIC_BASE\(i64 %module\d+, i32 %classid\d+\)",
                     linux.module), linux.module
    static = translate_checked(asm, "StaticStructs", LINUX_X64)     # the control: other statics use no helper
    assert "THREADSTATIC" not in static.module


def test_struct_statics_are_boxed_but_rva_statics_are_not(asm):
    """CoreCLR keeps a static of a non-primitive struct boxed: the cell (getFieldAddress)
    holds the slot of the box's reference, the value is 8 bytes into the box. A static with
    an RVA (data in the image) is the data itself. win-x64 names the static's data directly."""
    linux, win = translate_checked(asm, "StaticStructs", LINUX_X64), translate_checked(asm, "StaticStructs", WIN_X64)
    rva = re.search(r'(%cell\d+) = load ptr, ptr @"static:\[target_reader\]C::Rva"\n(.*)', linux.module)
    boxed = re.search(r'(%cell\d+) = load ptr, ptr @"static:\[target_reader\]C::Boxed"\n\s*(%box\d+) = load ptr, '
                      r'ptr \1\n\s*%addr\d+ = getelementptr i8, ptr \2, i64 8', linux.module)
    assert rva and "%box" not in rva.group(2) and boxed, linux.module
    assert "%box" not in win.module


def test_externals_describe_every_symbol(asm):
    for name in ("Stores", "Blocks"):
        for target in (LINUX_X64, WIN_X64):
            result = translate_checked(asm, name, target)
            named = set(re.findall(r'@"([^"]+)"', result.module)) | set(re.findall(r"@(CORINFO_HELP_\w+)",
                                                                                   result.module))
            named -= {n for n in named if n.startswith(("llvm.", "C::")) or n == result.parent[2:-1]}
            named = {n for n in named if not n.startswith("C::" + name)}
            assert named <= set(result.externals), (name, target.name, sorted(named - set(result.externals)))
            for e in result.externals.values():
                if e.kind == "helper":
                    assert e.helper == e.symbol and e.prototype
