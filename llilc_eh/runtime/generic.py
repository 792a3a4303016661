"""Shared generic methods: code compiled once for every reference-type instantiation.

For `M<T>` instantiated over reference types CoreCLR asks for the canonical code M<__Canon>
once (CORINFO_FLG_SHAREDINST; CORINFO_METHOD_INFO.options has
CORINFO_GENERICS_CTXT_FROM_METHODDESC). The caller passes the exact instantiation as a hidden
argument, a MethodDesc*, after `this` and the return buffer (callingconvention.h
GetParamTypeArgOffset; RyuJIT's lvaInitArgs with USER_ARGS_COME_LAST). A catch whose class
depends on T (`catch !!T`) is resolved by the runtime per frame: the VM sets
CORINFO_GENERICS_CTXT_KEEP_ALIVE and reads the context back from the frame through the GC
info's GenericsInstContextStackSlot (eetwain.cpp GetExactGenericsToken). That offset is
relative to the *caller's SP* of the main body; from a funclet the runtime first follows the
PSPSym to the parent's Initial-SP and adds the parent's fixed stack size (its UNWIND_INFO's
allocations and pushes, plus 8 for the return address; jitinterface.cpp
GetOffsetsFromUnwindInfo), so the slot must be one fixed frame slot for the whole method.

The reader (Options.generic_context) receives the argument and stores it into an alloca
escaped by `llvm.localescape` as index 0: LLVM then emits its frame-pointer-relative offset
as the symbol `<parent>$frame_escape_0` in its assembly, which is where we read it. With the
frame pointer's distance from the Initial-SP (the filter frame constant fp_offset, checked
against every funclet prolog) and the fixed stack size:

    caller-SP offset = escape offset + fp_offset - (fixed stack size)

Shared code of generic *types* too: a static method or a value type's method takes a hidden
MethodTable in the same place (CORINFO_GENERICS_CTXT_FROM_METHODTABLE, reported as
GENERICS_INST_CONTEXT_MT); an instance method of a generic class finds its instantiation in
`this` (CORINFO_GENERICS_CTXT_FROM_THIS): the reader stores `this` into the same escaped slot,
so it stays alive and in one place, and the GC info says GENERICS_INST_CONTEXT_THIS (the
runtime takes the MethodTable of the object in the slot).

Code that depends on T beyond a catch (box !!T, newobj List<!!T>, a call to M2<!!T> ...) finds
its handles through the context at run time: runtime/lookup.py asks the runtime how, the
reader emits the dictionary walk (reader/lookup.py). With the metadata JIT-EE, which cannot
answer lookups, such a method is still declined (`runtime_lookup`).
"""

from __future__ import annotations

import re

from .service import Declined

SHARED_REASON = "code shared between generic instantiations"     # the service's reason, one class
#: driver.reason_class of a runtime-lookup decline
LOOKUP_REASON_CLASS = (f"{SHARED_REASON}: IL_\u2026 '\u2026' may need a runtime lookup of the instantiation "
                       "(not generated)")


def is_shared_generic_method(jit, info) -> bool:
    """Canonical code of a generic method whose context is the hidden MethodDesc argument."""
    return shared_context(jit, info) == "md"


def shared_context(jit, info) -> str | None:
    """The generic context of shared code -- "md" (the hidden MethodDesc: a generic method),
    "mt" (the hidden MethodTable: a static or value-type method of a generic type), "this"
    (an instance method of a generic class) -- or None for code that is not shared."""
    from .lookup import context_kind
    return context_kind(info.options, jit.method_attribs(info.ftn))


def shared_instantiation(jit, info):
    """The canonical instantiation shared code is compiled for (CORINFO_METHOD_INFO.args.sigInst):
    `__Canon` -- any reference type -- bound as an object reference, every other argument
    exactly, so the reader lays out what is not shared: AsyncTaskMethodBuilder<__Canon>'s
    AwaitUnsafeOnCompleted<TaskAwaiter, SM> is one body for every TResult, with a TaskAwaiter
    (a struct) as its !!0 -- read as an object reference, its `constrained. !!0 callvirt` went
    to the awaiter's Task (EntryPointNotFoundException, found by the concurrency workload).
    None when the method and its type have no type arguments. A value-type argument holding
    `__Canon` itself (TaskAwaiter<__Canon>, KeyValuePair<__Canon,int>) is bound with __Canon an
    object reference too (instantiation.type_arg, `shared`): its layout is every instantiation's."""
    import ctypes

    from .instantiation import Instantiation, TypeArg, sig_instantiation, type_arg
    classes, methods = sig_instantiation(ctypes.addressof(info))
    if not classes and not methods:
        return None

    def arg(cls: int) -> TypeArg:
        name_space = ctypes.c_char_p()
        address = jit.trapped("getClassNameFromMetadata", cls, ctypes.addressof(name_space)) if cls else 0
        name = ctypes.string_at(address).decode("utf-8", "replace") if address else ""
        if name == "__Canon" or (cls and not jit.is_value_class(cls)):
            return TypeArg("class", namespace=(name_space.value or b"").decode("utf-8", "replace"), name=name)
        return type_arg(jit, cls, shared=True)
    return Instantiation(tuple(arg(c) for c in classes), tuple(arg(m) for m in methods))


def check_runtime_il(info, asm, rid: int, shared: bool = True) -> None:
    """Declined when the IL the runtime compiles (CORINFO_METHOD_INFO.ILCode) is not the file's:
    for CoreLib's JitHelpers / Unsafe / RuntimeHelpers intrinsics the runtime substitutes IL of
    its own (jitinterface.cpp getMethodInfoHelper), and the file's body may only throw or call
    itself. Found with `run --all-eh --methods 'System.Threading.*' ...` on the concurrency
    workload: JitHelpers.GetObjectHandleOnStack<__Canon> compiled from the file overflowed the
    stack (declined as shared code before, so never seen). Asked of every method, shared or
    not (`shared` only names the decline's class): an exact instantiation of such a method
    (IsReferenceOrContainsReferences<int32> under `--methods '*'`) is the same trap."""
    import ctypes
    runtime = ctypes.string_at(info.ILCode, info.ILCodeSize) if info.ILCode and info.ILCodeSize else None
    if runtime is not None and runtime != asm.body(rid).code:
        raise Declined(f"{SHARED_REASON + ': ' if shared else ''}the runtime compiles IL of its own "
                       f"({len(runtime)} bytes), not the file's body")


def check_shape(pipeline, rid: int, generic_owners: frozenset[int]) -> None:
    """With the runtime's JIT-EE every lookup is asked as the reader meets it (reader/lookup.py:
    what it cannot generate is a ReaderError at its offset). With the metadata JIT-EE, which
    cannot answer lookups: declined unless the method itself declares the generic parameters
    (its type does not) and no instruction of its body names a token that may depend on them."""
    if getattr(pipeline.ee, "generic_lookup", None) is not None:
        return
    asm = pipeline.asm
    token = 0x06000000 | rid
    owner = asm.names.method_owner(rid)
    if token not in generic_owners or owner in generic_owners:
        raise Declined(SHARED_REASON)
    runtime_lookup(asm, rid)


def runtime_lookup(asm, rid: int) -> None:
    """A TypeSpec or MethodSpec token, or any token whose text names a generic parameter
    (`!0`, `!!0`), may need the context at run time: not generated, so the method is declined
    with the first such token and its IL offset."""
    from ..il.decoder import decode
    from ..il.opcodes import OperandKind
    body = asm.body(rid)
    for insn in decode(body.code):
        kind = insn.op.operand
        if not kind.is_token or kind is OperandKind.STRING or not isinstance(insn.operand, int):
            continue
        tok = insn.operand
        text = asm.names.token(tok)
        if tok >> 24 in (0x1B, 0x2B) or "!" in text:
            raise Declined(f"{SHARED_REASON}: IL_{insn.offset:04x} '{insn.op.name} {text}' may need a "
                           "runtime lookup of the instantiation (not generated)")


_ESCAPE = re.compile(r'^"?\.L(?P<fn>.*)\$frame_escape_(?P<i>\d+)"?\s*=\s*(?P<v>-?\d+)\s*$', re.M)


def escape_offset(asm_text: str, parent: str, index: int) -> int:
    """The frame-pointer-relative offset LLVM gave `llvm.localescape` argument `index` of the
    function `parent` (its assembly's `.L<parent>$frame_escape_<index> = <offset>`)."""
    name = parent.strip('@"')
    found = [int(m.group("v")) for m in _ESCAPE.finditer(asm_text)
             if m.group("fn") == name and int(m.group("i")) == index]
    if len(found) != 1:
        raise Declined(f"{SHARED_REASON}: {len(found)} frame_escape_{index} symbols of {name} in LLVM's assembly")
    return found[0]


def fixed_stack_size(unwind) -> int:
    """The runtime's EECodeInfo::GetFixedStackSize of a range: its UNWIND_INFO's allocations
    and pushes, plus 8 for the return address."""
    from ..unwind.codec import UnwindOpKind
    size = 0
    for op in unwind.codes:
        if op.op in (UnwindOpKind.ALLOC_SMALL, UnwindOpKind.ALLOC_LARGE):
            size += op.size
        elif op.op == UnwindOpKind.PUSH_NONVOL:
            size += 8
    return size + 8


def context_slot(run, kind: str = "md", keep_alive: bool = True) -> tuple[str, int, int] | None:
    """(context kind, caller-SP-relative offset of the generic context's slot, prolog size):
    what the GC info reports (module docstring; for "this" the slot holds `this`, which
    GENERICS_INST_CONTEXT_THIS tells the runtime to take the MethodTable of). The prolog size is the root range's UNWIND_INFO prolog:
    the slot is stored in the entry block, before any call (localescape makes it visible to
    every callee), so before any point the runtime could stop the frame at.

    None -- nothing reported -- for a method without funclets (and so without the frame
    constants) whose context the runtime does not ask to keep alive (CORINFO_METHOD_INFO.options
    has no CORINFO_GENERICS_CTXT_KEEP_ALIVE: no catch depends on T): RyuJIT reports it then only
    for collectible types (lvaReportParamTypeArg), which a run does not load; such methods are
    offered only by --methods (the alt JIT takes methods with EH clauses otherwise)."""
    from ..reader.translate import GENERIC_CONTEXT_ESCAPE
    image = run.image
    if image.filter_constants is None and len(image.ranges) == 1 and not keep_alive:
        return None
    if image.filter_constants is None:
        raise Declined(f"{SHARED_REASON}: no frame constants (the parent has no RBP frame)")
    root = image.ranges[0].unwind
    offset = escape_offset(run.codegen.asm, run.reader.parent, GENERIC_CONTEXT_ESCAPE)
    return kind, offset + image.filter_constants.fp_offset - fixed_stack_size(root), root.prolog_size


__all__ = ["LOOKUP_REASON_CLASS", "SHARED_REASON", "check_runtime_il", "check_shape", "context_slot", "escape_offset", "fixed_stack_size",
           "is_shared_generic_method", "runtime_lookup", "shared_context", "shared_instantiation"]
