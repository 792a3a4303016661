"""Hypothesis strategies for random *valid* CIL bodies.

A body is drawn as a list of units -- one ordinary instruction, one branch/leave/switch,
or a legal prefix group (`unaligned. 2 volatile. ldind.i4`, `tail. call ... ret`, ...) --
and then branch operands are resolved to the start offset of some unit, never to the
instruction after a prefix. The result is a list of (mnemonic, operand) pairs with
absolute targets, the form `ilbytes.encode` takes and `decode` returns.

The prefix rules here are written out by name from ECMA-335 III.2, independently of the
decoder's tables.
"""

from __future__ import annotations

from hypothesis import strategies as st

from ilbytes import instr_size
from llilc_eh.il.opcodes import BY_NAME, OPCODES, OperandKind as K

_TARGET_KINDS = (K.BRANCH8, K.BRANCH32, K.SWITCH)
PLAIN = sorted(info.name for info in OPCODES.values()
               if not info.is_prefix and info.operand not in _TARGET_KINDS)
BRANCHES = sorted(info.name for info in OPCODES.values() if info.operand in (K.BRANCH8, K.BRANCH32))

_TOKEN = st.integers(0, 0xFFFFFFFF)
OPERAND = {
    K.NONE: st.none(),
    K.INT8: st.integers(-128, 127),
    K.UINT8: st.integers(0, 255),
    K.VAR8: st.integers(0, 255),
    K.VAR16: st.integers(0, 0xFFFF),
    K.INT32: st.integers(-2**31, 2**31 - 1),
    K.INT64: st.integers(-2**63, 2**63 - 1),
    # NaN payloads do not survive Python's float32 widening; NaN has its own tests.
    K.FLOAT32: st.floats(width=32, allow_nan=False),
    K.FLOAT64: st.floats(allow_nan=False),
    K.METHOD: _TOKEN, K.FIELD: _TOKEN, K.TYPE: _TOKEN, K.STRING: _TOKEN, K.SIG: _TOKEN,
    K.TOK: _TOKEN,
}

MEMORY_ACCESS = ["ldind.i1", "ldind.u1", "ldind.i2", "ldind.u2", "ldind.i4", "ldind.u4",
                 "ldind.i8", "ldind.i", "ldind.r4", "ldind.r8", "ldind.ref", "stind.ref",
                 "stind.i1", "stind.i2", "stind.i4", "stind.i8", "stind.r4", "stind.r8",
                 "stind.i", "ldfld", "stfld", "ldobj", "stobj", "initblk", "cpblk"]
_LDELEM = ["ldelem.i1", "ldelem.u1", "ldelem.i2", "ldelem.u2", "ldelem.i4", "ldelem.u4",
           "ldelem.i8", "ldelem.i", "ldelem.r4", "ldelem.r8", "ldelem.ref", "ldelem"]
_STELEM = ["stelem.i", "stelem.i1", "stelem.i2", "stelem.i4", "stelem.i8", "stelem.r4",
           "stelem.r8", "stelem.ref", "stelem"]
NO_TARGETS = {  # III.2.2
    0x1: ["castclass", "unbox", "ldelema"] + _STELEM,
    0x2: _LDELEM + ["ldelema"] + _STELEM,
    0x4: ["ldfld", "stfld", "callvirt", "ldvirtftn", "ldelema"] + _LDELEM + _STELEM,
}


def operand_for(name: str):
    return OPERAND[BY_NAME[name].operand]


@st.composite
def _plain(draw):
    name = draw(st.sampled_from(PLAIN))
    return [(name, draw(operand_for(name)))]


@st.composite
def _branch(draw):
    return [(draw(st.sampled_from(BRANCHES)), "target")]


@st.composite
def _switch(draw):
    return [("switch", ("target",) * draw(st.integers(0, 5)))]


@st.composite
def _prefixed(draw):
    """One legal prefix group, as ECMA-335 III.2 allows it."""
    form = draw(st.sampled_from(["unaligned", "volatile", "both", "tail", "constrained",
                                 "constrained-tail", "readonly", "no"]))
    alignment = ("unaligned.", draw(st.sampled_from([1, 2, 4])))
    if form == "unaligned":
        target = draw(st.sampled_from(MEMORY_ACCESS))
        group = [alignment, (target, draw(operand_for(target)))]
    elif form == "volatile":
        target = draw(st.sampled_from(MEMORY_ACCESS + ["ldsfld", "stsfld"]))
        group = [("volatile.", None), (target, draw(operand_for(target)))]
    elif form == "both":
        target = draw(st.sampled_from(MEMORY_ACCESS))
        pair = [alignment, ("volatile.", None)]
        if draw(st.booleans()):
            pair.reverse()
        group = pair + [(target, draw(operand_for(target)))]
    elif form == "tail":
        call = draw(st.sampled_from(["call", "calli", "callvirt"]))
        group = [("tail.", None), (call, draw(_TOKEN)), ("ret", None)]
    elif form == "constrained":
        call = draw(st.sampled_from(["callvirt", "call", "ldftn"]))
        group = [("constrained.", draw(_TOKEN)), (call, draw(_TOKEN))]
    elif form == "constrained-tail":
        group = [("constrained.", draw(_TOKEN)), ("tail.", None), ("callvirt", draw(_TOKEN)), ("ret", None)]
    elif form == "readonly":
        target = draw(st.sampled_from(["ldelema", "call", "callvirt"]))
        group = [("readonly.", None), (target, draw(_TOKEN))]
    else:
        flags = draw(st.integers(1, 7))
        allowed = set.intersection(*(set(NO_TARGETS[bit]) for bit in (1, 2, 4) if flags & bit))
        target = draw(st.sampled_from(sorted(allowed)))
        group = [("no.", flags), (target, draw(operand_for(target)))]
    return group


UNIT = st.one_of(_plain(), _plain(), _plain(), _branch(), _switch(), _prefixed())


@st.composite
def bodies(draw, max_units: int = 30, terminated: bool = False):
    """A valid body as (mnemonic, operand) pairs; `terminated` appends a `ret`."""
    units = draw(st.lists(UNIT, min_size=1, max_size=max_units))
    if terminated:
        units.append([("ret", None)])
    placed, unit_starts, offset = [], [], 0
    for unit in units:
        unit_starts.append(offset)
        for name, operand in unit:
            size = instr_size(BY_NAME[name], operand)
            placed.append((name, operand, offset + size))
            offset += size
    out = []
    for name, operand, end in placed:
        if operand == "target" or isinstance(operand, tuple):
            candidates = unit_starts
            if BY_NAME[name].operand is K.BRANCH8:   # int8 displacement from the end
                candidates = [t for t in unit_starts if -128 <= t - end <= 127]
            pick = st.sampled_from(candidates)
            operand = draw(pick) if operand == "target" else tuple(draw(pick) for _ in operand)
        out.append((name, operand))
    return out
