"""The ECMA-335 opcode table: the 219 CIL encodings (III.1.2), prefixes included.

The table is derived from dncil's published one (`dncil.cil.opcode.OpCodes`, itself a port
of dnlib's) rather than retyped, so a typo here cannot silently mis-decode a body. dncil
carries 10 entries that are not ECMA encodings -- UNKNOWN1/UNKNOWN2 and the reserved
`prefix1`..`prefix7` / `prefixref` bytes 0xF8-0xFF -- and those are left out.

On top of dncil's row we state three things in the vocabulary of the spec and of a JIT:

* `OperandKind` -- the inline operand as ECMA-335 III.1.9 names it. dncil folds the
  `unsigned int8` of `unaligned.` and `no.` into `ShortInlineI` (signed, the `ldc.i4.s`
  kind); here they are `UINT8`. The local/argument indices of `ldarg.s` and friends are
  `VAR8` (`unsigned int8`), those of `ldarg` and friends `VAR16` (`unsigned int16`).
* `Flow` -- what the instruction does to control flow, split finer than dncil's
  `FlowControl` where the EH stage needs it: `leave` is not a branch (it exits protected
  regions and runs finallys), `endfinally`/`endfilter` are not returns, `rethrow` is not
  `throw`, `switch` is not a conditional branch, `jmp` is not a call (it ends the method).
  `break` is a debugger trap that falls through, so it is `NEXT`.
* `pops`/`pushes` -- counts of evaluation-stack slots from dncil's `StackBehaviour`, or
  None where the count depends on a signature (calls, `ret`) or the instruction empties
  the stack (`leave`, `endfinally`).
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass

from dncil.cil.enums import FlowControl, OperandType, StackBehaviour
from dncil.cil.opcode import OpCode, OpCodes


class OperandKind(enum.Enum):
    """The inline operand of an instruction (ECMA-335 III.1.9), with its byte size."""

    # Members are singletons compared by identity, so identity is a valid hash; Enum's own
    # __hash__ (Python code hashing the name) was a measurable cost of the reader's and the
    # il checks' set and dict lookups of operand kinds and flows.
    __hash__ = object.__hash__

    NONE = "none"
    INT8 = "int8"          # ldc.i4.s
    UINT8 = "uint8"        # unaligned. alignment, no. check-flags
    VAR8 = "var8"          # ldarg.s / ldloc.s ... : unsigned int8 index
    VAR16 = "var16"        # ldarg / ldloc ... : unsigned int16 index
    INT32 = "int32"        # ldc.i4
    INT64 = "int64"        # ldc.i8
    FLOAT32 = "float32"    # ldc.r4
    FLOAT64 = "float64"    # ldc.r8
    METHOD = "method"      # MethodDef / MemberRef / MethodSpec token
    FIELD = "field"        # FieldDef / MemberRef token
    TYPE = "type"          # TypeDef / TypeRef / TypeSpec token
    STRING = "string"      # #US heap token (0x70xxxxxx)
    SIG = "sig"            # StandAloneSig token (calli)
    TOK = "tok"            # ldtoken: type, method or field token
    BRANCH8 = "branch8"    # int8 displacement from the end of the instruction
    BRANCH32 = "branch32"  # int32 displacement from the end of the instruction
    SWITCH = "switch"      # uint32 count N, then N int32 displacements

    @property
    def size(self) -> int | None:
        """Operand bytes; None for `switch`, whose size depends on its count."""
        return _OPERAND_SIZE[self]

    @property
    def is_token(self) -> bool:
        return self in _TOKEN_KINDS


_OPERAND_SIZE = {
    OperandKind.NONE: 0, OperandKind.INT8: 1, OperandKind.UINT8: 1, OperandKind.VAR8: 1,
    OperandKind.VAR16: 2, OperandKind.INT32: 4, OperandKind.INT64: 8, OperandKind.FLOAT32: 4,
    OperandKind.FLOAT64: 8, OperandKind.METHOD: 4, OperandKind.FIELD: 4, OperandKind.TYPE: 4,
    OperandKind.STRING: 4, OperandKind.SIG: 4, OperandKind.TOK: 4, OperandKind.BRANCH8: 1,
    OperandKind.BRANCH32: 4, OperandKind.SWITCH: None,
}
_TOKEN_KINDS = frozenset({OperandKind.METHOD, OperandKind.FIELD, OperandKind.TYPE,
                          OperandKind.STRING, OperandKind.SIG, OperandKind.TOK})


class Flow(enum.Enum):
    """What an instruction does to control flow, in the terms the EH stages need."""

    __hash__ = object.__hash__   # as OperandKind's

    NEXT = "next"                # falls through (includes `break`)
    BRANCH = "branch"            # br, br.s
    COND_BRANCH = "cond_branch"  # brtrue, beq, ... : target or fall through
    SWITCH = "switch"            # jump table, falls through on out-of-range
    CALL = "call"                # call, callvirt, calli, newobj: returns to the next instruction
    JMP = "jmp"                  # jmp: transfers to another method, never returns here
    RETURN = "return"            # ret
    THROW = "throw"
    RETHROW = "rethrow"          # only inside a catch handler
    LEAVE = "leave"              # leave, leave.s: exits protected regions, runs finallys
    ENDFINALLY = "endfinally"    # end of a finally or fault handler (also spelled endfault)
    ENDFILTER = "endfilter"      # end of a filter: the verdict is on the stack
    PREFIX = "prefix"            # modifies the next instruction (III.2)

    @property
    def ends_block(self) -> bool:
        """An instruction of this flow is the last of its basic block."""
        return self in _ENDS_BLOCK

    @property
    def falls_through(self) -> bool:
        """Control may continue at the next instruction in the stream."""
        return self in _FALLS_THROUGH


_ENDS_BLOCK = frozenset({Flow.BRANCH, Flow.COND_BRANCH, Flow.SWITCH, Flow.JMP, Flow.RETURN,
                         Flow.THROW, Flow.RETHROW, Flow.LEAVE, Flow.ENDFINALLY, Flow.ENDFILTER})
_FALLS_THROUGH = frozenset({Flow.NEXT, Flow.CALL, Flow.COND_BRANCH, Flow.SWITCH, Flow.PREFIX})


@dataclass(frozen=True)
class OpInfo:
    """One ECMA-335 opcode encoding.

    `value` is the encoding as a number: 0x00-0xE0 for one-byte opcodes, 0xFE00-0xFE1E for
    two-byte ones (the 0xFE escape byte, then the second byte). `size` is the opcode's own
    length in bytes, not counting the operand.
    """

    name: str
    value: int
    size: int
    operand: OperandKind
    flow: Flow
    pops: int | None
    pushes: int | None
    is_prefix: bool

    def __str__(self) -> str:
        return self.name

    @functools.cached_property   # asked of every instruction by the il checks
    def has_targets(self) -> bool:
        """Branch, leave or switch: the operand names IL offsets in this body."""
        return self.operand in (OperandKind.BRANCH8, OperandKind.BRANCH32, OperandKind.SWITCH)


# -- derivation from dncil ---------------------------------------------------------------

_OPERAND_FROM_DNCIL = {
    OperandType.InlineNone: OperandKind.NONE,
    OperandType.ShortInlineI: OperandKind.INT8,
    OperandType.ShortInlineVar: OperandKind.VAR8,
    OperandType.InlineVar: OperandKind.VAR16,
    OperandType.InlineI: OperandKind.INT32,
    OperandType.InlineI8: OperandKind.INT64,
    OperandType.ShortInlineR: OperandKind.FLOAT32,
    OperandType.InlineR: OperandKind.FLOAT64,
    OperandType.InlineMethod: OperandKind.METHOD,
    OperandType.InlineField: OperandKind.FIELD,
    OperandType.InlineType: OperandKind.TYPE,
    OperandType.InlineString: OperandKind.STRING,
    OperandType.InlineSig: OperandKind.SIG,
    OperandType.InlineTok: OperandKind.TOK,
    OperandType.ShortInlineBrTarget: OperandKind.BRANCH8,
    OperandType.InlineBrTarget: OperandKind.BRANCH32,
    OperandType.InlineSwitch: OperandKind.SWITCH,
}

# Where ECMA-335 says more than dncil's row: unsigned operands of two prefixes.
_OPERAND_OVERRIDE = {0xFE12: OperandKind.UINT8,   # unaligned. alignment (III.2.5)
                     0xFE19: OperandKind.UINT8}   # no. { typecheck | rangecheck | nullcheck }

_FLOW_FROM_DNCIL = {
    FlowControl.Next: Flow.NEXT,
    FlowControl.Break: Flow.NEXT,
    FlowControl.Call: Flow.CALL,
    FlowControl.Branch: Flow.BRANCH,
    FlowControl.Cond_Branch: Flow.COND_BRANCH,
    FlowControl.Return: Flow.RETURN,
    FlowControl.Throw: Flow.THROW,
    FlowControl.Meta: Flow.PREFIX,
}

# dncil's FlowControl lumps these together with ordinary branches, returns, throws, calls.
_FLOW_OVERRIDE = {
    0x27: Flow.JMP,            # jmp
    0x45: Flow.SWITCH,         # switch
    0xDC: Flow.ENDFINALLY,     # endfinally / endfault
    0xDD: Flow.LEAVE,          # leave
    0xDE: Flow.LEAVE,          # leave.s
    0xFE11: Flow.ENDFILTER,    # endfilter
    0xFE1A: Flow.RETHROW,      # rethrow
}

# Not ECMA-335 encodings: dnlib's markers for undecodable bytes and the reserved prefix bytes.
_NOT_ECMA = frozenset({0x100, 0x101, 0xF8, 0xF9, 0xFA, 0xFB, 0xFC, 0xFD, 0xFE, 0xFF})


def _stack_count(behaviour: StackBehaviour) -> int | None:
    """Slots popped or pushed: `Popref_popi_pop1` -> 3, `Push1_push1` -> 2, var/all -> None."""
    name = behaviour.name.lower()
    if name in ("varpop", "varpush", "popall"):
        return None
    if name in ("pop0", "push0"):
        return 0
    return name.count("pop") + name.count("push")


def _info(op: OpCode) -> OpInfo:
    value = int(op.value)
    flow = _FLOW_OVERRIDE.get(value, _FLOW_FROM_DNCIL[op.flow_control])
    return OpInfo(
        name=op.name,
        value=value,
        size=2 if value > 0xFF else 1,
        operand=_OPERAND_OVERRIDE.get(value, _OPERAND_FROM_DNCIL[op.operand_type]),
        flow=flow,
        pops=_stack_count(op.stack_pop),
        pushes=_stack_count(op.stack_push),
        is_prefix=flow is Flow.PREFIX,
    )


def _build() -> dict[int, OpInfo]:
    ops = [v for v in vars(OpCodes).values() if isinstance(v, OpCode) and int(v.value) not in _NOT_ECMA]
    table = {int(op.value): _info(op) for op in sorted(ops, key=lambda o: int(o.value))}
    if len(table) != 219:  # a dncil upgrade that changes its table must be noticed, not absorbed
        raise RuntimeError(f"dncil's opcode table yields {len(table)} ECMA encodings, expected 219")
    return table


OPCODES: dict[int, OpInfo] = _build()
"""Every ECMA-335 encoding, keyed by `OpInfo.value`, in encoding order."""

BY_NAME: dict[str, OpInfo] = {info.name: info for info in OPCODES.values()}
"""The same table keyed by ECMA mnemonic (`ldarg.0`, `br.s`, `unaligned.`, ...)."""

PREFIXES: frozenset[int] = frozenset(v for v, info in OPCODES.items() if info.is_prefix)
"""unaligned., volatile., tail., constrained., no., readonly."""
