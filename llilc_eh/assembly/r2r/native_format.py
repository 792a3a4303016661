"""The Native Format: the variable-length integers, sparse arrays and hash tables that
ReadyToRun images use for their lookup sections (readytorun-format.md, "Native Format").

Everything here reads from one buffer (the whole image file) at absolute offsets and checks
every read against the bounds it was given, so a damaged section raises
`AssemblyError(kind="bad-native-format")` with the offset, never an IndexError.

- Integers: the low bits of the first byte say how many bytes follow (`xxxxxxx0` one byte,
  `xxxxxx01` two, `xxxxx011` three, `xxxx0111` four, `xxxx1111` a byte then a 32-bit word).
  Read little-endian, an n-byte form holds the value shifted left by n bits; signed values
  are sign-extended from the top byte.
- `NativeArray`: a header (count << 2 | index-entry size), one offset per block of 16
  elements, and per block a binary tree of depth 4 whose nodes say which children exist; a
  subtree holding one element is collapsed into a *leaf* that names the element's index in
  its block (index 16 marks the shared empty block).
- `NativeHashtable`: a header byte (log2 of the bucket count << 2 | cell size), a cell per
  bucket plus an end cell, then per bucket its entries sorted by the low byte of the hash:
  that byte and a signed offset (relative to where the offset is written) to the entry.
- `NibbleReader`: the nibble stream NGen and ReadyToRun use for method fixup lists.

The encoders (`encode_unsigned`, `encode_signed`, `encode_native_array`,
`encode_native_hashtable`) are ours and exist so tests can state their data; the array
encoder lays trees out the way the reader expects (first child right after its node).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from llilc_eh.errors import AssemblyError

BLOCK_SIZE = 16          # elements per NativeArray block (a tree of depth 4)
_NULL_LEAF_INDEX = BLOCK_SIZE  # the shared empty block's leaf names no element


def _bad(reason: str) -> AssemblyError:
    return AssemblyError(reason, kind="bad-native-format")


# ------------------------------------------------------------------------ integers

def encode_unsigned(value: int) -> bytes:
    """The shortest native encoding of an unsigned 32-bit value."""
    if not 0 <= value < 1 << 32:
        raise ValueError(f"{value} is not an unsigned 32-bit value")
    for n in range(1, 5):
        if value < 1 << (7 * n):
            return ((value << n) | ((1 << (n - 1)) - 1)).to_bytes(n, "little")
    return b"\x0f" + value.to_bytes(4, "little")


def encode_signed(value: int) -> bytes:
    """The shortest native encoding of a signed 32-bit value."""
    if not -(1 << 31) <= value < 1 << 31:
        raise ValueError(f"{value} is not a signed 32-bit value")
    for n in range(1, 5):
        if -(1 << (7 * n - 1)) <= value < 1 << (7 * n - 1):
            return ((value << n) | ((1 << (n - 1)) - 1)).to_bytes(n, "little", signed=True)
    return b"\x0f" + value.to_bytes(4, "little", signed=True)


class NativeReader:
    """Bounds-checked reads of native-format data inside `data[start:end]`."""

    __slots__ = ("data", "start", "end", "what")

    def __init__(self, data: bytes | memoryview, start: int = 0, end: int | None = None, *,
                 what: str = "native data"):
        self.data = data
        self.start = start
        self.end = len(data) if end is None else min(end, len(data))
        self.what = what

    def _check(self, offset: int, size: int) -> None:
        if offset < self.start or offset + size > self.end:
            raise _bad(f"{self.what}: read of {size} byte(s) at file offset 0x{offset:X} is outside "
                       f"[0x{self.start:X}, 0x{self.end:X})")

    def byte(self, offset: int) -> int:
        self._check(offset, 1)
        return self.data[offset]

    def uint(self, offset: int, size: int) -> int:
        """A little-endian unsigned integer of 1, 2 or 4 bytes."""
        self._check(offset, size)
        return int.from_bytes(self.data[offset:offset + size], "little")

    def _length(self, offset: int) -> int:
        first = self.byte(offset)
        if first & 1 == 0:
            return 1
        if first & 2 == 0:
            return 2
        if first & 4 == 0:
            return 3
        if first & 8 == 0:
            return 4
        if first & 16 == 0:
            return 5
        raise _bad(f"{self.what}: integer at file offset 0x{offset:X} has lead byte 0x{first:02X} "
                   f"(a 64-bit or reserved form, not valid here)")

    def decode_unsigned(self, offset: int) -> tuple[int, int]:
        """(value, offset after it)."""
        if self.start <= offset < self.end:   # the one-byte form, most values: no call
            first = self.data[offset]
            if not first & 1:
                return first >> 1, offset + 1
        n = self._length(offset)
        self._check(offset, n)
        if n == 5:
            return int.from_bytes(self.data[offset + 1:offset + 5], "little"), offset + 5
        return int.from_bytes(self.data[offset:offset + n], "little") >> n, offset + n

    def decode_signed(self, offset: int) -> tuple[int, int]:
        """(value, offset after it); the value is sign-extended from its top byte."""
        n = self._length(offset)
        self._check(offset, n)
        if n == 5:
            return int.from_bytes(self.data[offset + 1:offset + 5], "little", signed=True), offset + 5
        return int.from_bytes(self.data[offset:offset + n], "little", signed=True) >> n, offset + n

    def skip_integer(self, offset: int) -> int:
        n = self._length(offset)
        self._check(offset, n)
        return offset + n


class NativeParser:
    """A cursor over a NativeReader."""

    __slots__ = ("reader", "offset")

    def __init__(self, reader: NativeReader, offset: int):
        self.reader = reader
        self.offset = offset

    def get_byte(self) -> int:
        value = self.reader.byte(self.offset)
        self.offset += 1
        return value

    def get_unsigned(self) -> int:
        value, self.offset = self.reader.decode_unsigned(self.offset)
        return value

    def get_signed(self) -> int:
        value, self.offset = self.reader.decode_signed(self.offset)
        return value

    def get_relative_offset(self) -> int:
        """A signed delta relative to where it is written, resolved to an absolute offset."""
        at = self.offset
        return at + self.get_signed()

    def parser_from_relative_offset(self) -> "NativeParser":
        return NativeParser(self.reader, self.get_relative_offset())

    def __repr__(self) -> str:
        return f"NativeParser(0x{self.offset:X})"


# ------------------------------------------------------------------------ sparse array

class NativeArray:
    """A sparse array of offsets (each element is the file offset of its data)."""

    __slots__ = ("reader", "offset", "count", "entry_size", "base")

    def __init__(self, reader: NativeReader, offset: int):
        header, self.base = reader.decode_unsigned(offset)
        self.reader = reader
        self.offset = offset
        self.count = header >> 2
        code = header & 3
        if code == 3:
            raise _bad(f"{reader.what}: NativeArray at 0x{offset:X} has index-entry size code 3")
        self.entry_size = 1 << code
        blocks = (self.count + BLOCK_SIZE - 1) // BLOCK_SIZE
        reader._check(self.base, blocks * self.entry_size)

    def __len__(self) -> int:
        return self.count

    def _block(self, block: int) -> int:
        return self.base + self.reader.uint(self.base + block * self.entry_size, self.entry_size)

    def get(self, index: int) -> int | None:
        """The data offset of element `index`, or None when the element is absent."""
        if not 0 <= index < self.count:
            return None
        reader = self.reader
        offset = self._block(index // BLOCK_SIZE)
        bit = BLOCK_SIZE >> 1
        while bit:
            value, after = reader.decode_unsigned(offset)
            if index & bit:
                if value & 2:
                    offset += value >> 2
                    bit >>= 1
                    continue
            elif value & 1:
                offset = after
                bit >>= 1
                continue
            if value & 3 == 0 and value >> 2 == index & (BLOCK_SIZE - 1):
                return after  # a leaf standing for a one-element subtree
            return None
        return offset

    def items(self) -> Iterator[tuple[int, int]]:
        """Every present element as (index, data offset), in index order, by walking each
        block's tree once (cheaper than `get` per index)."""
        for block in range((self.count + BLOCK_SIZE - 1) // BLOCK_SIZE):
            found: list[tuple[int, int]] = []
            self._walk(self._block(block), BLOCK_SIZE >> 1, 0, found, 0)
            first = block * BLOCK_SIZE
            for low, data in found:
                if first + low < self.count:
                    yield first + low, data
                else:
                    raise _bad(f"{self.reader.what}: NativeArray element {first + low} is past its "
                               f"count {self.count}")

    def _walk(self, offset: int, bit: int, prefix: int, found: list, depth: int) -> None:
        if bit == 0:
            found.append((prefix, offset))
            return
        value, after = self.reader.decode_unsigned(offset)
        if value & 3 == 0:
            low = value >> 2
            if low == _NULL_LEAF_INDEX and depth == 0:
                return
            # The leaf's index must lie inside the subtree it replaces, or no lookup finds it.
            if low >= BLOCK_SIZE or low & ~(2 * bit - 1) != prefix:
                raise _bad(f"{self.reader.what}: NativeArray leaf at 0x{offset:X} names element {low}, "
                           f"outside its subtree [{prefix}, {prefix + 2 * bit})")
            found.append((low, after))
            return
        if value & 1:
            self._walk(after, bit >> 1, prefix, found, depth + 1)
        if value & 2:
            if value >> 2 == 0:
                raise _bad(f"{self.reader.what}: NativeArray node at 0x{offset:X} points at itself")
            self._walk(offset + (value >> 2), bit >> 1, prefix | bit, found, depth + 1)


def encode_native_array(count: int, elements: Mapping[int, bytes]) -> bytes:
    """A NativeArray of `count` slots whose present elements carry the given data bytes."""
    if any(not 0 <= i < count for i in elements):
        raise ValueError("element index outside the array")

    def subtree(first: int, bit: int) -> bytes | None:
        """The node for [first, first + 2*bit), or for the element `first` itself at bit 0."""
        present = [i for i in range(first, first + max(2 * bit, 1)) if i in elements]
        if not present:
            return None
        if bit == 0:
            return elements[first]
        if len(present) == 1:
            i = present[0]
            return encode_unsigned((i % BLOCK_SIZE) << 2) + elements[i]
        low, high = subtree(first, bit >> 1), subtree(first + bit, bit >> 1)
        flags = (1 if low is not None else 0) | (2 if high is not None else 0)
        low = low or b""
        if high is None:
            return encode_unsigned(flags) + low
        head = encode_unsigned(flags)
        while True:  # the node's size depends on the delta it encodes: settle it
            again = encode_unsigned(flags | (len(head) + len(low)) << 2)
            if len(again) == len(head):
                return again + low + high
            head = again

    blocks_data, block_offsets, null_at = b"", [], None
    for first in range(0, count, BLOCK_SIZE):
        tree = subtree(first, BLOCK_SIZE // 2) if any(first <= i < first + BLOCK_SIZE for i in elements) \
            else None
        if tree is None:
            if null_at is None:
                null_at = len(blocks_data)
                blocks_data += encode_unsigned(_NULL_LEAF_INDEX << 2)
            block_offsets.append(null_at)
        else:
            block_offsets.append(len(blocks_data))
            blocks_data += tree
    for code, size in ((0, 1), (1, 2), (2, 4)):
        table_size = size * len(block_offsets)
        if table_size + len(blocks_data) < 1 << (8 * size) or code == 2:
            table = b"".join((table_size + o).to_bytes(size, "little") for o in block_offsets)
            return encode_unsigned(count << 2 | code) + table + blocks_data
    raise AssertionError("unreachable")


# ------------------------------------------------------------------------ hash table

@dataclass(frozen=True)
class HashtableEntry:
    low_hash: int        # the low byte of the entry's hash code
    offset: int          # file offset of the entry's data


class NativeHashtable:
    """A NativeHashtable starting at `offset`; `end` bounds the whole table (its section end)."""

    __slots__ = ("reader", "offset", "base", "bucket_mask", "cell_size", "end")

    def __init__(self, reader: NativeReader, offset: int, end: int | None = None):
        header = reader.byte(offset)
        self.reader = reader
        self.offset = offset
        self.base = offset + 1
        shift = header >> 2
        if shift > 31:
            raise _bad(f"{reader.what}: NativeHashtable at 0x{offset:X} claims 2^{shift} buckets")
        self.bucket_mask = (1 << shift) - 1
        code = header & 3
        if code == 3:
            raise _bad(f"{reader.what}: NativeHashtable at 0x{offset:X} has cell size code 3")
        self.cell_size = 1 << code
        self.end = reader.end if end is None else end
        reader._check(self.base, (self.bucket_count + 1) * self.cell_size)

    @property
    def bucket_count(self) -> int:
        return self.bucket_mask + 1

    def _bucket(self, bucket: int) -> tuple[int, int]:
        at = self.base + bucket * self.cell_size
        start = self.base + self.reader.uint(at, self.cell_size)
        stop = self.base + self.reader.uint(at + self.cell_size, self.cell_size)
        if not self.base <= start <= stop <= self.end:
            raise _bad(f"{self.reader.what}: NativeHashtable bucket {bucket} spans [0x{start:X}, 0x{stop:X}), "
                       f"outside the table [0x{self.base:X}, 0x{self.end:X})")
        return start, stop

    def _entries(self, bucket: int) -> Iterator[HashtableEntry]:
        start, stop = self._bucket(bucket)
        parser = NativeParser(self.reader, start)
        while parser.offset < stop:
            low = parser.get_byte()
            target = parser.get_relative_offset()
            if not self.reader.start <= target < self.reader.end:
                raise _bad(f"{self.reader.what}: NativeHashtable bucket {bucket} has an entry at file offset "
                           f"0x{target:X}, outside [0x{self.reader.start:X}, 0x{self.reader.end:X})")
            yield HashtableEntry(low, target)
        if parser.offset != stop:
            raise _bad(f"{self.reader.what}: NativeHashtable bucket {bucket} overruns its end 0x{stop:X}")

    def entries(self) -> Iterator[HashtableEntry]:
        """Every entry, bucket by bucket."""
        for bucket in range(self.bucket_count):
            yield from self._entries(bucket)

    def lookup(self, hashcode: int) -> Iterator[HashtableEntry]:
        """The entries whose hash matches `hashcode` in its bucket bits and low byte."""
        low = hashcode & 0xFF
        return (e for e in self._entries((hashcode >> 8) & self.bucket_mask) if e.low_hash == low)


def encode_native_hashtable(entries: Sequence[tuple[int, bytes]], bucket_shift: int) -> tuple[bytes, int]:
    """A NativeHashtable of (hashcode, data) entries with 2**bucket_shift buckets.

    The data blobs are laid out first and the table after them (so every entry's relative
    offset is negative, as a writer that emits entries before the table produces). Returns
    (bytes, offset of the table's header byte)."""
    blobs, positions = b"", []
    for _, data in entries:
        positions.append(len(blobs))
        blobs += data
    mask = (1 << bucket_shift) - 1
    buckets: list[list[int]] = [[] for _ in range(mask + 1)]
    for i, (hashcode, _) in enumerate(entries):
        buckets[(hashcode >> 8) & mask].append(i)
    for b in buckets:
        b.sort(key=lambda i: entries[i][0] & 0xFF)
    table_at = len(blobs)
    for code, size in ((0, 1), (1, 2), (2, 4)):
        # Each entry's offset field is written where it lands, so one pass in order is exact.
        at = table_at + 1 + size * (len(buckets) + 1)
        body, starts = b"", []
        for bucket in buckets:
            starts.append(at - (table_at + 1))
            for i in bucket:
                delta = encode_signed(positions[i] - (at + 1))
                body += bytes([entries[i][0] & 0xFF]) + delta
                at += 1 + len(delta)
        starts.append(at - (table_at + 1))
        if max(starts) < 1 << (8 * size) or code == 2:
            cells = b"".join(s.to_bytes(size, "little") for s in starts)
            return blobs + bytes([bucket_shift << 2 | code]) + cells + body, table_at
    raise AssertionError("unreachable")


# ------------------------------------------------------------------------ nibbles

class NibbleReader:
    """Nibbles low half first; an integer is big-endian groups of 3 bits, each nibble's
    high bit saying that another follows (NGen's NibbleWriter::WriteEncodedU32)."""

    __slots__ = ("reader", "offset", "_pending")

    def __init__(self, reader: NativeReader, offset: int):
        self.reader = reader
        self.offset = offset
        self._pending: int | None = None

    def nibble(self) -> int:
        if self._pending is not None:
            value, self._pending = self._pending, None
            return value
        byte = self.reader.byte(self.offset)
        self.offset += 1
        self._pending = byte >> 4
        return byte & 0xF

    def unsigned(self) -> int:
        value = 0
        for _ in range(11):  # 11 * 3 bits cover 32
            nibble = self.nibble()
            value = (value << 3) | (nibble & 7)
            if not nibble & 8:
                if value >> 32:
                    break
                return value
        raise _bad(f"{self.reader.what}: nibble-encoded integer before file offset 0x{self.offset:X} "
                   f"does not fit 32 bits")

    @property
    def end(self) -> int:
        """The offset of the first byte not consumed (a half-used byte counts as consumed)."""
        return self.offset


def encode_nibbles(values: Sequence[int]) -> bytes:
    """Unsigned integers as a nibble stream (the inverse of `NibbleReader.unsigned`)."""
    nibbles: list[int] = []
    for v in values:
        groups = [v & 7]
        v >>= 3
        while v:
            groups.append(v & 7)
            v >>= 3
        groups.reverse()
        nibbles += [g | 8 for g in groups[:-1]] + [groups[-1]]
    if len(nibbles) % 2:
        nibbles.append(0)
    return bytes(nibbles[i] | nibbles[i + 1] << 4 for i in range(0, len(nibbles), 2))
