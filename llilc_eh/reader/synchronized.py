"""A synchronized method's lock: the helper calls around the JIT's own monitor clause.

clauses/synchronized.py gives the method its fault clause (try: the whole body; handler: one
`endfinally` appended to the IL). This module adds what RyuJIT 3.1's fgAddSyncMethodEnterExit
and fgCreateMonitorTree add (src/jit/flowgraph.cpp):

* entry: a byte `acquired` = 0 and the lock object in frame slots (reloaded at each exit, so
  no SSA value crosses into the fault funclet), then CORINFO_HELP_MON_ENTER(this, &acquired)
  -- static: CORINFO_HELP_MON_ENTER_STATIC(lock, &acquired), the lock getMethodSync's answer
  (the class's type object's monitor; a `method-sync` cell the installer fills) -- inside the
  new try, so an exception from it runs the fault, which releases only what was acquired;
* before every `ret`: CORINFO_HELP_MON_EXIT(this, &acquired) (_STATIC with the lock);
* the fault handler: the same exit before its `endfinally`.

`this` is kept as it came in (RyuJIT copies it for the handler). A value type's instance
method has a byref `this`, no object to lock: refused (`synchronized-value-type`), as is
shared generic code, whose lock would need a runtime lookup.
Linux-x64 only: the pipeline adds the clause for the target that runs (`Options.target.data_cells`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..clauses.synchronized import PROLOG, monitor_clause
from ..il.regions import Region, RegionKind
from .externals import External
from .types import StackKind

SYNC_SYMBOL = "methodsync:"     # + the method's symbol: the cell of a static method's lock


@dataclass(frozen=True)
class Monitor:
    static: bool
    taken: str                  # alloca i8: the `acquired` byte
    lock: str                   # alloca ptr: `this`, or the static lock from its cell
    try_region: Region          # the JIT's try (the whole body)
    handler_offset: int         # the fault handler's `endfinally`
    prolog_offset: int          # the IL offset the enter call stands at: the unreachable PROLOG byte


def monitor(tr) -> Monitor | None:
    """The monitor of a synchronized method on a target that runs (None otherwise), its slots
    filled in the entry block. Raises the reader's error when the method cannot have one."""
    if not tr.target.data_cells or not tr.asm.is_synchronized(tr.rid):
        return None
    clause = monitor_clause(tr.m)
    if clause is None:
        raise tr.fail("synchronized method without the JIT's monitor clause (clauses/synchronized.py)",
                      None, "synchronized")
    if tr.options.generic_context:
        raise tr.fail("synchronized shared generic code: the lock needs a runtime lookup", None, "synchronized")
    info = tr.ee.compiled_method(tr.rid)
    static = not info.has_this
    if not static and tr.arg_infos[0].stack_kind is not StackKind.OBJ:
        raise tr.fail("synchronized method of a value type: `this` is a byref, no object to lock", None,
                      "synchronized-value-type")
    region = next(r for r in tr.tree.regions if r.kind is RegionKind.TRY and clause.index in r.clauses)
    prolog = clause.try_end - len(PROLOG)      # the JIT's prolog, in IL (clauses/synchronized.py)
    fn = tr.fn
    taken = fn.alloca("%sync.acquired", "i8", 1)
    lock = fn.alloca("%sync.lock", "ptr")
    fn.entry.emit(f"store i8 0, ptr {taken}")
    if static:
        symbol = SYNC_SYMBOL + info.symbol
        g = tr.ee.llvm_global(symbol)
        tr.externals[symbol] = External(symbol, "method-sync", info.token, cell=True)
        tr.globals[g] = f"{g} = external global ptr"
        value = fn.value("synclock")
        fn.entry.emit(f"{value} = load ptr, ptr {g}")
    else:
        value = fn.value("this")
        fn.entry.emit(f"{value} = load ptr, ptr {tr.args[0]}")
    fn.entry.emit(f"store ptr {value}, ptr {lock}")
    return Monitor(static, taken, lock, region, clause.handler_start, prolog)


def enter(tr, mon: Monitor, ctx):
    """MON_ENTER in a block of its own after the entry block (the entry block's calls have no IL
    offset), inside the JIT's try: the block to go on from."""
    name = "CORINFO_HELP_MON_ENTER_STATIC" if mon.static else "CORINFO_HELP_MON_ENTER"
    block = tr.fn.new_block("sync.enter", comment="the synchronized method takes its lock")
    tr.fn.entry.terminate(f"br label %{block.label}")
    block.emit(f"; IL_{mon.prolog_offset:04x}:  (the JIT's prolog, clauses/synchronized.py: the lock's enter)")
    lock = tr.fn.value("lock")
    block.emit(f"{lock} = load ptr, ptr {mon.lock}")
    block, _ = tr.helper(block, ctx, mon.try_region, name, [f"ptr {lock}", f"ptr {mon.taken}"], mon.prolog_offset)
    return block


def exit_(bt, mon: Monitor) -> None:
    """MON_EXIT where a BlockTranslator stands (before a `ret`, or the fault's `endfinally`)."""
    name = "CORINFO_HELP_MON_EXIT_STATIC" if mon.static else "CORINFO_HELP_MON_EXIT"
    lock = bt.v("lock")
    bt.emit(f"{lock} = load ptr, ptr {mon.lock}")
    bt.helper(name, [f"ptr {lock}", f"ptr {mon.taken}"])


__all__ = ["Monitor", "SYNC_SYMBOL", "enter", "exit_", "monitor"]
