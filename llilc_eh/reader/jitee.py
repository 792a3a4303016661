"""The JIT-EE interface, answered from metadata: what the runtime would tell a JIT.

A real JIT asks the execution engine (CoreCLR's `ICorJitInfo`) how big a struct is, where a
field lives, what a call target's signature is and which symbol stands for a class handle.
`JitEE` answers those questions for one compiled assembly from metadata alone, loading the
assemblies it references from disk as needed. Every answer is cached and deterministic.

Type identity and resolution
----------------------------
Signatures name types by TypeDef/TypeRef/TypeSpec tokens of the module they sit in. A TypeRef
is resolved by its resolution scope: an AssemblyRef is bound by identity (name, version,
culture, public key token; `llilc_eh.assembly.resolve`) beside the compiled assembly (the
folder the user named, symlinks kept), then in the `references` folders (flat or GAC), then
in one framework: .NET Core 3.1.23 (the corpus) or the machine's Mono (GAC, 4.5, facades).
`framework` is chosen once per compiled assembly from the assembly alone: the framework it is
part of; .NET Core when it references System.Runtime, System.Private.CoreLib or netstandard
and not mscorlib; for a .NET Framework (mscorlib) assembly .NET Core when its facades hold
every type the assembly names, else the one that does (Mono) -- never a per-type mixture.
Facades forward
types through their ExportedType table; forwarders are bound like references (netstandard ->
System.Runtime -> System.Private.CoreLib). Nested TypeRefs resolve their enclosing type first.
A type that cannot be found raises `ReaderError(kind="unresolved-type")` naming the type, the
assembly's identity, every place tried, files found there that did not match and why, and
why the framework was chosen. Every cache holds complete answers only (a failed binding is
kept as its reason and raised again identically), so a method's outcome never depends on
what was translated before it.

Inside, types are carried module-qualified (`_Named(module, token, ...)`), with generic
arguments substituted, so that a field of `List<T>` in CoreLib laid out for `T = int32` from
the compiled assembly has one representation.

Classification (ECMA-335 I.12.3.2.1)
------------------------------------
`stack_kind`: bool/char/int8..uint32 -> INT32, int64/uint64 -> INT64, native int/uint and
unmanaged pointers and function pointers -> NATIVE_INT, float32/float64 -> F, object
references (class, string, object, arrays) -> OBJ, managed pointers -> BYREF, value types ->
VALUE. Enums classify as their underlying type (the `value__` field); CoreLib's primitive
structs (`System.Int32` ...) referenced by name classify as the primitive. `void` has no stack
kind (None).

`storage_type` is the LLVM type a value occupies in memory: bool/int8/uint8 `i8`, char and
16-bit ints `i16`, `i32`, `i64`, native int/uint `i64`, float32 `float`, float64 `double`;
object references, managed and unmanaged pointers and function pointers are `ptr` (pointers
keep provenance; LLVM needs `ptr` for GEPs and loads through them), value types `[N x i8]`
with N their size (the alignment travels separately: `size_and_align`). `typedref` is a
16-byte value type: the data pointer at `TYPEDREF_VALUE_OFFSET` (0), the type handle at
`TYPEDREF_TYPE_OFFSET` (8), which is how this interface lays out CoreLib 3.1's
`System.TypedReference {ByReference<byte> Value; IntPtr Type}` (tests/reader/
test_typed_refs_and_blocks.py holds the constants to that layout).

An uninstantiated generic parameter (`!0`, `!!0`) is classified and laid out as CoreCLR's
canonical form for reference-type instantiations (`__Canon`): an OBJ, `ptr`, 8 bytes. That is
the shared code CoreCLR compiles once for all reference types; value-type instantiations need
their exact arguments, which MethodSpecs and TypeSpec parents supply.

Value-type and object layout (CoreCLR 3.1, x64)
------------------------------------------------
Layout follows the type loader of the runtime we check against (CoreCLR 3.1,
`MethodTableBuilder::PlaceInstanceFields` / `HandleExplicitLayout` and `EEClassLayoutInfo`),
including its field reordering; it is not approximated by declaration order.

* Sequential value types whose fields are all primitives, pointers or such structs
  ("managed sequential"), and blittable sequential/explicit types, use declaration order
  (explicit: FieldLayout offsets) with natural alignment capped by ClassLayout.PackingSize;
  the size is rounded up to the largest alignment unless ClassLayout.ClassSize is given
  (then max(ClassSize, end)). An empty struct is 1 byte. A `char` is blittable only in a
  Unicode/Auto-charset type, a `bool` never.
* Every other type (auto layout; sequential structs holding object references, e.g.
  `KeyValuePair<string,int>`; all ordinary classes) gets CoreCLR's *auto* layout: after
  the parent's fields (and, when the parent's end is not 8-aligned, small fields back-filled
  into the gap) come the 8-byte fields - object references first, in declaration order -
  then the 4-, 2- and 1-byte fields, then the embedded structs, each 8-aligned, each taking
  its size rounded up to 4. A value type's size is then rounded to 8 when above 8, else up
  to a power of two. So in auto layout fields are reordered, as CoreCLR does.
* Explicit-layout types that are not blittable: FieldLayout offsets; size the largest field
  end (or ClassSize when larger), rounded to 8 when the type holds object references.
* Objects: a method-table pointer (8 bytes) and then the instance fields of the base classes
  (Extends, walked across assemblies) and of the class. `field().offset` of a class's field
  counts from the object reference (so it includes the 8); of a value type's field, from
  the start of the value (add 8 for a boxed value). In a ReadyToRun image, a class whose base
  class (other than System.Object) lies in another module, or has a layout that depends on
  one, starts its fields at the base's end rounded up to 8 (CoreCLR's `NeedsAlignedBaseOffset`:
  R2R code must not depend on the exact size of another version bubble's types).
* Arrays and strings have no fields in metadata: an SZ array's length (int32) is at 8 and its
  elements at 16; a multi-dimensional array's length at 8, its bounds (rank lengths, then
  rank lower bounds, int32 each) at 16, its elements at 16 + 8*rank; a string's length
  (int32) at 8 and its UTF-16 chars at 12.
* Approximation: fields with marshalling info (`FieldMarshal`) count as blittable only when
  they are non-bool, non-char primitives or pointers (CoreCLR parses the marshalling
  descriptor). Blittability only decides the explicit-layout size rule and whether a
  sequential struct that is not managed-sequential keeps declaration order.
* Checked: the layouts of all 9,425 non-generic, non-interface types of the 165 framework
  assemblies (2,818 struct sizes, 22,389 instance field offsets) equal CoreCLR 3.1's; the test
  suite re-checks CoreLib, Python.Runtime, System.Private.Xml and a C# zoo of corner cases.

When a field's offset cannot be computed (its class or a base class cannot be loaded), `field`
still answers, with `offset=None` and the reason; the reader then uses the external symbol
`field_offset_symbol(token)` for it.

Methods and the calling convention of our generated code
--------------------------------------------------------
`method(token)` describes a MethodDef, MemberRef or MethodSpec: its signature with the
generic arguments of a MethodSpec and of a generic-instance parent substituted, and - when
the target MethodDef can be found in this or a referenced assembly (by name, then by
signature ignoring assembly scopes, searching base classes as the runtime does) - its flags.
`llvm_function_type()` is the convention our reader uses between compiled methods, not
CoreCLR's x64 ABI: `this` first (`ptr`: an object reference, or a managed pointer for a
value-type owner), then a hidden return buffer `ptr` when the return type is a value type
(the function returns `void`), then for vararg methods the varargs cookie `ptr` (a call site
passes `varargs_cookie(token)`), then the declared parameters. Value-type parameters are passed
as a `ptr` to a caller-made copy.
Small integers keep their storage type (`i8`, `i16`) and `llvm_declaration()` marks them
`signext`/`zeroext` per the signature, so LLVM widens them at the call boundary. (CoreCLR
returns 1/2/4/8-byte structs in RAX and passes them by value; a stub would bridge the two
conventions if compiled code called runtime code directly.)

Symbols
-------
Handles and addresses the runtime would provide are named external symbols, unquoted here;
`llvm_global(name)` quotes and escapes one for LLVM IR (`@"..."`, `\\22` for `"`, `\\5C` for
`\\`, other bytes outside printable ASCII as `\\XX` of their UTF-8). Types are written as the
token names them (a TypeRef with its resolution scope, a TypeDef of the compiled assembly with
the assembly's own name), so symbols are stable whatever the search path finds:
`class:[System.Runtime]System.Exception`, `method:[System.Console]System.Console::WriteLine(string)`,
`static:[sample]Ns.Type::field`, `fieldoffset:...`, `str:0x70000123` and
`vasigcookie:0x0A000012` (module-local).
A method symbol is `owner::name<inst>(declared params)` (`<[n]>` for an uninstantiated generic
method, as ILDasm writes it); conversion operators, the only C# overloads that differ by
return type alone, add `:returntype`.
"""

from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from llilc_eh.assembly.body import MethodBody
from llilc_eh.assembly.loader import Assembly
from llilc_eh.assembly.names import TokenKind
from llilc_eh.assembly.resolve import (
    Binder, Binding, Framework, installed_frameworks, reference_identity, reference_place, search_path_framework,
)
from llilc_eh.assembly.signatures import (
    ArrayType, ByRefType, CallKind, ElementType, FieldSig, FnPtrType, GenericInstType, GenericVar,
    MethodSig, ModifiedType, NamedType, PinnedType, PointerType, PrimitiveType, SzArrayType, TypeSig,
)
from llilc_eh.ee.protocol import JitEEInterface
from llilc_eh.errors import AssemblyError, LlilcEhError, ReaderError

__all__ = [
    "JitEE", "StackKind", "TypeInfo", "TypeLayout", "LayoutField", "FieldInfo", "MethodInfo",
    "llvm_global", "POINTER_SIZE", "OBJECT_HEADER_SIZE", "ARRAY_LENGTH_OFFSET", "SZARRAY_DATA_OFFSET",
    "STRING_LENGTH_OFFSET", "STRING_CHARS_OFFSET", "md_array_data_offset", "TYPEDREF_SIZE",
    "TYPEDREF_VALUE_OFFSET", "TYPEDREF_TYPE_OFFSET",
]

POINTER_SIZE = 8
OBJECT_HEADER_SIZE = 8        # the method-table pointer: instance fields of an object start here
ARRAY_LENGTH_OFFSET = 8       # int32 length of any array
SZARRAY_DATA_OFFSET = 16      # first element of a single-dimensional zero-based array
STRING_LENGTH_OFFSET = 8      # int32 length of a System.String
STRING_CHARS_OFFSET = 12      # its first UTF-16 unit
TYPEDREF_SIZE = 16            # System.TypedReference: a byref and a type handle
TYPEDREF_VALUE_OFFSET = 0     # its data pointer (CoreLib's `Value`, a ByReference<byte>)
TYPEDREF_TYPE_OFFSET = 8      # its type handle (CoreLib's `Type`, an IntPtr)

# ClassLayout.PackingSize 0 means the default, CoreCLR 3.1's DEFAULT_PACKING_SIZE.
DEFAULT_PACKING_SIZE = 32


def md_array_data_offset(rank: int) -> int:
    """First element of a rank-`rank` (multi-dimensional or non-zero-based) array."""
    return 16 + 8 * rank


class StackKind(enum.Enum):
    """The evaluation-stack types of ECMA-335 I.12.3.2.1."""

    __hash__ = object.__hash__   # identity: cheaper than Enum's name hash (see il.opcodes.OperandKind)

    INT32 = "int32"
    INT64 = "int64"
    NATIVE_INT = "native int"
    F = "F"
    OBJ = "O"
    BYREF = "&"
    VALUE = "value"


# Metadata flag bits (ECMA-335 II.23.1).
_TD_LAYOUT_MASK, _TD_SEQUENTIAL, _TD_EXPLICIT = 0x18, 0x08, 0x10
_TD_STRING_FORMAT_MASK, _TD_UNICODE, _TD_AUTOCHAR = 0x30000, 0x10000, 0x20000
_FD_STATIC, _FD_HAS_FIELD_MARSHAL = 0x10, 0x1000
_MD_STATIC, _MD_FINAL, _MD_VIRTUAL, _MD_ABSTRACT = 0x10, 0x20, 0x40, 0x400

# Coded indexes we decode (II.24.2.6): (tag bits, tables).
_TYPE_DEF_OR_REF = (2, (TokenKind.TYPE_DEF, TokenKind.TYPE_REF, TokenKind.TYPE_SPEC))
_RESOLUTION_SCOPE = (2, (TokenKind.MODULE, TokenKind.MODULE_REF, TokenKind.ASSEMBLY_REF, TokenKind.TYPE_REF))
_IMPLEMENTATION = (2, (0x26, TokenKind.ASSEMBLY_REF, 0x27))        # File, AssemblyRef, ExportedType
_TYPE_OR_METHOD_DEF = (1, (TokenKind.TYPE_DEF, TokenKind.METHOD_DEF))
_FILE, _EXPORTED_TYPE, _CLASS_LAYOUT, _FIELD_LAYOUT, _GENERIC_PARAM, _ASSEMBLY = 0x26, 0x27, 0x0F, 0x10, 0x2A, 0x20

_ET = ElementType
_PRIM_SIZE = {_ET.BOOLEAN: 1, _ET.CHAR: 2, _ET.I1: 1, _ET.U1: 1, _ET.I2: 2, _ET.U2: 2, _ET.I4: 4,
              _ET.U4: 4, _ET.I8: 8, _ET.U8: 8, _ET.R4: 4, _ET.R8: 8, _ET.I: 8, _ET.U: 8}
_PRIM_STORAGE = {_ET.BOOLEAN: "i8", _ET.CHAR: "i16", _ET.I1: "i8", _ET.U1: "i8", _ET.I2: "i16",
                 _ET.U2: "i16", _ET.I4: "i32", _ET.U4: "i32", _ET.I8: "i64", _ET.U8: "i64",
                 _ET.R4: "float", _ET.R8: "double", _ET.I: "i64", _ET.U: "i64"}
_PRIM_KIND = {_ET.BOOLEAN: StackKind.INT32, _ET.CHAR: StackKind.INT32, _ET.I1: StackKind.INT32,
              _ET.U1: StackKind.INT32, _ET.I2: StackKind.INT32, _ET.U2: StackKind.INT32,
              _ET.I4: StackKind.INT32, _ET.U4: StackKind.INT32, _ET.I8: StackKind.INT64,
              _ET.U8: StackKind.INT64, _ET.R4: StackKind.F, _ET.R8: StackKind.F,
              _ET.I: StackKind.NATIVE_INT, _ET.U: StackKind.NATIVE_INT}
_SIGNED = {_ET.I1, _ET.I2, _ET.I4, _ET.I8, _ET.I}

# CoreLib's structs that CoreCLR normalizes to their element type wherever they occur.
_PRIMITIVE_STRUCTS = {
    "Boolean": _ET.BOOLEAN, "Char": _ET.CHAR, "SByte": _ET.I1, "Byte": _ET.U1, "Int16": _ET.I2,
    "UInt16": _ET.U2, "Int32": _ET.I4, "UInt32": _ET.U4, "Int64": _ET.I8, "UInt64": _ET.U8,
    "Single": _ET.R4, "Double": _ET.R8, "IntPtr": _ET.I, "UIntPtr": _ET.U,
}
_CORELIB_NAMES = ("system.private.corelib", "mscorlib")
# References that only .NET Core (and .NET Standard) assemblies make: such an assembly binds in .NET Core.
_NETCORE_CONTRACTS = ("system.runtime", "system.private.corelib", "netstandard")
_CONVERSION_OPERATORS = ("op_Implicit", "op_Explicit")
_MAX_FORWARDS = 16
_CHOSEN = object()      # bind in the framework chosen for the compiled assembly (`JitEE.framework`)


_NEEDS_ESCAPE = re.compile(r'[^\x20\x21\x23-\x5B\x5D-\x7E]')


def llvm_global(name: str) -> str:
    """`@"name"` with LLVM's escapes: `"` -> `\\22`, `\\` -> `\\5C`, any byte outside printable
    ASCII -> `\\XX` (names are UTF-8 in LLVM). Most names need none (a hot path of the reader)."""
    if not _NEEDS_ESCAPE.search(name):
        return f'@"{name}"'
    out = []
    for b in name.encode("utf-8"):
        if 0x20 <= b <= 0x7E and b not in (0x22, 0x5C):
            out.append(chr(b))
        else:
            out.append(f"\\{b:02X}")
    return '@"' + "".join(out) + '"'


# ------------------------------------------------------------------------------- results

@dataclass(frozen=True)
class TypeInfo:
    """Everything the reader needs to store, load and pass a value of one type."""

    sig: TypeSig
    text: str
    stack_kind: StackKind | None      # None for void
    storage: str                      # LLVM type in memory ("void" for void)
    size: int
    align: int
    signed: bool                      # integer types: whether widening sign-extends
    gc: bool                          # is or holds an object reference or a managed pointer
    pinned: bool = False

    def __str__(self) -> str:
        kind = self.stack_kind.name if self.stack_kind else "-"
        return f"{self.text}: {kind} {self.storage} size {self.size} align {self.align}"


@dataclass(frozen=True)
class LayoutField:
    name: str
    offset: int        # from the start of the value, or from the object reference for a class
    size: int
    gc: bool           # an object reference (or a struct holding some) lives here
    token: int         # the FieldDef token in its declaring assembly
    assembly: str      # the declaring assembly's name


@dataclass(frozen=True)
class TypeLayout:
    """A type's instance layout as CoreCLR 3.1 computes it."""

    text: str
    kind: str          # primitive | enum | sequential | explicit | auto | class | reference
    size: int          # value types: the value's size; classes: field bytes after the header
    align: int
    gc: bool
    fields: tuple[LayoutField, ...]   # instance fields of the type and (classes) its bases

    def __str__(self) -> str:
        body = ", ".join(f"{f.name}@{f.offset}" for f in self.fields)
        return f"{self.text} [{self.kind}] size {self.size} align {self.align} {{{body}}}"


@dataclass(frozen=True)
class FieldInfo:
    """A field as `ldfld`/`stfld`/`ldsfld`/`ldflda` need it."""

    token: int
    name: str
    owner: str                     # owner type as ILDasm writes it
    type: TypeSig                  # field type, generic arguments of the owner substituted
    is_static: bool | None         # None: a MemberRef whose field could not be found
    offset: int | None             # instance fields: see the module docstring; else None
    offset_reason: str | None      # why offset is None for an instance (or unknown) field
    owner_is_value_type: bool | None
    symbol: str                    # `[Asm]Ns.Type::name`: the base of the symbols below
    offset_symbol: str             # `fieldoffset:<symbol>`
    address_symbol: str | None     # static fields: `static:<symbol>`
    resolved: str | None = None    # the FieldDef it resolved to, `[Asm]0x04001234`

    def __str__(self) -> str:
        where = "static" if self.is_static else (f"@{self.offset}" if self.offset is not None
                                                 else f"@? ({self.offset_reason})")
        return f"0x{self.token:08X} {self.symbol} {where}"


@dataclass(frozen=True)
class MethodInfo:
    """A call target or the method being compiled."""

    token: int
    name: str
    display: str                   # ILDasm text of the token
    owner: str                     # owner type as ILDasm writes it
    owner_token: int | None        # TypeDef/TypeRef/TypeSpec of the owner (for class handles)
    owner_type: TypeSig | None     # the owner as a type (`this` of a class; a value type's own type)
    owner_is_value_type: bool | None
    symbol: str
    call_kind: CallKind
    has_this: bool
    explicit_this: bool
    vararg: bool
    sentinel: int | None           # index in params of the first variable argument
    params: tuple[TypeSig, ...]
    return_type: TypeSig
    generic_args: tuple[TypeSig, ...]
    is_static: bool
    is_virtual: bool | None
    is_final: bool | None
    is_abstract: bool | None
    resolved: str | None           # the MethodDef it resolved to, `[Asm]0x06001234`
    unresolved_reason: str | None
    returns_value_type: bool | None
    llvm_return: str | None
    llvm_return_attr: str | None              # signext / zeroext / ""
    llvm_params: tuple[str, ...] | None
    llvm_param_roles: tuple[str, ...] | None   # this, retbuf, vararg-cookie, arg<n>
    llvm_param_attrs: tuple[str, ...] | None   # signext / zeroext / ""
    llvm_reason: str | None

    def llvm_function_type(self) -> str:
        """`i32 (ptr, i32, double)` in our calling convention (module docstring)."""
        self._require_llvm()
        return f"{self.llvm_return} ({', '.join(self.llvm_params)})"

    def llvm_declaration(self) -> str:
        """`declare i32 @"sym"(ptr, i8 signext)`."""
        self._require_llvm()
        params = ", ".join(f"{t} {a}".rstrip() for t, a in zip(self.llvm_params, self.llvm_param_attrs))
        ret = f"{self.llvm_return_attr} {self.llvm_return}".lstrip()
        return f"declare {ret} {llvm_global(self.symbol)}({params})"

    def _require_llvm(self) -> None:
        if self.llvm_params is None:
            raise ReaderError(f"no LLVM signature for {self.display}: {self.llvm_reason}",
                              kind="unresolved-type")

    def __str__(self) -> str:
        return f"0x{self.token:08X} {self.symbol}"


# ----------------------------------------------------------------- module-qualified types

class _Module:
    """One loaded assembly and the indexes the interface needs from it, built on first use."""

    def __init__(self, asm: Assembly):
        self.asm = asm
        self.names = asm.names
        self.row = asm.names._row      # token -> raw row (cached there)
        n = self.names
        self.name = n.string(n._row((_ASSEMBLY << 24) | 1).Name_StringIndex) if n.row_count(_ASSEMBLY) \
            else asm.path.stem
        self.is_corelib = self.name.lower() in _CORELIB_NAMES and n.row_count(TokenKind.TYPE_DEF) > 100
        self._typedefs: dict[tuple[str, str, int], int] | None = None
        self._exported: dict[tuple[str, str], int] | None = None
        self._class_layout: dict[int, tuple[int, int]] | None = None
        self._field_offsets: dict[int, int] | None = None
        self._generic_counts: dict[tuple[int, int], int] | None = None
        self._r2r: bool | None = None
        self._members_by_name: dict[tuple[int, int], dict[str, list[int]]] = {}
        self.value_types: dict[int, bool] = {}      # TypeDef rid -> is a value type
        self.enums: dict[int, bool] = {}            # TypeDef rid -> is an enum

    def __repr__(self) -> str:
        return f"<module {self.name}>"

    def string(self, index: int) -> str:
        return self.names.string(index)

    @staticmethod
    def decode(value: int, coded) -> int:
        bits, tables = coded
        tag = value & ((1 << bits) - 1)
        if tag >= len(tables):
            return 0
        return (tables[tag] << 24) | (value >> bits)

    def type_ns_name(self, token: int) -> tuple[str, str]:
        row = self.row(token)
        return self.string(row.TypeNamespace_StringIndex), self.string(row.TypeName_StringIndex)

    def typedef_count(self) -> int:
        return self.names.row_count(TokenKind.TYPE_DEF)

    def find_typedef(self, ns: str, name: str, enclosing: int = 0) -> int | None:
        if self._typedefs is None:
            index = {}
            for rid in range(1, self.typedef_count() + 1):
                ns_, name_ = self.type_ns_name((TokenKind.TYPE_DEF << 24) | rid)
                outer = self.names._enclosing_class(rid)
                index.setdefault((ns_, name_, outer), rid)
            self._typedefs = index
        return self._typedefs.get((ns, name, enclosing))

    def exported(self, ns: str, name: str) -> int | None:
        """The Implementation token of a top-level ExportedType (a type forwarder), or None."""
        if self._exported is None:
            index = {}
            for rid in range(1, self.names.row_count(_EXPORTED_TYPE) + 1):
                row = self.row((_EXPORTED_TYPE << 24) | rid)
                impl = self.decode(row.Implementation_CodedIndex, _IMPLEMENTATION)
                if impl >> 24 == _EXPORTED_TYPE:
                    continue          # nested exported types follow their enclosing type
                key = (self.string(row.TypeNamespace_StringIndex), self.string(row.TypeName_StringIndex))
                index.setdefault(key, impl)
            self._exported = index
        return self._exported.get((ns, name))

    def assembly_ref_name(self, token: int) -> str:
        return self.string(self.row(token).Name_StringIndex)

    def class_layout(self, rid: int) -> tuple[int, int]:
        """(PackingSize, ClassSize) from ClassLayout, (0, 0) when absent."""
        if self._class_layout is None:
            index = {}
            for i in range(1, self.names.row_count(_CLASS_LAYOUT) + 1):
                row = self.row((_CLASS_LAYOUT << 24) | i)
                index[row.Parent_Index] = (row.PackingSize, row.ClassSize)
            self._class_layout = index
        return self._class_layout.get(rid, (0, 0))

    def field_offset(self, field_rid: int) -> int | None:
        """A field's FieldLayout offset (explicit layout), or None."""
        if self._field_offsets is None:
            index = {}
            for i in range(1, self.names.row_count(_FIELD_LAYOUT) + 1):
                row = self.row((_FIELD_LAYOUT << 24) | i)
                index[row.Field_CodedIndex] = row.Offset
            self._field_offsets = index
        return self._field_offsets.get(field_rid)

    def generic_count(self, token: int) -> int:
        """How many generic parameters a TypeDef or MethodDef declares."""
        if self._generic_counts is None:
            counts: dict[tuple[int, int], int] = {}
            for i in range(1, self.names.row_count(_GENERIC_PARAM) + 1):
                row = self.row((_GENERIC_PARAM << 24) | i)
                owner = self.decode(row.Owner_CodedIndex, _TYPE_OR_METHOD_DEF)
                key = (owner >> 24, owner & 0xFFFFFF)
                counts[key] = counts.get(key, 0) + 1
            self._generic_counts = counts
        return self._generic_counts.get((token >> 24, token & 0xFFFFFF), 0)

    def run(self, type_rid: int, column: str, table: int) -> range:
        """The Field or MethodDef rids a TypeDef owns (its list runs to the next type's start)."""
        start = getattr(self.row((TokenKind.TYPE_DEF << 24) | type_rid), column)
        if type_rid < self.typedef_count():
            end = getattr(self.row((TokenKind.TYPE_DEF << 24) | (type_rid + 1)), column)
        else:
            end = self.names.row_count(table) + 1
        return range(start, max(start, end))

    def fields_of(self, type_rid: int) -> range:
        return self.run(type_rid, "FieldList_Index", TokenKind.FIELD)

    def methods_of(self, type_rid: int) -> range:
        return self.run(type_rid, "MethodList_Index", TokenKind.METHOD_DEF)

    def fields_named(self, type_rid: int, name: str) -> list[int]:
        """The Field rids of a TypeDef called `name`, in table order."""
        return self._members_named(TokenKind.FIELD, type_rid).get(name, [])

    def methods_named(self, type_rid: int, name: str) -> list[int]:
        """The MethodDef rids of a TypeDef called `name`, in table order."""
        return self._members_named(TokenKind.METHOD_DEF, type_rid).get(name, [])

    def _members_named(self, table: int, type_rid: int) -> dict[str, list[int]]:
        """A TypeDef's fields or methods by name, read once per type: member references to
        one type (String, Object, ...) would each read every member's name again."""
        key = (table, type_rid)
        index = self._members_by_name.get(key)
        if index is None:
            members = self.fields_of(type_rid) if table == TokenKind.FIELD else self.methods_of(type_rid)
            index = {}
            for rid in members:
                index.setdefault(self.string(self.row((table << 24) | rid).Name_StringIndex), []).append(rid)
            self._members_by_name[key] = index
        return index

    @property
    def is_r2r(self) -> bool:
        if self._r2r is None:
            from llilc_eh.assembly.r2r.reader import ReadyToRunImage
            try:
                ReadyToRunImage(self.asm)
                self._r2r = True
            except AssemblyError:
                self._r2r = False
        return self._r2r


@dataclass(frozen=True)
class _Prim:
    et: ElementType


@dataclass(frozen=True)
class _Named:
    """A class or value type named by a TypeDef/TypeRef token of `module`, with its generic
    arguments (themselves module-qualified)."""

    module: _Module
    token: int
    value_type: bool
    args: tuple = ()


@dataclass(frozen=True)
class _Wrapped:
    kind: str             # ptr | byref | szarray | array | fnptr
    target: object = None
    rank: int = 1


@dataclass(frozen=True)
class _Var:
    number: int
    method: bool


_CANON = _Var(-1, False)     # stands for an uninstantiated generic parameter


@dataclass(frozen=True)
class _Place:
    """How one instance field occupies memory (CoreCLR's per-field placement facts)."""

    size: int
    align: int
    gc: bool                 # an object reference itself (placed with the references)
    holds_gc: bool           # is or contains a GC reference
    by_value: bool           # an embedded struct (placed after the primitives in auto layout)
    managed_sequential: bool
    blittable: bool


@dataclass(frozen=True)
class _Layout:
    module: _Module
    rid: int
    kind: str
    size: int
    align: int
    gc: bool
    managed_sequential: bool
    blittable: bool
    depends_on_other_modules: bool
    offsets: tuple[tuple[int, int], ...]            # own instance fields: (field rid, offset)
    fields: tuple[tuple, ...]   # all instance fields incl. bases: (name, offset, size, gc, token, assembly)
    parent: "tuple[_Module, int, tuple] | None" = None

    def offset_of(self, rid: int) -> int | None:
        for r, off in self.offsets:
            if r == rid:
                return off
        return None


def _align_up(value: int, align: int) -> int:
    return (value + align - 1) // align * align


_SCOPE_RE = re.compile(r"\[[A-Za-z_][^\[\]]*\](?=[A-Za-z_<`])")


def _strip_scopes(text: str) -> str:
    """A signature's text without assembly scopes: how we match references to definitions."""
    return _SCOPE_RE.sub("", text)


class _SymbolNamer:
    """Types as symbols write them: TypeRefs with their scope, own TypeDefs with `[own name]`."""

    def __init__(self, module: _Module):
        self.module = module
        self.cache: dict[int, str] = {}

    def type_name(self, token: int) -> str:
        text = self.cache.get(token)
        if text is None:
            kind = token >> 24
            if kind == TokenKind.TYPE_SPEC:
                text = self.module.names.type_spec(token).format(self)
            else:
                text = self.module.names.type_name(token)
                if not text.startswith("["):
                    text = f"[{self.module.name}]{text}"
            self.cache[token] = text
        return text

    def bare(self, token: int) -> str:
        """A type in owner position: a TypeSpec without its `class`/`valuetype` keyword."""
        if token >> 24 == TokenKind.TYPE_SPEC:
            sig = self.module.names.type_spec(token)
            if isinstance(sig, GenericInstType):
                return (self.type_name(sig.generic.token) + "<"
                        + ",".join(a.format(self) for a in sig.args) + ">")
            if isinstance(sig, NamedType):
                return self.type_name(sig.token)
            return sig.format(self)
        return self.type_name(token)


def _strip(sig: TypeSig) -> TypeSig:
    while isinstance(sig, (ModifiedType, PinnedType)):
        sig = sig.target
    return sig


def is_void(sig: TypeSig) -> bool:
    """A `void` return (custom modifiers aside)."""
    sig = _strip(sig)
    return isinstance(sig, PrimitiveType) and sig.element_type == _ET.VOID


def _subst(sig: TypeSig, targs: tuple, margs: tuple) -> TypeSig:
    """`sig` with `!n` replaced by targs[n] and `!!n` by margs[n] (where given)."""
    if not targs and not margs:
        return sig
    if isinstance(sig, GenericVar):
        args = margs if sig.method else targs
        return args[sig.number] if sig.number < len(args) else sig
    if isinstance(sig, (PrimitiveType, NamedType)):
        return sig
    if isinstance(sig, GenericInstType):
        return GenericInstType(sig.generic, tuple(_subst(a, targs, margs) for a in sig.args))
    if isinstance(sig, PointerType):
        return PointerType(_subst(sig.target, targs, margs))
    if isinstance(sig, ByRefType):
        return ByRefType(_subst(sig.target, targs, margs))
    if isinstance(sig, SzArrayType):
        return SzArrayType(_subst(sig.element, targs, margs))
    if isinstance(sig, ArrayType):
        return ArrayType(_subst(sig.element, targs, margs), sig.shape)
    if isinstance(sig, ModifiedType):
        return ModifiedType(_subst(sig.target, targs, margs), sig.modifiers)
    if isinstance(sig, PinnedType):
        return PinnedType(_subst(sig.target, targs, margs))
    if isinstance(sig, FnPtrType):
        m = sig.method
        return FnPtrType(MethodSig(m.call_kind, m.has_this, m.explicit_this, m.generic_param_count,
                                   _subst(m.return_type, targs, margs),
                                   tuple(_subst(p, targs, margs) for p in m.params), m.sentinel))
    return sig


# ------------------------------------------------------------------------------ the JIT-EE

class JitEE(JitEEInterface):
    """Answers a JIT's questions about one compiled assembly (see the module docstring): the
    metadata implementation of `llilc_eh.ee.protocol.JitEEInterface`."""

    def __init__(self, asm: Assembly, search_path: Iterable[str | Path] | None = None,
                 references: Iterable[str | Path] = (), framework: str | None = None):
        """Referenced assemblies are bound by identity (`assembly.resolve`): beside `asm` (the
        folder named, symlinks kept), then in each of `references` (flat folders or GACs),
        then in the framework chosen for `asm` among the installed ones (`framework`), or in
        the one named (`framework="netcore"`: what a caller running the code in CoreCLR needs,
        whatever the assembly targets). `search_path` replaces the installed frameworks by
        these folders (`[]`: none)."""
        self.asm = asm
        self._binder = Binder(Path(asm.path), tuple(reference_place(d) for d in references))
        self._frameworks: tuple[Framework, ...] = (
            installed_frameworks() if search_path is None else (search_path_framework(search_path),))
        if framework is not None:
            named = tuple(f for f in self._frameworks if f.name == framework)
            if not named:
                raise ReaderError(f"framework {framework} is not installed (installed: "
                                  f"{', '.join(f.name for f in self._frameworks) or 'none'})", kind="no-framework")
            self._frameworks = named
        self._framework: tuple[Framework | None, str] | None = None
        self._main = _Module(asm)
        # Every cache below holds only complete answers, so that what one method asked
        # never changes what the next one gets (a failed computation leaves no entry; a
        # failed binding is cached as its full reason and raised again identically).
        self._modules: dict[str, _Module] = {os.path.realpath(asm.path): self._main}
        self._bindings: dict[tuple, _Module | Binding] = {}
        self._namers: dict[int, _SymbolNamer] = {}
        self._resolved: dict[tuple[int, int], tuple[_Module, int]] = {}
        self._norm_cache: dict[object, object] = {}
        self._layouts: dict[tuple, _Layout] = {}
        self._layout_busy: set[tuple] = set()
        self._type_infos: dict[TypeSig, TypeInfo] = {}
        self._fields: dict[int, FieldInfo] = {}
        self._methods: dict[int, MethodInfo] = {}
        self._token_types: dict[int, TypeSig] = {}

    def __repr__(self) -> str:
        return f"JitEE({self.asm.path.name!r})"

    @property
    def assembly_name(self) -> str:
        return self._main.name

    @property
    def search_path(self) -> tuple[Path, ...]:
        """Every folder a reference is looked up in, in order."""
        framework, _ = self.framework
        return tuple(dict.fromkeys(p.folder for p in self._binder.places(framework)))

    # -- assemblies and types ----------------------------------------------------------------

    @property
    def framework(self) -> tuple[Framework | None, str]:
        """The framework the compiled assembly's references bind in, and why that one
        (docs/decisions.md, "Assembly resolution"): one per compiled assembly, chosen from
        the assembly alone, so no method's outcome depends on another's."""
        if self._framework is None:
            self._framework = self._choose_framework()
        return self._framework

    def _choose_framework(self) -> tuple[Framework | None, str]:
        frameworks = self._frameworks
        if not frameworks:
            return None, "no framework is installed"
        if len(frameworks) == 1:
            return frameworks[0], "the only one given"
        main_path = Path(self.asm.path)
        for f in frameworks:
            if f.holds(main_path):
                return f, f"{main_path.name} is part of it"
        refs = self._main_reference_names()
        core = [r for r in refs if r.lower() in _NETCORE_CONTRACTS]
        netcore = next((f for f in frameworks if f.name == "netcore"), None)
        if core and netcore is not None and "mscorlib" not in {r.lower() for r in refs}:
            return netcore, f"{main_path.name} references {core[0]}, a .NET Core contract, and not mscorlib"
        # A .NET Framework assembly (mscorlib; perhaps netstandard too, for the .NET Standard
        # libraries it uses): .NET Core runs it when its facades hold every type the assembly
        # names; otherwise only a .NET Framework can, here Mono. Types that no framework holds
        # (an application's own missing library) decide nothing.
        first = self._misses(frameworks[0])
        if not first:
            return frameworks[0], f"it holds every type {main_path.name} names"
        misses = [first] + [self._misses(f) for f in frameworks[1:]]
        nowhere = set.intersection(*(set(m) for m in misses))
        own = [[t for t in m if t not in nowhere] for m in misses]
        best = min(range(len(frameworks)), key=lambda i: (len(own[i]), i))
        why = [f"{frameworks[i]} lacks {_some(own[i])}" for i in range(best) if own[i]]
        if own[best]:
            why.insert(0, f"it lacks the fewest of the types {main_path.name} names ({_some(own[best])})")
        else:
            why.insert(0, f"it holds every type {main_path.name} names"
                       + (" that any framework holds" if nowhere else ""))
        return frameworks[best], "; ".join(why)

    def _main_reference_names(self) -> list[str]:
        """The names of the compiled assembly's AssemblyRefs (a damaged row is left out: it
        decides nothing, and binding it later names its own error)."""
        out = []
        for rid in range(1, self._main.names.row_count(TokenKind.ASSEMBLY_REF) + 1):
            try:
                out.append(self._main.assembly_ref_name((TokenKind.ASSEMBLY_REF << 24) | rid))
            except LlilcEhError:
                continue
        return out

    def _misses(self, framework: Framework) -> list[str]:
        """The types named by the compiled assembly's TypeRefs that `framework` (with the
        places before it) does not hold, following type forwarders."""
        main = self._main
        out = []
        for rid in range(1, main.names.row_count(TokenKind.TYPE_REF) + 1):
            token = (TokenKind.TYPE_REF << 24) | rid
            try:
                scope = main.decode(main.row(token).ResolutionScope_CodedIndex, _RESOLUTION_SCOPE)
                if scope >> 24 != TokenKind.ASSEMBLY_REF or not scope & 0xFFFFFF:
                    continue
                ns, name = main.type_ns_name(token)
                what = main.names.type_name(token)
                self._find_exported(self._load(main, scope, what, framework), ns, name, what, framework)
            except LlilcEhError:
                out.append(_type_name_or_token(main, token))
        return out

    def _bind(self, module: _Module, ref_token: int, framework: Framework | None) -> _Module | Binding:
        """The module an AssemblyRef of `module` binds to in `framework`, or the failed Binding."""
        ref = reference_identity(module.names, ref_token)
        if ref.name.lower() == self._main.name.lower():
            return self._main
        key = (framework.name if framework else None, ref)
        hit = self._bindings.get(key)
        if hit is None:
            binding = self._binder.bind(ref, framework)
            hit = binding
            if binding.path is not None:
                real = os.path.realpath(binding.path)
                hit = self._modules.get(real)
                if hit is None:
                    hit = self._modules[real] = _Module(self._binder.assembly(binding.path))
            self._bindings[key] = hit
        return hit

    def _load(self, module: _Module, ref_token: int, what: str,
              framework: Framework | None | object = _CHOSEN) -> _Module:
        """The module an AssemblyRef of `module` names (in the chosen framework unless one is
        given); a ReaderError naming every place tried when there is none."""
        if framework is _CHOSEN:
            framework = self.framework[0]
        hit = self._bind(module, ref_token, framework)
        if isinstance(hit, Binding):
            raise self._missing_assembly(what, hit, framework)
        return hit

    def _unresolved(self, what: str, why: str) -> ReaderError:
        return ReaderError(f"type {what} cannot be resolved: {why}", kind="unresolved-type")

    def _missing_assembly(self, what: str, binding: Binding, framework: Framework | None) -> ReaderError:
        where = "; ".join(binding.tried)
        text = f"assembly {binding.ref} is not beside {self.asm.path.name} nor on the search path ({where})"
        if binding.rejected:
            text += "; found but not matching: " + "; ".join(binding.rejected)
        if self._framework is not None and framework is self._framework[0] and framework is not None:
            text += f"; framework {framework}: {self._framework[1]}"
        return self._unresolved(what, text)

    def _resolve(self, module: _Module, token: int) -> tuple[_Module, int]:
        """The TypeDef (module, rid) a TypeDef/TypeRef token of `module` denotes."""
        kind = token >> 24
        if kind == TokenKind.TYPE_DEF:
            return module, token & 0xFFFFFF
        key = (id(module), token)
        hit = self._resolved.get(key)
        if hit is not None:
            return hit
        if kind != TokenKind.TYPE_REF:
            raise self._unresolved(f"0x{token:08X}", "not a TypeDef or TypeRef token")
        what = module.names.type_name(token)
        ns, name = module.type_ns_name(token)
        scope = module.decode(module.row(token).ResolutionScope_CodedIndex, _RESOLUTION_SCOPE)
        skind, srid = scope >> 24, scope & 0xFFFFFF
        if skind == TokenKind.TYPE_REF and srid:
            outer_mod, outer_rid = self._resolve(module, scope)
            rid = outer_mod.find_typedef(ns, name, outer_rid)
            if rid is None:
                raise self._unresolved(what, f"{outer_mod.name} has no nested type {name}")
            result = (outer_mod, rid)
        elif skind == TokenKind.ASSEMBLY_REF and srid:
            result = self._find_exported(self._load(module, scope, what), ns, name, what)
        elif skind == TokenKind.MODULE_REF and srid:
            raise self._unresolved(what, "types in other modules of a multi-module assembly are not supported")
        else:
            # Module scope: this module; null scope: this assembly's ExportedType table.
            result = self._find_exported(module, ns, name, what)
        self._resolved[key] = result
        return result

    def _find_exported(self, module: _Module, ns: str, name: str, what: str,
                       framework: Framework | None | object = _CHOSEN) -> tuple[_Module, int]:
        """A top-level type defined in `module` or forwarded by it (following forwarders,
        each bound by identity like any reference)."""
        seen = []
        for _ in range(_MAX_FORWARDS):
            seen.append(module.name)
            rid = module.find_typedef(ns, name, 0)
            if rid is not None:
                return module, rid
            impl = module.exported(ns, name)
            if impl is None or impl >> 24 != TokenKind.ASSEMBLY_REF:
                via = " -> ".join(seen)
                raise self._unresolved(what, f"assembly {module.name} neither defines nor forwards it"
                                             + (f" (forwarded via {via})" if len(seen) > 1 else ""))
            module = self._load(module, impl, what, framework)
        raise self._unresolved(what, "type forwarders form a cycle: " + " -> ".join(seen))

    def _full_name(self, module: _Module, rid: int) -> str:
        ns, name = module.type_ns_name((TokenKind.TYPE_DEF << 24) | rid)
        return f"{ns}.{name}" if ns else name

    def _extends(self, module: _Module, rid: int) -> int:
        row = module.row((TokenKind.TYPE_DEF << 24) | rid)
        token = module.decode(row.Extends_CodedIndex, _TYPE_DEF_OR_REF)
        return token if token & 0xFFFFFF else 0

    def _token_full_name(self, module: _Module, token: int) -> str:
        """`Ns.Name` of a TypeDef/TypeRef token (a TypeSpec: of its generic type), unresolved."""
        if token >> 24 == TokenKind.TYPE_SPEC:
            sig = _strip(module.names.type_spec(token))
            if isinstance(sig, GenericInstType):
                token = sig.generic.token
            elif isinstance(sig, NamedType):
                token = sig.token
            else:
                return ""
        ns, name = module.type_ns_name(token)
        return f"{ns}.{name}" if ns else name

    def _def_is_value_type(self, module: _Module, rid: int) -> bool:
        hit = module.value_types.get(rid)
        if hit is None:
            base = self._extends(module, rid)
            hit = bool(base) and self._full_name(module, rid) != "System.Enum" and \
                self._token_full_name(module, base) in ("System.ValueType", "System.Enum")
            module.value_types[rid] = hit
        return hit

    def _def_is_enum(self, module: _Module, rid: int) -> bool:
        hit = module.enums.get(rid)
        if hit is None:
            base = self._extends(module, rid)
            hit = module.enums[rid] = bool(base) and self._token_full_name(module, base) == "System.Enum"
        return hit

    def _enum_underlying(self, module: _Module, rid: int) -> ElementType:
        for frid in module.fields_of(rid):
            if module.row((TokenKind.FIELD << 24) | frid).Flags & _FD_STATIC:
                continue
            t = _strip(module.names.field_signature(frid).type)
            if isinstance(t, PrimitiveType) and t.element_type in _PRIM_SIZE:
                return t.element_type
            break
        raise ReaderError(f"enum {self._full_name(module, rid)} in {module.name} has no primitive "
                          f"value__ field", kind="bad-enum")

    # -- module-qualified types ----------------------------------------------------------------

    def _rt(self, module: _Module, sig: TypeSig, targs: tuple = (), margs: tuple = ()):
        """A signature of `module` as a module-qualified type, generic arguments substituted."""
        sig = _strip(sig)
        if isinstance(sig, PrimitiveType):
            return _Prim(sig.element_type)
        if isinstance(sig, NamedType):
            if sig.token >> 24 == TokenKind.TYPE_SPEC:
                return self._rt(module, module.names.type_spec(sig.token), targs, margs)
            return _Named(module, sig.token, sig.value_type)
        if isinstance(sig, GenericInstType):
            return _Named(module, sig.generic.token, sig.generic.value_type,
                          tuple(self._rt(module, a, targs, margs) for a in sig.args))
        if isinstance(sig, GenericVar):
            args = margs if sig.method else targs
            return args[sig.number] if sig.number < len(args) else _Var(sig.number, sig.method)
        if isinstance(sig, PointerType):
            return _Wrapped("ptr", self._rt(module, sig.target, targs, margs))
        if isinstance(sig, ByRefType):
            return _Wrapped("byref", self._rt(module, sig.target, targs, margs))
        if isinstance(sig, SzArrayType):
            return _Wrapped("szarray", self._rt(module, sig.element, targs, margs))
        if isinstance(sig, ArrayType):
            return _Wrapped("array", self._rt(module, sig.element, targs, margs), sig.shape.rank)
        if isinstance(sig, FnPtrType):
            return _Wrapped("fnptr")
        raise ReaderError(f"cannot classify type {sig}", kind="bad-signature")

    def _norm(self, rt):
        """Value types that CoreCLR treats as primitives become `_Prim`: CoreLib's primitive
        structs and enums (as their underlying type)."""
        if not isinstance(rt, _Named) or not rt.value_type:
            return rt
        hit = self._norm_cache.get(rt)
        if hit is not None:
            return hit
        module, rid = self._resolve(rt.module, rt.token)
        result = rt
        if module.is_corelib and not rt.args:
            ns, name = module.type_ns_name((TokenKind.TYPE_DEF << 24) | rid)
            if ns == "System" and name in _PRIMITIVE_STRUCTS and not module.names._enclosing_class(rid):
                result = _Prim(_PRIMITIVE_STRUCTS[name])
        if result is rt and self._def_is_enum(module, rid):
            result = _Prim(self._enum_underlying(module, rid))
        self._norm_cache[rt] = result
        return result

    def _place(self, rt, char_blittable: bool = False, marshal: bool = False) -> _Place:
        """Placement facts of a field of type `rt`."""
        rt = self._norm(rt)
        if isinstance(rt, _Prim):
            et = rt.et
            if et in (_ET.STRING, _ET.OBJECT):
                return _Place(8, 8, True, True, False, False, False)
            if et == _ET.TYPEDBYREF:
                return _Place(TYPEDREF_SIZE, 8, False, True, True, False, False)
            size = _PRIM_SIZE.get(et)
            if size is None:
                raise ReaderError(f"a field cannot have type {et.name.lower()}", kind="bad-signature")
            blittable = et != _ET.BOOLEAN and (et != _ET.CHAR or (char_blittable and not marshal))
            return _Place(size, size, False, False, False, True, blittable)
        if isinstance(rt, _Wrapped):
            if rt.kind in ("ptr", "fnptr"):
                return _Place(8, 8, False, False, False, rt.kind == "ptr", True)
            if rt.kind == "byref":
                return _Place(8, 8, False, True, False, False, False)
            return _Place(8, 8, True, True, False, False, False)
        if isinstance(rt, _Var) or not rt.value_type:
            return _Place(8, 8, True, True, False, False, False)
        layout = self._named_layout(rt)
        return _Place(layout.size, layout.align, False, layout.gc, True,
                      layout.managed_sequential, layout.blittable and not marshal)

    def _named_layout(self, rt: _Named) -> _Layout:
        module, rid = self._resolve(rt.module, rt.token)
        return self._layout(module, rid, rt.args)

    def _layout(self, module: _Module, rid: int, args: tuple) -> _Layout:
        key = (id(module), rid, args)
        hit = self._layouts.get(key)
        if hit is not None:
            return hit
        if key in self._layout_busy:
            raise ReaderError(f"type {self._full_name(module, rid)} contains itself", kind="layout-cycle")
        self._layout_busy.add(key)
        try:
            layout = self._compute_layout(module, rid, args)
        finally:
            self._layout_busy.discard(key)
        self._layouts[key] = layout
        return layout

    def _compute_layout(self, module: _Module, rid: int, args: tuple) -> _Layout:
        token = (TokenKind.TYPE_DEF << 24) | rid
        row = module.row(token)
        flags = row.Flags
        is_value = self._def_is_value_type(module, rid)
        char_blittable = (flags & _TD_STRING_FORMAT_MASK) in (_TD_UNICODE, _TD_AUTOCHAR)
        # Own instance fields in declaration order, with their placement facts.
        own = []
        for frid in module.fields_of(rid):
            frow = module.row((TokenKind.FIELD << 24) | frid)
            if frow.Flags & _FD_STATIC:
                continue
            ftype = self._rt(module, module.names.field_signature(frid).type, args)
            place = self._place(ftype, char_blittable, bool(frow.Flags & _FD_HAS_FIELD_MARSHAL))
            own.append((frid, module.string(frow.Name_StringIndex), place))
        parent = None
        parent_layout = None
        base = self._extends(module, rid)
        if not is_value and base:
            parent_rt = self._rt(module, _base_sig(module, base), args)
            if isinstance(parent_rt, _Named):
                pmod, prid = self._resolve(parent_rt.module, parent_rt.token)
                parent_layout = self._layout(pmod, prid, parent_rt.args)
                parent = (pmod, prid, parent_rt.args)
        depends = any(p.by_value for _, _, p in own) and self._by_value_other_module(module, rid, args)
        parent_is_object = parent_layout is not None and parent_layout.parent is None
        if parent_layout is not None and not parent_is_object and (
                parent_layout.module is not module or parent_layout.depends_on_other_modules):
            depends = True
        packing, class_size = module.class_layout(rid)
        packing = packing or DEFAULT_PACKING_SIZE
        layout_kind = flags & _TD_LAYOUT_MASK
        gc = any(p.holds_gc for _, _, p in own) or (parent_layout is not None and parent_layout.gc)
        blittable = all(p.blittable for _, _, p in own) and layout_kind != 0 and \
            (parent_layout is None or parent_layout.blittable or parent_layout.size == 0)
        if is_value:
            if layout_kind == 0 and class_size and not own:
                # An auto-layout struct with a size and no fields is given that size (fixed buffers).
                return self._made(module, rid, "sequential", class_size, 1, False, True, True, depends, {}, own, None)
            managed_seq = layout_kind == _TD_SEQUENTIAL and all(p.managed_sequential for _, _, p in own)
            if layout_kind == _TD_SEQUENTIAL and (managed_seq or blittable):
                offsets, size, align = _sequential(own, 0, packing, class_size, None)
                return self._made(module, rid, "sequential", max(size, 1), align, gc, managed_seq, blittable,
                                  depends, offsets, own, None)
            if layout_kind == _TD_EXPLICIT:
                offsets = self._explicit_offsets(module, rid, own)
                if blittable:
                    _, size, align = _sequential(own, 0, packing, class_size, offsets)
                else:
                    size = max([offsets[f] + p.size for f, _, p in own] + [0])
                    if class_size and class_size >= size:
                        size = class_size
                    if gc:
                        size = _align_up(size, 8)
                    align = max([min(p.align, packing) for _, _, p in own] + [1])
                return self._made(module, rid, "explicit", max(size, 1), align, gc, False, blittable,
                                  depends, offsets, own, None)
            offsets, end = _auto(own, 0)
            size = max(end, 1)
            size = _align_up(size, 8 if size > 8 else _pow2(size))
            align = max([min(p.align, 8) for _, _, p in own] + [1])
            return self._made(module, rid, "auto", size, align, gc, False, False, depends, offsets, own, None)
        # A class: its fields follow the parent's.
        start = parent_layout.size if parent_layout is not None else 0
        if (parent_layout is not None and not parent_is_object and module.is_r2r
                and (parent_layout.module is not module or parent_layout.depends_on_other_modules)):
            start = _align_up(start, 8)        # NeedsAlignedBaseOffset
        if layout_kind == _TD_EXPLICIT:
            explicit = self._explicit_offsets(module, rid, own)
            slice_start = _align_up(start, 8) if gc else start
            offsets = {f: slice_start + off for f, off in explicit.items()}
            end = max([offsets[f] + p.size for f, _, p in own] + [slice_start])
            if gc:
                end = _align_up(end, 8)
            kind = "explicit"
        elif layout_kind == _TD_SEQUENTIAL and blittable and own:
            offsets, end, _ = _sequential(own, start, packing, class_size, None)
            kind = "sequential"
        else:
            offsets, end = _auto(own, start)
            kind = "class"
        align = 8
        return self._made(module, rid, kind, end, align, gc, False, blittable, depends, offsets, own,
                          (parent, parent_layout))

    def _by_value_other_module(self, module: _Module, rid: int, args: tuple) -> bool:
        for frid in module.fields_of(rid):
            if module.row((TokenKind.FIELD << 24) | frid).Flags & _FD_STATIC:
                continue
            ft = self._norm(self._rt(module, module.names.field_signature(frid).type, args))
            if isinstance(ft, _Named) and ft.value_type:
                layout = self._named_layout(ft)
                if layout.module is not module or layout.depends_on_other_modules:
                    return True
        return False

    def _explicit_offsets(self, module: _Module, rid: int, own) -> dict[int, int]:
        offsets = {}
        for frid, name, _ in own:
            off = module.field_offset(frid)
            if off is None:
                raise ReaderError(f"explicit-layout type {self._full_name(module, rid)} gives field {name} "
                                  f"no offset", kind="bad-layout")
            offsets[frid] = off
        return offsets

    @staticmethod
    def _made(module, rid, kind, size, align, gc, managed_seq, blittable, depends, offsets, own,
              parent_info) -> _Layout:
        fields = []
        parent = None
        if parent_info is not None:
            parent, parent_layout = parent_info
            if parent_layout is not None:
                fields.extend(parent_layout.fields)
        fields.extend((name, offsets[frid], p.size, p.holds_gc, (TokenKind.FIELD << 24) | frid, module.name)
                      for frid, name, p in own)
        fields.sort(key=lambda f: f[1])
        return _Layout(module, rid, kind, size, align, gc, managed_seq, blittable, depends,
                       tuple((frid, offsets[frid]) for frid, _, _ in own), tuple(fields), parent)

    # -- classification ------------------------------------------------------------------------

    def type_info(self, sig: TypeSig) -> TypeInfo:
        """Stack kind, storage, size, alignment, signedness of a type of the compiled assembly."""
        hit = self._type_infos.get(sig)
        if hit is not None:
            return hit
        info = self._classify(self._main, sig)
        self._type_infos[sig] = info
        return info

    def _classify(self, module: _Module, sig: TypeSig) -> TypeInfo:
        pinned = any(isinstance(s, PinnedType) for s in _wrappers(sig))
        text = sig.format(module.names)
        rt = self._norm(self._rt(module, sig))
        if isinstance(rt, _Prim):
            et = rt.et
            if et == _ET.VOID:
                return TypeInfo(sig, text, None, "void", 0, 1, False, False, pinned)
            if et in (_ET.STRING, _ET.OBJECT):
                return TypeInfo(sig, text, StackKind.OBJ, "ptr", 8, 8, False, True, pinned)
            if et == _ET.TYPEDBYREF:
                return TypeInfo(sig, text, StackKind.VALUE, f"[{TYPEDREF_SIZE} x i8]", TYPEDREF_SIZE, 8,
                                False, True, pinned)
            size = _PRIM_SIZE[et]
            return TypeInfo(sig, text, _PRIM_KIND[et], _PRIM_STORAGE[et], size, size, et in _SIGNED, False, pinned)
        if isinstance(rt, _Wrapped):
            if rt.kind in ("ptr", "fnptr"):
                return TypeInfo(sig, text, StackKind.NATIVE_INT, "ptr", 8, 8, False, False, pinned)
            if rt.kind == "byref":
                return TypeInfo(sig, text, StackKind.BYREF, "ptr", 8, 8, False, True, pinned)
            return TypeInfo(sig, text, StackKind.OBJ, "ptr", 8, 8, False, True, pinned)
        if isinstance(rt, _Var) or not rt.value_type:
            return TypeInfo(sig, text, StackKind.OBJ, "ptr", 8, 8, False, True, pinned)
        layout = self._named_layout(rt)
        return TypeInfo(sig, text, StackKind.VALUE, f"[{layout.size} x i8]", layout.size, layout.align,
                        False, layout.gc, pinned)

    def stack_kind(self, sig: TypeSig) -> StackKind | None:
        """ECMA-335 I.12.3.2.1 stack type of a value of type `sig`; None for void."""
        return self.type_info(sig).stack_kind

    def storage_type(self, sig: TypeSig) -> str:
        """The LLVM type a value of type `sig` occupies in memory (module docstring)."""
        return self.type_info(sig).storage

    def is_signed(self, sig: TypeSig) -> bool:
        """Whether a small integer of this type sign-extends (int8/16/32/64, native int; enums as
        their underlying type); False for unsigned, bool, char and non-integers."""
        return self.type_info(sig).signed

    def size_and_align(self, sig: TypeSig) -> tuple[int, int]:
        """(size, alignment) in bytes of a value of type `sig` in memory."""
        info = self.type_info(sig)
        return info.size, info.align

    def layout(self, sig: TypeSig) -> TypeLayout:
        """The instance layout of a class or value type of the compiled assembly."""
        info = self.type_info(sig)
        rt = self._norm(self._rt(self._main, sig))
        text = info.text
        raw = self._rt(self._main, sig)
        if isinstance(rt, _Prim):
            if not isinstance(raw, _Named):
                return TypeLayout(text, "primitive", info.size, info.align, info.gc, ())
            # An enum or a primitive struct: its own single field, at 0.
            layout = self._named_layout(raw)
            kind = "enum" if self._def_is_enum(layout.module, layout.rid) else "primitive"
            return TypeLayout(text, kind, info.size, info.align, info.gc, _layout_fields(layout, 0))
        if not isinstance(rt, _Named):
            return TypeLayout(text, "reference", 8, 8, True, ())
        layout = self._named_layout(rt)
        fields = _layout_fields(layout, 0 if rt.value_type else OBJECT_HEADER_SIZE)
        return TypeLayout(text, layout.kind, layout.size, layout.align, layout.gc, fields)

    def sysv_eightbytes(self, sig: TypeSig) -> tuple[str, ...] | str | None:
        """The SysV classification of a small value type from these layouts (reader.abi)."""
        from .abi import classify_eightbytes
        return classify_eightbytes(self, sig)

    def reference_offsets(self, sig: TypeSig) -> tuple[int, ...] | None:
        """Offsets of the object references inside a value type, from these layouts (reader.abi)."""
        from .abi import walk_reference_offsets
        return walk_reference_offsets(self, sig)

    def token_type(self, token: int) -> TypeSig:
        """A TypeDef/TypeRef/TypeSpec operand as a type: `class X` or `valuetype X` (resolving a
        TypeRef to learn which), or the TypeSpec's signature."""
        hit = self._token_types.get(token)
        if hit is not None:
            return hit
        kind = token >> 24
        if kind == TokenKind.TYPE_SPEC:
            sig = self._main.names.type_spec(token)
        elif kind in (TokenKind.TYPE_DEF, TokenKind.TYPE_REF):
            module, rid = self._resolve(self._main, token)
            sig = self._with_generic_vars(token, module, rid, self._def_is_value_type(module, rid))
        else:
            raise ReaderError(f"token 0x{token:08X} is not a type token", kind="unresolved-token")
        self._token_types[token] = sig
        return sig

    def _with_generic_vars(self, token: int, module: _Module, rid: int, value_type: bool) -> TypeSig:
        """`class X` or, for a generic type definition, `class X<!0,...>` (its own instantiation)."""
        named = NamedType(token, value_type)
        count = module.generic_count((TokenKind.TYPE_DEF << 24) | rid)
        if count:
            return GenericInstType(named, tuple(GenericVar(i, False) for i in range(count)))
        return named

    def class_ancestry(self, token: int) -> tuple[str, ...]:
        """`[assembly]Ns.Name` of the class a TypeDef/TypeRef token of the compiled assembly
        names, then of each base class down to System.Object (a generic base by its
        definition): what a catch clause's class test asks -- is the thrown class this one or
        derived from it (check.dispatch). ReaderError when a type does not resolve."""
        out: list[str] = []
        module, rid = self._resolve(self._main, token)
        for _ in range(_MAX_FORWARDS * 8):
            out.append(f"[{module.name}]{self._full_name(module, rid)}")
            base = self._extends(module, rid)
            if base >> 24 == TokenKind.TYPE_SPEC:
                sig = _strip(module.names.type_spec(base))
                base = sig.generic.token if isinstance(sig, GenericInstType) else 0
            if not base:
                break
            module, rid = self._resolve(module, base)
        return tuple(out)

    def type_def(self, name: str) -> int:
        """The TypeDef token of `Ns.Name` or `Ns.Outer/Inner` in the compiled assembly."""
        outer = 0
        parts = name.split("/")
        for i, part in enumerate(parts):
            ns, _, short = part.rpartition(".") if i == 0 else ("", "", part)
            rid = self._main.find_typedef(ns, short, outer)
            if rid is None:
                raise ReaderError(f"no type {name} in {self._main.name}", kind="unresolved-type")
            outer = rid
        return (TokenKind.TYPE_DEF << 24) | outer

    # -- symbols ----------------------------------------------------------------------------------

    def _namer(self, module: _Module) -> _SymbolNamer:
        namer = self._namers.get(id(module))
        if namer is None:
            namer = self._namers[id(module)] = _SymbolNamer(module)
        return namer

    @staticmethod
    def llvm_global(name: str) -> str:
        return llvm_global(name)

    def class_handle(self, token: int) -> str:
        """`class:[Scope]Ns.Type` for a TypeDef/TypeRef/TypeSpec token."""
        if token >> 24 not in (TokenKind.TYPE_DEF, TokenKind.TYPE_REF, TokenKind.TYPE_SPEC):
            raise ReaderError(f"token 0x{token:08X} is not a type token", kind="unresolved-token")
        return "class:" + self._namer(self._main).bare(token)

    def string_literal(self, token: int) -> str:
        """`str:0x70000123`: the string object of an `ldstr` (its value: `asm.names.user_string`)."""
        if token >> 24 != TokenKind.USER_STRING:
            raise ReaderError(f"token 0x{token:08X} is not a user string token", kind="unresolved-token")
        return f"str:0x{token:08X}"

    def varargs_cookie(self, token: int) -> str:
        """`vasigcookie:0x0A000012`: the cookie a call to a vararg method passes, naming the call
        site's signature (the MemberRef or StandAloneSig token; module-local)."""
        if token >> 24 not in (TokenKind.MEMBER_REF, TokenKind.METHOD_DEF, TokenKind.STANDALONE_SIG):
            raise ReaderError(f"token 0x{token:08X} names no call-site signature", kind="unresolved-token")
        return f"vasigcookie:0x{token:08X}"

    def static_field_address(self, token: int) -> str:
        return "static:" + self.field(token).symbol

    def field_offset_symbol(self, token: int) -> str:
        return self.field(token).offset_symbol

    def method_handle(self, token: int) -> str:
        return "method:" + self.method(token).symbol

    # -- fields -----------------------------------------------------------------------------------

    def field(self, token: int) -> FieldInfo:
        """A FieldDef or a MemberRef to a field (also of a generic instantiation)."""
        hit = self._fields.get(token)
        if hit is None:
            hit = self._fields[token] = self._field(token)
        return hit

    def _field(self, token: int) -> FieldInfo:
        main, names = self._main, self._main.names
        namer = self._namer(main)
        kind = token >> 24
        if kind == TokenKind.FIELD:
            rid = token & 0xFFFFFF
            owner_tok = names.field_owner(rid)
            name = names.member_name(token)
            ftype = names.field_signature(rid).type
            static = bool(main.row(token).Flags & _FD_STATIC)
            owner_rid = owner_tok & 0xFFFFFF
            symbol = f"{namer.bare(owner_tok)}::{name}"
            is_value = self._def_is_value_type(main, owner_rid)
            args = tuple(_CANON for _ in range(main.generic_count(owner_tok)))
            offset, reason = (None, None) if static else self._offset(main, owner_rid, args, rid, is_value)
            return FieldInfo(token, name, names.type_name(owner_tok), ftype, static, offset, reason, is_value,
                             symbol, "fieldoffset:" + symbol, "static:" + symbol if static else None,
                             f"[{main.name}]0x{token:08X}")
        if kind != TokenKind.MEMBER_REF:
            raise ReaderError(f"token 0x{token:08X} is not a field token", kind="unresolved-token")
        sig = names.member_ref_signature(token)
        if not isinstance(sig, FieldSig):
            raise ReaderError(f"MemberRef 0x{token:08X} is a method, not a field", kind="unresolved-token")
        parent = names.member_ref_parent(token)
        name = names.member_name(token)
        symbol = f"{namer.bare(parent)}::{name}"
        targs = _type_args(names, parent)
        ftype = _subst(sig.type, targs, ())
        owner_text = names.owner_text(parent)
        try:
            fmod, frid, decl_rid, decl_args = self._find_field(parent, name, sig)
        except LlilcEhError as e:
            return FieldInfo(token, name, owner_text, ftype, None, None, e.reason, None, symbol,
                             "fieldoffset:" + symbol, None, None)
        static = bool(fmod.row((TokenKind.FIELD << 24) | frid).Flags & _FD_STATIC)
        is_value = self._def_is_value_type(fmod, decl_rid)
        offset, reason = (None, None) if static else self._offset(fmod, decl_rid, decl_args, frid, is_value)
        return FieldInfo(token, name, owner_text, ftype, static, offset, reason, is_value, symbol,
                         "fieldoffset:" + symbol, "static:" + symbol if static else None,
                         f"[{fmod.name}]0x{(TokenKind.FIELD << 24) | frid:08X}")

    def _offset(self, module: _Module, rid: int, args: tuple, field_rid: int, is_value: bool):
        try:
            layout = self._layout(module, rid, args)
        except LlilcEhError as e:
            return None, e.reason
        off = layout.offset_of(field_rid)
        if off is None:
            return None, "not an instance field of its type"
        return off + (0 if is_value else OBJECT_HEADER_SIZE), None

    def _owner_def(self, parent: int):
        """The (module, rid, args) of a MemberRef parent (TypeDef/TypeRef/TypeSpec)."""
        main = self._main
        kind = parent >> 24
        if kind == TokenKind.TYPE_SPEC:
            rt = self._rt(main, main.names.type_spec(parent))
            if not isinstance(rt, _Named):
                raise ReaderError(f"member parent {main.names.type_name(parent)} is not a class or value type",
                                  kind="unresolved-member")
            module, rid = self._resolve(rt.module, rt.token)
            return module, rid, rt.args
        if kind in (TokenKind.TYPE_DEF, TokenKind.TYPE_REF):
            module, rid = self._resolve(main, parent)
            return module, rid, tuple(_CANON for _ in range(module.generic_count((TokenKind.TYPE_DEF << 24) | rid)))
        raise ReaderError(f"member parent 0x{parent:08X} is not a type", kind="unresolved-member")

    def _base(self, module: _Module, rid: int, args: tuple):
        base = self._extends(module, rid)
        if not base:
            return None
        rt = self._rt(module, _base_sig(module, base), args)
        if not isinstance(rt, _Named):
            return None
        bmod, brid = self._resolve(rt.module, rt.token)
        return bmod, brid, rt.args

    def _find_field(self, parent: int, name: str, sig: FieldSig):
        """The FieldDef a field MemberRef names: in its parent, else in a base class."""
        module, rid, args = self._owner_def(parent)
        want = _strip_scopes(sig.type.format(self._main.names))
        for _ in range(64):
            candidates = module.fields_named(rid, name)
            if len(candidates) > 1:
                candidates = [f for f in candidates if _strip_scopes(
                    module.names.field_signature(f).type.format(module.names)) == want] or candidates[:1]
            if candidates:
                return module, candidates[0], rid, args
            nxt = self._base(module, rid, args)
            if nxt is None:
                break
            module, rid, args = nxt
        raise ReaderError(f"no field {name} in {self._main.names.type_name(parent)} or its base classes",
                          kind="unresolved-member")

    # -- methods ----------------------------------------------------------------------------------

    def method(self, token: int) -> MethodInfo:
        """A MethodDef, MemberRef or MethodSpec (module docstring)."""
        hit = self._methods.get(token)
        if hit is None:
            hit = self._methods[token] = self._method(token)
        return hit

    def compiled_method(self, rid: int) -> MethodInfo:
        """The MethodDef being compiled."""
        return self.method((TokenKind.METHOD_DEF << 24) | rid)

    def _method(self, token: int) -> MethodInfo:
        main, names = self._main, self._main.names
        namer = self._namer(main)
        kind = token >> 24
        margs: tuple[TypeSig, ...] = ()
        method_token = token
        if kind == TokenKind.METHOD_SPEC:
            method_token = names.method_spec_method(token)
            margs = names.method_spec(token).args
            kind = method_token >> 24
        name = names.member_name(method_token)
        targs: tuple[TypeSig, ...] = ()
        flags = None
        resolved = reason = None
        owner_type: TypeSig | None = None
        owner_is_value: bool | None = None
        if kind == TokenKind.METHOD_DEF:
            rid = method_token & 0xFFFFFF
            sig = names.method_def_signature(rid)
            owner_token = names.method_owner(rid)
            owner = names.type_name(owner_token)
            owner_sym = namer.bare(owner_token)
            flags = main.row(method_token).Flags
            resolved = f"[{main.name}]0x{method_token:08X}"
            owner_is_value = self._def_is_value_type(main, owner_token & 0xFFFFFF)
            owner_type = self._with_generic_vars(owner_token, main, owner_token & 0xFFFFFF, owner_is_value)
        elif kind == TokenKind.MEMBER_REF:
            sig = names.member_ref_signature(method_token)
            if not isinstance(sig, MethodSig):
                raise ReaderError(f"MemberRef 0x{method_token:08X} is a field, not a method", kind="unresolved-token")
            parent = names.member_ref_parent(method_token)
            owner = names.owner_text(parent)
            pkind = parent >> 24
            if pkind == TokenKind.METHOD_DEF:
                # A vararg call site: the MemberRef carries the call's signature, the MethodDef is the callee.
                callee = self.method(parent)
                owner_token, owner_sym = callee.owner_token, callee.symbol.rsplit("::", 1)[0]
                owner_type, owner_is_value = callee.owner_type, callee.owner_is_value_type
                flags = main.row(parent).Flags
                resolved = callee.resolved
            elif pkind == TokenKind.MODULE_REF:
                owner_token, owner_sym = None, owner
                reason = "global functions of other modules are not supported"
            elif pkind == TokenKind.TYPE_SPEC and isinstance(_strip(names.type_spec(parent)), (ArrayType, SzArrayType)):
                # Get/Set/Address/.ctor of an array type: the runtime implements them.
                owner_token, owner_sym = parent, namer.bare(parent)
                owner_type, owner_is_value = names.type_spec(parent), False
                flags = 0 if sig.has_this else _MD_STATIC
                reason = "a method of an array type, implemented by the runtime"
            else:
                owner_token, owner_sym = parent, namer.bare(parent)
                targs = _type_args(names, parent)
                try:
                    owner_type = self.token_type(parent)
                    owner_is_value = _sig_is_value_type(owner_type)
                    fmod, frid = self._find_method(parent, name, sig)
                    flags = fmod.row((TokenKind.METHOD_DEF << 24) | frid).Flags
                    resolved = f"[{fmod.name}]0x{(TokenKind.METHOD_DEF << 24) | frid:08X}"
                except LlilcEhError as e:
                    reason = e.reason
        else:
            raise ReaderError(f"token 0x{token:08X} is not a method token", kind="unresolved-token")
        params = tuple(_subst(p, targs, margs) for p in sig.params)
        ret = _subst(sig.return_type, targs, margs)
        symbol = self._method_symbol(owner_sym, name, sig, margs)
        vararg = sig.call_kind in (CallKind.VARARG, CallKind.NATIVEVARARG)
        llvm = self._llvm_signature(sig.has_this and not sig.explicit_this, ret, params, vararg)
        display = names.token(token)
        return MethodInfo(
            token=token, name=name, display=display, owner=owner, owner_token=owner_token,
            owner_type=owner_type, owner_is_value_type=owner_is_value, symbol=symbol,
            call_kind=sig.call_kind, has_this=sig.has_this, explicit_this=sig.explicit_this, vararg=vararg,
            sentinel=sig.sentinel, params=params, return_type=ret, generic_args=tuple(margs),
            is_static=bool(flags & _MD_STATIC) if flags is not None else not sig.has_this,
            is_virtual=bool(flags & _MD_VIRTUAL) if flags is not None else None,
            is_final=bool(flags & _MD_FINAL) if flags is not None else None,
            is_abstract=bool(flags & _MD_ABSTRACT) if flags is not None else None,
            resolved=resolved, unresolved_reason=reason, **llvm)

    def _method_symbol(self, owner_sym: str, name: str, sig: MethodSig, margs) -> str:
        namer = self._namer(self._main)
        if margs:
            inst = "<" + ",".join(a.format(namer) for a in margs) + ">"
        else:
            inst = f"<[{sig.generic_param_count}]>" if sig.generic_param_count else ""
        parts = [p.format(namer) for p in sig.fixed_params]
        if sig.call_kind in (CallKind.VARARG, CallKind.NATIVEVARARG):
            parts.append("...")
        text = f"{owner_sym}::{name}{inst}({', '.join(parts)})"
        if name in _CONVERSION_OPERATORS:
            text += ":" + sig.return_type.format(namer)
        return text

    def _llvm_signature(self, implicit_this: bool, ret: TypeSig, params, vararg: bool) -> dict:
        try:
            types, roles, attrs = [], [], []
            if implicit_this:
                types.append("ptr"), roles.append("this"), attrs.append("")
            returns_vt, ret_attr = False, ""
            if is_void(ret):
                llvm_ret = "void"
            else:
                rinfo = self.type_info(ret)
                if rinfo.stack_kind is StackKind.VALUE:
                    returns_vt, llvm_ret = True, "void"
                    types.append("ptr"), roles.append("retbuf"), attrs.append("")
                else:
                    llvm_ret, ret_attr = rinfo.storage, _ext_attr(rinfo)
            if vararg:
                types.append("ptr"), roles.append("vararg-cookie"), attrs.append("")
            first = 1 if implicit_this else 0
            for i, p in enumerate(params):
                info = self.type_info(p)
                if info.stack_kind is StackKind.VALUE:
                    types.append("ptr"), attrs.append("")
                else:
                    types.append(info.storage)
                    attrs.append(_ext_attr(info))
                roles.append(f"arg{first + i}")
        except LlilcEhError as e:
            return dict(returns_value_type=None, llvm_return=None, llvm_return_attr=None, llvm_params=None,
                        llvm_param_roles=None, llvm_param_attrs=None, llvm_reason=e.reason)
        return dict(returns_value_type=returns_vt, llvm_return=llvm_ret, llvm_return_attr=ret_attr,
                    llvm_params=tuple(types),
                    llvm_param_roles=tuple(roles), llvm_param_attrs=tuple(attrs), llvm_reason=None)

    def _find_method(self, parent: int, name: str, sig: MethodSig) -> tuple[_Module, int]:
        """The MethodDef a method MemberRef names: in its parent, else in a base class."""
        module, rid, args = self._owner_def(parent)
        want = None
        for _ in range(64):
            candidates = module.methods_named(rid, name)
            candidates = [m for m in candidates if _same_shape(module.names.method_def_signature(m), sig)]
            if len(candidates) > 1:
                if want is None:
                    want = _sig_key(sig, self._main.names)
                candidates = [m for m in candidates
                              if _sig_key(module.names.method_def_signature(m), module.names) == want]
                if len(candidates) > 1:
                    raise ReaderError(f"{len(candidates)} overloads of {name} in {self._full_name(module, rid)} "
                                      f"match {sig.format(self._main.names)}", kind="ambiguous-member")
            if candidates:
                return module, candidates[0]
            nxt = self._base(module, rid, args)
            if nxt is None:
                break
            module, rid, args = nxt
        raise ReaderError(f"no method {sig.format(self._main.names, name, self._main.names.type_name(parent))} "
                          f"in that type or its base classes", kind="unresolved-member")

    # -- the method being compiled ------------------------------------------------------------

    def arg_types(self, rid: int) -> tuple[TypeSig, ...]:
        """IL argument types of MethodDef `rid`: `this` first for an instance method (`class X`,
        or `valuetype X&` for a value-type owner), then the declared parameters."""
        info = self.compiled_method(rid)
        args = list(info.params)
        if info.has_this and not info.explicit_this:
            this = info.owner_type
            args.insert(0, ByRefType(this) if info.owner_is_value_type else this)
        return tuple(args)

    def local_types(self, body: MethodBody | int) -> tuple[TypeSig, ...]:
        """The local variable types of a method body (or of a LocalVarSig token), as declared:
        pinned and byref locals keep their wrappers and are stored as `ptr`."""
        token = body if isinstance(body, int) else body.local_sig_token
        if not token:
            return ()
        sig = self._main.names.locals_signature(token)
        return tuple(sig.locals)


# --------------------------------------------------------------------------------- helpers

def _some(names: list[str], shown: int = 3) -> str:
    """`a, b, c and 4 more`."""
    text = ", ".join(names[:shown])
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _type_name_or_token(module: _Module, token: int) -> str:
    """A TypeRef as ILDasm writes it, or its token when even that cannot be read."""
    try:
        return module.names.type_name(token)
    except LlilcEhError:
        return f"0x{token:08X}"


def _wrappers(sig: TypeSig):
    while isinstance(sig, (ModifiedType, PinnedType)):
        yield sig
        sig = sig.target


def _base_sig(module: _Module, token: int) -> TypeSig:
    """An Extends token as a type: a TypeSpec's signature, else `class X`."""
    if token >> 24 == TokenKind.TYPE_SPEC:
        return module.names.type_spec(token)
    return NamedType(token, False)


def _type_args(names, parent: int) -> tuple[TypeSig, ...]:
    """The generic arguments of a member's parent when it is a generic instantiation."""
    if parent >> 24 == TokenKind.TYPE_SPEC:
        sig = _strip(names.type_spec(parent))
        if isinstance(sig, GenericInstType):
            return sig.args
    return ()


def _layout_fields(layout: _Layout, extra: int) -> tuple[LayoutField, ...]:
    return tuple(LayoutField(n, off + extra, size, gc, tok, asm) for n, off, size, gc, tok, asm in layout.fields)


def _sig_is_value_type(sig: TypeSig) -> bool:
    sig = _strip(sig)
    if isinstance(sig, GenericInstType):
        return sig.generic.value_type
    return isinstance(sig, NamedType) and sig.value_type


def _same_shape(a: MethodSig, b: MethodSig) -> bool:
    return (a.has_this == b.has_this and a.generic_param_count == b.generic_param_count
            and len(a.fixed_params) == len(b.fixed_params))


def _sig_key(sig: MethodSig, names) -> str:
    parts = [p.format(names) for p in sig.fixed_params] + [sig.return_type.format(names)]
    return _strip_scopes("|".join(parts))


def _ext_attr(info: TypeInfo) -> str:
    if info.stack_kind is StackKind.INT32 and info.size < 4:
        return "signext" if info.signed else "zeroext"
    return ""


def _pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _sequential(own, start: int, packing: int, class_size: int, explicit: dict | None):
    """CoreCLR's layout for sequential (and blittable explicit) types: fields in declaration
    order (or at their explicit offsets), each aligned to min(natural, packing); the size is
    ClassSize when larger, else the end rounded up to the largest alignment."""
    offsets = {}
    cur = start
    largest = 1
    total = start
    for frid, _, p in own:
        a = max(1, min(p.align, packing))
        largest = max(largest, a)
        if explicit is None:
            cur = _align_up(cur, a)
            offsets[frid] = cur
            cur += p.size
            end = offsets[frid] + p.size
        else:
            offsets[frid] = explicit[frid]
            end = explicit[frid] + p.size
        total = max(total, end)
    if class_size:
        total = max(class_size + start, total)
    else:
        total = _align_up(total, largest)
    return offsets, total, largest


def _auto(own, start: int):
    """CoreCLR 3.1's `PlaceInstanceFields` for x64: returns ({field rid: offset}, end)."""
    offsets: dict[int, int] = {}
    log2 = {1: 0, 2: 1, 4: 2, 8: 3}
    prims = [(frid, p) for frid, _, p in own if not p.by_value]
    counts = [0, 0, 0, 0]
    for _, p in prims:
        counts[log2[p.size]] += 1
    pos = start
    placed: set[int] = set()
    if pos % 8:
        # Back-fill the gap after an unaligned parent with the smaller fields.
        i = 0
        while i < 3:
            if pos % (1 << (i + 1)) == 0:
                i += 1
                continue
            if not any(counts[j] for j in range(i + 1, 4)):
                break
            j = i
            while j >= 0 and counts[j] == 0:
                j -= 1
            if j < 0:
                break
            i = j
            frid = next(f for f, p in prims if log2[p.size] == i and f not in placed)
            pos = _align_up(pos, 1 << i)
            offsets[frid] = pos
            placed.add(frid)
            pos += 1 << i
            counts[i] -= 1
            i += 1
    starts = [0, 0, 0, 0]
    for i in (3, 2, 1, 0):
        if counts[i] == 0:
            continue
        pos = _align_up(pos, min(1 << i, 8))
        starts[i] = pos
        pos += counts[i] << i
    # Object references take the front of the 8-byte region, in declaration order.
    gc_next = starts[3]
    next_of = list(starts)
    next_of[3] = starts[3] + 8 * sum(1 for f, p in prims if p.gc and f not in placed)
    for frid, p in prims:
        if frid in placed:
            continue
        if p.gc:
            offsets[frid] = gc_next
            gc_next += 8
        else:
            k = log2[p.size]
            offsets[frid] = next_of[k]
            next_of[k] += p.size
    for frid, _, p in own:
        if p.by_value:
            pos = _align_up(pos, 8)
            offsets[frid] = pos
            pos += _align_up(p.size, 4)
    return offsets, pos
