"""x86-64 decoding for the final image: capstone, and the shortcuts that keep it cheap.

The final image decodes every byte of a method's code twice -- once to find the relative
fields the relink must move (`link_final_image`), once more to check the result
(`FinalImage.verify`) -- and the prologs once again for the filter frame constants. Why
a module of its own: those three steps must read instructions the same way (a field the
relink found is the field the check checks), and how they read them is a cost question
with one answer. Capstone's `disasm_lite` gives boundaries, mnemonics and operand text
cheaply; its details (operands, immediate and displacement offsets) cost several times
more, so `relative_field` reads the common encodings (E8/E9/EB/7x/0F 8x branches, `[REX]
op ModRM disp32` rip-relative operands) from the bytes and asks capstone's details only
for the rest (tests/backend/test_image.py holds the two to the same answer over arbitrary
bytes). `detailed` decodes a few instructions at a time for a reader that stops early.

Addresses are offsets into the buffer decoded (`.text` offsets, or final image offsets).
A range capstone cannot decode to its end is a `BackendError` (`relink`) naming it.
"""

from __future__ import annotations

from typing import NamedTuple

import capstone
from capstone import x86 as cs_x86

from ..errors import BackendError

class Insn(NamedTuple):
    """One decoded instruction; `rel`: (field offset in it, field size, target) of a relative
    branch or a rip-relative memory operand. A tuple: every method decodes thousands."""

    address: int
    size: int
    mnemonic: str
    op_str: str
    raw: bytes
    rel: tuple[int, int, int] | None

    @property
    def end(self) -> int:
        return self.address + self.size

    @property
    def is_branch(self) -> bool:
        return self.rel is not None and "rip" not in self.op_str


_MD_DETAIL = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
_MD_DETAIL.detail = True


def md() -> capstone.Cs:
    """The detail-mode disassembler (operands, field offsets): one per process, as building
    one costs more than many short decodes."""
    return _MD_DETAIL


def is_reg(op, reg) -> bool:
    """Operand `op` (capstone detail) is register `reg`."""
    return op.type == cs_x86.X86_OP_REG and op.reg == reg


def is_mem(op, base) -> bool:
    """Operand `op` is `[base + disp]`: no index, no segment."""
    return (op.type == cs_x86.X86_OP_MEM and op.mem.base == base and op.mem.index == 0
            and op.mem.segment == 0)


def detailed(md, data: bytes, start: int, end: int, chunk: int = 4):
    """`md.disasm(data[start:end], start)`, decoded a few instructions at a time: a reader
    that stops at the first branch would otherwise pay for the details of the whole range."""
    while start < end:
        insns = list(md.disasm(data[start:end], start, chunk))
        yield from insns
        if len(insns) < chunk:
            return
        start = insns[-1].address + insns[-1].size


MD_LITE = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
RELATIVE_MNEMONICS = ("j", "call", "loop", "xbegin")


def capstone_relative_field(insn) -> tuple[int, int, int] | None:
    """(field offset, field size, target) of a detailed capstone instruction's relative
    branch or rip-relative operand, else None: the reference `relative_field` must agree with."""
    if insn.group(capstone.CS_GRP_BRANCH_RELATIVE) and insn.imm_size:
        for op in insn.operands:
            if op.type == cs_x86.X86_OP_IMM:
                return insn.imm_offset, insn.imm_size, op.imm
    for op in insn.operands:
        if op.type == cs_x86.X86_OP_MEM and op.mem.base == cs_x86.X86_REG_RIP:
            return insn.disp_offset, insn.disp_size, insn.address + insn.size + op.mem.disp
    return None


def _plain_branch(raw: bytes, address: int) -> tuple[int, int, int] | None:
    """The relative field of an unprefixed call/jmp/jcc (most of them), without capstone's
    costly details: E8/E9 rel32, EB/7x rel8, 0F 8x rel32."""
    op = raw[0]
    if op in (0xE8, 0xE9) and len(raw) == 5 or op == 0x0F and len(raw) == 6 and 0x80 <= raw[1] <= 0x8F:
        return len(raw) - 4, 4, address + len(raw) + int.from_bytes(raw[-4:], "little", signed=True)
    if (op == 0xEB or 0x70 <= op <= 0x7F) and len(raw) == 2:
        return 1, 1, address + 2 + int.from_bytes(raw[1:], "little", signed=True)
    return None


# Opcodes that take a ModRM operand and no immediate: lea, mov r/m, cmp r/m, movsxd.
_RIP_OPERAND_OPCODES = frozenset({0x8D, 0x8B, 0x89, 0x3B, 0x39, 0x63})


def _plain_rip_operand(raw: bytes, address: int) -> tuple[int, int, int] | None:
    """The rip-relative field of `[REX] op ModRM(00 reg 101) disp32` with an opcode of
    `_RIP_OPERAND_OPCODES` (most rip-relative instructions), without capstone's details: no
    SIB, no immediate, so the disp32 ends the instruction."""
    at = 1 if 0x40 <= raw[0] <= 0x4F else 0
    if len(raw) == at + 6 and raw[at] in _RIP_OPERAND_OPCODES and raw[at + 1] & 0xC7 == 0x05:
        return at + 2, 4, address + len(raw) + int.from_bytes(raw[at + 2:], "little", signed=True)
    return None


def relative_field(md, address: int, raw: bytes, mnemonic: str, op_str: str) -> tuple[int, int, int] | None:
    """`Insn.rel` of an instruction; capstone's details (costly) only for those that may
    hold a relative field and that the plain encodings do not cover."""
    if not (mnemonic.startswith(RELATIVE_MNEMONICS) or "rip" in op_str):
        return None
    rex = 1 if len(raw) > 1 and 0x40 <= raw[0] <= 0x4F else 0
    if raw[rex] == 0xFF and "rip" not in op_str:
        return None     # FF /2../5: an indirect call or jump through a register or memory
    return (_plain_branch(raw, address) or _plain_rip_operand(raw, address)
            or capstone_relative_field(next(md.disasm(raw, address, 1))))


def decode(md, data: bytes, start: int, end: int, what: str, *, relative: bool = True) -> list[Insn]:
    """The instructions of data[start:end] (addresses as offsets into `data`). Without
    `relative`, `rel` stays None: for a caller that asks `relative_field` only of the few
    instructions whose relative field it reads."""
    out = []
    covered = start
    for address, size, mnemonic, op_str in MD_LITE.disasm_lite(data[start:end], start):
        raw = bytes(data[address:address + size])
        rel = relative_field(md, address, raw, mnemonic, op_str) if relative else None
        out.append(Insn(address, size, mnemonic, op_str, raw, rel))
        covered = address + size
    if covered != end:
        raise BackendError(f"capstone stops at +0x{covered:x} inside {what} (ends at 0x{end:x})", kind="relink",
                           offset=covered)
    return out


__all__ = ["MD_LITE", "RELATIVE_MNEMONICS", "Insn", "capstone_relative_field", "decode", "detailed", "is_mem",
           "is_reg", "md", "relative_field"]
