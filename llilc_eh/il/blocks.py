"""Basic blocks of a decoded body: maximal straight-line runs, split where control flow or
EH region structure can enter or leave.

A block starts at a *leader*: offset 0, every branch/leave/switch target, the instruction
after one that ends a block (branch, conditional branch, switch, leave, ret, throw,
rethrow, endfinally, endfilter, jmp), and every offset the caller adds -- the region
builder passes the EH boundaries (try starts and ends, handler starts and ends, filter
starts), so that no block straddles a region edge and each handler entry is a block.

A prefix and the instruction it modifies are one unit (III.2): no leader may fall between
them, so a branch to the prefixed instruction or a region boundary there is an error.

Successors are the *normal-flow* edges only, as start offsets: branch and switch targets
first (switch cases in table order), then the fall-through, each offset once. `leave` has
its target -- where control arrives after the finallys in between have run; the EH edges
(into handlers, out of endfinally/endfilter) belong to the region tree, not here. Control
may not "fall through the end of a method" (I.12.4), so a fall-through past the last
instruction is an error (falls-off-end).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Iterable, Sequence

from llilc_eh.errors import ILError
from llilc_eh.il.decoder import Instruction
from llilc_eh.il.opcodes import OPCODES, PREFIXES, Flow


_ENDS_BLOCK = frozenset(value for value, info in OPCODES.items() if info.flow.ends_block)


@dataclass(frozen=True)
class BasicBlock:
    """Instructions `first_instr..last_instr` (inclusive indices) covering [start, end)."""

    index: int
    start: int
    end: int
    first_instr: int
    last_instr: int
    successors: tuple[int, ...]
    terminator: Flow  # the flow of the last instruction (NEXT/CALL when a leader cut the run)

    def __str__(self) -> str:
        succ = ", ".join(f"IL_{s:04x}" for s in self.successors) or "-"
        return (f"BB{self.index:02d} [IL_{self.start:04x}, IL_{self.end:04x}) "
                f"{self.terminator.value} -> {succ}")

    def __contains__(self, offset: int) -> bool:
        return self.start <= offset < self.end


def build_blocks(instrs: Sequence[Instruction], *, extra_leaders: Iterable[int] = (),
                 method: str | None = None) -> tuple[BasicBlock, ...]:
    """Partition `instrs` (as `decode` returns them) into basic blocks, in offset order."""
    if not instrs:
        raise ILError("empty method body: no instructions to form blocks",
                      method=method, offset=0, kind="empty-body")
    body_end = instrs[-1].end
    offsets = [instr.offset for instr in instrs]
    prefixed: set[int] = set()   # offsets inside a prefix run: never a leader
    leaders = {0}
    jumps: list[Instruction] = []
    ends_block, prefixes = _ENDS_BLOCK, PREFIXES
    for k, instr in enumerate(instrs):
        value = instr.op.value
        if value in ends_block:
            leaders.add(instr.end)
            if instr.op.has_targets:
                jumps.append(instr)
        elif value in prefixes:
            prefixed.add(instr.end)

    def index_of(offset: int) -> int:
        """Index of the instruction at `offset`, or -1 when no instruction starts there."""
        k = bisect_left(offsets, offset)
        return k if k < len(offsets) and offsets[k] == offset else -1

    for instr in jumps:
        for target in instr.targets:
            if index_of(target) < 0:
                raise ILError(f"{instr.op.name} targets IL_{target:04x}, not an instruction of the body",
                              method=method, offset=instr.offset, kind="branch-target-not-instruction")
            if target in prefixed:
                raise ILError(f"{instr.op.name} targets IL_{target:04x}, an instruction after its prefix",
                              method=method, offset=instr.offset, kind="branch-into-prefixed-instruction")
            leaders.add(target)

    for boundary in extra_leaders:
        if boundary == body_end:
            continue  # a region that ends with the body: nothing starts there
        if index_of(boundary) < 0:
            raise ILError(f"EH region boundary IL_{boundary:04x} is not the start of an instruction",
                          method=method, offset=boundary, kind="region-boundary-not-instruction")
        if boundary in prefixed:
            raise ILError(f"EH region boundary IL_{boundary:04x} falls between a prefix and the "
                          "instruction it prefixes", method=method, offset=boundary,
                          kind="region-boundary-after-prefix")
        leaders.add(boundary)

    last = instrs[-1]
    if last.op.flow.falls_through:
        raise ILError(f"control falls off the end of the body after {last.op.name}",
                      method=method, offset=last.offset, kind="falls-off-end")

    leaders.discard(body_end)
    starts = sorted(leaders)
    blocks = []
    firsts = [index_of(start) for start in starts] + [len(instrs)]
    for index, start in enumerate(starts):
        first = firsts[index]
        last_k = firsts[index + 1] - 1
        tail = instrs[last_k]
        blocks.append(BasicBlock(index=index, start=start, end=tail.end, first_instr=first,
                                 last_instr=last_k, successors=_successors(tail),
                                 terminator=tail.op.flow))
    return tuple(blocks)


def _successors(tail: Instruction) -> tuple[int, ...]:
    falls_through = tail.op.flow.falls_through
    if tail.op.has_targets:  # br and leave; conditional branches and switches also fall through
        return tuple(dict.fromkeys(tail.targets + (tail.end,))) if falls_through else tail.targets
    if falls_through:        # NEXT or CALL: the block was cut by a leader
        return (tail.end,)
    return ()                # ret, throw, rethrow, endfinally, endfilter, jmp


def block_at(blocks: Sequence[BasicBlock], offset: int) -> BasicBlock:
    """The block containing IL `offset`; `ValueError` if it lies outside the body."""
    k = bisect_right(blocks, offset, key=_start) - 1
    if k < 0 or offset >= blocks[k].end:
        raise ValueError(f"IL_{offset:04x} is outside the body (blocks cover "
                         f"[IL_{blocks[0].start:04x}, IL_{blocks[-1].end:04x}))")
    return blocks[k]


def _start(block: BasicBlock) -> int:
    return block.start
