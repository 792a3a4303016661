"""A tiny CIL assembler for tests: hand-written bodies to bytes, independently of the decoder.

`assemble` takes one instruction per line, with `Label:` prefixes, and resolves branch
labels in a second pass:

    L0: ldarg.0
        brtrue.s L1
        switch L0 L1
        ldc.r8 2.5
        ldfld 0x04000001
    L1: ret

`encode` takes (mnemonic, operand) pairs whose branch operands are already absolute
offsets -- the form `decode` returns -- and is what the round-trip tests use.
"""

from __future__ import annotations

import struct
from typing import Iterable

from llilc_eh.il.decoder import OPERAND_FORMAT
from llilc_eh.il.opcodes import BY_NAME, OperandKind, OpInfo



def opcode_bytes(op: OpInfo) -> bytes:
    return bytes([0xFE, op.value & 0xFF]) if op.value > 0xFF else bytes([op.value])


def instr_size(op: OpInfo, operand=None) -> int:
    if op.operand is OperandKind.SWITCH:
        return op.size + 4 + 4 * len(operand)
    return op.size + op.operand.size


def encode_one(op: OpInfo, operand, offset: int) -> bytes:
    """One instruction at `offset`; branch/switch operands are absolute targets."""
    end = offset + instr_size(op, operand)
    kind = op.operand
    head = opcode_bytes(op)
    if kind is OperandKind.NONE:
        return head
    if kind is OperandKind.BRANCH8:
        return head + struct.pack("<b", operand - end)
    if kind is OperandKind.BRANCH32:
        return head + struct.pack("<i", operand - end)
    if kind is OperandKind.SWITCH:
        return head + struct.pack(f"<I{len(operand)}i", len(operand), *(t - end for t in operand))
    return head + struct.pack(OPERAND_FORMAT[kind], operand)


def encode(instrs: Iterable[tuple[str, object]]) -> bytes:
    out = bytearray()
    for name, operand in instrs:
        out += encode_one(BY_NAME[name], operand, len(out))
    return bytes(out)


def _parse_operand(op: OpInfo, words: list[str], labels: dict[str, int] | None):
    kind = op.operand
    if kind is OperandKind.NONE:
        assert not words, f"{op.name} takes no operand"
        return None
    if kind in (OperandKind.BRANCH8, OperandKind.BRANCH32):
        return labels[words[0]] if labels is not None else 0
    if kind is OperandKind.SWITCH:
        return tuple(labels[w] if labels is not None else 0 for w in words)
    if kind in (OperandKind.FLOAT32, OperandKind.FLOAT64):
        return float(words[0])
    return int(words[0], 0)


def assemble(source: str) -> bytes:
    lines = []
    for raw in source.splitlines():
        text = raw.split("//")[0].strip()
        label = None
        if ":" in text.split(" ")[0]:
            label, text = text.split(":", 1)
            text = text.strip()
        lines.append((label, text))
    # Pass 1: offsets of labels (sizes do not depend on label values).
    labels: dict[str, int] = {}
    offset = 0
    for label, text in lines:
        if label:
            labels[label] = offset
        if text:
            name, *words = text.replace(",", " ").split()
            op = BY_NAME[name]
            offset += instr_size(op, _parse_operand(op, words, None))
    # Pass 2: encode.
    out = bytearray()
    for _label, text in lines:
        if text:
            name, *words = text.replace(",", " ").split()
            op = BY_NAME[name]
            out += encode_one(op, _parse_operand(op, words, labels), len(out))
    return bytes(out)
