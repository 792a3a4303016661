"""The translation of each IL instruction, over the operand stack of one basic block.

`translate_block` walks the instructions of one IL block in one context (see
translate.py), keeping the ECMA-335 evaluation stack as a list of `SV`s, and ends the block
by spilling the stack and branching to the enqueued successors. Every implicit exception is
an explicit test branching to a cold block that calls a noreturn CORINFO_HELP_* helper
(DESIGN.md decision 6). An opcode this reader does not translate yet is a ReaderError
naming it and its IL offset, never a wrong translation.

Prefixes: `constrained.` is consumed by the `callvirt` it prefixes. `volatile.` and
`unaligned. N` hold for the one instruction that follows (ECMA-335 III.2.5, III.2.6): the
memory access of ldind/stind, ldfld/stfld, ldsfld/stsfld, ldobj/stobj becomes a `load
volatile`/`store volatile` (a volatile `llvm.memcpy` for a value type), with `align N`
under `unaligned.`; cpblk/initblk become a volatile `llvm.memcpy`/`llvm.memset`, and
`unaligned.` needs nothing there, as their memcpy/memset claim no alignment. Without a
prefix, loads and stores assume the type's ABI alignment (which x64 does not enforce).

Blocks of memory and typed references (ECMA-335 Partition III), as measured on CoreCLR 3.1
by tests/reader/typed_refs_and_blocks.il:

* `cpblk` / `initblk` are `llvm.memcpy` / `llvm.memset` of the given (unsigned int32, or
  native int) size, with no alignment claimed: ECMA lets cpblk assume natural alignment
  without `unaligned.`, but CoreCLR does not rely on it and `Unsafe.CopyBlock` emits none.
  A null address raises NullReferenceException only when the size is non-zero (a zero
  size with a null address is no exception, on CoreCLR and on Mono): an explicit test of
  `(dst == null | src == null) & size != 0` before the call (the `null-deref` check).
  Overlapping blocks are unspecified (ECMA), so memcpy, not memmove.
* `cpobj T` copies one value of T: a value type by `llvm.memcpy` of its JIT-EE size, a
  reference type (or a primitive) by a load and a store of its storage type; both
  addresses are null-checked (NullReferenceException, measured). Write barriers: none
  on win-x64 (stfld/stobj/stind.ref store plainly too); on linux-x64 every store that may
  reach the GC heap -- stfld, stsfld, stind.ref, stobj, cpobj, stelem of a value type --
  of a reference or of a value type holding one goes through the barrier helpers
  (`BlockTranslator.store_heap`, llilc_eh.target).
* A TypedReference is a 16-byte value (`typedref`): the data pointer at
  types.TYPEDREF_VALUE_OFFSET and the type handle at types.TYPEDREF_TYPE_OFFSET, as the
  JIT-EE lays out CoreLib's `System.TypedReference {ByReference<byte> Value; IntPtr Type}`.
  `mkrefany T` stores the pointer (a byref or native int, never null-checked: CoreCLR makes
  a typed reference of null without an exception) and T's class handle. `refanyval T` is
  a call of CORINFO_HELP_GETREFANY(class handle, pointer to the typed reference), which
  returns the data pointer or raises InvalidCastException unless the stored type handle is
  exactly T's (JIT_GetRefAny; a default TypedReference too). `refanytype` pushes the
  stored type handle as a RuntimeTypeHandle, in the same one-pointer form as `ldtoken`
  (CoreCLR wraps both into a RuntimeType with a helper; a default TypedReference gives the
  null handle, no exception).
* `arglist` (only in a vararg method; elsewhere the named error `arglist-outside-vararg`,
  where CoreCLR raises InvalidProgramException) pushes a RuntimeArgumentHandle: a
  one-pointer value holding the address of the home slot of the method's varargs cookie,
  as RyuJIT takes the address of its varargs-handle argument. The cookie is a `ptr`
  parameter after `this` and the return buffer (jitee's convention, role `vararg-cookie`);
  every vararg method gets it (`varargs_cookie_home`, run before its first block is
  translated), and a call to a vararg method passes its call site's cookie, the external
  symbol `vasigcookie:<token>`. What the cookie points at (the runtime's VASigCookie, the
  variable arguments) is opaque here. CoreCLR 3.1 on Linux rejects every call to a vararg
  method (InvalidProgramException "Vararg calling convention not supported", raised when
  it compiles the caller); Mono runs them. `arglist` in an outlined filter is refused
  (`arglist-in-filter`): a filter cannot see the parent's parameters.
* `jmp M` (stack empty; outside every region, which the IL checks enforce) is a
  `musttail call` of M with the current values of the arguments, then `ret` of its
  result. M's signature must lower to the same LLVM prototype as ours
  (`jmp-signature-mismatch` otherwise). A value-type argument lives in our own copy: it is
  first copied back into the caller-made buffer we received, and M gets that buffer (a
  musttail callee must not see our frame). `jmp` in or to a vararg method is refused
  (`jmp-vararg`). The call-site marker precedes the call as for any call; LLVM compiles it
  to a tail `jmp`, at O0 as well.
"""

from __future__ import annotations

import re

from ..assembly.names import TokenKind
from ..assembly.signatures import ArrayType, CallKind, ElementType, PrimitiveType
from ..errors import LlilcEhError
from ..il.opcodes import OPCODES, Flow, OperandKind
from .externals import External
from .lookup import REFUSED as LOOKUP_REFUSED, call_inst_param, generic_static_address, shared_handle
from .helpers import IMPLICIT_CHECKS
from .nonnull import NonNullFacts
from .types import (
    ARRAY_LENGTH_OFFSET,
    OBJECT_HEADER_SIZE,
    SZARRAY_DATA_OFFSET,
    TYPEDREF_SIZE,
    TYPEDREF_TYPE_OFFSET,
    TYPEDREF_VALUE_OFFSET,
    StackKind,
    ext_attr,
)
from .typesys import is_void
from .abi import plan_params, plan_return, reference_offsets
from .stack import _KIND_OF_STACK, _LLVM_OF_KIND, SV
from .synchronized import exit_

# linux-x64 (no C library calls): copies and fills of a constant size above this many bytes
# call CORINFO_HELP_MEMCPY / MEMSET; up to it LLVM expands them inline at every level and any
# alignment, whatever its optimiser made of the `.inline` form (measured, O2: a plain memcpy
# is inline up to 64 bytes at align 1 and 128 at align 8, a memset up to 128; O2 turned an
# 80-byte memcpy.inline into a 72-byte misaligned memcpy call).
INLINE_FILL_LIMIT = 64

# Element types named by typed opcodes (ldind.*, stind.*, ldelem.*, stelem.*, conv.*):
# LLVM storage type, stack kind, signed, size.
_ELEM = {
    "i1": ("i8", "i32", True, 1), "u1": ("i8", "i32", False, 1), "i2": ("i16", "i32", True, 2),
    "u2": ("i16", "i32", False, 2), "i4": ("i32", "i32", True, 4), "u4": ("i32", "i32", False, 4),
    "i8": ("i64", "i64", True, 8), "u8": ("i64", "i64", False, 8), "i": ("i64", "nint", True, 8),
    "u": ("i64", "nint", False, 8), "r4": ("float", "f", True, 4), "r8": ("double", "f", True, 8),
    "ref": ("ptr", "obj", True, 8),
}

_INT_BINOPS = {"add": "add", "sub": "sub", "mul": "mul", "and": "and", "or": "or", "xor": "xor"}
_FLOAT_BINOPS = {"add": "fadd", "sub": "fsub", "mul": "fmul", "div": "fdiv", "rem": "frem"}
_CMP = {  # opcode stem -> (int predicate, float predicate)
    "ceq": ("eq", "oeq"), "cgt": ("sgt", "ogt"), "cgt.un": ("ugt", "ugt"), "clt": ("slt", "olt"),
    "clt.un": ("ult", "ult"),
    "beq": ("eq", "oeq"), "bne.un": ("ne", "une"), "bge": ("sge", "oge"), "bge.un": ("uge", "uge"),
    "bgt": ("sgt", "ogt"), "bgt.un": ("ugt", "ugt"), "ble": ("sle", "ole"), "ble.un": ("ule", "ule"),
    "blt": ("slt", "olt"), "blt.un": ("ult", "ult"),
}
_OVF_INTRINSIC = {"add.ovf": "sadd", "add.ovf.un": "uadd", "sub.ovf": "ssub", "sub.ovf.un": "usub",
                  "mul.ovf": "smul", "mul.ovf.un": "umul"}
# the external kinds whose handle shared generic code may have to look up (reader/lookup.py)
_LOOKUP_KINDS = ("class", "ldtoken-class", "array-class", "method-handle", "method-class", "field", "method-entry")
_PLAIN_CALL = re.compile(r"(%[\w.]+ = )?call ")
TYPEDREF = PrimitiveType(ElementType.TYPEDBYREF)   # the stack value of mkrefany
VARARGS_COOKIE = "%varargs.cookie"                 # a vararg method's cookie parameter
VARARGS_COOKIE_HOME = "%varargs.cookie.home"       # its home slot: arglist's handle points here

_INT_RANGE = {"i1": (-2**7, 2**7 - 1), "u1": (0, 2**8 - 1), "i2": (-2**15, 2**15 - 1), "u2": (0, 2**16 - 1),
              "i4": (-2**31, 2**31 - 1), "u4": (0, 2**32 - 1), "i8": (-2**63, 2**63 - 1), "u8": (0, 2**64 - 1),
              "i": (-2**63, 2**63 - 1), "u": (0, 2**64 - 1)}


class BlockTranslator:
    """The state of translating one IL block in one context."""

    def __init__(self, tr, il_block, ctx, block, stack):
        self.tr, self.ctx, self.block, self.stack = tr, ctx, block, stack
        self.fn = ctx.fn
        self.il_block = il_block
        self.region = tr.tree.innermost(il_block.start)
        self.prefix_constrained = None
        self.prefix_volatile = False       # `volatile.` before the current instruction
        self.prefix_unaligned: int | None = None   # `unaligned. N` before it: N
        # What `null_check` need not check again in this block (see there): operands known
        # not to be null, and the variables (their slots) whose current value is known not to be.
        self.facts = _nonnull_facts(tr)
        self.nonnull: set[str] = set()
        self.nonnull_slots: set[str] = self.facts.entry_slots(ctx, il_block)
        self.loaded_from: dict[str, tuple[str, int]] = {}   # operand -> (slot, its store count then)
        self.slot_stores: dict[str, int] = {}
        # The current value of a followed variable (`NonNullFacts.tracked`) where this block
        # loaded or stored it: a later ldloc/ldarg pushes it instead of loading again (only
        # stloc/starg can change such a variable while the block runs; every store is kept).
        self.values: dict[str, SV] = {}

    # -- small helpers ----------------------------------------------------------------------

    def v(self, hint="v"):
        return self.fn.value(hint)

    def emit(self, line):
        self.block.emit(line)

    def push(self, kind, op, sig=None):
        self.stack.append(SV(kind, op, sig))

    def pop(self, offset):
        if not self.stack:
            raise self.tr.fail("stack underflow", offset, "stack-underflow")
        return self.stack.pop()

    def temp(self, ty, align=8):
        return self.fn.alloca(self.v("tmp"), ty, align)

    def widen(self, value, storage, kind, signed):
        """A value loaded as `storage` as the stack kind wants it."""
        if storage in ("i8", "i16") and kind == "i32":
            v = self.v()
            self.emit(f"{v} = {'sext' if signed else 'zext'} {storage} {value} to i32")
            return v
        if storage == "float":
            v = self.v()
            self.emit(f"{v} = fpext float {value} to double")
            return v
        if storage == "ptr" and kind in ("nint", "i64"):   # unmanaged pointers are native ints on the stack
            v = self.v()
            self.emit(f"{v} = ptrtoint ptr {value} to i64")
            return v
        return value

    def narrow(self, sv, storage):
        """A stack value converted to `storage` for a store or a call argument."""
        src = sv.ty
        if storage == src or (storage == "ptr" and src == "ptr"):
            return sv.op
        v = self.v()
        if storage in ("i8", "i16", "i32") and src in ("i32", "i64"):
            if storage == src:
                return sv.op
            self.emit(f"{v} = trunc {src} {sv.op} to {storage}")
        elif storage == "i64" and src == "i32":
            self.emit(f"{v} = sext i32 {sv.op} to i64")
        elif storage == "float" and src == "double":
            self.emit(f"{v} = fptrunc double {sv.op} to float")
        elif storage == "ptr" and src == "i64":
            self.emit(f"{v} = inttoptr i64 {sv.op} to ptr")
        elif storage == "i64" and src == "ptr":
            self.emit(f"{v} = ptrtoint ptr {sv.op} to i64")
        elif storage == "i32" and src == "ptr":
            self.emit(f"{v} = ptrtoint ptr {sv.op} to i32")
        else:
            raise self.tr.fail(f"cannot store a {sv.kind} stack value as {storage}", self.offset, "type-mismatch")
        return v

    def as_i64(self, sv):
        if sv.ty == "i64":
            return sv.op
        if sv.ty == "ptr":
            return self.narrow(sv, "i64")
        v = self.v()
        self.emit(f"{v} = sext i32 {sv.op} to i64")
        return v

    def load_sig(self, addr, sig):
        """Push the value of type `sig` stored at `addr`."""
        self.load_typed(addr, sig, self.tr.ee.type_info(sig))

    def load_typed(self, addr, sig, info):
        """`load_sig` with the type's TypeInfo at hand."""
        kind = _KIND_OF_STACK[info.stack_kind]
        if kind == "vt":
            copy = self.temp(f"[{info.size} x i8]", max(info.align, 1))
            self.memcpy(copy, addr, info.size, self.prefix_volatile)
            self.push("vt", copy, sig)
            return
        storage = info.storage
        v = self.v()
        self.load(v, storage, addr)
        self.push(kind, self.widen(v, storage, kind, info.signed), sig)

    def store_sig(self, addr, sv, sig):
        self.store_typed(addr, sv, self.tr.ee.type_info(sig))

    def store_typed(self, addr, sv, info):
        """Store `sv` at `addr` as a value of the type `info` describes."""
        if info.stack_kind is StackKind.VALUE:
            if sv.kind != "vt":   # III.1.8.1.2.3: only a value of the type itself is assignable
                raise self.tr.fail(f"store of {sv.kind} into a {info.text}", self.offset, "type-mismatch")
            self.memcpy(addr, sv.op, info.size, self.prefix_volatile)
            return
        storage = info.storage
        self.store(storage, self.narrow(sv, storage), addr)

    def store_heap(self, addr, sv, sig, class_handle):
        """Store `sv` (of type `sig`) at `addr`, an address that may lie in the GC heap (a
        field, a static, an array element, any byref). With the target's write barriers
        (linux-x64), an object reference goes through CORINFO_HELP_CHECKED_ASSIGN_REF(dst, ref);
        a value type holding references is copied and each of its references stored again
        through that barrier (its offsets from the layout: `abi.reference_offsets`) -- no
        call between the copy and the barriers can let a GC run -- or, where the layout
        cannot be walked, copied by CORINFO_HELP_ASSIGN_STRUCT(dst, src, class),
        `class_handle()` giving the class. Storing into a local needs none (locals are
        stored by `local_access`)."""
        info = self.tr.ee.type_info(sig)
        if not self.tr.target.write_barriers or not info.gc or info.stack_kind not in (StackKind.OBJ,
                                                                                          StackKind.VALUE):
            self.store_typed(addr, sv, info)
        elif info.stack_kind is StackKind.OBJ:
            self.write_barrier(addr, sv)
        else:
            offsets = reference_offsets(self.tr.ee, sig)
            if offsets is None:
                self.helper("CORINFO_HELP_ASSIGN_STRUCT", [f"ptr {addr}", f"ptr {sv.op}", f"ptr {class_handle()}"])
                return
            self.memcpy(addr, sv.op, info.size, self.prefix_volatile)
            for offset in offsets:
                v = self.v()
                self.emit(f"{v} = load ptr, ptr {self.gep(sv.op, offset) if offset else sv.op}")
                self.write_barrier(self.gep(addr, offset) if offset else addr, SV("obj", v))

    def write_barrier(self, addr, sv):
        """`*addr = ref` through CORINFO_HELP_CHECKED_ASSIGN_REF (an ordinary call)."""
        self.helper("CORINFO_HELP_CHECKED_ASSIGN_REF", [f"ptr {addr}", f"ptr {self.narrow(sv, 'ptr')}"])

    def memcpy(self, dst, src, size, volatile: bool = False):
        """A copy of a constant `size`. On a target without C library calls (linux-x64) it is
        `llvm.memcpy.inline`, which LLVM never turns into a call of the C library's memcpy
        (see llilc_eh.target: such a libcall is in the triple's Win64 convention), and above
        INLINE_FILL_LIMIT bytes a call of CORINFO_HELP_MEMCPY (the optimiser turns even the
        `.inline` form into a memcpy call)."""
        if not self.tr.target.c_library_calls and size > INLINE_FILL_LIMIT:
            self.helper("CORINFO_HELP_MEMCPY", [f"ptr {dst}", f"ptr {src}", f"i64 {size}"])
            return
        name = "llvm.memcpy" if self.tr.target.c_library_calls else "llvm.memcpy.inline"
        self.tr.declares[name] = f"declare void @{name}.p0.p0.i64(ptr, ptr, i64, i1)"
        self.emit(f"call void @{name}.p0.p0.i64(ptr {dst}, ptr {src}, i64 {size}, "
                  f"i1 {'true' if volatile else 'false'})")

    def memset(self, dst, size):
        """Zero a constant `size` (`llvm.memset.inline` on linux-x64, as `memcpy`)."""
        if not self.tr.target.c_library_calls and size > INLINE_FILL_LIMIT:
            self.helper("CORINFO_HELP_MEMSET", [f"ptr {dst}", "i32 0", f"i64 {size}"])
            return
        name = "llvm.memset" if self.tr.target.c_library_calls else "llvm.memset.inline"
        self.tr.declares[name] = f"declare void @{name}.p0.i64(ptr, i8, i64, i1)"
        self.emit(f"call void @{name}.p0.i64(ptr {dst}, i8 0, i64 {size}, i1 false)")

    def gep(self, base, offset):
        v = self.v("addr")
        self.emit(f"{v} = getelementptr i8, ptr {base}, i64 {offset}")
        return v

    def global_(self, symbol, ty="i8", constant=False, *, kind, token=None):
        """The address of the external data `symbol` (an External of `kind`). On a target
        with data cells (linux-x64) the symbol is an 8-byte cell holding that address, which
        is loaded here; otherwise the symbol is the data itself."""
        if self.tr.options.generic_context and kind in _LOOKUP_KINDS:
            handle = shared_handle(self, kind, token)     # shared code: found through the context
            if handle is not None:
                return handle
        g = self.tr.ee.llvm_global(symbol)
        cell = self.tr.target.data_cells
        self.tr.externals[symbol] = External(symbol, kind, token, cell=cell)
        if not cell:
            self.tr.globals[g] = f"{g} = external {'constant' if constant else 'global'} {ty}"
            return g
        self.tr.globals[g] = f"{g} = external global ptr"
        v = self.v("cell")
        self.emit(f"{v} = load ptr, ptr {g}")
        return v

    def helper(self, name, args):
        self.block, result = self.tr.helper(self.block, self.ctx, self.region, name, args, self.offset)
        return result

    def check(self, cond, kind, what):
        """Throw through the helper the runtime uses for implicit check `kind` when `cond` holds."""
        helper = IMPLICIT_CHECKS[kind].helper
        self.block = self.tr.check(self.block, self.ctx, self.region, cond, helper, self.offset, what)

    def null_check(self, obj):
        """NullReferenceException when `obj` is null, unless it is known not to be. Known, as
        RyuJIT 3.1 knows it (valuenumfuncs.h, VNFOA_KnownNonNull; assertion propagation after a
        check): what newobj, newarr, box, unbox and ldstr produced, the address of a local, of a
        static or of a field or element (of an object already checked), and a value this block
        already checked -- the same operand, or a later load of the same variable with no store
        to it in between (`local_access`; a variable whose address is taken, or any variable of a
        method with a filter, which may store into the parent's frame, is not followed). Only
        within one IL block (the check dominates the rest of it), and across blocks for a
        variable never stored (reader/nonnull.py). `this` is not assumed non-null (RyuJIT does
        not either: a `call` may pass null)."""
        if obj in self.nonnull:
            return
        c = self.v("isnull")
        self.emit(f"{c} = icmp eq ptr {obj}, null")
        self.check(c, "null-deref", "nullref")
        self.known(obj)

    def known(self, op):
        """`op` is not null from here to the end of the block (and neither is the variable it
        was loaded from, while nothing stores into it); returns `op`."""
        self.nonnull.add(op)
        origin = self.loaded_from.get(op)
        if origin is not None and self.slot_stores.get(origin[0], 0) == origin[1]:
            self.nonnull_slots.add(origin[0])
        return op

    # -- the walk ----------------------------------------------------------------------------

    def run(self):
        namer = self.tr.namer
        instrs = self.tr.m.instructions[self.il_block.first_instr:self.il_block.last_instr + 1]
        for ins in instrs:
            self.offset = ins.offset
            self.block.emit(f"; {ins.format(namer)}")
            self.instruction(ins)
            if self.block.terminated:
                return
        last = instrs[-1]
        if last.op.flow.falls_through:
            self.goto(last.end)

    def goto(self, target):
        shape = self.tr._spill_stack(self.block, self.ctx, self.stack)
        self.block.terminate(f"br label %{self.tr._enqueue(target, self.ctx, shape)}")

    def instruction(self, ins):
        op = ins.op
        if op.is_prefix:
            if op.name == "constrained.":
                self.prefix_constrained = ins.operand
            elif op.name == "volatile.":
                self.prefix_volatile = True
            elif op.name == "unaligned.":
                self.prefix_unaligned = ins.operand
            return
        entry = _DISPATCH.get(op.value)
        if entry is None:
            raise self.tr.fail(f"opcode {op.name} is not translated yet", ins.offset, "unsupported-opcode")
        handler, stem = entry
        if stem is None:
            handler(self, ins)
        else:
            handler(self, ins, stem)
        self.prefix_volatile, self.prefix_unaligned = False, None     # a prefix holds for one instruction

    def load(self, v, storage, addr):
        """`v = load` of the current instruction's memory access, with its prefixes."""
        vol = "volatile " if self.prefix_volatile else ""
        align = f", align {self.prefix_unaligned}" if self.prefix_unaligned else ""
        self.emit(f"{v} = load {vol}{storage}, ptr {addr}{align}")

    def store(self, storage, value, addr):
        """`store` of the current instruction's memory access, with its prefixes."""
        vol = "volatile " if self.prefix_volatile else ""
        align = f", align {self.prefix_unaligned}" if self.prefix_unaligned else ""
        self.emit(f"store {vol}{storage} {value}, ptr {addr}{align}")

    # -- constants, locals, args ---------------------------------------------------------------

    def ldc(self, ins, stem):
        if stem == "ldc.r4" or stem == "ldc.r8":
            self.push("f", _float_literal(ins.operand))
        elif stem == "ldc.i8":
            self.push("i64", str(ins.operand))
        elif stem in ("ldc.i4", "ldc.i4.s"):
            self.push("i32", str(ins.operand))
        else:
            self.push("i32", "-1" if stem.endswith("m1") else stem.rsplit(".", 1)[1])

    def local_access(self, ins, stem):
        which, implied, access = _LOCAL_ACCESS[stem]
        index = ins.operand if ins.operand is not None else implied
        tr = self.tr
        sigs, infos = (tr.arg_sigs, tr.arg_infos) if which == "arg" else (tr.local_sigs, tr.local_infos)
        if index >= len(sigs):
            raise tr.fail(f"{which} {index} does not exist", ins.offset, "bad-local")
        addr = tr.slot(self.ctx, self.block, which, index)
        if access == "address":
            self.push("byref", self.known(addr))
        elif access == "load":
            tracked = self.facts.tracked(self.ctx, (which, index))
            value = self.values.get(addr) if tracked else None
            if value is not None:
                self.push(value.kind, value.op, sigs[index])
            else:
                self.load_typed(addr, sigs[index], infos[index])
                if tracked and self.stack[-1].kind != "vt":     # (a value type's copy may change)
                    self.values[addr] = self.stack[-1]
            if tracked:
                op = self.stack[-1].op
                self.loaded_from[op] = (addr, self.slot_stores.get(addr, 0))
                if addr in self.nonnull_slots:
                    self.nonnull.add(op)
        else:
            sv = self.pop(ins.offset)
            info = infos[index]
            self.store_typed(addr, sv, info)
            self.slot_stores[addr] = self.slot_stores.get(addr, 0) + 1
            self.nonnull_slots.discard(addr)
            self.values.pop(addr, None)
            if self.facts.tracked(self.ctx, (which, index)):
                if sv.op in self.nonnull:
                    self.nonnull_slots.add(addr)
                # a load would give back what was stored only when the store did not narrow it
                if sv.kind != "vt" and sv.kind == _KIND_OF_STACK[info.stack_kind] and sv.ty == info.storage:
                    self.values[addr] = sv

    # -- arithmetic -------------------------------------------------------------------------------

    def binary_kind(self, a, b, offset):
        """ECMA-335 III.1.5 binary numeric operations: the result kind and both operands in it."""
        if a.kind == b.kind and a.kind in ("i32", "i64", "nint", "f"):
            return a.kind, a.op, b.op
        if {a.kind, b.kind} == {"i32", "nint"}:
            return "nint", self.as_i64(a), self.as_i64(b)
        if a.kind == "byref" and b.kind in ("i32", "nint"):
            return "byref", a.op, self.as_i64(b)
        if b.kind == "byref" and a.kind in ("i32", "nint"):
            return "byref", self.as_i64(a), b.op
        if a.kind in ("byref", "nint") and b.kind in ("byref", "nint"):
            return "nint", self.as_i64(a), self.as_i64(b)
        raise self.tr.fail(f"no numeric operation on {a.kind} and {b.kind}", offset, "type-mismatch")

    def arith(self, ins):
        stem = ins.op.name
        b, a = self.pop(ins.offset), self.pop(ins.offset)
        kind, x, y = self.binary_kind(a, b, ins.offset)
        if kind == "byref":
            if stem not in ("add", "sub"):
                raise self.tr.fail(f"{stem} on a managed pointer", ins.offset, "type-mismatch")
            ptr, off = (x, y) if a.kind == "byref" else (y, x)
            if stem == "sub":
                n = self.v()
                self.emit(f"{n} = sub i64 0, {off}")
                off = n
            self.push("byref", self.gep(ptr, off))
            return
        ty = _LLVM_OF_KIND[kind]
        v = self.v()
        if kind == "f" and stem.startswith("rem") and not self.tr.target.c_library_calls:
            self.push("f", self.helper("CORINFO_HELP_DBLREM", [f"double {x}", f"double {y}"]))   # not fmod
            return
        if kind == "f":
            self.emit(f"{v} = {_FLOAT_BINOPS[stem.split('.')[0]]} double {x}, {y}")
        elif stem in _INT_BINOPS:
            self.emit(f"{v} = {_INT_BINOPS[stem]} {ty} {x}, {y}")
        else:   # div, div.un, rem, rem.un: divide-by-zero, and INT_MIN / -1 for the signed ones
            z = self.v("iszero")
            self.emit(f"{z} = icmp eq {ty} {y}, 0")
            self.check(z, "div-zero", "divzero")
            if not stem.endswith(".un"):
                minval = -2**31 if ty == "i32" else -2**63
                m1, m2, both = self.v(), self.v(), self.v("isovf")
                self.emit(f"{m1} = icmp eq {ty} {x}, {minval}")
                self.emit(f"{m2} = icmp eq {ty} {y}, -1")
                self.emit(f"{both} = and i1 {m1}, {m2}")
                self.check(both, "div-overflow", "divovf")
            op = {"div": "sdiv", "div.un": "udiv", "rem": "srem", "rem.un": "urem"}[stem]
            self.emit(f"{v} = {op} {ty} {x}, {y}")
        self.push(kind, v)

    def arith_ovf(self, ins):
        stem = ins.op.name
        b, a = self.pop(ins.offset), self.pop(ins.offset)
        kind, x, y = self.binary_kind(a, b, ins.offset)
        if kind in ("f", "byref"):
            raise self.tr.fail(f"{stem} on {kind}", ins.offset, "type-mismatch")
        ty = _LLVM_OF_KIND[kind]
        intrinsic = f"llvm.{_OVF_INTRINSIC[stem]}.with.overflow.{ty}"
        self.tr.declares[intrinsic] = f"declare {{{ty}, i1}} @{intrinsic}({ty}, {ty})"
        pair, v, o = self.v(), self.v(), self.v("ovf")
        self.emit(f"{pair} = call {{{ty}, i1}} @{intrinsic}({ty} {x}, {ty} {y})")
        self.emit(f"{v} = extractvalue {{{ty}, i1}} {pair}, 0")
        self.emit(f"{o} = extractvalue {{{ty}, i1}} {pair}, 1")
        self.check(o, stem, "ovf")
        self.push(kind, v)

    def unary(self, ins):
        a = self.pop(ins.offset)
        # III.3.50 neg: an integer or F; III.3.52 not: an integer; never a reference
        if a.kind not in (("i32", "i64", "nint", "f") if ins.op.name == "neg" else ("i32", "i64", "nint")):
            raise self.tr.fail(f"{ins.op.name} on {a.kind}", ins.offset, "type-mismatch")
        v = self.v()
        if ins.op.name == "neg":
            self.emit(f"{v} = fneg double {a.op}" if a.kind == "f" else f"{v} = sub {a.ty} 0, {a.op}")
        else:
            self.emit(f"{v} = xor {a.ty} {a.op}, -1")
        self.push(a.kind, v)

    def shift(self, ins):
        amount, a = self.pop(ins.offset), self.pop(ins.offset)
        amt = amount.op
        if a.ty != amount.ty:
            amt = self.as_i64(amount) if a.ty == "i64" else self.narrow(amount, "i32")
        op = {"shl": "shl", "shr": "ashr", "shr.un": "lshr"}[ins.op.name]
        v = self.v()
        self.emit(f"{v} = {op} {a.ty} {a.op}, {amt}")
        self.push(a.kind, v)

    def compare(self, a, b, stem, offset):
        int_pred, float_pred = _CMP[stem]
        c = self.v("cmp")
        if a.kind == "f" and b.kind == "f":
            self.emit(f"{c} = fcmp {float_pred} double {a.op}, {b.op}")
        elif a.ty == "ptr" and b.ty == "ptr":
            self.emit(f"{c} = icmp {int_pred} ptr {a.op}, {b.op}")
        else:
            kind, x, y = self.binary_kind(a, b, offset)
            ty = "i64" if kind in ("nint", "byref") else _LLVM_OF_KIND[kind]
            if kind == "byref":   # a byref against a native int (`fixed` loops: `q < p + n`): addresses
                x, y = self.as_i64(a), self.as_i64(b)
            self.emit(f"{c} = icmp {int_pred} {ty} {x}, {y}")
        return c

    def cmp_push(self, ins):
        b, a = self.pop(ins.offset), self.pop(ins.offset)
        c = self.compare(a, b, ins.op.name, ins.offset)
        v = self.v()
        self.emit(f"{v} = zext i1 {c} to i32")
        self.push("i32", v)

    def truth(self, sv):
        c = self.v("cond")
        if sv.kind == "f":
            self.emit(f"{c} = fcmp une double {sv.op}, 0.0")
        elif sv.ty == "ptr":
            self.emit(f"{c} = icmp ne ptr {sv.op}, null")
        else:
            self.emit(f"{c} = icmp ne {sv.ty} {sv.op}, 0")
        return c

    # -- conversions --------------------------------------------------------------------------

    def conv(self, ins, stem):
        ovf = stem.startswith("conv.ovf.")
        target = stem.removeprefix("conv.ovf.").removeprefix("conv.")
        unsigned_source = target.endswith(".un")
        target = target.removesuffix(".un")
        a = self.pop(ins.offset)
        if target == "r":   # conv.r.un: an unsigned integer to F
            target = "r8"
        if target in ("r4", "r8"):
            self.push("f", self.to_float(a, target, unsigned_source))
            return
        storage, kind, signed, size = _ELEM[target]
        if ovf:
            self.range_check(a, target, unsigned_source, stem)
        bits = size * 8
        if a.kind == "f":
            v = self.v()
            wide = 64 if bits == 64 else 32
            self.emit(f"{v} = {'fptosi' if signed or bits < 32 else 'fptoui'} double {a.op} to i{wide}")
            a = SV(f"i{wide}", v)
        src = a.op if a.ty != "ptr" else self.narrow(a, "i64")
        src_bits = 64 if a.ty in ("i64", "ptr") else 32
        if bits < 32:
            t, w = self.v(), self.v()
            self.emit(f"{t} = trunc i{src_bits} {src} to i{bits}")
            self.emit(f"{w} = {'sext' if signed else 'zext'} i{bits} {t} to i32")
            self.push("i32", w)
        elif bits == 32:
            if src_bits == 64:
                t = self.v()
                self.emit(f"{t} = trunc i64 {src} to i32")
                src = t
            self.push("i32", src)
        else:
            if src_bits == 32:   # conv.i8/conv.i sign-extend an int32; conv.u8/conv.u and .un zero-extend
                t = self.v()
                self.emit(f"{t} = {'zext' if unsigned_source or not signed else 'sext'} i32 {src} to i64")
                src = t
            self.push(kind, src)

    def to_float(self, a, target, unsigned_source):
        v = self.v()
        if a.kind == "f":
            if target == "r4":
                t = self.v()
                self.emit(f"{t} = fptrunc double {a.op} to float")
                self.emit(f"{v} = fpext float {t} to double")
                return v
            return a.op
        src = a.op if a.ty != "ptr" else self.narrow(a, "i64")
        ty = "i64" if a.ty in ("i64", "ptr") else "i32"
        self.emit(f"{v} = {'uitofp' if unsigned_source else 'sitofp'} {ty} {src} to double")
        if target == "r4":
            t, w = self.v(), self.v()
            self.emit(f"{t} = fptrunc double {v} to float")
            self.emit(f"{w} = fpext float {t} to double")
            return w
        return v

    def range_check(self, a, target, unsigned_source, kind):
        lo, hi = _INT_RANGE[target]
        conds = []
        if a.kind == "f":
            lo_ok, hi_ok = self.v(), self.v()
            lo_bound = float(lo - 1) if abs(lo) < 2**53 else float(lo)
            self.emit(f"{lo_ok} = fcmp {'ogt' if abs(lo) < 2**53 else 'oge'} double {a.op}, {_float_literal(lo_bound)}")
            self.emit(f"{hi_ok} = fcmp olt double {a.op}, {_float_literal(float(hi) + 1.0)}")
            ok, bad = self.v(), self.v("isovf")
            self.emit(f"{ok} = and i1 {lo_ok}, {hi_ok}")
            self.emit(f"{bad} = xor i1 {ok}, true")
            self.check(bad, kind, "ovf")
            return
        src = a.op if a.ty != "ptr" else self.narrow(a, "i64")
        if a.ty == "i32":
            w = self.v()
            self.emit(f"{w} = {'zext' if unsigned_source else 'sext'} i32 {src} to i64")
            src = w
        if unsigned_source:
            if hi < 2**64 - 1:
                c = self.v()
                self.emit(f"{c} = icmp ugt i64 {src}, {hi if hi < 2**63 else hi - 2**64}")
                conds.append(c)
        else:
            if lo > -2**63:
                c = self.v()
                self.emit(f"{c} = icmp slt i64 {src}, {lo}")
                conds.append(c)
            if hi < 2**63 - 1:
                c = self.v()
                self.emit(f"{c} = icmp sgt i64 {src}, {hi}")
                conds.append(c)
        if not conds:
            return
        bad = conds[0]
        if len(conds) == 2:
            bad = self.v("isovf")
            self.emit(f"{bad} = or i1 {conds[0]}, {conds[1]}")
        self.check(bad, kind, "ovf")

    def ckfinite(self, ins):
        a = self.pop(ins.offset)     # peeked: it stays on the stack
        self.stack.append(a)
        if a.kind != "f":
            raise self.tr.fail("ckfinite on a non-float", ins.offset, "type-mismatch")
        abs_v, bad = self.v(), self.v("notfinite")
        self.tr.declares["llvm.fabs"] = "declare double @llvm.fabs.f64(double)"
        self.emit(f"{abs_v} = call double @llvm.fabs.f64(double {a.op})")
        self.emit(f"{bad} = fcmp ueq double {abs_v}, 0x7FF0000000000000")
        self.check(bad, "ckfinite", "notfinite")

    # -- control flow ---------------------------------------------------------------------------

    def branch(self, ins):
        stem = ins.op.name.removesuffix(".s")
        target = ins.targets[0]
        if ins.op.flow is Flow.BRANCH:
            self.goto(target)
            return
        negated = False
        if stem in ("brtrue", "brfalse", "brinst", "brnull", "brzero"):
            c = self.truth(self.pop(ins.offset))
            negated = stem == "brfalse"     # the targets swapped: no `xor i1 c, true`
        else:
            b, a = self.pop(ins.offset), self.pop(ins.offset)
            c = self.compare(a, b, stem, ins.offset)
        shape = self.tr._spill_stack(self.block, self.ctx, self.stack)
        t = self.tr._enqueue(target, self.ctx, shape)
        f = self.tr._enqueue(ins.end, self.ctx, shape)
        if negated:
            t, f = f, t
        self.block.terminate(f"br i1 {c}, label %{t}, label %{f}")

    def switch(self, ins):
        v = self.pop(ins.offset)
        shape = self.tr._spill_stack(self.block, self.ctx, self.stack)
        default = self.tr._enqueue(ins.end, self.ctx, shape)
        cases = " ".join(f"i32 {i}, label %{self.tr._enqueue(t, self.ctx, shape)}"
                         for i, t in enumerate(ins.operand))
        self.block.terminate(f"switch i32 {self.narrow(v, 'i32')}, label %{default} [{cases}]")

    def ret(self, ins):
        tr = self.tr
        if tr.sync is not None:      # a synchronized method releases its lock (reader/synchronized.py)
            exit_(self, tr.sync)
        if is_void(tr.ret_sig):
            self.block.terminate("ret void")
            return
        sv = self.pop(ins.offset)
        if tr._returns_vt(tr.ret_sig) and tr.target.struct_passing == "sysv":
            self.sysv_return(sv)
            return
        if tr._returns_vt(tr.ret_sig):
            info = tr.ee.compiled_method(tr.rid)
            self.memcpy(f"%p{1 if info.has_this else 0}", sv.op, tr.ee.size_and_align(tr.ret_sig)[0])
            self.block.terminate("ret void")
            return
        storage = tr.ee.storage_type(tr.ret_sig)
        self.block.terminate(f"ret {storage} {self.narrow(sv, storage)}")

    def sysv_return(self, sv):
        """Return a value type under SysV struct passing (reader/abi.py): its eightbytes in
        registers, or a copy into the caller's buffer -- which may lie in the GC heap: each
        object reference in it is stored again through the write barrier -- and the buffer's
        address in RAX."""
        tr = self.tr
        info = tr.ee.type_info(tr.ret_sig)
        plan = plan_return(tr.ee, tr.ret_sig)
        if plan.how == "memory":
            token = tr.ee.compiled_method(tr.rid).token
            self.store_heap(tr.retbuf_param, sv, tr.ret_sig, lambda: self.global_(
                f"returnclass:{tr.ee.compiled_method(tr.rid).symbol}", kind="return-class", token=token))
            self.block.terminate(f"ret ptr {tr.retbuf_param}")
            return
        values = self.load_eightbytes(sv.op, info.size, plan.types)
        if len(values) == 1:
            self.block.terminate(f"ret {plan.types[0]} {values[0]}")
            return
        agg = "undef"
        for k, (ty, value) in enumerate(zip(plan.types, values)):
            nxt = self.v("ret")
            self.emit(f"{nxt} = insertvalue {plan.llvm_return} {agg}, {ty} {value}, {k}")
            agg = nxt
        self.block.terminate(f"ret {plan.llvm_return} {agg}")

    def load_eightbytes(self, src, size, types):
        """The eightbytes of the value at `src` (of `size` bytes), through a 16-byte temporary."""
        tmp = self.temp("[16 x i8]", 8)
        self.memcpy(tmp, src, size)
        out = []
        for k, ty in enumerate(types):
            v = self.v("eb")
            self.emit(f"{v} = load {ty}, ptr {tmp if k == 0 else self.gep(tmp, 8)}")
            out.append(v)
        return out

    def store_eightbytes(self, value, size, types) -> str:
        """A temporary of `size` bytes holding the struct whose eightbytes are `value`."""
        tmp = self.temp("[16 x i8]", 8)
        if len(types) == 1:
            self.emit(f"store {types[0]} {value}, ptr {tmp}")
        else:
            agg = "{ " + ", ".join(types) + " }"
            for k, ty in enumerate(types):
                v = self.v("eb")
                self.emit(f"{v} = extractvalue {agg} {value}, {k}")
                self.emit(f"store {ty} {v}, ptr {tmp if k == 0 else self.gep(tmp, 8)}")
        out = self.temp(f"[{size} x i8]", 8)
        self.memcpy(out, tmp, size)
        return out

    def leave(self, ins):
        self.stack.clear()
        self.tr.leave(self.block, self.ctx, self.region, ins.targets[0], ins.offset)

    def endfinally(self, ins):
        self.stack.clear()
        if self.tr.sync is not None and ins.offset == self.tr.sync.handler_offset:   # the JIT's fault
            exit_(self, self.tr.sync)
        self.tr._endfinally(self.block, self.ctx, ins.offset)

    def endfilter(self, ins):
        if self.ctx.kind != "filter":
            raise self.tr.fail("endfilter outside an outlined filter", ins.offset, "endfilter-context")
        v = self.narrow(self.pop(ins.offset), "i32")
        if self.tr.target.normalize_filter_result:   # the VM runs the handler for exactly 1
            b, r = self.v("verdict"), self.v()
            self.emit(f"{b} = icmp ne i32 {v}, 0")
            self.emit(f"{r} = zext i1 {b} to i32")
            v = r
        self.block.terminate(f"ret i32 {v}")

    def throw(self, ins):
        obj = self.pop(ins.offset)
        if obj.kind != "obj":     # III.4.26: an object reference
            raise self.tr.fail(f"throw of {obj.kind}", ins.offset, "type-mismatch")
        self.helper("CORINFO_HELP_THROW", [f"ptr {obj.op}"])

    def rethrow(self, ins):
        self.helper("CORINFO_HELP_RETHROW", [])

    # -- calls and objects ------------------------------------------------------------------------

    def call(self, ins):
        tr = self.tr
        info = tr.ee.method(ins.operand)
        name = ins.op.name
        args = [self.pop(ins.offset) for _ in info.params][::-1]
        if name == "newobj" and tr.target.data_cells and isinstance(info.owner_type, ArrayType):
            # CoreCLR allocates a multi-dimensional array with CORINFO_HELP_NEW_MDARR_NONVARARG (the
            # array's class, the int32 arguments in memory, as importer.cpp's impImportNewObjArray);
            # its `.ctor` is no method code may call (the runtime threw InvalidProgramException
            # from Int32[,]::.ctor)
            dims = self.temp(f"[{len(args)} x i32]", 4)
            for k, a in enumerate(args):
                self.emit(f"store i32 {self.narrow(a, 'i32')}, ptr {self.gep(dims, 4 * k) if k else dims}")
            cls = self.global_(tr.ee.class_handle(info.owner_token), kind="class", token=info.owner_token)
            obj = self.helper("CORINFO_HELP_NEW_MDARR_NONVARARG", [f"ptr {cls}", f"i32 {len(args)}", f"ptr {dims}"])
            self.prefix_constrained = None
            self.stack.append(SV("obj", obj, info.owner_type))
            return
        this = None
        ret_sig = info.return_type
        var_size = name == "newobj" and self.is_string_class(info)
        if var_size:
            # CoreCLR (CORINFO_FLG_VAROBJSIZE, importer.cpp): a string is not allocated before its
            # constructor runs; the constructor -- its entry point is String's managed Ctor -- is
            # called with a null `this` and returns the new string. Allocated with NEWSFAST and
            # passed as `this`, it crashed AppContext.Setup, CoreLib's first method with R2R off.
            this, ret_sig = SV("obj", "null"), PrimitiveType(ElementType.STRING)
        elif name == "newobj":
            this = self.new_object(info, ins)
        elif info.has_this:
            this = self.pop(ins.offset)
        copy_back = None
        if (this is not None and name == "callvirt" and self.prefix_constrained is not None and this.kind == "byref"
                and tr.target.data_cells and info.is_virtual and not info.vararg and ins.operand >> 24 != 0x2B
                and not tr.options.generic_context
                and tr.ee.stack_kind(tr.ee.token_type(self.prefix_constrained)) is not StackKind.OBJ):
            result = self.constrained_value_call(ins, info, this, args, ret_sig)
            if result is not None:
                self.stack.append(result)
            return
        if this is not None and name == "callvirt":
            boxed = False
            if self.prefix_constrained is not None and this.kind == "byref":
                original = this
                this = self.constrained_this(self.prefix_constrained, this)
                boxed = this.sig == "boxed"
                if boxed and tr.ee.is_nullable(tr.ee.token_type(self.prefix_constrained)):
                    boxed = False     # a Nullable boxes to a T or to null: no copy back, a null check
                if boxed and tr.ee.stack_kind(tr.ee.token_type(self.prefix_constrained)) is StackKind.VALUE:
                    copy_back = (original, self.prefix_constrained, this.op)
            if this.kind == "obj" and not boxed:      # (a box is never null)
                self.null_check(this.op)
        self.prefix_constrained = None
        virtual = name == "callvirt" and info.is_virtual is not False and this is not None
        callee = tr.ee.llvm_global(info.symbol)
        if virtual:
            handle = self.global_(info.symbol + "$handle", kind="method-handle", token=ins.operand)
            owner = self.method_class(info.symbol, ins.operand)
            callee = self.helper("CORINFO_HELP_VIRTUAL_FUNC_PTR", [f"ptr {this.op}", f"ptr {owner}", f"ptr {handle}"])
        cookie = self.global_(tr.ee.varargs_cookie(ins.operand), kind="vasig-cookie", token=ins.operand) \
            if info.vararg else None
        instparam = None if var_size else call_inst_param(self, ins.operand, name == "newobj")
        if instparam is not None and virtual:
            raise tr.fail(f"a virtual call to {info.display} that takes an instantiation argument (a generic "
                          "virtual method) from shared code", ins.offset, LOOKUP_REFUSED)
        kind = "shared" if instparam is not None else "newobj" if name == "newobj" else "direct"
        result = self.emit_call(callee, this, args, info.params, ret_sig, direct=not virtual,
                                cookie=cookie, external=(info.symbol, kind, ins.operand, info.display),
                                instparam=instparam)
        if copy_back is not None:    # the struct's value, as the call left it in the box, back in place
            original, token, box = copy_back
            sig = tr.ee.token_type(token)
            self.store_heap(original.op, SV("vt", self.gep(box, OBJECT_HEADER_SIZE), sig), sig, lambda: self.global_(
                tr.ee.class_handle(token), kind="class", token=token))
        if name == "newobj" and not var_size:
            self.stack.append(this if this.kind != "byref" else SV("vt", this.op, this.sig))
        elif result is not None:
            self.stack.append(result)

    def is_string_class(self, info) -> bool:
        """Whether a constructor's class is the core library's System.String (or Utf8String): the
        variable-size classes that are not arrays (CoreCLR's CORINFO_FLG_VAROBJSIZE)."""
        if info.owner_is_value_type or info.owner_token is None or info.owner_token >> 24 not in (
                TokenKind.TYPE_DEF, TokenKind.TYPE_REF) or not info.owner.endswith(("System.String", "System.Utf8String")):
            return False
        try:
            own = self.tr.ee.class_ancestry(info.owner_token)[0]
        except LlilcEhError:
            return False
        return own in ("[System.Private.CoreLib]System.String", "[System.Private.CoreLib]System.Utf8String",
                       "[mscorlib]System.String")

    def constrained_value_call(self, ins, info, this, args, ret_sig):
        """`constrained. T callvirt M` on a value type T (linux-x64), as ECMA-335 III.2.1 says
        and RyuJIT does: when T implements M itself, M is called directly with the managed
        pointer as `this` -- what M changes in `this` is changed in place, at once and also when
        M then throws (a boxed copy loses it: tests/runtime/programs/constrained.il); when T
        inherits M, M is called virtually on a boxed copy (`constrained_this`), whose value a
        struct then gets back. Which of the two, the runtime says: T's own M lives in T's module
        under no token of ours, so a `constrained-entry` cell holds its entry point or null
        (runtime/install.py: resolveVirtualMethod, getUnboxedEntry) and the code branches on it.
        Returns the call's result (pushed by the caller)."""
        tr, fn = self.tr, self.ctx.fn
        token = self.prefix_constrained
        self.prefix_constrained = None
        symbol = f"constrained:{tr.ee.class_handle(token)}::{info.symbol}"
        entry = self.global_(symbol, kind="constrained-entry", token=ins.operand)
        from dataclasses import replace
        tr.externals[symbol] = replace(tr.externals[symbol], constrained=token)
        own = self.v("own")
        self.emit(f"{own} = icmp ne ptr {entry}, null")
        here = f"IL_{ins.offset:04x}"
        direct, boxed, joined = fn.new_block(here + ".own"), fn.new_block(here + ".boxed"), fn.new_block(here + ".called")
        self.block.terminate(f"br i1 {own}, label %{direct.label}, label %{boxed.label}")
        self.block = direct
        results = [(self.emit_call(entry, this, args, info.params, ret_sig, direct=False), self.block)]
        self.block.terminate(f"br label %{joined.label}")
        self.block = boxed
        box = self.constrained_this(token, this)
        handle = self.global_(info.symbol + "$handle", kind="method-handle", token=ins.operand)
        owner = self.method_class(info.symbol, ins.operand)
        callee = self.helper("CORINFO_HELP_VIRTUAL_FUNC_PTR", [f"ptr {box.op}", f"ptr {owner}", f"ptr {handle}"])
        result = self.emit_call(callee, box, args, info.params, ret_sig, direct=False)
        sig = tr.ee.token_type(token)
        if tr.ee.stack_kind(sig) is StackKind.VALUE and not tr.ee.is_nullable(sig):    # the struct's value, as the call left it in the box
            self.store_heap(this.op, SV("vt", self.gep(box.op, OBJECT_HEADER_SIZE), sig), sig,
                            lambda: self.global_(tr.ee.class_handle(token), kind="class", token=token))
        results.append((result, self.block))
        self.block.terminate(f"br label %{joined.label}")
        self.block = joined
        (first, first_end), (second, second_end) = results
        if first is None:
            return None
        v = self.v("called")
        self.emit(f"{v} = phi {first.ty} [ {first.op}, %{first_end.label} ], [ {second.op}, %{second_end.label} ]")
        return SV(first.kind, v, first.sig)

    def constrained_this(self, token, this) -> SV:
        """`constrained. T callvirt M` with `this` a managed pointer (ECMA-335 III.2.1): a
        reference type T -> the object it points at; a value type T -> a boxed copy, on
        which M is called virtually (the vtable's unboxing stub reaches T's own M when T
        implements it). For a struct (not a primitive or an enum, which no method changes)
        `call` then copies the box's value back into the original: T's own M -- an
        enumerator's MoveNext -- sees and changes `this` as if called on it, the one
        difference being that the original is updated when M returns, not as M runs.
        The calls CoreCLR makes directly with the managed pointer need a method no token
        of ours names (T's own M, in T's module): the box reaches it with what the
        installer resolves already (class, method handle, helpers)."""
        tr = self.tr
        sig = tr.ee.token_type(token)
        if tr.ee.stack_kind(sig) is StackKind.OBJ:
            v = self.v()
            self.emit(f"{v} = load ptr, ptr {this.op}")
            return SV("obj", v)
        cls = self.global_(tr.ee.class_handle(token), kind="class", token=token)
        return SV("obj", self.boxed(sig, cls, this.op), "boxed")

    def calli(self, ins):
        sig = self.tr.asm.names.standalone_signature(ins.operand)
        target = self.pop(ins.offset)
        args = [self.pop(ins.offset) for _ in sig.params][::-1]
        this = self.pop(ins.offset) if sig.has_this and not sig.explicit_this else None
        cookie = self.global_(self.tr.ee.varargs_cookie(ins.operand), kind="vasig-cookie", token=ins.operand) \
            if sig.call_kind is CallKind.VARARG else None
        result = self.emit_call(self.narrow(target, "ptr"), this, args, sig.params, sig.return_type, direct=False,
                                cookie=cookie)
        if result is not None:
            self.stack.append(result)

    def emit_call(self, callee, this, args, params, ret_sig, direct, cookie=None, external=None, instparam=None):
        """A call (an invoke under a try) in our calling convention: `this`, the hidden return
        buffer of a value-type result, the varargs cookie of a vararg call, then the
        arguments. Returns the pushed result, if any. `external`: (symbol, call kind, token,
        display) of a direct callee, for the externals table."""
        tr = self.tr
        tr.check_call_abi(params, ret_sig, cookie is not None, self.offset,
                          external[3] if external else "an indirect call")
        if tr.target.struct_passing == "sysv":
            return self.emit_call_sysv(callee, this, args, params, ret_sig, direct, external, instparam)
        types, values = [], []
        if this is not None:
            types.append("ptr")
            values.append(this.op if this.ty == "ptr" else self.narrow(this, "ptr"))
        ret = None if is_void(ret_sig) else tr.ee.type_info(ret_sig)
        retbuf = None
        if ret is not None and ret.stack_kind is StackKind.VALUE:
            retbuf = self.temp(f"[{ret.size} x i8]", max(ret.align, 1))
            types.append("ptr")
            values.append(retbuf)
        if cookie is not None:
            types.append("ptr")
            values.append(cookie)
        for sv, sig in zip(args, params):
            ty = tr._param_type(sig)
            types.append(ty)
            values.append(self.narrow(sv, ty))
        ret_ty = "void" if (ret is None or retbuf) else ret.storage
        param_types = ", ".join(types)
        if direct:
            tr.declares[callee] = tr.target.declare(f"declare {ret_ty} {callee}({param_types})")
            if external is not None:
                tr.externals[external[0]] = External(external[0], "method", external[2], call=external[1],
                                                     prototype=f"{ret_ty} ({param_types})")
        texts = [f"{ty} {value}" for ty, value in zip(types, values)]
        self.block, result = tr.call(self.block, self.ctx, self.region, ret_ty, callee, texts, self.offset,
                                     fnty=None if direct else f"{ret_ty} ({param_types})")
        if retbuf:
            return SV("vt", retbuf, ret_sig)
        if result is None:
            return None
        kind = _KIND_OF_STACK[ret.stack_kind]
        return SV(kind, self.widen(result, ret_ty, kind, ret.signed), ret_sig)

    def method_class(self, symbol: str, token: int) -> str:
        """CORINFO_HELP_VIRTUAL_FUNC_PTR's class argument: the class the method token resolves
        to (the runtime needs it to find an *interface* method's implementation). A cell of
        kind method-class on targets whose data come through cells; `null` elsewhere (win-x64
        code is never run)."""
        if not self.tr.target.data_cells:
            return "null"
        return self.global_(symbol + "$class", kind="method-class", token=token)

    def emit_call_sysv(self, callee, this, args, params, ret_sig, direct, external, instparam=None):
        """`emit_call` under SysV struct passing (reader/abi.py): value-type arguments as
        their eightbytes or byval, value-type results in registers or through a return
        buffer after `this`; small integers signext/zeroext."""
        tr, ee = self.tr, self.tr.ee
        ret = None if is_void(ret_sig) else ee.type_info(ret_sig)
        ret_plan = plan_return(ee, ret_sig) if ret is not None and ret.stack_kind is StackKind.VALUE else None
        entries, values = [], []
        if this is not None:
            entries.append("ptr")
            values.append(("ptr", this.op if this.ty == "ptr" else self.narrow(this, "ptr"), None))
        retbuf = None
        if ret_plan is not None and ret_plan.how == "memory":
            retbuf = self.temp(f"[{ret.size} x i8]", max(ret.align, 1))
            entries.append("ptr")
            values.append(("ptr", retbuf, None))
        if instparam is not None:    # shared code's callee: the instantiation after this and the buffer
            entries.append("ptr")
            values.append(("ptr", instparam, None))
        for sv, sig in zip(args, params):
            if ee.stack_kind(sig) is StackKind.VALUE:
                entries.append(sig)
                values.append(("vt", sv, sig))
            else:
                ty = tr._param_type(sig)
                entries.append(ty)
                values.append(("scalar", self.narrow(sv, ty), ee.type_info(sig)))
        types, plain, texts = [], [], []
        for passing, (what, value, extra) in zip(plan_params(ee, entries), values):
            if what == "ptr":
                types.append("ptr"), plain.append("ptr"), texts.append(f"ptr {value}")
            elif what == "scalar":
                attr = ext_attr(extra)
                ty = f"{passing.types[0]}{' ' + attr if attr else ''}"
                types.append(ty), plain.append(passing.types[0]), texts.append(f"{ty} {value}")
            elif passing.how == "regs":
                size = ee.type_info(extra).size
                for ty, v in zip(passing.types, self.load_eightbytes(value.op, size, passing.types)):
                    types.append(ty), plain.append(ty), texts.append(f"{ty} {v}")
            else:
                types.append(passing.param_type), plain.append("ptr")
                texts.append(f"{passing.param_type} {value.op}")
        if ret is None:
            ret_ty = ret_text = "void"
        elif ret_plan is not None:
            ret_ty = ret_text = ret_plan.llvm_return
        else:
            attr = ext_attr(ret)
            ret_ty, ret_text = ret.storage, f"{attr + ' ' if attr else ''}{ret.storage}"
        if direct:
            tr.declares[callee] = tr.target.declare(f"declare {ret_text} {callee}({', '.join(types)})")
            if external is not None:
                tr.externals[external[0]] = External(external[0], "method", external[2], call=external[1],
                                                     prototype=f"{ret_ty} ({', '.join(plain)})")
        self.block, result = tr.call(self.block, self.ctx, self.region, ret_text, callee, texts, self.offset,
                                     fnty=None if direct else f"{ret_text} ({', '.join(plain)})")
        if retbuf:
            return SV("vt", retbuf, ret_sig)
        if ret_plan is not None:
            return SV("vt", self.store_eightbytes(result, ret.size, ret_plan.types), ret_sig)
        if result is None:
            return None
        kind = _KIND_OF_STACK[ret.stack_kind]
        return SV(kind, self.widen(result, ret_ty, kind, ret.signed), ret_sig)

    def ldvirtftn(self, ins):
        obj = self.pop(ins.offset)
        self.null_check(obj.op)
        symbol = self.tr.ee.method(ins.operand).symbol
        handle = self.global_(symbol + "$handle", kind="method-handle", token=ins.operand)
        owner = self.method_class(symbol, ins.operand)
        fn = self.helper("CORINFO_HELP_VIRTUAL_FUNC_PTR", [f"ptr {obj.op}", f"ptr {owner}", f"ptr {handle}"])
        v = self.v()
        self.emit(f"{v} = ptrtoint ptr {fn} to i64")
        self.push("nint", v)

    def localloc(self, ins):
        size = self.as_i64(self.pop(ins.offset))
        p, v = self.v("localloc"), self.v()
        self.emit(f"{p} = alloca i8, i64 {size}, align 16")
        if self.tr.body.init_locals and not self.tr.target.c_library_calls:
            self.helper("CORINFO_HELP_MEMSET", [f"ptr {p}", "i32 0", f"i64 {size}"])
        elif self.tr.body.init_locals:
            self.tr.declares["llvm.memset"] = "declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)"
            self.emit(f"call void @llvm.memset.p0.i64(ptr {p}, i8 0, i64 {size}, i1 false)")
        self.emit(f"{v} = ptrtoint ptr {p} to i64")
        self.push("nint", v)

    def ldtoken(self, ins):
        """A RuntimeTypeHandle / RuntimeMethodHandle / RuntimeFieldHandle: a one-pointer struct
        holding the handle the runtime would embed (a named external symbol here)."""
        token, ee = ins.operand, self.tr.ee
        table = token >> 24
        if table in (0x01, 0x02, 0x1B):
            symbol, kind = ee.class_handle(token), "class"
        elif table == 0x04 or (table == 0x0A and _is_field_ref(self.tr.asm, token)):
            symbol, kind = "field:" + ee.field(token).symbol, "field"
        else:
            symbol, kind = ee.method_handle(token), "method-handle"
        handle = self.temp("ptr")
        value = self.global_(symbol, kind=kind, token=token)
        if self.tr.target.data_cells and kind == "class" and getattr(self.tr.externals.get(symbol), "kind", None) == "class":
            # a class cell of ldtoken's is resolved as CORINFO_TOKENKIND_Ldtoken: the runtime refuses
            # System.Void and open generic types (typeof(IComparable<>)) as any other kind of token
            from dataclasses import replace
            self.tr.externals[symbol] = replace(self.tr.externals[symbol], kind="ldtoken-class")
        if self.tr.target.data_cells:
            # code the runtime runs: CoreCLR's handle structs hold a managed object (the
            # RuntimeType, a field/method stub), which these helpers make from the raw handle;
            # with the raw handle typeof(T) crashed and an array initializer threw
            value = self.helper(_LDTOKEN_HELPERS[kind], [f"ptr {value}"])
        self.emit(f"store ptr {value}, ptr {handle}")
        self.push("vt", handle)

    def new_object(self, info, ins):
        tr = self.tr
        owner = info.owner_type
        if info.owner_is_value_type:
            size, align = tr.ee.size_and_align(owner)
            tmp = self.temp(f"[{size} x i8]", max(align, 1))
            self.memset(tmp, size)
            return SV("byref", tmp, owner)
        cls = self.global_(tr.ee.class_handle(info.owner_token), kind="class", token=info.owner_token)
        obj = self.known(self.helper("CORINFO_HELP_NEWSFAST", [f"ptr {cls}"]))
        return SV("obj", obj, owner)

    def field_address(self, ins, obj):
        f = self.tr.ee.field(ins.operand)
        if obj is None and f.is_static is False:
            raise self.tr.fail(f"{ins.op.name} of instance field {f.symbol}", ins.offset, "static-mismatch")
        if f.is_static or obj is None:
            # ldsfld/stsfld/ldsflda: a static field's address is its symbol, also when its
            # MemberRef cannot be resolved (is_static None; was an AttributeError on `obj`).
            if self.tr.target.data_cells and _is_thread_static(self.tr.ee, ins.operand):
                return self.thread_static_address(ins, f), f
            if self.tr.options.generic_context:
                owner = shared_handle(self, "field-owner", ins.operand)
                if owner is not None:     # a static of Foo<T> in shared code (reader/lookup.py)
                    return generic_static_address(self, ins.operand, owner), f
            symbol = self.tr.ee.static_field_address(ins.operand)
            if self.tr.target.data_cells:
                # code the runtime runs: the class's static constructor must have run before the
                # access (RyuJIT asks initClass and calls a helper when it cannot prove it);
                # JIT_InitClass returns at once when the class is initialised
                owner = self.global_(symbol + "$owner", kind="field-owner", token=ins.operand)
                self.helper("CORINFO_HELP_INITCLASS", [f"ptr {owner}"])
            addr = self.global_(symbol, kind="static", token=ins.operand)
            if self.tr.target.data_cells and self.tr.ee.stack_kind(f.type) is StackKind.VALUE \
                    and not _is_rva_field(self.tr.ee, ins.operand):
                # the cell holds what getFieldAddress gives: CoreCLR keeps a static of a (non-primitive)
                # value type boxed on the GC heap (CORINFO_FLG_FIELD_STATIC_IN_HEAP), the address
                # holds the box's reference and the value follows its method-table pointer
                box = self.v("box")
                self.emit(f"{box} = load ptr, ptr {addr}")
                addr = self.gep(box, OBJECT_HEADER_SIZE)
            return addr, f
        base = obj.op if obj.ty == "ptr" else self.narrow(obj, "ptr")
        if obj.kind in ("obj", "byref", "nint"):
            # An object, or a byref / pointer (a value type's `this`, a `ref` parameter): checked
            # explicitly, as for an object -- RyuJIT keeps every such access's indirection (a
            # NULLCHECK when its value is unused), while LLVM deletes an unused load and takes a
            # load from null as undefined, so no hardware fault can be relied on (a null byref
            # `this` read and popped threw nothing; tests/reader/null_checks_adversarial.il).
            self.null_check(base)
        if f.offset is not None:
            offset = str(f.offset)
        elif self.tr.target.data_cells:   # the cell holds the offset itself
            offset = self.v("offset")
            self.emit(f"{offset} = ptrtoint ptr "
                      f"{self.global_(self.tr.ee.field_offset_symbol(ins.operand), kind='field-offset', token=ins.operand)}"
                      f" to i64")
        else:
            offset = (f"ptrtoint (ptr {self.global_(self.tr.ee.field_offset_symbol(ins.operand), kind='field-offset', token=ins.operand)}"
                      f" to i64)")
        return self.gep(base, offset), f

    def thread_static_address(self, ins, f):
        """A [ThreadStatic] field's address on this thread (linux-x64), as RyuJIT 3.1 reaches it
        outside ReadyToRun: getFieldInfo gives every thread static
        CORINFO_FIELD_STATIC_SHARED_STATIC_HELPER, so the code calls
        CORINFO_HELP_GETSHARED_{GC,NONGC}THREADSTATIC_BASE(module id, class id) -- it allocates
        this thread's statics and runs the class constructor when needed -- and adds the field's
        offset (importer.cpp fgGetStaticsCCtorHelper). References and value types (kept boxed)
        are GC statics (jitinterface.cpp getSharedStaticsHelper). A data cell would hold one
        address for every thread: the three numbers are cells the installer fills from the
        runtime and checks against its getFieldInfo (runtime/install.py)."""
        from dataclasses import replace
        symbol = self.tr.ee.static_field_address(ins.operand)
        kind = self.tr.ee.stack_kind(f.type)
        boxed = kind is StackKind.VALUE
        helper = f"CORINFO_HELP_GETSHARED_{'GC' if boxed or kind is StackKind.OBJ else 'NONGC'}THREADSTATIC_BASE"
        module = self.global_(symbol + "$module", kind="statics-module", token=ins.operand)
        class_id = self.global_(symbol + "$classid", kind="statics-class-id", token=ins.operand)
        offset_cell = self.global_(symbol + "$tls", kind="thread-static", token=ins.operand)
        self.tr.externals[symbol + "$tls"] = replace(self.tr.externals[symbol + "$tls"], helper=helper, boxed=boxed)
        m, c, o = self.v("module"), self.v("classid"), self.v("offset")
        self.emit(f"{m} = ptrtoint ptr {module} to i64")
        self.emit(f"{c} = ptrtoint ptr {class_id} to i32")
        self.emit(f"{o} = ptrtoint ptr {offset_cell} to i64")
        addr = self.gep(self.helper(helper, [f"i64 {m}", f"i32 {c}"]), o)
        if boxed:   # CORINFO_FLG_FIELD_STATIC_IN_HEAP: the slot holds the box, the value follows its header
            box = self.v("box")
            self.emit(f"{box} = load ptr, ptr {addr}")
            addr = self.gep(box, OBJECT_HEADER_SIZE)
        return addr

    def ldfld(self, ins):
        stem = ins.op.name
        static = stem.startswith("lds")
        obj = None if static else self.pop(ins.offset)
        addr, f = self.field_address(ins, obj) if not static else self.field_address(ins, None)
        if stem.endswith("a"):
            # a static's address, or a field's of an object or a byref checked just now
            self.push("byref", self.known(addr) if obj is None or obj.kind != "vt" else addr)
        else:
            self.load_sig(addr, f.type)

    def stfld(self, ins):
        value = self.pop(ins.offset)
        static = ins.op.name == "stsfld"
        obj = None if static else self.pop(ins.offset)
        addr, f = self.field_address(ins, obj)
        self.store_heap(addr, value, f.type, lambda: self.global_(
            f"fieldclass:{f.symbol}", kind="field-class", token=ins.operand))

    def ldstr(self, ins):
        g = self.global_(self.tr.ee.string_literal(ins.operand), "ptr", kind="string", token=ins.operand)
        v = self.v("str")
        self.emit(f"{v} = load ptr, ptr {g}")
        self.push("obj", self.known(v))

    def ldnull(self, ins):
        self.push("obj", "null")

    def cast(self, ins):
        obj = self.pop(ins.offset)
        cls = self.global_(self.tr.ee.class_handle(ins.operand), kind="class", token=ins.operand)
        helper = "CORINFO_HELP_CHKCASTANY" if ins.op.name == "castclass" else "CORINFO_HELP_ISINSTANCEOFANY"
        self.push("obj", self.helper(helper, [f"ptr {cls}", f"ptr {obj.op}"]))

    def box(self, ins):
        sv = self.pop(ins.offset)
        sig = self.tr.ee.token_type(ins.operand)
        if self.tr.ee.stack_kind(sig) is StackKind.OBJ:
            self.stack.append(sv)   # boxing a reference type is the identity (III.4.1)
            return
        if sv.kind == "vt":
            addr = sv.op
        else:
            storage = self.tr.ee.storage_type(sig)
            addr = self.temp(storage)
            self.emit(f"store {storage} {self.narrow(sv, storage)}, ptr {addr}")
        cls = self.global_(self.tr.ee.class_handle(ins.operand), kind="class", token=ins.operand)
        self.push("obj", self.boxed(sig, cls, addr))

    def boxed(self, sig, cls: str, addr: str) -> str:
        """The object `box` makes of the value at `addr`. A Nullable<T> boxes to null or to a
        boxed T (III.4.1), which CORINFO_HELP_BOX_NULLABLE does (RyuJIT: getBoxHelper); JIT_Box
        would make a boxed Nullable, a type no object may have -- and its result may be null,
        so it is not known non-null."""
        if self.tr.ee.is_nullable(sig):
            return self.helper("CORINFO_HELP_BOX_NULLABLE", [f"ptr {cls}", f"ptr {addr}"])
        return self.known(self.helper("CORINFO_HELP_BOX", [f"ptr {cls}", f"ptr {addr}"]))

    def unbox(self, ins):
        obj = self.pop(ins.offset)
        sig = self.tr.ee.token_type(ins.operand)
        cls = self.global_(self.tr.ee.class_handle(ins.operand), kind="class", token=ins.operand)
        if ins.op.name == "unbox.any" and self.tr.ee.stack_kind(sig) is StackKind.OBJ:
            self.push("obj", self.helper("CORINFO_HELP_CHKCASTANY", [f"ptr {cls}", f"ptr {obj.op}"]))
            return
        if self.tr.ee.is_nullable(sig):
            # a Nullable<T> (III.4.32-33): null unboxes to one without a value, a boxed T to one
            # with it -- the runtime's helper fills a temporary (as RyuJIT; CORINFO_HELP_UNBOX
            # threw NullReferenceException on null: `(T)o` of an exact M<int?>)
            size, align = self.tr.ee.size_and_align(sig)
            tmp = self.temp(f"[{size} x i8]", max(align, 8))
            self.helper("CORINFO_HELP_UNBOX_NULLABLE", [f"ptr {tmp}", f"ptr {cls}", f"ptr {obj.op}"])
            if ins.op.name == "unbox":
                self.push("byref", tmp)
            else:
                self.load_sig(tmp, sig)
            return
        addr = self.known(self.helper("CORINFO_HELP_UNBOX", [f"ptr {cls}", f"ptr {obj.op}"]))
        if ins.op.name == "unbox":
            self.push("byref", addr)
        else:
            self.load_sig(addr, sig)

    # -- arrays ------------------------------------------------------------------------------------

    def newarr(self, ins):
        n = self.pop(ins.offset)
        symbol, kind = self.tr.ee.class_handle(ins.operand), "class"
        if self.tr.target.data_cells:
            # the helper takes the *array* class (the runtime resolves the token as Newarr), a
            # value distinct from the element class a cast of the same token needs: its own cell
            symbol, kind = symbol + "[]", "array-class"
        cls = self.global_(symbol, kind=kind, token=ins.operand)
        self.push("obj", self.known(self.helper("CORINFO_HELP_NEWARR_1_VC", [f"ptr {cls}", f"i64 {self.as_i64(n)}"])))

    def array_length(self, arr):
        self.null_check(arr)
        addr = self.gep(arr, ARRAY_LENGTH_OFFSET)
        n, w = self.v("len"), self.v()
        self.emit(f"{n} = load i32, ptr {addr}")
        self.emit(f"{w} = zext i32 {n} to i64")
        return w

    def array_operands(self, arr, index, offset):
        """III.4.12 ldlen, III.4.7 ldelem ...: an object reference and an int32 or native int
        index (else the IR would use an integer as a pointer, which LLVM refuses to parse)."""
        if arr.kind != "obj" or index is not None and index.kind not in ("i32", "nint"):
            got = arr.kind if index is None else f"{arr.kind}[{index.kind}]"
            raise self.tr.fail(f"array access on {got}", offset, "type-mismatch")

    def ldlen(self, ins):
        arr = self.pop(ins.offset)
        self.array_operands(arr, None, ins.offset)
        self.push("nint", self.array_length(arr.op))

    def element_address(self, arr, index, size, offset):
        self.array_operands(arr, index, offset)
        length = self.array_length(arr.op)
        idx = self.as_i64(index)
        oob = self.v("oob")
        self.emit(f"{oob} = icmp uge i64 {idx}, {length}")
        self.check(oob, "array-bounds", "bounds")
        scaled = self.v()
        self.emit(f"{scaled} = mul i64 {idx}, {size}")
        data = self.gep(arr.op, SZARRAY_DATA_OFFSET)
        return self.gep(data, scaled)

    def element_sig_of(self, ins, stem):
        if ins.op.operand is OperandKind.TYPE:
            return self.tr.ee.token_type(ins.operand), None
        return None, _ELEM[stem.rsplit(".", 1)[1]]

    def ldelem(self, ins, stem):
        index, arr = self.pop(ins.offset), self.pop(ins.offset)
        sig, elem = self.element_sig_of(ins, stem)
        size = self.tr.ee.size_and_align(sig)[0] if sig is not None else elem[3]
        if stem == "ldelema":
            self.push("byref", self.known(self.element_address(arr, index, size, ins.offset)))
            return
        addr = self.element_address(arr, index, size, ins.offset)
        if sig is not None:
            self.load_sig(addr, sig)
            return
        storage, kind, signed, _ = elem
        v = self.v()
        self.emit(f"{v} = load {storage}, ptr {addr}")
        self.push(kind, self.widen(v, storage, kind, signed))

    def stelem(self, ins, stem):
        value, index, arr = self.pop(ins.offset), self.pop(ins.offset), self.pop(ins.offset)
        sig, elem = self.element_sig_of(ins, stem)
        is_ref = (elem is not None and elem[0] == "ptr") or \
            (sig is not None and self.tr.ee.stack_kind(sig) is StackKind.OBJ)
        size = 8 if is_ref else (self.tr.ee.size_and_align(sig)[0] if sig is not None else elem[3])
        addr = self.element_address(arr, index, size, ins.offset)
        if is_ref:   # the store type check (ArrayTypeMismatchException) is the helper's
            self.helper("CORINFO_HELP_ARRADDR_ST", [f"ptr {arr.op}", f"i64 {self.as_i64(index)}", f"ptr {value.op}"])
        elif sig is not None:
            self.store_heap(addr, value, sig, lambda: self.global_(
                self.tr.ee.class_handle(ins.operand), kind="class", token=ins.operand))
        else:
            self.emit(f"store {elem[0]} {self.narrow(value, elem[0])}, ptr {addr}")

    # -- indirect access -------------------------------------------------------------------------

    def deref(self, addr) -> str:
        """An address an indirect access goes through: NullReferenceException when it is null
        (the `null-deref` check; LLVM folds it away for addresses of locals)."""
        ptr = self.narrow(addr, "ptr")
        self.null_check(ptr)
        return ptr

    def ldind(self, ins, stem):
        addr = self.pop(ins.offset)
        storage, kind, signed, _ = _ELEM[stem.rsplit(".", 1)[1]]
        v = self.v()
        self.load(v, storage, self.deref(addr))
        self.push(kind, self.widen(v, storage, kind, signed))

    def stind(self, ins, stem):
        value, addr = self.pop(ins.offset), self.pop(ins.offset)
        storage = _ELEM[stem.rsplit(".", 1)[1]][0]
        if stem == "stind.ref" and self.tr.target.write_barriers:
            self.write_barrier(self.deref(addr), value)
            return
        self.store(storage, self.narrow(value, storage), self.deref(addr))

    def ldobj(self, ins):
        addr = self.pop(ins.offset)
        self.load_sig(self.deref(addr), self.tr.ee.token_type(ins.operand))

    def stobj(self, ins):
        value, addr = self.pop(ins.offset), self.pop(ins.offset)
        self.store_heap(self.deref(addr), value, self.tr.ee.token_type(ins.operand), lambda: self.global_(
            self.tr.ee.class_handle(ins.operand), kind="class", token=ins.operand))

    def initobj(self, ins):
        addr = self.pop(ins.offset)
        sig = self.tr.ee.token_type(ins.operand)
        self.memset(self.deref(addr), self.tr.ee.size_and_align(sig)[0])

    def sizeof(self, ins):
        self.push("i32", str(self.tr.ee.size_and_align(self.tr.ee.token_type(ins.operand))[0]))

    def ldftn(self, ins):
        info = self.tr.ee.method(ins.operand)
        if self.tr.target.data_cells:   # the entry point is data here: loaded from a cell
            g = self.global_("entry:" + info.symbol, kind="method-entry", token=ins.operand)
        else:
            g = self.tr.ee.llvm_global(info.symbol)
            self.tr.declares.setdefault(g, self.tr.target.declare(f"declare void {g}()"))
            self.tr.externals.setdefault(info.symbol, External(info.symbol, "method-entry", ins.operand))
        v = self.v()
        self.emit(f"{v} = ptrtoint ptr {g} to i64")
        self.push("nint", v)

    # -- blocks of memory ------------------------------------------------------------------------

    def block_size(self, sv):
        """A cpblk/initblk size (unsigned int32, or native int) as an i64."""
        if sv.ty == "i32":
            v = self.v("size")
            self.emit(f"{v} = zext i32 {sv.op} to i64")
            return v
        if sv.ty == "i64":
            return sv.op
        raise self.tr.fail(f"a block size cannot be a {sv.kind}", self.offset, "type-mismatch")

    def null_check_addresses(self, addrs, size=None):
        """NullReferenceException when any of `addrs` is null (and `size`, if given, is not 0)."""
        conds = []
        for a in addrs:
            c = self.v("isnull")
            self.emit(f"{c} = icmp eq ptr {a}, null")
            conds.append(c)
        bad = conds[0]
        for c in conds[1:]:
            n = self.v("isnull")
            self.emit(f"{n} = or i1 {bad}, {c}")
            bad = n
        if size is not None:
            nonzero, both = self.v("nonempty"), self.v("isnull")
            self.emit(f"{nonzero} = icmp ne i64 {size}, 0")
            self.emit(f"{both} = and i1 {bad}, {nonzero}")
            bad = both
        self.check(bad, "null-deref", "nullref")

    def cpblk(self, ins):
        size, src, dst = self.pop(ins.offset), self.pop(ins.offset), self.pop(ins.offset)
        n = self.block_size(size)
        d, s = self.narrow(dst, "ptr"), self.narrow(src, "ptr")
        self.null_check_addresses([d, s], n)
        if not self.tr.target.c_library_calls:
            self.helper("CORINFO_HELP_MEMCPY", [f"ptr {d}", f"ptr {s}", f"i64 {n}"])
            return
        self.tr.declares["llvm.memcpy"] = "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)"
        self.emit(f"call void @llvm.memcpy.p0.p0.i64(ptr {d}, ptr {s}, i64 {n}, "
                  f"i1 {'true' if self.prefix_volatile else 'false'})")

    def initblk(self, ins):
        size, value, addr = self.pop(ins.offset), self.pop(ins.offset), self.pop(ins.offset)
        n = self.block_size(size)
        d = self.narrow(addr, "ptr")
        byte = self.narrow(value, "i8")
        self.null_check_addresses([d], n)
        if not self.tr.target.c_library_calls:
            wide = self.v()
            self.emit(f"{wide} = zext i8 {byte} to i32")
            self.helper("CORINFO_HELP_MEMSET", [f"ptr {d}", f"i32 {wide}", f"i64 {n}"])
            return
        self.tr.declares["llvm.memset"] = "declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)"
        self.emit(f"call void @llvm.memset.p0.i64(ptr {d}, i8 {byte}, i64 {n}, "
                  f"i1 {'true' if self.prefix_volatile else 'false'})")

    def cpobj(self, ins):
        src, dst = self.pop(ins.offset), self.pop(ins.offset)
        sig = self.tr.ee.token_type(ins.operand)
        d, s = self.narrow(dst, "ptr"), self.narrow(src, "ptr")
        self.null_check_addresses([d, s])
        if self.tr.ee.stack_kind(sig) is StackKind.VALUE:
            if self.tr.target.write_barriers and self.tr.ee.type_info(sig).gc:
                self.store_heap(d, SV("vt", s, sig), sig, lambda: self.global_(
                    self.tr.ee.class_handle(ins.operand), kind="class", token=ins.operand))
                return
            self.memcpy(d, s, self.tr.ee.size_and_align(sig)[0])
            return
        storage = self.tr.ee.storage_type(sig)   # a reference (`ptr`) or a primitive
        v = self.v()
        self.emit(f"{v} = load {storage}, ptr {s}")
        if storage == "ptr" and self.tr.target.write_barriers and self.tr.ee.stack_kind(sig) is StackKind.OBJ:
            self.write_barrier(d, SV("obj", v))
            return
        self.emit(f"store {storage} {v}, ptr {d}")

    # -- typed references ----------------------------------------------------------------------

    def typedref(self, ins):
        """Pop a TypedReference (a 16-byte value) for refanyval/refanytype."""
        sv = self.pop(ins.offset)
        if sv.kind != "vt" or sv.sig is None or self.tr.ee.size_and_align(sv.sig)[0] != TYPEDREF_SIZE:
            raise self.tr.fail(f"{ins.op.name} of a {sv.kind} that is not a typed reference", ins.offset,
                               "type-mismatch")
        return sv

    def typedref_field(self, ref, offset):
        return ref if offset == 0 else self.gep(ref, offset)

    def mkrefany(self, ins):
        ptr = self.pop(ins.offset)
        if ptr.kind not in ("byref", "nint"):
            raise self.tr.fail(f"mkrefany of a {ptr.kind} (a managed or unmanaged pointer is required)",
                               ins.offset, "type-mismatch")
        cls = self.global_(self.tr.ee.class_handle(ins.operand), kind="class", token=ins.operand)
        ref = self.temp(f"[{TYPEDREF_SIZE} x i8]")
        self.emit(f"store ptr {self.narrow(ptr, 'ptr')}, ptr {self.typedref_field(ref, TYPEDREF_VALUE_OFFSET)}")
        self.emit(f"store ptr {cls}, ptr {self.typedref_field(ref, TYPEDREF_TYPE_OFFSET)}")
        self.push("vt", ref, TYPEDREF)

    def refanyval(self, ins):
        ref = self.typedref(ins)
        cls = self.global_(self.tr.ee.class_handle(ins.operand), kind="class", token=ins.operand)
        self.push("byref", self.helper("CORINFO_HELP_GETREFANY", [f"ptr {cls}", f"ptr {ref.op}"]))

    def refanytype(self, ins):
        ref = self.typedref(ins)
        t = self.v("type")
        self.emit(f"{t} = load ptr, ptr {self.typedref_field(ref.op, TYPEDREF_TYPE_OFFSET)}")
        handle = self.temp("ptr")
        self.emit(f"store ptr {t}, ptr {handle}")
        self.push("vt", handle)     # a RuntimeTypeHandle, as ldtoken pushes one

    def arglist(self, ins):
        home = varargs_cookie_home(self.tr)
        if home is None:
            raise self.tr.fail("arglist in a method that is not vararg (CoreCLR: InvalidProgramException)",
                               ins.offset, "arglist-outside-vararg")
        if self.ctx.kind == "filter":
            raise self.tr.fail("arglist in a filter: the outlined filter cannot reach the parent's varargs "
                               "cookie", ins.offset, "arglist-in-filter")
        handle = self.temp("ptr")
        self.emit(f"store ptr {home}, ptr {handle}")
        self.push("vt", handle)     # a RuntimeArgumentHandle: the address of the cookie's home

    # -- jmp -------------------------------------------------------------------------------------

    def jmp(self, ins):
        tr = self.tr
        if self.stack:
            raise tr.fail(f"jmp with {len(self.stack)} value(s) on the stack (it must be empty)", ins.offset,
                          "jmp-stack-not-empty")
        if self.ctx.kind != "main" or self.ctx.pad is not None:
            raise tr.fail("jmp outside the main body", ins.offset, "jmp-context")
        me, target = tr.ee.compiled_method(tr.rid), tr.ee.method(ins.operand)
        if me.vararg or target.vararg:
            raise tr.fail("jmp in or to a vararg method", ins.offset, "jmp-vararg")
        if tr.target.struct_passing == "sysv":
            raise tr.fail(f"{tr.target}: jmp (a musttail call in our prototype) is not lowered for SysV struct "
                          "passing", ins.offset, "abi-unsupported")
        mine = tr._param_llvm_types(me)
        theirs = (["ptr"] if target.has_this else []) + \
            (["ptr"] if tr._returns_vt(target.return_type) else []) + [tr._param_type(p) for p in target.params]
        ret_ty = tr._ret_llvm(me)
        if target.has_this != me.has_this or mine != theirs or tr._ret_llvm(target) != ret_ty:
            raise tr.fail(f"jmp to {target.display}: its prototype {tr._ret_llvm(target)} ({', '.join(theirs)}) "
                          f"is not ours, {ret_ty} ({', '.join(mine)})", ins.offset, "jmp-signature-mismatch")
        texts = []
        for i, sig in enumerate(tr.arg_sigs):
            param = f"%p{i + tr._param_shift(i)}"
            if tr.ee.stack_kind(sig) is StackKind.VALUE:   # our copy back into the caller's buffer
                self.memcpy(param, tr.args[i], tr.ee.size_and_align(sig)[0])
                texts.append(f"ptr {param}")
            else:
                storage = tr.ee.storage_type(sig)
                v = self.v()
                self.emit(f"{v} = load {storage}, ptr {tr.args[i]}")
                texts.append(f"{storage} {v}")
        if tr._returns_vt(me.return_type):
            retbuf = 1 if me.has_this else 0
            texts.insert(retbuf, f"ptr %p{retbuf}")
        callee = tr.ee.llvm_global(target.symbol)
        tr.declares[callee] = tr.target.declare(f"declare {ret_ty} {callee}({', '.join(mine)})")
        tr.externals[target.symbol] = External(target.symbol, "method", ins.operand, call="jmp",
                                               prototype=f"{ret_ty} ({', '.join(mine)})")
        block, result = tr.call(self.block, self.ctx, self.region, ret_ty, callee, texts, ins.offset)
        line = block.lines[-1]
        call = _PLAIN_CALL.match(line)
        assert block is self.block and call, "jmp lies outside every region: tr.call made a plain call"
        lhs = call.group(1) or ""
        block.lines[-1] = f"{lhs}musttail {line[len(lhs):]}"
        block.terminate(f"ret {ret_ty} {result}" if result is not None else "ret void")

    # -- stack ---------------------------------------------------------------------------------------

    def dup(self, ins):
        top = self.pop(ins.offset)
        self.stack += [top, top]

    def pop_(self, ins):
        self.pop(ins.offset)


def _is_thread_static(ee, token: int) -> bool:
    """Whether a static field carries [System.ThreadStaticAttribute] (its FieldDef, found in
    whichever module declares it)."""
    try:
        if token >> 24 == 0x04:
            module, rid = ee._main, token & 0xFFFFFF
        else:
            names = ee._main.names
            module, rid, _, _ = ee._find_field(names.member_ref_parent(token), names.member_name(token),
                                               names.member_ref_signature(token))
    except Exception:   # noqa: BLE001 - an unresolvable field is reported where it is used
        return False
    marked = getattr(module, "_thread_statics", None)
    if marked is None:
        marked = module._thread_statics = _thread_static_fields(module)
    return rid in marked


def _thread_static_fields(module) -> frozenset[int]:
    """Field rids of `module` with a ThreadStaticAttribute: CustomAttribute rows whose parent
    is a Field (HasCustomAttribute tag 1) and whose constructor belongs to that attribute."""
    names, out = module.names, set()
    for rid in range(1, names.row_count(0x0C) + 1):
        row = names._row((0x0C << 24) | rid)
        parent = row.Parent_CodedIndex
        if parent & 0x1F != 1:
            continue
        ctor, tag = row.Type_CodedIndex >> 3, row.Type_CodedIndex & 7
        try:
            if tag == 3:        # a MemberRef
                owner = names.member_ref_parent((0x0A << 24) | ctor)
            elif tag == 2:      # a MethodDef (CoreLib's own attribute)
                owner = names.method_owner(ctor)
            else:
                continue
            if names.type_name(owner).endswith("System.ThreadStaticAttribute"):
                out.add(parent >> 5)
        except Exception:   # noqa: BLE001 - a malformed attribute row marks nothing
            continue
    return frozenset(out)


def _is_rva_field(ee, token: int) -> bool:
    """A FieldDef with an RVA (its data in the image, C#'s constant arrays): not boxed."""
    return token >> 24 == 0x04 and bool(ee._main.row(token).Flags & 0x0100)   # fdHasFieldRVA


_LDTOKEN_HELPERS = {"class": "CORINFO_HELP_TYPEHANDLE_TO_RUNTIMETYPEHANDLE",
                    "field": "CORINFO_HELP_FIELDDESC_TO_STUBRUNTIMEFIELD",
                    "method-handle": "CORINFO_HELP_METHODDESC_TO_STUBRUNTIMEMETHOD"}


def _is_field_ref(asm, token: int) -> bool:
    from ..assembly.signatures import FieldSig
    return isinstance(asm.names.member_ref_signature(token), FieldSig)


def _float_literal(value: float) -> str:
    """LLVM's exact hexadecimal double literal."""
    import struct
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(value)))[0]


_SIMPLE = {
    "nop": lambda t, i: None, "break": lambda t, i: None,
    "ldnull": BlockTranslator.ldnull, "ldstr": BlockTranslator.ldstr,
    "dup": BlockTranslator.dup, "pop": BlockTranslator.pop_,
    "add": BlockTranslator.arith, "sub": BlockTranslator.arith, "mul": BlockTranslator.arith,
    "div": BlockTranslator.arith, "div.un": BlockTranslator.arith, "rem": BlockTranslator.arith,
    "rem.un": BlockTranslator.arith, "and": BlockTranslator.arith, "or": BlockTranslator.arith,
    "xor": BlockTranslator.arith,
    **{k: BlockTranslator.arith_ovf for k in _OVF_INTRINSIC},
    "neg": BlockTranslator.unary, "not": BlockTranslator.unary,
    "shl": BlockTranslator.shift, "shr": BlockTranslator.shift, "shr.un": BlockTranslator.shift,
    "ceq": BlockTranslator.cmp_push, "cgt": BlockTranslator.cmp_push, "cgt.un": BlockTranslator.cmp_push,
    "clt": BlockTranslator.cmp_push, "clt.un": BlockTranslator.cmp_push,
    "ckfinite": BlockTranslator.ckfinite,
    "switch": BlockTranslator.switch, "ret": BlockTranslator.ret,
    "leave": BlockTranslator.leave, "endfinally": BlockTranslator.endfinally,
    "endfilter": BlockTranslator.endfilter, "throw": BlockTranslator.throw, "rethrow": BlockTranslator.rethrow,
    "call": BlockTranslator.call, "callvirt": BlockTranslator.call, "newobj": BlockTranslator.call,
    "ldfld": BlockTranslator.ldfld, "ldflda": BlockTranslator.ldfld, "ldsfld": BlockTranslator.ldfld,
    "ldsflda": BlockTranslator.ldfld, "stfld": BlockTranslator.stfld, "stsfld": BlockTranslator.stfld,
    "castclass": BlockTranslator.cast, "isinst": BlockTranslator.cast, "box": BlockTranslator.box,
    "unbox": BlockTranslator.unbox, "unbox.any": BlockTranslator.unbox,
    "newarr": BlockTranslator.newarr, "ldlen": BlockTranslator.ldlen,
    "ldobj": BlockTranslator.ldobj, "stobj": BlockTranslator.stobj, "initobj": BlockTranslator.initobj,
    "sizeof": BlockTranslator.sizeof, "ldftn": BlockTranslator.ldftn,
    "calli": BlockTranslator.calli, "ldvirtftn": BlockTranslator.ldvirtftn,
    "localloc": BlockTranslator.localloc, "ldtoken": BlockTranslator.ldtoken,
    "cpblk": BlockTranslator.cpblk, "initblk": BlockTranslator.initblk, "cpobj": BlockTranslator.cpobj,
    "mkrefany": BlockTranslator.mkrefany, "refanyval": BlockTranslator.refanyval,
    "refanytype": BlockTranslator.refanytype, "arglist": BlockTranslator.arglist, "jmp": BlockTranslator.jmp,
}

_FAMILIES = [
    ("ldc.", BlockTranslator.ldc),
    ("ldarga", BlockTranslator.local_access), ("ldloca", BlockTranslator.local_access),
    ("ldarg", BlockTranslator.local_access), ("ldloc", BlockTranslator.local_access),
    ("starg", BlockTranslator.local_access), ("stloc", BlockTranslator.local_access),
    ("conv.", BlockTranslator.conv),
    ("ldelem", BlockTranslator.ldelem), ("stelem", BlockTranslator.stelem),
    ("ldind.", BlockTranslator.ldind), ("stind.", BlockTranslator.stind),
]

# Branch opcodes are dispatched by flow, not by name.
for _stem in ("br", "brtrue", "brfalse", "beq", "bne.un", "bge", "bge.un", "bgt", "bgt.un", "ble", "ble.un",
              "blt", "blt.un"):
    _SIMPLE[_stem] = BlockTranslator.branch


def _dispatch_entry(name: str):
    """(handler, stem) for an opcode: the stem (the name without `.s`) is what a family's
    handler takes, None for a handler of its own; None when the reader does not translate it."""
    stem = name.removesuffix(".s")
    if stem in _SIMPLE:
        return _SIMPLE[stem], None
    return next(((fn, stem) for prefix, fn in _FAMILIES if stem.startswith(prefix)), None)


# `instruction`'s dispatch table, by opcode value: the name matching above, done once per
# opcode instead of once per instruction.
_DISPATCH = {value: entry for value, info in OPCODES.items() if (entry := _dispatch_entry(info.name)) is not None}


def _local_access_form(stem: str) -> tuple[str, int | None, str]:
    """(arg | loc, the index a short form implies, address | load | store) of a local_access stem."""
    which = "arg" if "arg" in stem else "loc"
    implied = int(stem.rsplit(".", 1)[1]) if stem[-1].isdigit() else None
    if stem.startswith(("ldarga", "ldloca")):
        return which, implied, "address"
    return which, implied, "load" if stem.startswith(("ldarg", "ldloc")) else "store"


_LOCAL_ACCESS = {stem: _local_access_form(stem) for fn, stem in _DISPATCH.values()
                 if fn is BlockTranslator.local_access}



def _variable_access(ins) -> tuple[str, int, str] | None:
    """(arg | loc, index, address | load | store) of a variable-access instruction, else None."""
    entry = _DISPATCH.get(ins.op.value)
    if entry is None or entry[0] is not BlockTranslator.local_access:
        return None
    which, implied, access = _LOCAL_ACCESS[entry[1]]
    return which, ins.operand if ins.operand is not None else implied, access


def _nonnull_facts(tr) -> NonNullFacts:
    """The method's NonNullFacts, made by the first block that asks."""
    facts = getattr(tr, "nonnull_facts", None)
    if facts is None:
        facts = tr.nonnull_facts = NonNullFacts(tr, _variable_access)
    return facts


def varargs_cookie_home(tr) -> str | None:
    """The home slot of the compiled method's varargs cookie, None when it is not vararg.

    The first time, this gives the parent function its cookie parameter (`ptr`, after
    `this` and the return buffer, as in jitee's `llvm_param_roles`) and stores it in an
    entry-block slot; `Translator.run` asks before any block of a method is translated,
    so a vararg method's prototype never depends on whether it executes `arglist`."""
    info = tr.ee.compiled_method(tr.rid)
    if not info.vararg:
        return None
    fn = tr.fn
    if all(name != VARARGS_COOKIE for _, name in fn.params):
        position = (1 if info.has_this else 0) + (1 if tr._returns_vt(info.return_type) else 0)
        fn.params.insert(position, ("ptr", VARARGS_COOKIE))
        fn.alloca(VARARGS_COOKIE_HOME, "ptr")
        entry = fn.entry.lines
        entry.insert(len(entry) - 1 if fn.entry.terminated else len(entry),
                     f"store ptr {VARARGS_COOKIE}, ptr {VARARGS_COOKIE_HOME}")
    return VARARGS_COOKIE_HOME


def translate_block(tr, il_block, ctx, block, stack) -> None:
    bt = BlockTranslator(tr, il_block, ctx, block, stack)
    bt.run()
    bt.facts.record_exit(ctx, il_block, bt.nonnull_slots)   # what the blocks it dominates may take
