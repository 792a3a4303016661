"""Decode a CIL byte stream into instructions, rejecting what ECMA-335 forbids.

`decode` reads the whole body once, front to back, and returns one `Instruction` per opcode.
Prefixes (III.2) are instructions of their own at their own offsets, as monodis lists them;
the instruction they modify follows them. Operands are decoded to what they mean:

* branch and leave operands are the *absolute* target offset (the displacement is relative
  to the end of the instruction, III.3.15), switch operands the tuple of absolute targets;
* tokens are the 32-bit metadata token; `ldc.r4`/`ldc.r8` a Python float (NaN payloads
  survive, but a float32 signalling NaN comes back quiet -- Python widens it to a double);
* everything else the integer the spec names (signed for `ldc.i4.s`/`ldc.i4`/`ldc.i8`,
  unsigned for variable indices, `unaligned.` alignment and `no.` flags).

Errors are `ILError`s that name the IL offset. The checks are those of III.1.7 and III.2:
an opcode that is not an ECMA encoding (invalid-opcode), an operand that runs past the end
(truncated-instruction), a branch/leave/switch target outside the body or inside an
instruction (branch-target-not-instruction), a branch to an instruction that follows a
prefix -- only the first prefix may be targeted (branch-into-prefixed-instruction), a
prefix not followed by an instruction it may prefix (dangling-prefix), an `unaligned.`
alignment other than 1, 2, 4 or unknown `no.` flags (invalid-prefix-operand), a `tail.`
call not followed by `ret` (tail-call-not-followed-by-ret), and an empty body (empty-body).

Speed matters: the corpus has ~100,000 bodies. The loop is table driven (one tuple per
opcode with a precompiled `struct` reader), does no per-instruction work beyond building
the `Instruction`, and defers target and prefix checks to a pass over the few instructions
that need them.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Callable

from llilc_eh.errors import ILError
from llilc_eh.il.opcodes import BY_NAME, OPCODES, OperandKind, OpInfo

Operand = int | float | tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class Instruction:
    """One decoded CIL instruction (a prefix is an instruction of its own)."""

    offset: int
    op: OpInfo
    operand: Operand
    size: int

    @property
    def end(self) -> int:
        """Offset of the next instruction: the base of a branch displacement."""
        return self.offset + self.size

    @property
    def targets(self) -> tuple[int, ...]:
        """Absolute IL offsets this branch, leave or switch may transfer to (else empty)."""
        if not self.op.has_targets:
            return ()
        operand = self.operand
        return operand if isinstance(operand, tuple) else (operand,)   # a switch's, or a branch's one

    def format(self, namer: Callable[[int], str] | None = None) -> str:
        """A monodis-style line, `IL_001a:  ldfld 0x04000012`; `namer` turns tokens into names.

        Labels are lower-case hex as monodis prints them (so listings can be compared with
        it); tokens without a namer are upper-case 0x0A000012. Without the trailing blank
        monodis leaves after operand-less opcodes.
        """
        text = _OPERAND_TEXT[self.op.operand](self.operand, namer)
        head = f"IL_{self.offset:04x}:  {self.op.name}"
        return f"{head} {text}" if text else head

    def __str__(self) -> str:
        return self.format()


# -- operand text --------------------------------------------------------------------------

def _stringify_double(value: float) -> str:
    """monodis' stringify_double: %.17g, with a trailing '.' when the text looks integral."""
    text = "%.17g" % value
    return text if any(c in text for c in ".eE") else text + "."


def _float_text(value: float, fmt: str) -> str:
    """Infinities and NaNs are written as their little-endian bytes, as monodis does."""
    if math.isinf(value) or math.isnan(value):
        return "(" + " ".join(f"{b:02x}" for b in struct.pack(fmt, value)) + ")"
    return _stringify_double(value)


def _token_text(token: int, namer: Callable[[int], str] | None) -> str:
    return namer(token) if namer is not None else f"0x{token:08X}"


def _label_text(target: int, namer) -> str:
    return f"IL_{target:04x}"


def _decimal_text(value: int, namer) -> str:
    return str(value)


# The text of an operand, by operand kind: a table, not a chain of tests, because the reader
# formats every instruction (its IR comments), and in Python 3.11 each `OperandKind.X` of a
# chain is a slow class-attribute lookup (EnumType's __getattr__ hook), ~900 machine
# instructions apiece.
_OPERAND_TEXT: dict[OperandKind, Callable[[Operand, Callable[[int], str] | None], str]] = {
    OperandKind.NONE: lambda operand, namer: "",
    OperandKind.BRANCH8: _label_text,
    OperandKind.BRANCH32: _label_text,
    **{kind: _token_text for kind in OperandKind if kind.is_token},
    OperandKind.SWITCH: lambda targets, namer:
        "(" + ", ".join(f"IL_{t:04x}" for t in targets) + ")" if targets else "( )",
    OperandKind.INT8: lambda value, namer: f"0x{value & 0xFFFFFFFF:02x}",  # monodis promotes the signed byte to int
    OperandKind.UINT8: lambda value, namer: f"0x{value:02x}",
    OperandKind.INT64: lambda value, namer: f"0x{value & 0xFFFFFFFFFFFFFFFF:x}",
    OperandKind.FLOAT32: lambda value, namer: _float_text(value, "<f"),
    OperandKind.FLOAT64: lambda value, namer: _float_text(value, "<d"),
    OperandKind.INT32: _decimal_text,
    OperandKind.VAR8: _decimal_text,
    OperandKind.VAR16: _decimal_text,
}


# -- decoding tables -----------------------------------------------------------------------

# How the loop treats an opcode's operand.
_PLAIN, _FIXED, _BRANCH, _SWITCH, _PREFIX = range(5)

# struct format of each operand kind (little-endian, III.1.2); also what test encoders pack with.
OPERAND_FORMAT = {
    OperandKind.INT8: "<b", OperandKind.UINT8: "<B", OperandKind.VAR8: "<B",
    OperandKind.VAR16: "<H", OperandKind.INT32: "<i", OperandKind.INT64: "<q",
    OperandKind.FLOAT32: "<f", OperandKind.FLOAT64: "<d", OperandKind.METHOD: "<I",
    OperandKind.FIELD: "<I", OperandKind.TYPE: "<I", OperandKind.STRING: "<I",
    OperandKind.SIG: "<I", OperandKind.TOK: "<I", OperandKind.BRANCH8: "<b",
    OperandKind.BRANCH32: "<i", OperandKind.SWITCH: "<I",
}


def _entry(info: OpInfo) -> tuple:
    kind = info.operand
    if info.is_prefix:
        mode = _PREFIX
    elif kind is OperandKind.NONE:
        mode = _PLAIN
    elif kind is OperandKind.SWITCH:
        mode = _SWITCH
    elif kind in (OperandKind.BRANCH8, OperandKind.BRANCH32):
        mode = _BRANCH
    else:
        mode = _FIXED
    unpack = struct.Struct(OPERAND_FORMAT[kind]).unpack_from if kind is not OperandKind.NONE else None
    size = 4 if kind is OperandKind.SWITCH else kind.size  # a switch's fixed part: its count
    return (info, mode, size, unpack)


_ONE_BYTE: list[tuple | None] = [None] * 256
_TWO_BYTE: list[tuple | None] = [None] * 256
for _value, _info in OPCODES.items():
    if _value > 0xFF:
        _TWO_BYTE[_value & 0xFF] = _entry(_info)
    else:
        _ONE_BYTE[_value] = _entry(_info)
del _value, _info

_U32 = struct.Struct("<I").unpack_from
_new = object.__new__
# Slot setters of the frozen dataclass: building an Instruction through them skips the
# generated __init__'s four object.__setattr__ calls, about twice as fast in the hot loop.
_set_offset = Instruction.offset.__set__
_set_op = Instruction.op.__set__
_set_operand = Instruction.operand.__set__
_set_size = Instruction.size.__set__


# -- prefix rules (ECMA-335 III.2) ---------------------------------------------------------

def _values(*names: str) -> frozenset[int]:
    return frozenset(BY_NAME[name].value for name in names)


def _family(*starts: str) -> frozenset[int]:
    return frozenset(v for v, info in OPCODES.items() if info.name.startswith(starts))


_CALLS = _values("call", "calli", "callvirt")
_LDIND_STIND = _family("ldind.", "stind.")
_LDELEM_ALL = _family("ldelem.") | _values("ldelem")   # "ldelem.*" in III.2.2
_STELEM_ALL = _family("stelem.") | _values("stelem")
# III.2.5/III.2.6: unaligned. and volatile. combine in either order before these.
_MEMORY_ACCESS = _LDIND_STIND | _values("ldfld", "stfld", "ldobj", "stobj", "initblk", "cpblk")

# no. flags (III.2.2): each set bit must name a check the prefixed instruction performs.
_NO_TYPECHECK, _NO_RANGECHECK, _NO_NULLCHECK = 0x1, 0x2, 0x4
_NO_TARGETS = {
    _NO_TYPECHECK: _values("castclass", "unbox", "ldelema") | _STELEM_ALL,
    _NO_RANGECHECK: _LDELEM_ALL | _values("ldelema") | _STELEM_ALL,
    _NO_NULLCHECK: _values("ldfld", "stfld", "callvirt", "ldvirtftn", "ldelema") | _LDELEM_ALL | _STELEM_ALL,
}
_NO_ANY = frozenset().union(*_NO_TARGETS.values())

_PREFIX_TARGETS = {
    BY_NAME["unaligned."].value: _MEMORY_ACCESS,
    BY_NAME["volatile."].value: _MEMORY_ACCESS | _values("ldsfld", "stsfld"),
    BY_NAME["tail."].value: _CALLS,
    # III.2.1 says callvirt; the static-virtual-methods addendum to ECMA-335 (.NET 7,
    # docs/design/specs/Ecma-335-Augments.md) adds call and ldftn, as CoreCLR accepts.
    BY_NAME["constrained."].value: _values("callvirt", "call", "ldftn"),
    # III.2.3: ldelema and calls to an array's Address method (call or callvirt).
    BY_NAME["readonly."].value: _values("ldelema", "call", "callvirt"),
    BY_NAME["no."].value: _NO_ANY,
}
_UNALIGNED = BY_NAME["unaligned."].value
_NO = BY_NAME["no."].value
_TAIL = BY_NAME["tail."].value
_RET = BY_NAME["ret"].value


def _check_prefix_run(instrs: list[Instruction], first: int, method: str | None) -> int:
    """Check the prefixes starting at `first` against the instruction they prefix.

    Follows CoreCLR's reading of III.2 (`impGetNonPrefixOpcode`): each prefix of a run must
    be one its final instruction accepts, which is what lets `unaligned. volatile.` combine
    in either order. A prefix repeated within a run is rejected: it is followed neither by
    an instruction it may prefix nor by a prefix it combines with. Returns the index of the
    prefixed instruction.
    """
    k = first
    while k < len(instrs) and instrs[k].op.is_prefix:
        k += 1
    if k == len(instrs):
        p = instrs[first]
        raise ILError(f"{p.op.name} at the end of the body prefixes nothing",
                      method=method, offset=p.offset, kind="dangling-prefix")
    target = instrs[k]
    seen: set[int] = set()
    for p in instrs[first:k]:
        value = p.op.value
        if value in seen:
            raise ILError(f"{p.op.name} repeated before {target.op.name} at IL_{target.offset:04x}",
                          method=method, offset=p.offset, kind="dangling-prefix")
        seen.add(value)
        allowed = _PREFIX_TARGETS[value]
        if value == _NO:
            flags = p.operand
            if flags & ~0x7:
                raise ILError(f"no. flags 0x{flags:02x} name checks ECMA-335 does not define "
                              "(typecheck 1, rangecheck 2, nullcheck 4)",
                              method=method, offset=p.offset, kind="invalid-prefix-operand")
            for bit, targets in _NO_TARGETS.items():
                if flags & bit:
                    allowed = allowed & targets
        elif value == _UNALIGNED and p.operand not in (1, 2, 4):
            raise ILError(f"unaligned. alignment {p.operand} is not 1, 2 or 4",
                          method=method, offset=p.offset, kind="invalid-prefix-operand")
        if target.op.value not in allowed:
            raise ILError(f"{p.op.name} may not prefix {target.op.name} at IL_{target.offset:04x}",
                          method=method, offset=p.offset, kind="dangling-prefix")
        if value == _TAIL:
            after = instrs[k + 1] if k + 1 < len(instrs) else None
            if after is None or after.op.value != _RET:
                what = f"{after.op.name} at IL_{after.offset:04x}" if after else "the end of the body"
                raise ILError(f"tail. {target.op.name} at IL_{target.offset:04x} is followed by "
                              f"{what}, not ret (III.2.4)",
                              method=method, offset=p.offset, kind="tail-call-not-followed-by-ret")
    return k


# -- the decoder ---------------------------------------------------------------------------

def decode(il: bytes, *, method: str | None = None) -> tuple[Instruction, ...]:
    """Decode a whole method body; raise `ILError` at the first offending IL offset."""
    n = len(il)
    if n == 0:
        raise ILError("empty method body: ECMA-335 requires at least one instruction",
                      method=method, offset=0, kind="empty-body")
    out: list[Instruction] = []
    append = out.append
    checked: list[int] = []   # indices of branches, switches and prefixes, for the second pass
    one, two = _ONE_BYTE, _TWO_BYTE
    new, set_offset, set_op, set_operand, set_size = _new, _set_offset, _set_op, _set_operand, _set_size
    pos = 0
    while pos < n:
        start = pos
        b = il[pos]
        if b == 0xFE:
            if pos + 1 == n:
                raise ILError("two-byte opcode cut off after its 0xFE escape byte",
                              method=method, offset=start, kind="truncated-instruction")
            entry = two[il[pos + 1]]
            pos += 2
        else:
            entry = one[b]
            pos += 1
        if entry is None:
            raise ILError(f"invalid opcode {il[start:pos].hex(' ')}",
                          method=method, offset=start, kind="invalid-opcode")
        info, mode, osize, unpack = entry
        # Literal mode numbers (_PLAIN 0, _FIXED 1, _BRANCH 2, _SWITCH 3, _PREFIX 4): this
        # is the hot path, and the common cases come first.
        if mode == 0:
            operand = None
        else:
            end = pos + osize
            if end > n:
                raise _truncated(info, start, n, method)
            if mode == 1:
                operand = unpack(il, pos)[0]
            elif mode == 2:
                operand = end + unpack(il, pos)[0]
                checked.append(len(out))
            elif mode == 3:
                count = unpack(il, pos)[0]
                end = pos + 4 + 4 * count
                if end > n:
                    raise _truncated(info, start, n, method, f" with {count} targets")
                operand = tuple([end + d for d in struct.unpack_from(f"<{count}i", il, pos + 4)])
                checked.append(len(out))
            else:
                operand = unpack(il, pos)[0] if unpack is not None else None
                checked.append(len(out))
            pos = end
        instr = new(Instruction)
        set_offset(instr, start)
        set_op(instr, info)
        set_operand(instr, operand)
        set_size(instr, pos - start)
        append(instr)
    if checked:
        _check_targets_and_prefixes(out, checked, n, method)
    return tuple(out)


def _truncated(info: OpInfo, start: int, n: int, method: str | None, what: str = "") -> ILError:
    return ILError(f"{info.name}{what} runs past the end of the {n}-byte body",
                   method=method, offset=start, kind="truncated-instruction")


def _check_targets_and_prefixes(out: list[Instruction], checked: list[int], n: int,
                                method: str | None) -> None:
    """Second pass: prefix legality first (it defines which offsets are prefixed), then targets."""
    prefixed: set[int] = set()
    branches: list[Instruction] = []
    for k in checked:
        instr = out[k]
        if instr.op.is_prefix:
            if k > 0 and out[k - 1].op.is_prefix:
                continue  # checked with the run it belongs to
            target = _check_prefix_run(out, k, method)
            prefixed.update(out[j].offset for j in range(k + 1, target + 1))
        else:
            branches.append(instr)
    if not branches:
        return
    starts = {instr.offset for instr in out}
    for instr in branches:
        for target in instr.targets:
            if target not in starts:
                where = "outside the body" if not 0 <= target < n else "inside an instruction"
                raise ILError(f"{instr.op.name} targets IL_{target:04x}, {where}",
                              method=method, offset=instr.offset, kind="branch-target-not-instruction")
            if target in prefixed:
                raise ILError(f"{instr.op.name} targets IL_{target:04x}, an instruction after its "
                              "prefix; only the first prefix may be a branch target (III.2)",
                              method=method, offset=instr.offset, kind="branch-into-prefixed-instruction")
