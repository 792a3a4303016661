"""MSIL → LLVM IR with LLVM's Windows EH model (the reader proper).

The driver is a worklist over (IL block, context) pairs. A *context* is one copy of a piece
of IL in one funclet: the main body; a catch, filter-handler, finally or fault funclet (the
code of a handler as run by the exception dispatch, under its pad); a normal-path copy of a
finally (run by `leave`, in the context of its try); or an outlined filter function. The
same IL block may be translated in several contexts (a block of a finally runs both on the
normal path and as a cleanup funclet), and only reachable pairs are translated.

EH shape (DESIGN.md decisions 2–6):
* each try with catch / filter handlers gets, per context, one `catchswitch` whose
  handlers are `catchpad within %cs [i32 <class token>]` (a filter handler's catchpad also
  names its outlined filter function); leaving a catch is `catchret`, chained when a
  `leave` exits nested handlers;
* a try with a finally gets a `cleanuppad within <parent> []` (a fault: `[i32 1]`) that
  runs the handler and ends in `cleanupret` to the next enclosing dispatch or the caller;
  the normal path runs a *normal copy* of the finally, shared by all leaves that cross it
  from one context, and an i32 *continuation selector* per such copy picks where its
  `endfinally` goes (one switch case per distinct continuation; nested finallys chain).
  `Options.clone_finally` instead gives every leave its own copy (no selector);
* a filter's filter part becomes its own function `i32 (ptr establisher, ptr exception)`,
  reaching the parent's locals through `llvm.localescape` / `llvm.localrecover`; the frame
  pointer it recovers from the establisher frame uses two constants only known once the
  parent is compiled, emitted as external symbols for the backend to resolve;
* every call in a funclet carries `"funclet"(token %pad)`; a call under a try is an invoke.

Identities (DESIGN decision 8): zero-byte inline-asm comments the backend finds again in
LLVM's assembly text, whatever its block layout and optimisation level. Every call gets a
call-site marker `"# llilc.callsite N"` right before it (`Translator.call`); every
catchpad and cleanuppad is followed at once, with `Options.pad_markers`, by a pad marker
`"# llilc.pad N"` (`Translator.pad_marker`), N counting the pads of the method from 0 in emission order
(each copy of a handler, `clone_finally` copies included, has its own pad, so its own N).
The pad marker is the identity of a funclet that holds no call (an empty `catch {}`, a
finally that only stores locals). Like the call-site marker it carries no funclet bundle:
WinEHPrepare and the lint exempt inline asm. Its cost (measured): it is an instruction of
the funclet, so at O2 LLVM no longer deletes a cleanup whose code became empty (a finally
that only stores dead locals: SimplifyCFG's empty-cleanup removal), it keeps an empty
funclet (prolog, marker, epilog) instead -- or, where that cleanup ends in a cleanupret to
a next one that only it reaches, merges the two into one funclet holding both markers
(`backend.image` takes that funclet for one of them, the other has no code).
So pad markers are off by default: without them the code is what LLVM makes of the method
(empty cleanups deleted, as RyuJIT's fgRemoveEmptyFinally does too), and the final image
identifies call-free funclets by the rest of the evidence -- unambiguously for every EH
method of the corpus at O0 and O2 (`FinalImage.ambiguous` says when it is not).

Stack values (`reader.stack`) cross block boundaries through per-depth spill slots (allocas),
so no PHI ever joins values from different funclets; LLVM's mem2reg/SROA clean up at O2. A join where
one predecessor leaves a native int and another a byref (`fixed` code from mcs and csc) is a
byref, as CoreCLR's importer makes it (`_merge_shapes`); a native int and a byref at one depth
share one slot, so a predecessor's store does not depend on what the join decides later.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ..assembly.body import ClauseKind
from ..assembly.loader import Assembly
from ..errors import ReaderError
from ..il.method import ILMethod
from ..il.regions import Region, RegionKind
from ..target import DEFAULT_TARGET, Target
from .abi import eightbytes, plan_params, plan_return
from .externals import External
from .helpers import helper_declarations
from .ir import Block, Function, quote_global
from .sidetable import CALLSITE_MARKER, PAD_MARKER, CallEntry, PadEntry, ReaderTable  # noqa: F401 -- markers re-exported
from .jitee import JitEE
from .opcodes import INLINE_FILL_LIMIT, translate_block, varargs_cookie_home
from .stack import _LLVM_OF_KIND, _SLOT_OF_KIND, SV, _merge_shapes, _Rejoin
from .synchronized import enter, monitor
from .types import StackKind, ext_attr
from .typesys import is_void

TRIPLE = "x86_64-pc-windows-msvc"
DATALAYOUT = "e-m:w-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
PERSONALITY = "@ProcessCLRException"
FILTER_CATCHPAD_MARKER = 0  # arg 0 of a filter handler's catchpad; arg 1 names its filter function

# llvm.localescape index of the generic context's slot (Options.generic_context): the first,
# so LLVM's `$frame_escape_0` symbol gives its frame offset (runtime/install.py reads it)
GENERIC_CONTEXT_ESCAPE = 0


@dataclass(frozen=True)
class Options:
    clone_finally: bool = False   # one normal-path finally copy per leave instead of selectors
    pad_markers: bool = False     # a zero-byte identity marker in every pad (see the module docstring)
    target: Target = DEFAULT_TARGET   # whose code: win-x64 (default) or linux-x64 (llilc_eh.target)
    # shared generic code (linux-x64, in the runtime): "md" / "mt" -- the method receives CoreCLR's
    # hidden instantiation argument (a MethodDesc* / MethodTable*) after `this` and the return
    # buffer; "this" -- an instance method of a generic class, whose `this` says it. The context
    # is kept in the escaped slot GENERIC_CONTEXT_ESCAPE, which the GC info reports, and runtime
    # lookups start from it (reader/lookup.py). True means "md".
    generic_context: bool | str = False


@dataclass(frozen=True)
class ReaderResult:
    """The module text and what a test or a later stage asks about its EH structure."""

    module: str
    parent: str                     # the parent function's LLVM name
    filters: tuple[str, ...]        # outlined filter functions
    catchswitches: int
    catchpads: int
    cleanuppads: int
    selector_cases: dict[str, int]  # normal-path finally copy -> number of switch cases
    helper_calls: dict[str, int]    # CORINFO_HELP_* -> call sites
    externals: dict[str, External] = field(default_factory=dict)   # every external symbol, what it is
    table: ReaderTable | None = None   # its pads and calls, for the lint and the funclet model (sidetable.py)


# -- contexts --------------------------------------------------------------------------------

@dataclass(eq=False)
class Context:
    """One copy of IL code in one funclet (see the module docstring)."""

    tag: str                      # unique, for block labels
    kind: str                     # main | catch | cleanup | finally-normal | filter
    base: Region                  # the region this copy's code lies in
    pad: str | None               # the funclet pad token (None: main body or normal copy in it)
    fn: Function
    outer: Context | None = None
    anchor: Region | None = None  # where exceptions escaping `base` continue, in `outer`
    handler: Region | None = None  # for catch/cleanup: the handler region
    selector: str | None = None   # finally-normal: its continuation slot
    continuations: list[str] = field(default_factory=list)  # finally-normal: labels, by case
    switch_blocks: list[Block] = field(default_factory=list)  # endfinally sites to fill


class Translator:
    def __init__(self, asm: Assembly, m: ILMethod, ee: JitEE | None = None, options: Options = Options()):
        self.asm, self.m, self.options = asm, m, options
        self.target = options.target
        self.externals: dict[str, External] = {}
        self.ee = ee or JitEE(asm)
        self.namer = _comment_safe(asm.names.token)
        self.body = m.body
        self.rid = m.body.token & 0xFFFFFF
        self.tree = m.regions
        self.where = f"0x{m.body.token:08X} {m.body.name}"
        self.block_at = {b.start: b for b in m.blocks}
        self.declares: dict[str, str] = {}
        self.globals: dict[str, str] = {}
        self.helper_calls: dict[str, int] = {}
        self.callsite_ids: dict[str, int] = {}   # per function: the next call-site marker number
        self.pad_ids = 0                          # the next pad marker number (per method)
        self.table_pads: list[PadEntry] = []      # the side table (reader/sidetable.py), as emitted
        self.table_calls: list[CallEntry] = []
        self.counts = {"catchswitch": 0, "catchpad": 0, "cleanuppad": 0}
        self.filters: list[Function] = []
        self.parent_name = quote_global(_mangle(m.body.name, m.body.token))
        self.contexts: dict[tuple, Context] = {}
        self.translated: dict[tuple, Block] = {}
        self.entry_shapes: dict[tuple, tuple] = {}
        self.join_hints: dict[tuple, tuple] = {}    # (offset, context tag) -> a join retyped by an earlier attempt
        self.worklist: list[tuple[int, Context]] = []
        self.dispatch_blocks: dict[tuple, Block] = {}
        self.normal_copies: dict[tuple, Context] = {}
        self.escaped: list[str] = []      # allocas the parent escapes for filters (index = position)
        self.escape_index: dict[str, int] = {}
        self.spill_slots: dict[tuple, str] = {}
        self.throw_blocks: dict[tuple, Block] = {}   # (context, region, helper) -> its throw block (`check`)

    # -- errors ----------------------------------------------------------------------------

    def fail(self, reason: str, offset: int | None, kind: str) -> ReaderError:
        return ReaderError(reason, method=self.where, offset=offset, kind=kind)

    # -- driver ----------------------------------------------------------------------------

    def run(self) -> ReaderResult:
        if self.m.errors:
            raise self.m.errors[0]
        self._check_supported()
        self.arg_sigs = self.ee.arg_types(self.rid)
        self.local_sigs = self.ee.local_types(self.body)
        info = self.ee.compiled_method(self.rid)
        self.ret_sig = info.return_type
        self._check_abi(info)
        sysv = self.target.struct_passing == "sysv"
        if self.options.generic_context and not sysv:
            raise self.fail(f"{self.target}: shared generic code (a hidden instantiation argument) is "
                            "generated for linux-x64 only", None, "abi-unsupported")
        if sysv:
            params, incoming = self._sysv_params(info)
        else:
            params = [(t, f"%p{i}") for i, t in enumerate(self._param_llvm_types(info))]
        fn = Function(self.parent_name, self.target.cc + self._ret_llvm(info), params,
                      attrs=self.target.define_attributes, personality=PERSONALITY)
        self.fn = fn
        # Every ldarg/ldloc/starg/stloc asks for its variable's TypeInfo: look each up once.
        self.arg_infos = [self.ee.type_info(s) for s in self.arg_sigs]
        self.args = [fn.alloca(f"%arg{i}", info.storage) for i, info in enumerate(self.arg_infos)]
        self.local_infos = [self.ee.type_info(s) for s in self.local_sigs]
        self.locals = [fn.alloca(f"%loc{i}", info.storage) for i, info in enumerate(self.local_infos)]
        if self.options.generic_context:
            # escaped so that it stays in one frame slot for the whole method: the runtime reads
            # it (GC info GenericsInstContextStackSlot) to resolve a catch of a generic type
            ctx_slot = fn.alloca("%generic.ctx", "ptr")
            # an instance method of a generic class finds its instantiation in `this` (kept here,
            # so it stays alive and reported); the others receive it (reader/lookup.py)
            fn.entry.emit(f"store ptr {'%a0' if self.options.generic_context == 'this' else '%instparam'}, "
                          f"ptr {ctx_slot}")
            self.escape_index[ctx_slot] = GENERIC_CONTEXT_ESCAPE
            self.escaped.append(ctx_slot)
        for i, info in enumerate(self.arg_infos):
            if sysv:
                self._sysv_copy_in(fn, i, info, incoming[i])
                continue
            param = f"%p{i + self._param_shift(i)}"
            if info.stack_kind is StackKind.VALUE:   # passed as a pointer to a copy: copy it in
                self.declares["llvm.memcpy"] = "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)"
                fn.entry.emit(f"call void @llvm.memcpy.p0.p0.i64(ptr {self.args[i]}, ptr {param}, "
                              f"i64 {info.size}, i1 false)")
            else:
                fn.entry.emit(f"store {info.storage} {param}, ptr {self.args[i]}")
        if self.body.init_locals:   # `.locals init`: every local starts zeroed (ECMA-335 II.24.4.4)
            for slot, info in zip(self.locals, self.local_infos):
                if info.stack_kind is StackKind.VALUE and not self.target.c_library_calls:
                    # (an aggregate store of zeroinitializer becomes a memset libcall at O2)
                    self.entry_fill(slot, None, info.size)
                    continue
                fn.entry.emit(f"store {info.storage} zeroinitializer, ptr {slot}")
        varargs_cookie_home(self)   # a vararg method's cookie parameter, whether or not it uses arglist
        main = Context("m", "main", self.tree.root, None, fn)
        self.main = main
        self.sync = monitor(self)        # a synchronized method's lock (reader/synchronized.py)
        self._enqueue(0, main, ())
        entry = enter(self, self.sync, main) if self.sync is not None else fn.entry
        entry.terminate(f"br label %{self._label(0, main)}")
        self._drain()
        self._finish_selectors()
        if self.filters or self.options.generic_context:
            self._emit_localescape()
        return self._module()

    sync = None     # the Monitor of a synchronized method (run() sets it)

    def _check_supported(self) -> None:
        for r in self.tree.regions:
            if r.kind is RegionKind.TRY and len(r.handlers) > 1:
                kinds = {self.tree.regions[h].kind for h in r.handlers}
                if kinds & {RegionKind.FINALLY, RegionKind.FAULT}:
                    raise self.fail("a try with both a finally/fault and other handlers (mutual protection "
                                    "mixing cleanup and catch) is not supported", r.start, "mixed-handlers-on-try")
            if r.kind is RegionKind.TRY:
                h = self.tree.enclosing_handler(r)
                if h is not None and h.kind is RegionKind.FILTER:
                    raise self.fail("a try inside a filter part is not supported (filters are outlined "
                                    "functions without EH)", r.start, "try-in-filter")

    def _enqueue(self, offset: int, ctx: Context, shape: tuple) -> str:
        key = (offset, id(ctx))
        old = self.entry_shapes.get(key)
        if old is None:
            old = self.join_hints.get((offset, ctx.tag))
        if old is not None and old != shape:
            merged = _merge_shapes(old, shape)
            if merged is None:
                raise self.fail(f"stack at IL_{offset:04x} differs between predecessors: "
                                f"{old} vs {shape}", offset, "stack-mismatch")
            if merged != old and key in self.translated:   # translated with a native int: again
                raise _Rejoin((offset, ctx.tag), merged)
            shape = merged
        if key not in self.entry_shapes:
            self.worklist.append((offset, ctx))
        self.entry_shapes[key] = shape
        return self._label(offset, ctx)

    def _label(self, offset: int, ctx: Context) -> str:
        return f"IL_{offset:04x}.{ctx.tag}" if ctx.tag != "m" else f"IL_{offset:04x}"

    def _drain(self) -> None:
        while self.worklist:
            offset, ctx = self.worklist.pop(0)
            key = (offset, id(ctx))
            if key in self.translated:
                continue
            block = ctx.fn.new_block(self._label(offset, ctx))
            self.translated[key] = block
            shape = self.entry_shapes[key]
            stack = [SV(k, self._spill_load(block, ctx, depth, k, sig), sig) for depth, (k, sig) in enumerate(shape)]
            translate_block(self, self.block_at[offset], ctx, block, stack)

    # -- spill slots -----------------------------------------------------------------------

    def _spill_slot(self, ctx: Context, depth: int, kind: str) -> str:
        fn = ctx.fn
        kind = _SLOT_OF_KIND.get(kind, kind)
        key = (id(fn), depth, kind)
        if key not in self.spill_slots:
            self.spill_slots[key] = fn.alloca(f"%stk{depth}.{kind}", _LLVM_OF_KIND[kind])
        return self.spill_slots[key]

    def _spill_load(self, block: Block, ctx: Context, depth: int, kind: str, sig) -> str:
        slot = self._spill_slot(ctx, depth, kind)
        v = ctx.fn.value()
        block.emit(f"{v} = load {_LLVM_OF_KIND[kind]}, ptr {slot}")
        return v

    def _spill_stack(self, block: Block, ctx: Context, stack: list[SV]) -> tuple:
        for depth, sv in enumerate(stack):
            block.emit(f"store {sv.ty} {sv.op}, ptr {self._spill_slot(ctx, depth, sv.kind)}")
        # Joins compare stack kinds; only a value type's identity (its size) matters beyond that.
        return tuple((sv.kind, sv.sig if sv.kind == "vt" else None) for sv in stack)

    # -- EH structure ----------------------------------------------------------------------

    def unwind_label(self, region: Region, ctx: Context) -> str | None:
        """Where an exception raised in `region` (as copied in `ctx`) goes: the dispatch of the
        innermost try between `region` and the context's base, else the context's escape."""
        r: Region | None = region
        while r is not None and r is not ctx.base:
            if r.kind is RegionKind.TRY:
                return self.dispatch(r, ctx)
            r = self.tree.regions[r.parent] if r.parent is not None else None
        if ctx.outer is None:
            return None
        return self.unwind_label(ctx.anchor, ctx.outer)

    def _parent_token(self, ctx: Context) -> str:
        return ctx.pad if ctx.pad is not None else "none"

    def dispatch(self, t: Region, ctx: Context) -> str:
        key = (t.index, id(ctx))
        if key in self.dispatch_blocks:
            return self.dispatch_blocks[key].label
        fn = ctx.fn
        parent_region = self.tree.regions[t.parent]
        unwind = self.unwind_label(parent_region, ctx)
        unwind_text = f"label %{unwind}" if unwind else "to caller"
        handlers = [self.tree.regions[h] for h in t.handlers]
        suffix = f".{ctx.tag}" if ctx.tag != "m" else ""
        if handlers[0].kind.is_cleanup:
            h = handlers[0]
            block = fn.new_block(f"{h.kind.value}{h.clauses[0]}{suffix}", comment=f"IL clause #{h.clauses[0]}")
            self.dispatch_blocks[key] = block
            pad = fn.value("cp")
            args = "[i32 1]" if h.kind is RegionKind.FAULT else "[]"
            block.emit(f"{pad} = cleanuppad within {self._parent_token(ctx)} {args}")
            self.table_pads.append(PadEntry(pad, f"%{block.label}", h.kind.value, h.clauses[0],
                                            self.pad_marker(block)))
            self.counts["cleanuppad"] += 1
            sub = self._context(("cleanup", h.index, id(ctx)), "cleanup", h, pad, fn, ctx, parent_region, h)
            block.terminate(f"br label %{self._enqueue(h.start, sub, ())}")
            return block.label
        block = fn.new_block(f"dispatch{t.index}{suffix}", comment=f"try IL_{t.start:04x}..IL_{t.end:04x}")
        self.dispatch_blocks[key] = block
        cs = fn.value("cs")
        pads = []
        for h in handlers:
            clause = self.tree.clauses[h.clauses[0]]
            pad_block = fn.new_block(f"{h.kind.value}{clause.index}{suffix}", comment=f"IL clause #{clause.index}")
            pad = fn.value("cp")
            if clause.kind is ClauseKind.CATCH:
                args = f"[i32 {_i32(clause.class_token)}]"
            else:
                filter_fn = self._outline_filter(clause, h)
                args = f"[i32 {FILTER_CATCHPAD_MARKER}, ptr {filter_fn}]"
            pad_block.emit(f"{pad} = catchpad within {cs} {args}")
            self.table_pads.append(PadEntry(pad, f"%{pad_block.label}", h.kind.value, clause.index,
                                            self.pad_marker(pad_block)))
            self.counts["catchpad"] += 1
            ex = fn.value("ex")
            pad_block.emit(f"{ex} = call ptr @llvm.eh.exceptionpointer.p0(token {pad})")
            self.declares["llvm.eh.exceptionpointer"] = "declare ptr @llvm.eh.exceptionpointer.p0(token)"
            sub = self._context(("catch", h.index, id(ctx)), "catch", h, pad, fn, ctx, parent_region, h)
            shape = self._spill_stack(pad_block, sub, [SV("obj", ex)])
            pad_block.terminate(f"br label %{self._enqueue(h.start, sub, shape)}")
            pads.append(pad_block.label)
        labels = ", ".join(f"label %{p}" for p in pads)
        block.terminate(f"{cs} = catchswitch within {self._parent_token(ctx)} [{labels}] unwind {unwind_text}")
        self.counts["catchswitch"] += 1
        return block.label

    def pad_marker(self, block: Block) -> int:
        """Emit the pad marker `call void asm sideeffect "# llilc.pad N", ""()` right after the
        pad that opens `block` (the first thing its funclet does) and return N: the funclet's
        identity in the machine code (`backend.recover`'s `CodeFunction.pads`). No funclet
        bundle, as for the call-site marker: inline asm is exempt (WinEHPrepare, the lint)."""
        n = self.pad_ids
        self.pad_ids += 1
        if not self.options.pad_markers:
            return n
        block.emit(f'call void asm sideeffect "# {PAD_MARKER} {n}", ""()')
        return n

    def _context(self, key, kind, base, pad, fn, outer, anchor, handler=None) -> Context:
        if key not in self.contexts:
            self.contexts[key] = Context(f"c{len(self.contexts) + 1}", kind, base, pad, fn, outer, anchor, handler)
        return self.contexts[key]

    # -- leave -----------------------------------------------------------------------------

    def leave(self, block: Block, ctx: Context, src: Region, target: int, offset: int) -> None:
        """Exit the regions between `src` and `target`, running finallys and catchrets."""
        dst = self.tree.innermost(target)
        src_path, dst_path = self.tree.path(src), self.tree.path(dst)
        n = 0
        while n < min(len(src_path), len(dst_path)) and src_path[n] is dst_path[n]:
            n += 1
        exited = list(reversed(src_path[n:]))
        self._leave_steps(block, ctx, exited, target, offset)

    def _leave_steps(self, block: Block, ctx: Context, exited: list[Region], target: int, offset: int) -> None:
        fn = ctx.fn
        for i, r in enumerate(exited):
            if r.kind is RegionKind.TRY:
                h = self.tree.regions[r.handlers[0]]
                if h.kind is RegionKind.FINALLY:
                    cont = fn.new_block(f"leave{offset:04x}.after{h.clauses[0]}")
                    self._run_finally(block, ctx, r, h, cont.label)
                    self._leave_steps(cont, ctx, exited[i + 1:], target, offset)
                    return
            elif r.kind.is_catchlike:
                if ctx.handler is not r:
                    raise self.fail(f"leave exits {r.label} outside its funclet", offset, "leave-context")
                cont = ctx.outer.fn.new_block(f"leave{offset:04x}.from{r.clauses[0]}")
                block.terminate(f"catchret from {ctx.pad} to label %{cont.label}")
                self._leave_steps(cont, ctx.outer, exited[i + 1:], target, offset)
                return
            elif r is ctx.base and ctx.kind == "finally-normal":
                raise self.fail("leave out of a finally", offset, "leave-context")
        block.terminate(f"br label %{self._enqueue(target, ctx, ())}")

    def _run_finally(self, block: Block, ctx: Context, t: Region, h: Region, cont: str) -> None:
        """Run finally `h` (of try `t`) on the normal path from `ctx`, then go to `cont`."""
        parent_region = self.tree.regions[t.parent]
        if self.options.clone_finally:
            key = ("finally-normal", h.index, id(ctx), cont)
        else:
            key = ("finally-normal", h.index, id(ctx))
        new = key not in self.contexts
        copy = self._context(key, "finally-normal", h, ctx.pad, ctx.fn, ctx, parent_region, h)
        if new and not self.options.clone_finally:
            copy.selector = ctx.fn.alloca(f"%sel{h.clauses[0]}.{copy.tag}", "i32", 4)
        if self.options.clone_finally:
            copy.continuations = [cont]
        else:
            if cont not in copy.continuations:
                copy.continuations.append(cont)
            block.emit(f"store i32 {copy.continuations.index(cont)}, ptr {copy.selector}")
        block.terminate(f"br label %{self._enqueue(h.start, copy, ())}")

    def _endfinally(self, block: Block, ctx: Context, offset: int) -> None:
        if ctx.kind == "cleanup":
            unwind = self.unwind_label(ctx.anchor, ctx.outer)
            block.terminate(f"cleanupret from {ctx.pad} unwind " + (f"label %{unwind}" if unwind else "to caller"))
        elif ctx.kind == "finally-normal":
            if self.options.clone_finally:
                block.terminate(f"br label %{ctx.continuations[0]}")
            else:
                ctx.switch_blocks.append(block)   # filled once every continuation is known
        else:
            raise self.fail("endfinally outside a finally copy", offset, "endfinally-context")

    def _finish_selectors(self) -> None:
        self.selector_cases = {}
        for ctx in self.contexts.values():
            if ctx.kind != "finally-normal" or self.options.clone_finally:
                continue
            self.selector_cases[f"{ctx.handler.label} in {ctx.outer.tag}"] = len(ctx.continuations)
            for block in ctx.switch_blocks:
                v = ctx.fn.value("sel")
                block.emit(f"{v} = load i32, ptr {ctx.selector}")
                cases = " ".join(f"i32 {i}, label %{c}" for i, c in enumerate(ctx.continuations[1:], start=1))
                block.terminate(f"switch i32 {v}, label %{ctx.continuations[0]} [{cases}]")

    # -- filters ---------------------------------------------------------------------------

    def _outline_filter(self, clause, handler: Region) -> str:
        name = quote_global(_mangle(self.body.name, self.body.token) + f"$filter{clause.index}")
        fregion = self.tree.regions[handler.filter_region]
        if any(f.name == name for f in self.filters):
            return name
        # CoreCLR x64 calls every funclet with the establisher frame in RCX and the exception
        # object in RDX (clr-abi.md), filters included: establisher first.
        fn = Function(name, self.target.cc + "i32", [("ptr", "%establisher"), ("ptr", "%exception")],
                      attrs=self.target.define_attributes)
        self.filters.append(fn)
        # Parent frame pointer: PSPSym at [establisher + psp slot], plus the SET_FPREG offset;
        # both constants exist only after the parent is compiled (resolved by the backend).
        base = _mangle(self.body.name, self.body.token)
        psp_slot = self._external_constant(f"{base}$psp_slot_offset")
        fp_off = self._external_constant(f"{base}$fp_offset")
        e = fn.entry
        e.emit(f"%psp.addr = getelementptr i8, ptr %establisher, i64 ptrtoint (ptr {psp_slot} to i64)")
        e.emit("%psp = load ptr, ptr %psp.addr")
        e.emit(f"%fp = getelementptr i8, ptr %psp, i64 ptrtoint (ptr {fp_off} to i64)")
        ctx = Context(f"f{clause.index}", "filter", fregion, None, fn, handler=handler)
        ctx.recovered = {}
        self.contexts[("filter", clause.index)] = ctx
        shape = self._spill_stack(e, ctx, [SV("obj", "%exception")])
        e.terminate(f"br label %{self._enqueue(fregion.start, ctx, shape)}")
        return name

    def _external_constant(self, name: str) -> str:
        g = quote_global(name)
        self.globals[g] = f"{g} = external global i8"
        self.externals[name] = External(name, "frame-constant")
        return g

    def slot(self, ctx: Context, block: Block, which: str, index: int) -> str:
        """The address of argument or local `index` as seen from `ctx` (filters recover it)."""
        own = (self.args if which == "arg" else self.locals)[index]
        if ctx.kind != "filter":
            return own
        if own not in self.escape_index:
            self.escape_index[own] = len(self.escaped)
            self.escaped.append(own)
        if own not in ctx.recovered:
            v = f"%rec.{own[1:]}"
            ctx.fn.entry.lines.insert(-1 if ctx.fn.entry.terminated else len(ctx.fn.entry.lines),
                                      f"{v} = call ptr @llvm.localrecover(ptr {self.parent_name}, ptr %fp, "
                                      f"i32 {self.escape_index[own]})")
            ctx.recovered[own] = v
            self.declares["llvm.localrecover"] = "declare ptr @llvm.localrecover(ptr, ptr, i32)"
        return ctx.recovered[own]

    def _emit_localescape(self) -> None:
        if not self.escaped:
            return
        self.declares["llvm.localescape"] = "declare void @llvm.localescape(...)"
        args = ", ".join(f"ptr {a}" for a in self.escaped)
        self.fn.entry.lines.insert(0, f"call void (...) @llvm.localescape({args})")

    # -- calls -----------------------------------------------------------------------------

    def call(self, block: Block, ctx: Context, region: Region, ret: str, callee: str, args: list[str],
             offset: int, noreturn: bool = False, fnty: str | None = None) -> tuple[Block, str | None]:
        """A call at `offset`: an invoke if a dispatch protects it, with the funclet bundle in a
        funclet. Returns the block to continue in and the result value.

        Right before it goes a zero-byte call-site marker, `call void asm sideeffect
        "# llilc.callsite N", ""()`, N counting the calls of the function from 0 in creation
        order: the identity by which the backend finds this call in the machine code at any
        optimisation level (DESIGN decision 8). Inline asm needs no funclet bundle (the lint
        and WinEHPrepare exempt it) and is no call to the EH tables."""
        n = self.callsite_ids.get(ctx.fn.name, 0)
        self.callsite_ids[ctx.fn.name] = n + 1
        block.emit(f'call void asm sideeffect "# {CALLSITE_MARKER} {n}", ""()')
        bundle = f" [ \"funclet\"(token {ctx.pad}) ]" if ctx.pad is not None else ""
        unwind = self.unwind_label(region, ctx) if ctx.kind != "filter" else None
        il_offset = offset if block is not ctx.fn.entry else None   # the entry block copies parameters in
        self.table_calls.append(CallEntry(ctx.fn.name, n, f"%{block.label}", il_offset, callee,
                                          f"%{unwind}" if unwind else None, ctx.pad))
        result = ctx.fn.value() if ret != "void" else None
        lhs = f"{result} = " if result else ""
        argtext = ", ".join(args)
        callee_ty = fnty or ret
        cc = self.target.cc
        if unwind is None:
            block.emit(f"{lhs}call {cc}{callee_ty} {callee}({argtext}){bundle}")
            if noreturn:
                block.terminate("unreachable")
                return block, result
            return block, result
        if noreturn:   # its normal destination is unreachable, and nothing follows it
            cont = ctx.fn.new_block("unreachable" + (f".{ctx.tag}" if ctx.tag != "m" else ""))
            cont.terminate("unreachable")
        else:
            cont = ctx.fn.new_block(f"IL_{offset:04x}.cont" + (f".{ctx.tag}" if ctx.tag != "m" else ""))
        block.terminate(f"{lhs}invoke {cc}{callee_ty} {callee}({argtext}){bundle} to label %{cont.label} "
                        f"unwind label %{unwind}")
        return cont, result

    def helper(self, block: Block, ctx: Context, region: Region, name: str, args: list[str], offset: int):
        decl = helper_declarations()[name]
        self.declares[name] = self.target.declare(decl.declaration)
        self.externals[name] = External(name, "helper", helper=name, prototype=decl.prototype)
        self.helper_calls[name] = self.helper_calls.get(name, 0) + 1
        return self.call(block, ctx, region, decl.ret, f"@{name}", args, offset, noreturn=decl.noreturn)

    def check(self, block: Block, ctx: Context, region: Region, cond: str, helper_name: str, offset: int,
              what: str) -> Block:
        """Branch to a cold block calling a noreturn throw helper when `cond` (i1) holds.

        One such block per context, region and helper, shared by every check there, as RyuJIT
        makes one throw-helper block per kind and EH region (flowgraph.cpp, fgAddCodeRef): the
        exception is the same from any of them -- the helper takes no argument, the region
        decides the dispatch -- and the reader writes one call (and one call-site marker, which
        would keep LLVM from merging identical blocks) instead of one per check. Its call site
        carries the IL offset of the first check (the same innermost region as the others)."""
        suffix = f".{ctx.tag}" if ctx.tag != "m" else ""
        key = (ctx.tag, region.index, helper_name)
        cold = self.throw_blocks.get(key)
        if cold is None:
            cold = self.throw_blocks[key] = ctx.fn.new_block(f"IL_{offset:04x}.{what}{suffix}",
                                                             comment=f"throws via {helper_name}")
            end, _ = self.helper(cold, ctx, region, helper_name, [], offset)
            if not end.terminated:
                end.terminate("unreachable")
        ok = ctx.fn.new_block(f"IL_{offset:04x}.ok{suffix}")
        block.terminate(f"br i1 {cond}, label %{cold.label}, label %{ok.label}, !prof !0")
        return ok

    # -- module ----------------------------------------------------------------------------

    def _module(self) -> ReaderResult:
        where = self.where.replace("\n", " ").replace("\r", " ")   # a comment line, whatever the name holds
        parts = [f"; llilc-eh reader: {where}",
                 f'target datalayout = "{DATALAYOUT}"', f'target triple = "{TRIPLE}"', ""]
        parts.extend(sorted(self.globals.values()))
        parts.append("")
        parts.append(self.fn.text())
        for f in self.filters:
            parts.append("")
            parts.append(f.text())
        parts.append("")
        parts.append("declare i32 @ProcessCLRException(...)")
        parts.extend(self.declares[k] for k in sorted(self.declares))
        parts.append('!0 = !{!"branch_weights", i32 1, i32 1048575}')
        return ReaderResult("\n".join(parts) + "\n", self.parent_name, tuple(f.name for f in self.filters),
                            self.counts["catchswitch"], self.counts["catchpad"], self.counts["cleanuppad"],
                            dict(self.selector_cases), dict(sorted(self.helper_calls.items())),
                            dict(sorted(self.externals.items())),
                            ReaderTable(self.parent_name, tuple(self.table_pads), tuple(self.table_calls)))

    # -- the target's ABI --------------------------------------------------------------------

    def _check_abi(self, info) -> None:
        """Refuse (`abi-unsupported`) a method whose own signature the target's convention
        cannot express: under SysV struct passing (linux-x64) a vararg method, or a small
        value type parameter or result `abi.eightbytes` cannot classify."""
        if self.target.struct_passing != "sysv":
            return
        if info.vararg:
            raise self.fail(f"{self.target}: a vararg method (CoreCLR on Linux has no vararg convention)",
                            None, "abi-unsupported")
        for i, sig in enumerate(self.arg_sigs):
            self._check_classifiable(sig, f"parameter {i}", None)
        if self._returns_vt(info.return_type):
            self._check_classifiable(info.return_type, "the return type", None)

    def check_call_abi(self, params, ret_sig, vararg: bool, offset: int, what: str) -> None:
        """`_check_abi` for a call site at `offset` (`what`: the callee, for the message)."""
        if self.target.struct_passing != "sysv":
            return
        if vararg:
            raise self.fail(f"{self.target}: a call to the vararg method {what}", offset, "abi-unsupported")
        for i, sig in enumerate(params):
            self._check_classifiable(sig, f"argument {i} of the call to {what}", offset)
        if ret_sig is not None and self._returns_vt(ret_sig):
            self._check_classifiable(ret_sig, f"the result of the call to {what}", offset)

    def _check_classifiable(self, sig, what: str, offset: int | None) -> None:
        if self.ee.stack_kind(sig) is not StackKind.VALUE:
            return
        info = self.ee.type_info(sig)
        if info.size <= 16 and eightbytes(self.ee, sig) is None:
            raise self.fail(f"{self.target}: {what} ({info.text}, {info.size} bytes) is a value type passed by "
                            "value that the SysV classification here cannot place (explicit layout: fields may "
                            "overlap)", offset, "abi-unsupported")

    def _sysv_params(self, info) -> tuple[list[tuple[str, str]], list]:
        """The parent's parameters under SysV struct passing (reader/abi.py): `this`, the
        return buffer of a result above 16 bytes, the arguments, each value type lowered to
        its eightbytes or to a byval pointer; and per argument (passing, parameter names)."""
        order: list = []       # (argument index or "retbuf", entry for plan_params)
        for i, sig in enumerate(self.arg_sigs):
            order.append((i, sig if self.ee.stack_kind(sig) is StackKind.VALUE else self._param_type(sig)))
        ret = plan_return(self.ee, info.return_type) if self._returns_vt(info.return_type) else None
        if ret is not None and ret.how == "memory":
            order.insert(1 if info.has_this else 0, ("retbuf", "ptr"))
        if self.options.generic_context and self.options.generic_context != "this":
            # CoreCLR's order on x64 (callingconvention.h GetParamTypeArgOffset; RyuJIT's
            # lvaInitArgs): this, return buffer, then the instantiation argument, then the rest
            order.insert((1 if info.has_this else 0) + (ret is not None and ret.how == "memory"),
                         ("instparam", "ptr"))
        plans = plan_params(self.ee, [e for _, e in order])
        params, incoming = [], {}
        self.retbuf_param = None
        for (which, _), passing in zip(order, plans):
            if which == "retbuf":
                self.retbuf_param = "%retbuf"
                params.append(("ptr", "%retbuf"))
                continue
            if which == "instparam":
                params.append(("ptr", "%instparam"))
                continue
            name = f"%a{which}"
            if passing.how == "regs":
                names = [f"{name}.{k}" for k in range(len(passing.types))]
                params += list(zip(passing.types, names))
            elif passing.how == "memory":
                names = [name]
                params.append((passing.param_type, name))
            else:
                names = [name]
                attr = ext_attr(self.ee.type_info(self.arg_sigs[which]))
                params.append((f"{passing.types[0]}{' ' + attr if attr else ''}", name))
            incoming[which] = (passing, names)
        return params, incoming

    def _sysv_copy_in(self, fn: Function, i: int, info, incoming) -> None:
        """Argument `i` from its SysV parameter(s) into its slot."""
        passing, names = incoming
        slot = self.args[i]
        if passing.how == "scalar":
            fn.entry.emit(f"store {info.storage} {names[0]}, ptr {slot}")
            return
        src = names[0]
        if passing.how == "regs":
            src = fn.alloca(f"{names[0][:-2]}.regs", "[16 x i8]", 8)
            for k, (ty, name) in enumerate(zip(passing.types, names)):
                at = src
                if k:
                    at = f"{names[0][:-2]}.hi"
                    fn.entry.emit(f"{at} = getelementptr i8, ptr {src}, i64 8")
                fn.entry.emit(f"store {ty} {name}, ptr {at}")
        self.entry_fill(slot, src, info.size)

    def entry_fill(self, dst: str, src: str | None, size: int) -> None:
        """Copy `size` bytes from `src` (None: zero them) in the parent's entry block, without
        a C library call (linux-x64): `llvm.memcpy/memset.inline` up to INLINE_FILL_LIMIT
        bytes, above it CORINFO_HELP_MEMCPY / MEMSET -- LLVM's optimiser turns even the
        `.inline` intrinsics into memcpy/memset calls (measured: a 12000-byte struct at O2)."""
        if size > INLINE_FILL_LIMIT:
            main = Context("m", "main", self.tree.root, None, self.fn)
            name, args = ("CORINFO_HELP_MEMSET", [f"ptr {dst}", "i32 0", f"i64 {size}"]) if src is None else \
                ("CORINFO_HELP_MEMCPY", [f"ptr {dst}", f"ptr {src}", f"i64 {size}"])
            self.helper(self.fn.entry, main, self.tree.root, name, args, 0)
            return
        if src is None:
            self.declares["llvm.memset.inline"] = "declare void @llvm.memset.inline.p0.i64(ptr, i8, i64, i1)"
            self.fn.entry.emit(f"call void @llvm.memset.inline.p0.i64(ptr {dst}, i8 0, i64 {size}, i1 false)")
        else:
            self.declares["llvm.memcpy.inline"] = "declare void @llvm.memcpy.inline.p0.p0.i64(ptr, ptr, i64, i1)"
            self.fn.entry.emit(f"call void @llvm.memcpy.inline.p0.p0.i64(ptr {dst}, ptr {src}, i64 {size}, i1 false)")

    # -- types -----------------------------------------------------------------------------

    def _param_type(self, sig) -> str:
        info = self.ee.type_info(sig)
        return "ptr" if info.stack_kind is StackKind.VALUE else info.storage

    def _param_llvm_types(self, info) -> list[str]:
        types = [self._param_type(s) for s in self.arg_sigs]
        if self._returns_vt(info.return_type):
            types.insert(1 if info.has_this else 0, "ptr")
        return types

    def _param_shift(self, i: int) -> int:
        has_this = self.ee.compiled_method(self.rid).has_this
        if not self._returns_vt(self.ret_sig):
            return 0
        return 1 if (i >= 1 or not has_this) else 0

    def _returns_vt(self, sig) -> bool:
        return sig is not None and not is_void(sig) and self.ee.stack_kind(sig) is StackKind.VALUE

    def _ret_llvm(self, info) -> str:
        if self.target.struct_passing == "sysv" and not is_void(info.return_type):
            if self._returns_vt(info.return_type):
                return plan_return(self.ee, info.return_type).llvm_return
            attr = ext_attr(self.ee.type_info(info.return_type))
            return f"{attr + ' ' if attr else ''}{self.ee.storage_type(info.return_type)}"
        if is_void(info.return_type) or self._returns_vt(info.return_type):
            return "void"
        return self.ee.storage_type(info.return_type)


def _comment_safe(namer):
    """Token names for IR comments: one line, whatever the string literal holds."""
    def name(token: int) -> str:
        try:
            return namer(token).replace("\n", " ").replace("\r", " ")
        except Exception:  # noqa: BLE001 - a comment must never fail a translation
            return f"0x{token:08X}"
    return name


def _i32(value: int) -> int:
    return struct.unpack("<i", struct.pack("<I", value & 0xFFFFFFFF))[0]


def _mangle(name: str, token: int) -> str:
    """The symbol of a method: its metadata name and token. The name as it is (`quote_global`
    escapes it for LLVM), but a newline, which LLVM's own text route cannot carry (the printer
    writes `\\n`, its assembler keeps both characters): it becomes `\\n` here already, so the
    symbol is the same in an assembled and a directly emitted object; the token keeps it unique."""
    return f"{name.replace(chr(10), chr(92) + 'n')}$0x{token:08X}"


def translate(asm: Assembly, m: ILMethod, ee: JitEE | None = None, options: Options = Options()) -> ReaderResult:
    """The reader stage's entry point: one method → one LLVM module (parent + outlined filters)."""
    hints: dict[tuple, tuple] = {}
    while True:   # at most one more attempt per retyped join: a join only ever widens to byref
        tr = Translator(asm, m, ee, options)
        tr.join_hints = hints
        try:
            return tr.run()
        except _Rejoin as r:
            if hints.get(r.key) == r.shape:
                raise tr.fail(f"stack at IL_{r.key[0]:04x}: the join did not settle at {r.shape}",
                              r.key[0], "stack-mismatch") from None
            hints[r.key] = r.shape
