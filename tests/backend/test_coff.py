"""The COFF reader against `llvm-readobj --sections --symbols --relocations` (Debian's LLVM 14),
field by field, on objects we emit: sample methods, a module that exercises long section
names, weak externals, every relocation kind LLVM writes, a relocation count overflow; and
damaged input, which the compiled form of the object layout reads as its declaration does."""

from __future__ import annotations

import re
import struct

import pytest
from conftest import parse_outcome, run_readobj
from hypothesis import given, settings
from hypothesis import strategies as st

from llilc_eh.assembly.structs import bulk_format, compiled_parser
from llilc_eh.backend import structs
from llilc_eh.backend.coff import CoffObject, RelocationType, StorageClass
from llilc_eh.errors import BackendError

TRIPLE = "x86_64-pc-windows-msvc"

_SPECIAL_ASM = """
.section .rdata$averylongsectionname_for_the_string_table,"dr"
.globl data_sym
data_sym:
  .long 1
  .quad target_sym
  .long target_sym
  .rva target_sym
  .secrel32 target_sym
  .secidx target_sym
.text
.globl asm_fn
asm_fn:
  cmpb $1, target_sym(%rip)
  movw $1, target_sym(%rip)
  movl $1, target_sym(%rip)
  cmpb $1, target_sym+7(%rip)
  ret
"""


def _module_asm(text: str) -> str:
    return "".join('module asm "' + line.replace("\\", "\\5C").replace('"', "\\22") + '"\n'
                   for line in text.strip().splitlines())


SPECIAL_IR = f"""target triple = "{TRIPLE}"
{_module_asm(_SPECIAL_ASM)}
@target_sym = external global i32
@weak_sym = extern_weak global i32
@long_named_global_in_custom_section = global i32 5, section ".data$another_long_section_name"
define ptr @use_weak() {{
  ret ptr @weak_sym
}}
"""


def overflow_ir(count: int = 65600) -> str:
    """More relocations in one section than the 16-bit count holds (IMAGE_SCN_LNK_NRELOC_OVFL)."""
    return (f'target triple = "{TRIPLE}"\n@ext = external global i8\n'
            f'@table = global [{count} x ptr] [{", ".join(["ptr @ext"] * count)}]\n')


# -- llvm-readobj's text, parsed ----------------------------------------------------------------

_RELOC = re.compile(r"(0x[0-9A-F]+) (IMAGE_REL_AMD64_\w+) (.*) \((\d+)\)")
_SECTION_REF = re.compile(r"(.*) \((-?\d+)\)")


def readobj_view(text: str) -> dict:
    """Sections, relocations and symbols from llvm-readobj's LLVM-style output."""
    sections, relocations, symbols = [], {}, []
    block, current, aux = None, None, None
    for line in text.splitlines():
        s = line.strip()
        if s in ("Sections [", "Relocations [", "Symbols ["):
            block = s.split()[0]
            continue
        if block == "Sections":
            if s == "Section {":
                current = {}
                sections.append(current)
            elif s.startswith("Characteristics [") and current is not None:
                current["Characteristics"] = int(re.search(r"\((0x[0-9A-F]+)\)", s).group(1), 16)
            elif ": " in s and current is not None and not s.startswith("IMAGE_SCN"):
                key, value = s.split(": ", 1)
                current.setdefault(key, value)
        elif block == "Relocations":
            m = re.fullmatch(r"Section \((\d+)\) (.*) \{", s)
            if m:
                current = relocations.setdefault(int(m.group(1)), [])
            elif (m := _RELOC.fullmatch(s)):
                current.append((int(m.group(1), 16), m.group(2), m.group(3), int(m.group(4))))
        elif block == "Symbols":
            if s == "Symbol {":
                current, aux = {"aux": []}, None
                symbols.append(current)
            elif s.startswith("Aux") and s.endswith("{"):
                aux = {"kind": s[:-1].strip()}
                current["aux"].append(aux)
            elif s == "}" and aux is not None:
                aux = None
            elif ": " in s and current is not None:
                key, value = s.split(": ", 1)
                (aux if aux is not None else current)[key] = value
    return {"sections": sections, "relocations": relocations, "symbols": symbols}


def _storage_name(storage) -> str:
    names = {StorageClass.EXTERNAL: "External", StorageClass.STATIC: "Static",
             StorageClass.FILE: "File", StorageClass.WEAK_EXTERNAL: "WeakExternal",
             StorageClass.LABEL: "Label", StorageClass.FUNCTION: "Function"}
    return f"{names[storage]} (0x{int(storage):X})"


def compare_with_readobj(readobj, path, data: bytes) -> CoffObject:
    coff = CoffObject.parse(data)
    view = readobj_view(run_readobj(readobj, path, "--sections", "--symbols", "--relocations"))

    assert len(view["sections"]) == len(coff.sections)
    for theirs, ours in zip(view["sections"], coff.sections):
        assert int(theirs["Number"]) == ours.number
        assert theirs["Name"].rsplit(" (", 1)[0] == ours.name
        assert int(theirs["RawDataSize"]) == ours.raw_size
        assert theirs["Characteristics"] == ours.characteristics
        if not ours.characteristics & 0x80:
            assert len(ours.data) == ours.raw_size
        # readobj prints the raw 16-bit count; with NRELOC_OVFL we hold the real list.
        count = int(theirs["RelocationCount"])
        assert count == (min(65535, len(ours.relocations)))

    for number, listed in view["relocations"].items():
        ours = coff.section_by_number(number).relocations
        assert [(r.offset, r.type.readobj_name, r.symbol, r.symbol_index) for r in ours] == listed

    assert len(view["symbols"]) == len(coff.symbols)
    for theirs, ours in zip(view["symbols"], coff.symbols):
        assert theirs["Name"] == ours.name
        assert int(theirs["Value"]) == ours.value
        section, number = _SECTION_REF.fullmatch(theirs["Section"]).groups()
        assert (section, int(number)) == (ours.section_name, ours.section_number)
        assert theirs["StorageClass"] == _storage_name(ours.storage_class)
        assert theirs["ComplexType"].endswith(f"(0x{ours.complex_type:X})")
        assert theirs["BaseType"].endswith(f"(0x{ours.base_type:X})")
        assert int(theirs["AuxSymbolCount"]) == len(ours.aux)
        for aux_theirs, aux_ours in zip(theirs["aux"], ours.aux):
            if aux_theirs["kind"] == "AuxSectionDef":
                assert int(aux_theirs["Length"]) == aux_ours["length"]
                assert int(aux_theirs["RelocationCount"]) == aux_ours["number_of_relocations"]
                assert int(aux_theirs["Checksum"], 16) == aux_ours["check_sum"]
                assert int(aux_theirs["Number"]) == aux_ours["number"]
            elif aux_theirs["kind"] == "AuxWeakExternal":
                linked = _SECTION_REF.fullmatch(aux_theirs["Linked"]).group(2)
                assert int(linked) == aux_ours["tag_index"]
                assert aux_theirs["Search"].endswith(f"(0x{aux_ours['characteristics']:X})")
            elif aux_theirs["kind"] == "AuxFileRecord":
                assert aux_ours["file_name"].rstrip(b"\0").decode() == aux_theirs["FileName"]
            else:
                raise AssertionError(f"aux record {aux_theirs['kind']} not compared")
    return coff


def test_sample_objects_agree_with_readobj(sample_compiled, readobj, tmp_path):
    chosen = [m for m in sample_compiled[2] if m.has_eh][:4] + \
             [m for m in sample_compiled[0] if m.has_filter][:2] + sample_compiled[0][:1]
    for m in chosen:
        path = tmp_path / f"m{m.rid}_O{m.opt}.obj"
        path.write_bytes(m.result.obj)
        coff = compare_with_readobj(readobj, path, m.result.obj)
        assert coff.symbol(m.parent).is_function and coff.symbol(m.parent).is_external
        assert coff.machine == 0x8664 and coff.section(".text").is_code


def test_special_object_agrees_with_readobj(pool, readobj, tmp_path):
    data = pool.compile(SPECIAL_IR, 0).obj
    path = tmp_path / "special.obj"
    path.write_bytes(data)
    coff = compare_with_readobj(readobj, path, data)
    long_names = [s.name for s in coff.sections if len(s.name) > 8]
    assert ".rdata$averylongsectionname_for_the_string_table" in long_names
    kinds = {r.type for s in coff.sections for r in s.relocations}
    assert {RelocationType.ADDR64, RelocationType.ADDR32, RelocationType.ADDR32NB,
            RelocationType.REL32, RelocationType.SECREL, RelocationType.SECTION} <= kinds
    weak = coff.symbol("weak_sym")
    assert weak.storage_class == StorageClass.WEAK_EXTERNAL
    assert coff.symbol_at_index(weak.aux[0]["tag_index"]).name.startswith(".weak.weak_sym")
    rdata = coff.section(".rdata$averylongsectionname_for_the_string_table")
    assert rdata.relocation_at(4).symbol == "target_sym" and rdata.dword(0) == 1
    assert coff.symbol(".file").aux[0]["file_name"].startswith(b"<string>")


def test_rel32_n_relocation_types(pool, readobj, tmp_path):
    """LLVM's assembler folds the instruction tail into the addend and always writes REL32;
    other producers use REL32_1..5. Retype the four .text relocations and compare."""
    data = bytearray(pool.compile(SPECIAL_IR, 0).obj)
    raw = structs.CoffFile.parse(bytes(data))
    text = raw.sections[0]
    new_types = [RelocationType.REL32_1, RelocationType.REL32_2, RelocationType.REL32_4,
                 RelocationType.REL32_5, RelocationType.REL32_3]
    for i, kind in enumerate(new_types):
        entry = dict(structs.Relocation.parse(text.relocations.records[structs.RELOCATION_SIZE * i:]))
        entry["type"] = int(kind)
        at = text.header.pointer_to_relocations + structs.RELOCATION_SIZE * i
        data[at:at + structs.RELOCATION_SIZE] = structs.Relocation.build(entry)
    path = tmp_path / "rel32n.obj"
    path.write_bytes(bytes(data))
    coff = compare_with_readobj(readobj, path, bytes(data))
    assert [r.type for r in coff.section(".text").relocations] == new_types
    assert [r.type.pc_relative_bias for r in coff.section(".text").relocations] == [1, 2, 4, 5, 3]


def test_relocation_count_overflow(pool, readobj, tmp_path):
    data = pool.compile(overflow_ir(), 0).obj
    path = tmp_path / "overflow.obj"
    path.write_bytes(data)
    coff = compare_with_readobj(readobj, path, data)
    table = coff.section(".data")
    assert table.characteristics & 0x01000000
    assert len(table.relocations) == 65600
    assert {r.type for r in table.relocations} == {RelocationType.ADDR64}
    assert table.relocations[-1].offset == 8 * 65599


def test_runtime_functions_resolve_relocations(sample_compiled):
    m = next(m for m in sample_compiled[0] if m.has_eh and m.pads > 1)
    coff = m.coff
    entries = coff.runtime_functions()
    functions = {s.value: s.name for s in coff.functions_in(".text")}
    assert len(entries) == len(functions)
    for e in entries:
        assert e.begin in functions and e.begin < e.end <= coff.section(".text").raw_size
        assert e.unwind % 4 == 0 and e.unwind < coff.section(".xdata").raw_size
    assert "Relocations of .pdata:" in str(coff)
    assert str(entries[0]).startswith("[0x0, ")


def _relocations_elsewhere(d: bytearray) -> bytearray:
    """The first section's PointerToRelocations past the end of the object."""
    structs.SectionHeader.parse(d[structs.FILE_HEADER_SIZE:])  # a section header is there
    d[structs.FILE_HEADER_SIZE + 24:structs.FILE_HEADER_SIZE + 28] = (len(d) + 1).to_bytes(4, "little")
    return d


def _overflowing_relocations_elsewhere(d: bytearray) -> bytearray:
    """As above, and the section says its count overflowed (NRELOC_OVFL, 0xFFFF): the real
    count would be read from the first record, which is not there."""
    d = _relocations_elsewhere(d)
    at = structs.FILE_HEADER_SIZE
    d[at + 32:at + 34] = (0xFFFF).to_bytes(2, "little")
    flags = int.from_bytes(d[at + 36:at + 40], "little") | structs.IMAGE_SCN_LNK_NRELOC_OVFL
    d[at + 36:at + 40] = flags.to_bytes(4, "little")
    return d


@pytest.mark.parametrize("mutate, words", [
    (lambda d: d[:10], "unreadable"),
    (lambda d: d[:30], "unreadable"),      # inside the first section header
    (lambda d: b"\x4c\x01" + d[2:], "not AMD64"),
    (lambda d: d[:-40], "unreadable"),
    (_relocations_elsewhere, "unreadable"),
    (_overflowing_relocations_elsewhere, "unreadable"),
])
def test_damaged_objects(sample_compiled, mutate, words):
    data = sample_compiled[0][0].result.obj
    with pytest.raises(BackendError) as info:
        CoffObject.parse(mutate(bytearray(data)))
    assert info.value.kind == "bad-coff" and words in info.value.reason


@pytest.mark.parametrize("layout", [structs.SymbolRecord, structs.SymbolLongName, structs.Relocation,
                                    *structs.AUX_FORMATS.values()])
@given(st.data())
def test_records_read_in_bulk_read_as_declared(layout, data):
    raw = data.draw(st.binary(min_size=layout.sizeof(), max_size=layout.sizeof()))
    parsed = layout.parse(raw)
    assert struct.unpack(bulk_format(layout), raw) == tuple(parsed[sub.name] for sub in layout.subcons)


_COMPILED_COFF_FILE = compiled_parser(structs.CoffFile)


def _damaged_objects(sample_compiled):
    """Sample objects with a few bytes rewritten (mostly in the file and section headers, where
    the sizes, counts and offsets are), maybe a section's relocation count overflowed, maybe cut."""
    objects = [m.result.obj for m in sample_compiled[0] + sample_compiled[2] if m.has_eh]

    @st.composite
    def damaged(draw):
        data = bytearray(draw(st.sampled_from(objects)))
        sections = int.from_bytes(data[2:4], "little")     # as written, before any byte is rewritten
        headers = structs.FILE_HEADER_SIZE + structs.SECTION_HEADER_SIZE * sections
        for at, value in draw(st.lists(st.tuples(st.integers(0, headers - 1), st.integers(0, 255)), max_size=3)):
            data[at] = value
        if draw(st.booleans()):
            at = structs.FILE_HEADER_SIZE + structs.SECTION_HEADER_SIZE * draw(st.integers(0, sections - 1))
            data[at + 32:at + 34] = b"\xff\xff"
            data[at + 39] |= structs.IMAGE_SCN_LNK_NRELOC_OVFL >> 24
        return bytes(data[:draw(st.integers(0, len(data)))]) if draw(st.booleans()) else bytes(data)

    return damaged()


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_compiled_object_layout_reads_as_declared(sample_compiled, data):
    """`CoffObject.parse` reads `CoffFile` by its compiled form: same values, same errors."""
    damaged = data.draw(_damaged_objects(sample_compiled))
    assert parse_outcome(_COMPILED_COFF_FILE, damaged) == parse_outcome(structs.CoffFile.parse, damaged)


def test_lookups(sample_compiled):
    m = next(m for m in sample_compiled[0] if m.has_eh)
    coff = m.coff
    assert coff.symbol(m.parent).section_name == ".text"
    assert coff.find_symbol("no such symbol") is None
    with pytest.raises(BackendError):
        coff.symbol("no such symbol")
    with pytest.raises(BackendError):
        coff.section(".nope")
    text_symbols = coff.symbols_in(".text")
    assert text_symbols[0].name == ".text"
    assert [s.value for s in text_symbols] == sorted(s.value for s in text_symbols)
    assert coff.section(".text").alignment == 16 and coff.section(".xdata").alignment == 4
