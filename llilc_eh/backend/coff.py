"""COFF object files as values: what LLVM's object writer gives us for one method.

`CoffObject.parse(data)` reads an object (layouts in `structs.py`) into frozen values:
sections with their bytes and relocations, symbols (primary records, each with its parsed
auxiliary records and its index in the raw table, which relocations use), and lookups by
name. Relocations name their symbol, so `section.relocation_at(offset)` answers "what does
the field at this offset refer to", the question every later step asks of `.pdata`,
`.xdata` and `.text`.

Only what an x64 object needs is given meaning here (AMD64 relocation types, storage
classes, section flags); everything else is kept as numbers. The printed form follows
`llvm-readobj --sections --symbols --relocations` closely enough to compare by eye, and the
tests compare the values with that tool's output field by field.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from functools import cached_property

from construct import ConstructError

from ..assembly.structs import bulk_format, compiled_parser
from ..errors import BackendError
from . import structs

IMAGE_FILE_MACHINE_AMD64 = 0x8664


class RelocationType(enum.IntEnum):
    """IMAGE_REL_AMD64_* (PE/COFF specification, "Type Indicators")."""

    ABSOLUTE = 0x0
    ADDR64 = 0x1
    ADDR32 = 0x2
    ADDR32NB = 0x3   # image-relative (RVA): .pdata / .xdata fields
    REL32 = 0x4      # relative to the end of the field (rel32 of call/jmp/rip-relative)
    REL32_1 = 0x5    # ... to the end of the field + 1 (an imm8 follows it), and so on
    REL32_2 = 0x6
    REL32_3 = 0x7
    REL32_4 = 0x8
    REL32_5 = 0x9
    SECTION = 0xA
    SECREL = 0xB
    SECREL7 = 0xC
    TOKEN = 0xD
    SREL32 = 0xE
    PAIR = 0xF
    SSPAN32 = 0x10

    @property
    def readobj_name(self) -> str:
        return f"IMAGE_REL_AMD64_{self.name}"

    @property
    def pc_relative_bias(self) -> int | None:
        """For REL32_n: bytes between the field's end and the end of the instruction (n)."""
        if RelocationType.REL32 <= self <= RelocationType.REL32_5:
            return self - RelocationType.REL32
        return None


_RELOCATION_TYPES = {int(t): t for t in RelocationType}


class StorageClass(enum.IntEnum):
    """IMAGE_SYM_CLASS_* (the ones an object can hold; others kept as numbers)."""

    END_OF_FUNCTION = 0xFF
    NULL = 0
    AUTOMATIC = 1
    EXTERNAL = 2
    STATIC = 3
    REGISTER = 4
    EXTERNAL_DEF = 5
    LABEL = 6
    UNDEFINED_LABEL = 7
    MEMBER_OF_STRUCT = 8
    ARGUMENT = 9
    STRUCT_TAG = 10
    MEMBER_OF_UNION = 11
    UNION_TAG = 12
    TYPE_DEFINITION = 13
    UNDEFINED_STATIC = 14
    ENUM_TAG = 15
    MEMBER_OF_ENUM = 16
    REGISTER_PARAM = 17
    BIT_FIELD = 18
    BLOCK = 100
    FUNCTION = 101
    END_OF_STRUCT = 102
    FILE = 103
    SECTION = 104
    WEAK_EXTERNAL = 105
    CLR_TOKEN = 107


_STORAGE_CLASSES = {int(c): c for c in StorageClass}


class SectionFlags(enum.IntFlag):
    """IMAGE_SCN_* bits an object uses (the alignment field is read by `Section.alignment`)."""

    TYPE_NO_PAD = 0x8
    CNT_CODE = 0x20
    CNT_INITIALIZED_DATA = 0x40
    CNT_UNINITIALIZED_DATA = 0x80
    LNK_INFO = 0x200
    LNK_REMOVE = 0x800
    LNK_COMDAT = 0x1000
    GPREL = 0x8000
    LNK_NRELOC_OVFL = 0x01000000
    MEM_DISCARDABLE = 0x02000000
    MEM_NOT_CACHED = 0x04000000
    MEM_NOT_PAGED = 0x08000000
    MEM_SHARED = 0x10000000
    MEM_EXECUTE = 0x20000000
    MEM_READ = 0x40000000
    MEM_WRITE = 0x80000000


_ALIGN_SHIFT, _ALIGN_MASK = 20, 0xF00000

# Special section numbers of a symbol.
SYM_UNDEFINED, SYM_ABSOLUTE, SYM_DEBUG = 0, -1, -2
_SPECIAL_SECTIONS = {SYM_UNDEFINED: "IMAGE_SYM_UNDEFINED", SYM_ABSOLUTE: "IMAGE_SYM_ABSOLUTE",
                     SYM_DEBUG: "IMAGE_SYM_DEBUG"}
_DTYPE_FUNCTION = 2  # complex type (bits 4-5 of Type): function


def _bad(reason: str, offset: int | None = None) -> BackendError:
    return BackendError(reason, kind="bad-coff", offset=offset)


def aux_format(storage: int, value: int, section_number: int, type_: int) -> str | None:
    """Which auxiliary record format a primary symbol record carries (PE/COFF "Auxiliary
    Symbol Records"), from its storage class, value, section number and type; None: kept as
    raw bytes."""
    if storage == StorageClass.FILE:
        return "file"
    if storage == StorageClass.WEAK_EXTERNAL:
        return "weak-external"
    if storage == StorageClass.STATIC and value == 0 and section_number > 0:
        return "section"
    if storage == StorageClass.EXTERNAL and type_ >> 4 == _DTYPE_FUNCTION and section_number > 0:
        return "function"
    return None


# An object is read once per method: its layout by construct's compiled form of `CoffFile`,
# its records, which come by the dozen, with `struct` formats derived from their declarations
# (one construct parse per record was most of the cost of reading an object).
_COFF_FILE = compiled_parser(structs.CoffFile)
_SYMBOL_RECORD = struct.Struct(bulk_format(structs.SymbolRecord))
_LONG_NAME = struct.Struct(bulk_format(structs.SymbolLongName))
_RELOCATION = struct.Struct(bulk_format(structs.Relocation))
_AUX_RECORDS = {name: (struct.Struct(bulk_format(layout)), tuple(sub.name for sub in layout.subcons))
                for name, layout in structs.AUX_FORMATS.items()}


def _aux_records(fmt: str | None, chunks: list[bytes]) -> tuple:
    """A symbol's aux records (18 bytes each) as dicts keyed by the field names of their
    declaration (`aux_format` `fmt`), or as their bytes when the format is not one we read."""
    if fmt not in _AUX_RECORDS:
        return tuple(chunks)
    unpacker, names = _AUX_RECORDS[fmt]
    return tuple(dict(zip(names, unpacker.unpack(chunk))) for chunk in chunks)


@dataclass(frozen=True)
class Relocation:
    offset: int                  # of the field, in its section
    type: RelocationType | int
    symbol_index: int            # raw symbol table index
    symbol: str                  # that symbol's name

    def __str__(self) -> str:
        kind = self.type.readobj_name if isinstance(self.type, RelocationType) else f"0x{self.type:X}"
        return f"0x{self.offset:X} {kind} {self.symbol} ({self.symbol_index})"


@dataclass(frozen=True)
class Section:
    number: int                  # 1-based, as symbols and readobj number them
    name: str
    characteristics: int
    data: bytes
    raw_size: int
    relocations: tuple[Relocation, ...]
    virtual_size: int = 0
    virtual_address: int = 0

    @property
    def flags(self) -> SectionFlags:
        return SectionFlags(self.characteristics & ~_ALIGN_MASK)

    @property
    def alignment(self) -> int:
        """Bytes (IMAGE_SCN_ALIGN_*); 0 when the section does not say."""
        code = (self.characteristics & _ALIGN_MASK) >> _ALIGN_SHIFT
        return 1 << (code - 1) if code else 0

    @property
    def is_code(self) -> bool:
        return bool(self.characteristics & SectionFlags.CNT_CODE)

    @cached_property
    def _relocation_by_offset(self) -> dict[int, Relocation]:
        return {r.offset: r for r in self.relocations}

    def relocation_at(self, offset: int) -> Relocation | None:
        """The relocation whose field starts at `offset`, if any."""
        return self._relocation_by_offset.get(offset)

    def dword(self, offset: int) -> int:
        """The unsigned little-endian dword stored at `offset` (an inline addend if relocated)."""
        if not 0 <= offset <= len(self.data) - 4:
            raise _bad(f"dword at {self.name}+0x{offset:x} outside {len(self.data)} bytes", offset)
        return struct.unpack_from("<I", self.data, offset)[0]

    def __str__(self) -> str:
        return (f"{self.number:2} {self.name:<10} size 0x{self.raw_size:X} relocs {len(self.relocations)}"
                f" flags 0x{self.characteristics:08X}")


@dataclass(frozen=True)
class Symbol:
    index: int                   # in the raw table (aux records count), as relocations use it
    name: str
    value: int
    section_number: int          # 1-based; 0 undefined, -1 absolute, -2 debug
    type: int
    storage_class: StorageClass | int
    aux: tuple = ()              # parsed auxiliary records (construct containers) or raw bytes
    section_name: str = ""       # the section's name, or IMAGE_SYM_UNDEFINED/ABSOLUTE/DEBUG

    @property
    def is_defined(self) -> bool:
        return self.section_number > 0

    @property
    def is_function(self) -> bool:
        return self.type >> 4 == _DTYPE_FUNCTION

    @property
    def is_external(self) -> bool:
        return self.storage_class == StorageClass.EXTERNAL

    @property
    def base_type(self) -> int:
        return self.type & 0xF

    @property
    def complex_type(self) -> int:
        return self.type >> 4

    def __str__(self) -> str:
        storage = (self.storage_class.name if isinstance(self.storage_class, StorageClass)
                   else f"0x{self.storage_class:X}")
        kind = " function" if self.is_function else ""
        return f"[{self.index:3}] {self.name} = 0x{self.value:X} in {self.section_name} {storage}{kind}"


@dataclass(frozen=True)
class RuntimeFunctionEntry:
    """One `.pdata` RUNTIME_FUNCTION of an object, its relocations applied: offsets into the
    code section (`begin`, `end`) and into the unwind section (`unwind`)."""

    index: int
    begin: int
    end: int
    unwind: int
    code_section: str = ".text"
    unwind_section: str = ".xdata"

    @property
    def size(self) -> int:
        return self.end - self.begin

    def __str__(self) -> str:
        return (f"[0x{self.begin:X}, 0x{self.end:X}) {self.code_section}  "
                f"unwind {self.unwind_section}+0x{self.unwind:X}")


@dataclass(frozen=True)
class CoffObject:
    machine: int
    time_date_stamp: int
    characteristics: int
    sections: tuple[Section, ...]
    symbols: tuple[Symbol, ...]          # primary records only, in table order
    symbol_count: int = 0                # raw records, aux included (the header's count)
    _by_index: dict = field(default_factory=dict, repr=False, compare=False)

    # -- parsing --------------------------------------------------------------------------

    @classmethod
    def parse(cls, data: bytes) -> CoffObject:
        """Read an object file; a malformed one is a `BackendError(kind="bad-coff")`."""
        data = bytes(data)
        try:
            raw = _COFF_FILE(data)
        except ConstructError as e:
            raise _bad(f"unreadable COFF object ({len(data)} bytes): {e}") from None
        header = raw.file_header
        if header.machine != IMAGE_FILE_MACHINE_AMD64:
            raise _bad(f"machine 0x{header.machine:04X}, not AMD64 (0x8664)")
        strings = raw.string_table.strings if raw.string_table is not None else b""

        def string_at(offset: int) -> str:
            end = strings.find(b"\0", offset - 4)
            if offset < 4 or end < 0:
                raise _bad(f"string table offset {offset} outside {len(strings) + 4} bytes")
            return strings[offset - 4:end].decode("utf-8", "surrogateescape")

        def short(name: bytes) -> str:
            return name.rstrip(b"\0").decode("utf-8", "surrogateescape")

        # Primary records, each with its aux records; one whose aux records would run past the
        # table ends it (and the count check fails).
        table, count, size = raw.symbols, header.number_of_symbols, structs.SYMBOL_RECORD_SIZE
        records = list(_SYMBOL_RECORD.iter_unpack(table))
        symbols, index = [], 0
        while index < count:
            name, value, section_number, type_, storage, aux_count = records[index]
            if index + 1 + aux_count > count:
                break
            zeroes, offset = _LONG_NAME.unpack(name)
            aux = ()
            if aux_count:
                first = (index + 1) * size
                aux = _aux_records(aux_format(storage, value, section_number, type_),
                                   [table[at:at + size] for at in range(first, first + aux_count * size, size)])
            symbols.append((index, string_at(offset) if zeroes == 0 else short(name), value, section_number,
                            type_, _STORAGE_CLASSES.get(storage, storage), aux))
            index += 1 + aux_count
        if index != count:
            raise _bad(f"symbol table holds {index} records, the header says {count}")

        section_names = []
        for number, sec in enumerate(raw.sections, start=1):
            name = short(sec.header.name)
            if name.startswith("//"):
                name = string_at(_base64_offset(name[2:]))
            elif name.startswith("/") and name[1:].isdigit():
                name = string_at(int(name[1:]))
            section_names.append(name)

        def section_name(number: int) -> str:
            if number in _SPECIAL_SECTIONS:
                return _SPECIAL_SECTIONS[number]
            if 1 <= number <= len(section_names):
                return section_names[number - 1]
            raise _bad(f"symbol in section {number} of {len(section_names)}")

        symbol_values = [Symbol(index, name, value, number, type_, storage, aux, section_name(number))
                         for index, name, value, number, type_, storage, aux in symbols]
        by_index = {symbol.index: symbol for symbol in symbol_values}

        sections = []
        for number, sec in enumerate(raw.sections, start=1):
            h = sec.header
            relocations = []
            if sec.relocations is not None:
                table = sec.relocations.records
                if sec.overflow:
                    table = table[structs.RELOCATION_SIZE:]  # the first record only carries the count
                for address, index, kind in _RELOCATION.iter_unpack(table):
                    target = by_index.get(index)
                    if target is None:
                        raise _bad(f"relocation at {section_names[number - 1]}+0x{address:x} "
                                   f"names symbol record {index}, not a primary symbol")
                    relocations.append(Relocation(address, _RELOCATION_TYPES.get(kind, kind), index,
                                                  target.name))
            sections.append(Section(number, section_names[number - 1], h.characteristics,
                                    sec.data if sec.data is not None else b"", h.size_of_raw_data,
                                    tuple(relocations), h.virtual_size, h.virtual_address))
        return cls(header.machine, header.time_date_stamp, header.characteristics, tuple(sections),
                   tuple(symbol_values), count, by_index)

    # -- lookups --------------------------------------------------------------------------

    def section(self, name: str) -> Section:
        """The first section of that name (`.text`, `.xdata`, `.pdata`)."""
        for s in self.sections:
            if s.name == name:
                return s
        raise _bad(f"no section {name!r} (have {', '.join(s.name for s in self.sections)})")

    def has_section(self, name: str) -> bool:
        return any(s.name == name for s in self.sections)

    def section_by_number(self, number: int) -> Section:
        if not 1 <= number <= len(self.sections):
            raise _bad(f"no section number {number}")
        return self.sections[number - 1]

    @cached_property
    def _by_name(self) -> dict[str, Symbol]:
        names: dict[str, Symbol] = {}
        for s in self.symbols:
            names.setdefault(s.name, s)
        return names

    def symbol(self, name: str) -> Symbol:
        try:
            return self._by_name[name]
        except KeyError:
            raise _bad(f"no symbol {name!r}") from None

    def find_symbol(self, name: str) -> Symbol | None:
        return self._by_name.get(name)

    def symbol_at_index(self, index: int) -> Symbol:
        """The symbol a relocation names by its raw table index."""
        try:
            return self._by_index[index]
        except KeyError:
            raise _bad(f"no primary symbol at index {index}") from None

    def symbols_in(self, section: str) -> list[Symbol]:
        """Symbols defined in `section`, by value (address), the section's own symbol first."""
        number = self.section(section).number
        return sorted((s for s in self.symbols if s.section_number == number),
                      key=lambda s: (s.value, s.storage_class != StorageClass.STATIC or s.name != section))

    def functions_in(self, section: str = ".text") -> list[Symbol]:
        """Symbols of function type defined in `section`, by address."""
        return [s for s in self.symbols_in(section) if s.is_function]

    def resolve(self, section: str, offset: int) -> tuple[Symbol | None, int, Relocation | None]:
        """The dword field at `section`+`offset`: (the symbol its relocation names or None,
        the inline value, the relocation or None)."""
        sec = self.section(section)
        reloc = sec.relocation_at(offset)
        value = sec.dword(offset)
        return (self.symbol_at_index(reloc.symbol_index) if reloc else None), value, reloc

    def section_offset(self, section: str, offset: int, *, want: str | None = None) -> tuple[str, int]:
        """An image-relative (ADDR32NB/ADDR32/ADDR64-style) dword field resolved to
        (target section name, offset in it): S + A where S is the named symbol's value."""
        symbol, addend, _ = self.resolve(section, offset)
        if symbol is None or not symbol.is_defined:
            raise _bad(f"{section}+0x{offset:x} is not relocated against a defined symbol", offset)
        if want is not None and symbol.section_name != want:
            raise _bad(f"{section}+0x{offset:x} refers to {symbol.section_name}, not {want}", offset)
        return symbol.section_name, symbol.value + addend

    def runtime_functions(self, section: str = ".pdata") -> tuple[RuntimeFunctionEntry, ...]:
        """`.pdata`, each RUNTIME_FUNCTION's three ADDR32NB fields resolved to section offsets
        (read once per object: recovery, the image and the differential all ask)."""
        read = self.__dict__.setdefault("_runtime_functions", {})
        if section not in read:
            read[section] = self._read_runtime_functions(section)
        return read[section]

    def _read_runtime_functions(self, section: str) -> tuple[RuntimeFunctionEntry, ...]:
        if not self.has_section(section):
            return ()
        pdata = self.section(section)
        size = structs.RUNTIME_FUNCTION_SIZE
        if len(pdata.data) % size:
            raise _bad(f"{section} holds {len(pdata.data)} bytes, not a multiple of {size}")
        entries = []
        for i in range(len(pdata.data) // size):
            base = i * size
            for field_offset in (0, 4, 8):
                reloc = pdata.relocation_at(base + field_offset)
                if reloc is None or reloc.type != RelocationType.ADDR32NB:
                    raise _bad(f"{section} entry {i} field +{field_offset}: no ADDR32NB relocation",
                               base + field_offset)
            code, begin = self.section_offset(section, base)
            _, end = self.section_offset(section, base + 4, want=code)
            unwind_section, unwind = self.section_offset(section, base + 8)
            entries.append(RuntimeFunctionEntry(i, begin, end, unwind, code, unwind_section))
        return tuple(entries)

    def __str__(self) -> str:
        lines = [(f"COFF machine 0x{self.machine:04X}, {len(self.sections)} sections, "
                  f"{len(self.symbols)} symbols ({self.symbol_count} records)"), "Sections:"]
        lines += [f"  {s}" for s in self.sections]
        for s in self.sections:
            if s.relocations:
                lines.append(f"Relocations of {s.name}:")
                lines += [f"  {r}" for r in s.relocations]
        lines.append("Symbols:")
        lines += [f"  {s}" for s in self.symbols]
        return "\n".join(lines)


_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _base64_offset(text: str) -> int:
    """`//AAAAAA`-style long section name: a base-64 number, most significant digit first
    (not RFC 4648 byte encoding)."""
    value = 0
    for ch in text:
        digit = _B64.find(ch)
        if digit < 0:
            raise _bad(f"bad base-64 section name offset {text!r}")
        value = value * 64 + digit
    return value


__all__ = [
    "IMAGE_FILE_MACHINE_AMD64",
    "CoffObject",
    "Relocation",
    "RelocationType",
    "RuntimeFunctionEntry",
    "Section",
    "SectionFlags",
    "StorageClass",
    "Symbol",
    "aux_format",
]
