#!/usr/bin/env python3
"""The robustness campaign: seeded mutations of real assemblies, each run through the stages
a user would run, every outcome classified.

    tools/mutate.py --count 5000 --seed 0 --jobs 1            # the campaign, outcomes by stage/kind
    tools/mutate.py --replay 1234                              # one mutant again, with its traceback
    tools/mutate.py --replay 1234 --write mutant.dll          # ... and its bytes, to try the CLI on
    tools/mutate.py --count 5000 --show reader/llvm-parse      # also the seeds of a named outcome
    tools/mutate.py --source X.dll --source Y.dll ...         # other assemblies than the default three

Why: a researcher hands the tool files we never saw. Whatever is damaged in them must come
back as a named error of the stage that reads it (`AssemblyError` for the file, its metadata
and bodies, `ILError` for the IL stream, `ReaderError` ...), with a stable `kind`, never as a
traceback, an `internal` record or a hang. Mutating the files we know (the embedded sample, a
small and a mid-sized ReadyToRun framework assembly) reaches the damage a real file can have,
at every layer: PE and CLI headers, the metadata root and stream headers, the #~ header (heap
size flags, valid mask, row counts), table rows, the four heaps, method headers, IL bytes
(opcodes, operands, branch targets, tokens), EH sections and clauses, the ReadyToRun header,
its section directory and section contents.

A mutant is a function of (source, seed) alone: `Random(f"{source}:{seed}")` picks the
strategy, the location and the value, so `--replay SEED` rebuilds the very bytes. Fields are
located through the layouts the readers themselves use: pefile/dnfile structures for the PE,
CLI and metadata headers, dnfile's own row format for table rows, and the construct
declarations of `assembly/structs.py` and `assembly/r2r/structs.py` (parsed, changed, built
again) for method headers, EH sections and clauses and the ReadyToRun header: no layout is
declared a second time here.

Each mutant goes through the steps below; a step's outcome is `ok`, `<stage>/<kind>` of the
`LlilcEhError` it raised, or a defect: `internal` (any other exception), `wrong-stage` (an
error of a stage that cannot be reached from the step), `hang` (past the per-mutant time
limit, `signal.alarm`) or `bad-ir` (the reader's IR refused by LLVM's parser or verifier: the
reader must refuse damaged IL itself). Catching every exception here is the point of the harness: it
classifies, it does not hide; a defect is fixed where the damage is read.

    load      Assembly(path), the method count, methods_with_il
    list      the name and body of every method with IL (what `il` and `validate` list)
    il        analyze() of every EH method and its listing with metadata names
    reader    Pipeline.front (JIT-EE + IR + lint + funclet model) of a few EH methods
    pipeline  the whole pipeline on one method, for one mutant in `--pipeline-every`
    r2r       ReadyToRunImage, its bodies, the check of every body with EH (unwind decoded)
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import random
import re
import signal
import struct
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llilc_eh.assembly.loader import METHODDEF_TABLE, Assembly  # noqa: E402
from llilc_eh.assembly.r2r.structs import (ExceptionLookupEntry, ReadyToRunHeader,  # noqa: E402
                                           RuntimeFunctionAmd64)
from llilc_eh.assembly.structs import (FAT_CLAUSE_SIZE, FAT_HEADER_SIZE, SECTION_HEADER_SIZE,  # noqa: E402
                                       SMALL_CLAUSE_SIZE, FatEHClause, FatMethodHeader, SectionHeader,
                                       SmallEHClause)
from llilc_eh.errors import LlilcEhError  # noqa: E402
from llilc_eh.il.decoder import decode  # noqa: E402
from llilc_eh.il.opcodes import OperandKind  # noqa: E402

TIME_LIMIT = 10          # seconds per mutant, all steps together
READER_METHODS = 3       # EH methods per mutant through Pipeline.front
PIPELINE_EVERY = 50      # one mutant in this many also runs one method through the whole pipeline

# The stages whose errors each step may legitimately raise: a step runs the stages before
# it, so a damaged body may fail `il` with an AssemblyError, but no step may fail with an
# error of a stage it does not reach.
ALLOWED_STAGES = {
    "load": {"assembly"},
    "list": {"assembly"},
    "il": {"assembly", "il"},
    "reader": {"assembly", "il", "reader", "funclets"},
    "pipeline": {"assembly", "il", "reader", "funclets", "backend", "clauses"},
    "r2r": {"assembly", "il", "clauses", "unwind"},
}
STEPS = tuple(ALLOWED_STAGES)
DEFECTS = ("internal", "wrong-stage", "hang", "bad-ir")
# Named errors that are still bugs of ours: the reader wrote IR that LLVM cannot parse or
# verify. Damaged IL must be refused by the reader's own checks, at its IL offset.
OUR_IR = {("reader", "llvm-parse"), ("reader", "llvm-verify")}


def framework_dir() -> Path:
    from llilc_eh.assembly.corpus import Corpus
    return Corpus().framework_dir


def default_sources() -> list[Path]:
    """The embedded sample (IL only, 67 EH methods), a small R2R framework assembly (4 EH
    methods) and a mid-sized one (24)."""
    fw = framework_dir()
    return [REPO / "llilc_eh" / "data" / "sample.dll",
            fw / "System.ComponentModel.EventBasedAsync.dll",
            fw / "System.Security.Claims.dll"]


# ------------------------------------------------------------------------------ anatomy

@dataclass(frozen=True)
class Field:
    """A field of the clean file: where it is, how wide, what it is called, and values that
    mean something for it beyond the generic ones (a heap's size for a heap index, ...)."""

    area: str
    name: str
    offset: int
    size: int
    extra: tuple[int, ...] = ()


@dataclass(frozen=True)
class Body:
    """An IL body of the clean file, located: enough to mutate its header, IL and clauses."""

    rid: int
    offset: int                 # file offset of the header
    tiny: bool
    code_offset: int
    code_size: int
    instructions: tuple         # decoded clean instructions
    sections: tuple             # (file offset, fat, clause count) of each extra data section
    has_eh: bool


_FORMAT_ITEM = re.compile(r"(\d*)([a-zA-Z])")


def _structure_fields(area: str, s, extra: dict[str, tuple[int, ...]] | None = None) -> list[Field]:
    """The fields of a pefile/dnfile `Structure` at their file offsets (its own format)."""
    out = []
    base = s.get_file_offset()
    pos = 0
    items = _FORMAT_ITEM.findall(s.__format_str__.lstrip("<>=!@"))
    for (count, code), keys in zip(items, s.__keys__):
        size = struct.calcsize(f"<{count}{code}")
        out.append(Field(area, keys[0], base + pos, size, (extra or {}).get(keys[0], ())))
        pos += size
    return out


class Anatomy:
    """Where things are in one clean assembly, found once with the readers' own layouts."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.asm = Assembly(self.path)
        self.data = self.asm.data
        pe = self.asm.pe
        net = pe.net
        self.fields: dict[str, list[Field]] = collections.defaultdict(list)
        size = len(self.data)
        self.fields["pe-header"] += _structure_fields("pe-header", pe.DOS_HEADER)
        self.fields["pe-header"] += _structure_fields("pe-header", pe.NT_HEADERS)
        self.fields["pe-header"] += _structure_fields("pe-header", pe.FILE_HEADER)
        self.fields["pe-header"] += _structure_fields("pe-header", pe.OPTIONAL_HEADER)
        for i, d in enumerate(pe.OPTIONAL_HEADER.DATA_DIRECTORY):
            for f in _structure_fields("pe-header", d):
                self.fields["pe-header"].append(Field("pe-header", f"{d.name}.{f.name}", f.offset, f.size))
        for s in pe.sections:
            section = s.Name.rstrip(b"\0").decode(errors="replace")
            for f in _structure_fields("pe-header", s, {"PointerToRawData": (size,), "SizeOfRawData": (size,)}):
                self.fields["pe-header"].append(Field("pe-header", f"section {section}.{f.name}", f.offset, f.size,
                                                      f.extra))
        self.fields["cli-header"] += _structure_fields("cli-header", net.struct)
        md = net.metadata
        self.fields["stream-header"] += _structure_fields("stream-header", md.struct)
        self.heaps: dict[str, tuple[int, int]] = {}
        for stream in md.streams_list:
            name = stream.struct.Name.rstrip(b"\0").decode(errors="replace")
            self.heaps[name] = (stream.file_offset, stream.sizeof())
            for f in _structure_fields("stream-header", stream.struct, {"Offset": (size,), "Size": (size,)}):
                self.fields["stream-header"].append(Field("stream-header", f"{name}.{f.name}", f.offset, f.size,
                                                          f.extra))
        tables = net.mdtables
        header = tables.header
        self.fields["tables-header"] += _structure_fields("tables-header", header)
        counts_at = header.get_file_offset() + header.sizeof()
        self.tables = []
        valid = [n for n in range(64) if header.MaskValid >> n & 1]
        by_number = {t.number: t for t in tables.tables_list}
        for i, number in enumerate(valid):
            t = by_number.get(number)
            name = t.name if t is not None else f"table 0x{number:02X}"
            self.fields["tables-header"].append(Field("tables-header", f"{name} row count", counts_at + 4 * i, 4,
                                                      (0, 0xFFFF, 0x10000, 0xFFFFFF)))
        heap_sizes = {"String": self.heaps.get("#Strings", (0, 0))[1], "Blob": self.heaps.get("#Blob", (0, 0))[1],
                      "Guid": self.heaps.get("#GUID", (0, 0))[1] // 16}
        for t in tables.tables_list:
            if not t.num_rows:
                continue
            first = t.rows[0].struct
            row_fields = _structure_fields(t.name, first)
            columns = []
            for f in row_fields:
                extra = tuple(v for k, v in heap_sizes.items() if f"_{k}Index" in f.name
                              for v in (v - 1, v, v + 1))
                columns.append((f.name, f.offset - first.get_file_offset(), f.size, extra))
            self.tables.append((t.name, t.file_offset, t.row_size, t.num_rows, tuple(columns)))
        self.bodies = self._bodies()
        self.r2r = self._r2r()

    def _bodies(self) -> tuple[Body, ...]:
        out = []
        for rid in self.asm.methods_with_il():
            body = self.asm.body(rid)
            offset = self.asm.rva_to_offset(body.rva)
            sections = []
            for s in body.sections:
                sections.append((offset + s.offset, s.fat, s.clause_count))
            instructions = tuple(decode(body.code)) if body.has_eh else ()
            out.append(Body(rid, offset, body.tiny, offset + body.header_size, body.code_size, instructions,
                            tuple(sections), body.has_eh))
        return tuple(out)

    def _r2r(self):
        """(header file offset, header bytes, [(section type, file offset, size)]) or None."""
        cor = self.asm.pe.net.struct
        rva = getattr(cor, "ManagedNativeHeaderRva", 0) or 0
        if not rva:
            return None
        offset = self.asm.rva_to_offset(rva)
        header = ReadyToRunHeader.parse(self.data[offset:])
        size = ReadyToRunHeader.build(header).__len__()
        sections = [(s.type, self.asm.rva_to_offset(s.rva), s.size) for s in header.sections if s.size]
        return offset, size, tuple(sections)

    @cached_property
    def eh_bodies(self) -> tuple[Body, ...]:
        return tuple(b for b in self.bodies if b.has_eh)


# ------------------------------------------------------------------------------ values

def interesting(rng: random.Random, old: int, size: int, extra: tuple[int, ...] = ()) -> int:
    """A new value for an unsigned little-endian field of `size` bytes: the edges, the
    neighbours of the old value, values that mean something here (`extra`), random bits."""
    top = (1 << (8 * size)) - 1
    choices = [0, 1, top, top >> 1, (top >> 1) + 1, old + 1, old - 1, old * 2, old ^ (1 << rng.randrange(8 * size)),
               rng.randrange(top + 1), rng.randrange(min(top, 0x100) + 1), *extra]
    return rng.choice(choices) & top


def put(data: bytearray, offset: int, size: int, value: int) -> None:
    if 0 <= offset and offset + size <= len(data):
        data[offset:offset + size] = (value & ((1 << 8 * size) - 1)).to_bytes(size, "little")


def get(data: bytes, offset: int, size: int) -> int:
    return int.from_bytes(data[offset:offset + size], "little")


def scribble(rng: random.Random, data: bytearray, start: int, end: int) -> str:
    """A few random bytes, or a flipped bit, somewhere in [start, end)."""
    if end <= start:
        return "nothing to scribble"
    at = rng.randrange(start, end)
    if rng.random() < 0.5:
        bit = rng.randrange(8)
        data[at] ^= 1 << bit
        return f"bit {bit} flipped at 0x{at:X}"
    n = min(rng.choice((1, 1, 2, 4, 8)), end - at)
    data[at:at + n] = bytes(rng.randrange(256) for _ in range(n))
    return f"{n} random byte(s) at 0x{at:X}"


# ------------------------------------------------------------------------------ strategies

def mutate_field(rng, data, fields: list[Field]) -> str:
    f = rng.choice(fields)
    old = get(data, f.offset, f.size)
    new = interesting(rng, old, f.size, f.extra)
    put(data, f.offset, f.size, new)
    return f"{f.area} {f.name} @0x{f.offset:X}: 0x{old:X} -> 0x{new:X}"


def s_pe_header(rng, a: Anatomy, data) -> str:
    return mutate_field(rng, data, a.fields["pe-header"])


def s_cli_header(rng, a, data) -> str:
    return mutate_field(rng, data, a.fields["cli-header"])


def s_stream_header(rng, a, data) -> str:
    return mutate_field(rng, data, a.fields["stream-header"])


def s_tables_header(rng, a, data) -> str:
    fields = a.fields["tables-header"]
    if rng.random() < 0.3:   # heap size flags: every index column changes width
        f = next(f for f in fields if f.name == "HeapOffsetSizes")
        old = data[f.offset]
        data[f.offset] = old ^ (1 << rng.randrange(3)) if rng.random() < 0.8 else rng.randrange(256)
        return f"tables-header HeapOffsetSizes: 0x{old:X} -> 0x{data[f.offset]:X}"
    return mutate_field(rng, data, fields)


def s_table_row(rng, a, data) -> str:
    name, start, row_size, rows, columns = rng.choice(a.tables)
    row = rng.randrange(rows)
    at = start + row * row_size
    if rng.random() < 0.2:
        return f"{name} row {row + 1}: " + scribble(rng, data, at, at + row_size)
    column, off, size, extra = rng.choice(columns)
    old = get(data, at + off, size)
    new = interesting(rng, old, size, extra + tuple(range(rows - 1, rows + 2)))
    put(data, at + off, size, new)
    return f"{name} row {row + 1} {column}: 0x{old:X} -> 0x{new:X}"


def s_heap(rng, a, data) -> str:
    name = rng.choice(sorted(a.heaps))
    start, size = a.heaps[name]
    choice = rng.random()
    if choice < 0.25 and size:   # truncate the heap: its stream header says it is shorter
        f = next(f for f in a.fields["stream-header"] if f.name == f"{name}.Size")
        new = rng.randrange(size)
        put(data, f.offset, 4, new)
        return f"{name} truncated to 0x{new:X} bytes"
    if choice < 0.45 and size:   # point the heap past the end of the metadata / file
        f = next(f for f in a.fields["stream-header"] if f.name == f"{name}.Offset")
        old = get(data, f.offset, 4)
        new = rng.choice((old + size, old + rng.randrange(1, size + 1), len(data), 0xFFFFFFF0))
        put(data, f.offset, 4, new)
        return f"{name} offset 0x{old:X} -> 0x{new:X}"
    if choice < 0.6 and size:    # a length prefix made large (#Blob, #US) or a terminator lost (#Strings)
        at = rng.randrange(start, start + size)
        data[at] = rng.choice((0x7F, 0xBF, 0xDF, 0xFF, 0xC0, 0x80))
        return f"{name} byte at 0x{at:X} -> 0x{data[at]:02X}"
    return f"{name}: " + scribble(rng, data, start, start + size)


class MutantBytes(bytearray):
    """The mutant's bytes, and the methods whose bodies a strategy changed (the reader runs
    those first: an IL or clause change matters to the method it is in)."""

    touched: list[int]


def _body(rng, a, data: MutantBytes, eh_only: bool = True) -> Body:
    pool = a.eh_bodies if eh_only and a.eh_bodies else a.bodies
    b = rng.choice(pool)
    data.touched.append(b.rid)
    return b


def s_method_header(rng, a, data) -> str:
    b = _body(rng, a, data, eh_only=rng.random() < 0.8)
    where = f"method 0x{METHODDEF_TABLE << 24 | b.rid:08X} header @0x{b.offset:X}"
    if b.tiny or rng.random() < 0.1:
        old = data[b.offset]
        data[b.offset] = rng.choice((old ^ 0x3, old ^ 0x1, rng.randrange(256), old | 0xFC, old & 0x3))
        return f"{where} first byte 0x{old:02X} -> 0x{data[b.offset]:02X}"
    h = FatMethodHeader.parse(bytes(data[b.offset:b.offset + FAT_HEADER_SIZE]))
    what = rng.choice(("header_dwords", "more_sects", "init_locals", "flags", "max_stack", "code_size",
                       "local_var_sig_tok", "local_var_sig_tok"))
    if what == "header_dwords":
        h.flags_and_size.header_dwords = rng.choice((0, 1, 2, 4, 15))
    elif what in ("more_sects", "init_locals"):
        h.flags_and_size.flags[what] = not h.flags_and_size.flags[what]
    elif what == "flags":
        raw = FatMethodHeader.build(h)
        flags = get(raw, 0, 2) ^ (1 << rng.randrange(12))
        put(data, b.offset, 2, flags)
        return f"{where} flags word -> 0x{flags:04X}"
    elif what == "code_size":
        h.code_size = interesting(rng, h.code_size, 4, (0, len(data), len(data) - b.code_offset))
    elif what == "max_stack":
        h.max_stack = interesting(rng, h.max_stack, 2)
    else:
        tokens = (0x11000000 | rng.randrange(1, 200), 0x11000000, 0x01000001, 0x11FFFFFF,
                  0x1B000000 | rng.randrange(1, 50))
        h.local_var_sig_tok = rng.choice(tokens + (interesting(rng, h.local_var_sig_tok, 4),))
    data[b.offset:b.offset + FAT_HEADER_SIZE] = FatMethodHeader.build(h)
    return f"{where} {what}"


def s_il(rng, a, data) -> str:
    b = _body(rng, a, data)
    if not b.instructions:
        return "no instructions"
    ins = rng.choice(b.instructions)
    at = b.code_offset + ins.offset
    where = f"method 0x{METHODDEF_TABLE << 24 | b.rid:08X} IL_{ins.offset:04x} {ins.op.name}"
    kind = ins.op.operand
    operand_at = at + ins.op.size
    roll = rng.random()
    if kind.is_token and roll < 0.7:
        old = get(data, operand_at, 4)
        table = rng.choice((old >> 24, old >> 24, 0x01, 0x02, 0x04, 0x06, 0x0A, 0x11, 0x1B, 0x2B, 0x70, 0x00, 0x23,
                            rng.randrange(256)))
        rid = rng.choice((0, 1, old & 0xFFFFFF, (old & 0xFFFFFF) + 1, 0xFFFFFF, rng.randrange(1, 400),
                          rng.randrange(1 << 24)))
        put(data, operand_at, 4, table << 24 | rid)
        return f"{where}: token 0x{old:08X} -> 0x{table << 24 | rid:08X}"
    if kind in (OperandKind.BRANCH8, OperandKind.BRANCH32) and roll < 0.7:
        size = kind.size
        target = rng.choice([i.offset for i in b.instructions] + [b.code_size, b.code_size + 1, ins.offset + 1, -1])
        disp = (target - ins.end) & ((1 << 8 * size) - 1)
        put(data, operand_at, size, disp)
        return f"{where}: target -> IL_{target & 0xFFFF:04x}"
    if kind is OperandKind.SWITCH and roll < 0.7:
        count = get(data, operand_at, 4)
        if rng.random() < 0.5 or not count:
            new = interesting(rng, count, 4)
            put(data, operand_at, 4, new)
            return f"{where}: switch count {count} -> {new}"
        slot = operand_at + 4 + 4 * rng.randrange(count)
        put(data, slot, 4, interesting(rng, get(data, slot, 4), 4, (b.code_size,)))
        return f"{where}: a switch target"
    if kind in (OperandKind.VAR8, OperandKind.VAR16) and roll < 0.7:
        put(data, operand_at, kind.size, interesting(rng, get(data, operand_at, kind.size), kind.size))
        return f"{where}: variable index"
    if roll < 0.85:   # another opcode, maybe one-byte, maybe the 0xFE escape
        old = data[at]
        data[at] = rng.choice((rng.randrange(256), 0xFE, rng.randrange(0x00, 0xE1)))
        if data[at] == 0xFE and at + 1 < len(data):
            data[at + 1] = rng.randrange(0x20)
        return f"{where}: opcode byte 0x{old:02X} -> 0x{data[at]:02X}"
    return f"{where}: " + scribble(rng, data, at, at + ins.size)


def s_eh_section(rng, a, data) -> str:
    bodies = [b for b in a.eh_bodies if b.sections]
    if not bodies:
        return "no EH sections"
    b = rng.choice(bodies)
    data.touched.append(b.rid)
    at, fat, count = rng.choice(b.sections)
    where = f"method 0x{METHODDEF_TABLE << 24 | b.rid:08X} EH section @0x{at:X}"
    if rng.random() < 0.3 or not count:
        h = SectionHeader.parse(bytes(data[at:at + SECTION_HEADER_SIZE]))
        what = rng.choice(("eh_table", "opt_il_table", "fat_format", "more_sects", "data_size", "data_size"))
        if what == "data_size":
            limit = (1 << 24) - 1 if h.kind.fat_format else 0xFF
            h.data_size = rng.choice((0, 1, 3, 4, h.data_size - 1, h.data_size + 1, h.data_size + 12, limit,
                                      rng.randrange(limit + 1))) & limit
        else:
            h.kind[what] = not h.kind[what]
            if what == "fat_format":   # the same size, in the other width if it fits
                h.data_size &= (1 << 24) - 1 if h.kind.fat_format else 0xFF
        data[at:at + SECTION_HEADER_SIZE] = SectionHeader.build(h)
        return f"{where}: header {what}"
    layout, size = (FatEHClause, FAT_CLAUSE_SIZE) if fat else (SmallEHClause, SMALL_CLAUSE_SIZE)
    i = rng.randrange(count)
    pos = at + SECTION_HEADER_SIZE + i * size
    c = layout.parse(bytes(data[pos:pos + size]))
    name = rng.choice(("flags", "try_offset", "try_length", "handler_offset", "handler_length",
                       "class_token_or_filter_offset"))
    old = c[name]
    width = layout.subcons[[s.name for s in layout.subcons].index(name)].sizeof()
    top = (1 << 8 * width) - 1
    if name == "flags":
        new = rng.choice((0, 1, 2, 4, 3, 5, 8, 0x10, rng.randrange(1 << 16))) & top
    elif name == "class_token_or_filter_offset":
        new = rng.choice((0, 0x01000000 | rng.randrange(1, 100), 0x02FFFFFF, 0x1B000001, 0x70000001,
                          0x06000001, rng.choice([i.offset for i in b.instructions] or [0]), b.code_size,
                          interesting(rng, old, 4)))
    else:
        new = rng.choice([i.offset for i in b.instructions] + [0, b.code_size, b.code_size + 1, old + 1, old - 1,
                                                                top, interesting(rng, old, width)]) & top
    c[name] = new & top
    data[pos:pos + size] = layout.build(c)
    return f"{where} clause #{i} {name}: 0x{old:X} -> 0x{new & top:X}"


def s_r2r(rng, a, data) -> str:
    if a.r2r is None:
        return s_table_row(rng, a, data)
    offset, size, sections = a.r2r
    roll = rng.random()
    if roll < 0.4:
        h = ReadyToRunHeader.parse(a.data[offset:offset + size])   # clean: an earlier change may break it
        what = rng.choice(("major_version", "minor_version", "flags", "number_of_sections", "section", "section",
                           "section"))
        if what == "section" and h.sections:
            s = rng.choice(h.sections)
            part = rng.choice(("type", "rva", "size"))
            s[part] = interesting(rng, s[part], 4, (len(data), 100, 101, 102, 103, 104, 105, 106, 108, 110))
            # number_of_sections drives the array: keep it as it was so the build succeeds
            raw = ReadyToRunHeader.build(h)
            data[offset:offset + len(raw)] = raw
            return f"r2r section entry {part}"
        if what == "number_of_sections":
            new = interesting(rng, h.number_of_sections, 4)
            put(data, offset + 12, 4, new)      # the header's fixed part ends with the count
            return f"r2r number_of_sections {h.number_of_sections} -> {new}"
        width = {"major_version": 2, "minor_version": 2, "flags": 4}[what] if what != "section" else 4
        h[what if what != "section" else "flags"] = interesting(rng, h[what if what != "section" else "flags"],
                                                                width)
        raw = ReadyToRunHeader.build(h)
        data[offset:offset + len(raw)] = raw
        return f"r2r header {what}"
    kind, start, length = rng.choice(sections)
    if roll < 0.7 and kind in (102, 104):   # RUNTIME_FUNCTIONS, EXCEPTION_INFO: one record's field
        layout = RuntimeFunctionAmd64 if kind == 102 else ExceptionLookupEntry
        n = layout.sizeof()
        i = rng.randrange(max(1, length // n))
        pos = start + i * n
        rec = layout.parse(bytes(data[pos:pos + n]))
        name = rng.choice([s.name for s in layout.subcons])
        rec[name] = interesting(rng, rec[name], 4)
        data[pos:pos + n] = layout.build(rec)
        return f"r2r section {kind} record {i} {name}"
    return f"r2r section {kind}: " + scribble(rng, data, start, start + length)


def s_truncate(rng, a, data) -> str:
    end = rng.choice((rng.randrange(len(data)), a.heaps.get("#~", (len(data), 0))[0] + rng.randrange(64),
                      len(data) - rng.randrange(1, 64)))
    del data[end:]
    return f"file truncated at 0x{end:X}"


STRATEGIES = {
    "pe-header": (s_pe_header, 4),
    "cli-header": (s_cli_header, 4),
    "stream-header": (s_stream_header, 5),
    "tables-header": (s_tables_header, 6),
    "table-row": (s_table_row, 20),
    "heap": (s_heap, 12),
    "method-header": (s_method_header, 10),
    "il": (s_il, 16),
    "eh-section": (s_eh_section, 14),
    "r2r": (s_r2r, 8),
    "truncate": (s_truncate, 2),
}


@dataclass
class Mutant:
    source: str
    seed: int
    strategies: list[str]
    changes: list[str]
    data: bytes
    touched: tuple[int, ...] = ()

    def describe(self) -> str:
        return f"seed {self.seed} ({self.source}): " + "; ".join(self.changes)


def make_mutant(anatomies: list[Anatomy], seed: int) -> Mutant:
    """The mutant of `seed`: its source is picked by the seed, the rest by Random(source:seed)."""
    a = anatomies[seed % len(anatomies)]
    rng = random.Random(f"{a.path.name}:{seed}")
    names = list(STRATEGIES)
    weights = [STRATEGIES[n][1] for n in names]
    data = MutantBytes(a.data)
    data.touched = []
    changes = []
    chosen = rng.choices(names, weights, k=rng.choice((1, 1, 1, 2, 3)))
    chosen.sort(key=lambda n: n == "truncate")   # the others locate fields in the whole file
    for name in chosen:
        changes.append(STRATEGIES[name][0](rng, a, data))
    return Mutant(a.path.name, seed, chosen, changes, bytes(data), tuple(dict.fromkeys(data.touched)))


# ------------------------------------------------------------------------------ the driver

class Hang(BaseException):
    """The per-mutant time limit passed (a BaseException: no `except Exception` of the code
    under test may swallow it)."""


@dataclass
class Outcome:
    step: str
    result: str                  # "ok", "<stage>/<kind>", or a defect "internal/<Exception>" ...
    detail: str = ""

    @property
    def defect(self) -> bool:
        return self.result.split("/")[0] in DEFECTS


@dataclass
class MutantReport:
    seed: int
    source: str
    strategies: list[str]
    changes: list[str]
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def defects(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.defect]


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "llilc_eh" in f.filename] or frames
    f = (ours or [None])[-1]
    inner = frames[-1] if frames else None
    text = f"{Path(f.filename).name}:{f.lineno}" if f else "?"
    if inner is not None and inner is not f:
        text += f" (in {Path(inner.filename).name}:{inner.lineno})"
    return text


def classify(step: str, exc: BaseException | None) -> Outcome:
    """A step's outcome: clean, a named error of an allowed stage, or a defect."""
    if exc is None:
        return Outcome(step, "ok")
    if isinstance(exc, Hang):
        return Outcome(step, "hang", f"past {TIME_LIMIT} s")
    if isinstance(exc, LlilcEhError):
        result = f"{exc.stage}/{exc.kind}"
        if exc.stage not in ALLOWED_STAGES[step]:
            return Outcome(step, f"wrong-stage/{result}", str(exc)[:300])
        if (exc.stage, exc.kind) in OUR_IR:
            return Outcome(step, f"bad-ir/{result}", str(exc)[:300])
        return Outcome(step, result, str(exc)[:300])
    return Outcome(step, f"internal/{type(exc).__name__}", f"{str(exc)[:200]} at {_where(exc)}")


class Runner:
    """Runs mutants in this process: one temporary folder, one file name per source (the
    mutant keeps its source's name, so its references resolve as the source's do)."""

    def __init__(self, sources: list[Path], pipeline_every: int = PIPELINE_EVERY, time_limit: int = TIME_LIMIT,
                 reader_methods: int = READER_METHODS):
        self.anatomies = [Anatomy(p) for p in sources]
        self.pipeline_every = pipeline_every
        self.time_limit = time_limit
        self.reader_methods = reader_methods
        self.folder = Path(tempfile.mkdtemp(prefix="llilc-eh-mutants-"))
        self._pool = None
        self.steps = {"load": self._load, "list": self._list, "il": self._il, "reader": self._reader,
                      "pipeline": self._pipeline, "r2r": self._r2r}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        for f in self.folder.iterdir():
            f.unlink()
        self.folder.rmdir()

    @property
    def pool(self):
        if self._pool is None:
            from llilc_eh.backend.codegen import CodegenPool
            self._pool = CodegenPool(1)
        return self._pool

    def mutant(self, seed: int) -> Mutant:
        return make_mutant(self.anatomies, seed)

    def clean(self, index: int = 0) -> Mutant:
        """Source `index` unchanged (seed -1): what the controls run a broken stage on."""
        a = self.anatomies[index]
        return Mutant(a.path.name, -1, [], [], a.data)

    def run(self, seed: int, *, raise_internal: bool = False) -> MutantReport:
        return self.execute(self.mutant(seed), raise_internal=raise_internal)

    def execute(self, m: Mutant, *, raise_internal: bool = False) -> MutantReport:
        seed = m.seed
        report = MutantReport(seed, m.source, m.strategies, m.changes)
        path = self.folder / m.source
        path.write_bytes(m.data)
        state: dict = {"seed": seed, "path": path, "touched": m.touched}
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(self.time_limit)
        try:
            for step in STEPS:
                try:
                    self.steps[step](state, report)
                except (LlilcEhError, Hang) as exc:
                    report.outcomes.append(classify(step, exc))
                    if step == "load" or isinstance(exc, Hang):
                        break
                except Exception as exc:  # noqa: BLE001 - the harness classifies; it does not hide
                    if raise_internal:
                        raise
                    report.outcomes.append(classify(step, exc))
                    if step == "load":
                        break
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        return report

    # -- the steps: what a user's commands do ------------------------------------------------

    def _record(self, report: MutantReport, step: str, fn, *args):
        """One method's part of a step: its own outcome, the step goes on with the next."""
        try:
            fn(*args)
        except LlilcEhError as exc:
            report.outcomes.append(classify(step, exc))
            return False
        return True

    def _load(self, state, report):
        asm = Assembly(state["path"])
        state["asm"] = asm
        asm.method_count
        state["rids"] = list(asm.methods_with_il())
        report.outcomes.append(Outcome("load", "ok"))

    def _list(self, state, report):
        asm = state["asm"]
        bodies = {}
        for rid in state["rids"]:
            def one(rid=rid):
                asm.method(rid)
                bodies[rid] = asm.body(rid)
            self._record(report, "list", one)
        state["eh"] = [rid for rid, b in bodies.items() if b.has_eh]
        state["bodies"] = bodies
        report.outcomes.append(Outcome("list", "ok"))

    def _il(self, state, report):
        from llilc_eh.il.listing import render
        from llilc_eh.il.method import analyze
        asm = state.get("asm")
        if asm is None:
            return
        names = asm.names
        analyzed = state["analyzed"] = {}
        for rid in state.get("eh", ()):
            def one(rid=rid):
                m = analyze(state["bodies"][rid])
                render(m, names.token, names.type_name)
                if not m.errors:
                    analyzed[rid] = m
            self._record(report, "il", one)
        report.outcomes.append(Outcome("il", "ok"))

    def _reader_rids(self, state) -> list[int]:
        """The methods a mutation touched that still analyse cleanly, then others at random."""
        analyzed = state.get("analyzed", {})
        first = [rid for rid in state["touched"] if rid in analyzed][:self.reader_methods]
        rest = sorted(set(analyzed) - set(first))
        rng = random.Random(state["seed"])
        return first + sorted(rng.sample(rest, min(self.reader_methods - len(first), len(rest))))

    def _reader(self, state, report):
        from llilc_eh.pipeline import Pipeline
        if "asm" not in state:
            return
        pipeline = Pipeline(state["asm"], None, differential=False)
        for rid in self._reader_rids(state):
            run = pipeline.front(rid, state["analyzed"][rid])
            if run.error is not None:
                report.outcomes.append(classify("reader", run.error))
        report.outcomes.append(Outcome("reader", "ok"))

    def _pipeline(self, state, report):
        from llilc_eh.pipeline import Pipeline
        if "asm" not in state or not self.pipeline_every or state["seed"] % self.pipeline_every:
            return
        rids = self._reader_rids(state)[:1]
        for run in Pipeline(state["asm"], self.pool, opt=2).run_many(rids):
            if run.error is not None:
                report.outcomes.append(classify("pipeline", run.error))
        report.outcomes.append(Outcome("pipeline", "ok"))

    def _r2r(self, state, report):
        from llilc_eh.assembly.r2r.reader import ReadyToRunImage
        from llilc_eh.check.r2r import check_method
        asm = state.get("asm")
        if asm is None:
            return
        try:
            image = ReadyToRunImage(asm)
        except LlilcEhError as exc:
            if exc.kind != "not-ready-to-run":
                raise
            return
        bodies = list(image.methods())
        image.summary()
        cache: dict = {}
        for m in bodies:
            if m.has_eh:
                self._record(report, "r2r", check_method, asm, image, m, "coreclr-psp", cache)
        report.outcomes.append(Outcome("r2r", "ok"))


def _alarm(signum, frame):
    raise Hang()


# ------------------------------------------------------------------------------ the campaign

_RUNNER: Runner | None = None


def _worker_init(sources, pipeline_every, time_limit):
    global _RUNNER
    from llilc_eh.batch import tune_gc
    tune_gc()
    _RUNNER = Runner(sources, pipeline_every, time_limit)
    import atexit
    atexit.register(_RUNNER.close)


def _worker_run(seed: int) -> MutantReport:
    return _RUNNER.run(seed)


def campaign(seeds, sources, jobs: int = 1, pipeline_every: int = PIPELINE_EVERY, time_limit: int = TIME_LIMIT):
    """Every seed's report, in seed order."""
    if jobs <= 1:
        _worker_init(sources, pipeline_every, time_limit)
        for seed in seeds:
            yield _RUNNER.run(seed)
        return
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(jobs, _worker_init, (sources, pipeline_every, time_limit)) as pool:
        yield from pool.imap(_worker_run, seeds, chunksize=8)


def tally(reports) -> dict[str, collections.Counter]:
    """Outcome counts by step, over every method outcome of every mutant."""
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in reports:
        for o in r.outcomes:
            counts[o.step][o.result] += 1
    return counts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=1000, help="mutants to run (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="first seed; mutant i has seed SEED+i")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--source", action="append", help="an assembly to mutate (repeatable; default: the sample, "
                                                     "a small and a mid-sized R2R framework assembly)")
    p.add_argument("--pipeline-every", type=int, default=PIPELINE_EVERY,
                   help="run the whole pipeline on one method of every Nth mutant (0: never)")
    p.add_argument("--time-limit", type=int, default=TIME_LIMIT, help="seconds per mutant")
    p.add_argument("--show", action="append", default=[], metavar="STAGE/KIND",
                   help="also list the seeds of every outcome starting with this (e.g. reader/llvm-parse)")
    p.add_argument("--replay", type=int, metavar="SEED", help="run one mutant, print its changes and outcomes "
                                                              "and the traceback of a defect")
    p.add_argument("--write", metavar="FILE", help="with --replay: write the mutant's bytes to FILE")
    args = p.parse_args(argv)
    try:
        sources = [Path(s) for s in args.source] if args.source else default_sources()
        missing = [s for s in sources if not s.is_file()]
        if missing:
            print(f"mutate: no such assembly: {', '.join(map(str, missing))} (tools/fetch_corpus.py fetches the "
                  "corpus)", file=sys.stderr)
            return 1
        if args.replay is not None:
            return replay(args.replay, sources, args)
        return run_campaign(args, sources)
    except KeyboardInterrupt:
        print("\nmutate: interrupted", file=sys.stderr)
        return 130


def replay(seed: int, sources, args) -> int:
    runner = Runner(sources, args.pipeline_every, args.time_limit)
    try:
        m = runner.mutant(seed)
        print(m.describe())
        if args.write:
            Path(args.write).write_bytes(m.data)
            print(f"written to {args.write}")
        report = runner.run(seed)
        for o in report.outcomes:
            print(f"  {o.step:<9} {o.result}  {o.detail}".rstrip())
        if report.defects:
            try:
                runner.run(seed, raise_internal=True)
            except Exception:  # noqa: BLE001 - shown for the one replayed mutant
                traceback.print_exc()
        return 2 if report.defects else 0
    finally:
        runner.close()


def run_campaign(args, sources) -> int:
    t0 = time.perf_counter()
    seeds = range(args.seed, args.seed + args.count)
    reports, defects = [], []
    by_strategy: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in campaign(seeds, sources, args.jobs, args.pipeline_every, args.time_limit):
        reports.append(r)
        if len(reports) % 500 == 0:
            print(f"mutate: {len(reports)}/{args.count} mutants, {len(defects)} with defects, "
                  f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        for s in r.strategies:
            by_strategy[s]["mutants"] += 1
            by_strategy[s]["with defects"] += bool(r.defects)
        if r.defects:
            defects.append(r)
            print(f"mutate: defect at seed {r.seed}: {', '.join(o.result for o in r.defects)}", file=sys.stderr,
                  flush=True)
    counts = tally(reports)
    print(f"{len(reports)} mutants (seeds {args.seed}..{args.seed + args.count - 1}) of "
          f"{', '.join(s.name for s in sources)} in {time.perf_counter() - t0:.0f} s")
    print(f"mutants with a defect ({', '.join(DEFECTS)}): {len(defects)}")
    print("\noutcomes by step (a step records one outcome per method that failed, and one 'ok' when it finished):")
    for step in STEPS:
        if step in counts:
            print(f"  {step}: {sum(counts[step].values())}")
            for result, n in sorted(counts[step].items(), key=lambda kv: (-kv[1], kv[0])):
                print(f"    {n:7}  {result}")
    print("\nmutants by strategy:")
    for s, c in sorted(by_strategy.items()):
        print(f"  {s:<14} {c['mutants']:6}  with defects {c['with defects']}")
    if args.show:
        print(f"\noutcomes {', '.join(args.show)} (replay with --replay SEED):")
        for r in reports:
            for o in r.outcomes:
                if o.result.startswith(tuple(args.show)):
                    print(f"  seed {r.seed} {r.source} [{'; '.join(r.changes)}] {o.step}: {o.result} {o.detail}")
    if defects:
        print("\ndefects (replay with --replay SEED):")
        for r in defects:
            for o in r.defects:
                print(f"  seed {r.seed} {r.source} [{'; '.join(r.changes)}] {o.step}: {o.result} {o.detail}")
    return 2 if defects else 0


if __name__ == "__main__":
    sys.exit(main())
