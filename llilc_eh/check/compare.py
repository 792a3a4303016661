"""IL clauses vs. a JIT's native clauses: what the JIT kept, changed, dropped and added.

RyuJIT does not report the IL's EH table verbatim. Between the IL and the CORINFO_EH_CLAUSE
table it hands the runtime, it may
* remove an empty try/finally (nothing to protect, or an empty finally);
* clone a finally into the normal path and turn the try/finally into a try/fault, since the
  exceptional path is then the only one that still runs the handler funclet;
* append cloned-finally clauses (FINALLY|DUPLICATED, empty try, handler in the main body)
  that tell the runtime where the cloned finally copies live;
* append duplicate clauses (DUPLICATED) for tries whose code moved into funclets;
* add a try/fault of its own around a [MethodImpl(Synchronized)] body, whose fault funclet
  releases the monitor (measured: all 69 such clauses of the dotnetcore2 corpus).

`compare` aligns the native *primary* clauses with the IL clauses in order (both tables are
ordered inner-before-outer, and RyuJIT keeps the IL order of what survives), matching kind
and catch token, then checks that matched clauses nest the same way in both. Every IL clause
gets a fate and every native clause a role; anything that fits no known pattern is
"unexplained" — that, not a difference as such, is what a researcher needs to look at.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..assembly.body import ClauseKind, ILClause
from ..assembly.native import NativeClause, NativeMethod

# Fates of IL clauses
KEPT = "kept"
FINALLY_TO_FAULT = "finally-became-fault"
REMOVED = "removed"
# Roles of native clauses beyond the matched primaries
DUPLICATE = "duplicate"
CLONED_FINALLY = "cloned-finally"
SYNCHRONIZED = "synchronized-monitor-exit"
UNEXPLAINED = "unexplained"


@dataclass(frozen=True)
class Comparison:
    il_fates: tuple[str, ...]                    # per IL clause
    native_roles: tuple[str, ...]                # per native clause: "il #k", duplicate, ...
    matches: tuple[tuple[int, int], ...]         # (IL clause index, native clause index)
    problems: tuple[str, ...] = field(default=())

    @property
    def identical(self) -> bool:
        return (all(f == KEPT for f in self.il_fates) and not self.problems
                and all(r.startswith("il #") for r in self.native_roles))

    def counts(self) -> Counter:
        c = Counter(self.il_fates)
        c.update(r for r in self.native_roles if not r.startswith("il #"))
        c.update("nesting-mismatch" for p in self.problems if p.startswith("nesting"))
        return c

    def classification(self) -> str:
        """One word for summaries: identical, or the sorted set of what differs."""
        if self.identical:
            return "identical"
        kinds = {k for k in self.counts() if k != KEPT}
        return "+".join(sorted(kinds)) or "identical"


def _same_kind(il: ILClause, native: NativeClause) -> bool:
    if il.kind is ClauseKind.CATCH:
        return native.kind == "catch" and native.class_token == il.class_token
    return native.kind == il.kind.word


def _nests(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """a lies inside b (identical ranges count: RyuJIT may give distinct tries one range)."""
    return b[0] <= a[0] and a[1] <= b[1]


def compare(il_clauses: tuple[ILClause, ...], native: NativeMethod, *, synchronized: bool = False) -> Comparison:
    """Align `native`'s clauses with the IL's; `synchronized` says the method is
    [MethodImpl(Synchronized)], so that one extra outermost fault is the JIT's own."""
    roles: list[str] = [""] * len(native.clauses)
    primaries = []
    for i, c in enumerate(native.clauses):
        if c.is_cloned_finally:
            roles[i] = CLONED_FINALLY
        elif c.is_duplicate:
            roles[i] = DUPLICATE
        else:
            primaries.append(i)
    fates: list[str] = []
    matches: list[tuple[int, int]] = []
    k = 0
    for il in il_clauses:
        if k < len(primaries):
            n = native.clauses[primaries[k]]
            if _same_kind(il, n):
                fates.append(KEPT)
            elif il.kind is ClauseKind.FINALLY and n.kind == "fault":
                fates.append(FINALLY_TO_FAULT)
            else:
                fates.append(REMOVED)
                continue
            roles[primaries[k]] = f"il #{il.index}"
            matches.append((il.index, primaries[k]))
            k += 1
        else:
            fates.append(REMOVED)
    for i in primaries[k:]:
        outermost = i == primaries[-1]
        roles[i] = SYNCHRONIZED if synchronized and outermost and native.clauses[i].kind == "fault" \
            else UNEXPLAINED
    # A primary protects its own try range and, through its duplicates, the funclets that
    # the funclet split moved out of that try: natively, "nested in b" means inside any of them.
    protected = {i: [(c.try_start, c.try_end)] for i, c in enumerate(native.clauses)}
    for d, dup in enumerate(native.clauses):
        if roles[d] == DUPLICATE:
            for i in primaries:
                p = native.clauses[i]
                if (p.handler_start, p.handler_end) == (dup.handler_start, dup.handler_end):
                    protected[i].append((dup.try_start, dup.try_end))
    problems = []
    for a_il, a_n in matches:
        for b_il, b_n in matches:
            if a_il == b_il:
                continue
            il_nested = _nests(il_clauses[a_il].try_range, il_clauses[b_il].try_range)
            na = native.clauses[a_n]
            native_nested = any(_nests((na.try_start, na.try_end), r) for r in protected[b_n])
            if il_nested and not native_nested:
                problems.append(f"nesting: IL clause #{a_il} lies in #{b_il}'s try, "
                                f"native clause {a_n} not in {b_n}'s")
    return Comparison(tuple(fates), tuple(roles), tuple(matches), tuple(problems))
