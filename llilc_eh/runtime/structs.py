"""The CoreCLR 3.1 JIT-EE structures the runtime stage reads and writes in live memory.

Declared once, as ctypes structures: these are not bytes we parse or build but objects the
runtime hands us by pointer (CORINFO_METHOD_INFO) or fills through a pointer we pass
(CORINFO_RESOLVED_TOKEN, CORINFO_CONST_LOOKUP, CORJIT_FLAGS), so the declaration has to be
one ctypes can point at. Layouts from dotnet/coreclr v3.1.23 src/inc/corinfo.h,
corjit.h, corjitflags.h (Linux x64: ULONG and DWORD are 32-bit, handles 64-bit). The EH
clause table keeps its construct declaration (llilc_eh.clauses.structs): `setEHinfo` is given
a pointer into the encoded table.
"""

from __future__ import annotations

import ctypes
import enum

c_handle = ctypes.c_void_p


class CORINFO_METHOD_INFO(ctypes.Structure):
    """The head of CORINFO_METHOD_INFO (the two CORINFO_SIG_INFO members that follow are not
    read here: the reader takes signatures from metadata)."""
    _fields_ = [
        ("ftn", c_handle),            # CORINFO_METHOD_HANDLE
        ("scope", c_handle),          # CORINFO_MODULE_HANDLE
        ("ILCode", ctypes.c_void_p),
        ("ILCodeSize", ctypes.c_uint32),
        ("maxStack", ctypes.c_uint32),
        ("EHcount", ctypes.c_uint32),
        ("options", ctypes.c_uint32),
        ("regionKind", ctypes.c_uint32),
    ]


class CORINFO_RESOLVED_TOKEN(ctypes.Structure):
    _fields_ = [
        ("tokenContext", c_handle),
        ("tokenScope", c_handle),
        ("token", ctypes.c_uint32),
        ("tokenType", ctypes.c_uint32),
        ("hClass", c_handle),
        ("hMethod", c_handle),
        ("hField", c_handle),
        ("pTypeSpec", ctypes.c_void_p),
        ("cbTypeSpec", ctypes.c_uint32),
        ("pMethodSpec", ctypes.c_void_p),
        ("cbMethodSpec", ctypes.c_uint32),
    ]


class CORINFO_CONST_LOOKUP(ctypes.Structure):
    _fields_ = [("accessType", ctypes.c_uint32), ("addr", ctypes.c_void_p)]


class CORINFO_LOOKUP_KIND(ctypes.Structure):
    _fields_ = [
        ("needsRuntimeLookup", ctypes.c_bool),
        ("runtimeLookupKind", ctypes.c_uint32),
        ("runtimeLookupFlags", ctypes.c_uint16),
        ("runtimeLookupArgs", ctypes.c_void_p),
    ]


class CORINFO_RUNTIME_LOOKUP(ctypes.Structure):
    _fields_ = [
        ("signature", ctypes.c_void_p),
        ("helper", ctypes.c_uint32),
        ("indirections", ctypes.c_uint16),
        ("testForNull", ctypes.c_bool),
        ("testForFixup", ctypes.c_bool),
        ("offsets", ctypes.c_size_t * 4),          # CORINFO_MAXINDIRECTIONS
        ("indirectFirstOffset", ctypes.c_bool),
        ("indirectSecondOffset", ctypes.c_bool),
    ]


class _LookupUnion(ctypes.Union):
    _fields_ = [("runtimeLookup", CORINFO_RUNTIME_LOOKUP), ("constLookup", CORINFO_CONST_LOOKUP)]


class CORINFO_LOOKUP(ctypes.Structure):
    _anonymous_ = ("u",)
    _fields_ = [("lookupKind", CORINFO_LOOKUP_KIND), ("u", _LookupUnion)]


class CORINFO_GENERICHANDLE_RESULT(ctypes.Structure):
    """What embedGenericHandle fills: for a Newarr token the *array's* MethodTable (an array
    TypeHandle in 3.1 is an ArrayTypeDesc; the allocation helpers want its template MT)."""
    _fields_ = [("lookup", CORINFO_LOOKUP), ("compileTimeHandle", ctypes.c_void_p),
                ("handleType", ctypes.c_uint32)]


class SYSTEMV_AMD64_CORINFO_STRUCT_REG_PASSING_DESCRIPTOR(ctypes.Structure):
    """getSystemVAmd64PassStructInRegisterDescriptor's answer (corinfo.h; 8 bytes, all bytes)."""
    _fields_ = [
        ("passedInRegisters", ctypes.c_uint8),          # a C++ bool
        ("eightByteCount", ctypes.c_uint8),
        ("eightByteClassifications", ctypes.c_uint8 * 2),   # SystemVClassificationType
        ("eightByteSizes", ctypes.c_uint8 * 2),
        ("eightByteOffsets", ctypes.c_uint8 * 2),
    ]


class SystemVClassificationType(enum.IntEnum):
    UNKNOWN = 0
    STRUCT = 1
    NO_CLASS = 2
    MEMORY = 3
    INTEGER = 4
    INTEGER_REFERENCE = 5
    INTEGER_BYREF = 6
    SSE = 7
    TYPED_REFERENCE = 8


class CorInfoGCType(enum.IntEnum):
    """getClassGClayout's byte per pointer-sized slot."""
    NONE = 0
    REF = 1
    BYREF = 2
    OTHER = 3


class CORINFO_HELPER_ARG(ctypes.Structure):
    _fields_ = [("handle", ctypes.c_void_p), ("argType", ctypes.c_uint32)]   # a union of handles / size_t


class CORINFO_HELPER_DESC(ctypes.Structure):
    _fields_ = [("helperNum", ctypes.c_uint32), ("numArgs", ctypes.c_uint32),
                ("args", CORINFO_HELPER_ARG * 4)]          # CORINFO_ACCESS_ALLOWED_MAX_ARGS


class CORINFO_FIELD_INFO(ctypes.Structure):
    """getFieldInfo's answer: how the JIT must reach a field (the accessor, the helper if one,
    the offset -- from the helper's base for helper-based statics)."""
    _fields_ = [
        ("fieldAccessor", ctypes.c_uint32),    # CorInfoFieldAccessor
        ("fieldFlags", ctypes.c_uint32),       # CORINFO_FLG_FIELD_*
        ("helper", ctypes.c_uint32),           # CorInfoHelpFunc
        ("offset", ctypes.c_uint32),
        ("fieldType", ctypes.c_uint32),        # CorInfoType
        ("structType", c_handle),
        ("accessAllowed", ctypes.c_uint32),
        ("accessCalloutHelper", CORINFO_HELPER_DESC),
        ("fieldLookup", CORINFO_CONST_LOOKUP),
    ]


# CORINFO_FIELD_ACCESSOR (corinfo.h): a static reached through the (ModuleID, ClassID) helpers --
# every thread static outside ReadyToRun (jitinterface.cpp getFieldInfo)
CORINFO_FIELD_STATIC_SHARED_STATIC_HELPER = 6
CORINFO_FLG_FIELD_STATIC_IN_HEAP = 0x00000008     # the static is a boxed value on the GC heap
CORINFO_ACCESS_GET = 0x0100                        # CORINFO_ACCESS_FLAGS: a load (ldsfld)
CORINFO_ACCESS_ADDRESS = 0x0400                    # an address (ldsflda)


class CORJIT_FLAGS(ctypes.Structure):
    _fields_ = [("corJitFlags", ctypes.c_uint64)]


class InfoAccessType(enum.IntEnum):
    IAT_VALUE = 0
    IAT_PVALUE = 1
    IAT_PPVALUE = 2
    IAT_RELPVALUE = 3


class CorJitFuncKind(enum.IntEnum):
    ROOT = 0
    HANDLER = 1
    FILTER = 2


class CorInfoTokenKind(enum.IntEnum):
    Class = 0x01
    Method = 0x02
    Field = 0x04
    Ldtoken = 0x17
    Casting = 0x21
    Constrained = 0x101      # the type a `constrained.` prefix names
    Newarr = 0x41
    NewObj = 0x202


CORINFO_FLG_SHAREDINST = 0x00020000      # code shared between generic instantiations
# CORINFO_METHOD_INFO.options (corinfo.h CorInfoOptions): shared code whose generic context is the
# hidden argument, a MethodDesc (a shared generic method); keep it alive and report its slot
CORINFO_GENERICS_CTXT_FROM_METHODDESC = 0x00000040
CORINFO_GENERICS_CTXT_FROM_THIS = 0x00000020        # ... a generic class's instance method: `this`
CORINFO_GENERICS_CTXT_FROM_METHODTABLE = 0x00000080  # ... a hidden MethodTable (static / value-type method)
CORINFO_GENERICS_CTXT_MASK = 0x000000E0
CORINFO_FLG_STATIC = 0x00000008           # method attributes (getMethodAttribs)
CORINFO_FLG_SYNCH = 0x00000020            # synchronized: the JIT adds a monitor and its own fault clause
CORINFO_FLG_VIRTUAL = 0x00000040
CORINFO_FLG_ABSTRACT = 0x00000400
CORINFO_FLG_VALUECLASS = 0x00010000       # class attributes (getClassAttribs)
CORINFO_FLG_CONTAINS_GC_PTR = 0x01000000
CORINFO_FLG_INTRINSIC = 0x00400000        # may have an intrinsic ID
CORINFO_FLG_JIT_INTRINSIC = 0x40000000    # a potential JIT intrinsic ([Intrinsic])

CORJIT_OK = 0
CORJIT_SKIPPED = 0x80000004
CORJIT_FLAG_CALL_GETJITFLAGS = 0xFFFFFFFF
CORJIT_FLAG_IL_STUB = 27          # bit number in CORJIT_FLAGS (corjitflags.h)

CORINFO_EH_CLAUSE_SIZE = 24

__all__ = [n for n in dir() if n.isupper() or n.startswith(("CORINFO", "CORJIT", "Cor", "Info"))]
