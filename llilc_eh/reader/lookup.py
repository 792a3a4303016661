"""Shared generic code: the generic context and the runtime lookups through it, in the IR.

Code shared between reference-type instantiations (`Options.generic_context`, linux-x64) keeps
its generic context -- the hidden MethodDesc or MethodTable argument, or `this` for an
instance method of a generic class -- in one escaped frame slot (`%generic.ctx`, localescape
index 0: the GC info reports it, runtime/generic.py). A handle that depends on the
instantiation cannot be a data cell of the code; the JIT-EE says how to find it at run time
(`generic_lookup` / `call_inst_param`: a `RuntimeLookup`, runtime/lookup.py), and the reader
emits the dictionary walk inline as RyuJIT does (importer.cpp impRuntimeLookupToTree):

    ctx  = the context (for `this`: its MethodTable, the object's first word)
    p    = ctx; for each offset i: (i > 0: p = *p); p += offset_i
    h    = *p                      (no offsets: h = ctx itself)
    h == null ? helper(ctx, signature) : h     (testForNull: the slot is filled lazily)

or, when the runtime has no fixed slot (CORINFO_USEHELPER), the helper call alone. The
signature is a data cell (`lookup-signature`) the installer fills. A lookup is asked per
use; the JIT-EE that reads metadata only cannot answer it, so there a token that may depend
on the instantiation (a TypeSpec, a MethodSpec, a name with `!`) is refused with its offset.
"""

from __future__ import annotations

from .externals import External
from .types import OBJECT_HEADER_SIZE


class LookupRefused(Exception):
    """The JIT-EE cannot give a lookup we generate (a shape we do not emit, a token the
    runtime refused): the reader turns it into a ReaderError at the instruction's offset."""


CONTEXT_SLOT = "%generic.ctx"      # the escaped slot of the context (translate.Translator.run)
REFUSED = "runtime-lookup"         # the ReaderError kind


def may_depend(asm, token: int) -> bool:
    """A token that may name the instantiation (what a metadata-only JIT-EE cannot decide)."""
    try:
        text = asm.names.token(token)
    except Exception:   # noqa: BLE001 -- an unreadable token is not ours to judge here
        return True
    return token >> 24 in (0x1B, 0x2B) or "!" in text


def shared_handle(op, what: str, token: int) -> str | None:
    """The handle of `token` used as `what` (an external kind) in shared code, computed from the
    generic context, or None when it is a constant (the caller keeps its data cell)."""
    tr = op.tr
    if not tr.options.generic_context or token is None:
        return None
    lookup = _ask(op, "generic_lookup", what, token)
    return None if lookup is None else emit_lookup(op, lookup)


def call_inst_param(op, token: int, newobj: bool) -> str | None:
    """The instantiation argument a call from shared code passes (the looked-up MethodDesc or
    class), or None when the callee takes none or its instantiating stub can be called."""
    if not op.tr.options.generic_context:
        return None
    lookup = _ask(op, "call_inst_param", token, newobj)
    return None if lookup is None else emit_lookup(op, lookup)


def generic_static_address(op, token: int, owner: str) -> str:
    """The address of a static field of a generic class in shared code: the generic statics
    base of the looked-up class `owner` (the helper runs its class constructor) plus the
    field's offset, both as the runtime's getFieldInfo says (importer.cpp,
    CORINFO_FIELD_STATIC_GENERICS_STATIC_HELPER); a value type's static is a box, its value
    after the header."""
    helper, offset, boxed = _ask(op, "generic_static", token)
    base = op.helper(helper, [f"ptr {owner}"])
    addr = op.gep(base, offset) if offset else base
    if boxed:
        box = op.v("box")
        op.emit(f"{box} = load ptr, ptr {addr}")
        addr = op.gep(box, OBJECT_HEADER_SIZE)
    return addr


def _ask(op, question: str, *args):
    tr = op.tr
    ask = getattr(tr.ee, question, None)
    token = args[1] if question == "generic_lookup" else args[0]
    if ask is None and question == "generic_static":
        raise tr.fail(f"static field 0x{token:08X} of a generic class in shared code: only the runtime's "
                      "JIT-EE says how to reach it", op.offset, REFUSED)
    if ask is None:
        if question == "generic_lookup" and not may_depend(tr.asm, token):
            return None
        if question == "call_inst_param" and not may_depend(tr.asm, token):
            return None
        raise tr.fail(f"0x{token:08X} ({tr.namer(token)}) may need a runtime lookup of the instantiation; "
                      "only the runtime's JIT-EE answers those", op.offset, REFUSED)
    try:
        return ask(*args)
    except LookupRefused as e:
        raise tr.fail(f"runtime lookup: {e}", op.offset, REFUSED) from None


def context_value(op) -> str:
    """The generic context as the lookups start from it: the MethodDesc / MethodTable, or the
    MethodTable of `this` (loaded from the object)."""
    tr, ctx = op.tr, op.ctx
    slot = CONTEXT_SLOT
    if ctx.kind == "filter":     # an outlined filter reaches the parent's slot (escape index 0)
        slot = ctx.recovered.get(CONTEXT_SLOT)
        if slot is None:
            from .translate import GENERIC_CONTEXT_ESCAPE
            slot = ctx.recovered[CONTEXT_SLOT] = "%rec.generic.ctx"
            line = (f"{slot} = call ptr @llvm.localrecover(ptr {tr.parent_name}, ptr %fp, "
                    f"i32 {GENERIC_CONTEXT_ESCAPE})")
            ctx.fn.entry.lines.insert(-1 if ctx.fn.entry.terminated else len(ctx.fn.entry.lines), line)
            tr.declares["llvm.localrecover"] = "declare ptr @llvm.localrecover(ptr, ptr, i32)"
    value = op.v("ctx")
    op.emit(f"{value} = load ptr, ptr {slot}")
    if tr.options.generic_context == "this":
        mt = op.v("ctx.mt")
        op.emit(f"{mt} = load ptr, ptr {value}")
        return mt
    return value


def emit_lookup(op, lookup) -> str:
    """The handle `lookup` finds (module docstring), emitted at the current instruction."""
    ctx_value = context_value(op)
    if lookup.offsets is None:
        return op.helper(lookup.helper, [f"ptr {ctx_value}", f"ptr {_signature(op, lookup)}"])
    p = ctx_value
    for i, offset in enumerate(lookup.offsets):
        if i:
            loaded = op.v("dict")
            op.emit(f"{loaded} = load ptr, ptr {p}")
            p = loaded
        if offset:
            p = op.gep(p, offset)
    if not lookup.offsets:
        return p
    handle = op.v("handle")
    op.emit(f"{handle} = load ptr, ptr {p}")
    if not lookup.test_for_null:
        return handle
    suffix = f".{op.ctx.tag}" if op.ctx.tag != "m" else ""
    isnull = op.v("unfilled")
    op.emit(f"{isnull} = icmp eq ptr {handle}, null")
    slow = op.fn.new_block(f"IL_{op.offset:04x}.lookup{suffix}", comment=f"fills the slot via {lookup.helper}")
    join = op.fn.new_block(f"IL_{op.offset:04x}.looked{suffix}")
    came = op.block.label
    op.block.terminate(f"br i1 {isnull}, label %{slow.label}, label %{join.label}, !prof !0")
    op.block = slow
    filled = op.helper(lookup.helper, [f"ptr {ctx_value}", f"ptr {_signature(op, lookup)}"])
    slow_end = op.block.label
    op.block.terminate(f"br label %{join.label}")
    op.block = join
    value = op.v("handle")
    op.emit(f"{value} = phi ptr [ {handle}, %{came} ], [ {filled}, %{slow_end} ]")
    return value


def _signature(op, lookup) -> str:
    """The helper's signature cookie: a data cell the installer fills (kind lookup-signature)."""
    tr = op.tr
    symbol = f"lookupsig:{lookup.what}:0x{lookup.token:08X}"
    g = tr.ee.llvm_global(symbol)
    tr.externals[symbol] = External(symbol, "lookup-signature", lookup.token, lookup=lookup.what, cell=True)
    tr.globals[g] = f"{g} = external global ptr"
    v = op.v("sig")
    op.emit(f"{v} = load ptr, ptr {g}")
    return v


__all__ = ["CONTEXT_SLOT", "LookupRefused", "REFUSED", "call_inst_param", "context_value", "emit_lookup",
           "generic_static_address", "may_depend", "shared_handle"]
