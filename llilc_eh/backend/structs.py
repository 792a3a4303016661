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

`CoffFile` parses a whole object in one go. Meaning (relocation types, storage classes,
section flags, which aux record a symbol has) lives in `coff.py`; this file is layout only.
"""

from __future__ import annotations

from construct import (
                       Array,
                       Bytes,
                       Computed,
                       Const,
                       FixedSized,
                       GreedyBytes,
                       GreedyRange,
                       If,
                       Int8ul,
                       Int16sl,
                       Int16ul,
                       Int32ul,
                       Peek,
                       Pointer,
                       Struct,
                       Switch,
                       Tell,
                       Union,
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

# The 8 name bytes of a symbol: the name itself, or four zero bytes and a string table offset.
SymbolName = Union(0,
    "short" / Bytes(8),
    "long" / Struct("zeroes" / Int32ul, "offset" / Int32ul),
)

SymbolRecord = Struct(
    "name" / SymbolName,
    "value" / Int32ul,
    "section_number" / Int16sl,             # 1-based; 0 undefined, -1 absolute, -2 debug
    "type" / Int16ul,                       # LSB base type, MSB complex type (0x20: function)
    "storage_class" / Int8ul,
    "number_of_aux_symbols" / Int8ul,
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

AuxRaw = Bytes(SYMBOL_RECORD_SIZE)          # formats we keep as bytes (.bf/.ef, CLR tokens)

AUX_FORMATS = {
    "function": AuxFunctionDefinition,
    "weak-external": AuxWeakExternal,
    "file": AuxFile,
    "section": AuxSectionDefinition,
}

# The records parsed by the thousand are compiled (construct generates a parser from the same
# declaration; ~3x faster). The composite structures below use these compiled forms.
_SectionHeaderC = SectionHeader.compile()
_RelocationC = Relocation.compile()
_SymbolRecordC = SymbolRecord.compile()
_AUX_FORMATS_C = {name: layout.compile() for name, layout in AUX_FORMATS.items()}

# One symbol with its auxiliary records; `aux_format` is a function of the primary record,
# given as the parse parameter of the same name (coff.aux_format).
SymbolEntry = Struct(
    "symbol" / _SymbolRecordC,
    "aux" / Array(this.symbol.number_of_aux_symbols,
                  Switch(lambda ctx: ctx._params.aux_format(ctx.symbol), _AUX_FORMATS_C,
                         default=AuxRaw)),
)

StringTable = Struct(
    "size" / Int32ul,                       # counts its own four bytes
    "strings" / FixedSized(lambda ctx: max(ctx.size - 4, 0), GreedyBytes),
)

# Relocations of one section, starting at PointerToRelocations. `overflow` (a parse-time
# context value) is true for NRELOC_OVFL with a count of 0xFFFF: the first record's
# VirtualAddress is then the real count, that first record included.
RelocationTable = Struct(
    "overflow_count" / If(this._.overflow, Peek(Int32ul)),
    "entries" / Array(lambda ctx: ctx.overflow_count if ctx._.overflow else ctx._.count, _RelocationC),
)

# One section: its header (read in table order) with its raw data and relocations (read
# where the header points).
Section = Struct(
    "header" / _SectionHeaderC,
    # Uninitialized data (.bss) has a size but no bytes in the file.
    "data" / If(lambda ctx: not ctx.header.characteristics & IMAGE_SCN_CNT_UNINITIALIZED_DATA
                and ctx.header.pointer_to_raw_data,
                Pointer(this.header.pointer_to_raw_data, Bytes(this.header.size_of_raw_data))),
    "overflow" / Computed(lambda ctx: bool(ctx.header.characteristics & IMAGE_SCN_LNK_NRELOC_OVFL)
                          and ctx.header.number_of_relocations == 0xFFFF),
    "count" / Computed(this.header.number_of_relocations),
    "relocations" / If(this.count, Pointer(this.header.pointer_to_relocations, RelocationTable)),
)

# A whole object file. Parse with `aux_format=` (coff.aux_format).
CoffFile = Struct(
    "file_header" / FileHeader,
    "optional_header" / Bytes(this.file_header.size_of_optional_header),
    "sections" / Array(this.file_header.number_of_sections, Section),
    "symbols" / If(this.file_header.number_of_symbols, Pointer(
        this.file_header.pointer_to_symbol_table,
        FixedSized(this.file_header.number_of_symbols * SYMBOL_RECORD_SIZE, GreedyRange(SymbolEntry)))),
    "string_table" / If(this.file_header.pointer_to_symbol_table, Pointer(
        this.file_header.pointer_to_symbol_table
        + this.file_header.number_of_symbols * SYMBOL_RECORD_SIZE, StringTable)),
)

# .pdata of an x64 object: RUNTIME_FUNCTION entries (declared once, with the ReadyToRun
# records). In an object file the three fields are ADDR32NB relocations plus inline addends.
RuntimeFunction = RuntimeFunctionAmd64
RUNTIME_FUNCTION_SIZE = RuntimeFunction.sizeof()
PdataSection = GreedyRange(RuntimeFunction)

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
