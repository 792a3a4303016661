"""The synchronized method's own EH clause: a fault over the whole body that releases the lock.

A method marked [MethodImpl(MethodImplOptions.Synchronized)] holds a lock for its whole run
-- its `this`, or for a static method its class's -- and must release it however it ends.
The IL says nothing of it: the JIT adds the code and the clause. RyuJIT 3.1 does it in
fgAddSyncMethodEnterExit (src/jit/flowgraph.cpp): a byte `acquired` = 0 before a new try
region; the try's first block calls CORINFO_HELP_MON_ENTER(this, &acquired) (static:
CORINFO_HELP_MON_ENTER_STATIC(getMethodSync's lock, &acquired)); the try covers every block of
the body; its handler is a FAULT that calls MON_EXIT(..., &acquired) (the helper does nothing
unless `acquired` says the lock was taken); each return calls MON_EXIT before it returns. The
new clause is the least nested, so it is the last of the EH table.

We make that clause part of the method as the rest of the pipeline sees it, so the region
tree, the reader's funclets, the funclet model, the CLR clause table and the dispatch check
all treat it like any IL clause (one path, no special case after the reader): the body gets
two IL bytes more and one FAULT clause. The first byte, a `throw` no branch reaches (never
translated: the reader translates reachable blocks only), is the last instruction of the new
try, at its top level: it stands for the JIT's prolog block, the IL offset the enter call is
known by (every call of ours carries one -- the funclet model and the dispatch check map calls
to IL by it -- and the ECMA dispatch at that offset is the enter's: the new fault, then the
caller; the body's own first instruction may lie in a try of its own, and a body may have no
instruction outside its regions at all, `try { throw } finally { }`). The second, `endfinally`,
is the fault handler's only instruction. The reader (reader/synchronized.py) adds the helper
calls: the enter after the entry block, an exit before every `ret` and before the fault's
`endfinally`.

ECMA-335 forbids `ret` inside a protected region; the original body's returns now lie in
the new try, where the JIT put them too. `analyze_synchronized` drops exactly those findings
(a `ret` whose innermost region is the new try); any other finding stays.
"""

from __future__ import annotations

from dataclasses import replace

from ..assembly.body import ClauseKind, ILClause, MethodBody
from ..il.method import ILMethod, analyze
from ..il.regions import RegionKind

PROLOG = b"\x7a"          # throw, unreachable: the JIT's prolog, where the enter call stands
ENDFINALLY = b"\xdc"      # the fault handler's one instruction (its exit call comes from the reader)


def with_monitor_clause(body: MethodBody) -> MethodBody:
    """`body` with the JIT's monitor clause: the prolog and handler bytes appended, the FAULT
    clause last."""
    end = body.code_size + len(PROLOG)
    clause = ILClause(index=len(body.clauses), kind=ClauseKind.FAULT, try_start=0, try_end=end,
                      handler_start=end, handler_end=end + len(ENDFINALLY))
    return replace(body, code=body.code + PROLOG + ENDFINALLY, clauses=body.clauses + (clause,))


def monitor_clause(il: ILMethod) -> ILClause | None:
    """The JIT's monitor clause of a method analysed by `analyze_synchronized`, else None."""
    body = il.body
    if not body.clauses:
        return None
    c = body.clauses[-1]
    n = body.code_size - len(ENDFINALLY)
    if (c.kind is ClauseKind.FAULT and (c.try_start, c.try_end, c.handler_start, c.handler_end) ==
            (0, n, n, body.code_size) and body.code[n - len(PROLOG):] == PROLOG + ENDFINALLY):
        return c
    return None


def analyze_synchronized(body: MethodBody) -> ILMethod:
    """The IL method with the JIT's monitor clause, analysed; a `ret` of the original body at
    its top level (now directly inside the new try) is not a finding."""
    il = analyze(with_monitor_clause(body))
    clause = len(body.clauses)
    sync_try = next(r for r in il.regions.regions if r.kind is RegionKind.TRY and clause in r.clauses) \
        if not il.regions.errors else None

    def allowed(e) -> bool:
        return (sync_try is not None and getattr(e, "kind", None) == "ret-inside-region"
                and il.regions.innermost(e.offset) is sync_try)
    return replace(il, errors=tuple(e for e in il.errors if not allowed(e)))


__all__ = ["ENDFINALLY", "PROLOG", "analyze_synchronized", "monitor_clause", "with_monitor_clause"]
