"""Binary layouts of a ReadyToRun image (readytorun.h, readytorun-format.md), each declared
once with construct, and the numbers they carry.

The fixed-size records that come in long arrays (RUNTIME_FUNCTION, the exception lookup
table) are also read in bulk: `bulk_format` (assembly/structs.py) derives a `struct` format
from the same declaration, so a 30,000-entry table is one `struct.iter_unpack` and the layout
is still stated in one place.
"""

from __future__ import annotations

import enum

from construct import Array, Byte, Int16ul, Int32ul, Struct, this

# -------------------------------------------------------------------- layouts

# READYTORUN_SECTION: a section type and an IMAGE_DATA_DIRECTORY.
ReadyToRunSection = Struct(
    "type" / Int32ul,
    "rva" / Int32ul,
    "size" / Int32ul,
)

# READYTORUN_HEADER = signature, version, then READYTORUN_CORE_HEADER (flags, section count)
# followed by the sections, sorted by type.
ReadyToRunHeader = Struct(
    "signature" / Int32ul,
    "major_version" / Int16ul,
    "minor_version" / Int16ul,
    "flags" / Int32ul,
    "number_of_sections" / Int32ul,
    "sections" / Array(this.number_of_sections, ReadyToRunSection),
)
READYTORUN_HEADER_FIXED_SIZE = 16   # the part before the section array

# RUNTIME_FUNCTION on x64 (the Windows .pdata record): [begin, end) and the UNWIND_INFO RVA.
RuntimeFunctionAmd64 = Struct(
    "begin_rva" / Int32ul,
    "end_rva" / Int32ul,
    "unwind_rva" / Int32ul,
)

# READYTORUN_EXCEPTION_LOOKUP_TABLE_ENTRY: sorted by method start; the clauses of entry i
# run from its ExceptionInfo RVA to entry i+1's (a final sentinel entry closes the last).
ExceptionLookupEntry = Struct(
    "method_start_rva" / Int32ul,
    "exception_info_rva" / Int32ul,
)

# READYTORUN_IMPORT_SECTION: a range of fixup slots and the RVA of their signatures.
ImportSection = Struct(
    "rva" / Int32ul,
    "size" / Int32ul,
    "flags" / Int16ul,
    "type" / Byte,
    "entry_size" / Byte,
    "signatures_rva" / Int32ul,
    "auxiliary_data_rva" / Int32ul,
)

# The first two columns of an ECMA-335 MethodDef row (II.22.26), the same in every image (the
# rest of the row has heap-index-sized columns): enough to tell which methods have IL, for the
# whole table in one pass instead of a metadata row object per method.
MethodDefRowStart = Struct(
    "rva" / Int32ul,
    "impl_flags" / Int16ul,
)


# -------------------------------------------------------------------- numbers

READYTORUN_SIGNATURE = 0x00525452   # 'RTR'


class SectionType(enum.IntEnum):
    """ReadyToRunSectionType."""

    COMPILER_IDENTIFIER = 100
    IMPORT_SECTIONS = 101
    RUNTIME_FUNCTIONS = 102
    METHODDEF_ENTRY_POINTS = 103
    EXCEPTION_INFO = 104
    DEBUG_INFO = 105
    DELAY_LOAD_METHOD_CALL_THUNKS = 106
    AVAILABLE_TYPES_OLD = 107
    AVAILABLE_TYPES = 108
    INSTANCE_METHOD_ENTRY_POINTS = 109
    INLINING_INFO = 110
    PROFILE_DATA_INFO = 111
    MANIFEST_METADATA = 112
    ATTRIBUTE_PRESENCE = 113
    INLINING_INFO2 = 114
    COMPONENT_ASSEMBLIES = 115
    OWNER_COMPOSITE_EXECUTABLE = 116
    PGO_INSTRUMENTATION_DATA = 117
    MANIFEST_ASSEMBLY_MVIDS = 118
    CROSS_MODULE_INLINE_INFO = 119
    HOT_COLD_MAP = 120
    METHOD_IS_GENERIC_MAP = 121
    ENCLOSING_TYPE_MAP = 122
    TYPE_GENERIC_INFO_MAP = 123


class ReadyToRunFlags(enum.IntFlag):
    """READYTORUN_FLAG_* as readytorun.h defines them. readytorun-format.md's table calls 0x2
    COMPOSITE, but readytorun.h names it SKIP_TYPE_VALIDATION (crossgen sets it when every type
    loaded at compile time): 162 of the 163 R2R images of .NET Core 3.1 carry it. A composite
    image is recognised by its COMPONENT_ASSEMBLIES section instead."""

    PLATFORM_NEUTRAL_SOURCE = 0x1
    SKIP_TYPE_VALIDATION = 0x2
    PARTIAL = 0x4
    NONSHARED_PINVOKE_STUBS = 0x8
    EMBEDDED_MSIL = 0x10
    COMPONENT = 0x20
    MULTIMODULE_VERSION_BUBBLE = 0x40
    UNRELATED_R2R_CODE = 0x80


class MethodSigFlags(enum.IntFlag):
    """ReadyToRunMethodSigFlags: the first element of an R2R method signature."""

    UNBOXING_STUB = 0x01
    INSTANTIATING_STUB = 0x02
    METHOD_INSTANTIATION = 0x04
    SLOT_INSTEAD_OF_TOKEN = 0x08
    MEMBER_REF_TOKEN = 0x10
    CONSTRAINED = 0x20
    OWNER_TYPE = 0x40
    UPDATE_CONTEXT = 0x80


class ZapSigElement(enum.IntEnum):
    """The element types R2R type signatures add to ECMA-335's (CorElementTypeZapSig)."""

    VAR_ZAPSIG = 0x3B                    # + GenericParam RID
    NATIVE_ARRAY_TEMPLATE_ZAPSIG = 0x3C  # + SZARRAY/ARRAY type
    NATIVE_VALUETYPE_ZAPSIG = 0x3D       # + VALUETYPE type
    CANON_ZAPSIG = 0x3E                  # System.__Canon
    MODULE_ZAPSIG = 0x3F                 # + module index, then a type resolved in that module


class Machine(enum.IntEnum):
    """IMAGE_FILE_MACHINE_* of the architectures ReadyToRun targets."""

    I386 = 0x014C
    ARM = 0x01C0
    THUMB = 0x01C2
    ARMNT = 0x01C4
    AMD64 = 0x8664
    ARM64 = 0xAA64
    LOONGARCH64 = 0x6264
    RISCV64 = 0x5064


class TargetOS(enum.IntEnum):
    """The value a non-Windows R2R image XORs into its COFF machine (pedecoder.h
    IMAGE_FILE_MACHINE_NATIVE_OS_OVERRIDE), so Windows loaders refuse it."""

    WINDOWS = 0x0000
    LINUX = 0x7B79
    APPLE = 0x4644
    FREEBSD = 0xADC4
    NETBSD = 0x1993
    SUNOS = 0x1992


def split_machine(coff_machine: int) -> tuple[Machine, TargetOS] | None:
    """(architecture, OS) of a COFF machine value, or None when no known pair XORs to it."""
    for os_ in TargetOS:
        try:
            return Machine(coff_machine ^ os_), os_
        except ValueError:
            continue
    return None
