"""One method: our pipeline for the linux-x64 target, then its code and tables into the runtime.

The order is the one the runtime requires (ALTJIT.md, "Order of reporting"), and everything
that can fail without side effects happens first, so a decline leaves nothing behind:

  1. compile: `Pipeline` on (file, token) with `Options(target=LINUX_X64)`, the requested
     --opt and --clone-finally; a stage error, an image finding or a validator finding is a
     decline (we never install a table our own checks doubt);
  2. resolve every external the image still names, through the runtime (`resolve_externals`):
     helpers by getHelperFtn, methods by resolveToken + getFunctionEntryPoint, data cells by
     constructStringLiteral / embedClassHandle / getFieldAddress (+ initClass) / ...;
  3. lay out the allocation: the image's code, our call stubs right after it (in room the
     image left before its read-only data: `make_room_for_stubs`), the read-only data at the
     offset the image chose (so its rip-relative references stay right), then any 8-byte data
     cells the image did not place -- one block from allocMem, so every reference inside it
     reaches;
  4. report: reserveUnwindInfo per range (root + each funclet), allocMem, copy, patch, call
     relocations through recordRelocation, allocUnwindInfo root first then each funclet
     (ROOT / HANDLER / FILTER), allocGCInfo (llilc_eh.gcinfo.for_method), setEHcount +
     setEHinfo per clause (our generator's table: end offsets in the length fields,
     duplicates last).

Calls: an IAT_VALUE target (the usual answer: a precode or the code itself) is reached by
`recordRelocation(IMAGE_REL_BASED_REL32)` on the call's rel32 -- the runtime writes it, and
inserts one of its own jump stubs when the target is beyond +-2 GB (it knows those stubs; it
would not know ours if a thread were suspended in one). An IAT_PVALUE target (a cell that
holds the entry point) gets a stub of ours after the code: `mov rax, cell; jmp [rax]` (RAX is
free at a call: the return register, no argument). Data: cells, filled with absolute values.

The stubs are code the runtime can interrupt, so they are the method's code: inside the code
size reported to the runtime and the GC info's code length, and under a RUNTIME_FUNCTION of
their own (a frameless leaf, like our stack probe's: RSP untouched, the return address at
[RSP]), reported last. Why: on Linux a GC suspends a thread by a signal wherever it runs; at an
IP of ours that is no safe point CoreCLR 3.1 calls IsIPInProlog, which reads the UNWIND_INFO of
the RUNTIME_FUNCTION holding the IP (excep.cpp; LazyGetFunctionEntry gives NULL outside every
one, a debug-only assert). Stubs after the read-only data with no entry crashed the runtime
(exit 139; tests/target/test_stub_suspension.py). The runtime takes every RUNTIME_FUNCTION after
the first for a funclet's and does not hijack in a funclet: the suspension is retried. So that
the read-only data stays where the code's references expect it, the image is linked again
with room for the stubs between its code and its read-only data (`make_room_for_stubs`, the
same code and ranges). RyuJIT needs no stub (`call [rip+cell]`): the access type is known only
here, after the code was made.

Negative controls (`RunConfig.damage`, for tests only): "try-end-short" installs every
clause with its try end one byte short (the return address of a call that ends a try is then
outside it: the runtime no longer finds the handler, the output must change);
"jitee-field-offset" shifts the metadata offsets in the comparison only (compare.py);
"metadata-field-offset" shifts every instance field offset the metadata JIT-EE answers, before
the reader asks (ee.damage_metadata): with the runtime answering the output must not change,
with metadata answering it must. "no-generic-context": a shared generic method's GC info without
its generic context (runtime/generic.py): the runtime cannot resolve `catch !!T`.
"lookup-offset": every runtime lookup of shared code reads one dictionary slot further
(runtime/lookup.py): the code finds the wrong type, the output must change.
"instantiation-int64": an exact instantiation's int32 type arguments bound as int64 in the
reader (runtime/instantiation.py): T-typed fields and locals are laid out wrong, the output must
change.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..backend.coff import RelocationType
from ..errors import LlilcEhError
from ..reader.lookup import LookupRefused
from .jitinfo import JitInfo, JitInfoTrap
from .service import Declined
from .structs import CORINFO_FLG_JIT_INTRINSIC, CORINFO_FLG_SHAREDINST, CorInfoTokenKind, CorJitFuncKind, InfoAccessType

IMAGE_REL_BASED_REL32 = 0x10          # corinfo.h: recordRelocation's rel32 (jump stub if out of range)
PVALUE_STUB = bytes.fromhex("48b8") + bytes(8) + bytes.fromhex("ff20")   # mov rax, imm64; jmp [rax]
STUB_ALIGN = 16
STUB_SLOT = 16                        # one stub per 16 bytes: 12 of code, 4 of int3
DAMAGES = ("try-end-short", "no-monitor-clause", "constrained-boxed", "jitee-field-offset", "metadata-field-offset", "no-generic-context",
           "instantiation-int64", "lookup-offset")
_REL32_EXTRA = {RelocationType.REL32: 0, RelocationType.REL32_1: 1, RelocationType.REL32_2: 2,
                RelocationType.REL32_3: 3, RelocationType.REL32_4: 4, RelocationType.REL32_5: 5}


@lru_cache(maxsize=None)
def helper_numbers() -> dict[str, int]:
    """CorInfoHelpFunc numbers of CoreCLR 3.1.23 by name (the list file, declaration order)."""
    names = [line.strip() for line in Path(__file__).with_name("corinfo-helpers-3.1.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    if names[0] != "CORINFO_HELP_UNDEF" or names[-1] != "CORINFO_HELP_COUNT":
        raise RuntimeError("corinfo-helpers-3.1.txt: not the CorInfoHelpFunc list")
    return {n: i for i, n in enumerate(names)}


@dataclass(frozen=True)
class CallTarget:
    symbol: str
    access: InfoAccessType            # IAT_VALUE: the address; IAT_PVALUE: a cell holding it
    address: int


@dataclass
class Layout:
    """The allocation: [code | stubs | read-only data][cells], offsets from its start."""

    blob: bytearray
    code_size: int                    # the method's code: the image's, then our stubs
    cells: dict[str, int]             # symbol -> offset of its 8-byte cell
    stubs: dict[str, int]             # symbol -> offset of its PVALUE stub
    relocations: list[tuple[int, int, int]]   # (field offset, target address, addlDelta): recordRelocation
    stub_range: tuple[int, int] | None = None  # [start, end) of the stubs: their RUNTIME_FUNCTION


def compile_and_install(service, jit: JitInfo, info, asm_name: str, token: int, name: str,
                        entry_ptr: int, size_ptr: int) -> dict:
    from .generic import context_slot, shared_context
    from .lookup import CORINFO_GENERICS_CTXT_KEEP_ALIVE
    generic_context = shared_context(jit, info)      # shared code's context: md | mt | this (generic.py)
    shared = generic_context is not None
    pipeline = service.pipeline(asm_name, generic_context=generic_context) if shared else service.pipeline(asm_name)
    from .generic import check_runtime_il          # every method: we compile the file's IL, it must be what runs
    check_runtime_il(info, pipeline.asm, token & 0xFFFFFF, shared)
    bind = getattr(pipeline.ee, "bind", None)      # the runtime-backed JIT-EE (ee.py) asks this method's jit
    if bind is not None:
        bind(jit, info)
        pipeline.ee.lookup_damage = service.config.damage     # runtime lookups (lookup.py): a control
    # an exact instantiation (List<int>::Sort, M<double>): its type arguments bound in the
    # reader, every token resolved in its own context (runtime/instantiation.py)
    from .instantiation import bind_instantiation, exact_instantiation
    from .generic import shared_instantiation     # shared code: __Canon an object, the rest exact
    inst = shared_instantiation(jit, info) if shared else exact_instantiation(jit, info, pipeline.asm,
                                                                               token & 0xFFFFFF)
    jit.instantiation = inst.name(name) if inst is not None else None    # a decline names it too (service.py)
    bind_instantiation(pipeline.ee, token, inst, service.file_of, service.config.damage)
    run = compile_method(pipeline, token, shared, exact=inst is not None)
    try:
        kind = return_kind(pipeline.ee, token)     # asked before the comparison: its questions are in it
    except LlilcEhError as e:
        raise Declined(f"return kind: [{e.stage}/{e.kind}] {e.describe()}") from None
    if service.config.compare_jitee:
        from .compare import compare_answers
        answers = compare_answers(jit, info, run, pipeline.ee, service.config.damage)
        service.record({"event": "jitee", "method": name, "answers": answers})
    values, calls = resolve_externals(jit, info, run, service.method_il)
    if service.config.damage == "constrained-boxed":      # a negative control: every constrained call boxes
        values = {s: 0 if run.reader.externals[s].kind == "constrained-entry" else v for s, v in values.items()}
    run = make_room_for_stubs(run, calls)
    layout = lay_out(run, values, calls)
    clause_bytes = damaged(run.clause_bytes, service.config.damage)
    keep_alive = bool(info.options & CORINFO_GENERICS_CTXT_KEEP_ALIVE)
    context = context_slot(run, generic_context, keep_alive) if shared and \
        service.config.damage != "no-generic-context" else None
    gc = gc_info(run, kind, context, code_length=layout.code_size)
    entry = report(jit, run, layout, clause_bytes, gc)
    ctypes.c_void_p.from_address(entry_ptr).value = entry
    ctypes.c_uint32.from_address(size_ptr).value = layout.code_size
    psp = run.image.filter_constants.psp_slot_offset if run.image.filter_constants is not None else None
    return {"method": name, "token": f"0x{token:08X}", "assembly": asm_name,
            "instantiation": inst.name(name) if inst is not None else None,
            "code_bytes": layout.code_size, "allocation_bytes": len(layout.blob),
            "clauses": len(run.clauses.clauses), "funclets": len(run.image.ranges) - 1,
            "opt": run.opt, "stubs": len(layout.stubs), "cells": len(values),
            "relocations": len(layout.relocations), "gc_info_bytes": len(gc),
            "gc_info": gc.hex(), "psp_slot": psp, "return_kind": kind.name,
            "frame_register": run.image.ranges[0].unwind.frame_register or None,
            "jitee": "runtime" if bind is not None else "metadata",
            # what the runtime's exception events name (the MethodDesc, the handler's address):
            # `run` counts the exceptions and handlers of our methods with them (events.py)
            "method_handle": f"0x{info.ftn:x}", "entry": f"0x{entry:x}",
            "handlers": [[c.kind, c.handler_start] for c in run.clauses.clauses],
            "pipeline_ms": round(sum(v for k, v in run.seconds.items() if k != "codegen-wait") * 1000, 3)}


# -- 1. our pipeline ---------------------------------------------------------------------------

def compile_method(pipeline, token: int, shared: bool = False, exact: bool = False):
    """The pipeline's run of one method, or Declined with the reason. `shared`: the canonical
    code of a generic method (runtime/generic.py), compiled when nothing in it needs a lookup;
    `exact`: an exact instantiation, its type arguments bound in the JIT-EE (instantiation.py)."""
    from ..errors import LlilcEhError
    asm = pipeline.asm
    rid = token & 0xFFFFFF
    owner = asm.names.method_owner(rid)
    if shared:
        from .generic import check_shape
        check_shape(pipeline, rid, generic_owners(asm))
    elif generic_owners(asm) & {token, owner} and not exact:
        raise Declined("generic method or method of a generic type (code per instantiation not supported)")
    try:
        run = pipeline.run(rid)
    except LlilcEhError as e:
        raise Declined(f"[{e.stage}/{e.kind}] {e.describe()}") from None
    if run.error is not None:
        e = run.error
        raise Declined(f"[{e.stage}/{e.kind}] {e.describe()}")
    if run.image_findings:
        raise Declined(f"image finding: {run.image_findings[0]}")
    if run.findings:
        raise Declined(f"validator finding on our clause table: {run.findings[0]}")
    return run


def generic_owners(asm) -> frozenset[int]:
    """MethodDef and TypeDef tokens that declare generic parameters (the GenericParam table).
    Code per instantiation (a generic context, shared canonical code) is not ours to make yet;
    nested types of a generic type are caught by the runtime's answers failing, not here."""
    cached = getattr(asm, "_llilc_generic_owners", None)
    if cached is None:
        table = asm.pe.net.mdtables.GenericParam
        owners = set()
        for row in (table.rows if table is not None else ()):
            kind = 0x06 if type(row.Owner.table).__name__ == "MethodDef" else 0x02
            owners.add(kind << 24 | row.Owner.row_index)
        cached = frozenset(owners)
        asm._llilc_generic_owners = cached
    return cached


# -- 2. externals -------------------------------------------------------------------------------

def resolve_externals(jit: JitInfo, info, run, il_of=None) -> tuple[dict[str, int], dict[str, CallTarget]]:
    """Cell values (symbol -> 8-byte value) and call targets, asked of the runtime.
    `il_of(jit, method handle)`: a callee's IL (to tell a JIT intrinsic whose IL only throws)."""
    il_of = il_of if il_of is not None else (lambda j, m: j.method_il(m))
    externals = getattr(run.reader, "externals", {}) or {}
    symbols = {r.symbol for r in run.image.relocations}
    values: dict[str, int] = {}
    calls: dict[str, CallTarget] = {}
    for symbol in sorted(symbols):
        ext = externals.get(symbol)
        if ext is None:
            raise Declined(f"the image names {symbol!r}, which the reader does not describe")
        try:
            if ext.is_call:
                calls[symbol] = _call_target(jit, info, ext, il_of)
            elif ext.cell:
                values[symbol] = _cell_value(jit, info, ext)
            else:
                raise Declined(f"external data {symbol!r} ({ext.kind}) is not in a cell: it may not reach")
        except (JitInfoTrap, LookupRefused) as e:
            raise Declined(f"resolving {ext}: {e}") from None
    return values, calls


def _call_target(jit: JitInfo, info, ext, il_of) -> CallTarget:
    if ext.kind == "helper":
        number = helper_numbers().get(ext.helper)
        if number is None:
            raise Declined(f"helper {ext.helper} is not a CoreCLR 3.1 helper")
        direct, indirect = jit.helper_ftn(number)
        if direct:
            return CallTarget(ext.symbol, InfoAccessType.IAT_VALUE, direct)
        if indirect:
            return CallTarget(ext.symbol, InfoAccessType.IAT_PVALUE, indirect)
        raise Declined(f"getHelperFtn gave no address for {ext.helper}")
    if ext.call == "jmp":
        raise Declined(f"jmp to {ext.symbol} (tail transfer) is not installed")
    kind = CorInfoTokenKind.NewObj if ext.call == "newobj" else CorInfoTokenKind.Method
    rt = jit.resolve_token(info.scope, ext.token, kind, context=info.ftn)
    if not rt.hMethod:
        raise Declined(f"resolveToken gave no method for 0x{ext.token:08X}")
    if jit.method_attribs(rt.hMethod) & CORINFO_FLG_JIT_INTRINSIC and not _returns(il_of(jit, rt.hMethod)):
        # CoreLib's own intrinsics (Internal.Runtime.CompilerServices.Unsafe, ...) have IL that
        # only throws: RyuJIT expands them, a call to the IL is wrong (PlatformNotSupportedException)
        raise Declined(f"calls {ext.symbol}, a JIT intrinsic whose IL never returns (only RyuJIT expands it)")
    method = rt.hMethod
    if ext.call == "shared":
        # shared code's call passing the looked-up instantiation argument (reader/lookup.py): the
        # shared code getCallInfo names, not resolveToken's instantiating stub over __Canon
        from .lookup import shared_callee
        method, takes = shared_callee(jit, info.scope, info.ftn, ext.token, newobj=False)
        if not takes:
            raise Declined(f"the call to 0x{ext.token:08X} passes an instantiation argument its target does not take")
    elif jit.method_attribs(method) & CORINFO_FLG_SHAREDINST:
        # shared generic code whose caller passes the class or method as a hidden argument
        # (a generic struct's method over a reference type -- `this` is a byref -- a static or
        # generic method): we pass none, so call what the runtime makes callable without one,
        # the instantiating stub (a class's instance method stays shared: `this` carries the
        # class). Before, AsyncTaskMethodBuilder<string>::SetResult crashed and
        # KeyValuePair<string,int>::get_Key threw
        method = jit.exact_method(rt) or method
    access, addr = jit.function_entry_point(method)
    if access not in (InfoAccessType.IAT_VALUE, InfoAccessType.IAT_PVALUE) or not addr:
        raise Declined(f"entry point of 0x{ext.token:08X}: {access.name} 0x{addr:x}")
    return CallTarget(ext.symbol, access, addr)


def _returns(il: bytes | None) -> bool:
    """Whether an IL body has a `ret` (no body: assume it does -- the runtime implements it)."""
    if il is None:
        return True
    from ..errors import LlilcEhError
    from ..il.decoder import decode
    try:
        return any(i.op.name == "ret" for i in decode(il))
    except LlilcEhError:
        return False


#: the cells that hold one handle or address the runtime gives directly (the code has no
#: indirection to follow): kind -> (how the token resolves, what to ask of the resolved token,
#: what the decline names, the JIT-EE call). A static's code calls CORINFO_HELP_INITCLASS before
#: the access (reader, linux-x64), so its field's address is all the cell needs.
_HANDLE_CELLS = {
    "class": (CorInfoTokenKind.Class, lambda jit, rt: jit.embed_class_handle(rt.hClass),
              "class", "embedClassHandle"),
    "field-owner": (CorInfoTokenKind.Field, lambda jit, rt: jit.embed_class_handle(rt.hClass),
                    "class of static field", "embedClassHandle"),
    "static": (CorInfoTokenKind.Field, lambda jit, rt: jit.field_address(rt.hField),
               "static field", "getFieldAddress"),
    "method-handle": (CorInfoTokenKind.Method, lambda jit, rt: jit.embed_method_handle(rt.hMethod),
                      "method", "embedMethodHandle"),
    "method-class": (CorInfoTokenKind.Method, lambda jit, rt: jit.embed_class_handle(rt.hClass),
                     "class of method", "embedClassHandle"),
    # ldtoken's tokens resolve as CORINFO_TOKENKIND_Ldtoken, as RyuJIT's: any other kind refuses
    # System.Void and open generic types (jitinterface.cpp resolveToken; typeof(void) in
    # StartupHookProvider::CallStartupHook threw InvalidProgramException there)
    "ldtoken-class": (CorInfoTokenKind.Ldtoken, lambda jit, rt: jit.embed_class_handle(rt.hClass),
                      "class (ldtoken)", "embedClassHandle"),
    "field": (CorInfoTokenKind.Ldtoken, lambda jit, rt: jit.embed_field_handle(rt.hField),
              "field", "embedFieldHandle"),
}


def _cell_value(jit: JitInfo, info, ext) -> int:
    kind = ext.kind
    if kind == "lookup-signature" or _in_shared_code(jit, info):
        from .lookup import REQUESTS, ask
        if kind == "lookup-signature":      # the cookie of a runtime lookup (lookup.py)
            lookup = ask(jit, info.scope, info.ftn, ext.lookup, ext.token)
            if lookup is None or not lookup.signature:
                raise Declined(f"lookup {ext.lookup} 0x{ext.token:08X}: the runtime gave no lookup signature")
            return lookup.signature
        asked = "field-owner" if kind == "static" else kind      # a static's address: its class's statics
        # (method-entry: ask() follows getCallInfo's LDFTN answer -- a constant keeps its cell)
        if asked in REQUESTS and ask(jit, info.scope, info.ftn, asked, ext.token) is not None:
            # a cell would hold the canonical (__Canon) handle: silently wrong code
            raise Declined(f"{kind} 0x{ext.token:08X} needs a runtime lookup in shared code, the code has a cell")
        if kind == "method-entry":
            from .lookup import takes_inst_param
            rt = jit.resolve_token(info.scope, ext.token, CorInfoTokenKind.Method, context=info.ftn)
            if takes_inst_param(jit, rt.hMethod):
                raise Declined(f"ldftn 0x{ext.token:08X} in shared code: its target takes an instantiation argument")
    if kind == "string":
        access, addr = jit.string_literal(info.scope, ext.token)
        if access is not InfoAccessType.IAT_PVALUE or not addr:
            raise Declined(f"string literal 0x{ext.token:08X}: {access.name}, the code expects IAT_PVALUE")
        return addr
    if kind == "array-class":
        # as RyuJIT's newarr: resolve as Newarr, embed through embedGenericHandle, which gives
        # the array's MethodTable (embedClassHandle would give 3.1's ArrayTypeDesc, tagged |2)
        rt = jit.resolve_token(info.scope, ext.token, CorInfoTokenKind.Newarr, context=info.ftn)
        access, handle = jit.embed_generic_handle(rt)
        if access is not InfoAccessType.IAT_VALUE or not handle:
            raise Declined(f"array class 0x{ext.token:08X}: {access.name}")
        return handle
    if kind in _HANDLE_CELLS:
        token_kind, ask, what, api = _HANDLE_CELLS[kind]
        rt = jit.resolve_token(info.scope, ext.token, token_kind, context=info.ftn)
        value, _indirect = ask(jit, rt)
        if not value:
            raise Declined(f"{what} 0x{ext.token:08X}: {api} gave an indirection")
        return value
    if kind == "constrained-entry":
        return _constrained_entry(jit, info, ext)
    if kind == "method-sync":
        # a synchronized static method's lock: getMethodSync of the method itself (as RyuJIT's
        # fgGetCritSectOfStaticMethod), the monitor of its class's type object
        lock, indirect = jit.method_sync(info.ftn)
        if not lock:
            raise Declined(f"getMethodSync gave an indirection (0x{indirect:x}) for the static lock")
        return lock
    if kind in _THREAD_STATIC_CELLS:
        return _thread_static_cell(jit, info, ext)
    if kind == "method-entry":
        rt = jit.resolve_token(info.scope, ext.token, CorInfoTokenKind.Method, context=info.ftn)
        access, addr = jit.function_entry_point(rt.hMethod)
        if access is not InfoAccessType.IAT_VALUE:
            raise Declined(f"ldftn 0x{ext.token:08X}: {access.name}")
        return addr
    raise Declined(f"external {ext} ({kind}) is not installed yet")


def _constrained_entry(jit: JitInfo, info, ext) -> int:
    """`constrained. T callvirt M` on a value type T: the entry point of T's own M -- called with
    the managed pointer as `this`, as ECMA-335 III.2.1 and RyuJIT (getCallInfo,
    CORINFO_NO_THIS_TRANSFORM) -- or 0 when T has none (the code then boxes). T's own M is what
    T's vtable holds for M (resolveVirtualMethod: an unboxing stub for a value type) unwrapped
    (getUnboxedEntry); an inherited ValueType/Enum/Object method is no unboxing stub: 0. Shared
    generic struct code that wants a MethodTable argument we do not pass: 0 as well (the box's
    call goes through the stub, which passes it)."""
    method = jit.resolve_token(info.scope, ext.token, CorInfoTokenKind.Method, context=info.ftn)
    owner = jit.resolve_token(info.scope, ext.constrained, CorInfoTokenKind.Constrained, context=info.ftn)
    impl = jit.resolve_virtual_method(method.hMethod, owner.hClass, method.hClass)
    if not impl:
        return 0
    unboxed, needs_class = jit.unboxed_entry(impl)
    if not unboxed or needs_class:
        return 0
    access, addr = jit.function_entry_point(unboxed)
    if access is not InfoAccessType.IAT_VALUE or not addr:
        raise Declined(f"entry point of the constrained call's own method 0x{ext.token:08X}: {access.name}")
    return addr


#: a [ThreadStatic] field's code (reader, linux-x64) calls the shared thread-static helper with
#: (module id, class id) and adds the field's offset to the base it returns, as RyuJIT 3.1 does
#: outside ReadyToRun (getFieldInfo: CORINFO_FIELD_STATIC_SHARED_STATIC_HELPER for every thread
#: static; importer.cpp fgGetStaticsCCtorHelper). The reader's helper -> the helpers getFieldInfo
#: may name that are the same function: the _NOCTOR ids are JIT_GetShared*ThreadStaticBase too
#: (jithelpers.cpp: the class-init check is always made; the id only lets RyuJIT reorder).
#: _DYNAMICCLASS (a generic instantiation's statics) is another function: declined.
_THREAD_STATIC_HELPERS = {
    "CORINFO_HELP_GETSHARED_GCTHREADSTATIC_BASE": ("CORINFO_HELP_GETSHARED_GCTHREADSTATIC_BASE",
                                                   "CORINFO_HELP_GETSHARED_GCTHREADSTATIC_BASE_NOCTOR"),
    "CORINFO_HELP_GETSHARED_NONGCTHREADSTATIC_BASE": ("CORINFO_HELP_GETSHARED_NONGCTHREADSTATIC_BASE",
                                                      "CORINFO_HELP_GETSHARED_NONGCTHREADSTATIC_BASE_NOCTOR"),
}
_THREAD_STATIC_CELLS = ("statics-module", "statics-class-id", "thread-static")


def _thread_static_cell(jit: JitInfo, info, ext) -> int:
    """The value of one of a thread static's three cells: the module id and class id the helper
    takes (getClassModuleIdForStatics, getClassDomainID of the field's class), or the field's
    offset from the helper's base (getFieldInfo), after checking that the runtime reaches the
    field through the helper the reader called (`ext.helper`) and keeps it boxed exactly when
    the reader unboxes it (a GC helper for a value type: CORINFO_FLG_FIELD_STATIC_IN_HEAP)."""
    from .structs import (CORINFO_ACCESS_ADDRESS, CORINFO_FIELD_STATIC_SHARED_STATIC_HELPER,
                          CORINFO_FLG_FIELD_STATIC_IN_HEAP)
    rt = jit.resolve_token(info.scope, ext.token, CorInfoTokenKind.Field, context=info.ftn)
    if ext.kind == "statics-module":
        value, indirect = jit.statics_module_id(rt.hClass)
    elif ext.kind == "statics-class-id":
        value, indirect = jit.class_domain_id(rt.hClass)
    else:
        field = jit.field_info(rt, info.ftn, CORINFO_ACCESS_ADDRESS)
        numbers = helper_numbers()
        names = {v: k for k, v in numbers.items()}
        same = {numbers[n] for n in _THREAD_STATIC_HELPERS.get(ext.helper, ())}
        if field.fieldAccessor != CORINFO_FIELD_STATIC_SHARED_STATIC_HELPER or field.helper not in same:
            raise Declined(f"thread static 0x{ext.token:08X}: the runtime reaches it by accessor "
                           f"{field.fieldAccessor} through {names.get(field.helper, field.helper)}, "
                           f"the code calls {ext.helper}")
        boxed = bool(field.fieldFlags & CORINFO_FLG_FIELD_STATIC_IN_HEAP)
        if boxed != ext.boxed:
            raise Declined(f"thread static 0x{ext.token:08X}: the runtime keeps it "
                           f"{'boxed' if boxed else 'unboxed'}, the code reads it "
                           f"{'boxed' if ext.boxed else 'unboxed'}")
        value, indirect = field.offset, 0
    if indirect:
        raise Declined(f"{ext.kind} of thread static 0x{ext.token:08X}: the runtime gave an indirection")
    return value


def _in_shared_code(jit: JitInfo, info) -> bool:
    from .lookup import context_kind
    return context_kind(info.options, jit.method_attribs(info.ftn)) is not None


# -- 3. layout ------------------------------------------------------------------------------------

def _pvalue(calls: dict[str, CallTarget]) -> list[str]:
    """The call symbols that need a stub of ours (IAT_PVALUE), in the order they are laid out."""
    return sorted(s for s, c in calls.items() if c.access is InfoAccessType.IAT_PVALUE)


def _stubs_start(image) -> int:
    return -(-len(image.code) // STUB_ALIGN) * STUB_ALIGN


def make_room_for_stubs(run, calls: dict[str, CallTarget]):
    """`run` with an image that has room for our call stubs between its code and its
    read-only data (module docstring): linked again from the same object with `reserve`
    (backend.image.link_final_image) -- the same code, ranges and unwind data, only the
    read-only data further on (so the code's references to it change, nothing else) -- and
    checked again (verify: every reference against the object). `run` itself when no call
    needs a stub or there is room already. Other ranges or an image finding is a decline."""
    stubs = _pvalue(calls)
    image = run.image
    if not stubs or _stubs_start(image) + STUB_SLOT * len(stubs) <= image.read_only_data_offset or \
            not image.read_only_data and not image.cells:
        return run
    from dataclasses import replace

    from ..backend.image import link_final_image
    from ..target import target_named
    cells = {s for s, e in run.reader.externals.items() if e.cell}
    reserve = _stubs_start(image) - len(image.code) + STUB_SLOT * len(stubs)
    try:
        roomy = link_final_image(run.recovered, run.coff, run.model, run.reader.parent,
                                 target=target_named(image.target), cells=cells, reserve=reserve)
    except LlilcEhError as e:
        raise Declined(f"linking again with room for {len(stubs)} call stub(s): [{e.stage}/{e.kind}] "
                       f"{e.describe()}") from None
    # the same code but for the references to the read-only data, which verify() checks
    if (len(roomy.code), roomy.ranges, roomy.runtime_functions, roomy.unwind_data) != \
            (len(image.code), image.ranges, image.runtime_functions, image.unwind_data):
        raise Declined("linking again with room for call stubs changed the code's size or its ranges")
    findings = roomy.verify()
    if findings:
        raise Declined(f"linking again with room for call stubs: image finding {findings[0]}")
    return replace(run, image=roomy)


def lay_out(run, values: dict[str, int], calls: dict[str, CallTarget]) -> Layout:
    """The allocation's bytes: the image's code; our IAT_PVALUE call stubs right after it
    (16-aligned, inside the method's code: `code_size` ends with them), in the room the image
    left before its read-only data (`make_room_for_stubs`; none left is a decline); the
    read-only data at the image's offset; cells the image did not place; every relocation the
    installer resolves itself patched, the rest listed for recordRelocation."""
    image = run.image
    blob = bytearray(image.code)
    code_size = len(image.code)
    stubs: dict[str, int] = {}
    pvalue = _pvalue(calls)
    if pvalue:
        start = _stubs_start(image)
        end = start + STUB_SLOT * (len(pvalue) - 1) + len(PVALUE_STUB)
        if (image.read_only_data or image.cells) and end > image.read_only_data_offset:
            raise Declined(f"no room for {len(pvalue)} call stub(s) before the read-only data at "
                           f"{image.read_only_data_offset:#x} (the image was not linked with room for them)")
        _align(blob, STUB_ALIGN)
        for symbol in pvalue:
            _align(blob, STUB_SLOT)
            stubs[symbol] = len(blob)
            blob.extend(PVALUE_STUB)
            struct.pack_into("<Q", blob, stubs[symbol] + 2, calls[symbol].address)
        code_size = len(blob)
    if image.read_only_data:
        blob.extend(bytes(image.read_only_data_offset - len(blob)))
        blob.extend(image.read_only_data)
    # the image placed a cell for every data symbol (an ADDR64 relocation at the cell: filled
    # below); a data symbol it left as a rel32 (an older image) gets a cell here
    cells: dict[str, int] = {}
    placed = {r.symbol for r in image.relocations if r.type == RelocationType.ADDR64}
    _align(blob, 8)
    for symbol in sorted(set(values) - placed):
        cells[symbol] = len(blob)
        blob.extend(struct.pack("<Q", values[symbol]))
    relocations = []
    for r in image.relocations:
        if r.type == RelocationType.ADDR64 and r.symbol in values:    # a cell the image placed
            struct.pack_into("<Q", blob, r.offset, (values[r.symbol] + r.addend) & 0xFFFFFFFFFFFFFFFF)
            continue
        extra = _REL32_EXTRA.get(r.type)
        if extra is None:
            raise Declined(f"relocation {r}: only rel32 fields are installed")
        end = r.offset + 4 + extra
        if r.symbol in cells or r.symbol in stubs:
            target = cells.get(r.symbol, stubs.get(r.symbol))
            struct.pack_into("<i", blob, r.offset, target + r.addend - end)
        elif r.symbol in calls:
            relocations.append((r.offset, calls[r.symbol].address, r.addend - extra))
        else:
            raise Declined(f"relocation {r}: nothing resolved for {r.symbol}")
    return Layout(blob, code_size, cells, stubs, relocations,
                  (min(stubs.values()), code_size) if stubs else None)


def _align(blob: bytearray, n: int) -> None:
    blob.extend(b"\xcc" * (-len(blob) % n))


def damaged(clause_bytes: bytes, damage: str | None) -> bytes:
    """The clause table, or the negative control's damaged copy of it (module docstring)."""
    if damage is None or damage in ("jitee-field-offset", "metadata-field-offset", "no-generic-context", "lookup-offset",
                                    "instantiation-int64"):
        # (compare.py's, ee.py's, gc_info's)
        return clause_bytes
    from ..clauses.generate import decode_clauses, encode_clauses
    if damage == "constrained-boxed":       # (compile_and_install's: the constrained-entry cells)
        return clause_bytes
    if damage == "no-monitor-clause":
        # a synchronized method's own fault (its handler the last of the table: the JIT's clause is
        # the least nested, clauses/synchronized.py) not installed: an exception leaving the
        # method no longer releases the lock
        clauses = decode_clauses(clause_bytes)
        last = max((c.handler_start for c in clauses if c.kind == "fault"), default=None)
        return encode_clauses([c for c in clauses if not (c.kind == "fault" and c.handler_start == last)])
    if damage != "try-end-short":
        raise Declined(f"unknown damage {damage!r} (known: {', '.join(DAMAGES)})")
    from dataclasses import replace
    return encode_clauses([replace(c, try_end=c.try_end - 1) for c in decode_clauses(clause_bytes)])


def gc_info(run, kind=None, generic_context: tuple[int, int] | None = None,
            code_length: int | None = None) -> bytes:
    """The GC info of the installed method. Its code length is the method's code
    (`code_length`, `Layout.code_size`; default `len(image.code)`): the main body, the
    funclets (filters before their handlers), the funclet entry thunks, the stack probe
    routine and our call stubs after them -- which is also the size reported to the runtime;
    the read-only data the image placed after that (cells, jump tables) is not code and not
    counted (FinalImage keeps it apart: read_only_data at read_only_data_offset >= the code,
    with room for the stubs when they exist). `kind`: the method's ReturnKind (`return_kind`).
    Anything the encoder refuses is a decline, never an install of doubtful GC info.
    `generic_context`: (kind, caller-SP offset, prolog size) of shared code's context slot
    (generic.context_slot), reported as GENERICS_INST_CONTEXT_MD / _MT / _THIS."""
    from ..gcinfo import GcInfoError, ReturnKind, for_method
    image = run.image
    has_funclets = len(image.ranges) > 1
    psp = image.filter_constants.psp_slot_offset if image.filter_constants is not None else None
    if has_funclets and psp is None:
        raise Declined("no PSPSym slot found in the parent's code (GC info needs it)")
    length = len(image.code) if code_length is None else code_length
    covered = [r.end for r in image.ranges]
    if image.stack_probe is not None:
        from ..backend.relink import STACK_PROBE_CODE
        covered.append(image.stack_probe + len(STACK_PROBE_CODE))
    if max(covered, default=0) > length or length < len(image.code) or \
            (image.read_only_data and image.read_only_data_offset < length):
        raise Declined(f"the method's code ({length} bytes) does not hold its ranges and probe "
                       "apart from its read-only data: GC info's code length would not be the method's")
    frame = image.ranges[0].unwind.frame_register or None
    try:
        kind = kind if kind is not None else ReturnKind.SCALAR
        if generic_context is not None:
            from dataclasses import replace
            from ..gcinfo import GenericsInstContextKind
            from ..gcinfo.codec import encode, method_info
            context, offset, prolog = generic_context
            return encode(replace(method_info(length, psp, frame, has_funclets, return_kind=kind),
                                  generics_inst_context=GenericsInstContextKind[context.upper()],
                                  generics_inst_context_offset=offset, prolog_size=prolog))
        return for_method(length, psp, frame, has_funclets, return_kind=kind)
    except GcInfoError as e:
        raise Declined(f"[gcinfo/{e.kind}] {e}") from None


def return_kind(ee, token: int):
    """What RAX (and RDX) hold when the method returns, for the runtime's return-address
    hijack (threadsuspend.cpp GetReturnKind reads it from the GC info): as RyuJIT's
    GCInfo::getReturnKind (src/jit/gcencode.cpp, 3.1) -- an object reference OBJECT, a
    managed pointer BYREF; a value type returned in registers the GC kind of its first and
    second eightbyte (one eightbyte: its kind; two: first | second << 2), asked of the JIT-EE
    (`reference_offsets`: references only, a struct's byrefs are not seen by metadata); a
    value type returned through the buffer, anything else SCALAR."""
    from ..gcinfo import ReturnKind
    from ..reader.abi import MEMORY
    from ..reader.types import StackKind
    from ..reader.typesys import is_void
    ret = ee.compiled_method(token & 0xFFFFFF).return_type
    if is_void(ret):
        return ReturnKind.SCALAR
    kind = ee.stack_kind(ret)
    if kind is StackKind.OBJ:
        return ReturnKind.OBJECT
    if kind is StackKind.BYREF:
        return ReturnKind.BYREF
    if kind is not StackKind.VALUE:
        return ReturnKind.SCALAR
    size = ee.type_info(ret).size
    pieces = ee.sysv_eightbytes(ret) if size <= 16 else MEMORY
    if pieces in (MEMORY, None):
        return ReturnKind.SCALAR
    refs = set(ee.reference_offsets(ret) or ())
    kinds = [ReturnKind.OBJECT if 8 * i in refs else ReturnKind.SCALAR for i in range(len(pieces))]
    if len(kinds) == 1:
        return kinds[0]
    return ReturnKind(kinds[0] | kinds[1] << 2)


# -- 4. report to the runtime ---------------------------------------------------------------------

def unwind_records(run, layout: Layout) -> list:
    """What allocUnwindInfo gets: the image's records (root, funclets, our stack probe), then
    one for our call stubs when there are any -- a frameless leaf (module docstring), HANDLER
    as every record after the root (CoreCLR 3.1 tells only ROOT from the rest)."""
    from ..backend.relink import PROBE_UNWIND
    from ..pipeline import UnwindKind, UnwindRecord
    records = run.unwind_records()
    if layout.stub_range is not None:
        records.append(UnwindRecord(UnwindKind.HANDLER, None, *layout.stub_range, PROBE_UNWIND, True))
    return records


def uncovered(layout: Layout, records) -> list[int]:
    """Offsets of the method's code (`layout.code_size`) that are no int3 padding and that no
    unwind record holds: code the runtime could interrupt without a RUNTIME_FUNCTION (module
    docstring). Empty when sound."""
    from ..backend.relink import PADDING_BYTE
    held = bytearray(layout.code_size)
    for r in records:
        held[r.start:min(r.end, layout.code_size)] = b"\x01" * (min(r.end, layout.code_size) - r.start)
    return [i for i in range(layout.code_size) if not held[i] and layout.blob[i] != PADDING_BYTE]


def report(jit: JitInfo, run, layout: Layout, clause_bytes: bytes, gc: bytes) -> int:
    from ..pipeline import UnwindKind
    records = unwind_records(run, layout)
    loose = uncovered(layout, records)
    if loose:      # before the first call to the runtime: nothing reported yet
        raise Declined(f"{len(loose)} byte(s) of code in no RUNTIME_FUNCTION, the first at {loose[0]:#x}")
    clause_count = len(clause_bytes) // 24
    for r in records:
        jit.reserve_unwind_info(r.kind is not UnwindKind.ROOT, len(r.data))
    code, _ = jit.alloc_mem(len(layout.blob), 0, clause_count)
    if not code:
        raise JitInfoTrap("allocMem gave no code block")
    ctypes.memmove(code, bytes(layout.blob), len(layout.blob))
    for offset, target, delta in layout.relocations:
        jit.record_relocation(code + offset, target, IMAGE_REL_BASED_REL32, delta)
    for r in records:
        jit.alloc_unwind_info(code, r.start, r.end, r.data, CorJitFuncKind[r.kind.value])
    jit.alloc_gc_info(gc)
    jit.set_eh_count(clause_count)
    for i in range(clause_count):
        jit.set_eh_info(i, clause_bytes[24 * i: 24 * i + 24])
    return code


__all__ = ["DAMAGES", "Layout", "compile_and_install", "damaged", "gc_info", "helper_numbers", "lay_out",
           "make_room_for_stubs", "resolve_externals", "return_kind", "uncovered", "unwind_records"]
