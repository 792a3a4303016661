"""Runtime lookups: the handles shared generic code finds through its generic dictionary.

Shared code (`M<__Canon>`, `Foo<__Canon>::M`) runs for every reference-type instantiation,
so a handle that depends on T -- `typeof(T)`, the class of `new List<T>`, `T[]`, a cast to T,
the MethodDesc a call to `M2<T>` must pass -- cannot be a constant of the code. CoreCLR 3.1
answers `embedGenericHandle` for such a token with a CORINFO_LOOKUP whose `runtimeLookup`
says how to find it at run time (jitinterface.cpp ComputeRuntimeLookupForSharedGenericToken):

  * the context it starts from (`lookupKind.runtimeLookupKind`): the hidden MethodDesc
    argument (METHODPARAM: a shared generic method), the hidden MethodTable argument
    (CLASSPARAM: a static method or a value type's method of a generic type), or the
    MethodTable of `this` (THISOBJ: an instance method of a generic class);
  * `indirections` loads at `offsets` from there -- the instantiation or dictionary pointer
    of the MethodDesc / MethodTable, then the slot; 0 indirections is the context itself (a
    recursive call, C<!0..> of a sealed context class); CORINFO_USEHELPER (0xFFFF) none:
    always call the helper;
  * `testForNull`: a dictionary slot is filled lazily; when it is still null the code calls
    `helper` (CORINFO_HELP_RUNTIMEHANDLE_METHOD / _CLASS) with (context, `signature`), an
    opaque cookie the runtime made for this token, which fills the slot and returns it.

RyuJIT emits the walk inline (importer.cpp impRuntimeLookupToTree); so does our reader
(reader/lookup.py) with the `RuntimeLookup` this module makes: `ask` resolves the token in
the compiled method's context, embeds it (the handle itself, or its parent class for the
class of a method or field), and returns None when no lookup is needed (a token that does
not depend on T keeps its data cell). The signature cookie is a data cell the installer
fills with what `ask` gives again (install.py, kind `lookup-signature`).

What a use needs (`REQUESTS`, by the reader's external kind): a class (box, casts, newobj's
class, ldtoken), an array class (newarr: the runtime's Newarr token kind, an array
MethodTable), a method handle or the class of a method (a virtual call through
CORINFO_HELP_VIRTUAL_FUNC_PTR), the class owning a static field (the generic statics base
helper), and the instantiation argument of a call (`instparam-method`: the exact MethodDesc
of a generic method; `instparam-class`: the exact class of a static or value-type method).

Negative control (install.DAMAGES "lookup-offset"): the last offset of every lookup moved by
one pointer -- the walk then reads the neighbouring dictionary slot.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ..reader.lookup import LookupRefused
from .instantiation import CORINFO_SIG_INFO
from .jitinfo import JitInfo, JitInfoTrap
from .structs import (
    CORINFO_HELPER_DESC,
    CORINFO_LOOKUP,
    CORINFO_FLG_SHAREDINST,
    CORINFO_FLG_VIRTUAL,
    CORINFO_GENERICS_CTXT_FROM_METHODDESC,
    CORINFO_GENERICS_CTXT_FROM_METHODTABLE,
    CORINFO_GENERICS_CTXT_FROM_THIS,
    CorInfoTokenKind,
)

CORINFO_USEHELPER = 0xFFFF
CORINFO_FIELD_STATIC_GENERICS_STATIC_HELPER = 7   # CORINFO_FIELD_ACCESSOR: a generic class's static in shared code
CORINFO_GENERICS_CTXT_KEEP_ALIVE = 0x100          # CorInfoOptions: report the context (a catch depends on T)
CORINFO_CALLCONV_PARAMTYPE = 0x80            # corinfo.h: the callee takes the instantiation argument
#: CORINFO_RUNTIME_LOOKUP_KIND -> our context kind (the GC info's GenericsInstContextKind names)
LOOKUP_KINDS = {0: "this", 1: "md", 2: "mt"}

#: external kind -> (how the token resolves, embed its parent class?) -- RyuJIT's
#: impTokenToHandle (fEmbedParent FALSE) and impParentClassTokenToHandle (TRUE)
REQUESTS = {
    "class": (CorInfoTokenKind.Class, False),
    "ldtoken-class": (CorInfoTokenKind.Ldtoken, False),
    "array-class": (CorInfoTokenKind.Newarr, False),
    "method-handle": (CorInfoTokenKind.Method, False),
    "method-class": (CorInfoTokenKind.Method, True),
    "field-owner": (CorInfoTokenKind.Field, True),
    "field": (CorInfoTokenKind.Field, False),
    "instparam-method": (CorInfoTokenKind.Method, False),
    "instparam-class": (CorInfoTokenKind.Method, True),
    "instparam-newobj": (CorInfoTokenKind.NewObj, True),
    "method-entry": (CorInfoTokenKind.Method, False),      # ldftn: getCallInfo, not embedGenericHandle
}


@dataclass(frozen=True)
class RuntimeLookup:
    """How shared code finds one handle at run time (module docstring)."""

    what: str                         # a key of REQUESTS
    token: int
    context: str                      # md | mt | this: where the walk starts
    helper: str                       # CORINFO_HELP_RUNTIMEHANDLE_METHOD | _CLASS
    offsets: tuple[int, ...] | None   # one per indirection; None: always call the helper
    test_for_null: bool
    signature: int                    # the helper's cookie (a data cell of the code)

    def __str__(self) -> str:
        walk = "helper" if self.offsets is None else "+".join(str(o) for o in self.offsets) or "context"
        return (f"{self.what} 0x{self.token:08X}: {self.context} {walk}"
                f"{' null->' + self.helper if self.test_for_null else ''}")


def context_kind(options: int, attribs: int) -> str | None:
    """The generic context of the method being compiled (CORINFO_METHOD_INFO.options), or None
    when it is not shared code."""
    if not attribs & CORINFO_FLG_SHAREDINST:
        return None
    if options & CORINFO_GENERICS_CTXT_FROM_METHODDESC:
        return "md"
    if options & CORINFO_GENERICS_CTXT_FROM_METHODTABLE:
        return "mt"
    if options & CORINFO_GENERICS_CTXT_FROM_THIS:
        return "this"
    return None


def ask(jit: JitInfo, scope: int, context: int, what: str, token: int, damage: str | None = None
        ) -> RuntimeLookup | None:
    """The runtime lookup of `token` used as `what` in the method `context`, or None when the
    handle is a constant (JitInfoTrap when the runtime refuses the token; LookupRefused for a
    shape we do not generate)."""
    kind, parent = REQUESTS[what]
    if what == "method-entry":
        return entry_lookup(jit, scope, context, token, damage)
    rt = jit.resolve_token(scope, token, kind, context=context)
    result = jit.generic_handle_result(rt, parent)
    return _runtime_lookup(what, token, result.lookup, damage)


def _runtime_lookup(what: str, token: int, lookup, damage: str | None) -> RuntimeLookup | None:
    """A CORINFO_LOOKUP as a RuntimeLookup (None: a constant), or LookupRefused."""
    if not lookup.lookupKind.needsRuntimeLookup:
        return None
    rl = lookup.runtimeLookup
    from .install import helper_numbers
    helpers = {n: s for s, n in helper_numbers().items()}
    helper = helpers.get(rl.helper, f"helper #{rl.helper}")
    if helper not in ("CORINFO_HELP_RUNTIMEHANDLE_METHOD", "CORINFO_HELP_RUNTIMEHANDLE_CLASS"):
        raise LookupRefused(f"{what} 0x{token:08X}: the runtime's lookup helper is {helper}")
    if rl.indirectFirstOffset or rl.indirectSecondOffset or rl.testForFixup:
        raise LookupRefused(f"{what} 0x{token:08X}: a lookup through relative pointers or with a fixup test")
    offsets = None
    if rl.indirections != CORINFO_USEHELPER:
        offsets = tuple(int(rl.offsets[i]) for i in range(rl.indirections))
        if damage == "lookup-offset" and offsets:
            offsets = offsets[:-1] + (offsets[-1] + 8,)
    return RuntimeLookup(what, token, LOOKUP_KINDS[lookup.lookupKind.runtimeLookupKind], helper, offsets,
                         bool(rl.testForNull), rl.signature or 0)


def takes_inst_param(jit: JitInfo, method: int) -> bool:
    """Whether a method's code takes the hidden instantiation argument (getMethodSig's
    CORINFO_CALLCONV_PARAMTYPE: shared code of a generic method, a static or value-type method
    of a generic type)."""
    buf = ctypes.create_string_buffer(256)      # CORINFO_SIG_INFO; callConv is its first 32 bits
    jit.trapped("getMethodSig", method, ctypes.addressof(buf), 0)
    return bool(ctypes.c_uint32.from_buffer(buf).value & CORINFO_CALLCONV_PARAMTYPE)


class CORINFO_CALL_INFO(ctypes.Structure):
    """getCallInfo's answer (corinfo.h 3.1), up to the lookup read here. (A first reading
    without accessAllowed and callsiteCalloutHelper put `kind` 80 bytes early.)"""
    _fields_ = [
        ("hMethod", ctypes.c_void_p),
        ("methodFlags", ctypes.c_uint32),
        ("classFlags", ctypes.c_uint32),
        ("sig", CORINFO_SIG_INFO),
        ("verMethodFlags", ctypes.c_uint32),
        ("verSig", CORINFO_SIG_INFO),
        ("accessAllowed", ctypes.c_uint32),
        ("callsiteCalloutHelper", CORINFO_HELPER_DESC),
        ("thisTransform", ctypes.c_uint32),
        ("kind", ctypes.c_uint32),                      # CORINFO_CALL_KIND
        ("nullInstanceCheck", ctypes.c_int32),
        ("contextHandle", ctypes.c_void_p),
        ("exactContextNeedsRuntimeLookup", ctypes.c_int32),
        ("codePointerLookup", CORINFO_LOOKUP),          # (a union with stubLookup)
    ]


_CALL_INFO_SIZE = 1024                # the buffer getCallInfo fills: the whole struct and more
CORINFO_CALLINFO_ALLOWINSTPARAM, CORINFO_CALLINFO_CALLVIRT = 0x0001, 0x0002
CORINFO_CALL, CORINFO_CALL_CODE_POINTER = 0, 1   # CORINFO_CALL_KIND: hMethod directly / a looked-up pointer
CORINFO_CALLINFO_LDFTN = 0x0020


def shared_callee(jit: JitInfo, scope: int, context: int, token: int, newobj: bool) -> tuple[int, bool]:
    """(the method a direct call from shared code calls, whether it takes the instantiation
    argument), as getCallInfo says with CORINFO_CALLINFO_ALLOWINSTPARAM -- RyuJIT's flags: for
    a MethodSpec `M<!!0,string>` resolveToken gives an instantiating stub over __Canon, whose
    wrapped shared code is what is called, with the instantiation passed explicitly."""
    kind = CorInfoTokenKind.NewObj if newobj else CorInfoTokenKind.Method
    rt = jit.resolve_token(scope, token, kind, context=context)
    if not rt.pTypeSpec and not rt.pMethodSpec:
        return rt.hMethod or 0, False       # no instantiation in the token: nothing to pass
    flags = CORINFO_CALLINFO_ALLOWINSTPARAM
    if jit.method_attribs(rt.hMethod) & CORINFO_FLG_VIRTUAL:
        # a virtual (interface, abstract) method asked about as a direct call is invalid IL to
        # getCallInfo ("direct calls to abstract methods are not allowed": it threw for
        # IEnumerable<!0>::GetEnumerator in Enumerable.Sum)
        flags |= CORINFO_CALLINFO_CALLVIRT
    buf = ctypes.create_string_buffer(_CALL_INFO_SIZE)
    jit.trapped("getCallInfo", ctypes.addressof(rt), 0, context, flags, ctypes.addressof(buf))
    call = CORINFO_CALL_INFO.from_buffer(buf)
    method, takes, call_kind = call.hMethod or 0, bool(call.sig.callConv & CORINFO_CALLCONV_PARAMTYPE), call.kind
    if takes and call_kind != CORINFO_CALL:
        raise LookupRefused(f"the call to 0x{token:08X} goes through a looked-up code pointer (call kind {call_kind})")
    return method, takes


def entry_lookup(jit: JitInfo, scope: int, context: int, token: int, damage: str | None = None
                 ) -> RuntimeLookup | None:
    """ldftn in shared code: the entry point of the method as getCallInfo with
    CORINFO_CALLINFO_LDFTN gives it (RyuJIT's CEE_LDFTN) -- a direct call (CORINFO_CALL: its
    data cell stays; None) or a code pointer found at run time (CORINFO_CALL_CODE_POINTER: the
    MethodEntrySlot lookup in `codePointerLookup`, an instantiating stub's entry)."""
    rt = jit.resolve_token(scope, token, CorInfoTokenKind.Method, context=context)
    buf = ctypes.create_string_buffer(_CALL_INFO_SIZE)
    jit.trapped("getCallInfo", ctypes.addressof(rt), 0, context, CORINFO_CALLINFO_LDFTN, ctypes.addressof(buf))
    call_kind = CORINFO_CALL_INFO.from_buffer(buf).kind
    if call_kind == CORINFO_CALL:
        return None
    if call_kind != CORINFO_CALL_CODE_POINTER:
        raise LookupRefused(f"ldftn 0x{token:08X}: call kind {call_kind}")
    lookup = _runtime_lookup("method-entry", token, CORINFO_CALL_INFO.from_buffer(buf).codePointerLookup, damage)
    if lookup is None:
        raise LookupRefused(f"ldftn 0x{token:08X}: a code pointer with no runtime lookup")
    return lookup


def inst_param(jit: JitInfo, scope: int, context: int, token: int, newobj: bool, damage: str | None = None
               ) -> RuntimeLookup | None:
    """The lookup of a call's instantiation argument from shared code (RyuJIT impImportCall:
    a method's own instantiation -> its MethodDesc, else its class), or None when the callee
    takes none or it is a constant (then the installer calls the instantiating stub)."""
    method, takes = shared_callee(jit, scope, context, token, newobj)
    if not method or not takes:
        return None
    what = "instparam-newobj" if newobj else ("instparam-method" if token >> 24 == 0x2B else "instparam-class")
    return ask(jit, scope, context, what, token, damage)


__all__ = ["CORINFO_USEHELPER", "LOOKUP_KINDS", "LookupRefused", "REQUESTS", "RuntimeLookup", "ask", "context_kind",
           "entry_lookup", "inst_param", "shared_callee", "takes_inst_param", "JitInfoTrap"]
