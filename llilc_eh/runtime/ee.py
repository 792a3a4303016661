"""The JIT-EE interface answered by the live runtime (ICorJitInfo), for code that runs there.

`llilc-eh run` compiles inside dotnet, where the runtime -- not our reconstruction of its
type loader -- decides how big a struct is and where a field lives. `RuntimeJitEE`
implements `llilc_eh.ee.protocol.JitEEInterface` with the *layout and type* questions asked
of ICorJitInfo through the method's module and context (`resolveToken`, then):

  question                      ICorJitInfo
  field offset (field())        getFieldOffset (from the object reference for a class's field)
  value class or not            isValueClass
  value-class size              getClassSize
  value-class alignment         getClassAlignmentRequirement (only where it is the type's own:
                                CoreCLR answers 8 for any struct without a layout of its own)
  holds GC references           getClassAttribs & CORINFO_FLG_CONTAINS_GC_PTR
  references inside a value     getClassGClayout
  SysV classification           getSystemVAmd64PassStructInRegisterDescriptor
  method static/virtual/abstract getMethodAttribs

and delegates the rest -- names, signatures, symbols, the compiled method's argument and local
types -- to its metadata half (`reader.jitee.JitEE`), which also serves as the ground every
answer is built on: the runtime's numbers replace the metadata's in the same value types.

A type is named to the runtime by a token of the compiled module: a TypeDef/TypeRef, or the
TypeSpec whose signature is the type (generic instantiations); a type with no such token (a
generic instantiation the module never wrote down) keeps the metadata answer, said so in the
log. A question the runtime refuses (it threw: JitInfoTrap) keeps the metadata answer and is
logged as refused.

Every question the reader asks is logged with both answers (metadata, runtime) for the
method being compiled (`bind` starts a method, `asked()` gives its log): that log is the
comparison runtime/compare.py reports and tests/runtime require to agree (`agree` None: the
metadata had no answer -- e.g. the SysV classification of an explicit-layout struct, which
the metadata reader refuses and the runtime gives). When they differ, the reader gets the
runtime's answer.

One instance per assembly (the handles it caches are the runtime's and live as long as the
process); `bind(jit, info)` before each method, since an ICorJitInfo is valid for one
compileMethod call only.
"""

from __future__ import annotations

from dataclasses import replace

from ..assembly.signatures import GenericInstType, GenericVar, ModifiedType, NamedType, PinnedType, TypeSig
from ..ee.protocol import JitEEInterface
from .jitinfo import JitInfo, JitInfoTrap
from .structs import (
    CORINFO_FLG_ABSTRACT,
    CORINFO_FLG_CONTAINS_GC_PTR,
    CORINFO_FLG_STATIC,
    CORINFO_FLG_VIRTUAL,
    CorInfoGCType,
    CorInfoTokenKind,
    SystemVClassificationType,
)

_INTEGER = (SystemVClassificationType.INTEGER, SystemVClassificationType.INTEGER_REFERENCE,
            SystemVClassificationType.INTEGER_BYREF)
_SSE8 = ("double", "<2 x float>")     # one XMM eightbyte of 8 bytes: the same bits either way


class _Refused(Exception):
    pass


class RuntimeJitEE(JitEEInterface):
    """The runtime-backed JIT-EE interface (module docstring)."""

    def __init__(self, metadata):
        self.metadata = metadata
        self._jit: JitInfo | None = None
        self._scope = 0
        self._context = 0
        self._runtime: dict[tuple, object] = {}     # (question, key) -> the runtime's answer or _Refused
        self._log: dict[tuple, dict] = {}
        self._type_specs: dict[TypeSig, int] | None = None

    def __repr__(self) -> str:
        return f"RuntimeJitEE({self.metadata!r})"

    # -- one method --------------------------------------------------------------------------

    def bind(self, jit: JitInfo, info) -> None:
        """The method being compiled: its ICorJitInfo, module (scope) and context."""
        self._jit, self._scope, self._context = jit, info.scope, info.ftn
        self._log = {}

    def bind_instantiation(self, method_token, class_args=(), method_args=()) -> None:
        """An exact instantiation (runtime/instantiation.py) bound in the metadata half; the
        runtime's answers are kept apart per instantiation from then on: a TypeSpec such as
        `Pair<!0>` or `!0` names another class in each: keyed by the exact method's handle."""
        self.metadata.bind_instantiation(method_token, class_args, method_args)
        self._instance = None if method_token is None else self._context

    _instance = None

    def asked(self) -> list[dict]:
        """Every layout question asked since `bind`, once each, in the order first asked:
        {"question", "token", "metadata", "runtime", "agree"}."""
        return list(self._log.values())

    def _record(self, question: str, key: str, metadata, runtime) -> None:
        if (question, key) in self._log:
            return
        # None: metadata has no answer (a layout it cannot walk, e.g. explicit layout), the
        # runtime has one -- not a disagreement; code built on metadata would be declined
        agree = None if metadata is None and not isinstance(runtime, str) else metadata == runtime
        self._log[(question, key)] = {"question": question, "token": key, "metadata": _plain(metadata),
                                      "runtime": _plain(runtime), "agree": agree}

    def _ask(self, question: str, key, compute):
        """The runtime's answer (cached across methods: handles live as long as the process),
        or _Refused with the reason."""
        k = (question, key, self._instance)
        if k not in self._runtime:
            try:
                self._runtime[k] = compute()
            except JitInfoTrap as e:
                return _Refused(f"runtime refused: {e}")     # not cached: another method may succeed
        return self._runtime[k]

    def _answer(self, question: str, logged: str, token: int, md, compute):
        """The runtime's answer to a question about a type token, logged beside the metadata's;
        the metadata's when the runtime refuses (the refusal logged as the runtime's answer)."""
        runtime = self._ask(question, token, compute)
        if isinstance(runtime, _Refused):
            self._record(logged, f"0x{token:08X}", md, str(runtime))
            return md
        self._record(logged, f"0x{token:08X}", md, runtime)
        return runtime

    # -- naming a type to the runtime ------------------------------------------------------------

    def _type_token(self, sig: TypeSig) -> int | None:
        while isinstance(sig, (ModifiedType, PinnedType)):
            sig = sig.target
        if isinstance(sig, NamedType) and sig.token >> 24 in (0x01, 0x02, 0x1B):
            return sig.token
        if isinstance(sig, (GenericInstType, GenericVar)):     # `!0` too: its TypeSpec, if the module has one
            return self._type_spec_tokens().get(sig)
        return None

    def _type_spec_tokens(self) -> dict[TypeSig, int]:
        if self._type_specs is None:
            names, out = self.metadata._main.names, {}
            for rid in range(names.row_count(0x1B), 0, -1):    # the first TypeSpec of a signature wins
                try:
                    out[names.type_spec(0x1B000000 | rid)] = 0x1B000000 | rid
                except Exception:   # noqa: BLE001 -- a damaged TypeSpec names nothing
                    continue
            self._type_specs = out
        return self._type_specs

    def _class(self, token: int) -> int:
        jit = self._require()
        rt = jit.resolve_token(self._scope, token, CorInfoTokenKind.Class, context=self._context)
        if not rt.hClass:
            raise JitInfoTrap(f"resolveToken gave no class for 0x{token:08X}")
        return rt.hClass

    def _require(self) -> JitInfo:
        if self._jit is None:
            raise JitInfoTrap("no method bound (RuntimeJitEE.bind)")
        return self._jit

    # -- types -----------------------------------------------------------------------------------

    def type_info(self, sig: TypeSig):
        from ..reader.types import StackKind
        md = self.metadata.type_info(sig)
        token = self._type_token(sig)
        if token is None or md.stack_kind is None:
            return md
        key = f"0x{token:08X} {md.text}"

        def value_class():
            return self._require().is_value_class(self._class(token))
        value = self._ask("value class", token, value_class)
        self._record("value class", key, md.stack_kind is not StackKind.OBJ, value)
        if isinstance(value, _Refused) or not value or md.stack_kind is StackKind.OBJ:
            return md

        def facts():
            jit, cls = self._require(), self._class(token)
            attribs = jit.class_attribs(cls)
            size = jit.class_size(cls)
            return size, jit.class_alignment(cls), bool(attribs & CORINFO_FLG_CONTAINS_GC_PTR)
        got = self._ask("class facts", token, facts)
        if isinstance(got, _Refused):
            self._record("class size", key, md.size, str(got))
            return md
        size, align, gc = got
        self._record("class size", key, md.size, size)
        if md.stack_kind is not StackKind.VALUE:
            return md if size == md.size else replace(md, size=size)   # enums, primitive structs
        self._record("holds GC references", key, md.gc, gc)
        # CoreCLR's alignment answer is the type's own only for a layout it keeps (managed
        # sequential / blittable: no GC references); otherwise it says 8, a default
        if not gc:
            self._record("class alignment", key, md.align, align)
        else:
            align = md.align
        if (size, align, gc) == (md.size, md.align, md.gc):
            return md
        return replace(md, size=size, align=align, gc=gc, storage=f"[{size} x i8]")

    def stack_kind(self, sig: TypeSig):
        return self.type_info(sig).stack_kind

    def storage_type(self, sig: TypeSig) -> str:
        return self.type_info(sig).storage

    def is_signed(self, sig: TypeSig) -> bool:
        return self.type_info(sig).signed

    def size_and_align(self, sig: TypeSig) -> tuple[int, int]:
        info = self.type_info(sig)
        return info.size, info.align

    def layout(self, sig: TypeSig):
        """Delegated: the reader asks for fields one at a time (`field`), which the runtime answers."""
        return self.metadata.layout(sig)

    def token_type(self, token: int) -> TypeSig:
        return self.metadata.token_type(token)

    def class_ancestry(self, token: int) -> tuple[str, ...]:
        return self.metadata.class_ancestry(token)

    def sysv_eightbytes(self, sig: TypeSig):
        from ..reader.abi import MEMORY
        md = self.metadata.sysv_eightbytes(sig)
        token = self._type_token(sig)
        size = self.type_info(sig).size
        if token is None or not 0 < size <= 16:
            return md

        def classify():
            desc = self._require().sysv_struct_descriptor(self._class(token))
            if desc is None or not desc.passedInRegisters:
                return MEMORY
            out = []
            for i in range(desc.eightByteCount):
                kind, n = desc.eightByteClassifications[i], desc.eightByteSizes[i]
                if kind in _INTEGER:
                    out.append("i64")
                elif kind == SystemVClassificationType.SSE:
                    out.append("float" if n <= 4 else "double")
                else:
                    raise JitInfoTrap(f"eightbyte {i} classified {SystemVClassificationType(kind).name}")
            return tuple(out)
        runtime = self._ask("sysv", token, classify)
        if isinstance(runtime, _Refused):
            self._record("SysV classification", f"0x{token:08X}", md, str(runtime))
            return md
        # `double` and `<2 x float>` are the same 8 bytes in one XMM register: keep the metadata's
        # spelling of it (the IR stays what `translate --target linux-x64` shows)
        if _same_eightbytes(md, runtime):
            runtime = md
        self._record("SysV classification", f"0x{token:08X}", md, runtime)
        return runtime

    def reference_offsets(self, sig: TypeSig):
        md = self.metadata.reference_offsets(sig)
        token = self._type_token(sig)
        if token is None:
            return md
        size = self.type_info(sig).size

        def gc_layout():
            slots = self._require().class_gc_layout(self._class(token), size)
            return tuple(8 * i for i, t in enumerate(slots) if t == CorInfoGCType.REF)
        return self._answer("gc layout", "GC layout", token, md, gc_layout)

    def is_nullable(self, sig: TypeSig) -> bool:
        md = self.metadata.is_nullable(sig)
        token = self._type_token(sig)
        if token is None:
            return md

        def unbox_helper():
            from .install import helper_numbers
            helper = self._require().trapped("getUnBoxHelper", self._class(token)) & 0xFFFFFFFF
            return helper == helper_numbers()["CORINFO_HELP_UNBOX_NULLABLE"]
        return self._answer("nullable", "nullable", token, md, unbox_helper)

    # -- fields and methods --------------------------------------------------------------------------

    def field(self, token: int):
        md = self.metadata.field(token)
        if md.is_static is not False:
            return md

        def offset():
            jit = self._require()
            rt = jit.resolve_token(self._scope, token, CorInfoTokenKind.Field, context=self._context)
            return jit.field_offset(rt.hField)
        runtime = self._ask("field offset", token, offset)
        key = f"0x{token:08X}"
        if isinstance(runtime, _Refused):
            self._record("field offset", key, md.offset, str(runtime))
            return md
        self._record("field offset", key, md.offset, runtime)
        return md if runtime == md.offset else replace(md, offset=runtime, offset_reason=None)

    def method(self, token: int):
        md = self.metadata.method(token)

        def attribs():
            jit = self._require()
            rt = jit.resolve_token(self._scope, token, CorInfoTokenKind.Method, context=self._context)
            if not rt.hMethod:
                raise JitInfoTrap(f"resolveToken gave no method for 0x{token:08X}")
            return jit.method_attribs(rt.hMethod)
        return self._method_flags(md, f"0x{token:08X}", self._ask("method attribs", token, attribs))

    def compiled_method(self, rid: int):
        md = self.metadata.compiled_method(rid)
        runtime = self._ask("method attribs", ("compiled", rid),
                            lambda: self._require().method_attribs(self._context))
        return self._method_flags(md, f"0x{0x06000000 | rid:08X}", runtime)

    def _method_flags(self, md, key: str, flags):
        if isinstance(flags, _Refused):
            self._record("method attributes", key, _flags_of(md), str(flags))
            return md
        runtime = {"static": bool(flags & CORINFO_FLG_STATIC), "virtual": bool(flags & CORINFO_FLG_VIRTUAL),
                   "abstract": bool(flags & CORINFO_FLG_ABSTRACT)}
        metadata = _flags_of(md)
        # only what metadata knows is compared (a MemberRef it could not follow knows none)
        asked = {k: v for k, v in runtime.items() if metadata.get(k) is not None}
        self._record("method attributes", key, {k: metadata[k] for k in asked}, asked)
        if all(metadata.get(k) == v for k, v in runtime.items()):
            return md
        return replace(md, is_static=runtime["static"], is_virtual=runtime["virtual"],
                       is_abstract=runtime["abstract"])

    def arg_types(self, rid: int):
        return self.metadata.arg_types(rid)

    def local_types(self, body):
        return self.metadata.local_types(body)

    # -- names: from metadata -------------------------------------------------------------------------

    @property
    def assembly_name(self) -> str:
        return self.metadata.assembly_name

    def llvm_global(self, name: str) -> str:
        return self.metadata.llvm_global(name)

    def class_handle(self, token: int) -> str:
        return self.metadata.class_handle(token)

    def string_literal(self, token: int) -> str:
        return self.metadata.string_literal(token)

    def varargs_cookie(self, token: int) -> str:
        return self.metadata.varargs_cookie(token)

    def static_field_address(self, token: int) -> str:
        return self.metadata.static_field_address(token)

    def field_offset_symbol(self, token: int) -> str:
        return self.metadata.field_offset_symbol(token)

    def method_handle(self, token: int) -> str:
        return self.metadata.method_handle(token)

    # -- shared generic code: runtime lookups (runtime/lookup.py, reader/lookup.py) -----------

    lookup_damage: str | None = None     # install.DAMAGES "lookup-offset" (a negative control)

    def generic_lookup(self, what: str, token: int):
        """How shared code finds the handle of `token` used as `what` (an external kind) at run
        time, or None when it is a constant (its data cell stays); LookupRefused otherwise."""
        from ..reader.lookup import LookupRefused
        from .lookup import ask
        try:
            return ask(self._require(), self._scope, self._context, what, token, self.lookup_damage)
        except JitInfoTrap as e:
            raise LookupRefused(f"0x{token:08X} as {what}: {e}") from None

    def generic_static(self, token: int) -> tuple[str, int, bool]:
        """A static field of a generic class in shared code, as getFieldInfo says to reach it:
        (the CORINFO_HELP_GETGENERICS_*STATIC_BASE helper taking the looked-up class, the field's
        offset from the base it returns, whether the static is a box). LookupRefused otherwise."""
        from ..reader.lookup import LookupRefused
        from .install import helper_numbers
        from .lookup import CORINFO_FIELD_STATIC_GENERICS_STATIC_HELPER
        from .structs import CORINFO_ACCESS_ADDRESS, CORINFO_FLG_FIELD_STATIC_IN_HEAP
        jit = self._require()
        try:
            rt = jit.resolve_token(self._scope, token, CorInfoTokenKind.Field, context=self._context)
            info = jit.field_info(rt, self._context, CORINFO_ACCESS_ADDRESS)
        except JitInfoTrap as e:
            raise LookupRefused(f"static field 0x{token:08X}: {e}") from None
        names = {n: h for h, n in helper_numbers().items()}
        helper = names.get(info.helper, "")
        if info.fieldAccessor != CORINFO_FIELD_STATIC_GENERICS_STATIC_HELPER or helper not in (
                "CORINFO_HELP_GETGENERICS_GCSTATIC_BASE", "CORINFO_HELP_GETGENERICS_NONGCSTATIC_BASE"):
            raise LookupRefused(f"static field 0x{token:08X}: the runtime reaches it by accessor "
                                f"{info.fieldAccessor} through {helper or info.helper}")
        return helper, info.offset, bool(info.fieldFlags & CORINFO_FLG_FIELD_STATIC_IN_HEAP)

    def call_inst_param(self, token: int, newobj: bool):
        """The lookup of the instantiation argument a call from shared code passes, or None."""
        from ..reader.lookup import LookupRefused
        from .lookup import inst_param
        try:
            return inst_param(self._require(), self._scope, self._context, token, newobj, self.lookup_damage)
        except JitInfoTrap as e:
            raise LookupRefused(f"the instantiation argument of 0x{token:08X}: {e}") from None

    def __getattr__(self, name: str):
        """Anything else -- the metadata model the reader still reaches into (abi._leaves,
        opcodes._is_thread_static: see ee/protocol.py, "Known leaks"), `framework`,
        `search_path` -- from the metadata half."""
        if name == "metadata":
            raise AttributeError(name)
        return getattr(self.metadata, name)


def damage_metadata(metadata) -> None:
    """The negative control "metadata-field-offset" (tests only): every instance field offset
    the metadata JIT-EE answers shifted by 8, so that code built on the metadata's offsets is
    wrong and code built on the runtime's is not."""
    answer = metadata.field

    def field(token: int):
        f = answer(token)
        return replace(f, offset=f.offset + 8) if f.is_static is False and f.offset is not None else f
    metadata.field = field


def _flags_of(md) -> dict:
    return {"static": md.is_static, "virtual": md.is_virtual, "abstract": md.is_abstract}


def _same_eightbytes(a, b) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        return all(x == y or (x in _SSE8 and y in _SSE8) for x, y in zip(a, b))
    return a == b


def _plain(value):
    """A JSON-able answer (tuples as lists)."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


__all__ = ["RuntimeJitEE", "damage_metadata"]
