"""Value types by value in CoreCLR's SysV AMD64 convention (the linux-x64 target).

CoreCLR on Linux passes and returns structs as the System V AMD64 ABI classifies them
(RyuJIT's UNIX_AMD64_ABI, `getSystemVAmd64PassStructInRegisterDescriptor`); the reader's
own convention (a pointer to a copy, win-x64) is not that. With `Target.sysv_structs` the
reader lowers a value-type parameter, argument or result here:

* a struct of at most 16 bytes is cut into eightbytes, each classified by the primitive
  fields it holds: all floating point -> SSE (`double`, or `float` / `<2 x float>` for
  float32s), anything else -> INTEGER (`i64`). It travels as one LLVM value per eightbyte
  -- in registers, in the order of the parameters -- when enough registers are left for
  all of its eightbytes (6 integer, 8 SSE, counted over `this`, the return buffer and the
  arguments before it), else whole in memory, like a larger struct;
* a struct above 16 bytes (or one that found no registers) is passed in memory: a
  `byval` pointer, which LLVM turns into a copy in the outgoing argument area, as the ABI
  lays it out;
* a result of at most 16 bytes comes back in RAX/RDX and XMM0/XMM1 (an LLVM literal struct
  of its eightbytes, or the one eightbyte), a larger one through the return buffer, passed
  after `this` (CoreCLR's order, not C++'s) and returned in RAX, as the ABI asks.

Pieces are moved through a 16-byte, 8-aligned temporary, so an eightbyte read of a 12-byte
struct never reads past a slot. As CoreCLR 3.1 (`MethodTable::ClassifyEightBytesWithManagedLayout`):
the SIMD types Vector64/128/256<T> and Vector<T>, and any struct holding one, go in memory
whatever their size, and so do a struct with a field off its natural alignment (packed)
and one without fields; a fixed buffer counts as its elements. A struct this module cannot
classify -- explicit layout (fields may overlap) -- stays `abi-unsupported`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..assembly.signatures import ElementType, TypeSig
from .types import StackKind

INTEGER_REGISTERS = 6      # RDI RSI RDX RCX R8 R9
SSE_REGISTERS = 8          # XMM0-7
_FLOATS = (ElementType.R4, ElementType.R8)
# CoreCLR 3.1 never passes these in registers (MethodTable::ClassifyEightBytesWithManagedLayout:
# "SIMD intrinsic types ... will not be enregistered"), nor a struct that holds one.
_NOT_ENREGISTERED = {("System.Runtime.Intrinsics", "Vector64`1"), ("System.Runtime.Intrinsics", "Vector128`1"),
                     ("System.Runtime.Intrinsics", "Vector256`1"), ("System.Numerics", "Vector`1")}
MEMORY = "memory"          # what `eightbytes` says of a struct CoreCLR passes in memory whatever its size


class _InMemory(Exception):
    pass
_REFERENCES = (ElementType.STRING, ElementType.OBJECT)


@dataclass(frozen=True)
class Passing:
    """How one parameter (or the result) travels."""

    how: str                     # scalar | regs | memory
    types: tuple[str, ...]       # scalar: its type; regs: one LLVM type per eightbyte
    size: int = 0                # value types: the struct's size
    align: int = 8

    @property
    def param_type(self) -> str:
        """A memory parameter's type with its attributes, as a declaration and a call write it."""
        return f"ptr byval([{self.size} x i8]) align {self.align}"

    @property
    def llvm_return(self) -> str:
        if self.how == "regs":
            return self.types[0] if len(self.types) == 1 else "{ " + ", ".join(self.types) + " }"
        if self.how == "memory":
            return "ptr"         # the return buffer, in RAX
        return self.types[0]


def _leaves(ee, rt, base: int, depth: int = 0):
    """(offset, size, what) of every primitive field of `rt` placed at `base`, flattened
    through embedded structs, `what` being "float", "ref" (an object reference) or "other";
    None when the layout cannot be walked."""
    from .typesys import _Named, _Prim, _Wrapped      # the metadata interface's own type model
    rt = ee._norm(rt)
    if isinstance(rt, _Prim):
        what = "float" if rt.et in _FLOATS else "ref" if rt.et in _REFERENCES else "other"
        return ((base, ee._place(rt).size, what),)
    if isinstance(rt, _Wrapped):
        return ((base, 8, "ref" if rt.kind in ("szarray", "array") else "other"),)   # arrays; pointers, byrefs
    if not (isinstance(rt, _Named) and rt.value_type):
        return ((base, 8, "ref"),)        # a class, or a shared generic parameter (__Canon)
    if depth > 16:
        return None
    layout = ee._named_layout(rt)
    from ..assembly.names import TokenKind
    module, out = layout.module, []
    if module.type_ns_name((TokenKind.TYPE_DEF << 24) | layout.rid) in _NOT_ENREGISTERED:
        raise _InMemory
    if layout.kind not in ("sequential", "auto"):
        return None
    for frid in module.fields_of(layout.rid):
        row = module.row((TokenKind.FIELD << 24) | frid)
        if row.Flags & 0x10:              # static
            continue
        offset = layout.offset_of(frid)
        if offset is None:
            return None
        sub = _leaves(ee, ee._rt(module, module.names.field_signature(frid).type, rt.args), base + offset, depth + 1)
        if sub is None:
            return None
        out.extend(sub)
    if len(out) == 1 and out[0][0] == base and layout.size > out[0][1] and layout.size % out[0][1] == 0:
        # a fixed buffer (C#'s `fixed T x[n]`: one field at 0, the size a multiple of it): CoreCLR
        # classifies it as n fields of its type
        o, size, what = out[0]
        out = [(o + k * size, size, what) for k in range(layout.size // size)]
    if not out:
        raise _InMemory    # no fields (CoreCLR gives it a size of 1 and does not enregister it)
    return tuple(out)


def eightbytes(ee, sig: TypeSig) -> tuple[str, ...] | str | None:
    """The LLVM type of each eightbyte of a value type of at most 16 bytes, by the SysV
    classification; MEMORY for a SIMD type (or a struct holding one), which CoreCLR passes in
    memory; None when it is larger or cannot be classified. Asked of the JIT-EE interface
    (`sysv_eightbytes`): the runtime-backed one asks CoreCLR (llilc_eh.ee.protocol)."""
    return ee.sysv_eightbytes(sig)


def classify_eightbytes(ee, sig: TypeSig) -> tuple[str, ...] | str | None:
    """`eightbytes` from the metadata JIT-EE's layouts (JitEE.sysv_eightbytes)."""
    size = ee.type_info(sig).size
    if not 0 < size <= 16:
        return None
    try:
        leaves = _leaves(ee, ee._rt(ee._main, sig), 0)
    except _InMemory:
        return MEMORY
    if leaves is None:
        return None
    if any(o % s for o, s, _ in leaves):
        return MEMORY      # a field off its natural alignment: CoreCLR does not enregister the struct
    out = []
    for i in range((size + 7) // 8):
        lo, hi = 8 * i, 8 * i + 8
        part = [leaf for leaf in leaves if leaf[0] < hi and leaf[0] + leaf[1] > lo]
        if any(o < lo or o + s > hi for o, s, _ in part):
            return None                   # a field straddles two eightbytes
        if part and all(w == "float" for _, _, w in part):
            if any(s == 8 for _, s, _ in part):
                out.append("double")
            else:
                out.append("float" if max(o + s for o, s, _ in part) - lo <= 4 else "<2 x float>")
        else:
            out.append("i64")
    return tuple(out)


def reference_offsets(ee, sig: TypeSig) -> tuple[int, ...] | None:
    """Offsets of the object references inside a value type (for per-field write barriers);
    None when its layout cannot be walked. Asked of the JIT-EE interface."""
    return ee.reference_offsets(sig)


def walk_reference_offsets(ee, sig: TypeSig) -> tuple[int, ...] | None:
    """`reference_offsets` from the metadata JIT-EE's layouts (JitEE.reference_offsets); None
    also for a struct the walk stops at (a SIMD type or an empty struct inside it: an async state
    machine holding a YieldAwaiter, reached once exact instantiations bind such structs)."""
    try:
        leaves = _leaves(ee, ee._rt(ee._main, sig), 0)
    except _InMemory:
        return None
    return None if leaves is None else tuple(o for o, _, w in leaves if w == "ref")


def is_value(ee, sig) -> bool:
    return ee.stack_kind(sig) is StackKind.VALUE


def plan_return(ee, sig) -> Passing | None:
    """How a value-type result travels (None: it is not a value type, or unclassifiable and small)."""
    info = ee.type_info(sig)
    pieces = eightbytes(ee, sig) if info.size <= 16 else MEMORY
    if pieces == MEMORY:
        return Passing("memory", (), info.size, max(info.align, 1))
    return Passing("regs", pieces, info.size, max(info.align, 1)) if pieces else None


def plan_params(ee, entries: list) -> list[Passing | None]:
    """Each parameter's passing; `entries` are LLVM scalar types (str) or value-type sigs,
    in order (`this`, the return buffer, the arguments). None: a small struct that cannot
    be classified."""
    gpr, sse = INTEGER_REGISTERS, SSE_REGISTERS
    out: list[Passing | None] = []
    for e in entries:
        if isinstance(e, str):
            if e in ("float", "double"):
                sse = max(sse - 1, 0)
            else:
                gpr = max(gpr - 1, 0)
            out.append(Passing("scalar", (e,)))
            continue
        info = ee.type_info(e)
        memory = Passing("memory", (), info.size, max(min(info.align, 16), 8))
        if info.size > 16:
            out.append(memory)
            continue
        pieces = eightbytes(ee, e)
        if pieces == MEMORY:
            out.append(memory)
            continue
        if pieces is None:
            out.append(None)
            continue
        need_g = sum(t == "i64" for t in pieces)
        need_s = len(pieces) - need_g
        if need_g <= gpr and need_s <= sse:
            gpr, sse = gpr - need_g, sse - need_s
            out.append(Passing("regs", pieces, info.size, max(info.align, 1)))
        else:
            out.append(memory)
    return out


__all__ = ["MEMORY", "INTEGER_REGISTERS", "SSE_REGISTERS", "Passing", "classify_eightbytes", "eightbytes",
           "plan_params", "plan_return", "reference_offsets", "walk_reference_offsets"]
