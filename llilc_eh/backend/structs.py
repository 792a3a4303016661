"""Binary layouts of a COFF object file (PE/COFF specification, "COFF File Header",
"Section Table", "COFF Relocations", "COFF Symbol Table", "Auxiliary Symbol Records",
"COFF String Table"), each declared once with construct.

    file header      20 bytes; an object file has no optional header (size 0), we skip any
    section table    40 bytes per section; a name longer than 8 bytes is "/<decimal offset>"
                     (or "//<base64 offset>") into the string table
    raw data         per section, at PointerToRawData
    relocations      10 bytes each, per section, at PointerToRelocations; with
                     IMAGE_SCN_LNK_NRELOC_OVFL and a count of 0xFFFF the real count is in the
                     VirtualAddress of the first (dummy) relocation
    symbol table     18-byte records; a symbol is followed by NumberOfAuxSymbols auxiliary
                     records of 18 bytes, and the table's count includes them
    string table     right after the symbol table: a dword size (counting itself), then
                     NUL-terminated names

`CoffFile` reads a whole object in one go: headers, section data, the string table, and the
two tables of fixed-size records (relocations, symbols with their aux records) as bytes, which
`coff.py` unpacks in bulk with `struct` formats derived from `Relocation` and `SymbolRecord`
(`bulk_format`): an object holds dozens of them, and one construct parse per record was most of
the cost of reading it. Meaning (relocation types, storage classes, section flags, which aux
record a symbol has) lives in `coff.py`; this file is layout only.
"""

from __future__ import annotations

from construct import (
                       Array,
                       Bytes,
                       Check,
                       Computed,
                       Const,
                       FixedSized,
                       If,
                       IfThenElse,
                       Int8ul,
                       Int16sl,
                       Int16ul,
                       Int32ul,
                       Peek,
                       Pointer,
                       Struct,
                       Tell,
                       this,
)

from ..assembly.r2r.structs import RuntimeFunctionAmd64
from ..assembly.structs import CorInfoEHClause

FILE_HEADER_SIZE = 20
SECTION_HEADER_SIZE = 40
RELOCATION_SIZE = 10
SYMBOL_RECORD_SIZE = 18

IMAGE_SCN_LNK_NRELOC_OVFL = 0x01000000
IMAGE_SCN_CNT_UNINITIALIZED_DATA = 0x00000080

FileHeader = Struct(
    "machine" / Int16ul,
    "number_of_sections" / Int16ul,
    "time_date_stamp" / Int32ul,
    "pointer_to_symbol_table" / Int32ul,
    "number_of_symbols" / Int32ul,          # records, auxiliary ones included
    "size_of_optional_header" / Int16ul,
    "characteristics" / Int16ul,
)

SectionHeader = Struct(
    "name" / Bytes(8),                      # NUL-padded, or "/123" into the string table
    "virtual_size" / Int32ul,
    "virtual_address" / Int32ul,
    "size_of_raw_data" / Int32ul,
    "pointer_to_raw_data" / Int32ul,
    "pointer_to_relocations" / Int32ul,
    "pointer_to_linenumbers" / Int32ul,
    "number_of_relocations" / Int16ul,
    "number_of_linenumbers" / Int16ul,
    "characteristics" / Int32ul,
)

Relocation = Struct(
    "virtual_address" / Int32ul,            # offset of the field in its section
    "symbol_table_index" / Int32ul,         # record index (aux records count)
    "type" / Int16ul,
)

SymbolRecord = Struct(
    "name" / Bytes(8),                      # the name itself, NUL-padded, or a SymbolLongName
    "value" / Int32ul,
    "section_number" / Int16sl,             # 1-based; 0 undefined, -1 absolute, -2 debug
    "type" / Int16ul,                       # LSB base type, MSB complex type (0x20: function)
    "storage_class" / Int8ul,
    "number_of_aux_symbols" / Int8ul,
)

# The 8 name bytes of a symbol whose name is longer: four zero bytes, then the name's offset in
# the string table.
SymbolLongName = Struct(
    "zeroes" / Int32ul,
    "offset" / Int32ul,
)

# Auxiliary records, by the format the primary symbol selects (coff.aux_format).
AuxFunctionDefinition = Struct(             # format 1: EXTERNAL, function type, defined
    "tag_index" / Int32ul,
    "total_size" / Int32ul,
    "pointer_to_linenumber" / Int32ul,
    "pointer_to_next_function" / Int32ul,
    "unused" / Bytes(2),
)

AuxWeakExternal = Struct(                   # format 3: WEAK_EXTERNAL
    "tag_index" / Int32ul,
    "characteristics" / Int32ul,
    "unused" / Bytes(10),
)

AuxFile = Struct(                           # format 4: FILE; the name spans the aux records
    "file_name" / Bytes(18),
)

AuxSectionDefinition = Struct(              # format 5: STATIC symbol naming a section
    "length" / Int32ul,
    "number_of_relocations" / Int16ul,
    "number_of_linenumbers" / Int16ul,
    "check_sum" / Int32ul,
    "number" / Int16ul,                     # the associated section (COMDAT associative)
    "selection" / Int8ul,
    "unused" / Bytes(3),
)

# Other aux records (.bf/.ef, CLR tokens) are kept as their 18 bytes.
AUX_FORMATS = {
    "function": AuxFunctionDefinition,
    "weak-external": AuxWeakExternal,
    "file": AuxFile,
    "section": AuxSectionDefinition,
}

StringTable = Struct(
    "size" / Int32ul,                       # counts its own four bytes
    "strings" / IfThenElse(this.size > 4, Bytes(this.size - 4), Computed(b"")),   # 4 or less: none
)

# Relocations of one section, starting at PointerToRelocations: `Relocation` records back to
# back (`records`). Their count is the section's NumberOfRelocations or, when the section's
# `overflow` is set (NRELOC_OVFL with a count of 0xFFFF), the first record's VirtualAddress:
# the real count, that first record included. (`Peek` gives None where that record is past
# the end of the object; the `Check` makes that a ConstructError like any other short read.)
RelocationTable = Struct(
    "count" / IfThenElse(this._.overflow, Peek(Int32ul), Computed(this._.header.number_of_relocations)),
    Check(this.count != None),              # a construct expression: `is not` cannot be one
    "records" / Bytes(this.count * RELOCATION_SIZE),
)

# One section: its header (read in table order, all 40 bytes at once) with its raw data and
# relocations (read where the header points).
Section = Struct(
    "header" / FixedSized(SECTION_HEADER_SIZE, SectionHeader),
    # Uninitialized data (.bss) has a size but no bytes in the file.
    "data" / If(((this.header.characteristics & IMAGE_SCN_CNT_UNINITIALIZED_DATA) == 0)
                & (this.header.pointer_to_raw_data != 0),
                Pointer(this.header.pointer_to_raw_data, Bytes(this.header.size_of_raw_data))),
    "overflow" / Computed(((this.header.characteristics & IMAGE_SCN_LNK_NRELOC_OVFL) != 0)
                          & (this.header.number_of_relocations == 0xFFFF)),
    "relocations" / If(this.header.number_of_relocations,
                       Pointer(this.header.pointer_to_relocations, RelocationTable)),
)

# A whole object file. The symbol table (`symbols`) is its records back to back: each
# `SymbolRecord` followed by its NumberOfAuxSymbols auxiliary records (`AUX_FORMATS`, or raw).
# Every condition and size in it is a construct expression, not a lambda, so that construct can
# compile it (`compiled_parser`): an object is read once per method.
CoffFile = Struct(
    "file_header" / FileHeader,
    "optional_header" / Bytes(this.file_header.size_of_optional_header),
    "sections" / Array(this.file_header.number_of_sections, Section),
    "symbols" / Pointer(this.file_header.pointer_to_symbol_table,
                        Bytes(this.file_header.number_of_symbols * SYMBOL_RECORD_SIZE)),
    "string_table" / If(this.file_header.pointer_to_symbol_table, Pointer(
        this.file_header.pointer_to_symbol_table
        + this.file_header.number_of_symbols * SYMBOL_RECORD_SIZE, StringTable)),
)

# .pdata of an x64 object: RUNTIME_FUNCTION entries (declared once, with the ReadyToRun
# records). In an object file the three fields are ADDR32NB relocations plus inline addends.
RuntimeFunction = RuntimeFunctionAmd64
RUNTIME_FUNCTION_SIZE = RuntimeFunction.sizeof()

# LLVM's CoreCLR EH table (WinException::emitCLRExceptionTable), written into .xdata right
# after the UNWIND_INFO of the parent's last funclet (its handler data):
#     0xFFFFFFFF                       sentinel: the end of the Windows unwind data
#     NumStates                        handlers (= funclets) of the function
#     NumStates + 1 end offsets        of the root function, then of each funclet, in layout order
#     clause count
#     clauses                          CORINFO_EH_CLAUSE each (end offsets, not lengths)
# Offsets are from the parent's start; fields naming a funclet symbol are relocated (REL32,
# see llvm_table), the others resolved by the assembler.
LLVM_CLR_TABLE_SENTINEL = 0xFFFFFFFF
LlvmClrTable = Struct(
    "sentinel" / Const(LLVM_CLR_TABLE_SENTINEL, Int32ul),
    "funclet_count" / Int32ul,
    "ends" / Array(this.funclet_count + 1, Int32ul),
    "clause_count" / Int32ul,
    "clauses" / Array(this.clause_count, CorInfoEHClause),
    "end" / Tell,
)
