"""The opcode table against ECMA-335 III.1.2 (by hand) and against Mono's table (monodis)."""

from __future__ import annotations

import re
import subprocess

import pytest

from llilc_eh.il.opcodes import BY_NAME, OPCODES, PREFIXES, Flow, OperandKind as K, OpInfo

# (mnemonic, encoding, operand) read off ECMA-335 Partition III, one per family.
ECMA_SPOT_CHECKS = [
    ("nop", 0x00, K.NONE), ("break", 0x01, K.NONE), ("ldarg.0", 0x02, K.NONE),
    ("ldarg.s", 0x0E, K.VAR8), ("stloc.s", 0x13, K.VAR8), ("ldnull", 0x14, K.NONE),
    ("ldc.i4.m1", 0x15, K.NONE), ("ldc.i4.s", 0x1F, K.INT8), ("ldc.i4", 0x20, K.INT32),
    ("ldc.i8", 0x21, K.INT64), ("ldc.r4", 0x22, K.FLOAT32), ("ldc.r8", 0x23, K.FLOAT64),
    ("dup", 0x25, K.NONE), ("jmp", 0x27, K.METHOD), ("call", 0x28, K.METHOD),
    ("calli", 0x29, K.SIG), ("ret", 0x2A, K.NONE), ("br.s", 0x2B, K.BRANCH8),
    ("blt.un.s", 0x37, K.BRANCH8), ("br", 0x38, K.BRANCH32), ("blt.un", 0x44, K.BRANCH32),
    ("switch", 0x45, K.SWITCH), ("ldind.i1", 0x46, K.NONE), ("stind.ref", 0x51, K.NONE),
    ("callvirt", 0x6F, K.METHOD), ("ldstr", 0x72, K.STRING), ("newobj", 0x73, K.METHOD),
    ("throw", 0x7A, K.NONE), ("ldfld", 0x7B, K.FIELD), ("box", 0x8C, K.TYPE),
    ("ldelema", 0x8F, K.TYPE), ("ldelem", 0xA3, K.TYPE), ("unbox.any", 0xA5, K.TYPE),
    ("conv.ovf.i1", 0xB3, K.NONE), ("refanyval", 0xC2, K.TYPE), ("ckfinite", 0xC3, K.NONE),
    ("mkrefany", 0xC6, K.TYPE), ("ldtoken", 0xD0, K.TOK), ("endfinally", 0xDC, K.NONE),
    ("leave", 0xDD, K.BRANCH32), ("leave.s", 0xDE, K.BRANCH8), ("stind.i", 0xDF, K.NONE),
    ("conv.u", 0xE0, K.NONE), ("arglist", 0xFE00, K.NONE), ("ceq", 0xFE01, K.NONE),
    ("ldftn", 0xFE06, K.METHOD), ("ldvirtftn", 0xFE07, K.METHOD), ("ldarg", 0xFE09, K.VAR16),
    ("stloc", 0xFE0E, K.VAR16), ("localloc", 0xFE0F, K.NONE), ("endfilter", 0xFE11, K.NONE),
    ("unaligned.", 0xFE12, K.UINT8), ("volatile.", 0xFE13, K.NONE), ("tail.", 0xFE14, K.NONE),
    ("initobj", 0xFE15, K.TYPE), ("constrained.", 0xFE16, K.TYPE), ("cpblk", 0xFE17, K.NONE),
    ("initblk", 0xFE18, K.NONE), ("no.", 0xFE19, K.UINT8), ("rethrow", 0xFE1A, K.NONE),
    ("sizeof", 0xFE1C, K.TYPE), ("refanytype", 0xFE1D, K.NONE), ("readonly.", 0xFE1E, K.NONE),
]

# Encodings III.1.2 leaves unused (0xF8-0xFF are reserved prefix bytes, 0xFE the escape).
UNUSED = ([0x24, 0x77, 0x78] + list(range(0xA6, 0xB3)) + list(range(0xBB, 0xC2))
          + [0xC4, 0xC5] + list(range(0xC7, 0xD0)) + list(range(0xE1, 0x100))
          + [0xFE08, 0xFE10, 0xFE1B])


def test_exactly_the_219_ecma_encodings():
    assert len(OPCODES) == 219
    one = [v for v in OPCODES if v <= 0xFF]
    two = [v for v in OPCODES if v > 0xFF]
    assert len(one) == 191 and len(two) == 28
    assert all(0x00 <= v <= 0xE0 for v in one)
    assert all(0xFE00 <= v <= 0xFE1E for v in two)
    assert not set(UNUSED) & set(OPCODES)
    assert len(one) + len(two) + len(UNUSED) == 0xE1 + 0x1F + (0x100 - 0xE1)
    assert list(OPCODES) == sorted(OPCODES)


def test_dncil_internal_entries_are_excluded():
    names = {info.name for info in OPCODES.values()}
    assert not {"UNKNOWN1", "UNKNOWN2", "prefixref"} & names
    assert not any(name.startswith("prefix") for name in names)


@pytest.mark.parametrize("name,value,operand", ECMA_SPOT_CHECKS)
def test_ecma_spot_checks(name, value, operand):
    info = OPCODES[value]
    assert info.name == name and info.value == value and info.operand is operand
    assert BY_NAME[name] is info


def test_sizes():
    for value, info in OPCODES.items():
        assert info.size == (2 if value > 0xFF else 1), info.name


def test_names_are_unique_ecma_mnemonics():
    assert len(BY_NAME) == 219
    assert all(re.fullmatch(r"[a-z][a-z0-9]*(\.[a-z0-9]+)*\.?", name) for name in BY_NAME)
    assert "endfinally" in BY_NAME and "endfault" not in BY_NAME


def test_prefixes():
    assert {OPCODES[v].name for v in PREFIXES} == {
        "unaligned.", "volatile.", "tail.", "constrained.", "no.", "readonly."}
    for info in OPCODES.values():
        assert info.is_prefix == (info.flow is Flow.PREFIX) == info.name.endswith(".")


@pytest.mark.parametrize("name,flow", [
    ("br", Flow.BRANCH), ("br.s", Flow.BRANCH), ("brtrue.s", Flow.COND_BRANCH),
    ("bne.un", Flow.COND_BRANCH), ("switch", Flow.SWITCH), ("call", Flow.CALL),
    ("newobj", Flow.CALL), ("calli", Flow.CALL), ("jmp", Flow.JMP), ("ret", Flow.RETURN),
    ("throw", Flow.THROW), ("rethrow", Flow.RETHROW), ("leave", Flow.LEAVE),
    ("leave.s", Flow.LEAVE), ("endfinally", Flow.ENDFINALLY), ("endfilter", Flow.ENDFILTER),
    ("break", Flow.NEXT), ("ldarg.0", Flow.NEXT), ("tail.", Flow.PREFIX),
])
def test_flow(name, flow):
    assert BY_NAME[name].flow is flow


def test_block_ending_flows():
    ends = {f for f in Flow if f.ends_block}
    assert ends == {Flow.BRANCH, Flow.COND_BRANCH, Flow.SWITCH, Flow.JMP, Flow.RETURN,
                    Flow.THROW, Flow.RETHROW, Flow.LEAVE, Flow.ENDFINALLY, Flow.ENDFILTER}
    assert not Flow.LEAVE.falls_through and Flow.COND_BRANCH.falls_through


@pytest.mark.parametrize("name,pops,pushes", [
    ("nop", 0, 0), ("dup", 1, 2), ("pop", 1, 0), ("add", 2, 1), ("stelem.ref", 3, 0),
    ("stfld", 2, 0), ("cpblk", 3, 0), ("ldelema", 2, 1), ("throw", 1, 0), ("rethrow", 0, 0),
    ("endfilter", 1, 0), ("switch", 1, 0), ("beq", 2, 0), ("ldc.i8", 0, 1),
    ("call", None, None), ("callvirt", None, None), ("calli", None, None), ("newobj", None, 1),
    ("ret", None, 0), ("leave", None, 0), ("endfinally", None, 0),
])
def test_stack_behaviour(name, pops, pushes):
    info = BY_NAME[name]
    assert (info.pops, info.pushes) == (pops, pushes)


def test_operand_kind_sizes():
    assert {k: k.size for k in K} == {
        K.NONE: 0, K.INT8: 1, K.UINT8: 1, K.VAR8: 1, K.VAR16: 2, K.INT32: 4, K.INT64: 8,
        K.FLOAT32: 4, K.FLOAT64: 8, K.METHOD: 4, K.FIELD: 4, K.TYPE: 4, K.STRING: 4, K.SIG: 4,
        K.TOK: 4, K.BRANCH8: 1, K.BRANCH32: 4, K.SWITCH: None}


def test_opinfo_is_frozen():
    with pytest.raises(AttributeError):
        BY_NAME["nop"].name = "x"  # type: ignore[misc]
    assert isinstance(BY_NAME["nop"], OpInfo) and str(BY_NAME["br.s"]) == "br.s"


# -- oracle: Mono's independent opcode table, through ilasm and monodis -------------------

def _every_opcode_il() -> str:
    """One method using each of the 219 encodings, with legal prefix groups."""
    lines = []
    for info in OPCODES.values():
        if info.is_prefix:
            continue
        k, name = info.operand, info.name
        operand = {
            K.NONE: "", K.INT8: "-5", K.VAR8: "1", K.VAR16: "300", K.INT32: "123456",
            K.INT64: "0x123456789", K.FLOAT32: "1.5", K.FLOAT64: "2.25", K.FIELD: "int32 C::f",
            K.TYPE: "C", K.STRING: '"hi"', K.SIG: "void()", K.TOK: "C",
            K.BRANCH8: "L_END", K.BRANCH32: "L_END", K.SWITCH: "(L_END, L_MID)",
            K.METHOD: ("instance void C::.ctor()" if name in ("newobj", "ldvirtftn", "callvirt")
                       else "void C::Target()"),
        }[k]
        lines.append(f"{name} {operand}".strip())
    lines.insert(len(lines) // 2, "L_MID: nop")
    lines += ["unaligned. 2", "volatile.", "ldind.i4", "volatile.", "ldsfld int32 C::s",
              "tail.", "call void C::Target()", "ret", "constrained. C",
              "callvirt instance void C::.ctor()", "readonly.", "ldelema C",
              # Mono's ilasm has no syntax for no.: emit FE 19 04 by hand.
              ".emitbyte 0xfe", ".emitbyte 0x19", ".emitbyte 0x04", "ldfld int32 C::f",
              "L_END: ret"]
    body = "\n    ".join(lines)
    return f""".assembly extern mscorlib {{}}
.assembly allop {{}}
.class public C extends [mscorlib]System.Object {{
  .field public int32 f
  .field public static int32 s
  .method public specialname rtspecialname instance void .ctor() cil managed {{ ret }}
  .method public static void Target() cil managed {{ ret }}
  .method public static void All() cil managed {{
    .maxstack 8
    {body}
  }}
}}
"""


def test_every_opcode_against_monodis(tmp_path):
    """Names, sizes and non-token operand text agree with Mono's own table for all 219."""
    from llilc_eh.il.decoder import decode
    from llilc_eh.assembly.loader import Assembly

    (tmp_path / "all.il").write_text(_every_opcode_il())
    subprocess.run(["ilasm", "/dll", f"/out:{tmp_path / 'all.dll'}", str(tmp_path / "all.il")],
                   check=True, capture_output=True)
    listing = subprocess.run(["monodis", str(tmp_path / "all.dll")], check=True,
                             capture_output=True, text=True).stdout
    listing = listing[listing.index("All ()"):]
    line = re.compile(r"^\s*(IL_[0-9a-f]{4}):  (\S+)(.*)$", re.M)
    mono = line.findall(listing[:listing.index("end of method")])

    asm = Assembly(tmp_path / "all.dll")
    il = asm.body(asm.find_method("C::All").rid).code
    instrs = decode(il)
    assert {i.op.value for i in instrs} == set(OPCODES)
    assert len(mono) == len(instrs)
    for (label, name, rest), instr in zip(mono, instrs):
        assert (label, name) == (f"IL_{instr.offset:04x}", instr.op.name)
        if not instr.op.operand.is_token and instr.op.operand is not K.SWITCH:
            assert f"{label}:  {name}{rest}".rstrip() == str(instr)
