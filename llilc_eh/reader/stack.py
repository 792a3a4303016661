"""The reader's evaluation stack: what one entry is, its kinds and their LLVM types, and how
the stacks of two predecessors merge at a join.

Why a module of its own: the driver (`reader.translate`: blocks, contexts, spill slots) and
the opcode translation (`reader.opcodes`) both work on stack entries; with the model here the
dependency goes one way, translate -> opcodes -> stack, instead of a cycle broken by imports
inside functions.

Stack values cross block boundaries through per-depth spill slots (allocas, `Translator.
_spill_slot`), so no PHI ever joins values from different funclets. A join where one
predecessor leaves a native int and another a byref (`fixed` code from mcs and csc) is a
byref, as CoreCLR's importer makes it (`_merge_shapes`); a native int and a byref at one
depth share one slot (`_SLOT_OF_KIND`), so a predecessor's store does not depend on what the
join decides later. A join that turns out a byref after its block was translated with a
native int restarts the method with the join's type known (`_Rejoin`).
"""

from __future__ import annotations

from typing import NamedTuple

from .types import StackKind

_LLVM_OF_KIND = {"i32": "i32", "i64": "i64", "nint": "i64", "f": "double", "obj": "ptr",
                 "byref": "ptr", "vt": "ptr"}
# The spill slot of a stack kind: native int and byref (both 8 bytes) share one, since a join
# of the two is a byref (`_merge_shapes`) and a predecessor stores before the join is decided.
_SLOT_OF_KIND = {"nint": "byref"}


class SV(NamedTuple):
    """One evaluation-stack entry: ECMA-335 stack kind, LLVM operand, and (value types) its sig.

    A named tuple, not a frozen dataclass: the reader makes one per push, and a tuple is
    built in half the time."""

    kind: str
    op: str
    sig: object = None

    @property
    def ty(self) -> str:
        return _LLVM_OF_KIND[self.kind]


_KIND_OF_STACK = {StackKind.INT32: "i32", StackKind.INT64: "i64", StackKind.NATIVE_INT: "nint",
                  StackKind.F: "f", StackKind.OBJ: "obj", StackKind.BYREF: "byref", StackKind.VALUE: "vt"}


def _merge_shapes(a: tuple, b: tuple) -> tuple | None:
    """The stack at a join of predecessors that left `a` and `b`, or None if they do not merge.

    Equal kinds merge; so do a native int and a byref, to a byref (ECMA-335 III.1.8.1.3 allows
    the pair in unverifiable code; mcs and csc emit it for `fixed`: `ldc.i4.0; conv.u` on the
    null/empty path, `ldelema` on the other). CoreCLR 3.1's importer does the same: a byref
    spilled into a native-int spill temp retypes the temp to byref and re-imports the
    successors, so the value stays GC-tracked (importer.cpp, impImportBlock). Its JIT64
    compatibility merges (int32 with native int or byref, float with double) are not taken
    here: the reader has one float kind, and an int32 would need widening at the predecessor."""
    if len(a) != len(b):
        return None
    merged = []
    for x, y in zip(a, b):
        if x == y:
            merged.append(x)
        elif {x[0], y[0]} == {"nint", "byref"}:
            merged.append(("byref", None))
        else:
            return None
    return tuple(merged)


class _Rejoin(Exception):
    """A join became a byref after its block was translated with a native int (the native-int
    predecessor came first and a later one, e.g. a back edge, left a byref): `translate`
    starts the method again with the join's type known, as CoreCLR re-imports the block."""

    def __init__(self, key: tuple, shape: tuple):
        super().__init__(key, shape)
        self.key, self.shape = key, shape
