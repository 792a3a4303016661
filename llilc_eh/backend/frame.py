"""The filter frame constants: where the parent's PSPSym and frame pointer are, read from
the compiled parent.

Why a module of its own: an outlined filter is a function of ours, not a funclet LLVM
knows, so it cannot ask LLVM where the parent's frame is; `link_final_image` resolves the
two symbols the reader left for it (`<parent>$psp_slot_offset`, `<parent>$fp_offset`) with
values read here from the parent's UNWIND_INFO and code, and the runtime stage reads the
same numbers (the PSPSym slot for the GC info, fp_offset for a generic context). It is a
reading of LLVM's prologs (x86 decoding), not a step of the layout.

The CLR calls every funclet with the establisher frame -- the parent's Initial-SP on x64
-- and the PSPSym lies at the same offset from the Initial-SP in the main body and in every
funclet; LLVM's CoreCLR prologs show both: the main body stores `mov [rsp + D], rsp`
right after its prolog, every funclet does `mov rcx, [rcx + D]`, `mov [rsp + D], rcx`,
`lea rbp, [rcx + F]` (`mov rbp, rcx` when F = 0, as with the SysV convention's smaller
frames). So psp_slot_offset = D, read from the parent's code after
`SizeOfProlog`; fp_offset = F = the parent's frame pointer minus its Initial-SP: the
UNWIND_INFO's SET_FPREG offset plus whatever the prolog allocates or pushes after it.
Both are cross-checked against every funclet prolog. The filter code uses them as
`lea reg, [rip + sym]` (REL32): rewritten in place to `mov reg, imm32` (7 bytes both);
ADDR32 / ADDR64 fields get the value itself.

Errors: `BackendError` kind `frame-constants`, naming the parent or the funclet whose prolog
disagrees.
"""

from __future__ import annotations

from dataclasses import dataclass

import capstone
from capstone import x86 as cs_x86

from ..errors import BackendError
from ..funclets.model import FuncletKind
from ..unwind import UnwindOpKind
from . import x86
from .coff import CoffObject
from .recover import RecoveredCode

PSP_SLOT_SUFFIX = "$psp_slot_offset"
FP_OFFSET_SUFFIX = "$fp_offset"


def _error(reason: str, kind: str = "frame-constants") -> BackendError:
    return BackendError(reason, kind=kind)


@dataclass(frozen=True)
class FilterConstants:
    """The parent frame constants an outlined filter needs, read from the compiled parent."""

    psp_slot_offset: int             # PSPSym slot, from the establisher frame (Initial-SP)
    fp_offset: int                   # the parent's frame pointer minus its Initial-SP
    evidence: tuple[str, ...] = ()   # where each was read and what agreed

    def __str__(self) -> str:
        lines = [f"filter constants: psp_slot_offset {self.psp_slot_offset}, fp_offset {self.fp_offset}"]
        lines += [f"  {e}" for e in self.evidence]
        return "\n".join(lines)


def frame_constants_if_needed(recovered, coff, parent, pieces) -> FilterConstants | None:
    """The constants when the placed `pieces` (`relink.Piece`) need them -- a filter is placed,
    or placed code names one of the two symbols -- and then a reading that fails is an error;
    otherwise read when the parent has such a frame (the report shows them), else None."""
    text = coff.section(".text")
    names = {parent + PSP_SLOT_SUFFIX, parent + FP_OFFSET_SUFFIX}
    needed = any(r.symbol in names and p.holds(r.offset) for r in text.relocations for p in pieces)
    if needed or any(p.kind is FuncletKind.FILTER for p in pieces):
        return read_frame_constants(recovered, coff, parent)
    try:
        return read_frame_constants(recovered, coff, parent)
    except BackendError:
        return None                   # nothing needs them, and this parent has no such frame


def read_frame_constants(recovered: RecoveredCode, coff: CoffObject, parent: str) -> FilterConstants:
    """psp_slot_offset and fp_offset of the compiled parent (see the module docstring)."""
    text = coff.section(".text").data
    fn = recovered.function(parent)
    info = fn.unwind
    if info is None:
        raise _error(f"{parent} has no UNWIND_INFO", "frame-constants")
    if info.frame_register != 5:
        raise _error(f"{parent} establishes no RBP frame (frame register {info.frame_register_name})",
                     "frame-constants")
    setfp = [op for op in info.codes if op.op == UnwindOpKind.SET_FPREG]
    if len(setfp) != 1:
        raise _error(f"{parent}: {len(setfp)} SET_FPREG codes", "frame-constants")
    after = 0
    for op in info.codes:  # what the prolog does to RSP after RBP is set
        if op.code_offset > setfp[0].code_offset:
            if op.op in (UnwindOpKind.ALLOC_SMALL, UnwindOpKind.ALLOC_LARGE):
                after += op.size
            elif op.op == UnwindOpKind.PUSH_NONVOL:
                after += 8
            elif op.op not in (UnwindOpKind.SAVE_NONVOL, UnwindOpKind.SAVE_NONVOL_FAR,
                               UnwindOpKind.SAVE_XMM128, UnwindOpKind.SAVE_XMM128_FAR):
                raise _error(f"{parent}: {op.op.name} after SET_FPREG", "frame-constants")
    fp_offset = info.frame_offset + after
    evidence = [f"UNWIND_INFO of {parent}: SET_FPREG RBP, offset {info.frame_offset:#x}"
                + (f", then {after} bytes allocated" if after else "")]

    md = x86.md()
    psp = None
    start = fn.start + info.prolog_size
    for insn in x86.detailed(md, text, start, fn.end):
        ops = insn.operands if insn.id == cs_x86.X86_INS_MOV else ()   # (operands are costly)
        if (len(ops) == 2 and x86.is_mem(ops[0], cs_x86.X86_REG_RSP)
                and x86.is_reg(ops[1], cs_x86.X86_REG_RSP) and ops[0].size == 8):
            psp = ops[0].mem.disp
            evidence.append(f"{parent} +{insn.address - fn.start:#x} (after the prolog): "
                            f"{insn.mnemonic} {insn.op_str}")
            break
        if insn.group(capstone.CS_GRP_JUMP) or insn.group(capstone.CS_GRP_CALL) or insn.group(capstone.CS_GRP_RET):
            break
    if psp is None:
        raise _error(f"{parent} stores no PSPSym (mov [rsp + D], rsp) before its first branch or call "
                     "after the prolog", "frame-constants")

    agree = 0
    for f in recovered.funclets_of(parent):
        if f.unwind is None:
            continue
        loads, copies, frames = [], [], []
        for insn in md.disasm(text[f.start:f.start + f.unwind.prolog_size], f.start):
            if insn.id not in (cs_x86.X86_INS_MOV, cs_x86.X86_INS_LEA):
                continue        # (before its operands, which are costly)
            ops = insn.operands
            if len(ops) != 2:
                continue
            if insn.id == cs_x86.X86_INS_MOV and x86.is_reg(ops[0], cs_x86.X86_REG_RCX) \
                    and x86.is_mem(ops[1], cs_x86.X86_REG_RCX):
                loads.append(ops[1].mem.disp)
            elif insn.id == cs_x86.X86_INS_MOV and x86.is_mem(ops[0], cs_x86.X86_REG_RSP) \
                    and x86.is_reg(ops[1], cs_x86.X86_REG_RCX):
                copies.append(ops[0].mem.disp)
            elif insn.id == cs_x86.X86_INS_LEA and x86.is_reg(ops[0], cs_x86.X86_REG_RBP) \
                    and x86.is_mem(ops[1], cs_x86.X86_REG_RCX):
                frames.append(ops[1].mem.disp)
            elif insn.id == cs_x86.X86_INS_MOV and x86.is_reg(ops[0], cs_x86.X86_REG_RBP) \
                    and x86.is_reg(ops[1], cs_x86.X86_REG_RCX):
                frames.append(0)    # `mov rbp, rcx`: LLVM's form of a zero frame offset (seen with SysV)
        if loads != [psp] or copies != [psp] or frames != [fp_offset]:
            raise _error(f"funclet {f.name} prolog: PSPSym load {loads}, copy {copies}, frame {frames}; "
                         f"the parent says {psp} and {fp_offset}", "frame-constants")
        agree += 1
    evidence.append(f"{agree} funclet prolog(s) agree: mov rcx, [rcx + {psp:#x}]; mov [rsp + {psp:#x}], rcx; "
                    f"lea rbp, [rcx + {fp_offset:#x}]")
    return FilterConstants(psp, fp_offset, tuple(evidence))


__all__ = ["FP_OFFSET_SUFFIX", "PSP_SLOT_SUFFIX", "FilterConstants", "frame_constants_if_needed",
           "read_frame_constants"]
