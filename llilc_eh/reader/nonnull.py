"""Null checks a JIT need not emit: which variables the reader may follow from one check to
the next (issue 16 item 4, "less IR for LLVM to chew").

Why: an explicit null check is an `icmp`, a branch and a cold block with a call-site marker,
the throw helper's call (or invoke) and `unreachable` -- on CoreLib's EH methods a quarter of
the IR the reader wrote. RyuJIT 3.1 emits none where it knows the value is not null: the
results of allocation, box, unbox and string literals (valuenumfuncs.h, the functions marked
VNFOA_KnownNonNull), addresses of locals, statics, fields and elements, and a value after a
dereference or check of it (assertion propagation, global over the method). It does not
assume `this` to be non-null (a `call`, unlike `callvirt`, may pass null: ECMA-335 III.3.19),
and neither does this reader. A byref or pointer a field is read through (a value type's
`this`) is checked like an object: RyuJIT's code faults there, but LLVM deletes an unused load
and takes a load from null as undefined, so no omitted check may lean on the hardware
(tests/reader/null_checks_adversarial.il tries the ways a fact here could be wrong).

What the reader follows (`opcodes.BlockTranslator.null_check`):
* within one IL block, an operand once checked (the check dominates the rest of the block),
  and a variable once checked while nothing stored into it;
* across blocks, only *invariant* variables -- never stored by `starg`/`stloc` and whose
  address is never taken -- checked in a block that dominates this one in the same function
  body (`NonNullFacts.entry_slots`). Dominance is over the IL blocks of one body: the main
  body or one handler, nested tries included, nested handlers not; a block that code outside
  that body reaches (a catch's `leave` to its continuation) counts as reached from the entry,
  so no check inside a try is taken for a continuation that an exception may reach instead.
  A `leave` through finallys counts as an edge to its target: a finally cannot store into an
  invariant variable.

Nothing is followed in a method with a filter (a filter runs in the first pass, during a call
of the parent, and may store into the parent's frame through `llvm.localrecover`), nor in an
outlined filter; nor a variable whose address is taken (anything may store through it).
"""

from __future__ import annotations

from ..assembly.body import ClauseKind


class _Everything:
    """Every variable (the untracked set of a method with a filter)."""

    def __contains__(self, item) -> bool:
        return True


EVERY_VARIABLE = _Everything()


class NonNullFacts:
    """What one method's blocks may take as non-null on entry, and what each left behind."""

    def __init__(self, tr, variable_access):
        """`variable_access(instruction)`: (arg | loc, index, address | load | store) of an
        instruction that accesses a variable, else None (`opcodes._variable_access`)."""
        self.tr = tr
        self.tree = tr.tree
        self.blocks = tr.m.blocks
        if any(c.kind is ClauseKind.FILTER for c in tr.body.clauses):
            self.untracked, self.invariant = EVERY_VARIABLE, frozenset()
        else:
            exposed, stored, seen = set(), set(), set()
            for ins in tr.m.instructions:
                access = variable_access(ins)
                if access is None:
                    continue
                var = access[:2]
                seen.add(var)
                if access[2] == "address":
                    exposed.add(var)
                elif access[2] == "store":
                    stored.add(var)
            self.untracked = exposed
            self.invariant = frozenset(seen - exposed - stored)
        self._dominators: dict[int, dict[int, frozenset[int]]] = {}
        self._exit: dict[tuple[str, int], frozenset[str]] = {}

    def tracked(self, ctx, var: tuple[str, int]) -> bool:
        return ctx.kind != "filter" and var not in self.untracked

    def _invariant_slots(self) -> set[str]:
        tr = self.tr
        return {(tr.args if which == "arg" else tr.locals)[index] for which, index in self.invariant}

    def entry_slots(self, ctx, il_block) -> set[str]:
        """The slots of invariant variables known non-null where `il_block` starts in `ctx`:
        those a dominating block of the same body, already translated in `ctx`, checked."""
        if ctx.kind == "filter" or not self.invariant:
            return set()
        out: set[str] = set()
        for d in self._dominators_of(ctx.base).get(il_block.start, ()):
            out |= self._exit.get((ctx.tag, d), frozenset())
        return out

    def record_exit(self, ctx, il_block, slots: set[str]) -> None:
        """The slots known non-null at the end of `il_block` in `ctx` (invariant ones kept)."""
        if ctx.kind == "filter" or not self.invariant:
            return
        self._exit[(ctx.tag, il_block.start)] = frozenset(slots & self._invariant_slots())

    def _dominators_of(self, base) -> dict[int, frozenset[int]]:
        """block start -> the starts of the blocks that strictly dominate it, over the blocks of
        the body `base` begins (the root, or a handler), with a virtual entry that reaches the
        body's first block and every block entered from outside the body."""
        hit = self._dominators.get(base.index)
        if hit is not None:
            return hit
        tree = self.tree
        body_of = {}
        for b in self.blocks:
            h = tree.enclosing_handler(tree.innermost(b.start))
            body_of[b.start] = h.index if h is not None else tree.root.index
        own = [b.start for b in self.blocks if body_of[b.start] == base.index]
        members = set(own)
        preds: dict[int, set] = {s: set() for s in own}
        outside = object()
        if base.start in preds:
            preds[base.start].add(outside)
        for b in self.blocks:
            for s in b.successors:
                if s in members:
                    preds[s].add(b.start if b.start in members else outside)
        every = frozenset(own)
        dom: dict[int, frozenset[int]] = {s: every for s in own}
        changed = True
        while changed:
            changed = False
            for s in own:
                ps = preds[s]
                if not ps or outside in ps:
                    new = frozenset((s,))
                else:
                    new = frozenset.intersection(*(dom[p] for p in ps)) | {s}
                if new != dom[s]:
                    dom[s], changed = new, True
        result = {s: d - {s} for s, d in dom.items()}
        self._dominators[base.index] = result
        return result
