"""The runtime helpers the reader calls, and the implicit checks it makes explicit.

`HELPERS` names every `CORINFO_HELP_*` helper the reader may call, with the LLVM declaration
it emits, whether the helper returns, and the exceptions the runtime raises from it. Names
and argument orders are CoreCLR 3.x's (`src/inc/corinfo.h` enum `CorInfoHelpFunc`,
`src/inc/jithelpers.h`, the `HCIMPL` definitions in `src/vm/jithelpers.cpp`); an argument
that is a runtime handle (class, method, module) is a `ptr`, object references are `ptr`.
The throw helpers take no arguments: the runtime builds the exception object itself.

`IMPLICIT_CHECKS` is DESIGN decision 6 as a table: every condition under which an IL
instruction raises an exception without a `throw`, the helper the reader calls when it
holds, and the exception type CoreCLR 3.1 raises. The exception types are measured, not
read: tests/reader/implicit_checks.il triggers each check on CoreCLR 3.1 (the ground truth)
and on Mono, and tests/reader/test_implicit_exceptions.py holds this table to what CoreCLR
prints. Facts the measurement settled, where the spec reader might guess otherwise:

* `ckfinite` of NaN or ±infinity raises System.OverflowException (ECMA-335 III.3.20 says
  ArithmeticException, its base class): RyuJIT's ckfinite jumps to the same throw block
  kind as overflow (SCK_ARITH_EXCPN → CORINFO_HELP_OVERFLOW). Mono does the same.
* `div`/`rem` of INT_MIN by -1 raise OverflowException (x64 `idiv` would fault; the JIT
  tests it explicitly), for int32 and int64; a zero divisor DivideByZeroException, for
  `div.un`/`rem.un` too.
* `conv.ovf.<to>` of a floating-point value truncates toward zero and then range-checks:
  -0.9 → u1 and -2147483648.9 → i4 do not throw; NaN and ±infinity always throw.
  The `.un` forms ignore the "unsigned" for a floating-point source on CoreCLR
  (`conv.ovf.i4.un` of -1.0 is -1, no exception). Mono rejects every
  `conv.ovf.<to>.un` of a floating-point source except `.u8.un` with
  InvalidProgramException when it compiles the method.
* An array index is a native int: `ldelem` at index 2^32 of a 3-element array raises
  IndexOutOfRangeException on CoreCLR (Mono truncates the index to 32 bits and reads
  element 0).
* `unbox.any` of null to a value type raises NullReferenceException, of the wrong type
  InvalidCastException; `unbox.any` to a reference type is `castclass`.
* `newarr` with a negative size raises OverflowException (the allocation helper checks).
* `throw` of null raises NullReferenceException (CORINFO_HELP_THROW checks).

tests/reader/typed_refs_and_blocks.il measured the block and typed-reference opcodes the
same way (CoreCLR 3.1 and Mono agree on all of them):

* `cpblk` / `initblk` with a null address raise NullReferenceException only when the size
  is non-zero; with size 0 nothing happens, whether the size is a constant or not. `cpobj`
  with a null address raises NullReferenceException.
* `mkrefany` of a null pointer raises nothing, and neither does `refanyval` of the typed
  reference it makes (only a load through the result does): neither opcode belongs to the
  null checks.
* `refanyval` raises InvalidCastException when the typed reference's type is not exactly
  the token's (also for a default, all-zero TypedReference): CORINFO_HELP_GETREFANY decides.
  It is a checking helper without an entry in IMPLICIT_CHECKS, whose kinds are exactly the
  cases of tests/reader/implicit_checks.il.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

NULL_REFERENCE = "System.NullReferenceException"
DIVIDE_BY_ZERO = "System.DivideByZeroException"
OVERFLOW = "System.OverflowException"
INDEX_OUT_OF_RANGE = "System.IndexOutOfRangeException"
ARRAY_TYPE_MISMATCH = "System.ArrayTypeMismatchException"
INVALID_CAST = "System.InvalidCastException"
OUT_OF_MEMORY = "System.OutOfMemoryException"
TYPE_INITIALIZATION = "System.TypeInitializationException"


@dataclass(frozen=True)
class RuntimeHelper:
    """One JIT helper as the reader declares and calls it."""

    name: str                       # the CorInfoHelpFunc name, also the LLVM symbol
    ret: str                        # LLVM return type
    params: tuple[str, ...]         # LLVM parameter types
    noreturn: bool                  # a throw helper: never returns (declared `noreturn`)
    raises: tuple[str, ...]         # exceptions the runtime raises from it (full type names)
    purpose: str

    @property
    def declaration(self) -> str:
        """The LLVM declaration text, e.g. `declare void @CORINFO_HELP_RNGCHKFAIL() noreturn`."""
        attrs = " noreturn" if self.noreturn else ""
        return f"declare {self.ret} @{self.name}({', '.join(self.params)}){attrs}"

    @property
    def prototype(self) -> str:
        """The LLVM function type, e.g. `ptr (ptr, i64)`."""
        return f"{self.ret} ({', '.join(self.params)})"

    @property
    def exception(self) -> str | None:
        """The one exception a throw helper raises; None for the others."""
        return self.raises[0] if self.noreturn and len(self.raises) == 1 else None

    def __str__(self) -> str:
        raises = ", ".join(self.raises) or "-"
        return f"{self.declaration}    ; raises {raises}; {self.purpose}"


def _helper(name, ret, params, purpose, raises=(), noreturn=False) -> RuntimeHelper:
    return RuntimeHelper(name, ret, tuple(params), noreturn, tuple(raises), purpose)


_HELPER_LIST = (
    # Exceptions (corinfo.h "Exceptions"): the noreturn throw helpers.
    _helper("CORINFO_HELP_THROW", "void", ["ptr"], "IL throw: raise the exception object (IL_Throw)",
            [NULL_REFERENCE], noreturn=True),
    _helper("CORINFO_HELP_RETHROW", "void", [], "IL rethrow: rethrow the exception being handled (IL_Rethrow)",
            noreturn=True),
    _helper("CORINFO_HELP_RNGCHKFAIL", "void", [], "array bounds check failed (JIT_RngChkFail)",
            [INDEX_OUT_OF_RANGE], noreturn=True),
    _helper("CORINFO_HELP_OVERFLOW", "void", [],
            "overflow arithmetic, conv.ovf, INT_MIN/-1, ckfinite (JIT_Overflow)", [OVERFLOW], noreturn=True),
    _helper("CORINFO_HELP_THROWDIVZERO", "void", [], "integer division by zero (JIT_ThrowDivZero)",
            [DIVIDE_BY_ZERO], noreturn=True),
    _helper("CORINFO_HELP_THROWNULLREF", "void", [], "explicit null check failed (JIT_ThrowNullRef)",
            [NULL_REFERENCE], noreturn=True),
    # Arrays of references: the helper does the null, bounds and covariance checks itself.
    _helper("CORINFO_HELP_ARRADDR_ST", "void", ["ptr", "i64", "ptr"],
            "stelem.ref: store (array, index, value) with the array store type check (JIT_Stelem_Ref)",
            [NULL_REFERENCE, INDEX_OUT_OF_RANGE, ARRAY_TYPE_MISMATCH]),
    _helper("CORINFO_HELP_LDELEMA_REF", "ptr", ["ptr", "i64", "ptr"],
            "ldelema of a reference type: (array, index, element class) -> exact-type element address "
            "(JIT_Ldelema_Ref)", [NULL_REFERENCE, INDEX_OUT_OF_RANGE, ARRAY_TYPE_MISMATCH]),
    # Allocation.
    _helper("CORINFO_HELP_NEWFAST", "ptr", ["ptr"], "newobj: allocate an object of a class (JIT_New)",
            [OUT_OF_MEMORY]),
    _helper("CORINFO_HELP_NEWSFAST", "ptr", ["ptr"],
            "newobj: allocate a small, non-finalizable object of a class", [OUT_OF_MEMORY]),
    _helper("CORINFO_HELP_NEW_MDARR_NONVARARG", "ptr", ["ptr", "i32", "ptr"],
            "newobj of a multi-dimensional array: (array class, argument count, the int32 lengths -- or "
            "lower bounds and lengths -- in memory) (JIT_NewMDArrNonVarArg)", [OVERFLOW, OUT_OF_MEMORY]),
    _helper("CORINFO_HELP_NEWARR_1_VC", "ptr", ["ptr", "i64"],
            "newarr of a value type: (array method table, length) (JIT_NewArr1)", [OVERFLOW, OUT_OF_MEMORY]),
    _helper("CORINFO_HELP_NEWARR_1_OBJ", "ptr", ["ptr", "i64"],
            "newarr of a reference type: (array method table, length)", [OVERFLOW, OUT_OF_MEMORY]),
    _helper("CORINFO_HELP_NEWARR_1_DIRECT", "ptr", ["ptr", "i64"],
            "newarr, any element type: (array method table, length)", [OVERFLOW, OUT_OF_MEMORY]),
    # Object model: boxing and casts (class handle first, then the object).
    _helper("CORINFO_HELP_BOX", "ptr", ["ptr", "ptr"], "box: (class, pointer to the value) -> object (JIT_Box)",
            [OUT_OF_MEMORY]),
    _helper("CORINFO_HELP_BOX_NULLABLE", "ptr", ["ptr", "ptr"], "box of a Nullable<T>: (class, pointer to the value)",
            [OUT_OF_MEMORY]),
    _helper("CORINFO_HELP_UNBOX", "ptr", ["ptr", "ptr"],
            "unbox: (class, object) -> pointer to the boxed value (JIT_Unbox)", [NULL_REFERENCE, INVALID_CAST]),
    _helper("CORINFO_HELP_UNBOX_NULLABLE", "void", ["ptr", "ptr", "ptr"],
            "unbox to Nullable<T>: (destination, class, object) (JIT_Unbox_Nullable)", [INVALID_CAST]),
    _helper("CORINFO_HELP_CHKCASTANY", "ptr", ["ptr", "ptr"],
            "castclass, any target: (class, object) -> object (JIT_ChkCastAny)", [INVALID_CAST]),
    _helper("CORINFO_HELP_CHKCASTCLASS", "ptr", ["ptr", "ptr"], "castclass to a class: (class, object) -> object",
            [INVALID_CAST]),
    _helper("CORINFO_HELP_CHKCASTINTERFACE", "ptr", ["ptr", "ptr"],
            "castclass to an interface: (class, object) -> object", [INVALID_CAST]),
    _helper("CORINFO_HELP_CHKCASTARRAY", "ptr", ["ptr", "ptr"], "castclass to an array: (class, object) -> object",
            [INVALID_CAST]),
    _helper("CORINFO_HELP_ISINSTANCEOFANY", "ptr", ["ptr", "ptr"],
            "isinst, any target: (class, object) -> object or null (JIT_IsInstanceOfAny)"),
    _helper("CORINFO_HELP_ISINSTANCEOFCLASS", "ptr", ["ptr", "ptr"], "isinst to a class: (class, object)"),
    _helper("CORINFO_HELP_ISINSTANCEOFINTERFACE", "ptr", ["ptr", "ptr"], "isinst to an interface: (class, object)"),
    _helper("CORINFO_HELP_ISINSTANCEOFARRAY", "ptr", ["ptr", "ptr"], "isinst to an array: (class, object)"),
    # Typed references: the TypedReference is passed as a pointer to a copy (the Windows x64 ABI
    # passes a 16-byte struct so; our convention passes every value type so).
    _helper("CORINFO_HELP_GETREFANY", "ptr", ["ptr", "ptr"],
            "refanyval: (class, pointer to the TypedReference) -> its data pointer, if its type handle is "
            "exactly the class (JIT_GetRefAny)", [INVALID_CAST]),
    # Shared generic code: a dictionary slot not filled yet, a generic class's statics
    # (jithelpers.cpp JIT_GenericHandleMethod / JIT_GenericHandleClass, JIT_GetGenericsGCStaticBase).
    _helper("CORINFO_HELP_RUNTIMEHANDLE_METHOD", "ptr", ["ptr", "ptr"],
            "runtime lookup from a MethodDesc context: (context, signature) -> the handle, filling the "
            "dictionary slot", [OUT_OF_MEMORY]),
    _helper("CORINFO_HELP_RUNTIMEHANDLE_CLASS", "ptr", ["ptr", "ptr"],
            "runtime lookup from a MethodTable context: (context, signature) -> the handle, filling the "
            "dictionary slot", [OUT_OF_MEMORY]),
    _helper("CORINFO_HELP_GETGENERICS_GCSTATIC_BASE", "ptr", ["ptr"],
            "base of a generic instantiation's GC statics, running its .cctor: (class)", [TYPE_INITIALIZATION]),
    _helper("CORINFO_HELP_GETGENERICS_NONGCSTATIC_BASE", "ptr", ["ptr"],
            "base of a generic instantiation's non-GC statics, running its .cctor: (class)",
            [TYPE_INITIALIZATION]),
    # Calls.
    _helper("CORINFO_HELP_INITCLASS", "void", ["ptr"],
            "run a class's static constructor if it has not run: (class) (JIT_InitClass)", [TYPE_INITIALIZATION]),
    # ldtoken: a runtime handle struct holds a managed object, not the raw handle (CoreCLR 3.1
    # jithelpers.h: JIT_GetRuntimeType, JIT_GetRuntimeFieldStub, JIT_GetRuntimeMethodStub).
    _helper("CORINFO_HELP_TYPEHANDLE_TO_RUNTIMETYPEHANDLE", "ptr", ["ptr"],
            "ldtoken of a type: class handle -> the RuntimeType a RuntimeTypeHandle holds", [OUT_OF_MEMORY]),
    _helper("CORINFO_HELP_FIELDDESC_TO_STUBRUNTIMEFIELD", "ptr", ["ptr"],
            "ldtoken of a field: field handle -> the stub object a RuntimeFieldHandle holds", [OUT_OF_MEMORY]),
    _helper("CORINFO_HELP_METHODDESC_TO_STUBRUNTIMEMETHOD", "ptr", ["ptr"],
            "ldtoken of a method: method handle -> the stub object a RuntimeMethodHandle holds", [OUT_OF_MEMORY]),
    _helper("CORINFO_HELP_VIRTUAL_FUNC_PTR", "ptr", ["ptr", "ptr", "ptr"],
            "ldvirtftn / virtual call target at run time: (object, class, method) -> code address "
            "(JIT_VirtualFunctionPointer)", [NULL_REFERENCE]),
    # Statics: (module domain id, class domain id) -> base of the class's statics; runs the .cctor.
    _helper("CORINFO_HELP_GETSHARED_GCSTATIC_BASE", "ptr", ["i64", "i32"],
            "base of a class's GC statics, running its .cctor", [TYPE_INITIALIZATION]),
    _helper("CORINFO_HELP_GETSHARED_NONGCSTATIC_BASE", "ptr", ["i64", "i32"],
            "base of a class's non-GC statics, running its .cctor", [TYPE_INITIALIZATION]),
    # Thread statics: (module id, class id) -> this thread's statics of the class (allocated and
    # the .cctor run on first use); the _NOCTOR ids RyuJIT may be given are the same functions.
    _helper("CORINFO_HELP_GETSHARED_GCTHREADSTATIC_BASE", "ptr", ["i64", "i32"],
            "base of this thread's GC statics of a class, running its .cctor (JIT_GetSharedGCThreadStaticBase)",
            [TYPE_INITIALIZATION]),
    _helper("CORINFO_HELP_GETSHARED_NONGCTHREADSTATIC_BASE", "ptr", ["i64", "i32"],
            "base of this thread's non-GC statics of a class, running its .cctor "
            "(JIT_GetSharedNonGCThreadStaticBase)", [TYPE_INITIALIZATION]),
    # Synchronized methods: the implicit try/finally around the body (lockTaken is a byte flag).
    _helper("CORINFO_HELP_MON_ENTER", "void", ["ptr", "ptr"],
            "synchronized method entry: (object, &lockTaken) (JIT_MonEnterWorker)", [NULL_REFERENCE]),
    _helper("CORINFO_HELP_MON_EXIT", "void", ["ptr", "ptr"],
            "synchronized method exit: (object, &lockTaken) (JIT_MonExitWorker)"),
    _helper("CORINFO_HELP_MON_ENTER_STATIC", "void", ["ptr", "ptr"],
            "synchronized static method entry: (getMethodSync's lock, &lockTaken) (JIT_MonEnterStatic)"),
    _helper("CORINFO_HELP_MON_EXIT_STATIC", "void", ["ptr", "ptr"],
            "synchronized static method exit: (getMethodSync's lock, &lockTaken) (JIT_MonExitStatic)"),
    # Checked conversions from double that RyuJIT may call instead of testing inline.
    _helper("CORINFO_HELP_DBL2INT_OVF", "i32", ["double"], "conv.ovf.i4 of a double (JIT_Dbl2IntOvf)", [OVERFLOW]),
    _helper("CORINFO_HELP_DBL2UINT_OVF", "i32", ["double"], "conv.ovf.u4 of a double (JIT_Dbl2UIntOvf)",
            [OVERFLOW]),
    _helper("CORINFO_HELP_DBL2LNG_OVF", "i64", ["double"], "conv.ovf.i8 of a double (JIT_Dbl2LngOvf)", [OVERFLOW]),
    _helper("CORINFO_HELP_DBL2ULNG_OVF", "i64", ["double"], "conv.ovf.u8 of a double (JIT_Dbl2ULngOvf)",
            [OVERFLOW]),
    # The linux-x64 target's (llilc_eh.target): write barriers, and what LLVM would otherwise
    # make a C library call in the Win64 convention (memcpy/memset of a variable size, fmod).
    _helper("CORINFO_HELP_CHECKED_ASSIGN_REF", "void", ["ptr", "ptr"],
            "store an object reference: (destination, reference), marking the card when the destination "
            "is in the GC heap (JIT_CheckedWriteBarrier; any address)"),
    _helper("CORINFO_HELP_ASSIGN_STRUCT", "void", ["ptr", "ptr", "ptr"],
            "copy a value type holding references: (destination, source, class), with the barriers "
            "(JIT_StructWriteBarrier: CopyValueClass)"),
    _helper("CORINFO_HELP_MEMCPY", "void", ["ptr", "ptr", "i64"],
            "cpblk of a variable size: (destination, source, size) (JIT_MemCpy)", [NULL_REFERENCE]),
    _helper("CORINFO_HELP_MEMSET", "void", ["ptr", "i32", "i64"],
            "initblk / zeroing localloc of a variable size: (destination, byte, size) (JIT_MemSet)",
            [NULL_REFERENCE]),
    _helper("CORINFO_HELP_DBLREM", "double", ["double", "double"],
            "rem of F (the reader's float stack values are doubles) (JIT_DblRem)"),
)

HELPERS: Mapping[str, RuntimeHelper] = MappingProxyType({h.name: h for h in _HELPER_LIST})


def helper_declarations() -> Mapping[str, RuntimeHelper]:
    """Every helper by name (read-only); `.declaration` is the text the module declares."""
    return HELPERS


# --------------------------------------------------------------------------------------------
# Implicit checks


@dataclass(frozen=True)
class ImplicitCheck:
    """One condition under which IL instructions raise an exception by themselves.

    `via` says how the reader makes it explicit: "throw-helper" — a compare and a branch to a
    cold block calling the noreturn `helper`; "checking-helper" — the operation itself is a
    call to `helper`, which performs the check and raises (array covariance, casts, unbox,
    allocation: the runtime's type system is needed to decide).
    """

    kind: str                       # the check's name, e.g. "div-zero", "conv.ovf.i1.un"
    opcodes: tuple[str, ...]        # IL opcodes that carry the check
    condition: str                  # when it raises
    helper: str                     # a key of HELPERS
    exception: str                  # full type name CoreCLR 3.1 raises (measured)
    via: str = "throw-helper"
    target_range: tuple[int, int] | None = None   # conv.ovf: the target type's value range

    def __str__(self) -> str:
        return f"{self.kind:<22} {self.exception:<36} {self.helper:<28} {self.condition}"


_NULL_OPCODES = ("ldfld", "ldflda", "stfld", "ldlen", "callvirt", "ldvirtftn", "ldelem", "ldelem.*", "stelem",
                 "stelem.*", "ldelema", "ldind.*", "stind.*", "ldobj", "stobj", "cpobj", "initobj", "cpblk",
                 "initblk", "unbox", "unbox.any")
_ARRAY_ELEMENT_OPCODES = ("ldelem", "ldelem.*", "stelem", "stelem.*", "ldelema")

# conv.ovf targets on x64 (native int is 64 bits).
_TARGETS = {
    "i1": (-(1 << 7), (1 << 7) - 1), "u1": (0, (1 << 8) - 1),
    "i2": (-(1 << 15), (1 << 15) - 1), "u2": (0, (1 << 16) - 1),
    "i4": (-(1 << 31), (1 << 31) - 1), "u4": (0, (1 << 32) - 1),
    "i8": (-(1 << 63), (1 << 63) - 1), "u8": (0, (1 << 64) - 1),
    "i": (-(1 << 63), (1 << 63) - 1), "u": (0, (1 << 64) - 1),
}

_ARITHMETIC = {
    "add.ovf": "signed sum does not fit (llvm.sadd.with.overflow)",
    "add.ovf.un": "unsigned sum does not fit (llvm.uadd.with.overflow)",
    "sub.ovf": "signed difference does not fit (llvm.ssub.with.overflow)",
    "sub.ovf.un": "unsigned difference does not fit (llvm.usub.with.overflow)",
    "mul.ovf": "signed product does not fit (llvm.smul.with.overflow)",
    "mul.ovf.un": "unsigned product does not fit (llvm.umul.with.overflow)",
}


def _checks() -> list[ImplicitCheck]:
    checks = [
        ImplicitCheck("null-deref", _NULL_OPCODES,
                      "object, array or address operand is null (cpblk/initblk: and the size is not 0)",
                      "CORINFO_HELP_THROWNULLREF", NULL_REFERENCE),
        ImplicitCheck("div-zero", ("div", "div.un", "rem", "rem.un"), "integer divisor is 0 (int32, int64)",
                      "CORINFO_HELP_THROWDIVZERO", DIVIDE_BY_ZERO),
        ImplicitCheck("div-overflow", ("div", "rem"), "dividend is INT_MIN and divisor -1 (int32, int64)",
                      "CORINFO_HELP_OVERFLOW", OVERFLOW),
    ]
    checks += [ImplicitCheck(op, (op,), cond + " (int32, int64, native int)", "CORINFO_HELP_OVERFLOW", OVERFLOW)
               for op, cond in _ARITHMETIC.items()]
    for target, bounds in _TARGETS.items():
        checks.append(ImplicitCheck(
            f"conv.ovf.{target}", (f"conv.ovf.{target}",),
            f"signed integer source outside [{bounds[0]}, {bounds[1]}]; floating-point source NaN, "
            f"infinite, or outside the range after truncation toward zero",
            "CORINFO_HELP_OVERFLOW", OVERFLOW, target_range=bounds))
        checks.append(ImplicitCheck(
            f"conv.ovf.{target}.un", (f"conv.ovf.{target}.un",),
            f"source read as unsigned outside [{bounds[0]}, {bounds[1]}]; a floating-point source is "
            f"checked as by conv.ovf.{target} (CoreCLR ignores .un for it)",
            "CORINFO_HELP_OVERFLOW", OVERFLOW, target_range=bounds))
    checks += [
        ImplicitCheck("ckfinite", ("ckfinite",), "value is NaN or infinite (float32, float64)",
                      "CORINFO_HELP_OVERFLOW", OVERFLOW),
        ImplicitCheck("array-bounds", _ARRAY_ELEMENT_OPCODES,
                      "index (native int, unsigned compare) not below the array length",
                      "CORINFO_HELP_RNGCHKFAIL", INDEX_OUT_OF_RANGE),
        ImplicitCheck("array-store-type", ("stelem.ref", "stelem"),
                      "stored reference not assignable to the array's actual element type",
                      "CORINFO_HELP_ARRADDR_ST", ARRAY_TYPE_MISMATCH, via="checking-helper"),
        ImplicitCheck("array-address-type", ("ldelema",),
                      "element address of a reference type requested with a type other than the "
                      "array's exact element type (no readonly. prefix)",
                      "CORINFO_HELP_LDELEMA_REF", ARRAY_TYPE_MISMATCH, via="checking-helper"),
        ImplicitCheck("cast", ("castclass", "unbox.any"), "non-null object not an instance of the target type",
                      "CORINFO_HELP_CHKCASTANY", INVALID_CAST, via="checking-helper"),
        ImplicitCheck("unbox-type", ("unbox", "unbox.any"), "boxed object not of the value type",
                      "CORINFO_HELP_UNBOX", INVALID_CAST, via="checking-helper"),
        ImplicitCheck("newarr-size", ("newarr",), "length is negative",
                      "CORINFO_HELP_NEWARR_1_VC", OVERFLOW, via="checking-helper"),
        ImplicitCheck("throw-null", ("throw",), "thrown object is null",
                      "CORINFO_HELP_THROW", NULL_REFERENCE, via="checking-helper"),
    ]
    return checks


IMPLICIT_CHECKS: Mapping[str, ImplicitCheck] = MappingProxyType({c.kind: c for c in _checks()})
