"""decode(): operands of every kind, monodis-style text, each error at its offset, round trips."""

from __future__ import annotations

import math
import struct
import time

import pytest
from hypothesis import given, settings

from il_strategies import bodies
from ilbytes import assemble, encode
from llilc_eh.errors import ILError
from llilc_eh.il.decoder import Instruction, decode
from llilc_eh.il.opcodes import BY_NAME


def one(il: bytes) -> Instruction:
    instrs = decode(il)
    assert len(instrs) >= 1
    return instrs[0]


# -- every operand kind, from hand-written bytes ------------------------------------------

@pytest.mark.parametrize("il,name,operand,text", [
    (b"\x02", "ldarg.0", None, "IL_0000:  ldarg.0"),
    (b"\x1f\xfb", "ldc.i4.s", -5, "IL_0000:  ldc.i4.s 0xfffffffb"),
    (b"\x1f\x7f", "ldc.i4.s", 127, "IL_0000:  ldc.i4.s 0x7f"),
    (b"\x0e\xff", "ldarg.s", 255, "IL_0000:  ldarg.s 255"),        # unsigned int8 index
    (b"\x12\x80", "ldloca.s", 128, "IL_0000:  ldloca.s 128"),
    (b"\xfe\x09\xff\xff", "ldarg", 65535, "IL_0000:  ldarg 65535"),  # unsigned int16 index
    (b"\xfe\x0e\x2c\x01", "stloc", 300, "IL_0000:  stloc 300"),
    (b"\x20\xff\xff\xff\xff", "ldc.i4", -1, "IL_0000:  ldc.i4 -1"),
    (b"\x20\x40\xe2\x01\x00", "ldc.i4", 123456, "IL_0000:  ldc.i4 123456"),
    (b"\x21" + struct.pack("<q", -2), "ldc.i8", -2, "IL_0000:  ldc.i8 0xfffffffffffffffe"),
    (b"\x21" + struct.pack("<q", 0x123456789), "ldc.i8", 0x123456789, "IL_0000:  ldc.i8 0x123456789"),
    (b"\x22" + struct.pack("<f", 1.5), "ldc.r4", 1.5, "IL_0000:  ldc.r4 1.5"),
    (b"\x22" + struct.pack("<f", 3.0), "ldc.r4", 3.0, "IL_0000:  ldc.r4 3."),
    (b"\x22" + struct.pack("<f", 0.1), "ldc.r4", struct.unpack("<f", struct.pack("<f", 0.1))[0],
     "IL_0000:  ldc.r4 0.10000000149011612"),
    (b"\x23" + struct.pack("<d", 2.25), "ldc.r8", 2.25, "IL_0000:  ldc.r8 2.25"),
    (b"\x23" + struct.pack("<d", 1e300), "ldc.r8", 1e300, "IL_0000:  ldc.r8 1.0000000000000001e+300"),
    (b"\x23" + struct.pack("<d", -0.0), "ldc.r8", -0.0, "IL_0000:  ldc.r8 -0."),
    (b"\x23" + struct.pack("<d", math.inf), "ldc.r8", math.inf, "IL_0000:  ldc.r8 (00 00 00 00 00 00 f0 7f)"),
    (b"\x22" + struct.pack("<f", -math.inf), "ldc.r4", -math.inf, "IL_0000:  ldc.r4 (00 00 80 ff)"),
    (b"\x28\x12\x00\x00\x0a", "call", 0x0A000012, "IL_0000:  call 0x0A000012"),
    (b"\x29\x03\x00\x00\x11", "calli", 0x11000003, "IL_0000:  calli 0x11000003"),
    (b"\x7b\x01\x00\x00\x04", "ldfld", 0x04000001, "IL_0000:  ldfld 0x04000001"),
    (b"\x8c\x05\x00\x00\x1b", "box", 0x1B000005, "IL_0000:  box 0x1B000005"),
    (b"\x72\x01\x00\x00\x70", "ldstr", 0x70000001, "IL_0000:  ldstr 0x70000001"),
    (b"\xd0\x02\x00\x00\x02", "ldtoken", 0x02000002, "IL_0000:  ldtoken 0x02000002"),
    (b"\x2b\xfe", "br.s", 0, "IL_0000:  br.s IL_0000"),             # self loop: -2 from the end
    (b"\x38\x00\x00\x00\x00\x2a", "br", 5, "IL_0000:  br IL_0005"),  # displacement 0: next one
    (b"\xdd\xfb\xff\xff\xff", "leave", 0, "IL_0000:  leave IL_0000"),
])
def test_operand_kinds(il, name, operand, text):
    instr = one(il)
    assert instr.op is BY_NAME[name]
    assert instr.offset == 0
    assert instr.size == len(il) if name != "br" else instr.size == 5
    if isinstance(operand, float):
        assert struct.pack("<d", instr.operand) == struct.pack("<d", operand)
    else:
        assert instr.operand == operand
    assert str(instr) == text


def test_prefix_operands_are_unsigned_and_separate_instructions():
    instrs = decode(b"\xfe\x12\x04\xfe\x13\x4a\xfe\x19\x06\x8f\x01\x00\x00\x02")
    assert [(i.offset, i.op.name, i.operand, i.size) for i in instrs] == [
        (0, "unaligned.", 4, 3), (3, "volatile.", None, 2), (5, "ldind.i4", None, 1),
        (6, "no.", 6, 3), (9, "ldelema", 0x02000001, 5)]
    assert [str(i) for i in instrs[:2]] == ["IL_0000:  unaligned. 0x04", "IL_0003:  volatile."]
    assert str(decode(b"\xfe\x16\x01\x00\x00\x1b\x6f\x02\x00\x00\x0a")[0]) == "IL_0000:  constrained. 0x1B000001"


def test_switch_targets_are_absolute():
    # switch (2 targets) is 1 + 4 + 8 = 13 bytes; targets relative to offset 13.
    il = b"\x45\x02\x00\x00\x00" + struct.pack("<ii", 0, -13) + b"\x2a"
    sw = one(il)
    assert sw.operand == (13, 0) and sw.targets == (13, 0) and sw.size == 13 and sw.end == 13
    assert str(sw) == "IL_0000:  switch (IL_000d, IL_0000)"
    empty = one(b"\x45\x00\x00\x00\x00\x2a")
    assert empty.operand == () and empty.targets == () and str(empty) == "IL_0000:  switch ( )"


def test_nan_operands():
    f = one(b"\x22" + struct.pack("<f", math.nan))
    d = one(b"\x23" + bytes.fromhex("000000000000f87f"))
    assert math.isnan(f.operand) and math.isnan(d.operand)
    assert str(f) == "IL_0000:  ldc.r4 (00 00 c0 7f)"
    assert str(d) == "IL_0000:  ldc.r8 (00 00 00 00 00 00 f8 7f)"


def test_targets_end_and_offsets():
    instrs = decode(assemble("""
        L0: ldarg.0
            brtrue.s L2
            nop
        L2: leave L0
    """))
    assert [(i.offset, i.size, i.end) for i in instrs] == [(0, 1, 1), (1, 2, 3), (3, 1, 4), (4, 5, 9)]
    assert instrs[0].targets == () and instrs[1].targets == (4,) and instrs[3].targets == (0,)


def test_namer_names_tokens_only():
    instrs = decode(assemble("ldfld 0x04000012\nldc.i4 7\ncall 0x0A000001"))
    names = {0x04000012: "int32 C::f", 0x0A000001: "void C::M()"}
    assert [i.format(names.__getitem__) for i in instrs] == [
        "IL_0000:  ldfld int32 C::f", "IL_0005:  ldc.i4 7", "IL_000a:  call void C::M()"]


def test_instruction_is_frozen_and_comparable():
    a, b = decode(b"\x00"), decode(b"\x00")
    assert a == b and hash(a) == hash(b)
    with pytest.raises(AttributeError):
        a[0].offset = 3  # type: ignore[misc]


# -- errors, each at its IL offset ---------------------------------------------------------

def error_of(il: bytes, **kw) -> ILError:
    with pytest.raises(ILError) as info:
        decode(il, **kw)
    return info.value


@pytest.mark.parametrize("il,kind,offset", [
    (b"", "empty-body", 0),
    (b"\x00\x24", "invalid-opcode", 1),              # 0x24 is unused
    (b"\x00\x00\xa6", "invalid-opcode", 2),
    (b"\x00\xfe\x08", "invalid-opcode", 1),          # FE 08 is unused
    (b"\x00\xfe\x1b", "invalid-opcode", 1),
    (b"\xf8", "invalid-opcode", 0),                  # reserved prefix7 byte
    (b"\xff", "invalid-opcode", 0),
    (b"\x00\xfe", "truncated-instruction", 1),       # escape byte alone
    (b"\x00\x20\x01\x02", "truncated-instruction", 1),
    (b"\x1f", "truncated-instruction", 0),
    (b"\x00\x00\xfe\x09\x01", "truncated-instruction", 2),
    (b"\x2a\x45\x01\x00", "truncated-instruction", 1),                # switch count cut
    (b"\x45\x02\x00\x00\x00\x00\x00\x00\x00", "truncated-instruction", 0),  # 2nd target missing
    (b"\x45\xff\xff\xff\xff", "truncated-instruction", 0),            # absurd count
    (b"\x2b\x00", "branch-target-not-instruction", 0),               # to the body end
    (b"\x00\x2b\x05\x2a", "branch-target-not-instruction", 1),       # past the end
    (b"\x2b\xfd", "branch-target-not-instruction", 0),               # before the start
    (b"\x00\x2b\xfc", "branch-target-not-instruction", 1),
    (b"\x20\x00\x00\x00\x00\x2b\xfb", "branch-target-not-instruction", 5),  # into ldc.i4
    (b"\xde\x7f\x2a", "branch-target-not-instruction", 0),           # leave.s too
    (b"\x00\x45\x02\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x2a",
     "branch-target-not-instruction", 1),                            # 2nd switch target inside
])
def test_error_kinds_and_offsets(il, kind, offset):
    err = error_of(il)
    assert (err.kind, err.offset) == (kind, offset)
    assert f"IL_{offset:04X}" in str(err)


def test_error_names_the_method():
    err = error_of(b"\x00\x24", method="0x06000042 C::M")
    assert err.method == "0x06000042 C::M"
    assert str(err) == "method 0x06000042 C::M, IL_0001: invalid opcode 24"


def test_branch_into_prefixed_instruction():
    il = assemble("""
        ldarg.0
        brtrue.s INSIDE
        volatile.
    INSIDE: ldsfld 0x04000001
        ret
    """)
    err = error_of(il)
    assert (err.kind, err.offset) == ("branch-into-prefixed-instruction", 1)
    # The first prefix is a legal target.
    decode(assemble("ldarg.0\nbrtrue.s P\nP: volatile.\nldsfld 0x04000001\nret"))


@pytest.mark.parametrize("source,offset", [
    ("nop\nvolatile.", 1),                             # prefix at the end prefixes nothing
    ("nop\nunaligned. 1\nvolatile.", 1),
    ("tail.\nldarg.0\nret", 0),                        # tail. only before calls
    ("tail.\nnewobj 0x0A000001\nret", 0),
    ("constrained. 0x1B000001\nldfld 0x04000001", 0),  # constrained. before calls/ldftn only
    ("constrained. 0x1B000001\ncalli 0x11000001", 0),
    ("readonly.\nldelem.ref", 0),                      # readonly. before ldelema / Address
    ("volatile.\nldelem.i4", 0),                       # not a memory-access instruction
    ("volatile.\ncall 0x0A000001", 0),
    ("unaligned. 1\nldsfld 0x04000001", 0),            # only volatile. may prefix ldsfld
    ("nop\nvolatile.\nunaligned. 1\nstsfld 0x04000001", 3),
    ("no. 1\nldfld 0x04000001", 0),                    # typecheck: ldfld does none
    ("no. 2\ncastclass 0x02000001", 0),                # rangecheck: castclass does none
    ("no. 4\nunbox 0x02000001", 0),                    # nullcheck: not unbox
    ("no. 5\nldfld 0x04000001", 0),                    # every flag must apply
    ("no. 0\nldarg.0", 0),
    ("volatile.\nvolatile.\nldind.i4", 2),             # repeated prefix
    ("readonly.\nreadonly.\nldelema 0x02000001", 2),
])
def test_dangling_prefix(source, offset):
    err = error_of(assemble(source))
    assert (err.kind, err.offset) == ("dangling-prefix", offset)


@pytest.mark.parametrize("source", [
    "unaligned. 1\nvolatile.\nldind.i4",               # either order (III.2.5)
    "volatile.\nunaligned. 2\nstind.ref",
    "unaligned. 4\ncpblk", "unaligned. 1\ninitblk", "volatile.\ninitblk",
    "volatile.\nldsfld 0x04000001", "volatile.\nstsfld 0x04000001",
    "volatile.\nldobj 0x02000001", "unaligned. 2\nstobj 0x02000001", "volatile.\nstind.i",
    "tail.\ncall 0x0A000001\nret", "tail.\ncalli 0x11000001\nret", "tail.\ncallvirt 0x0A000001\nret",
    "constrained. 0x1B000001\ncallvirt 0x0A000001",
    "constrained. 0x1B000001\ncall 0x0A000001",        # static virtuals (ECMA-335 augments)
    "constrained. 0x1B000001\nldftn 0x0A000001",
    "constrained. 0x1B000001\ntail.\ncallvirt 0x0A000001\nret",
    "readonly.\nldelema 0x02000001", "readonly.\ncall 0x0A000001",
    "no. 1\ncastclass 0x02000001", "no. 1\nstelem.ref", "no. 2\nldelem.i4", "no. 2\nldelem 0x02000001",
    "no. 4\ncallvirt 0x0A000001", "no. 4\nldvirtftn 0x0A000001", "no. 7\nldelema 0x02000001",
    "no. 6\nstelem 0x02000001", "no. 0\nldfld 0x04000001",
    "no. 4\nvolatile.\nldfld 0x04000001",
])
def test_legal_prefix_groups(source):
    decode(assemble(source))


@pytest.mark.parametrize("source,offset", [
    ("nop\nunaligned. 3\nldind.i4", 1),                # alignment must be 1, 2 or 4
    ("unaligned. 8\nldind.i4", 0),
    ("unaligned. 0\nldind.i4", 0),
    ("no. 8\nldfld 0x04000001", 0),                    # undefined check flag
])
def test_invalid_prefix_operand(source, offset):
    err = error_of(assemble(source))
    assert (err.kind, err.offset) == ("invalid-prefix-operand", offset)


@pytest.mark.parametrize("source,offset", [
    ("tail.\ncall 0x0A000001\nnop\nret", 0),
    ("nop\ntail.\ncallvirt 0x0A000001", 1),
    ("constrained. 0x1B000001\ntail.\ncallvirt 0x0A000001\npop\nret", 6),
])
def test_tail_call_must_be_followed_by_ret(source, offset):
    err = error_of(assemble(source))
    assert (err.kind, err.offset) == ("tail-call-not-followed-by-ret", offset)


# -- round trip ----------------------------------------------------------------------------

def _same_operand(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return a == b


@settings(max_examples=300, deadline=None)
@given(bodies())
def test_round_trip(body):
    il = encode(body)
    instrs = decode(il)
    assert [i.op.name for i in instrs] == [name for name, _ in body]
    assert all(_same_operand(i.operand, operand) for i, (_, operand) in zip(instrs, body))
    offsets = [i.offset for i in instrs]
    assert offsets[0] == 0 and all(a.end == b.offset for a, b in zip(instrs, instrs[1:]))
    assert instrs[-1].end == len(il)
    assert encode((i.op.name, i.operand) for i in instrs) == il


# -- speed ---------------------------------------------------------------------------------

def synthetic_stream(size: int = 1 << 20) -> bytes:
    """About `size` bytes of typical compiler output: loads, fields, calls, branches, a switch."""
    block = assemble("""
        L0: ldarg.0
            ldfld 0x04000001
            stloc.0
            ldloc.0
            brfalse.s L1
            ldarg.1
            ldc.i4.s 16
            ldloc.s 4
            call 0x0A000010
            callvirt 0x0A000011
            pop
        L1: ldloca.s 5
            ldc.i4 1000
            newobj 0x0A000012
            stfld 0x04000002
            ldstr 0x70000001
            ldarg.2
            switch L0 L1 L2
            ldsfld 0x04000003
            brtrue L2
            ldnull
            stloc.1
        L2: ldloc.1
            ldc.i4.0
            bge.s L0
            leave.s L3
        L3: nop
    """)
    return block * (size // len(block))


def test_decode_speed_on_1mb():
    il = synthetic_stream()
    start = time.perf_counter()
    instrs = decode(il)
    seconds = time.perf_counter() - start
    rate = len(instrs) / seconds
    print(f"\ndecode: {len(il)} bytes, {len(instrs)} instructions in {seconds:.3f} s = {rate:,.0f} instr/s")
    assert len(instrs) > 250_000
    assert rate > 50_000  # generous: a regression to per-byte Python work would fall below
