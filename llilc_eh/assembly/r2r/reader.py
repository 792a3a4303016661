"""`ReadyToRunImage`: the compiled bodies of a ReadyToRun (R2R) assembly and their native EH.

What is read, and from where (readytorun-format.md, readytorun.h):

- The READYTORUN_HEADER, found through the CLR header's ManagedNativeHeader directory:
  signature 'RTR', version, flags, the section table. The COFF machine of a non-Windows
  image is the architecture XORed with an OS constant (Linux: AMD64 ^ 0x7B79 = 0xFD1D);
  both are reported. Only x64 code is read (its RUNTIME_FUNCTION has three fields).
- RUNTIME_FUNCTIONS (102): every code range with its own unwind data, sorted by RVA. A method
  body owns the runtime function its entry point names (its *main* range) and every one
  after it up to the next entry point: those are its funclets (handlers and filters).
- METHODDEF_ENTRY_POINTS (103): a NativeArray indexed by MethodDef RID - 1; each element is
  the runtime-function index shifted left by one (two when fixups follow), and a nibble-
  encoded list of import cells the runtime fills before the code may run (inline, or at a
  backward offset when several methods share one list).
- INSTANCE_METHOD_ENTRY_POINTS (109): a NativeHashtable of the compiled generic
  instantiations; each entry is an R2R method signature (flags, [owner type], method token,
  [instantiation], [constraint]) followed by the same entry-point value. The signature is
  decoded far enough to find the MethodDef it instantiates; entries whose token is a
  MemberRef, a slot, or lives in another module (a module override) stay unmapped, with
  the reason.
- EXCEPTION_INFO (104): {MethodStartRVA, ExceptionInfoRVA} sorted by method start and closed
  by a sentinel entry; a method's clauses are the 24-byte CORINFO_EH_CLAUSEs up to the next
  entry's ExceptionInfoRVA. Their offsets are relative to the method start and the two
  "length" fields hold end offsets.

Several entry points may name one runtime function (one body serving several methods or
instantiations): they become one `R2RMethod` with all their tokens. Several runtime
functions may name one UNWIND_INFO (identical prologs share it): `unwind_users(rva)`.

Everything is lazy: opening parses only the header; the runtime-function table, the entry
points and the EH table are each read on first use, in bulk, and an `R2RMethod` is built only
when asked for (`summary()` counts without building any).

Measured on .NET Core 3.1 (dotnetcore2 3.1.23, crossgen/RyuJIT, R2R 3.1, tests pin them):

- CoreLib: 29,855 runtime functions = 28,330 bodies (16,233 MethodDef entries on 16,138
  bodies, 12,192 instantiations) + 1,525 funclets, and every funclet belongs to one of the
  1,254 bodies with EH (1,730 clauses). Funclets always follow their main body back to back.
- 43 CoreLib bodies serve several MethodDefs: P/Invoke marshalling stubs (no IL; RVA 0)
  shared by P/Invokes with the same marshalling signature (one by 22). 26 stubs have EH
  (a fault clause around the native call).
- Faults outnumber finallys (CoreLib 719 vs 146): RyuJIT clones a finally into the normal
  path and reports the exceptional copy as a fault. A cloned finally's code is marked by a
  FINALLY|DUPLICATED clause with an empty try at the clone's start, always after all other
  clauses; 39 of the 949 in the corpus mark a clone inside a funclet, not the main body.
- 162 of the 163 R2R images set header flag 0x2 (SKIP_TYPE_VALIDATION in readytorun.h; the
  format document's table calls 0x2 COMPOSITE). mscorlib.dll and System.Runtime.
  WindowsRuntime.dll in the runtime wheel are IL-only.
- Every UNWIND_INFO is version 1 with flags EHANDLER|UHANDLER; CoreLib's 29,855 runtime
  functions use 10,400 distinct ones, one of them 1,008 times.
- No instance entry point of the corpus uses a MemberRef, a slot or a module override: all
  44,903 map to a MethodDef of their own image.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from construct import ConstructError

from llilc_eh.errors import AssemblyError

from ..loader import Assembly
from ..native import ClauseFlags, CodeRange, NativeClause, NativeMethod
from ..signatures import decode_compressed_int, decode_compressed_uint
from ..structs import CorInfoEHClause, bulk_format
from .native_format import NativeArray, NativeHashtable, NativeReader, NibbleReader
from .structs import (READYTORUN_HEADER_FIXED_SIZE, READYTORUN_SIGNATURE, ExceptionLookupEntry,
                      ImportSection, Machine, MethodDefRowStart, MethodSigFlags, ReadyToRunFlags, ReadyToRunHeader,
                      RuntimeFunctionAmd64, SectionType, TargetOS, ZapSigElement, split_machine)

METHODDEF = 0x06
MEMBERREF = 0x0A
SUPPORTED_MAJOR_VERSIONS = range(1, 10)  # the layouts read here are unchanged through v9
EH_CLAUSE_SIZE = CorInfoEHClause.sizeof()
RUNTIME_FUNCTION_SIZE = RuntimeFunctionAmd64.sizeof()
EXCEPTION_LOOKUP_ENTRY_SIZE = ExceptionLookupEntry.sizeof()
IMPORT_SECTION_SIZE = ImportSection.sizeof()
POINTER_SIZE = 8
_SENTINEL_RVA = 0xFFFFFFFF

_RUNTIME_FUNCTION_FORMAT = bulk_format(RuntimeFunctionAmd64)
_LOOKUP_FORMAT = bulk_format(ExceptionLookupEntry)
_CLAUSE_FORMAT = bulk_format(CorInfoEHClause)
_METHODDEF_ROW_FORMAT = bulk_format(MethodDefRowStart)
_CODE_TYPE_MASK, _CODE_TYPE_IL = 0x3, 0x0
# Plain ints for the per-entry hot path (IntFlag operations cost a call each).
_SIG_UPDATE_CONTEXT = int(MethodSigFlags.UPDATE_CONTEXT)
_SIG_OWNER_TYPE = int(MethodSigFlags.OWNER_TYPE)
_SIG_SLOT = int(MethodSigFlags.SLOT_INSTEAD_OF_TOKEN)
_SIG_MEMBER_REF = int(MethodSigFlags.MEMBER_REF_TOKEN)
_SIG_INSTANTIATION = int(MethodSigFlags.METHOD_INSTANTIATION)
_SIG_CONSTRAINED = int(MethodSigFlags.CONSTRAINED)
_SIG_FLAGS: dict[int, MethodSigFlags] = {}   # MethodImplAttributes.CodeTypeMask (II.23.1.11)


# ====================================================================== values

@dataclass(frozen=True)
class Section:
    """One READYTORUN_SECTION."""

    type: int
    rva: int
    size: int

    @property
    def name(self) -> str:
        try:
            return SectionType(self.type).name
        except ValueError:
            return f"UNKNOWN_{self.type}"

    def __str__(self) -> str:
        return f"{self.name:<30} rva 0x{self.rva:08X} size {self.size}"


@dataclass(frozen=True)
class Header:
    """READYTORUN_HEADER with its sections, plus what the COFF header says about the target."""

    rva: int
    major_version: int
    minor_version: int
    flags: ReadyToRunFlags
    sections: tuple[Section, ...]
    machine: Machine
    target_os: TargetOS

    @property
    def version(self) -> str:
        return f"{self.major_version}.{self.minor_version}"

    def section(self, kind: SectionType) -> Section | None:
        return next((s for s in self.sections if s.type == kind), None)

    def __str__(self) -> str:
        flags = "|".join(f.name for f in ReadyToRunFlags if f in self.flags) or "none"
        lines = [f"ReadyToRun {self.version} at rva 0x{self.rva:X}, {self.machine.name} "
                 f"{self.target_os.name}, flags {flags}"]
        lines += [f"  {s}" for s in self.sections]
        return "\n".join(lines)


@dataclass(frozen=True)
class RuntimeFunction:
    """One RUNTIME_FUNCTION: a code range [begin, end) with its own UNWIND_INFO."""

    index: int
    begin_rva: int
    end_rva: int
    unwind_rva: int

    @property
    def size(self) -> int:
        return self.end_rva - self.begin_rva

    def __str__(self) -> str:
        return (f"#{self.index} [0x{self.begin_rva:08X}, 0x{self.end_rva:08X}) "
                f"unwind 0x{self.unwind_rva:08X}")


@dataclass(frozen=True)
class FixupCell:
    """An import cell the runtime must fill before a method's code may run."""

    import_section: int
    slot: int


@dataclass(frozen=True)
class EntryPoint:
    """A decoded entry-point value: the runtime function it starts and its fixup list."""

    runtime_function: int
    fixups_offset: int | None   # file offset of the nibble-encoded fixup list, if any


@dataclass(frozen=True)
class InstanceEntry:
    """One INSTANCE_METHOD_ENTRY_POINTS entry: a compiled generic instantiation."""

    flags: MethodSigFlags
    token: int | None             # the method token as written (MethodDef or MemberRef), None for a slot
    method_def: int | None        # the MethodDef of this image it instantiates, when known
    unmapped_reason: str | None   # why `method_def` is None
    module_override: int | None   # module index the token is resolved in, when not this module
    entry: EntryPoint
    signature_offset: int         # file offset of the R2R method signature

    @property
    def mapped(self) -> bool:
        return self.method_def is not None


@dataclass(frozen=True)
class R2RMethod:
    """One compiled body: its code ranges, their unwind RVAs, and its native EH clauses."""

    tokens: tuple[int, ...]                  # MethodDef tokens whose code this is, sorted
    method_def_entries: tuple[int, ...]      # those reached through METHODDEF_ENTRY_POINTS
    instantiations: tuple[InstanceEntry, ...]  # instance entry points naming this body
    main: RuntimeFunction
    funclets: tuple[RuntimeFunction, ...]
    native: NativeMethod
    has_il: bool | None    # False: no token has an IL body (a P/Invoke or IL stub); None: unknown

    @property
    def entry_index(self) -> int:
        return self.main.index

    @property
    def rva(self) -> int:
        return self.main.begin_rva

    @property
    def is_instantiation(self) -> bool:
        """Compiled for a generic instantiation (reached only through the instance entry points)."""
        return not self.method_def_entries

    @property
    def has_eh(self) -> bool:
        return bool(self.native.clauses)

    @property
    def is_stub(self) -> bool:
        return self.has_il is False

    @property
    def runtime_functions(self) -> tuple[RuntimeFunction, ...]:
        return (self.main, *self.funclets)

    @property
    def unwind_rvas(self) -> tuple[int, ...]:
        return tuple(rf.unwind_rva for rf in self.runtime_functions)

    def __str__(self) -> str:
        who = ", ".join(f"0x{t:08X}" for t in self.tokens) or "unmapped"
        tags = [t for t, on in (("instantiation", self.is_instantiation), ("stub", self.is_stub)) if on]
        lines = [f"body at 0x{self.rva:08X} ({who}){' [' + ', '.join(tags) + ']' if tags else ''}: "
                 f"main {self.main}"]
        lines += [f"  funclet {f}" for f in self.funclets]
        lines += [f"  {c}" for c in self.native.clauses]
        return "\n".join(lines)


@dataclass(frozen=True)
class R2RSummary:
    """Counts over one image (or, added up, a corpus)."""

    bodies: int = 0
    eh_bodies: int = 0
    clauses: int = 0
    clauses_by_kind: tuple[tuple[str, int], ...] = ()
    duplicate_clauses: int = 0
    funclets: int = 0
    funclets_in_eh_bodies: int = 0
    runtime_functions: int = 0
    stub_bodies: int = 0
    stub_eh_bodies: int = 0
    instantiation_bodies: int = 0
    shared_bodies: int = 0                  # bodies serving more than one entry point
    instance_entries: int = 0
    instance_entries_mapped: int = 0
    shared_unwind_rvas: int = 0             # UNWIND_INFOs used by more than one runtime function

    def __add__(self, other: "R2RSummary") -> "R2RSummary":
        kinds = dict(self.clauses_by_kind)
        for k, n in other.clauses_by_kind:
            kinds[k] = kinds.get(k, 0) + n
        values = {f: getattr(self, f) + getattr(other, f) for f in self.__dataclass_fields__
                  if f != "clauses_by_kind"}
        return R2RSummary(**values, clauses_by_kind=tuple(sorted(kinds.items())))

    def __str__(self) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in self.clauses_by_kind)
        return (f"{self.bodies} bodies ({self.instantiation_bodies} instantiations, {self.shared_bodies} "
                f"shared, {self.stub_bodies} without IL), {self.eh_bodies} with EH "
                f"({self.stub_eh_bodies} without IL); {self.clauses} clauses ({kinds}; "
                f"{self.duplicate_clauses} duplicated); {self.funclets} funclets "
                f"({self.funclets_in_eh_bodies} in EH bodies); {self.runtime_functions} runtime functions "
                f"({self.shared_unwind_rvas} shared unwind blobs); instance entry points "
                f"{self.instance_entries} ({self.instance_entries_mapped} mapped, "
                f"{self.instance_entries - self.instance_entries_mapped} unmapped)")


# ====================================================================== the image

class ReadyToRunImage:
    """The ReadyToRun view of an `Assembly`."""

    def __init__(self, assembly: Assembly):
        self.assembly = assembly
        self.data = assembly.data
        self._view = memoryview(self.data)
        self.header = self._read_header()

    @classmethod
    def open(cls, source: Assembly | str | Path) -> "ReadyToRunImage":
        return cls(source if isinstance(source, Assembly) else Assembly(source))

    def __repr__(self) -> str:
        return f"ReadyToRunImage({str(self.assembly.path)!r})"

    def _fail(self, reason: str, kind: str) -> AssemblyError:
        return AssemblyError(f"{self.assembly.path.name}: {reason}", kind=kind)

    # ------------------------------------------------------------------ header

    def _read_header(self) -> Header:
        pe = self.assembly.pe
        cor = pe.net.struct
        rva = getattr(cor, "ManagedNativeHeaderRva", 0) or 0
        size = getattr(cor, "ManagedNativeHeaderSize", 0) or 0
        if rva == 0 or size == 0:
            raise self._fail("not a ReadyToRun image: the CLR header has no ManagedNativeHeader",
                             "not-ready-to-run")
        offset = self.assembly.rva_to_offset(rva)
        if offset is None:
            raise self._fail(f"ManagedNativeHeader RVA 0x{rva:X} is not inside any section", "bad-r2r-header")
        if size < READYTORUN_HEADER_FIXED_SIZE or offset + READYTORUN_HEADER_FIXED_SIZE > len(self.data):
            raise self._fail(f"ManagedNativeHeader at RVA 0x{rva:X} is {size} bytes, too small for a "
                             f"READYTORUN_HEADER ({READYTORUN_HEADER_FIXED_SIZE} + sections)", "bad-r2r-header")
        signature = int.from_bytes(self.data[offset:offset + 4], "little")
        if signature != READYTORUN_SIGNATURE:
            raise self._fail(f"not a ReadyToRun image: the ManagedNativeHeader at RVA 0x{rva:X} has signature "
                             f"0x{signature:08X}, not 'RTR' 0x{READYTORUN_SIGNATURE:08X}", "not-ready-to-run")
        try:
            raw = ReadyToRunHeader.parse(self._view[offset:offset + size])
        except ConstructError:
            count = int.from_bytes(self.data[offset + 12:offset + 16], "little")
            raise self._fail(f"READYTORUN_HEADER at RVA 0x{rva:X} is truncated: {count} sections need "
                             f"{READYTORUN_HEADER_FIXED_SIZE + 12 * count} bytes, the directory gives {size}",
                             "bad-r2r-header") from None
        if raw.major_version not in SUPPORTED_MAJOR_VERSIONS:
            raise self._fail(f"ReadyToRun version {raw.major_version}.{raw.minor_version} is not supported "
                             f"(majors {SUPPORTED_MAJOR_VERSIONS.start}-{SUPPORTED_MAJOR_VERSIONS.stop - 1})",
                             "unsupported-r2r-version")
        machine = split_machine(pe.FILE_HEADER.Machine)
        if machine is None:
            raise self._fail(f"COFF machine 0x{pe.FILE_HEADER.Machine:04X} is no known architecture XOR OS "
                             f"value", "bad-r2r-machine")
        if machine[0] != Machine.AMD64:
            raise self._fail(f"{machine[0].name} ({machine[1].name}) code is not supported: only x64 "
                             f"RUNTIME_FUNCTIONs are read", "unsupported-r2r-machine")
        flags = ReadyToRunFlags(raw.flags)
        if ReadyToRunFlags.COMPONENT in flags or \
                any(s.type == SectionType.COMPONENT_ASSEMBLIES for s in raw.sections):
            raise self._fail("composite ReadyToRun images (and their components) are not supported",
                             "unsupported-r2r-composite")
        sections = []
        last = -1
        for s in raw.sections:
            section = Section(s.type, s.rva, s.size)
            if s.type <= last:
                raise self._fail(f"section table not sorted by type: {section.name} after type {last}",
                                 "bad-r2r-section")
            last = s.type
            if s.size and self._section_end(s.rva, s.size) is None:
                raise self._fail(f"section {section.name} [0x{s.rva:X}, +{s.size}) is not inside the "
                                 f"image's raw data", "bad-r2r-section")
            sections.append(section)
        return Header(rva, raw.major_version, raw.minor_version, flags, tuple(sections), *machine)

    def _section_end(self, rva: int, size: int) -> int | None:
        """File offset where [rva, rva+size) ends, if the whole range is in one section's raw data."""
        start = self.assembly.rva_to_offset(rva)
        if start is None or size < 0:
            return None
        if size == 0:
            return start
        last = self.assembly.rva_to_offset(rva + size - 1)
        return last + 1 if last is not None and last - start == size - 1 else None

    def _section_bytes(self, kind: SectionType) -> tuple[int, int] | None:
        """(file offset, file end) of a section, or None when the image has none."""
        s = self.header.section(kind)
        if s is None:
            return None
        start = self.assembly.rva_to_offset(s.rva) if s.size else 0
        return start, start + s.size

    @property
    def sections(self) -> tuple[Section, ...]:
        return self.header.sections

    @property
    def machine(self) -> Machine:
        return self.header.machine

    @property
    def target_os(self) -> TargetOS:
        return self.header.target_os

    @cached_property
    def compiler_identifier(self) -> str | None:
        span = self._section_bytes(SectionType.COMPILER_IDENTIFIER)
        return bytes(self._view[span[0]:span[1]]).rstrip(b"\0").decode("utf-8", "replace") if span else None

    # ------------------------------------------------------------------ runtime functions

    @cached_property
    def runtime_functions(self) -> tuple[RuntimeFunction, ...]:
        span = self._section_bytes(SectionType.RUNTIME_FUNCTIONS)
        if span is None:
            return ()
        start, end = span
        if (end - start) % RUNTIME_FUNCTION_SIZE:
            raise self._fail(f"RUNTIME_FUNCTIONS is {end - start} bytes, not a multiple of "
                             f"{RUNTIME_FUNCTION_SIZE}", "bad-runtime-functions")
        table = tuple(RuntimeFunction(i, b, e, u) for i, (b, e, u) in
                      enumerate(struct.iter_unpack(_RUNTIME_FUNCTION_FORMAT, self._view[start:end])))
        previous_end = 0
        for rf in table:
            if not previous_end <= rf.begin_rva < rf.end_rva:
                raise self._fail(f"runtime function {rf} is empty, unsorted or overlaps the previous one "
                                 f"(ends 0x{previous_end:X})", "bad-runtime-functions")
            previous_end = rf.end_rva
        return table

    @cached_property
    def _runtime_function_starts(self) -> list[int]:
        return [rf.begin_rva for rf in self.runtime_functions]

    def runtime_function_at(self, rva: int) -> RuntimeFunction | None:
        """The runtime function whose code range holds `rva`."""
        i = bisect.bisect_right(self._runtime_function_starts, rva) - 1
        if i >= 0 and rva < self.runtime_functions[i].end_rva:
            return self.runtime_functions[i]
        return None

    @cached_property
    def _unwind_users(self) -> dict[int, tuple[int, ...]]:
        users: dict[int, list[int]] = {}
        for rf in self.runtime_functions:
            users.setdefault(rf.unwind_rva, []).append(rf.index)
        return {rva: tuple(v) for rva, v in users.items()}

    def unwind_users(self, rva: int) -> tuple[int, ...]:
        """Indices of the runtime functions whose UNWIND_INFO is at `rva` (often more than one)."""
        return self._unwind_users.get(rva, ())

    def unwind_bytes(self, rva: int) -> memoryview:
        """The image from `rva` to the end of its PE section's raw data: UNWIND_INFO, its
        personality RVA and what follows. The decoder decides how much it needs."""
        for s in self.assembly.pe.sections:
            vsize = max(s.Misc_VirtualSize, s.SizeOfRawData)
            if s.VirtualAddress <= rva < s.VirtualAddress + vsize:
                delta = rva - s.VirtualAddress
                raw_end = min(s.SizeOfRawData, s.Misc_VirtualSize or s.SizeOfRawData)
                if delta < raw_end:
                    return self._view[s.PointerToRawData + delta:s.PointerToRawData + raw_end]
        raise self._fail(f"unwind RVA 0x{rva:X} is not inside any section's raw data", "bad-unwind-rva")

    # ------------------------------------------------------------------ imports and fixups

    @cached_property
    def import_sections(self) -> tuple:
        """The READYTORUN_IMPORT_SECTIONs (construct containers), in index order."""
        span = self._section_bytes(SectionType.IMPORT_SECTIONS)
        if span is None:
            return ()
        start, end = span
        if (end - start) % IMPORT_SECTION_SIZE:
            raise self._fail(f"IMPORT_SECTIONS is {end - start} bytes, not a multiple of {IMPORT_SECTION_SIZE}",
                             "bad-import-sections")
        return tuple(ImportSection.parse(self._view[o:o + IMPORT_SECTION_SIZE])
                     for o in range(start, end, IMPORT_SECTION_SIZE))

    def _slot_count(self, index: int) -> int:
        s = self.import_sections[index]
        return s.size // (s.entry_size or POINTER_SIZE)

    def fixups(self, entry: EntryPoint) -> tuple[FixupCell, ...]:
        """Decode an entry point's fixup list: import section index (delta-coded), then its slot
        indices (delta-coded, 0-terminated), until a 0 section delta."""
        if entry.fixups_offset is None:
            return ()
        nibbles = NibbleReader(self._reader, entry.fixups_offset)
        cells: list[FixupCell] = []
        section = nibbles.unsigned()
        while True:
            if section >= len(self.import_sections):
                raise self._fail(f"fixup list at file offset 0x{entry.fixups_offset:X} names import section "
                                 f"{section} of {len(self.import_sections)}", "bad-fixups")
            slots = self._slot_count(section)
            slot = nibbles.unsigned()
            while True:
                if slot >= slots:
                    raise self._fail(f"fixup list at file offset 0x{entry.fixups_offset:X} names slot {slot} "
                                     f"of import section {section} ({slots} slots)", "bad-fixups")
                cells.append(FixupCell(section, slot))
                delta = nibbles.unsigned()
                if delta == 0:
                    break
                slot += delta
            delta = nibbles.unsigned()
            if delta == 0:
                return tuple(cells)
            section += delta

    @cached_property
    def _reader(self) -> NativeReader:
        return NativeReader(self._view, what=self.assembly.path.name)

    def _entry_point(self, offset: int) -> tuple[EntryPoint, int]:
        """Decode an entry-point value at `offset`: (entry, offset after the value)."""
        reader = self._reader
        value, after = reader.decode_unsigned(offset)
        fixups = None
        if value & 1:
            if value & 2:
                back, _ = reader.decode_unsigned(after)
                fixups = after - back   # a list shared with other methods, written earlier
            else:
                fixups = after
            index = value >> 2
        else:
            index = value >> 1
        if index >= len(self.runtime_functions):
            raise self._fail(f"entry point at file offset 0x{offset:X} names runtime function {index} of "
                             f"{len(self.runtime_functions)}", "bad-entry-point")
        return EntryPoint(index, fixups), after

    # ------------------------------------------------------------------ entry points

    @cached_property
    def method_def_entry_points(self) -> dict[int, EntryPoint]:
        """MethodDef token -> entry point, for every method compiled in its own right."""
        span = self._section_bytes(SectionType.METHODDEF_ENTRY_POINTS)
        if span is None:
            return {}
        reader = NativeReader(self._view, span[0], span[1], what=f"{self.assembly.path.name} METHODDEF_ENTRY_POINTS")
        array = NativeArray(reader, span[0])
        if array.count > self.assembly.method_count:
            raise self._fail(f"METHODDEF_ENTRY_POINTS has {array.count} slots but the MethodDef table "
                             f"{self.assembly.method_count} rows", "bad-entry-point")
        return {METHODDEF << 24 | (index + 1): self._entry_point(offset)[0] for index, offset in array.items()}

    @cached_property
    def instance_entry_points(self) -> tuple[InstanceEntry, ...]:
        """Every compiled generic instantiation, in hashtable order."""
        span = self._section_bytes(SectionType.INSTANCE_METHOD_ENTRY_POINTS)
        if span is None:
            return ()
        table = NativeHashtable(self._reader, span[0], span[1])
        return tuple(self._instance_entry(e.offset) for e in table.entries())

    def _instance_entry(self, offset: int) -> InstanceEntry:
        try:
            head = read_method_signature(self.data, offset)
        except AssemblyError as e:
            raise self._fail(f"INSTANCE_METHOD_ENTRY_POINTS: {e.reason}", e.kind) from None
        entry, _ = self._entry_point(head.end)
        token, module = head.token, head.module_override
        method_def, reason = None, None
        if token is None:
            reason = "the signature names a vtable slot, not a token"
        elif module is not None:
            reason = f"token 0x{token:08X} belongs to module override #{module}, not this assembly"
        elif token >> 24 == MEMBERREF:
            reason = f"token 0x{token:08X} is a MemberRef"
        elif not 1 <= token & 0xFFFFFF <= self.assembly.method_count:
            reason = f"MethodDef 0x{token:08X} is past the MethodDef table ({self.assembly.method_count} rows)"
        else:
            method_def = token
        return InstanceEntry(head.flags, token, method_def, reason, module, entry, offset)

    # ------------------------------------------------------------------ exception info

    @cached_property
    def exception_info(self) -> dict[int, tuple[NativeClause, ...]]:
        """Method start RVA -> its native EH clauses (offsets relative to the method start)."""
        span = self._section_bytes(SectionType.EXCEPTION_INFO)
        if span is None:
            return {}
        start, end = span
        if (end - start) % EXCEPTION_LOOKUP_ENTRY_SIZE:
            raise self._fail(f"EXCEPTION_INFO is {end - start} bytes, not a multiple of "
                             f"{EXCEPTION_LOOKUP_ENTRY_SIZE}", "bad-exception-info")
        entries = list(struct.iter_unpack(_LOOKUP_FORMAT, self._view[start:end]))
        if not entries:
            return {}
        if entries[-1][0] != _SENTINEL_RVA:
            raise self._fail("EXCEPTION_INFO lacks its closing sentinel entry (method start 0xFFFFFFFF)",
                             "bad-exception-info")
        result: dict[int, tuple[NativeClause, ...]] = {}
        for (method, info), (next_method, next_info) in zip(entries, entries[1:]):
            size = next_info - info
            if next_method <= method or size <= 0 or size % EH_CLAUSE_SIZE:
                raise self._fail(f"EXCEPTION_INFO entry for method 0x{method:X}: clause bytes "
                                 f"[0x{info:X}, 0x{next_info:X}) or next method 0x{next_method:X} make no "
                                 f"sense (unsorted, empty, or not a multiple of {EH_CLAUSE_SIZE})",
                                 "bad-exception-info")
            at = self._section_end(info, size)
            if at is None:
                raise self._fail(f"EH clauses of method 0x{method:X} at RVA 0x{info:X} (+{size}) are outside "
                                 f"the image", "bad-exception-info")
            result[method] = tuple(
                NativeClause(ClauseFlags(f), ts, te, hs, he, x)
                for f, ts, te, hs, he, x in struct.iter_unpack(_CLAUSE_FORMAT, self._view[at - size:at]))
        return result

    # ------------------------------------------------------------------ bodies

    @cached_property
    def _layout(self) -> "_Layout":
        """Which entry points start which runtime function, sorted: the skeleton every body
        query uses. `R2RMethod` values are built from it on demand."""
        by_entry: dict[int, tuple[list[int], list[InstanceEntry]]] = {}
        for token, entry in self.method_def_entry_points.items():
            by_entry.setdefault(entry.runtime_function, ([], []))[0].append(token)
        for inst in self.instance_entry_points:
            by_entry.setdefault(inst.entry.runtime_function, ([], []))[1].append(inst)
        entries = sorted(by_entry)
        rfs = self.runtime_functions
        starts = {rfs[i].begin_rva for i in entries}
        orphans = set(self.exception_info) - starts
        if orphans:
            raise self._fail(f"EXCEPTION_INFO has clauses for {len(orphans)} method start(s) that begin no "
                             f"compiled body (first 0x{min(orphans):X})", "bad-exception-info")
        return _Layout(entries, by_entry, {e: n for n, e in enumerate(entries)})

    def _body(self, n: int) -> R2RMethod:
        cached = self._body_cache.get(n)
        if cached is not None:
            return cached
        layout, rfs = self._layout, self.runtime_functions
        index = layout.entries[n]
        stop = layout.entries[n + 1] if n + 1 < len(layout.entries) else len(rfs)
        main, funclets = rfs[index], rfs[index + 1:stop]
        defs, insts = layout.by_entry[index]
        tokens = _tokens(defs, insts)
        start = main.begin_rva
        native = NativeMethod(CodeRange(0, main.size),
                              tuple(CodeRange(f.begin_rva - start, f.end_rva - start) for f in funclets),
                              self.exception_info.get(start, ()))
        il = self._methods_with_il
        has_il = any(t & 0xFFFFFF in il for t in tokens) if tokens else None
        body = R2RMethod(tokens, tuple(sorted(defs)), tuple(insts), main, funclets, native, has_il)
        self._body_cache[n] = body
        return body

    @cached_property
    def _body_cache(self) -> dict[int, R2RMethod]:
        return {}

    @cached_property
    def _methods_with_il(self) -> frozenset[int]:
        """RIDs of the MethodDefs with an IL body (as `Assembly.has_il` decides), read in one pass."""
        table = self.assembly.pe.net.mdtables.MethodDef
        if table is None:
            return frozenset()
        at, step = table.file_offset, table.row_size
        return frozenset(rid for rid in range(1, table.num_rows + 1)
                         for rva, impl in [struct.unpack_from(_METHODDEF_ROW_FORMAT, self.data, at + (rid - 1) * step)]
                         if rva and impl & _CODE_TYPE_MASK == _CODE_TYPE_IL)

    def methods(self, *, eh_only: bool = False) -> Iterator[R2RMethod]:
        """Every compiled body in RVA order (only those with native EH clauses if `eh_only`)."""
        layout, rfs, eh = self._layout, self.runtime_functions, self.exception_info
        for n, index in enumerate(layout.entries):
            if not eh_only or rfs[index].begin_rva in eh:
                yield self._body(n)

    def __len__(self) -> int:
        return len(self._layout.entries)

    def method_for_token(self, token: int) -> R2RMethod | None:
        """The body compiled for MethodDef `token` itself (not for an instantiation), if any."""
        entry = self.method_def_entry_points.get(token)
        if entry is None:
            return None
        return self._body(self._layout.position[entry.runtime_function])

    @cached_property
    def _instantiations_by_token(self) -> dict[int, list[int]]:
        index: dict[int, list[int]] = {}
        for inst in self.instance_entry_points:
            if inst.method_def is not None:
                index.setdefault(inst.method_def, []).append(inst.entry.runtime_function)
        return index

    def methods_for_token(self, token: int) -> tuple[R2RMethod, ...]:
        """Every body compiled for MethodDef `token`: its own first, then its instantiations' in
        RVA order."""
        own = self.method_for_token(token)
        position = self._layout.position
        others = sorted({position[i] for i in self._instantiations_by_token.get(token, ())})
        return ((own,) if own else ()) + tuple(self._body(n) for n in others if self._body(n) is not own)

    def body_at(self, rva: int) -> R2RMethod | None:
        """The body whose main code or one of whose funclets holds `rva`."""
        rf = self.runtime_function_at(rva)
        if rf is None:
            return None
        n = bisect.bisect_right(self._layout.entries, rf.index) - 1
        return self._body(n) if n >= 0 else None

    @property
    def orphan_runtime_functions(self) -> int:
        """Runtime functions before the first entry point (owned by no body)."""
        entries = self._layout.entries
        return entries[0] if entries else len(self.runtime_functions)

    # ------------------------------------------------------------------ summary

    def summary(self) -> R2RSummary:
        """Counts, computed from the layout without building every `R2RMethod`."""
        layout, rfs, eh, il = self._layout, self.runtime_functions, self.exception_info, self._methods_with_il
        kinds: dict[str, int] = {}
        duplicates = 0
        for clauses in eh.values():
            for c in clauses:
                kinds[c.kind] = kinds.get(c.kind, 0) + 1
                duplicates += c.is_duplicate
        ends = layout.entries[1:] + [len(rfs)]
        eh_bodies = funclets_in_eh = stubs = stub_eh = instantiations = shared = 0
        for index, stop in zip(layout.entries, ends):
            defs, insts = layout.by_entry[index]
            tokens = _tokens(defs, insts)
            stub = bool(tokens) and not any(t & 0xFFFFFF in il for t in tokens)
            has_eh = rfs[index].begin_rva in eh
            eh_bodies += has_eh
            funclets_in_eh += (stop - index - 1) if has_eh else 0
            stubs += stub
            stub_eh += stub and has_eh
            instantiations += not defs
            shared += len(defs) + len(insts) > 1
        return R2RSummary(
            bodies=len(layout.entries),
            eh_bodies=eh_bodies,
            clauses=sum(kinds.values()),
            clauses_by_kind=tuple(sorted(kinds.items())),
            duplicate_clauses=duplicates,
            funclets=len(rfs) - len(layout.entries) - self.orphan_runtime_functions,
            funclets_in_eh_bodies=funclets_in_eh,
            runtime_functions=len(rfs),
            stub_bodies=stubs,
            stub_eh_bodies=stub_eh,
            instantiation_bodies=instantiations,
            shared_bodies=shared,
            instance_entries=len(self.instance_entry_points),
            instance_entries_mapped=sum(i.mapped for i in self.instance_entry_points),
            shared_unwind_rvas=sum(len(u) > 1 for u in self._unwind_users.values()),
        )


@dataclass(frozen=True)
class _Layout:
    entries: list[int]                                             # entry runtime functions, sorted
    by_entry: dict[int, tuple[list[int], list[InstanceEntry]]]     # -> (MethodDef tokens, instances)
    position: dict[int, int]                                       # entry runtime function -> body number


def _tokens(defs: list[int], insts: list[InstanceEntry]) -> tuple[int, ...]:
    if not insts:
        return tuple(sorted(defs))
    return tuple(sorted(set(defs) | {i.method_def for i in insts if i.method_def is not None}))


# ====================================================================== signatures

@dataclass(frozen=True)
class MethodSignatureHead:
    """What an R2R method signature says about the method it names."""

    flags: MethodSigFlags
    token: int | None              # MethodDef or MemberRef token; None when it names a slot
    module_override: int | None    # module index the token lives in, when not the image's own
    end: int                       # offset just after the signature


def read_method_signature(data: bytes, offset: int) -> MethodSignatureHead:
    """Decode an R2R method signature (readytorun-format.md, "Method Signatures"): flags,
    [module index if UpdateContext], [owner type if OwnerType], token or slot, [instantiation
    count and types if MethodInstantiation], [constraint type if Constrained]. A module
    override on the owner type (ELEMENT_TYPE_MODULE_ZAPSIG) moves the token into that module."""
    sig = _SignatureCursor(data, offset)
    raw = sig.uint()
    module = None
    if raw & _SIG_UPDATE_CONTEXT:
        module = sig.uint() or None
    if raw & _SIG_OWNER_TYPE:
        owner_module = sig.skip_type()
        if module is None:
            module = owner_module or None
    token = None
    if raw & _SIG_SLOT:
        sig.uint()
    else:
        token = (MEMBERREF if raw & _SIG_MEMBER_REF else METHODDEF) << 24 | sig.uint()
    if raw & _SIG_INSTANTIATION:
        for _ in range(sig.uint()):
            sig.skip_type()
    if raw & _SIG_CONSTRAINED:
        sig.skip_type()
    flags = _SIG_FLAGS.get(raw) or _SIG_FLAGS.setdefault(raw, MethodSigFlags(raw))
    return MethodSignatureHead(flags, token, module, sig.pos)


class _SignatureCursor:
    """Walks an R2R signature in the image: ECMA-335 compressed integers and type signatures
    with the ZapSig element types, skipping types and reporting a leading module override."""

    __slots__ = ("data", "pos")

    _PLAIN = frozenset([*range(0x01, 0x0F), 0x16, 0x18, 0x19, 0x1C, ZapSigElement.CANON_ZAPSIG])
    _WRAPPERS = frozenset([0x0F, 0x10, 0x1D, 0x45, ZapSigElement.NATIVE_ARRAY_TEMPLATE_ZAPSIG,
                           ZapSigElement.NATIVE_VALUETYPE_ZAPSIG])   # PTR BYREF SZARRAY PINNED + a type
    _MAX_DEPTH = 64

    def __init__(self, data: bytes, pos: int):
        if not 0 <= pos < len(data):
            raise AssemblyError(f"R2R signature at file offset 0x{pos:X} is outside the file ({len(data)} bytes)",
                                kind="bad-signature")
        self.data = data
        self.pos = pos

    def uint(self) -> int:
        try:
            value, self.pos = decode_compressed_uint(self.data, self.pos)
        except AssemblyError:
            raise self._fail("bad or truncated compressed integer") from None
        return value

    def sint(self) -> int:
        try:
            value, self.pos = decode_compressed_int(self.data, self.pos)
        except AssemblyError:
            raise self._fail("bad or truncated compressed integer") from None
        return value

    def _fail(self, reason: str) -> AssemblyError:
        return AssemblyError(f"R2R signature at file offset 0x{self.pos:X}: {reason}", kind="bad-signature")

    def skip_type(self, depth: int = 0) -> int | None:
        """Skip one type; return the module index when it starts with a module override."""
        if depth > self._MAX_DEPTH:
            raise self._fail("type nests too deeply")
        if self.pos >= len(self.data):
            raise self._fail("truncated type")
        et = self.data[self.pos]
        self.pos += 1
        if et in self._PLAIN:
            return None
        if et in self._WRAPPERS:
            self.skip_type(depth + 1)
        elif et in (0x11, 0x12):          # VALUETYPE, CLASS + TypeDefOrRef
            self.uint()
        elif et in (0x13, 0x1E, ZapSigElement.VAR_ZAPSIG):  # VAR, MVAR + number
            self.uint()
        elif et == 0x15:                  # GENERICINST type count args
            self.skip_type(depth + 1)
            for _ in range(self.uint()):
                self.skip_type(depth + 1)
        elif et == 0x14:                  # ARRAY type rank sizes lobounds
            self.skip_type(depth + 1)
            self.uint()
            for _ in range(self.uint()):
                self.uint()
            for _ in range(self.uint()):
                self.sint()
        elif et in (0x1F, 0x20):          # CMOD_REQD / CMOD_OPT token type
            self.uint()
            self.skip_type(depth + 1)
        elif et == 0x1B:                  # FNPTR method signature
            if self.pos >= len(self.data):
                raise self._fail("truncated function pointer signature")
            callconv = self.data[self.pos]
            self.pos += 1
            if callconv & 0x10:
                self.uint()
            for _ in range(self.uint() + 1):
                self.skip_type(depth + 1)
        elif et == ZapSigElement.MODULE_ZAPSIG:
            module = self.uint()
            self.skip_type(depth + 1)
            return module
        else:
            raise self._fail(f"unexpected element type 0x{et:02X}")
        return None
