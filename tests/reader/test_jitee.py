"""The reader's JIT-EE interface on real assemblies.

Properties: every MethodDef signature, local signature, field and MemberRef of CoreLib and
Python.Runtime is classified without error; struct sizes and field offsets agree with facts
and - for every non-generic type of CoreLib, Python.Runtime, an R2R framework assembly
(System.Private.Xml: bases in another module) and a C# layout zoo - with what CoreCLR 3.1
itself reports (an mcs-built oracle reads each field's FieldDesc offset and emits the `sizeof`
opcode in a DynamicMethod); MemberRefs resolve through facade type forwarders; missing
assemblies give ReaderError(kind="unresolved-type"); symbols are unique and LLVM parses them.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import llvmlite.binding as llvm
import pytest

from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.loader import Assembly
from llilc_eh.assembly.signatures import (
    ByRefType, ElementType, FieldSig, GenericInstType, GenericVar, LocalVarSig, NamedType, PinnedType,
    PointerType, PrimitiveType, SzArrayType,
)
from llilc_eh.check.toolchain import run_on_coreclr
from llilc_eh.cli import sample_path
from llilc_eh.errors import ReaderError
from llilc_eh.reader.jitee import JitEE
from llilc_eh.reader.types import OBJECT_HEADER_SIZE, STRING_CHARS_OFFSET, STRING_LENGTH_OFFSET, StackKind, llvm_global

from reader_builds import mcs, mcs_library

CORPUS = Corpus()
FRAMEWORK = CORPUS.framework_dir
CORELIB = FRAMEWORK / "System.Private.CoreLib.dll"
PYTHON_RUNTIME = CORPUS.find("Python.Runtime.dll").location
ET = ElementType


@pytest.fixture(scope="module")
def corelib() -> JitEE:
    return JitEE(Assembly(CORELIB))


@pytest.fixture(scope="module")
def pyrt() -> JitEE:
    return JitEE(Assembly(PYTHON_RUNTIME))


@pytest.fixture(scope="module")
def sample() -> JitEE:
    return JitEE(Assembly(sample_path()))


def _named(ee: JitEE, name: str) -> NamedType:
    return ee.token_type(ee.type_def(name))


def _method(ee: JitEE, query: str):
    return ee.compiled_method(ee.asm.find_method(query).rid)


# ------------------------------------------------------------------------ whole assemblies

# (methods, local signatures, fields, instance fields, MemberRefs) of the pinned corpus files.
WHOLE = {"System.Private.CoreLib.dll": (21220, 2508, 7053, 3628, 3043),
         "Python.Runtime.dll": (3920, 546, 1757, 894, 1297)}


@pytest.mark.parametrize("path", [CORELIB, PYTHON_RUNTIME], ids=lambda p: p.name)
def test_everything_classifies(path: Path, capsys):
    ee = JitEE(Assembly(path))
    names = ee.asm.names
    t0 = time.perf_counter()
    methods = 0
    for rid in range(1, ee.asm.method_count + 1):
        info = ee.compiled_method(rid)
        assert info.llvm_function_type()
        for sig in ee.arg_types(rid) + (info.return_type,):
            ee.type_info(sig)
        methods += 1
    t1 = time.perf_counter()
    local_sigs = locals_ = 0
    for rid in range(1, names.row_count(0x11) + 1):
        if isinstance(names.standalone_signature(0x11000000 | rid), LocalVarSig):
            local_sigs += 1
            for sig in ee.local_types(0x11000000 | rid):
                assert ee.storage_type(sig)
                locals_ += 1
    t2 = time.perf_counter()
    fields = instance = 0
    for rid in range(1, names.row_count(0x04) + 1):
        f = ee.field(0x04000000 | rid)
        fields += 1
        if not f.is_static:
            instance += 1
            assert f.offset is not None, f"{f}: {f.offset_reason}"
    t3 = time.perf_counter()
    refs = 0
    for rid in range(1, names.row_count(0x0A) + 1):
        token = 0x0A000000 | rid
        if isinstance(names.member_ref_signature(token), FieldSig):
            assert ee.field(token).resolved, ee.field(token)
        else:
            m = ee.method(token)
            assert m.resolved or m.owner_type is not None and "array" in m.unresolved_reason, m
            assert m.llvm_function_type()
        refs += 1
    t4 = time.perf_counter()
    assert (methods, local_sigs, fields, instance, refs) == WHOLE[path.name]
    with capsys.disabled():
        print(f"\n{path.name}: {methods} method signatures {t1 - t0:.2f}s, {local_sigs} local signatures "
              f"({locals_} locals) {t2 - t1:.2f}s, {fields} fields {t3 - t2:.2f}s, "
              f"{refs} MemberRefs {t4 - t3:.2f}s")


# ------------------------------------------------------------------------ classification

@pytest.mark.parametrize("et,kind,storage,size,signed", [
    (ET.BOOLEAN, StackKind.INT32, "i8", 1, False), (ET.CHAR, StackKind.INT32, "i16", 2, False),
    (ET.I1, StackKind.INT32, "i8", 1, True), (ET.U1, StackKind.INT32, "i8", 1, False),
    (ET.I2, StackKind.INT32, "i16", 2, True), (ET.U2, StackKind.INT32, "i16", 2, False),
    (ET.I4, StackKind.INT32, "i32", 4, True), (ET.U4, StackKind.INT32, "i32", 4, False),
    (ET.I8, StackKind.INT64, "i64", 8, True), (ET.U8, StackKind.INT64, "i64", 8, False),
    (ET.I, StackKind.NATIVE_INT, "i64", 8, True), (ET.U, StackKind.NATIVE_INT, "i64", 8, False),
    (ET.R4, StackKind.F, "float", 4, False), (ET.R8, StackKind.F, "double", 8, False),
    (ET.STRING, StackKind.OBJ, "ptr", 8, False), (ET.OBJECT, StackKind.OBJ, "ptr", 8, False),
    (ET.TYPEDBYREF, StackKind.VALUE, "[16 x i8]", 16, False),
])
def test_primitives(sample, et, kind, storage, size, signed):
    sig = PrimitiveType(et)
    assert (sample.stack_kind(sig), sample.storage_type(sig), sample.size_and_align(sig)[0],
            sample.is_signed(sig)) == (kind, storage, size, signed)


def test_constructed_types(sample):
    int32 = PrimitiveType(ET.I4)
    assert sample.type_info(ByRefType(int32)).stack_kind is StackKind.BYREF
    assert sample.type_info(PinnedType(ByRefType(int32))).storage == "ptr"
    assert sample.type_info(PointerType(int32)).stack_kind is StackKind.NATIVE_INT
    assert sample.type_info(SzArrayType(int32)).stack_kind is StackKind.OBJ
    # An uninstantiated generic parameter is the canonical reference form.
    assert (sample.stack_kind(GenericVar(0, True)), sample.storage_type(GenericVar(0, False))) == (StackKind.OBJ, "ptr")
    assert sample.stack_kind(PrimitiveType(ET.VOID)) is None
    # `valuetype [mscorlib]System.Int32` (a TypeRef, resolved through the mscorlib facade) is int32.
    boxed = sample.token_type(0x0100000E)
    assert (sample.stack_kind(boxed), sample.storage_type(boxed)) == (StackKind.INT32, "i32")


# (type, size): facts from the runtime's sources and documentation.
SIZES = [("System.Int32", 4), ("System.Guid", 16), ("System.Decimal", 16), ("System.DateTime", 8),
         ("System.TimeSpan", 8), ("System.DayOfWeek", 4), ("System.Diagnostics.Tracing.EventKeywords", 8),
         ("System.Diagnostics.Tracing.EventDescriptor", 16)]


@pytest.mark.parametrize("name,size", SIZES)
def test_value_type_sizes(corelib, name, size):
    assert corelib.size_and_align(_named(corelib, name))[0] == size


def test_generic_and_special_value_types(corelib):
    int32, int64 = PrimitiveType(ET.I4), PrimitiveType(ET.I8)

    def inst(name, *args):
        return GenericInstType(NamedType(corelib.type_def(name), True), args)

    assert corelib.size_and_align(inst("System.Span`1", int32)) == (16, 8)
    assert corelib.size_and_align(inst("System.ValueTuple`2", int32, int64)) == (16, 8)
    kvp = inst("System.Collections.Generic.KeyValuePair`2", PrimitiveType(ET.STRING), int32)
    assert corelib.size_and_align(kvp)[0] == 16
    # Sequential but holding a reference: CoreCLR lays it out automatically (references first).
    assert [(f.name, f.offset) for f in corelib.layout(kvp).fields] == [("key", 0), ("value", 8)]
    # Auto layout puts the long first.
    assert {f.name: f.offset for f in corelib.layout(inst("System.ValueTuple`2", int32, int64)).fields} == \
        {"Item2": 0, "Item1": 8}
    # Enums are their underlying type.
    day = _named(corelib, "System.DayOfWeek")
    assert (corelib.stack_kind(day), corelib.storage_type(day), corelib.layout(day).kind) == \
        (StackKind.INT32, "i32", "enum")
    keywords = _named(corelib, "System.Diagnostics.Tracing.EventKeywords")
    assert (corelib.stack_kind(keywords), corelib.is_signed(keywords)) == (StackKind.INT64, True)
    # An explicit-layout struct: overlapping fields at their FieldLayout offsets.
    descriptor = corelib.layout(_named(corelib, "System.Diagnostics.Tracing.EventDescriptor"))
    desc = {f.name: f.offset for f in descriptor.fields}
    assert (descriptor.kind, desc["m_traceloggingId"], desc["m_id"], desc["m_level"], desc["m_task"],
            desc["m_keywords"]) == ("explicit", 0, 0, 4, 6, 8)
    guid = _named(corelib, "System.Guid")
    assert (corelib.stack_kind(guid), corelib.storage_type(guid)) == (StackKind.VALUE, "[16 x i8]")


def test_object_field_offsets(corelib, sample):
    exception = corelib.layout(NamedType(corelib.type_def("System.Exception"), False))
    assert exception.fields[0].offset == OBJECT_HEADER_SIZE == 8
    # Auto layout: references first, in declaration order (CoreCLR reorders fields).
    assert [f.name for f in exception.fields[:2]] == ["_exceptionMethod", "_message"]
    assert {f.name: f.offset for f in exception.fields}["_HResult"] == 116
    string = {f.name: f.offset for f in corelib.layout(NamedType(corelib.type_def("System.String"), False)).fields}
    assert (string["_stringLength"], string["_firstChar"]) == (STRING_LENGTH_OFFSET, STRING_CHARS_OFFSET)
    lst = {f.name: f.offset for f in corelib.layout(GenericInstType(
        NamedType(corelib.type_def("System.Collections.Generic.List`1"), False), (PrimitiveType(ET.I4),))).fields}
    assert (lst["_items"], lst["_size"], lst["_version"]) == (8, 16, 20)
    # The sample's MyError : [mscorlib]System.Exception, laid out across the facade:
    # Exception's fields end at 8 + 112.
    code = sample.field(0x04000001)
    assert (code.name, code.offset, code.is_static, code.owner_is_value_type) == ("Code", 120, False, False)
    saved = sample.field(0x04000003)
    assert (saved.is_static, saved.offset, saved.address_symbol) == \
        (True, None, "static:[sample]Tests.RethrowException.Program::Saved")


# ------------------------------------------------------------------------ the CoreCLR oracle

ORACLE_CS = r"""
using System;
using System.IO;
using System.Reflection;
using System.Reflection.Emit;
using System.Runtime.InteropServices;

static class Oracle {
    // Emits the `sizeof` opcode: the managed size of any value type, byref-like ones included.
    static int SizeOf(Type t) {
        var dm = new DynamicMethod("sz", typeof(int), Type.EmptyTypes, typeof(Oracle).Module, true);
        var il = dm.GetILGenerator();
        il.Emit(OpCodes.Sizeof, t);
        il.Emit(OpCodes.Ret);
        return (int)dm.Invoke(null, null);
    }
    // CoreCLR 3.1 x64 FieldDesc: {MethodTable*; dword mb/flags; dword offset:27, type:5}.
    static int Offset(FieldInfo f) {
        return Marshal.ReadInt32(f.FieldHandle.Value, 12) & 0x7FFFFFF;
    }
    static void Main(string[] args) {
        var flags = BindingFlags.Instance | BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.DeclaredOnly;
        foreach (var line in File.ReadAllLines(args[0])) {
            Type t;
            try {
                var parts = line.Split('|');
                t = parts[0] == "" ? Type.GetType(parts[1], true) : Assembly.LoadFrom(parts[0]).GetType(parts[1], true);
            } catch (Exception e) { Console.WriteLine("E\t" + line + "\t" + e.GetType().Name); continue; }
            try {
                Console.WriteLine("T\t" + line + "\t" + (t.IsValueType ? SizeOf(t).ToString() : "-"));
                foreach (var f in t.GetFields(flags))
                    Console.WriteLine("F\t" + f.MetadataToken.ToString("X8") + "\t" + Offset(f));
            } catch (Exception e) { Console.WriteLine("X\t" + line + "\t" + e.GetType().Name); }
        }
    }
}
"""

ZOO_CS = r"""
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
namespace Zoo {
  [StructLayout(LayoutKind.Explicit)] public struct Overlay { [FieldOffset(0)] public int I; [FieldOffset(0)] public float F; [FieldOffset(4)] public byte B; }
  [StructLayout(LayoutKind.Explicit)] public struct ExplicitBool { [FieldOffset(0)] public int A; [FieldOffset(4)] public bool B; }
  [StructLayout(LayoutKind.Explicit, Size = 24)] public struct ExplicitSized { [FieldOffset(2)] public short S; }
  [StructLayout(LayoutKind.Explicit)] public struct ExplicitRef { [FieldOffset(0)] public object O; [FieldOffset(8)] public byte B; }
  [StructLayout(LayoutKind.Explicit)] public struct ExplicitChar { [FieldOffset(0)] public char C; [FieldOffset(2)] public byte B; }
  [StructLayout(LayoutKind.Explicit, CharSet = CharSet.Unicode)] public struct ExplicitCharU { [FieldOffset(0)] public char C; [FieldOffset(2)] public byte B; }
  [StructLayout(LayoutKind.Sequential, Pack = 1)] public struct Packed1 { public byte A; public long B; public short C; }
  [StructLayout(LayoutKind.Sequential, Pack = 2)] public struct Packed2 { public byte A; public long B; public byte C; }
  [StructLayout(LayoutKind.Sequential, Size = 3)] public struct Sized3 { public byte A; }
  [StructLayout(LayoutKind.Sequential, Size = 2)] public struct SizedSmall { public int A; }
  public struct Empty { }
  public struct Mixed { public byte A; public long B; public byte C; }
  public struct WithBool { public bool A; public int B; public char C; }
  public struct WithRef { public byte A; public string S; public short C; public long D; public byte E; }
  public struct Nested { public byte A; public Mixed M; public byte B; }
  public struct NestedRef { public byte A; public WithRef W; public short B; }
  [StructLayout(LayoutKind.Auto)] public struct AutoStruct { public byte A; public long B; public byte C; public int D; }
  public unsafe struct Fixed { public fixed byte Buf[13]; public int X; }
  public struct Generic<T> { public byte A; public T Value; }
  public enum SmallEnum : byte { A, B }
  public enum LongEnum : long { A }
  public struct WithEnum { public SmallEnum E; public long L; public SmallEnum F; }
  public struct Sz2 { public short S; }
  public struct Sz1 { public byte S; }
  public class Base { public byte A; }
  public class Derived : Base { public long L; public byte B; public int I; public short S; }
  public class WithStructs : Base { public Sz1 X; public Sz2 Y; public byte Z; }
  public class DerivedFromStructs : WithStructs { public byte W; }
  [StructLayout(LayoutKind.Sequential)] public class SeqClass { public byte A; public long B; }
  [StructLayout(LayoutKind.Explicit)] public class ExplicitClass { [FieldOffset(0)] public long A; [FieldOffset(4)] public int B; }
  public class DerivedFromException : Exception { public int Code; public byte B; }
  public class DerivedFromList : List<int> { public byte B; }
  public class DerivedFromStream : System.IO.MemoryStream { public byte B; }
  [StructLayout(LayoutKind.Sequential, CharSet = CharSet.Unicode)] public struct UnicodeChars { public char C; public int I; }
  public unsafe struct HasPtr { public byte A; public int* P; }
  public struct HasIntPtr { public byte A; public IntPtr P; }
  public struct HasDecimal { public byte A; public decimal D; }
  public struct HasGuid { public byte A; public Guid G; }
  public struct HasDateTime { public byte A; public DateTime D; }
  public struct HasNullable { public byte A; public int? N; }
  public struct HasKVP { public byte A; public KeyValuePair<string, int> K; }
  public struct HasValueTuple { public byte A; public ValueTuple<byte, long> T; }
  public class GenericBox<T> { public byte A; public T Value; public byte B; }
}
"""

# Generic instantiations of the zoo: (reflection name, our generic type, its argument).
ZOO_GENERICS = [("Zoo.Generic`1[[System.Int64, System.Private.CoreLib]]", "Zoo.Generic`1", PrimitiveType(ET.I8)),
                ("Zoo.Generic`1[[System.String, System.Private.CoreLib]]", "Zoo.Generic`1", PrimitiveType(ET.STRING)),
                ("Zoo.Generic`1[[Zoo.Sz2]]", "Zoo.Generic`1", "Zoo.Sz2"),
                ("Zoo.GenericBox`1[[System.Int16, System.Private.CoreLib]]", "Zoo.GenericBox`1", PrimitiveType(ET.I2)),
                ("Zoo.GenericBox`1[[Zoo.Mixed]]", "Zoo.GenericBox`1", "Zoo.Mixed")]


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    """Runs the oracle over a list of (assembly path or "", reflection type name); returns
    {line: (size or None, {field token: offset})} as CoreCLR 3.1 reports them."""
    if shutil.which("mcs") is None:
        raise RuntimeError("mcs not found on PATH (Debian: apt-get install mono-devel)")
    out = tmp_path_factory.mktemp("oracle")
    exe = mcs(out / "oracle.exe", ORACLE_CS, "-target:exe")
    zoo = mcs_library(out / "zoo.dll", ZOO_CS, "-unsafe")

    def run(lines: list[str]) -> dict:
        listing = out / "types.txt"
        listing.write_text("\n".join(lines) + "\n")
        proc = run_on_coreclr(exe, [str(listing)])
        assert proc.returncode == 0, proc.stderr
        result, current = {}, None
        for row in proc.stdout.splitlines():
            parts = row.split("\t")
            if parts[0] == "T":
                current = result[parts[1]] = (None if parts[2] == "-" else int(parts[2]), {})
            elif parts[0] == "F":
                current[1][int(parts[1], 16)] = int(parts[2])
        return result

    run.zoo = zoo
    return run


def _reflection_name(ee: JitEE, rid: int) -> str:
    names, parts = ee.asm.names, []
    while rid:
        outer = names._enclosing_class(rid)
        text = names.type_name(0x02000000 | rid).rsplit("/", 1)[-1]
        parts.append(text)
        rid = outer
    return "+".join(reversed(parts))


def _non_generic_types(ee: JitEE) -> list[int]:
    module, rids = ee._main, []
    for rid in range(2, module.typedef_count() + 1):
        outer, generic = rid, False
        while outer:
            generic |= bool(module.generic_count(0x02000000 | outer))
            outer = module.names._enclosing_class(outer)
        if not generic and not module.row(0x02000000 | rid).Flags & 0x20:     # not an interface
            rids.append(rid)
    return rids


def _compare(ee: JitEE, truth: dict, lines: dict) -> tuple[int, int, list[str]]:
    """Compare every type of `lines` ({oracle line: type sig}) with the oracle's answers."""
    sizes = fields = 0
    wrong = []
    for line, sig in lines.items():
        if line not in truth:
            continue
        size, offsets = truth[line]
        layout = ee.layout(sig)
        ours = {f.token: f.offset for f in layout.fields if f.assembly == ee.assembly_name}
        header = 0 if size is not None else OBJECT_HEADER_SIZE
        if size is not None:
            sizes += 1
            if layout.size != size:
                wrong.append(f"{line}: size {layout.size}, CoreCLR {size}")
        for token, offset in offsets.items():
            fields += 1
            if ours.get(token, -1) - header != offset:
                wrong.append(f"{line} field 0x{token:08X}: offset {ours.get(token)}, CoreCLR {offset + header}")
    return sizes, fields, wrong


@pytest.mark.parametrize("path", [CORELIB, PYTHON_RUNTIME, FRAMEWORK / "System.Private.Xml.dll"],
                         ids=lambda p: p.name)
def test_layouts_agree_with_coreclr(oracle, path, capsys):
    ee = JitEE(Assembly(path))
    prefix = "" if path == CORELIB else str(path)
    lines = {f"{prefix}|{_reflection_name(ee, rid)}": ee.token_type(0x02000000 | rid) for rid in _non_generic_types(ee)}
    truth = oracle(list(lines))
    t0 = time.perf_counter()
    sizes, fields, wrong = _compare(ee, truth, lines)
    assert not wrong, "\n".join(wrong[:20])
    assert len(truth) > 0.95 * len(lines)        # the runtime loaded (nearly) every type
    with capsys.disabled():
        print(f"\n{path.name}: {len(truth)} types, {sizes} struct sizes, {fields} instance field offsets "
              f"agree with CoreCLR 3.1 ({time.perf_counter() - t0:.2f}s)")


def test_layout_zoo_agrees_with_coreclr(oracle):
    ee = JitEE(Assembly(oracle.zoo))
    lines = {}
    for rid in _non_generic_types(ee):
        name = _reflection_name(ee, rid)
        if name.startswith("Zoo.") and "+" not in name:
            lines[f"{oracle.zoo}|{name}"] = ee.token_type(0x02000000 | rid)
    for reflection, generic, arg in ZOO_GENERICS:
        token = ee.type_def(generic)
        arg = ee.token_type(ee.type_def(arg)) if isinstance(arg, str) else arg
        lines[f"{oracle.zoo}|{reflection}"] = GenericInstType(ee.token_type(token).generic, (arg,))
    truth = oracle(list(lines))
    assert len(truth) == len(lines)
    sizes, fields, wrong = _compare(ee, truth, lines)
    assert not wrong, "\n".join(wrong)
    # A few of the facts the oracle confirmed, spelled out.
    size = {name: ee.size_and_align(ee.token_type(ee.type_def(name)))[0] for name in
            ("Zoo.Overlay", "Zoo.ExplicitBool", "Zoo.ExplicitSized", "Zoo.Packed1", "Zoo.Empty", "Zoo.Fixed")}
    assert size == {"Zoo.Overlay": 8, "Zoo.ExplicitBool": 5, "Zoo.ExplicitSized": 24, "Zoo.Packed1": 11,
                    "Zoo.Empty": 1, "Zoo.Fixed": 20}
    small = ee.token_type(ee.type_def("Zoo.SmallEnum"))
    assert (ee.stack_kind(small), ee.storage_type(small), ee.is_signed(small)) == (StackKind.INT32, "i8", False)
    derived = {f.name: f.offset for f in ee.layout(ee.token_type(ee.type_def("Zoo.Derived"))).fields}
    assert derived == {"A": 8, "B": 9, "S": 10, "I": 12, "L": 16}      # back-filled after the 1-byte base


# ------------------------------------------------------------------------ members and methods

def test_memberrefs_resolve_through_facades(pyrt, sample):
    names = pyrt.asm.names
    by_text = {names.token(0x0A000000 | rid): 0x0A000000 | rid for rid in range(1, names.row_count(0x0A) + 1)}
    empty = pyrt.field(by_text["string [netstandard]System.String::Empty"])
    assert (empty.is_static, empty.resolved) == (True, "[System.Private.CoreLib]0x0400022C")
    # An instance field of a generic instantiation named through netstandard.
    item2 = next(pyrt.field(t) for text, t in by_text.items()
                 if text.startswith("!1 valuetype [netstandard]System.ValueTuple`2<class Python.Runtime.PyType"))
    assert (item2.offset, item2.owner_is_value_type, item2.resolved.split("]")[0]) == \
        (8, True, "[System.Private.CoreLib")
    assert isinstance(item2.type, NamedType) and item2.type.value_type is False    # !1 substituted
    get_message = sample.method(0x0A000007)
    assert (get_message.resolved.split("]")[0], get_message.is_virtual, get_message.is_static) == \
        ("[System.Private.CoreLib", True, False)
    write_line = sample.method(0x0A000004)
    assert (write_line.resolved.split("]")[0], write_line.is_virtual, write_line.is_static) == \
        ("[System.Console", False, True)


def test_method_info_and_llvm_types(corelib):
    new_guid = _method(corelib, "System.Guid::NewGuid")
    assert (new_guid.llvm_function_type(), new_guid.llvm_param_roles, new_guid.returns_value_type) == \
        ("void (ptr)", ("retbuf",), True)
    add_days = _method(corelib, "System.DateTime::AddDays")
    assert (add_days.llvm_function_type(), add_days.llvm_param_roles, add_days.owner_is_value_type) == \
        ("void (ptr, ptr, double)", ("this", "retbuf", "arg1"), True)
    this = corelib.arg_types(corelib.asm.find_method("System.DateTime::AddDays").rid)[0]
    assert this == ByRefType(NamedType(corelib.type_def("System.DateTime"), True))
    length = _method(corelib, "System.String::get_Length")
    assert (length.llvm_function_type(), length.is_virtual) == ("i32 (ptr)", False)
    to_string = _method(corelib, "System.Object::ToString")
    assert (to_string.is_virtual, to_string.is_final, to_string.is_abstract, to_string.owner_is_value_type) == \
        (True, False, False, False)
    is_digit = _method(corelib, "System.Char::IsDigit(char)")
    assert is_digit.llvm_function_type() == "i8 (i16)"
    assert is_digit.llvm_declaration() == \
        'declare zeroext i8 @"[System.Private.CoreLib]System.Char::IsDigit(char)"(i16 zeroext)'
    assert is_digit.symbol == "[System.Private.CoreLib]System.Char::IsDigit(char)"


def test_generic_substitution(corelib, pyrt):
    # MethodSpecs: method type arguments replace !!n in the parameters.
    names = corelib.asm.names
    checked = 0
    for rid in range(1, names.row_count(0x2B) + 1):
        token = 0x2B000000 | rid
        info = corelib.method(token)
        if "!" in "".join(a.format(names) for a in info.generic_args):
            continue                  # instantiated over the caller's own generic parameters
        assert "!!" not in " ".join(p.format(names) for p in info.params + (info.return_type,)), info.display
        assert "<" in info.symbol
        checked += 1
    assert checked > 100
    # Generic-instance parents: type arguments replace !n.
    names = pyrt.asm.names
    dict_add = next(pyrt.method(0x0A000000 | rid) for rid in range(1, names.row_count(0x0A) + 1)
                    if names.token(0x0A000000 | rid).startswith(
                        "instance void class [netstandard]System.Collections.Generic.Dictionary`2<string,")
                    and names.member_name(0x0A000000 | rid) == "Add")
    assert dict_add.params[0] == PrimitiveType(ET.STRING)
    # It implements IDictionary`2.Add: C# marks it virtual and final (sealed).
    assert (dict_add.resolved.split("]")[0], dict_add.is_virtual, dict_add.is_final) == \
        ("[System.Private.CoreLib", True, True)


def test_arg_and_local_types(corelib, sample):
    rid = corelib.asm.find_method("System.String::Concat(string, string)").rid
    assert corelib.arg_types(rid) == (PrimitiveType(ET.STRING), PrimitiveType(ET.STRING))
    equals = corelib.asm.find_method("System.String::Equals(object)").rid
    assert corelib.arg_types(equals)[0] == NamedType(corelib.type_def("System.String"), False)
    # Pinned locals are stored as pointers.
    names = corelib.asm.names
    pinned = next(s for rid in range(1, names.row_count(0x11) + 1)
                  if isinstance(s := names.standalone_signature(0x11000000 | rid), LocalVarSig)
                  and any(isinstance(t, PinnedType) for t in s.locals))
    for i, t in enumerate(pinned.locals):
        if pinned.pinned(i):
            info = corelib.type_info(t)
            assert (info.pinned, info.storage) == (True, "ptr")
    body = sample.asm.body(sample.asm.find_method("Tests.LocalsInHandlers.Program::FinallyOverwrites").rid)
    assert body.local_sig_token and \
        sample.local_types(body) == sample.asm.names.locals_signature(body.local_sig_token).locals
    assert sample.local_types(sample.asm.body(sample.asm.find_method("Tests.TryCatch.Program::Main").rid)) == ()


def test_symbols(sample, corelib):
    assert llvm_global('a"b\\c') == '@"a\\22b\\5Cc"'
    assert llvm_global("é") == '@"\\C3\\A9"'
    assert sample.class_handle(0x01000002) == "class:[mscorlib]System.Exception"
    assert sample.class_handle(0x02000003) == "class:[sample]Tests.CustomException.MyError"
    assert sample.string_literal(0x70000001) == "str:0x70000001"
    assert sample.method(0x0A000004).symbol == "[mscorlib]System.Console::WriteLine(string)"
    assert sample.method_handle(0x0A000004) == "method:[mscorlib]System.Console::WriteLine(string)"
    assert sample.field_offset_symbol(0x04000001) == "fieldoffset:[sample]Tests.CustomException.MyError::Code"
    assert sample.static_field_address(0x04000003) == "static:[sample]Tests.RethrowException.Program::Saved"
    # Every MethodDef of CoreLib has its own symbol, and LLVM accepts every declaration.
    decls = {}
    for rid in range(1, corelib.asm.method_count + 1):
        info = corelib.compiled_method(rid)
        assert info.symbol not in decls, info.symbol
        decls[info.symbol] = info.llvm_declaration()
    handles = [f"{llvm_global(sample.class_handle(t))} = external global i8" for t in (0x01000002, 0x1B000001)]
    text = "\n".join(['target triple = "x86_64-pc-windows-msvc"', *handles, *decls.values()]) + "\n"
    module = llvm.parse_assembly(text)
    module.verify()
    assert sum(1 for _ in module.functions) == len(decls)


def test_answers_are_cached_and_deterministic(sample):
    again = JitEE(Assembly(sample_path()))
    for token in (0x04000001, 0x04000003):
        assert sample.field(token) is sample.field(token)
        assert sample.field(token) == again.field(token)
    for token in (0x0A000004, 0x0A000007, 0x06000001):
        assert sample.method(token) is sample.method(token)
        assert sample.method(token) == again.method(token)
    assert FRAMEWORK in sample.search_path        # the default search path for the sample


# ------------------------------------------------------------------------ what cannot be resolved

def test_unresolved_types(tmp_path):
    shutil.copy(sample_path(), tmp_path / "sample.dll")
    alone = JitEE(Assembly(tmp_path / "sample.dll"), search_path=[])
    with pytest.raises(ReaderError) as e:
        alone.stack_kind(alone.token_type(0x0100000E))
    assert e.value.kind == "unresolved-type" and e.value.stage == "reader"
    assert "[mscorlib]System.Int32" in e.value.reason and "assembly mscorlib" in e.value.reason
    # A field whose base class cannot be loaded has no offset, and says why.
    code = alone.field(0x04000001)
    assert code.offset is None and "mscorlib" in code.offset_reason
    assert code.offset_symbol == "fieldoffset:[sample]Tests.CustomException.MyError::Code"
    # A method still has its signature and symbol, but no flags.
    write_line = alone.method(0x0A000004)
    assert (write_line.resolved, write_line.is_virtual, write_line.llvm_function_type()) == (None, None, "void (ptr)")
    assert "mscorlib" in write_line.unresolved_reason
    # The facade is there but the assembly it forwards to is not.
    shutil.copy(FRAMEWORK / "mscorlib.dll", tmp_path / "mscorlib.dll")
    facade_only = JitEE(Assembly(tmp_path / "sample.dll"), search_path=[])
    with pytest.raises(ReaderError) as e:
        facade_only.token_type(0x0100000E)
    assert e.value.kind == "unresolved-type" and "System.Private.CoreLib" in e.value.reason
    assert re.search(r"not beside sample\.dll nor on the search path", e.value.reason)
