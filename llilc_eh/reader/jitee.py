"""The JIT-EE interface, answered from metadata: what the runtime would tell a JIT.

A real JIT asks the execution engine (CoreCLR's `ICorJitInfo`) how big a struct is, where a
field lives, what a call target's signature is and which symbol stands for a class handle.
`JitEE` answers those questions for one compiled assembly from metadata alone, loading the
assemblies it references from disk as needed. Every answer is cached and deterministic.

The answers stand on two layers, each a module of its own: `reader.typesys.TypeSystem`
(assembly binding, type resolution, module-qualified types and substitution) and
`reader.layout.CoreClrLayout` (CoreCLR 3.1's field layout); `JitEE` derives from both and
adds the answers: classification, symbols, fields and methods. The value types it returns
live in `reader.types`.

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

from pathlib import Path
from typing import Iterable

from llilc_eh.assembly.body import MethodBody
from llilc_eh.assembly.loader import Assembly
from llilc_eh.assembly.names import TokenKind
from llilc_eh.assembly.signatures import (
    ArrayType, ByRefType, CallKind, FieldSig, GenericInstType, GenericVar, MethodSig, ModifiedType,
    NamedType, PinnedType, SzArrayType, TypeSig,
)
from llilc_eh.ee.protocol import JitEEInterface
from llilc_eh.errors import LlilcEhError, ReaderError

from .layout import CoreClrLayout, _layout_fields
from .types import (
    OBJECT_HEADER_SIZE, TYPEDREF_SIZE, FieldInfo, MethodInfo, StackKind, TypeInfo, TypeLayout, ext_attr,
    llvm_global,
)
from .typesys import (
    _CANON, _CONVERSION_OPERATORS, _ET, _FD_STATIC, _MAX_FORWARDS, _MD_ABSTRACT, _MD_FINAL, _MD_STATIC,
    _MD_VIRTUAL, _PRIM_KIND, _PRIM_SIZE, _PRIM_STORAGE, _SIGNED, _base_sig, _Module, _Named, _Prim,
    _strip, _strip_scopes, _subst, _SymbolNamer, _Var, _Wrapped, is_void,
)

__all__ = ["JitEE"]


# ------------------------------------------------------------------------------ the JIT-EE

class JitEE(CoreClrLayout, JitEEInterface):
    """Answers a JIT's questions about one compiled assembly (see the module docstring): the
    metadata implementation of `llilc_eh.ee.protocol.JitEEInterface`."""

    def __init__(self, asm: Assembly, search_path: Iterable[str | Path] | None = None,
                 references: Iterable[str | Path] = (), framework: str | None = None):
        """How referenced assemblies are bound: TypeSystem.__init__."""
        super().__init__(asm, search_path, references, framework)
        self._namers: dict[int, _SymbolNamer] = {}
        self._type_infos: dict[TypeSig, TypeInfo] = {}
        self._fields: dict[int, FieldInfo] = {}
        self._methods: dict[int, MethodInfo] = {}
        self._token_types: dict[int, TypeSig] = {}

    def __repr__(self) -> str:
        return f"JitEE({self.asm.path.name!r})"

    @property
    def assembly_name(self) -> str:
        return self._main.name

    def bind_instantiation(self, method_token: int | None, class_args: tuple = (), method_args: tuple = ()) -> None:
        """Compile MethodDef `method_token` as the exact instantiation described by
        `class_args` / `method_args` (reader/instantiation.py), or (None) as the definition:
        the answers that depend on it are cached per binding."""
        from .instantiation import binding_of
        binding = None if method_token is None else binding_of(self, method_token, class_args, method_args)
        caches = self.__dict__.setdefault("_binding_caches", {})
        if not caches:
            caches[None] = (self._type_infos, self._fields, self._methods)
        if binding not in caches:
            caches[binding] = ({}, {}, {})
        self._type_infos, self._fields, self._methods = caches[binding]
        self._binding = binding

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

    def is_nullable(self, sig: TypeSig) -> bool:
        """Whether `sig` (a bound generic parameter too) is the core library's System.Nullable<T>."""
        rt = self._rt(self._main, sig)
        if not isinstance(rt, _Named) or not rt.value_type or len(rt.args) != 1:
            return False
        module, rid = self._resolve(rt.module, rt.token)
        return module.is_corelib and module.type_ns_name((TokenKind.TYPE_DEF << 24) | rid) == ("System", "Nullable`1")

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
            if self._binding is not None and self._binding.owner_token == owner_tok:
                args = self._binding.class_args      # a field of the bound instantiation's own type
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
                    llvm_ret, ret_attr = rinfo.storage, ext_attr(rinfo)
            if vararg:
                types.append("ptr"), roles.append("vararg-cookie"), attrs.append("")
            first = 1 if implicit_this else 0
            for i, p in enumerate(params):
                info = self.type_info(p)
                if info.stack_kind is StackKind.VALUE:
                    types.append("ptr"), attrs.append("")
                else:
                    types.append(info.storage)
                    attrs.append(ext_attr(info))
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

def _wrappers(sig: TypeSig):
    while isinstance(sig, (ModifiedType, PinnedType)):
        yield sig
        sig = sig.target


def _type_args(names, parent: int) -> tuple[TypeSig, ...]:
    """The generic arguments of a member's parent when it is a generic instantiation."""
    if parent >> 24 == TokenKind.TYPE_SPEC:
        sig = _strip(names.type_spec(parent))
        if isinstance(sig, GenericInstType):
            return sig.args
    return ()


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
