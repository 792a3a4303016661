"""Bit streams the way the runtime reads GC info: least-significant bit first.

`BitReader` and `BitWriter` know the three encodings of `structs.py` (plain bits, var-length
unsigned, var-length signed) and nothing about GC info. The reader raises `GcInfoError` with
the bit position instead of reading past the end, and refuses numbers longer than the 64 bits
the runtime's size_t can hold — so damaged input is an error value, never an IndexError.
"""

from __future__ import annotations

from .errors import GcInfoError
from .structs import Bits, Encoding, VarSigned, VarUnsigned

_WORD_BITS = 64   # BITS_PER_SIZE_T on AMD64


class BitReader:
    """Reads bits from `data` starting at bit `start` (0 = bit 0 of byte 0)."""

    def __init__(self, data: bytes | memoryview, start: int = 0):
        self.data = data
        self.limit = len(data) * 8
        self.pos = start
        self.high_water = start   # the furthest bit read, for sizing what a decoder consumed

    def _need(self, count: int) -> None:
        if self.pos + count > self.limit:
            raise GcInfoError(f"truncated: {number(count)} bit(s) needed at bit {self.pos}, the data has "
                              f"{self.limit}", offset=self.pos, kind="truncated-gcinfo")

    def seek(self, pos: int, what: str) -> None:
        """Go to `pos` (a pointer target), refusing one past the data."""
        if not 0 <= pos <= self.limit:
            raise GcInfoError(f"{what} points to bit {number(pos)}, past the {self.limit} bits of the data",
                              offset=self.pos, kind="bad-gcinfo-pointer")
        self.pos = pos

    def set_bits(self, count: int) -> tuple[int, ...]:
        """Read `count` one-bit flags at once: the indices of those set."""
        value = self.bits(count)
        if not value:
            return ()
        text = bin(value)[:1:-1]   # least significant first
        return tuple(i for i, c in enumerate(text) if c == "1")

    def bits(self, count: int) -> int:
        if count == 0:
            return 0
        self._need(count)
        first, last = self.pos >> 3, (self.pos + count + 7) >> 3
        value = (int.from_bytes(self.data[first:last], "little") >> (self.pos & 7)) & ((1 << count) - 1)
        self.pos += count
        self.high_water = max(self.high_water, self.pos)
        return value

    def bit(self) -> int:
        return self.bits(1)

    def _var_chunks(self, base: int) -> tuple[int, int]:
        """The chunks of a var-length number: (value bits, how many), for both signednesses --
        they differ only in what the last chunk's top value bit means."""
        result, shift = 0, 0
        while True:
            if shift + base > _WORD_BITS:
                raise GcInfoError(f"var-length number at bit {self.pos} runs past {_WORD_BITS} bits",
                                  offset=self.pos, kind="bad-var-length")
            chunk = self.bits(base + 1)
            result |= (chunk & ((1 << base) - 1)) << shift
            shift += base
            if not chunk >> base:
                return result, shift

    def var_unsigned(self, base: int) -> int:
        return self._var_chunks(base)[0]

    def var_signed(self, base: int) -> int:
        result, shift = self._var_chunks(base)
        if result >> (shift - 1):   # sign-extend from the last chunk's top value bit
            result -= 1 << shift
        return result

    def read(self, encoding: Encoding) -> int:
        if isinstance(encoding, Bits):
            return self.bits(encoding.count)
        if isinstance(encoding, VarUnsigned):
            return self.var_unsigned(encoding.base)
        return self.var_signed(encoding.base)

    def align_to_byte(self) -> None:
        self.pos = (self.pos + 7) & ~7

    @property
    def remaining(self) -> int:
        return self.limit - self.pos


class BitWriter:
    """Accumulates bits; `bytes()` pads the last byte with zeros (BitStreamWriter::CopyTo)."""

    def __init__(self):
        self.value = 0
        self.count = 0

    def bits(self, value: int, count: int) -> None:
        if value < 0 or value >> count:
            raise GcInfoError(f"{value} does not fit {count} bit(s)", kind="unencodable-gcinfo")
        self.value |= value << self.count
        self.count += count

    def var_unsigned(self, value: int, base: int) -> None:
        if value < 0:
            raise GcInfoError(f"{value} is negative: not encodable as an unsigned var-length number",
                              kind="unencodable-gcinfo")
        top = 1 << base
        while value >= top:
            self.bits((value & (top - 1)) | top, base + 1)
            value >>= base
        self.bits(value, base + 1)

    def var_signed(self, value: int, base: int) -> None:
        top = 1 << base
        while True:
            chunk = value & (top - 1)
            value >>= base   # arithmetic shift
            if (chunk & (top >> 1) and value == -1) or (not chunk & (top >> 1) and value == 0):
                self.bits(chunk, base + 1)
                return
            self.bits(chunk | top, base + 1)

    def write(self, encoding: Encoding, value: int) -> None:
        if isinstance(encoding, Bits):
            self.bits(value, encoding.count)
        elif isinstance(encoding, VarUnsigned):
            self.var_unsigned(value, encoding.base)
        else:
            self.var_signed(value, encoding.base)

    def append(self, other: "BitWriter") -> None:
        self.value |= other.value << self.count
        self.count += other.count

    def to_bytes(self) -> bytes:
        return self.value.to_bytes((self.count + 7) // 8, "little")


def number(value: int) -> str:
    """A count or position for a message: garbage can make them astronomically large."""
    return str(value) if value < 10**15 else f"~2**{value.bit_length()}"


def size_of_var_unsigned(value: int, base: int) -> int:
    """BitStreamWriter::SizeofVarLengthUnsigned: bits the encoding of `value` takes."""
    size = base + 1
    while value >= 1 << base:
        value >>= base
        size += base + 1
    return size


def ceil_of_log2(x: int) -> int:
    """gcinfotypes.h CeilOfLog2 (x > 0)."""
    return (x - 1).bit_length()
