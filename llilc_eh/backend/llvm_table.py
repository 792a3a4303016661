"""LLVM's own CoreCLR EH table, read back from the object: a differential oracle.

For a function with the CoreCLR personality, LLVM (`WinException::emitCLRExceptionTable`)
writes into `.xdata`, right after the UNWIND_INFO of the parent's last funclet in layout
order (as that UNWIND_INFO's handler data):

    0xFFFFFFFF          sentinel
    N                   number of handlers (CLR EH states; one funclet each)
    N + 1 dwords        end offset of the root function, then of each funclet, layout order
    M                   number of clauses
    M x 24 bytes        CORINFO_EH_CLAUSE {Flags, TryStart, TryEnd, HandlerStart,
                        HandlerEnd, ClassToken}, end offsets (not lengths)

All offsets are from the parent's start. The clauses come out of a walk over the code in
layout order (root, then each funclet), one clause per maximal run of invokes in one EH
state, closed inner before outer: a try whose invokes are interleaved with calls that
unwind elsewhere gets several clauses, and a try that encloses a funclet's invokes is
repeated for that funclet with the DUPLICATED flag (8) -- "one clause per handler x
enclosing try nesting" as LLVM sees it. Flags: 0 catch, 2 finally, 4 fault; LLVM has no
filter clauses ("NYI: filters"), so our filter handlers appear as catch clauses whose
class token is what the catchpad's first argument says (0 for ours).

Quirks kept as they are (normalising them is the differential oracle's business):
* try ranges are the EH labels' offsets + 1, at both ends (so that the return address of
  the last call is inside, LLVM's comment says);
* a primary clause may come after a duplicate one;
* fields that name a funclet symbol (handler starts and ends, root and funclet ends) are
  REL32 relocations in the object, whose inline addend LLVM computed as if `.xdata` and
  `.text` shared one address space: the value is S + A - P - 4 (S the symbol's offset,
  A the addend, P the field's offset), already relative to the parent's start. Fields
  between two labels of `.text` (try ranges, `.Lfunc_end0 - .Lfunc_begin0`) are resolved by
  the assembler and stored as plain numbers.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from construct import ConstructError

from ..assembly.native import ClauseFlags, NativeClause
from ..assembly.structs import compiled_parser
from ..errors import BackendError
from ..unwind import decode_unwind_info
from . import structs
from .coff import CoffObject, RelocationType
from .recover import FUNCLET_NAME

# Read twice per method (the image and the differential), by construct's compiled form of the
# declaration.
_LLVM_CLR_TABLE = compiled_parser(structs.LlvmClrTable)
_CLAUSE_SIZE = structs.CorInfoEHClause.sizeof()


def _bad(reason: str, offset: int | None = None) -> BackendError:
    return BackendError(reason, kind="bad-llvm-table", offset=offset)


@dataclass(frozen=True)
class LlvmClrTable:
    parent: str
    offset: int                              # of the sentinel, in .xdata
    funclet_count: int                       # N: handlers / CLR EH states
    ends: tuple[int, ...]                    # root end, then each funclet's end, layout order
    clauses: tuple[NativeClause, ...]
    handler_symbols: tuple[str | None, ...]  # per clause: the funclet its handler start names

    @property
    def primaries(self) -> tuple[NativeClause, ...]:
        return tuple(c for c in self.clauses if not c.is_duplicate)

    @property
    def duplicates(self) -> tuple[NativeClause, ...]:
        return tuple(c for c in self.clauses if c.is_duplicate)

    @property
    def root_end(self) -> int:
        return self.ends[0]

    def __str__(self) -> str:
        lines = [(f"LLVM CLR EH table of {self.parent} at .xdata+0x{self.offset:x}: "
                  f"{self.funclet_count} funclets, {len(self.clauses)} clauses"),
                 "  ends: " + ", ".join(f"{e:#06x}" for e in self.ends)]
        lines += [f"  {c}" for c in self.clauses]
        return "\n".join(lines)


def resolved_xdata(coff: CoffObject) -> bytes:
    """`.xdata` with LLVM's REL32 fields replaced by the value they stand for (S + A - P - 4);
    every other field as stored."""
    xdata = coff.section(".xdata")
    data = bytearray(xdata.data)
    for reloc in xdata.relocations:
        if reloc.type != RelocationType.REL32:
            continue
        symbol = coff.symbol_at_index(reloc.symbol_index)
        if symbol.section_name != ".text":
            raise _bad(f"REL32 in .xdata against {symbol.name} in {symbol.section_name}", reloc.offset)
        if not 0 <= reloc.offset <= len(data) - 4:
            raise _bad(f"REL32 field at .xdata+0x{reloc.offset:x} is outside the section "
                       f"({len(data)} bytes)", reloc.offset)
        addend = struct.unpack_from("<i", data, reloc.offset)[0]
        value = symbol.value + addend - reloc.offset - 4
        struct.pack_into("<I", data, reloc.offset, value & 0xFFFFFFFF)
    return bytes(data)


def table_offset(coff: CoffObject, parent: str) -> int | None:
    """Where the parent's table starts in .xdata, or None when LLVM wrote none (no EH)."""
    start = coff.symbol(parent).value
    funclet_starts = {start} | {s.value for s in coff.functions_in(".text")
                                if (m := FUNCLET_NAME.fullmatch(s.name)) and m["parent"] == parent}
    entries = [e for e in coff.runtime_functions() if e.begin in funclet_starts]
    if not entries:
        return None
    last = max(entries, key=lambda e: e.begin)
    xdata = coff.section(".xdata").data
    info = decode_unwind_info(xdata, last.unwind)
    # The table is the handler data of that UNWIND_INFO, whether or not it names a handler
    # (a cleanup funclet's does not: LLVM gives cleanups no .seh_handler). A code-less
    # UNWIND_INFO is padded to 8 bytes first.
    candidates = [last.unwind + info.size]
    if info.count_of_codes == 0 and info.handler_rva is None:
        candidates.append(last.unwind + info.size + 4)
    for at in candidates:
        if at + 4 <= len(xdata) and struct.unpack_from("<I", xdata, at)[0] == structs.LLVM_CLR_TABLE_SENTINEL:
            return at
    return None


def decode_llvm_clr_table(obj: bytes | CoffObject, parent: str) -> LlvmClrTable | None:
    """LLVM's CLR EH table for the function `parent` (its symbol name), or None if LLVM
    wrote none (a function without funclets)."""
    coff = obj if isinstance(obj, CoffObject) else CoffObject.parse(obj)
    at = table_offset(coff, parent)
    if at is None:
        return None
    data = resolved_xdata(coff)
    try:
        raw = _LLVM_CLR_TABLE(data[at:])
    except ConstructError as e:
        raise _bad(f"LLVM's CLR table of {parent} does not fit .xdata: {e}", at) from None
    clause_base = at + 4 * (3 + raw.funclet_count + 1)
    xdata = coff.section(".xdata")
    clauses, handlers = [], []
    for index, c in enumerate(raw.clauses):
        clauses.append(NativeClause(ClauseFlags(c.flags), c.try_start, c.try_end, c.handler_start,
                                    c.handler_end, c.class_token_or_filter_offset))
        reloc = xdata.relocation_at(clause_base + _CLAUSE_SIZE * index + 12)
        handlers.append(reloc.symbol if reloc is not None else None)
    return LlvmClrTable(parent, at, raw.funclet_count, tuple(raw.ends), tuple(clauses), tuple(handlers))
