"""Types across assemblies, as the metadata JIT-EE carries them: binding references,
resolving type tokens, module-qualified types with generic arguments substituted, and the
names symbols give types.

Why a module of its own: layout (`reader.layout`) and the JIT-EE answers (`reader.jitee`) both
stand on one notion of type identity; `TypeSystem` is that ground, the first layer of the
metadata JIT-EE (`JitEE` derives from `CoreClrLayout`, which derives from it).

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
"""

from __future__ import annotations

import os
import re
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from llilc_eh.assembly.loader import Assembly
from llilc_eh.assembly.names import TokenKind
from llilc_eh.assembly.resolve import (
    Binder, Binding, Framework, installed_frameworks, reference_identity, reference_place, search_path_framework,
)
from llilc_eh.assembly.signatures import (
    ArrayType, ByRefType, ElementType, FnPtrType, GenericInstType, GenericVar,
    MethodSig, ModifiedType, NamedType, PinnedType, PointerType, PrimitiveType, SzArrayType, TypeSig,
)
from llilc_eh.errors import AssemblyError, LlilcEhError, ReaderError

from .types import StackKind

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


# ----------------------------------------------------------------- module-qualified types

# The metadata indexes of an assembly (TypeDefs and forwarders by name, class and field
# layout, generic parameter counts, members by name), built on first use and kept per opened
# `Assembly` for the process. Why: every TypeSystem (one per validated file, and one more for
# RyuJIT's dispatch check) made its own `_Module` of CoreLib, System.Runtime, ... and read
# their whole TypeDef and ExportedType tables again; the Assembly objects are shared since
# `assembly.resolve` opens a file once per process (`_OPENED`, keyed by path, size and
# mtime), so keying the indexes by the Assembly keys them the same way -- a rewritten file is
# a new Assembly with indexes of its own, and they go when it does (weak keys). Only what
# the rows alone decide is kept here; answers that depend on the binding (value types,
# enums: `_Module.value_types`) stay with the TypeSystem's `_Module`.
_INDEXES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _indexes_of(asm: Assembly) -> dict:
    hit = _INDEXES.get(asm)
    if hit is None:
        hit = _INDEXES[asm] = {}
    return hit


class _Module:
    """One loaded assembly and the indexes the interface needs from it, built on first use
    (those of the rows alone shared per Assembly: `_INDEXES`)."""

    def __init__(self, asm: Assembly):
        self.asm = asm
        self.names = asm.names
        self.row = asm.names._row      # token -> raw row (cached there)
        n = self.names
        self.name = n.string(n._row((_ASSEMBLY << 24) | 1).Name_StringIndex) if n.row_count(_ASSEMBLY) \
            else asm.path.stem
        self.is_corelib = self.name.lower() in _CORELIB_NAMES and n.row_count(TokenKind.TYPE_DEF) > 100
        # keys: typedefs, exported, class_layout, field_offsets, generic_counts (each built whole
        # on first use), members_by_name (filled per type)
        self._index = _indexes_of(asm)
        self._r2r: bool | None = None
        self._members_by_name: dict[tuple[int, int], dict[str, list[int]]] = \
            self._index.setdefault("members_by_name", {})
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
        typedefs = self._index.get("typedefs")
        if typedefs is None:
            typedefs = {}
            for rid in range(1, self.typedef_count() + 1):
                ns_, name_ = self.type_ns_name((TokenKind.TYPE_DEF << 24) | rid)
                outer = self.names._enclosing_class(rid)
                typedefs.setdefault((ns_, name_, outer), rid)
            self._index["typedefs"] = typedefs
        return typedefs.get((ns, name, enclosing))

    def exported(self, ns: str, name: str) -> int | None:
        """The Implementation token of a top-level ExportedType (a type forwarder), or None."""
        exported = self._index.get("exported")
        if exported is None:
            exported = {}
            for rid in range(1, self.names.row_count(_EXPORTED_TYPE) + 1):
                row = self.row((_EXPORTED_TYPE << 24) | rid)
                impl = self.decode(row.Implementation_CodedIndex, _IMPLEMENTATION)
                if impl >> 24 == _EXPORTED_TYPE:
                    continue          # nested exported types follow their enclosing type
                key = (self.string(row.TypeNamespace_StringIndex), self.string(row.TypeName_StringIndex))
                exported.setdefault(key, impl)
            self._index["exported"] = exported
        return exported.get((ns, name))

    def assembly_ref_name(self, token: int) -> str:
        return self.string(self.row(token).Name_StringIndex)

    def class_layout(self, rid: int) -> tuple[int, int]:
        """(PackingSize, ClassSize) from ClassLayout, (0, 0) when absent."""
        layouts = self._index.get("class_layout")
        if layouts is None:
            layouts = {}
            for i in range(1, self.names.row_count(_CLASS_LAYOUT) + 1):
                row = self.row((_CLASS_LAYOUT << 24) | i)
                layouts[row.Parent_Index] = (row.PackingSize, row.ClassSize)
            self._index["class_layout"] = layouts
        return layouts.get(rid, (0, 0))

    def field_offset(self, field_rid: int) -> int | None:
        """A field's FieldLayout offset (explicit layout), or None."""
        offsets = self._index.get("field_offsets")
        if offsets is None:
            offsets = {}
            for i in range(1, self.names.row_count(_FIELD_LAYOUT) + 1):
                row = self.row((_FIELD_LAYOUT << 24) | i)
                offsets[row.Field_CodedIndex] = row.Offset
            self._index["field_offsets"] = offsets
        return offsets.get(field_rid)

    def generic_count(self, token: int) -> int:
        """How many generic parameters a TypeDef or MethodDef declares."""
        counts = self._index.get("generic_counts")
        if counts is None:
            counts = {}
            for i in range(1, self.names.row_count(_GENERIC_PARAM) + 1):
                row = self.row((_GENERIC_PARAM << 24) | i)
                owner = self.decode(row.Owner_CodedIndex, _TYPE_OR_METHOD_DEF)
                key = (owner >> 24, owner & 0xFFFFFF)
                counts[key] = counts.get(key, 0) + 1
            self._index["generic_counts"] = counts
        return counts.get((token >> 24, token & 0xFFFFFF), 0)

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


# ------------------------------------------------------------------------- the type system

class TypeSystem:
    """The compiled assembly, the assemblies its references bind to, and its type tokens
    resolved to TypeDefs and made module-qualified (the module docstring)."""

    _binding = None      # an exact instantiation bound (reader/instantiation.py, JitEE.bind_instantiation)

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
        self._resolved: dict[tuple[int, int], tuple[_Module, int]] = {}
        self._norm_cache: dict[object, object] = {}

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
            if sig.number < len(args):
                return args[sig.number]
            # the compiled method's own `!n` / `!!n` under an exact instantiation (reader/instantiation.py)
            bound = ()
            if self._binding is not None and module is self._main:
                bound = self._binding.method_args if sig.method else self._binding.class_args
            return bound[sig.number] if sig.number < len(bound) else _Var(sig.number, sig.method)
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


def _base_sig(module: _Module, token: int) -> TypeSig:
    """An Extends token as a type: a TypeSpec's signature, else `class X`."""
    if token >> 24 == TokenKind.TYPE_SPEC:
        return module.names.type_spec(token)
    return NamedType(token, False)
