"""ReadyToRun reading: Native Format primitives on hand-encoded data, CoreLib's measured
counts, structural properties of every compiled body, the whole .NET Core 3.1 corpus, and
damaged headers and sections (always an AssemblyError with a kind, never a crash).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.native import ClauseFlags
from llilc_eh.assembly.r2r import (Machine, MethodSigFlags, R2RSummary, ReadyToRunImage, SectionType, TargetOS,
                                   read_method_signature)
from llilc_eh.assembly.r2r.native_format import (NativeArray, NativeHashtable, NativeReader, NibbleReader,
                                                 encode_native_array, encode_native_hashtable, encode_nibbles,
                                                 encode_signed, encode_unsigned)
from llilc_eh.assembly.r2r.structs import ReadyToRunSection
from llilc_eh.errors import AssemblyError

CLONED_FINALLY = ClauseFlags.FINALLY | ClauseFlags.DUPLICATED   # RyuJIT's marker for a cloned finally
SMALL_R2R = "System.IO.Compression.Brotli.dll"   # 62 KB: catch, fault and finally bodies, instantiations
NOT_R2R_IN_WHEEL = {"mscorlib.dll", "System.Runtime.WindowsRuntime.dll"}   # IL-only facades


# ============================================================== integers

def test_integer_examples_from_the_format_document():
    assert encode_unsigned(12) == b"\x18"
    assert encode_unsigned(1000) == b"\xa1\x0f"
    reader = NativeReader(b"\x18\xa1\x0f")
    assert reader.decode_unsigned(0) == (12, 1)
    assert reader.decode_unsigned(1) == (1000, 3)


@pytest.mark.parametrize("value, encoded", [
    (0, b"\x00"), (127, b"\xfe"), (128, b"\x01\x02"), (0x3FFF, b"\xfd\xff"), (0x4000, b"\x03\x00\x02"),
    (0x1FFFFF, b"\xfb\xff\xff"), (0x200000, b"\x07\x00\x00\x02"), (0x0FFFFFFF, b"\xf7\xff\xff\xff"),
    (0x10000000, b"\x0f\x00\x00\x00\x10"), (0xFFFFFFFF, b"\x0f\xff\xff\xff\xff"),
])
def test_unsigned_length_boundaries(value, encoded):
    assert encode_unsigned(value) == encoded
    assert NativeReader(encoded).decode_unsigned(0) == (value, len(encoded))


@pytest.mark.parametrize("value, encoded", [
    (-1, b"\xfe"), (-64, b"\x80"), (63, b"\x7e"), (64, b"\x01\x01"), (-65, b"\xfd\xfe"),
    (-(1 << 31), b"\x0f\x00\x00\x00\x80"),
])
def test_signed_examples(value, encoded):
    assert encode_signed(value) == encoded
    assert NativeReader(encoded).decode_signed(0) == (value, len(encoded))


@given(st.lists(st.integers(0, 2**32 - 1), max_size=20))
def test_unsigned_round_trip(values):
    data = b"".join(encode_unsigned(v) for v in values)
    reader, at, out = NativeReader(data), 0, []
    for v in values:
        n = len(encode_unsigned(v))
        assert n == next(k for k in (1, 2, 3, 4, 5) if k == 5 or v < 1 << (7 * k))   # shortest form
        value, at = reader.decode_unsigned(at)
        out.append(value)
        assert reader.skip_integer(at - n) == at
    assert out == values and at == len(data)


@given(st.lists(st.integers(-2**31, 2**31 - 1), max_size=20))
def test_signed_round_trip(values):
    data = b"".join(encode_signed(v) for v in values)
    reader, at, out = NativeReader(data), 0, []
    for _ in values:
        value, at = reader.decode_signed(at)
        out.append(value)
    assert out == values and at == len(data)


@pytest.mark.parametrize("data", [b"\x1f\0\0\0\0\0\0\0\0", b"\x01", b"\x03\x00", b"\x0f\x00\x00", b""])
def test_bad_or_truncated_integers(data):
    with pytest.raises(AssemblyError) as e:
        NativeReader(data).decode_unsigned(0)
    assert e.value.kind == "bad-native-format"


def test_reader_respects_its_window():
    """A section's reader must not read the neighbouring section's bytes."""
    reader = NativeReader(b"\x00\x01\x02", start=1, end=2)
    with pytest.raises(AssemblyError):
        reader.decode_unsigned(2)
    with pytest.raises(AssemblyError):
        reader.decode_unsigned(0)


# ============================================================== NativeArray

# Three slots, elements 0 ('A') and 2 ('C'), written out by hand: header (3 << 2 | 1-byte index
# entries), the block index, then the tree: root and bit-4 nodes with only a low child, the
# bit-2 node with both children (its high child 3 bytes further), and the two one-element
# subtrees collapsed into leaves naming their index in the block.
HAND_ARRAY = bytes([
    0x18,        # 3 << 2 | 0, encoded: 12 -> 0x18
    0x01,        # block 0 starts 1 byte after the index
    0x02,        # bit 8: low child only (1)
    0x02,        # bit 4: low child only (1)
    0x1E,        # bit 2: both (3) | delta 3 << 2 = 15 -> 0x1E
    0x00, 0x41,  # leaf: element 0, data 'A'
    0x10, 0x43,  # leaf: element 2 (2 << 2 = 8 -> 0x10), data 'C'
])


def test_native_array_hand_encoded():
    array = NativeArray(NativeReader(HAND_ARRAY), 0)
    assert (array.count, array.entry_size) == (3, 1)
    assert [array.get(i) for i in range(4)] == [6, None, 8, None]
    assert list(array.items()) == [(0, 6), (2, 8)]
    assert encode_native_array(3, {0: b"A", 2: b"C"}) == HAND_ARRAY   # our writer lays it out the same way


def test_native_array_shared_empty_block():
    data = encode_native_array(40, {35: b"\x07"})
    array = NativeArray(NativeReader(data), 0)
    assert list(array.items()) == [(35, array.get(35))]
    assert data[array.get(35)] == 0x07
    assert all(array.get(i) is None for i in range(40) if i != 35)


@given(st.integers(0, 300).flatmap(lambda n: st.tuples(
    st.just(n), st.dictionaries(st.integers(0, max(n - 1, 0)), st.binary(min_size=1, max_size=3),
                                max_size=n))))
def test_native_array_round_trip(case):
    count, elements = case
    elements = {i: v for i, v in elements.items() if i < count}
    data = b"\xee" * 3 + encode_native_array(count, elements)    # not at offset 0
    array = NativeArray(NativeReader(data), 3)
    found = dict(array.items())
    assert set(found) == set(elements)
    for i in range(count):
        at = array.get(i)
        assert at == found.get(i)
        if at is not None:
            assert data[at:at + len(elements[i])] == elements[i]


# ============================================================== NativeHashtable

# The format document's example (objects P, Q, R, S with hashes 0x1231, 0x1232, 0x1234, 0x1338
# in two buckets), written out by hand. Bucket cells count from the byte after the header, as
# nativeformatreader.h reads them (the document's table counts from the header itself).
HAND_TABLE = bytes([
    0x04,              # 2^1 buckets, 1-byte cells
    0x03, 0x09, 0x0B,  # bucket 0 at base+3, bucket 1 at base+9, end at base+11
    0x31, 0x0E,        # P: low byte, relative offset +7 (to 12)
    0x32, 0x0C,        # Q: +6 (to 13)
    0x34, 0x0A,        # R: +5 (to 14)
    0x38, 0x08,        # S: +4 (to 15), bucket 1
]) + b"PQRS"


def test_native_hashtable_hand_encoded():
    table = NativeHashtable(NativeReader(HAND_TABLE), 0, 12)
    assert table.bucket_count == 2
    assert [(e.low_hash, HAND_TABLE[e.offset:e.offset + 1]) for e in table.entries()] == \
        [(0x31, b"P"), (0x32, b"Q"), (0x34, b"R"), (0x38, b"S")]
    assert [HAND_TABLE[e.offset] for e in table.lookup(0x1232)] == [ord("Q")]
    assert [HAND_TABLE[e.offset] for e in table.lookup(0x1338)] == [ord("S")]
    assert list(table.lookup(0x1233)) == [] and list(table.lookup(0x1331)) == []


@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.binary(min_size=1, max_size=4)), max_size=60),
       st.integers(0, 5))
def test_native_hashtable_round_trip(entries, shift):
    data, at = encode_native_hashtable(entries, shift)
    table = NativeHashtable(NativeReader(data), at)
    got = Counter((e.low_hash, data[e.offset]) for e in table.entries())
    assert got == Counter((h & 0xFF, blob[0]) for h, blob in entries)
    for h, blob in entries:
        assert any(data[e.offset:e.offset + len(blob)] == blob for e in table.lookup(h))


def test_native_hashtable_bucket_outside_table():
    bad = bytearray(HAND_TABLE)
    bad[3] = 0xF0   # the end cell points far past the table
    with pytest.raises(AssemblyError) as e:
        list(NativeHashtable(NativeReader(bytes(bad)), 0, 12).entries())
    assert e.value.kind == "bad-native-format"


# ============================================================== nibbles and signatures

def test_nibble_stream_hand_encoded():
    # 31 = 0b011_111 -> nibbles 0xB (3, more), 0x7 (7); 5 -> 0x5; low nibble first.
    data = bytes([0x7B, 0x05])
    nibbles = NibbleReader(NativeReader(data), 0)
    assert [nibbles.unsigned(), nibbles.unsigned()] == [31, 5]
    assert encode_nibbles([31, 5]) == b"\x7b\x05"


@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=12))
def test_nibble_round_trip(values):
    nibbles = NibbleReader(NativeReader(encode_nibbles(values)), 0)
    assert [nibbles.unsigned() for _ in values] == values


@pytest.mark.parametrize("blob, flags, token, module", [
    # OwnerType: GENERICINST CLASS TypeDef#2 <1 arg: __Canon>, MethodDef RID 5
    (bytes([0x40, 0x15, 0x12, 0x08, 0x01, 0x3E, 0x05]), MethodSigFlags.OWNER_TYPE, 0x06000005, None),
    # MethodInstantiation: RID 0x1234 (2-byte compressed), 2 args: int32, string[]
    (bytes([0x04, 0x92, 0x34, 0x02, 0x08, 0x1D, 0x0E]), MethodSigFlags.METHOD_INSTANTIATION, 0x06001234, None),
    # MemberRef token
    (bytes([0x10, 0x07]), MethodSigFlags.MEMBER_REF_TOKEN, 0x0A000007, None),
    # OwnerType behind a module override #3: the token lives in that module
    (bytes([0x40, 0x3F, 0x03, 0x12, 0x08, 0x09]), MethodSigFlags.OWNER_TYPE, 0x06000009, 3),
    # A slot instead of a token, then a constrained type (VAR_ZAPSIG 1)
    (bytes([0x28, 0x04, 0x3B, 0x01]), MethodSigFlags.SLOT_INSTEAD_OF_TOKEN | MethodSigFlags.CONSTRAINED, None, None),
])
def test_method_signature_heads(blob, flags, token, module):
    head = read_method_signature(b"\xff" + blob + b"\xaa", 1)
    assert (head.flags, head.token, head.module_override, head.end) == (flags, token, module, 1 + len(blob))


def test_method_signature_with_unknown_element_type():
    with pytest.raises(AssemblyError) as e:
        read_method_signature(bytes([0x40, 0x21, 0x00]), 0)   # ELEMENT_TYPE_INTERNAL: a pointer, never in R2R
    assert e.value.kind == "bad-signature"


# ============================================================== System.Private.CoreLib

@pytest.fixture(scope="module")
def corelib() -> ReadyToRunImage:
    return ReadyToRunImage.open(Corpus().find("System.Private.CoreLib.dll").location)


def test_corelib_header(corelib):
    h = corelib.header
    assert h.version == "3.1" and corelib.assembly.pe.FILE_HEADER.Machine == 0xFD1D
    assert (h.machine, h.target_os) == (Machine.AMD64, TargetOS.LINUX)
    assert [s.type for s in h.sections] == sorted(s.type for s in h.sections)
    assert {SectionType.RUNTIME_FUNCTIONS, SectionType.METHODDEF_ENTRY_POINTS, SectionType.EXCEPTION_INFO,
            SectionType.INSTANCE_METHOD_ENTRY_POINTS} <= {s.type for s in h.sections}
    assert corelib.compiler_identifier.startswith("CoreCLR")


def test_corelib_counts(corelib):
    """The four figures an independent prototype measured (DESIGN.md), and what they mean:
    the 1,525 funclets are all the funclets of the image, and all belong to EH bodies."""
    s = corelib.summary()
    assert s.eh_bodies == 1254
    assert s.clauses == 1730
    assert s.funclets == 1525 and s.funclets_in_eh_bodies == 1525
    assert s.runtime_functions == 29855
    assert s.runtime_functions == s.bodies + s.funclets + corelib.orphan_runtime_functions
    assert corelib.orphan_runtime_functions == 0
    assert (s.bodies, s.instantiation_bodies, s.instance_entries, s.instance_entries_mapped) == \
        (28330, 12192, 12192, 12192)
    assert dict(s.clauses_by_kind) == {"catch": 860, "fault": 719, "filter": 5, "finally": 146}
    assert (s.duplicate_clauses, s.stub_bodies, s.stub_eh_bodies, s.shared_bodies) == (210, 176, 26, 43)
    eh_bodies = list(corelib.methods(eh_only=True))
    assert len(eh_bodies) == s.eh_bodies
    assert sum(len(b.native.clauses) for b in eh_bodies) == s.clauses


def check_body(body) -> None:
    """The structural properties of one compiled body."""
    native = body.native
    # Funclets follow the main body back to back, in RVA order.
    end = body.main.end_rva
    for f in body.funclets:
        assert f.begin_rva == end
        end = f.end_rva
    assert native.main.start == 0 and native.main.end == body.main.size
    assert [r.start for r in native.funclets] == [f.begin_rva - body.rva for f in body.funclets]
    size = native.code_size
    handler_starts = set()
    for c in native.clauses:
        assert 0 <= c.handler_start < c.handler_end <= size
        if c.flags == CLONED_FINALLY and c.try_start == c.try_end:
            assert 0 <= c.try_start <= size   # cloned finally: empty try, handler names the clone
        else:
            assert 0 <= c.try_start < c.try_end <= size
            handler_starts.add(c.handler_start)
        if c.filter_start is not None:
            assert native.main.end <= c.filter_start < c.handler_start
            handler_starts.add(c.filter_start)
    # Every funclet is a handler or a filter, and every handler outside the main body is one.
    funclet_starts = {r.start for r in native.funclets}
    assert funclet_starts <= handler_starts
    assert {h for h in handler_starts if h >= native.main.end} <= funclet_starts
    if body.funclets:
        assert native.clauses


def test_every_corelib_eh_body(corelib):
    bodies = list(corelib.methods(eh_only=True))
    for body in bodies:
        check_body(body)
    assert all(not b.funclets for b in corelib.methods() if not b.has_eh)


def test_methods_in_rva_order_and_lookups(corelib):
    bodies = list(corelib.methods())
    assert [b.rva for b in bodies] == sorted(b.rva for b in bodies)
    assert len(bodies) == len(corelib)
    for body in bodies[::97]:
        for token in body.method_def_entries:
            assert corelib.method_for_token(token) is body
            assert corelib.methods_for_token(token)[0] is body
        for rf in body.runtime_functions:
            assert corelib.body_at(rf.begin_rva) is body and corelib.body_at(rf.end_rva - 1) is body


def test_method_def_entry_points(corelib):
    """Every MethodDef entry names a runtime function that starts a body owning it, its fixup
    list decodes into cells of real import sections, and the NativeArray's lookup and walk agree."""
    entries = corelib.method_def_entry_points
    rfs = corelib.runtime_functions
    cells = 0
    for token, entry in entries.items():
        assert token >> 24 == 0x06 and 1 <= token & 0xFFFFFF <= corelib.assembly.method_count
        assert 0 <= entry.runtime_function < len(rfs)
        body = corelib.method_for_token(token)
        assert body.main is rfs[entry.runtime_function] and token in body.tokens
        cells += len(corelib.fixups(entry))
    assert len(entries) == 16233 and cells > len(entries)
    start = corelib.assembly.rva_to_offset(corelib.header.section(SectionType.METHODDEF_ENTRY_POINTS).rva)
    array = NativeArray(NativeReader(corelib.data), start)
    walked = dict(array.items())
    assert all(array.get(i) == walked.get(i) for i in range(array.count))


def test_instance_entry_points(corelib):
    for inst in corelib.instance_entry_points:
        assert inst.mapped and inst.unmapped_reason is None
        assert inst.flags & (MethodSigFlags.OWNER_TYPE | MethodSigFlags.METHOD_INSTANTIATION)
        body = corelib.methods_for_token(inst.method_def)
        assert any(b.main.index == inst.entry.runtime_function for b in body)
        corelib.fixups(inst.entry)


def test_stub_bodies_are_kept(corelib):
    """P/Invoke marshalling stubs have native EH (a fault clause) but no IL; one stub serves
    every P/Invoke with the same marshalling signature."""
    stubs = [b for b in corelib.methods(eh_only=True) if b.is_stub]
    assert len(stubs) == 26
    names = corelib.assembly.names
    set_event = next(b for b in stubs if any(names.method_name(t & 0xFFFFFF) == "Interop/Kernel32::SetEvent"
                                             for t in b.tokens))
    assert {names.method_name(t & 0xFFFFFF) for t in set_event.tokens} == \
        {"Interop/Kernel32::SetEvent", "Interop/Kernel32::ResetEvent", "Interop/Kernel32::ReleaseMutex"}
    assert [c.kind for c in set_event.native.clauses] == ["fault"]
    assert all(not corelib.assembly.has_il(t & 0xFFFFFF) for t in set_event.tokens)


def test_unwind_bytes_and_sharing(corelib):
    """Every UNWIND_INFO is version 1 with EHANDLER|UHANDLER (a personality RVA follows);
    many runtime functions share one."""
    rfs = corelib.runtime_functions
    distinct = {rf.unwind_rva for rf in rfs}
    for rva in distinct:
        blob = corelib.unwind_bytes(rva)
        assert (blob[0] & 7, blob[0] >> 3) == (1, 3)
        assert corelib.data[corelib.assembly.rva_to_offset(rva)] == blob[0]
    assert len(distinct) == 10400
    busiest = max(distinct, key=lambda r: len(corelib.unwind_users(r)))
    assert len(corelib.unwind_users(busiest)) == 1008
    assert all(rfs[i].unwind_rva == busiest for i in corelib.unwind_users(busiest))
    with pytest.raises(AssemblyError) as e:
        corelib.unwind_bytes(0x7FFFFFF0)
    assert e.value.kind == "bad-unwind-rva"


def test_corelib_open_is_lazy_and_timed(corelib):
    path = corelib.assembly.path
    start = time.perf_counter()
    image = ReadyToRunImage.open(path)
    opened = time.perf_counter()
    eh = list(image.methods(eh_only=True))
    eh_done = time.perf_counter()
    everything = list(image.methods())
    done = time.perf_counter()
    assert len(eh) == 1254 and len(everything) == 28330
    assert opened - start < 1.0
    print(f"\nCoreLib: open {opened - start:.3f} s, EH bodies {eh_done - opened:.3f} s, "
          f"all bodies {done - eh_done:.3f} s")


# ============================================================== the corpus

def test_whole_corpus():
    """Every R2R image of the runtime wheel opens and every body parses and passes the body
    checks; the two IL-only facades are refused as not ReadyToRun. Totals are pinned."""
    total, images, refused = R2RSummary(), 0, set()
    flags = Counter()
    start = time.perf_counter()
    for f in Corpus().of("dotnetcore2"):
        try:
            image = ReadyToRunImage.open(f.location)
        except AssemblyError as e:
            assert e.kind == "not-ready-to-run", f"{f.name}: {e}"
            refused.add(f.name)
            continue
        images += 1
        assert image.target_os == TargetOS.LINUX and image.header.version == "3.1"
        s = image.summary()
        bodies = list(image.methods())
        assert len(bodies) == s.bodies and image.orphan_runtime_functions == 0
        for body in bodies:
            if body.has_eh or body.funclets:
                check_body(body)
                flags.update(int(c.flags) for c in body.native.clauses)
        assert s.runtime_functions == s.bodies + s.funclets
        total += s
    elapsed = time.perf_counter() - start
    print(f"\ndotnetcore2: {images} R2R images in {elapsed:.1f} s\n  {total}\n  clauses by flags "
          f"{dict(sorted(flags.items()))}")
    assert refused == NOT_R2R_IN_WHEEL and images == 163
    assert (total.bodies, total.eh_bodies, total.clauses, total.funclets, total.runtime_functions) == \
        (129782, 6059, 10887, 8470, 138252)
    assert total.funclets_in_eh_bodies == total.funclets
    assert dict(total.clauses_by_kind) == {"catch": 4032, "fault": 4724, "filter": 157, "finally": 1974}
    assert flags == {0x0: 3560, 0x1: 144, 0x2: 783, 0x4: 3839, 0x8: 472, 0x9: 13, 0xA: 1191, 0xC: 885}
    assert (total.instance_entries, total.instance_entries_mapped) == (44903, 44903)


def test_not_ready_to_run():
    with pytest.raises(AssemblyError) as e:
        ReadyToRunImage.open(Corpus().find("Python.Runtime.dll").location)
    assert e.value.kind == "not-ready-to-run" and "ManagedNativeHeader" in e.value.reason


# ============================================================== damage

@pytest.fixture(scope="module")
def small() -> ReadyToRunImage:
    return ReadyToRunImage.open(Corpus().find(SMALL_R2R).location)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("r2r")


def patched(small: ReadyToRunImage, directory: Path, patches: dict[int, bytes], name="damaged.dll") -> Path:
    data = bytearray(small.data)
    for at, blob in patches.items():
        data[at:at + len(blob)] = blob
    path = directory / name
    path.write_bytes(bytes(data))
    return path


def header_offset(small: ReadyToRunImage) -> int:
    return small.assembly.rva_to_offset(small.header.rva)


def section_entry(small: ReadyToRunImage, kind: SectionType) -> int:
    """File offset of a section's READYTORUN_SECTION record."""
    index = [s.type for s in small.sections].index(kind)
    return header_offset(small) + 16 + index * ReadyToRunSection.sizeof()


def section_data(small: ReadyToRunImage, kind: SectionType) -> int:
    return small.assembly.rva_to_offset(small.header.section(kind).rva)


def u32(v: int) -> bytes:
    return v.to_bytes(4, "little")


def full_read(image: ReadyToRunImage) -> None:
    """Touch everything the reader offers."""
    image.summary()
    for body in image.methods():
        for rf in body.runtime_functions:
            image.unwind_bytes(rf.unwind_rva)
    for entry in image.method_def_entry_points.values():
        image.fixups(entry)
    for inst in image.instance_entry_points:
        image.fixups(inst.entry)


def test_small_image_reads(small):
    full_read(small)
    s = small.summary()
    assert (s.eh_bodies, s.funclets, s.instance_entries) == (6, 10, 2)


def damage_cases(small):
    cor = small.assembly.pe.net.struct.get_file_offset()
    machine = small.assembly.pe.FILE_HEADER.get_file_offset()
    h = header_offset(small)
    return {
        "signature": ({h: b"NGEN"}, "not-ready-to-run", False),
        "directory too small": ({cor + 0x44: u32(20)}, "bad-r2r-header", False),
        "section count past the directory": ({h + 12: u32(5000)}, "bad-r2r-header", False),
        "header RVA outside the image": ({cor + 0x40: u32(0x7FFF0000)}, "bad-r2r-header", False),
        "major version": ({h + 4: (99).to_bytes(2, "little")}, "unsupported-r2r-version", False),
        "unknown machine": ({machine: (0x1234).to_bytes(2, "little")}, "bad-r2r-machine", False),
        "arm64 linux": ({machine: (0xAA64 ^ 0x7B79).to_bytes(2, "little")}, "unsupported-r2r-machine", False),
        "section outside the image": ({section_entry(small, SectionType.EXCEPTION_INFO) + 4: u32(0x7FFF0000)},
                                      "bad-r2r-section", False),
        "sections unsorted": ({section_entry(small, SectionType.COMPILER_IDENTIFIER): u32(150)},
                              "bad-r2r-section", False),
        "runtime functions size": ({section_entry(small, SectionType.RUNTIME_FUNCTIONS) + 8: u32(13)},
                                   "bad-runtime-functions", True),
        "runtime functions unsorted": ({section_data(small, SectionType.RUNTIME_FUNCTIONS): u32(0x7FFFFFF0)},
                                       "bad-runtime-functions", True),
        "EH sentinel missing": ({section_entry(small, SectionType.EXCEPTION_INFO) + 8:
                                 u32(small.header.section(SectionType.EXCEPTION_INFO).size - 8)},
                                "bad-exception-info", True),
        "EH for no body": ({section_data(small, SectionType.EXCEPTION_INFO): u32(
            small.runtime_functions[1].begin_rva + 1)}, "bad-exception-info", True),
        "entry-point array index size": ({section_data(small, SectionType.METHODDEF_ENTRY_POINTS): b"\x07"},
                                         "bad-native-format", True),
    }


@pytest.mark.parametrize("case", ["signature", "directory too small", "section count past the directory",
                                  "header RVA outside the image", "major version", "unknown machine",
                                  "arm64 linux", "section outside the image", "sections unsorted",
                                  "runtime functions size", "runtime functions unsorted", "EH sentinel missing",
                                  "EH for no body", "entry-point array index size"])
def test_damaged_image(small, scratch, case):
    patches, kind, lazy = damage_cases(small)[case]
    path = patched(small, scratch, patches, name=f"{case.replace(' ', '_')}.dll")
    with pytest.raises(AssemblyError) as e:
        image = ReadyToRunImage.open(path)
        assert lazy, "the header should have been refused"
        full_read(image)
    assert e.value.kind == kind, str(e.value)
    assert path.name in str(e.value)   # the message says which file


def test_truncated_file(small, scratch):
    """A file cut right after the R2R header: either the PE or the R2R reader refuses it."""
    path = scratch / "cut.dll"
    path.write_bytes(small.data[:header_offset(small) + 20])
    with pytest.raises(AssemblyError):
        full_read(ReadyToRunImage.open(path))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_damage_never_crashes(small, scratch, data):
    """Overwrite a few bytes anywhere in the R2R header or the sections this reader uses: the
    result reads, or fails with an AssemblyError; nothing else escapes."""
    regions = [(header_offset(small), 16 + 12 * len(small.sections))]
    for kind in (SectionType.RUNTIME_FUNCTIONS, SectionType.METHODDEF_ENTRY_POINTS, SectionType.EXCEPTION_INFO,
                 SectionType.INSTANCE_METHOD_ENTRY_POINTS, SectionType.IMPORT_SECTIONS):
        s = small.header.section(kind)
        regions.append((small.assembly.rva_to_offset(s.rva), s.size))
    start, size = data.draw(st.sampled_from(regions))
    at = start + data.draw(st.integers(0, size - 1))
    blob = data.draw(st.binary(min_size=1, max_size=4))
    path = patched(small, scratch, {at: blob}, name="fuzz.dll")
    try:
        full_read(ReadyToRunImage.open(path))
    except AssemblyError as e:
        assert e.kind and e.reason
