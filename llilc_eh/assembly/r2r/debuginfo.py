"""ReadyToRun per-method debug info (section DEBUG_INFO, 105): RyuJIT's IL <-> native offset map.

Why: the dispatch check (check.dispatch) must know, for every call in a RyuJIT body, the IL
instruction it came from; ReadyToRun keeps exactly that map for the debugger.

Layout (read from dotnet/coreclr v3.1.23 src/vm/debuginfostore.cpp and
src/inc/cordebuginfo.h, and readytorun-format.md; written here, not copied):

* the section is a NativeArray indexed by the method's *main RUNTIME_FUNCTION index*;
* an element is an unsigned "lookback": non-zero, the blob starts that many bytes before the
  element (a blob shared with an earlier method); zero, it starts right after the value;
* the blob is a nibble stream (`NibbleReader`): the byte counts of the bounds and of the
  variable locations, then -- at the next whole byte -- the bounds, then the variables;
* the bounds are a nibble stream: a count, then per entry the native offset as a delta from
  the previous one, the IL offset + 3 (so the sentinels NO_MAPPING -1, PROLOG -2, EPILOG -3
  encode as 2, 1, 0), and the source-type bits (`SourceTypes`).

`Bounds.il_offset_at(native)` is what a stack walker asks: the IL offset of the last entry
at or before a native offset (native offsets are method-relative, funclets included).
"""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass

from ...errors import AssemblyError
from .native_format import NativeArray, NativeReader, NibbleReader
from .structs import SectionType

IL_ADJUST = 3            # ICorDebugInfo::MAX_MAPPING_VALUE is -3: stored value = IL offset + 3


class Mapping(enum.IntEnum):
    """ICorDebugInfo::MappingTypes: IL offsets that are no IL offset."""

    NO_MAPPING = -1
    PROLOG = -2
    EPILOG = -3


class SourceTypes(enum.IntFlag):
    """ICorDebugInfo::SourceTypes: why RyuJIT recorded the entry."""

    INVALID = 0x00
    SEQUENCE_POINT = 0x01
    STACK_EMPTY = 0x02
    CALL_SITE = 0x04
    NATIVE_END_OFFSET_UNKNOWN = 0x08
    CALL_INSTRUCTION = 0x10


@dataclass(frozen=True)
class BoundsEntry:
    native_offset: int
    il_offset: int                  # >= 0, or a `Mapping` sentinel
    source: SourceTypes

    def __str__(self) -> str:
        il = f"IL_{self.il_offset:04x}" if self.il_offset >= 0 else Mapping(self.il_offset).name
        return f"{self.native_offset:#06x} -> {il} ({self.source!s})"


@dataclass(frozen=True)
class Bounds:
    entries: tuple[BoundsEntry, ...]

    def il_offset_at(self, native: int) -> int | None:
        """The IL offset in effect at `native` (the last entry at or before it); None when
        there is none or it is a sentinel (prolog, epilog, no mapping)."""
        keys = [e.native_offset for e in self.entries]
        i = bisect.bisect_right(keys, native) - 1
        if i < 0:
            return None
        il = self.entries[i].il_offset
        return il if il >= 0 else None


def _signed32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _read_bounds(reader: NativeReader, offset: int) -> Bounds:
    nib = NibbleReader(reader, offset)
    count = nib.unsigned()
    entries, native = [], 0
    for _ in range(count):
        native += nib.unsigned()
        il = _signed32(nib.unsigned() - IL_ADJUST)
        entries.append(BoundsEntry(native, il, SourceTypes(nib.unsigned() & 0x1F)))
    return Bounds(tuple(entries))


class DebugInfo:
    """The DEBUG_INFO section of one ReadyToRun image (lazy, per runtime function)."""

    def __init__(self, image):
        self.image = image
        span = image._section_bytes(SectionType.DEBUG_INFO)
        self.present = span is not None
        self._reader = NativeReader(image._view, what=f"{image.assembly.path.name} DEBUG_INFO")
        self._array = NativeArray(self._reader, span[0]) if span is not None else None

    def bounds(self, runtime_function: int) -> Bounds | None:
        """The bounds of the method whose main RUNTIME_FUNCTION is `runtime_function`; None
        when the image keeps no debug info for it."""
        if self._array is None:
            return None
        at = self._array.get(runtime_function)
        if at is None:
            return None
        lookback, after = self._reader.decode_unsigned(at)
        blob = at - lookback if lookback else after
        if lookback and blob < 0:
            raise AssemblyError(f"DEBUG_INFO of runtime function {runtime_function}: lookback {lookback} "
                                f"before the file", kind="bad-r2r-section")
        head = NibbleReader(self._reader, blob)
        bounds_bytes = head.unsigned()
        head.unsigned()                          # the variable locations' byte count: not needed
        if not bounds_bytes:
            return Bounds(())
        return _read_bounds(self._reader, head.end)


__all__ = ["Bounds", "BoundsEntry", "DebugInfo", "Mapping", "SourceTypes"]
