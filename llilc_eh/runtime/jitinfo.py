"""ICorJitInfo through ctypes: the runtime's side of the JIT-EE interface, as Python calls.

Why a binding of our own: the runtime hands `compileMethod` a C++ object (one vtable pointer
at offset 0, 179 slots in declaration order, `this` first). Slot numbers come from
`icorjitinfo-3.1.txt` (checked against the shipped libcoreclr.so's vtable), so a wrapper
names the slot, never a number.

Two kinds of call:
- plain ctypes calls for slots that only read runtime data structures the runtime already
  built for this method (names, flags, handles of what is loaded);
- *trapped* calls for everything that can throw a C++/PAL exception (token resolution, type
  loads, allocation, helper lookup ...): they go through `llilc_call_trapped` in our C alt JIT,
  which runs the slot under `runWithErrorTrap` (slot 113). An exception then becomes
  `JitInfoTrap` here instead of unwinding through Python's and libffi's frames, which the
  runtime cannot unwind (a crash at best).

Every wrapper is typed; the binding grows into the runtime-backed JIT-EE interface (issue 13
item 3) by adding wrappers here, the reader never sees ctypes.
"""

from __future__ import annotations

import ctypes
import re
from functools import lru_cache
from pathlib import Path

from .structs import (
    CORINFO_CONST_LOOKUP,
    CORINFO_GENERICHANDLE_RESULT,
    CORINFO_RESOLVED_TOKEN,
    CORJIT_FLAGS,
    CorJitFuncKind,
    InfoAccessType,
)

SLOT_LIST = Path(__file__).with_name("icorjitinfo-3.1.txt")
MAX_ARGS = 12      # llilc_call_trapped's limit, `this` included (altjit.c)
VOID, PTR, U32, U64, I32 = None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32


@lru_cache(maxsize=None)
def slots() -> dict[str, int]:
    """ICorJitInfo slot numbers by name, read from the list file (179 of them)."""
    out, section = {}, None
    for line in SLOT_LIST.read_text().splitlines():
        if line.startswith("## "):
            section = line
            continue
        m = re.match(r"\s*(\d+) (\w+)", line)
        if m and section and section.startswith("## ICorJitInfo"):
            out[m.group(2)] = int(m.group(1))
    if len(out) != 179:
        raise RuntimeError(f"{SLOT_LIST}: {len(out)} ICorJitInfo slots, expected 179")
    return out


class JitInfoTrap(RuntimeError):
    """The runtime threw inside a JIT-EE call (caught by runWithErrorTrap)."""


_TRAMPOLINE = ctypes.CFUNCTYPE(ctypes.c_int, PTR, PTR, ctypes.POINTER(U64), ctypes.c_int,
                               ctypes.POINTER(U64))


def _address(value) -> int:
    """An int for a ctypes pointer argument (ctypes objects by reference, ints as they are)."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    return ctypes.addressof(value)


class JitInfo:
    """One ICorJitInfo* (valid during one compileMethod call)."""

    def __init__(self, comp: int, trampoline: int | None):
        self.comp = comp
        self._vtable = ctypes.cast(ctypes.c_void_p(comp), ctypes.POINTER(ctypes.POINTER(ctypes.c_void_p)))[0]
        self._trampoline = _TRAMPOLINE(trampoline) if trampoline else None
        self._cache: dict = {}

    # -- the two calling routes ---------------------------------------------------------------

    def _slot(self, name: str) -> int:
        return self._vtable[slots()[name]]

    def call(self, name: str, restype, argtypes: tuple, *args):
        """A plain call of a slot that cannot throw."""
        key = (name, restype, argtypes)
        fn = self._cache.get(key)
        if fn is None:
            fn = self._cache[key] = ctypes.CFUNCTYPE(restype, PTR, *argtypes)(self._slot(name))
        return fn(self.comp, *args)

    def trapped(self, name: str, *args) -> int:
        """Call a slot under runWithErrorTrap; integer/pointer arguments only (stack-passed ones
        too: the trampoline always passes MAX_ARGS, a callee reads what it declares); returns RAX."""
        if self._trampoline is None:
            raise JitInfoTrap(f"{name}: no trampoline (the alt JIT library did not attach)")
        values = [self.comp] + [_address(a) & 0xFFFFFFFFFFFFFFFF for a in args]
        if len(values) > MAX_ARGS:
            raise JitInfoTrap(f"{name}: {len(values)} arguments, the trampoline takes {MAX_ARGS}")
        argv = (U64 * MAX_ARGS)(*values)
        result = U64(0)
        if not self._trampoline(self.comp, self._slot(name), argv, len(values), ctypes.byref(result)):
            raise JitInfoTrap(f"the runtime threw in {name}")
        return result.value

    # -- identity of the method -------------------------------------------------------------

    def jit_flags(self) -> int:
        flags = CORJIT_FLAGS()
        self.call("getJitFlags", U32, (ctypes.POINTER(CORJIT_FLAGS), U32), ctypes.byref(flags),
                  ctypes.sizeof(flags))
        return flags.corJitFlags

    def method_attribs(self, ftn: int) -> int:
        """CORINFO_FLG_* of a method (getMethodAttribs)."""
        return self.call("getMethodAttribs", U32, (PTR,), ftn)

    def method_il(self, ftn: int) -> bytes | None:
        """The IL body the runtime holds for a method (getMethodInfo), or None when it has
        none to give (a C++ bool: only AL is defined)."""
        from .structs import CORINFO_METHOD_INFO
        buf = ctypes.create_string_buffer(512)      # CORINFO_METHOD_INFO with its two SIG_INFOs
        if not self.trapped("getMethodInfo", ftn, ctypes.addressof(buf)) & 0xFF:
            return None
        info = CORINFO_METHOD_INFO.from_buffer(buf)
        return ctypes.string_at(info.ILCode, info.ILCodeSize) if info.ILCode else None

    def method_module(self, ftn: int) -> int:
        return self.call("getMethodModule", PTR, (PTR,), ftn) or 0

    def module_assembly(self, module: int) -> int:
        return self.call("getModuleAssembly", PTR, (PTR,), module) or 0

    def assembly_name(self, assembly: int) -> str:
        raw = self.call("getAssemblyName", ctypes.c_char_p, (PTR,), assembly)
        return raw.decode("utf-8", "replace") if raw else ""

    def method_def(self, ftn: int) -> int:
        return self.call("getMethodDefFromMethod", U32, (PTR,), ftn)

    def method_name(self, ftn: int) -> tuple[str, str]:
        """(class name as the runtime prints it, method name) -- for messages only."""
        cls = ctypes.c_char_p()
        name = self.call("getMethodName", ctypes.c_char_p, (PTR, ctypes.POINTER(ctypes.c_char_p)), ftn,
                         ctypes.byref(cls))
        return ((cls.value or b"").decode("utf-8", "replace"), (name or b"").decode("utf-8", "replace"))

    # -- addresses of what the code uses (trapped: they load types, run resolution) ---------

    def _with_indirection(self, name: str, arg: int) -> tuple[int, int]:
        """(value or 0, indirection cell or 0) of the calls that return a value directly or
        fill their out-pointer with a cell holding it (getHelperFtn, embed*Handle,
        getFieldAddress): one of the two is non-zero."""
        indirect = ctypes.c_void_p(0)
        value = self.trapped(name, arg, ctypes.addressof(indirect))
        return value, indirect.value or 0

    def helper_ftn(self, helper: int) -> tuple[int, int]:
        """(direct address or 0, indirection cell or 0) of a CORINFO_HELP_* helper."""
        return self._with_indirection("getHelperFtn", helper)

    def resolve_token(self, scope: int, token: int, kind: int, context: int = 0) -> CORINFO_RESOLVED_TOKEN:
        rt = CORINFO_RESOLVED_TOKEN(tokenContext=context, tokenScope=scope, token=token, tokenType=kind)
        self.trapped("resolveToken", ctypes.addressof(rt))
        return rt

    def function_entry_point(self, method: int) -> tuple[InfoAccessType, int]:
        lookup = CORINFO_CONST_LOOKUP()
        self.trapped("getFunctionEntryPoint", method, ctypes.addressof(lookup), 0)
        return InfoAccessType(lookup.accessType), lookup.addr or 0

    def string_literal(self, module: int, token: int) -> tuple[InfoAccessType, int]:
        value = ctypes.c_void_p(0)
        kind = self.trapped("constructStringLiteral", module, token, ctypes.addressof(value)) & 0xFFFFFFFF
        return InfoAccessType(kind), value.value or 0

    def embed_class_handle(self, cls: int) -> tuple[int, int]:
        return self._with_indirection("embedClassHandle", cls)

    def embed_generic_handle(self, rt) -> tuple[InfoAccessType, int]:
        """(access, handle) of a resolved token as the code must embed it; a runtime lookup
        (shared generic code) is refused with JitInfoTrap."""
        result = self._generic_handle(rt, "the handle")
        return InfoAccessType(result.lookup.constLookup.accessType), result.lookup.constLookup.addr or 0

    def exact_method(self, rt) -> int:
        """The method a resolved call token names, exactly: embedGenericHandle's compile-time
        handle (FindOrCreateAssociatedMethodDesc with the token's class, allowInstParam FALSE).
        For a MemberRef on a generic instantiation resolveToken gives the code shared between
        instantiations (KeyValuePair<__Canon,int>::get_Key), whose caller must pass the hidden
        instantiation argument; this gives the instantiating stub, which passes it itself."""
        return self._generic_handle(rt, "the method").compileTimeHandle or 0

    def generic_handle_result(self, rt, embed_parent: bool = False) -> CORINFO_GENERICHANDLE_RESULT:
        """embedGenericHandle of a resolved token as it is -- a constant or a runtime lookup
        (runtime/lookup.py); `embed_parent`: the class of the token's method or field."""
        result = CORINFO_GENERICHANDLE_RESULT()
        self.trapped("embedGenericHandle", ctypes.addressof(rt), int(embed_parent), ctypes.addressof(result))
        return result

    def _generic_handle(self, rt, what: str) -> CORINFO_GENERICHANDLE_RESULT:
        """embedGenericHandle of a resolved token; a runtime lookup (shared generic code) is
        JitInfoTrap naming `what` needed it."""
        result = self.generic_handle_result(rt)
        if result.lookup.lookupKind.needsRuntimeLookup:
            raise JitInfoTrap(f"embedGenericHandle: {what} needs a runtime lookup")
        return result

    def embed_method_handle(self, method: int) -> tuple[int, int]:
        return self._with_indirection("embedMethodHandle", method)

    def embed_field_handle(self, field: int) -> tuple[int, int]:
        return self._with_indirection("embedFieldHandle", field)

    def field_address(self, field: int) -> tuple[int, int]:
        return self._with_indirection("getFieldAddress", field)

    def init_class(self, field: int, method: int, context: int) -> int:
        return self.trapped("initClass", field, method, context, 0) & 0xFFFFFFFF

    def resolve_virtual_method(self, method: int, cls: int, owner_class: int = 0) -> int:
        """resolveVirtualMethod: the method `cls` runs for the virtual or interface method `method`
        (0 when the runtime cannot say); `owner_class`: the exact owning type (a generic
        interface's instantiation), passed as a class context."""
        return self.trapped("resolveVirtualMethod", method, cls, (owner_class | 1) if owner_class else 0)

    def unboxed_entry(self, method: int) -> tuple[int, bool]:
        """getUnboxedEntry: (the method an unboxing stub wraps or 0, whether it takes a
        MethodTable argument -- shared generic struct code)."""
        needs = ctypes.c_bool(False)
        value = self.trapped("getUnboxedEntry", method, ctypes.addressof(needs))
        return value, bool(needs.value)

    def method_sync(self, method: int) -> tuple[int, int]:
        """getMethodSync: (the lock a synchronized static method takes or 0, indirection cell or 0)."""
        return self._with_indirection("getMethodSync", method)

    def statics_module_id(self, cls: int) -> tuple[int, int]:
        """getClassModuleIdForStatics: (the module id the shared-statics helpers take -- the
        DomainLocalModule of the class's statics -- or 0, indirection cell or 0)."""
        indirect = ctypes.c_void_p(0)
        value = self.trapped("getClassModuleIdForStatics", cls, 0, ctypes.addressof(indirect))
        return value, indirect.value or 0

    def class_domain_id(self, cls: int) -> tuple[int, int]:
        """getClassDomainID: (the class's index among its module's statics -- 0 is a real
        one -- , indirection cell or 0)."""
        indirect = ctypes.c_void_p(0)
        value = self.trapped("getClassDomainID", cls, ctypes.addressof(indirect)) & 0xFFFFFFFF
        return value, indirect.value or 0

    def field_info(self, rt, caller: int, flags: int):
        """getFieldInfo of a resolved field token, as `caller` would access it (CORINFO_ACCESS_*)."""
        from .structs import CORINFO_FIELD_INFO
        info = CORINFO_FIELD_INFO()
        self.trapped("getFieldInfo", ctypes.addressof(rt), caller, flags, ctypes.addressof(info))
        return info

    # -- type system questions (the runtime-backed JIT-EE grows from these) -----------------

    def field_offset(self, field: int) -> int:
        """getFieldOffset: from the object reference for a class's field (the method table
        pointer included), from the value's start for a value type's."""
        return self.trapped("getFieldOffset", field) & 0xFFFFFFFF

    def class_size(self, cls: int) -> int:
        return self.trapped("getClassSize", cls) & 0xFFFFFFFF

    def is_value_class(self, cls: int) -> bool:
        return bool(self.trapped("isValueClass", cls) & 0xFFFFFFFF)

    def class_attribs(self, cls: int) -> int:
        """CORINFO_FLG_* of a class (getClassAttribs)."""
        return self.trapped("getClassAttribs", cls) & 0xFFFFFFFF

    def class_alignment(self, cls: int) -> int:
        return self.trapped("getClassAlignmentRequirement", cls, 0) & 0xFFFFFFFF

    def class_gc_layout(self, cls: int, size: int) -> bytes:
        """getClassGClayout: one CorInfoGCType byte per pointer-sized slot of a value of `size` bytes."""
        buf = ctypes.create_string_buffer((size + 7) // 8 or 1)
        self.trapped("getClassGClayout", cls, ctypes.addressof(buf))
        return buf.raw[:(size + 7) // 8]

    def sysv_struct_descriptor(self, cls: int):
        """getSystemVAmd64PassStructInRegisterDescriptor (None when the runtime says it has no answer)."""
        from .structs import SYSTEMV_AMD64_CORINFO_STRUCT_REG_PASSING_DESCRIPTOR
        desc = SYSTEMV_AMD64_CORINFO_STRUCT_REG_PASSING_DESCRIPTOR()
        ok = self.trapped("getSystemVAmd64PassStructInRegisterDescriptor", cls, ctypes.addressof(desc)) & 0xFF
        return desc if ok else None

    # -- reporting the code (trapped: allocation can fail with an OOM exception) ------------

    def reserve_unwind_info(self, is_funclet: bool, size: int) -> None:
        self.trapped("reserveUnwindInfo", int(is_funclet), 0, size)

    def alloc_mem(self, code_size: int, rodata_size: int, eh_count: int, align16: bool = True) -> tuple[int, int]:
        hot, cold, ro = ctypes.c_void_p(0), ctypes.c_void_p(0), ctypes.c_void_p(0)
        flag = (1 if align16 else 0) | (2 if rodata_size else 0)
        self.trapped("allocMem", code_size, 0, rodata_size, eh_count, flag, ctypes.addressof(hot),
                     ctypes.addressof(cold), ctypes.addressof(ro))
        return hot.value or 0, ro.value or 0

    def alloc_unwind_info(self, code: int, start: int, end: int, unwind: bytes, kind: CorJitFuncKind) -> None:
        buf = ctypes.create_string_buffer(unwind, len(unwind))
        self.trapped("allocUnwindInfo", code, 0, start, end, len(unwind), ctypes.addressof(buf), int(kind))

    def alloc_gc_info(self, data: bytes) -> int:
        addr = self.trapped("allocGCInfo", len(data))
        if not addr:
            raise JitInfoTrap("allocGCInfo returned NULL")
        ctypes.memmove(addr, data, len(data))
        return addr

    def set_eh_count(self, count: int) -> None:
        self.trapped("setEHcount", count)

    def set_eh_info(self, index: int, clause: bytes) -> None:
        buf = ctypes.create_string_buffer(clause, len(clause))
        self.trapped("setEHinfo", index, ctypes.addressof(buf))

    def record_relocation(self, location: int, target: int, reloc_type: int, addl_delta: int = 0) -> None:
        self.trapped("recordRelocation", location, target, reloc_type, 0, addl_delta & 0xFFFFFFFF)


__all__ = ["JitInfo", "JitInfoTrap", "slots"]
