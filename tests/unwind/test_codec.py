"""UNWIND_INFO codec: spec examples, the llvm-readobj oracle, round trips, damaged input.

The oracle: LLVM 22 (llvmlite) compiles functions for x86_64-pc-windows-msvc to a COFF
object; `llvm-readobj --unwind` (Debian's LLVM 14) lists its `.pdata`/`.xdata`; we find the
same UNWIND_INFOs through `.pdata` ourselves, decode them and compare field by field and
line by line, and re-encode them byte for byte. The COFF reading here is a minimal section
and relocation lookup for this test only.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, replace

import llvmlite.binding as llvm
import pytest
from construct import Array, Bytes, Int8ul, Int16sl, Int16ul, Int32ul, StreamError, Struct
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llilc_eh.unwind import (HANDLER_FLAGS, RuntimeFunction, UnwindError, UnwindFlags, UnwindInfo, UnwindOp,
                             UnwindOpKind, decode_unwind_info, encode_unwind_info, to_clr)
from llilc_eh.unwind import structs

TRIPLE = "x86_64-pc-windows-msvc"

# --------------------------------------------------------------------------------------------
# Spec examples, byte by byte


def test_decode_header_and_codes_by_hand():
    # push rbp; sub rsp, 0x70; lea rbp, [rsp+0x70] with a handler: flags 3, FrameOffset 7.
    data = bytes.fromhex("190a0375" "0a03" "05d2" "0150" "0000" "78563412")
    info = decode_unwind_info(data)
    assert (info.version, info.flags, info.prolog_size) == (1, HANDLER_FLAGS, 10)
    assert (info.frame_register_name, info.frame_offset) == ("RBP", 0x70)
    assert [(op.code_offset, op.op, op.slots) for op in info.codes] == [
        (0x0A, UnwindOpKind.SET_FPREG, 1), (0x05, UnwindOpKind.ALLOC_SMALL, 1),
        (0x01, UnwindOpKind.PUSH_NONVOL, 1)]
    assert info.codes[1].size == 112 and info.codes[2].register_name == "RBP"
    assert info.handler_rva == 0x12345678 and info.handler_data == b""
    assert info.size == len(data) and encode_unwind_info(info) == data
    assert str(info).splitlines()[8:11] == [
        "    0x0A: SET_FPREG reg=RBP, offset=0x70",
        "    0x05: ALLOC_SMALL size=112",
        "    0x01: PUSH_NONVOL reg=RBP",
    ]


@pytest.mark.parametrize("op, slots, text", [
    (UnwindOp.alloc(4, 8), 1, "0x04: ALLOC_SMALL size=8"),
    (UnwindOp.alloc(4, 128), 1, "0x04: ALLOC_SMALL size=128"),
    (UnwindOp.alloc(4, 136), 2, "0x04: ALLOC_LARGE size=136"),          # OpInfo 0, scaled by 8
    (UnwindOp.alloc(4, 0xFFFF * 8), 2, "0x04: ALLOC_LARGE size=524280"),
    (UnwindOp.alloc(4, 0x10000 * 8), 3, "0x04: ALLOC_LARGE size=524288"),  # OpInfo 1, unscaled
    (UnwindOp.save_nonvol(9, 6, 0x7FFF8), 2, "0x09: SAVE_NONVOL reg=RSI, offset=0x7FFF8"),
    (UnwindOp.save_nonvol(9, 15, 0x80000), 3, "0x09: SAVE_NONVOL_FAR reg=R15, offset=0x80000"),
    (UnwindOp.save_xmm128(9, 6, 0xFFFF0), 2, "0x09: SAVE_XMM128 reg=XMM6, offset=0xFFFF0"),
    (UnwindOp.save_xmm128(9, 15, 0x100000), 3, "0x09: SAVE_XMM128_FAR reg=XMM15, offset=0x100000"),
    (UnwindOp.push_machframe(0, True), 1, "0x00: PUSH_MACHFRAME errcode=yes"),
    (UnwindOp.push_nonvol(1, 12), 1, "0x01: PUSH_NONVOL reg=R12"),
    (UnwindOp(3, UnwindOpKind.SET_FPREG_LARGE, 0, 0x100), 3,
     "0x03: SET_FPREG_LARGE offset=0x1000"),
])
def test_operation_forms(op, slots, text):
    assert op.slots == slots and str(op) == text
    info = UnwindInfo(prolog_size=op.code_offset, codes=(op,))
    assert decode_unwind_info(encode_unwind_info(info)) == info


def test_odd_padding_slot_round_trips_whatever_it_holds():
    data = bytes.fromhex("01040100" "0442" "beef")  # one code, padding slot 0xEFBE
    info = decode_unwind_info(data)
    assert info.padding_slot == 0xEFBE and info.size == 8
    assert encode_unwind_info(info) == data


def test_handler_data_the_caller_claims_and_chained_entry():
    data = bytes.fromhex("19000000" "10000000" "aabbccdd")
    assert decode_unwind_info(data).handler_data == b""
    info = decode_unwind_info(data, handler_data_size=4)
    assert info.handler_rva == 0x10 and info.handler_data == bytes.fromhex("aabbccdd")
    assert encode_unwind_info(info) == data
    chained = bytes.fromhex("21020100" "02c0" "0000" "00100000" "40100000" "80200000")
    info = decode_unwind_info(chained)
    assert info.chained == RuntimeFunction(0x1000, 0x1040, 0x2080) and info.size == len(chained)
    assert encode_unwind_info(info) == chained


def test_decode_at_offset_in_memoryview():
    data = bytearray(b"\xcc" * 6) + bytes.fromhex("01040100" "0450" "0000") + b"\xcc" * 3
    info = decode_unwind_info(memoryview(data), 6)
    assert info.codes == (UnwindOp.push_nonvol(4, 5),) and info.size == 8


def test_to_clr_drops_the_language_handler_only():
    data = bytes.fromhex("190a0375" "0a03" "05d2" "0150" "0000" "78563412")
    info = decode_unwind_info(data)
    clr = to_clr(info)
    assert clr.flags == UnwindFlags.NHANDLER and clr.handler_rva is None and clr.handler_data == b""
    assert (clr.codes, clr.prolog_size, clr.frame_register, clr.frame_offset) == \
        (info.codes, info.prolog_size, info.frame_register, info.frame_offset)
    assert encode_unwind_info(clr) == bytes([0x01]) + data[1:12]
    chained = decode_unwind_info(bytes.fromhex("21020100" "02c0" "0000") + bytes(12))
    assert to_clr(chained) == chained


# --------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize("data, kind", [
    (b"", "truncated-unwind-info"),
    (bytes.fromhex("0100"), "truncated-unwind-info"),
    (bytes.fromhex("01000200" "0450"), "truncated-unwind-info"),          # codes cut short
    (bytes.fromhex("01000100" "0450"), "truncated-unwind-info"),          # padding slot missing
    (bytes.fromhex("09000000" "0000"), "truncated-unwind-info"),          # handler RVA cut short
    (bytes.fromhex("21000000" + "00" * 8), "truncated-unwind-info"),      # chained entry cut short
    (bytes.fromhex("00000000"), "bad-unwind-version"),
    (bytes.fromhex("03000000"), "bad-unwind-version"),
    (bytes.fromhex("41000000"), "bad-unwind-flags"),                      # undefined flag 8
    (bytes.fromhex("29000000" + "00" * 16), "bad-unwind-flags"),          # handler + chain
    (bytes.fromhex("01000100" "0007" "0000"), "bad-unwind-op"),           # SPARE_CODE
    (bytes.fromhex("01000100" "000c" "0000"), "bad-unwind-op"),           # 12
    (bytes.fromhex("01000100" "0006" "0000"), "bad-unwind-op"),           # EPILOG in version 1
    (bytes.fromhex("01000200" "0021" "0000"), "bad-unwind-op"),           # ALLOC_LARGE OpInfo 2
    (bytes.fromhex("01000100" "0001" "0000"), "bad-unwind-op"),           # extra slot past count
    (bytes.fromhex("01000200" "0011" "0000"), "bad-unwind-op"),           # two extra, one left
])
def test_damaged_inputs(data, kind):
    with pytest.raises(UnwindError) as e:
        decode_unwind_info(data)
    assert e.value.kind == kind and e.value.stage == "unwind"
    assert e.value.as_dict()["kind"] == kind


def test_offset_outside_data():
    with pytest.raises(UnwindError) as e:
        decode_unwind_info(b"\x01\x00\x00\x00", 5)
    assert e.value.kind == "truncated-unwind-info"


def test_unencodable_values_are_refused():
    with pytest.raises(UnwindError, match="frame offset"):
        UnwindInfo(frame_register=5, frame_offset=0x18)
    with pytest.raises(UnwindError, match="handler RVA"):
        UnwindInfo(flags=UnwindFlags.EHANDLER)
    with pytest.raises(UnwindError, match="slots"):
        UnwindInfo(codes=(UnwindOp.save_nonvol(0, 3, 0x100000),) * 86)
    with pytest.raises(UnwindError, match="multiple of 8"):
        UnwindOp.alloc(0, 12)
    with pytest.raises(UnwindError):
        UnwindOp(0, UnwindOpKind.SAVE_NONVOL, 3, 0x10000)


# --------------------------------------------------------------------------------------------
# Generated values


@st.composite
def unwind_ops(draw, version: int):
    kinds = [k for k in UnwindOpKind if version == 2 or k != UnwindOpKind.EPILOG]
    kind = draw(st.sampled_from(kinds))
    op_info = draw(st.integers(0, 1 if kind == UnwindOpKind.ALLOC_LARGE else 15))
    op = UnwindOp(draw(st.integers(0, 255)), kind, op_info)
    bits = (0, 16, 32)[op.extra_slots]
    return replace(op, operand=draw(st.integers(0, (1 << bits) - 1)))


@st.composite
def unwind_infos(draw):
    version = draw(st.sampled_from([1, 2]))
    codes, slots = [], 0
    for op in draw(st.lists(unwind_ops(version), max_size=24)):
        if slots + op.slots <= 255:
            codes.append(op)
            slots += op.slots
    flags = UnwindFlags(draw(st.sampled_from([0, 1, 2, 3, 4])))
    handler = bool(flags & (UnwindFlags.EHANDLER | UnwindFlags.UHANDLER))
    return UnwindInfo(
        version=version, flags=flags, prolog_size=draw(st.integers(0, 255)),
        frame_register=draw(st.integers(0, 15)), frame_offset=16 * draw(st.integers(0, 15)),
        codes=tuple(codes), padding_slot=draw(st.integers(0, 0xFFFF)) if slots % 2 else 0,
        handler_rva=draw(st.integers(0, 0xFFFFFFFF)) if handler else None,
        handler_data=draw(st.binary(max_size=12)) if handler else b"",
        chained=(RuntimeFunction(*draw(st.tuples(*[st.integers(0, 0xFFFFFFFF)] * 3)))
                 if flags & UnwindFlags.CHAININFO else None))


@given(unwind_infos(), st.binary(max_size=8))
def test_round_trip_of_generated_values(info, tail):
    data = encode_unwind_info(info)
    assert len(data) == info.size
    back = decode_unwind_info(data + tail, handler_data_size=len(info.handler_data))
    assert back == info and back.size == info.size
    assert str(back) == str(info)


@given(unwind_infos(), st.data())
def test_every_proper_prefix_is_truncated(info, data):
    encoded = encode_unwind_info(info)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(UnwindError) as e:
        decode_unwind_info(encoded[:cut], handler_data_size=len(info.handler_data))
    assert e.value.kind == "truncated-unwind-info"


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([1, 2, 0x19, 0x1A, 0x21, 0x22]), st.binary(min_size=3, max_size=96),
       st.integers(0, 6))
def test_any_bytes_decode_to_an_exact_round_trip_or_an_error(first, rest, handler_data_size):
    data = bytes([first]) + rest
    try:
        info = decode_unwind_info(data, handler_data_size=handler_data_size)
    except UnwindError as e:
        assert e.kind in {"truncated-unwind-info", "bad-unwind-version", "bad-unwind-flags",
                          "bad-unwind-op"}
        return
    assert encode_unwind_info(info) == data[:info.size]


@given(unwind_infos(), st.data())
def test_corrupted_header_and_ops_give_their_kind(info, data):
    encoded = bytearray(encode_unwind_info(info))
    hd = len(info.handler_data)
    bad_version = bytearray(encoded)
    bad_version[0] = (bad_version[0] & 0xF8) | data.draw(st.sampled_from([0, 3, 4, 5, 6, 7]))
    with pytest.raises(UnwindError) as e:
        decode_unwind_info(bytes(bad_version), handler_data_size=hd)
    assert e.value.kind == "bad-unwind-version"
    bad_flags = bytearray(encoded)
    bad_flags[0] |= data.draw(st.sampled_from([0x40, 0x80]))
    with pytest.raises(UnwindError) as e:
        decode_unwind_info(bytes(bad_flags), handler_data_size=hd)
    assert e.value.kind == "bad-unwind-flags"
    if info.codes:
        bad_op = bytearray(encoded)
        bad_op[5] = (bad_op[5] & 0xF0) | data.draw(st.sampled_from([7, 12, 13, 14, 15]))
        with pytest.raises(UnwindError) as e:
            decode_unwind_info(bytes(bad_op), handler_data_size=hd)
        assert e.value.kind == "bad-unwind-op"


@st.composite
def damaged_unwind_infos(draw):
    """A generated UNWIND_INFO's bytes, maybe with a few rewritten (past the version and flags,
    which are refused before any layout is read), maybe cut, maybe with bytes after it; and a
    handler data size, not always the one it was encoded with."""
    info = draw(unwind_infos())
    data = bytearray(encode_unwind_info(info) + draw(st.binary(max_size=8)))
    for at, value in draw(st.lists(st.tuples(st.integers(1, len(data) - 1), st.integers(0, 255)), max_size=3)):
        data[at] = value
    cut = draw(st.integers(0, len(data))) if draw(st.booleans()) else len(data)
    return bytes(data[:cut]), draw(st.sampled_from([len(info.handler_data), 0, 4]))


@given(damaged_unwind_infos())
def test_decoding_reads_what_the_declaration_reads(case):
    """The codec reads an UNWIND_INFO piece by piece; `structs.UnwindInfo` reads it whole."""
    data, handler_data_size = case
    try:
        raw = structs.UnwindInfo.parse(data, handler_data_size=handler_data_size)
    except StreamError:
        raw = None
    try:
        info = decode_unwind_info(data, handler_data_size=handler_data_size)
    except UnwindError as e:
        # The declaration reads to the end, or the data ends first; the codec may still refuse an
        # operation, or one whose extra slots CountOfCodes cuts off (the declaration's array
        # ends before it).
        assert e.kind == ("truncated-unwind-info" if raw is None else "bad-unwind-op")
        return
    assert raw is not None and info.size == raw.end
    header = raw.header
    assert (info.version, info.flags, info.prolog_size, info.frame_register, info.frame_offset) == (
        header.version, header.flags, header.size_of_prolog, header.frame_register, header.frame_offset * 16)
    assert [(op.code_offset, op.op, op.op_info, op.operand) for op in info.codes] == [
        (c.code_offset, c.operation.unwind_op, c.operation.op_info, c.operand or 0) for c in raw.codes]
    assert info.padding_slot == (raw.padding or 0)
    assert (info.handler_rva, info.handler_data) == (
        (raw.handler.handler_rva, raw.handler.handler_data) if raw.handler else (None, b""))
    assert info.chained == (RuntimeFunction(raw.chained.begin_rva, raw.chained.end_rva, raw.chained.unwind_rva)
                            if raw.chained else None)


# --------------------------------------------------------------------------------------------
# The llvm-readobj oracle over LLVM-compiled objects

# Values loaded before a call and stored after it (volatile: neither may move) stay live across
# the call, so they take callee-saved registers: GPRs pushed, XMM6-15 saved with movaps.
_CALLEE_SAVED_IR = "\n".join(
    ["define void @callee_saved(ptr %p) {"]
    + [f"  %v{i} = load volatile i64, ptr %p" for i in range(9)]
    + ["  call void @use(ptr %p)"]
    + [f"  store volatile i64 %v{i}, ptr %p" for i in range(9)]
    + ["  ret void", "}"])

_XMM_IR = "\n".join(
    ["define void @xmm_saved(ptr %p) {"]
    + [f"  %d{i} = load volatile double, ptr %p" for i in range(11)]
    + ["  call void @use(ptr %p)"]
    + [f"  store volatile double %d{i}, ptr %p" for i in range(11)]
    + ["  ret void", "}"])

PLAIN_IR = f"""
target triple = "{TRIPLE}"
declare void @use(ptr)
declare i32 @ProcessCLRException(...)
declare i32 @__CxxFrameHandler3(...)

define i32 @leaf(i32 %a) {{
  %r = add i32 %a, 1
  ret i32 %r
}}

define void @small_frame() {{
  %p = alloca [8 x i32]
  call void @use(ptr %p)
  ret void
}}

define void @frame_pointer(i64 %n) {{
  %p = alloca i8, i64 %n
  call void @use(ptr %p)
  ret void
}}

{_CALLEE_SAVED_IR}

define void @large_frame() {{
  %p = alloca [4000 x i8]
  call void @use(ptr %p)
  ret void
}}

define void @huge_frame() {{
  %p = alloca [600000 x i8]
  call void @use(ptr %p)
  ret void
}}

{_XMM_IR}
"""

EH_IR = """
define void @clr_catch() personality ptr @ProcessCLRException {
entry:
  %p = alloca [8 x i64]
  invoke void @use(ptr %p) to label %done unwind label %dispatch
dispatch:
  %cs = catchswitch within none [label %handler] unwind to caller
handler:
  %c = catchpad within %cs [i32 16777217]
  call void @use(ptr %p) [ "funclet"(token %c) ]
  catchret from %c to label %done
done:
  ret void
}

define void @cxx_catch() personality ptr @__CxxFrameHandler3 {
entry:
  %p = alloca [8 x i64]
  invoke void @use(ptr %p) to label %done unwind label %dispatch
dispatch:
  %cs = catchswitch within none [label %handler] unwind to caller
handler:
  %c = catchpad within %cs [ptr null, i32 64, ptr null]
  call void @use(ptr %p) [ "funclet"(token %c) ]
  catchret from %c to label %done
done:
  ret void
}
"""

COMPILED_IR = PLAIN_IR + EH_IR

# Operations LLVM's codegen never chooses, written with the assembler's .seh directives:
# SAVE_NONVOL(_FAR), SAVE_XMM128_FAR, a nonzero FrameOffset with ALLOC_LARGE in between, a
# handler with 4 bytes of handler data, a chained entry, PUSH_MACHFRAME; no codes at all.
_DIRECTIVES = """
.text
.globl hand_written
.seh_proc hand_written
.seh_handler hand_handler, @unwind, @except
hand_written:
  pushq %rbp
  .seh_pushreg %rbp
  subq $0x2000, %rsp
  .seh_stackalloc 0x2000
  leaq 0xe0(%rsp), %rbp
  .seh_setframe %rbp, 0xe0
  movq %rsi, 0x10(%rsp)
  .seh_savereg %rsi, 0x10
  movq %rdi, 0x100000(%rsp)
  .seh_savereg %rdi, 0x100000
  movaps %xmm15, 0x200000(%rsp)
  .seh_savexmm %xmm15, 0x200000
  movaps %xmm7, 0x40(%rsp)
  .seh_savexmm %xmm7, 0x40
  .seh_endprologue
  nop
  .seh_handlerdata
  .long 0x11223344
  .text
  .seh_startchained
  pushq %r12
  .seh_pushreg %r12
  .seh_endprologue
  nop
  .seh_endchained
  ret
  .seh_endproc
.globl machine_frame
.seh_proc machine_frame
machine_frame:
  .seh_pushframe @code
  subq $8, %rsp
  .seh_stackalloc 8
  .seh_endprologue
  ret
  .seh_endproc
.globl no_codes
.seh_proc no_codes
no_codes:
  .seh_endprologue
  ret
  .seh_endproc
"""

DIRECTIVES_IR = f'target triple = "{TRIPLE}"\ndeclare void @hand_handler()\n' + "".join(
    f"module asm {llvm_quote}\n" for llvm_quote in
    ('"' + line.replace("\\", "\\5C").replace('"', "\\22") + '"'
     for line in _DIRECTIVES.strip().splitlines()))

# Bytes of handler data after each personality's RVA: __CxxFrameHandler3 takes the RVA of the
# function's FuncInfo ($cppxdata); the CLR personality nothing (LLVM's CLR table is separate).
HANDLER_DATA_SIZE = {"__CxxFrameHandler3": 4, "hand_handler": 4, "ProcessCLRException": 0}


def compile_to_coff(ir: str, opt: int = 2) -> bytes:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    llvm.initialize_native_asmparser()  # module asm (the host is x86-64, as the target)
    module = llvm.parse_assembly(ir)
    module.verify()
    machine = llvm.Target.from_triple(TRIPLE).create_target_machine(opt=opt, codemodel="small")
    return machine.emit_object(module)


# -- a minimal COFF section / relocation / symbol lookup (test only) --------------------------

_CoffHeader = Struct("machine" / Int16ul, "number_of_sections" / Int16ul, "time_date_stamp" / Int32ul,
                     "pointer_to_symbol_table" / Int32ul, "number_of_symbols" / Int32ul,
                     "size_of_optional_header" / Int16ul, "characteristics" / Int16ul)
_CoffSection = Struct("name" / Bytes(8), "virtual_size" / Int32ul, "virtual_address" / Int32ul,
                      "size_of_raw_data" / Int32ul, "pointer_to_raw_data" / Int32ul,
                      "pointer_to_relocations" / Int32ul, "pointer_to_linenumbers" / Int32ul,
                      "number_of_relocations" / Int16ul, "number_of_linenumbers" / Int16ul,
                      "characteristics" / Int32ul)
_CoffRelocation = Struct("virtual_address" / Int32ul, "symbol_table_index" / Int32ul, "type" / Int16ul)
_CoffSymbol = Struct("name" / Bytes(8), "value" / Int32ul, "section_number" / Int16sl,
                     "type" / Int16ul, "storage_class" / Int8ul, "number_of_aux_symbols" / Int8ul)


@dataclass
class Coff:
    sections: dict[str, tuple[int, bytes, dict[int, int]]]  # name -> (number, raw, {offset: symbol})
    symbols: dict[int, tuple[str, int, int]]                # index -> (name, section number, value)

    @classmethod
    def parse(cls, data: bytes) -> "Coff":
        header = _CoffHeader.parse(data)
        table = header.pointer_to_symbol_table
        strings = table + 18 * header.number_of_symbols

        def name_of(raw: bytes) -> str:
            if raw[:4] == b"\0\0\0\0":
                start = strings + Int32ul.parse(raw[4:])
                return data[start:data.index(b"\0", start)].decode()
            return raw.rstrip(b"\0").decode()

        symbols, index = {}, 0
        while index < header.number_of_symbols:
            sym = _CoffSymbol.parse(data[table + 18 * index:])
            symbols[index] = (name_of(sym.name), sym.section_number, sym.value)
            index += 1 + sym.number_of_aux_symbols
        sections = {}
        headers = Array(header.number_of_sections, _CoffSection).parse(
            data[20 + header.size_of_optional_header:])
        for number, s in enumerate(headers, start=1):
            relocs = Array(s.number_of_relocations, _CoffRelocation).parse(data[s.pointer_to_relocations:])
            raw = data[s.pointer_to_raw_data:s.pointer_to_raw_data + s.size_of_raw_data]
            sections[name_of(s.name)] = (number, raw, {r.virtual_address: r.symbol_table_index
                                                       for r in relocs})
        return cls(sections, symbols)

    def target(self, section: str, offset: int) -> tuple[str, int, int]:
        """The relocated dword at `offset` of `section`: (symbol, its value, inline addend)."""
        _, raw, relocs = self.sections[section]
        name, _, value = self.symbols[relocs[offset]]
        return name, value, Int32ul.parse(raw[offset:offset + 4])

    def address_of(self, name: str) -> int:
        return next(value for sym, _, value in self.symbols.values() if sym == name)

    def function_at(self, section: str, address: int) -> str:
        """The function symbol at `address` of `section` (not the section's own symbol)."""
        number = self.sections[section][0]
        return next(sym for sym, sec, value in self.symbols.values()
                    if sec == number and value == address and not sym.startswith((".", "$")))


# -- llvm-readobj --unwind, parsed ------------------------------------------------------------

_ADDRESS = re.compile(r"(\S+?)(?: \+0x([0-9A-F]+))? \((0x[0-9A-F]+)\)$")


def _address(text: str) -> tuple[str, int, int]:
    """`sym +0x1A (0x4)` -> (sym, 0x1A, 0x4): symbol, offset from it, where the field is."""
    m = _ADDRESS.fullmatch(text)
    return m.group(1), int(m.group(2) or "0", 16), int(m.group(3), 16)


def readobj_unwind(path) -> list[dict]:
    out = subprocess.run(["llvm-readobj", "--unwind", str(path)], check=True,
                         capture_output=True, text=True).stdout
    functions, current, where = [], None, None
    for line in out.splitlines():
        text = line.strip()
        if text == "RuntimeFunction {":
            current = {"codes": []}
            functions.append(current)
            where = current
        elif text == "Chained {":
            where = current["chained"] = {}
        elif text == "UnwindCodes [":
            where = "codes"
        elif text == "]" and where == "codes":
            where = current
        elif where == "codes":
            current["codes"].append(text)
        elif current is not None and ": " in text:
            key, value = text.split(": ", 1)
            where[key] = value
        elif text.startswith("Flags [") and current is not None:
            current["Flags"] = int(re.search(r"\((0x[0-9A-F]+)\)", text).group(1), 16)
    return functions


_CODE = re.compile(r"0x([0-9A-F]{2}): (\w+)(?: (.*))?")


def _expected_operands(op: UnwindOp, info: UnwindInfo) -> str:
    """Our operands in readobj's words, built from our fields (not from our text)."""
    k = op.op
    if k == UnwindOpKind.PUSH_NONVOL:
        return f"reg={op.register_name}"
    if k in (UnwindOpKind.ALLOC_SMALL, UnwindOpKind.ALLOC_LARGE):
        return f"size={op.size}"
    if k == UnwindOpKind.SET_FPREG:
        return f"reg={info.frame_register_name}, offset=0x{info.frame_offset:X}"
    if k == UnwindOpKind.PUSH_MACHFRAME:
        return f"errcode={'yes' if op.op_info else 'no'}"
    return f"reg={op.register_name}, offset=0x{op.offset:X}"


def compare_with_readobj(obj_path, data: bytes) -> list[UnwindInfo]:
    """Decode every UNWIND_INFO .pdata names, check it against llvm-readobj, return them."""
    coff = Coff.parse(data)
    _, pdata, _ = coff.sections[".pdata"]
    _, xdata, _ = coff.sections[".xdata"]
    listed = readobj_unwind(obj_path)
    assert len(listed) == len(pdata) // 12 > 0
    decoded, extents = [], []
    for index, entry in enumerate(listed):
        section, base, addend = coff.target(".pdata", 12 * index + 8)
        assert section == ".xdata"
        xoffset = base + addend
        sym, plus, field = _address(entry["UnwindInfoAddress"])
        assert (sym, plus, field) == (".xdata", xoffset, 12 * index + 8)

        handler = entry.get("Handler")
        handler_name = handler and _address(handler)[0]
        info = decode_unwind_info(xdata, xoffset,
                                  handler_data_size=HANDLER_DATA_SIZE.get(handler_name, 0))
        decoded.append(info)
        extents.append((xoffset, xoffset + info.size))
        assert encode_unwind_info(info) == xdata[xoffset:xoffset + info.size]

        assert int(entry["Version"]) == info.version
        assert entry["Flags"] == int(info.flags)
        assert int(entry["PrologSize"]) == info.prolog_size
        assert int(entry["UnwindCodeCount"]) == info.count_of_codes
        if info.frame_register:
            assert entry["FrameRegister"] == f"{info.frame_register_name} (0x{info.frame_register:X})"
            assert entry["FrameOffset"] == f"0x{info.frame_offset // 16:X}"  # readobj: scaled
        else:
            assert entry["FrameRegister"] == entry["FrameOffset"] == "-"

        ours = [op.describe(info.frame_register, info.frame_offset) for op in info.codes]
        assert ours == entry["codes"]  # our text, line by line
        parsed = [_CODE.fullmatch(line).groups() for line in entry["codes"]]
        assert [(int(off, 16), name, operands) for off, name, operands in parsed] == [
            (op.code_offset, op.op.name, _expected_operands(op, info)) for op in info.codes]

        slots = info.count_of_codes + info.count_of_codes % 2
        if handler is not None:
            name, plus, field = _address(handler)
            assert field == xoffset + 4 + 2 * slots      # the handler RVA is where we read it
            symbol, base, addend = coff.target(".xdata", field)
            assert addend == info.handler_rva            # before linking: the inline addend
            assert base + addend == coff.address_of(name) + plus
        else:
            assert info.handler_rva is None
        if "chained" in entry:
            chained = entry["chained"]
            ours_fields = (info.chained.begin_rva, info.chained.end_rva, info.chained.unwind_rva)
            for i, key in enumerate(("StartAddress", "EndAddress", "UnwindInfoAddress")):
                name, plus, field = _address(chained[key])
                assert field == xoffset + 4 + 2 * slots + 4 * i
                symbol, base, addend = coff.target(".xdata", field)
                assert addend == ours_fields[i]
                assert base + addend == coff.address_of(name) + plus
        else:
            assert info.chained is None
    extents.sort()
    assert all(end <= start for (_, end), (start, _) in zip(extents, extents[1:]))
    return decoded


@pytest.fixture(scope="module")
def readobj():
    assert shutil.which("llvm-readobj"), "llvm-readobj (Debian package llvm) is required"


def test_llvm_codegen_agrees_with_readobj(tmp_path, readobj):
    data = compile_to_coff(COMPILED_IR)
    (tmp_path / "codegen.obj").write_bytes(data)
    infos = compare_with_readobj(tmp_path / "codegen.obj", data)
    coff = Coff.parse(data)
    by_function = {}
    for index, info in enumerate(infos):
        _, base, addend = coff.target(".pdata", 12 * index)
        by_function.setdefault(coff.function_at(".text", base + addend), []).append(info)
    # LLVM emits no unwind info for a leaf without a frame.
    assert "leaf" not in by_function and len(infos) == 10
    kinds = {name: {op.op for info in group for op in info.codes} for name, group in by_function.items()}
    # What each function was written to exercise is really there.
    assert kinds["small_frame"] == {UnwindOpKind.ALLOC_SMALL}
    assert UnwindOpKind.SET_FPREG in kinds["frame_pointer"]
    pushes = [op for op in by_function["callee_saved"][0].codes if op.op == UnwindOpKind.PUSH_NONVOL]
    assert len(pushes) >= 6
    (large,) = by_function["large_frame"][0].codes
    assert (large.op, large.op_info, large.slots, large.size) == (UnwindOpKind.ALLOC_LARGE, 0, 2, 4040)
    (huge,) = by_function["huge_frame"][0].codes
    assert (huge.op, huge.op_info, huge.slots) == (UnwindOpKind.ALLOC_LARGE, 1, 3) and huge.size > 512 * 1024
    xmm = {op.register_name for op in by_function["xmm_saved"][0].codes if op.op == UnwindOpKind.SAVE_XMM128}
    assert {"XMM6", "XMM7", "XMM8"} <= xmm
    # EH functions: every UNWIND_INFO (parent and funclet) carries the personality; to_clr drops it.
    eh = [info for info in infos if info.flags & UnwindFlags.EHANDLER]
    assert len(eh) == 4 and all(info.flags == UnwindFlags.EHANDLER | UnwindFlags.UHANDLER for info in eh)
    for info in eh:
        clr = to_clr(info)
        assert clr.flags == UnwindFlags.NHANDLER and clr.codes == info.codes
        assert decode_unwind_info(encode_unwind_info(clr)) == clr


def test_directive_written_operations_agree_with_readobj(tmp_path, readobj):
    data = compile_to_coff(DIRECTIVES_IR)
    (tmp_path / "directives.obj").write_bytes(data)
    hand, chained, machine, empty = compare_with_readobj(tmp_path / "directives.obj", data)
    assert [op.op for op in hand.codes] == [
        UnwindOpKind.SAVE_XMM128, UnwindOpKind.SAVE_XMM128_FAR, UnwindOpKind.SAVE_NONVOL_FAR,
        UnwindOpKind.SAVE_NONVOL, UnwindOpKind.SET_FPREG, UnwindOpKind.ALLOC_LARGE,
        UnwindOpKind.PUSH_NONVOL]
    assert hand.frame_offset == 0xE0 and hand.handler_data == bytes.fromhex("44332211")
    assert chained.flags == UnwindFlags.CHAININFO and hand.chained is None
    assert chained.chained.unwind_rva == 0  # the parent UNWIND_INFO, at .xdata+0
    assert [op.op for op in machine.codes] == [UnwindOpKind.ALLOC_SMALL, UnwindOpKind.PUSH_MACHFRAME]
    # LLVM pads a code-less, handler-less UNWIND_INFO to 8 bytes; the zero dword is slack.
    assert empty == UnwindInfo() and empty.size == 4
    xdata = Coff.parse(data).sections[".xdata"][1]
    assert xdata[-8:] == bytes.fromhex("01000000 00000000")


def test_unwind_v2_epilog_codes_round_trip(tmp_path):
    """LLVM 22 writes version 2 on request; llvm-readobj 14 cannot read it (it aborts), so the
    oracle here is the same module compiled as version 1: the prolog ops must agree.

    Funclets are left out: LLVM 22's unwind-v2 pass aborts on them ("SEH_PushReg outside of
    prolog", X86WinEHUnwindV2.cpp) -- a funclet's prolog is not at the function's start."""
    flags = '!llvm.module.flags = !{!0}\n!0 = !{i32 1, !"winx64-eh-unwindv2", i32 1}\n'
    v1, v2 = (Coff.parse(compile_to_coff(PLAIN_IR + extra)) for extra in ("", flags))
    _, pdata1, _ = v1.sections[".pdata"]
    _, pdata2, _ = v2.sections[".pdata"]
    assert len(pdata1) == len(pdata2)
    versions = set()
    for index in range(len(pdata1) // 12):
        off1 = sum(v1.target(".pdata", 12 * index + 8)[1:])
        off2 = sum(v2.target(".pdata", 12 * index + 8)[1:])
        one = decode_unwind_info(v1.sections[".xdata"][1], off1)
        two = decode_unwind_info(v2.sections[".xdata"][1], off2)
        assert encode_unwind_info(two) == v2.sections[".xdata"][1][off2:off2 + two.size]
        versions.add(two.version)
        if two.version == 2:
            epilogs = [op for op in two.codes if op.op == UnwindOpKind.EPILOG]
            assert epilogs and two.codes[:len(epilogs)] == tuple(epilogs)  # epilog codes first
            assert two.codes[len(epilogs):] == one.codes and two.prolog_size == one.prolog_size
    assert 2 in versions


# --------------------------------------------------------------------------------------------
# RyuJIT's UNWIND_INFOs in ReadyToRun CoreLib (the pinned corpus): every one round-trips


def test_every_corelib_unwind_info_round_trips():
    from llilc_eh.assembly.corpus import Corpus
    from llilc_eh.assembly.r2r import ReadyToRunImage

    image = ReadyToRunImage.open(Corpus().find("System.Private.CoreLib.dll").location)
    rvas = sorted({rf.unwind_rva for rf in image.runtime_functions})
    personalities, ops = set(), set()
    for rva in rvas:
        data = image.unwind_bytes(rva)
        info = decode_unwind_info(data)  # the personality RVA ends it: no handler data of ours
        assert encode_unwind_info(info) == bytes(data[:info.size]), f"unwind RVA 0x{rva:X}"
        # The runtime's form (crossgen's ZapUnwindData): version 1, EHANDLER|UHANDLER, zero padding.
        assert (info.version, info.flags, info.padding_slot) == (1, HANDLER_FLAGS, 0)
        assert to_clr(info).flags == UnwindFlags.NHANDLER
        personalities.add(info.handler_rva)
        ops.update(op.op for op in info.codes)
    # Measured on the pinned corpus (R2R v3.1, Linux x64): 29,855 runtime functions share
    # 10,400 UNWIND_INFOs; two personality routines; SysV has no callee-saved XMM registers,
    # and frames over 240 bytes above RSP use CoreCLR's Unix-only SET_FPREG_LARGE.
    assert (len(image.runtime_functions), len(rvas)) == (29_855, 10_400)
    assert len(personalities) == 2
    assert ops == {UnwindOpKind.PUSH_NONVOL, UnwindOpKind.ALLOC_SMALL, UnwindOpKind.ALLOC_LARGE,
                   UnwindOpKind.SET_FPREG, UnwindOpKind.SET_FPREG_LARGE}
