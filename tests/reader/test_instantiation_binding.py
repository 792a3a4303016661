"""An exact generic instantiation bound in the metadata JIT-EE (JitEE.bind_instantiation,
reader/instantiation.py): the compiled method's own `!n` / `!!n` classify as the bound types,
field offsets of its generic struct are the instantiation's, a value class of another assembly
binds by its file, and unbinding gives back the definition's answers (a generic parameter is an
object reference). The runtime half (`llilc-eh run`) is tests/runtime/test_instantiations.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llilc_eh.assembly.loader import Assembly
from llilc_eh.assembly.signatures import GenericVar
from llilc_eh.errors import ReaderError
from llilc_eh.reader.jitee import JitEE
from llilc_eh.reader.types import StackKind

from reader_builds import mcs_library

SOURCE = """
using System;
using System.Threading.Tasks;
public struct Pair<T> { public T A; public T B; public int Tag;
    public T Pick(bool first) { try { return first ? A : B; } finally { Tag++; } } }
public struct Wide { public long X; public byte Y; public string S; }
public struct Awaits { public int State; public System.Runtime.CompilerServices.YieldAwaitable.YieldAwaiter W; public object O; }
public static class G { public static T Id<T>(T x) { try { return x; } finally { } } }
public class O { public struct In { public int X; } }
public class P { public struct In { public long Y; public long Z; } }
"""
CORELIB = Path.home() / ".cache/llilc-eh/corpus/dotnetcore2-3.1.23/dotnetcore2/bin/shared/Microsoft.NETCore.App/3.1.23/System.Private.CoreLib.dll"
I4, I8 = ("primitive", "I4"), ("primitive", "I8")


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> Path:
    return mcs_library(tmp_path_factory.mktemp("inst") / "instlib.dll", SOURCE)


def _method(asm: Assembly, name: str) -> int:
    return 0x06000000 | asm.find_method(name).rid


def _field(ee: JitEE, asm: Assembly, owner: str, name: str):
    """The offset the reader gets for `name` of the compiled method's own Pair<!0>: the FieldDef
    (a MemberRef on the TypeSpec resolves the same way, through the binding)."""
    for rid in range(1, asm.names.row_count(0x04) + 1):
        token = 0x04000000 | rid
        if asm.names.member_name(token) == name and asm.names.type_name(asm.names.field_owner(rid)) == owner:
            return ee.field(token).offset
    raise AssertionError(name)


def test_class_arguments_lay_out_the_generic_struct(lib):
    asm = Assembly(lib)
    ee = JitEE(asm, framework="netcore")
    pick = _method(asm, "Pair`1::Pick")
    offsets = {}
    for arg in (I4, I8, ("valuetype", str(lib), "", "Wide", ())):
        ee.bind_instantiation(pick, (arg,), ())
        offsets[arg[-1] if arg[0] == "primitive" else "Wide"] = (
            _field(ee, asm, "Pair`1", "B"), _field(ee, asm, "Pair`1", "Tag"), ee.type_info(GenericVar(0, False)),
            _field(ee, asm, "Pair`1", "A"))
    assert offsets["I4"][:2] == (4, 8) and offsets["I4"][2].stack_kind is StackKind.INT32
    assert offsets["I8"][:2] == (8, 16) and offsets["I8"][2].stack_kind is StackKind.INT64
    wide = offsets["Wide"][2]
    assert wide.stack_kind is StackKind.VALUE and wide.size == 24 and wide.gc
    # CoreCLR's auto layout of a struct holding references (as the layout model has it): the int
    # first, then the embedded structs -- Tag 0, A 8, B 32
    assert (offsets["Wide"][3], offsets["Wide"][0], offsets["Wide"][1]) == (8, 32, 0)
    ee.bind_instantiation(None)
    assert ee.type_info(GenericVar(0, False)).stack_kind is StackKind.OBJ     # the definition again
    assert _field(ee, asm, "Pair`1", "B") == 8                                # T as a reference


def test_method_argument_of_another_assembly_in_corelib(lib):
    """CoreLib code over a struct of the program (Array.Sort<Ordered> ...): found by its file."""
    corelib = Assembly(CORELIB)
    ee = JitEE(corelib, framework="netcore")
    start = _method(corelib, "System.Runtime.CompilerServices.AsyncMethodBuilderCore::Start")
    ee.bind_instantiation(start, (), (("valuetype", str(lib), "", "Wide", ()),))
    info = ee.type_info(GenericVar(0, True))
    assert (info.stack_kind, info.size, info.gc) == (StackKind.VALUE, 24, True)
    assert ee.reference_offsets(GenericVar(0, True)) == (0,)         # the string first (auto layout)
    # a struct holding an empty struct (an awaiter): the metadata walk stops, None -- not a crash
    ee.bind_instantiation(start, (), (("valuetype", str(lib), "", "Awaits", ()),))
    assert ee.reference_offsets(GenericVar(0, True)) is None
    with pytest.raises(ReaderError, match="0 types of that name"):
        ee.bind_instantiation(start, (), (("valuetype", str(lib), "", "NoSuchStruct", ()),))


def test_generic_method_binding(lib):
    asm = Assembly(lib)
    ee = JitEE(asm, framework="netcore")
    ident = _method(asm, "G::Id")
    ee.bind_instantiation(ident, (), (("primitive", "R8"),))
    m = ee.compiled_method(ident & 0xFFFFFF)
    assert m.llvm_return == "double" and m.llvm_params == ("double",)
    ee.bind_instantiation(None)
    assert ee.compiled_method(ident & 0xFFFFFF).llvm_return == "ptr"


def test_nested_value_type_found_through_its_enclosing_type(lib):
    """The runtime names a nested type alone; two of one name are told apart by the enclosing
    chain the runtime side reads (appendClassName); without it the binding is refused by name."""
    asm = Assembly(lib)
    ee = JitEE(asm, framework="netcore")
    ident = _method(asm, "G::Id")
    sizes = {}
    for outer in ("O", "P"):
        ee.bind_instantiation(ident, (), (("valuetype", str(lib), "", "In", (), (outer,)),))
        sizes[outer] = ee.type_info(GenericVar(0, True)).size
    assert sizes == {"O": 4, "P": 16}
    with pytest.raises(ReaderError, match="2 types of that name"):
        ee.bind_instantiation(ident, (), (("valuetype", str(lib), "", "In", ()),))
