"""IL method bodies: header, code, and the EH clauses of every extra data section.

A `MethodBody` is the assembly stage's output for one method: the raw IL bytes and the
clauses exactly as the file encodes them (offsets and lengths, small or fat). Whether the
clauses make sense is the il stage's business; here we only refuse what cannot be read,
naming the method and the offset inside the body.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from functools import lru_cache

from construct import ConstructError

from ..errors import AssemblyError
from .structs import (FAT_CLAUSE_SIZE, FAT_HEADER_SIZE, SECTION_HEADER_SIZE, SMALL_CLAUSE_SIZE,
                      FatEHClause, FatHeaderFlags, FatMethodHeader, SectionHeader, SmallEHClause,
                      bulk_format)

TINY_FORMAT = 0x2
FAT_FORMAT = 0x3

# A corpus run reads every body (100,000 over .NET's assemblies), so the fixed-size parts are
# unpacked in bulk (`bulk_format`) and the bit-field parts, which take few distinct values, are
# parsed once per value: a construct parse per header and clause was most of the cost.
_FAT_HEADER = struct.Struct(bulk_format(FatMethodHeader))
_CLAUSES = {True: struct.Struct(bulk_format(FatEHClause)), False: struct.Struct(bulk_format(SmallEHClause))}


@lru_cache(maxsize=1 << 10)
def _fat_flags(data: bytes):
    """The first 16 bits of a fat header, parsed (read-only: the container is shared)."""
    return FatHeaderFlags.parse(data)


@lru_cache(maxsize=1 << 12)
def _section_header(data: bytes):
    """An extra data section's header, parsed (read-only: the container is shared)."""
    return SectionHeader.parse(data)


class ClauseKind(enum.Enum):
    """COR_ILEXCEPTION_CLAUSE_* (II.25.4.6): the flags value is the kind."""

    CATCH = 0
    FILTER = 1
    FINALLY = 2
    FAULT = 4

    @property
    def word(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class ILClause:
    """One IL exception clause. Ends are exclusive offsets, computed from the encoded lengths."""

    index: int
    kind: ClauseKind
    try_start: int
    try_end: int
    handler_start: int
    handler_end: int
    class_token: int | None = None   # catch clauses only
    filter_start: int | None = None  # filter clauses only
    fat: bool = True                 # encoded in a fat section

    @property
    def try_range(self) -> tuple[int, int]:
        return (self.try_start, self.try_end)

    @property
    def handler_range(self) -> tuple[int, int]:
        """The handler proper; for a filter clause the filter part precedes it."""
        return (self.handler_start, self.handler_end)

    @property
    def handler_region_start(self) -> int:
        """Where the code owned by this clause's handler starts (the filter part if any)."""
        return self.filter_start if self.kind is ClauseKind.FILTER else self.handler_start

    def __str__(self) -> str:
        extra = ""
        if self.kind is ClauseKind.CATCH:
            extra = f" class 0x{self.class_token:08X}"
        elif self.kind is ClauseKind.FILTER:
            extra = f" filter IL_{self.filter_start:04x}"
        return (f"#{self.index} {self.kind.word:7} try IL_{self.try_start:04x}..IL_{self.try_end:04x} "
                f"handler IL_{self.handler_start:04x}..IL_{self.handler_end:04x}{extra}"
                f"{'' if self.fat else ' (small)'}")


@dataclass(frozen=True)
class DataSection:
    """An extra data section after the code, as encoded (kind flags, fat or small, size)."""

    offset: int        # from the start of the method header
    eh_table: bool
    fat: bool
    data_size: int
    clause_count: int


@dataclass(frozen=True)
class MethodBody:
    token: int
    name: str
    rva: int
    tiny: bool
    header_size: int
    max_stack: int
    init_locals: bool
    local_sig_token: int
    code: bytes = field(repr=False)
    clauses: tuple[ILClause, ...] = ()
    sections: tuple[DataSection, ...] = ()

    @property
    def code_size(self) -> int:
        return len(self.code)

    @property
    def has_eh(self) -> bool:
        return bool(self.clauses)

    def header_text(self) -> str:
        fmt = "tiny" if self.tiny else "fat"
        locals_ = f" locals 0x{self.local_sig_token:08X}" if self.local_sig_token else ""
        init = " init" if self.init_locals else ""
        return (f"// method 0x{self.token:08X} {self.name}: {fmt} header, RVA 0x{self.rva:X}, "
                f"code size {self.code_size}, max stack {self.max_stack}{locals_}{init}, "
                f"{len(self.clauses)} EH clause(s) in {len(self.sections)} section(s)")


def _clause(index: int, raw: tuple[int, ...], fat: bool, where: str, section_offset: int) -> ILClause:
    """`raw`: the fields of a Small/FatEHClause, in their declared order."""
    flags, try_offset, try_length, handler_offset, handler_length, token_or_filter = raw
    try:
        kind = ClauseKind(flags)
    except ValueError:
        raise AssemblyError(f"EH clause #{index} has unknown flags 0x{flags:X} "
                            f"(section at body offset {section_offset})", method=where,
                            kind="bad-clause-flags") from None
    return ILClause(
        index=index, kind=kind,
        try_start=try_offset, try_end=try_offset + try_length,
        handler_start=handler_offset, handler_end=handler_offset + handler_length,
        class_token=token_or_filter if kind is ClauseKind.CATCH else None,
        filter_start=token_or_filter if kind is ClauseKind.FILTER else None,
        fat=fat,
    )


def parse_body(data: bytes | memoryview, start: int, *, token: int, name: str, rva: int) -> MethodBody:
    """Parse the method body at `data[start:]` (the bytes from the body's RVA to the end of its section).

    `data` is typically the whole file image; reading past its end is a truncated body.
    """
    where = f"0x{token:08X} {name}"
    end_of_data = len(data)
    if start >= end_of_data:
        raise AssemblyError(f"body RVA 0x{rva:X} lies outside the file", method=where, kind="bad-method-rva")
    first = data[start]
    fmt = first & 0x3
    if fmt == TINY_FORMAT:
        code_start = start + 1
        code_end = code_start + (first >> 2)
        if code_end > end_of_data:
            raise AssemblyError("tiny body runs past the end of the file", method=where, kind="truncated-body")
        return MethodBody(token=token, name=name, rva=rva, tiny=True, header_size=1, max_stack=8,
                          init_locals=False, local_sig_token=0, code=bytes(data[code_start:code_end]))
    if fmt != FAT_FORMAT:
        raise AssemblyError(f"method header byte 0x{first:02X} is neither tiny nor fat",
                            method=where, kind="bad-method-header")
    if start + FAT_HEADER_SIZE > end_of_data:
        raise AssemblyError("fat method header runs past the end of the file", method=where,
                            kind="truncated-body")
    flags_and_size, max_stack, code_size, local_var_sig_tok = _FAT_HEADER.unpack_from(data, start)
    fat_flags = _fat_flags(flags_and_size)
    dwords, flags = fat_flags.header_dwords, fat_flags.flags
    if dwords != FAT_HEADER_SIZE // 4:
        raise AssemblyError(f"fat method header says it is {dwords} dwords, not 3", method=where,
                            kind="bad-method-header")
    code_start = start + FAT_HEADER_SIZE
    code_end = code_start + code_size
    if code_end > end_of_data:
        raise AssemblyError(f"code size {code_size} runs past the end of the file",
                            method=where, kind="truncated-body")
    clauses: list[ILClause] = []
    sections: list[DataSection] = []
    more = bool(flags.more_sects)
    pos = code_end
    while more:
        pos = (pos + 3) & ~3
        rel = pos - start
        if pos + SECTION_HEADER_SIZE > end_of_data:
            raise AssemblyError(f"extra data section at body offset {rel} lies past the end of the file",
                                method=where, kind="truncated-body")
        try:
            sh = _section_header(bytes(data[pos:pos + SECTION_HEADER_SIZE]))
        except ConstructError as e:  # pragma: no cover - a 4-byte header always parses
            raise AssemblyError(f"bad section header at body offset {rel}: {e}", method=where,
                                kind="bad-eh-section") from None
        fat = bool(sh.kind.fat_format)
        more = bool(sh.kind.more_sects)
        size = sh.data_size
        if size < SECTION_HEADER_SIZE or pos + size > end_of_data:
            raise AssemblyError(f"extra data section at body offset {rel} has bad size {size}",
                                method=where, kind="bad-eh-section")
        count = 0
        if sh.kind.eh_table:
            clause_size = FAT_CLAUSE_SIZE if fat else SMALL_CLAUSE_SIZE
            count = (size - SECTION_HEADER_SIZE) // clause_size
            base = pos + SECTION_HEADER_SIZE
            for raw in _CLAUSES[fat].iter_unpack(data[base:base + count * clause_size]):
                clauses.append(_clause(len(clauses), raw, fat, where, rel))
        elif not sh.kind.opt_il_table:
            raise AssemblyError(f"extra data section at body offset {rel} has unknown kind "
                                f"0x{data[pos]:02X}", method=where, kind="bad-eh-section")
        sections.append(DataSection(offset=rel, eh_table=bool(sh.kind.eh_table), fat=fat,
                                    data_size=size, clause_count=count))
        pos += size
    return MethodBody(token=token, name=name, rva=rva, tiny=False, header_size=FAT_HEADER_SIZE,
                      max_stack=max_stack, init_locals=bool(flags.init_locals),
                      local_sig_token=local_var_sig_tok,
                      code=bytes(data[code_start:code_end]), clauses=tuple(clauses),
                      sections=tuple(sections))
