"""Which object function holds the code of each model funclet: the funclet match.

Why its own step (and module): the final image lays LLVM's code out in the model's order,
and every later stage -- clause ranges, the LLVM differential, the runtime's unwind and GC
info -- reads a funclet's code through this answer; it is a search over evidence from the
object (LLVM's CLR table, call sites, pad markers) and the model, with nothing to do with
bytes or offsets. `match_funclets(recovered, coff, model, parent)` -> `FuncletMatch`;
`link_final_image` (`backend.image`) lays out by it, `clauses.generate` asks it again for
LLVM's own layout.

A funclet symbol's number is a MachineBasicBlock number: at O0 it follows the module's
block order, at O2 blocks are renumbered and pads moved or deleted, so the name is no key;
nor is LLVM's funclet order (the module's at O0, not at O2).

With the reader's `Options.pad_markers` (off by default: the markers keep LLVM from
deleting empty cleanups) the pad marker decides: the reader puts a zero-byte
`# llilc.pad N` right after every catchpad and cleanuppad (`Funclet.pad_marker`), and `recover` finds it in the code of the
object funclet that holds that pad (`CodeFunction.pads`), so an object funclet carrying
marker N *is* the model funclet with marker N -- even one without a single call (an empty
`catch {}`, a finally that only stores locals), which nothing else tells apart from its
siblings. The rest of the evidence must agree: a pad marker the other evidence rules out,
one no model funclet has, or one in two object funclets is a `BackendError`
(`funclet-match`) naming the object funclet and the model funclet. Several pad markers in
one object funclet: at O2 SimplifyCFG merges a cleanup that ends in a cleanupret to a next
cleanup into it when it is that cleanup's only way in (the first pad stays, the next one's
code is appended), so the markers must name such a chain of cleanups (else an error); the
funclet is the one of them the rest of the evidence picks (its calls), else the chain's
head, and the others have no code of their own (`absent`; `FinalImage.merged` says where
their code went). Objects without pad markers (the default) are matched by the evidence
alone; an object funclet without one among funclets with them is
too. The evidence, per object funclet, all of it read from the object and held against the
model:

* its kind, and from LLVM's CLR table (`llvm_table`) the clause flags and class token of
  its clauses: catch with token t = our CATCH of class t, token 0 = a FILTER_HANDLER (the
  reader's catchpad says `i32 0`), finally = FINALLY, fault = FAULT;
* the call-site identities of its calls (the reader's `# llilc.callsite N` markers,
  `recover`'s `CallSite.callsites`, the model's `CallSite.callsite`): a call marked N is a
  call of the model funclet whose blocks hold call N. Without identities (an object from
  before them), the callees instead: every callee the model knows must be one the model
  funclet calls;
* where its try is: a handler's primary (non-duplicate) clauses cover invokes of the
  funclet that holds its pad, so that function maps to the model funclet's parent;
* for every invoke, the handlers whose clauses cover it, inner to outer (primaries, then
  duplicates, in table order): the model invoke(s) it is -- by identity, else any with its
  callee -- sit in the mapped funclet and have exactly that dispatch chain
  (`FuncletModel.protecting`), restricted to the funclets that have code.

Domains (pad markers pin theirs to one funclet) are narrowed by propagation, then searched.
With pad markers the assignment is unique. Without them, and with call-site identities, it
is unique where every handler LLVM keeps covers some invoke; funclets without calls can be
interchangeable (two sibling finallys that only store locals). If several assignments still
fit, the one that keeps LLVM's funclet order = the module's pad order wins (always right at
O0, a guess at O2), then the one whose invokes keep the module's block order;
`FinalImage.ambiguous` names the funclets concerned and `decided_by` what chose (measured:
none among the 5,693 EH methods of the corpus at O2, nor the sample, Python.Runtime and
CoreLib at O0; where pad markers are on, their assignment equals the evidence-only one). A model funclet LLVM removed (an
empty cleanup -- only without pad markers, which keep it; a pad no invoke reaches any more;
a cleanup merged into another) has no code of its own: `FinalImage.absent`; a filter whose
handler is absent is not placed.

Errors: `BackendError` kind `funclet-match`, naming the object funclet and the model funclet.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass

from ..errors import BackendError
from ..funclets.model import FuncletKind, FuncletModel
from .codegen import object_symbol
from .coff import CoffObject
from .llvm_table import decode_llvm_clr_table
from .recover import RecoveredCode

SEARCH_BUDGET = 50_000         # search nodes the funclet matcher may visit before it gives up
MAX_SOLUTIONS = 64             # consistent assignments it collects to choose from

_CODE_KINDS = {"catch": (FuncletKind.CATCH, FuncletKind.FILTER_HANDLER),
               "cleanup": (FuncletKind.FINALLY, FuncletKind.FAULT)}


def _error(reason: str, kind: str = "funclet-match") -> BackendError:
    return BackendError(reason, kind=kind)


@dataclass(frozen=True)
class FuncletMatch:
    """The answer: model funclet -> object symbol, and what the evidence left open."""

    code: dict[int, str]             # model funclet index -> object symbol of its code
    absent: tuple[int, ...]          # model funclets without code
    ambiguous: tuple[int, ...] = ()  # handler funclets the evidence leaves interchangeable
    decided_by: str = ""             # then: "module order" | "invoke order" | "search order"
    identities: bool = True          # call-site identities were there to use
    pads: bool = True                # every object funclet carried a pad marker naming its model funclet
    merged: tuple[tuple[int, tuple[int, ...]], ...] = ()   # (funclet, cleanups LLVM merged into its code)

    def __str__(self) -> str:
        lines = [f"  funclet {i:3d} <- {name}" for i, name in sorted(self.code.items())]
        if self.absent:
            lines.append(f"  absent: {', '.join(map(str, self.absent))}")
        if self.ambiguous:
            lines.append(f"  ambiguous: {', '.join(map(str, self.ambiguous))} (decided by {self.decided_by})")
        lines += [f"  merged into {kept}: {', '.join(map(str, gone))}" for kept, gone in self.merged]
        return "\n".join(lines)


@dataclass(frozen=True)
class _ObjectInvoke:
    function: str                    # the object function holding it
    callee: str                      # its callee, "?" if the model does not know it
    callsites: tuple[int, ...]       # the reader's call-site identities that reach it
    cover: tuple[str, ...]           # handler symbols of the clauses covering it, dispatch order


@dataclass(frozen=True)
class _ModelInvoke:
    funclet: int
    callee: str | None
    chain: tuple[int, ...]           # handler funclets in dispatch order
    position: int                    # in module order (model.calls is)
    callsite: int | None


def match_funclets(recovered: RecoveredCode, coff: CoffObject, model: FuncletModel, parent: str,
                   tails: dict[str, list] | None = None) -> FuncletMatch:
    """Which object function holds the code of each model funclet (see the module docstring).
    `tails` ({funclet symbol: [(function, start, end)]}, `relink.stray_tails`): blocks LLVM laid
    out at the end of another function's range; their calls are the taking funclet's."""
    parent_fn = recovered.function(parent)
    functions = _with_tails(recovered.method_functions(parent), tails or {})
    symbols = [f.name for f in functions if f.name != parent]
    handlers = [f for f in model.funclets if f.kind.is_handler]
    table = decode_llvm_clr_table(coff, parent) if symbols else None
    clauses = [(c, s) for c, s in zip(table.clauses, table.handler_symbols) if s is not None] if table else []
    base = parent_fn.start

    def function_at(offset: int) -> str | None:
        return next((f.name for f in functions if f.start <= offset < f.end), None)

    # What LLVM's table says of each funclet: clause kind and token; where its try is.
    labels: dict[str, set] = defaultdict(set)
    homes: dict[str, set] = defaultdict(set)
    for clause, symbol in clauses:
        flags = int(clause.flags) & 7
        labels[symbol].add((flags, clause.class_token_or_filter if flags == 0 else 0))
        if not clause.is_duplicate:
            homes[symbol].add(function_at(base + clause.try_start - 1))
    home = {s: next(iter(h)) for s, h in homes.items() if len(h) == 1 and None not in h}

    # The model's pads by marker: decisive where the object funclet carries one.
    by_pad = {f.pad_marker: f for f in handlers if getattr(f, "pad_marker", None) is not None}
    pinned: dict[str, list] = {}     # object funclet symbol -> the model funclets its pad markers name

    # The model's calls: by identity, and by funclet (callees).
    by_identity = {c.callsite: c for c in model.calls if getattr(c, "callsite", None) is not None}
    identities = bool(by_identity) and any(site.callsites for f in functions for site in f.calls
                                           if getattr(site, "callsites", ()))
    model_callees: dict[int, set] = defaultdict(set)
    for c in model.calls:
        model_callees[c.funclet].add(_callee(c.callee))
    known = set().union(*model_callees.values()) - {None}

    domains: dict[str, set[int]] = {}
    for symbol in symbols:
        fn = next(f for f in functions if f.name == symbol)
        label = labels.get(symbol, set())
        if len(label) > 1:
            raise _error(f"LLVM's table gives {symbol} clauses of different kinds: {sorted(label)}", "funclet-match")
        by_kind = {f.index for f in handlers if f.kind in _CODE_KINDS.get(fn.kind, ())}
        domain = {i for i in by_kind if _label_fits(model.funclets[i], next(iter(label), None))}
        by_table = set(domain)
        if identities:
            # each marked call of the funclet's code is a call of the model funclet's blocks
            for site in fn.calls:
                owners = {by_identity[n].funclet for n in getattr(site, "callsites", ()) if n in by_identity}
                if owners:
                    domain &= owners
        else:
            called = {c.callee for c in fn.calls if c.callee in known}
            domain = {i for i in domain if called <= model_callees[i]}
        pads = tuple(dict.fromkeys(getattr(fn, "pads", ())))
        if by_pad and pads:
            named = _pinned_funclets(symbol, pads, by_pad, pinned, model)
            if not domain & {f.index for f in named} and len(named) > 1 and identities \
                    and {f.index for f in named} <= by_table:
                raise _error(f"LLVM's {symbol} holds the code of the cleanups " + ", ".join(
                    f"{f.index} ({f.label}, pad marker {f.pad_marker})" for f in named) + ", merged by LLVM, and "
                    "calls of more than one of them: no single model funclet stands for it", "funclet-match")
            if not domain & {f.index for f in named}:
                why = [f"it is a {fn.kind} funclet" if f.index not in by_kind else
                       f"LLVM's CLR table gives it clauses {sorted(label)}" if f.index not in by_table else
                       "its calls are calls of other model funclets" if identities else
                       "it calls what that model funclet does not" for f in named]
                raise _error(f"LLVM's {symbol} carries " + "; ".join(
                    f"pad marker {f.pad_marker} of model funclet {f.index} ({f.label}), but {w}"
                    for f, w in zip(named, why)), "funclet-match")
            domain &= {f.index for f in named}
            if len(domain) > 1:
                # merged cleanups whose code tells nothing apart: the funclet is the chain's head,
                # the pad that opens it (LLVM keeps the first pad and appends the others' code)
                domain = {next(f.index for f in named if f.index in domain)}
        domains[symbol] = domain

    invokes = []
    for fn in functions:
        for site in fn.calls:
            if not site.is_invoke:
                continue
            at = site.offset + 1 - base
            covering = [(c, s) for c, s in clauses if c.try_start <= at < c.try_end]
            cover = tuple(s for c, s in covering if not c.is_duplicate) + \
                tuple(s for c, s in covering if c.is_duplicate)
            marks = tuple(n for n in getattr(site, "callsites", ()) if n in by_identity) if identities else ()
            invokes.append(_ObjectInvoke(fn.name, site.callee if site.callee in known else "?", marks, cover))
    model_invokes = [_ModelInvoke(c.funclet, _callee(c.callee), tuple(s.funclet for s in model.protecting(c)),
                                  n, getattr(c, "callsite", None))
                     for n, c in enumerate(model.calls) if c.invoke and c.state is not None]

    solver = _Matcher(parent, symbols, domains, home, invokes, model_invokes,
                      {f.index: f.parent for f in model.funclets},
                      {s: ", ".join(f"pad marker {f.pad_marker} = funclet {f.index} ({f.label})" for f in named)
                       for s, named in pinned.items()})
    chosen, ambiguous, decided = solver.solve()
    code = {0: parent}
    code.update({f: s for s, f in chosen.items()})
    for f in model.funclets:
        if f.kind is FuncletKind.FILTER and f.handler in code:
            name = object_symbol(f.function)
            try:
                recovered.function(name)
            except BackendError:
                raise _error(f"the filter function {name} of funclet {f.index} is not in the object",
                             "funclet-match") from None
            code[f.index] = name
    absent = tuple(f.index for f in model.funclets if f.index not in code)
    merged = tuple((chosen[s], tuple(f.index for f in named if f.index != chosen[s]))
                   for s, named in pinned.items() if len(named) > 1)
    return FuncletMatch(code, absent, ambiguous, decided, identities, len(pinned) == len(symbols), merged)


def _with_tails(functions, tails: dict[str, list]):
    """The functions as the match sees them: the calls of stray tails moved to the funclet that
    owns them (each function's range stays as recovered)."""
    if not tails:
        return functions
    moved = [(giver, start, end, taker) for taker, pieces in tails.items() for giver, start, end in pieces]

    def owner(fn, site) -> str:
        return next((t for g, a, b, t in moved if g == fn.name and a <= site.offset < b), fn.name)

    return tuple(dataclasses.replace(fn, calls=tuple(c for f in functions for c in f.calls if owner(f, c) == fn.name))
                 for fn in functions)


def _pinned_funclets(symbol: str, pads: tuple[int, ...], by_pad: dict, pinned: dict[str, list], model):
    """The model funclets the pad markers of object funclet `symbol` name (recorded in
    `pinned`): one, or a chain of cleanups LLVM merged into one funclet, entry's pad first."""
    for n in pads:
        if n not in by_pad:
            raise _error(f"LLVM's {symbol} carries pad marker {n}, which no model funclet has", "funclet-match")
        other = next((s for s, named in pinned.items() if by_pad[n] in named), None)
        if other is not None:
            raise _error(f"LLVM's {other} and {symbol} both carry pad marker {n} of model funclet "
                         f"{by_pad[n].index} ({by_pad[n].label})", "funclet-match")
    named = [by_pad[n] for n in pads]
    if len(named) > 1:
        chain = _cleanup_chain(model, named)
        if chain is None:
            raise _error(f"LLVM's {symbol} carries the pad markers of several funclets, "
                         + ", ".join(f"{f.pad_marker} ({f.label})" for f in named)
                         + ", which are no chain of cleanups LLVM could have merged", "funclet-match")
        named = chain
    pinned[symbol] = named
    return named


def _cleanup_chain(model: FuncletModel, funclets: list) -> list | None:
    """`funclets` in the order of a chain of cleanups each of which ends in a cleanupret to the
    next (what LLVM's SimplifyCFG merges into one funclet when each is the next one's only way
    in), else None."""
    if any(f.kind not in (FuncletKind.FINALLY, FuncletKind.FAULT) or f.state is None for f in funclets):
        return None
    by_state = {f.state: f for f in funclets}
    targets = {model.states[f.state].enclosing for f in funclets
               if model.states[f.state].enclosing_from == "cleanupret"}
    heads = [f for f in funclets if f.state not in targets]
    if len(heads) != 1:
        return None
    chain = heads
    while len(chain) < len(funclets):
        state = model.states[chain[-1].state]
        nxt = by_state.get(state.enclosing) if state.enclosing_from == "cleanupret" else None
        if nxt is None or nxt in chain:
            return None
        chain.append(nxt)
    return chain


def _callee(name: str) -> str | None:
    return object_symbol(name) if name.startswith("@") else None


def _label_fits(f, label: tuple[int, int] | None) -> bool:
    if label is None:
        return True
    flags, token = label
    if flags == 0:
        if token == 0:
            return f.kind is FuncletKind.FILTER_HANDLER
        return f.kind is FuncletKind.CATCH and (f.class_token is None or f.class_token == token)
    return {2: FuncletKind.FINALLY, 4: FuncletKind.FAULT}.get(flags) is f.kind


class _Matcher:
    """Propagation and search for an assignment object funclet symbol -> model funclet index."""

    def __init__(self, parent, symbols, domains, home, invokes, model_invokes, model_parent, pinned=None):
        self.parent = parent
        self.pinned = pinned or {}   # symbol -> what its pad markers name, in words
        self.symbols = symbols
        self.domains = domains
        self.home = home
        self.invokes = invokes
        self.model_invokes = model_invokes
        self.model_parent = model_parent
        self.by_identity = {m.callsite: m for m in model_invokes if m.callsite is not None}
        self.tried = 0

    def _dom(self, d: dict, symbol: str) -> set[int]:
        return {0} if symbol == self.parent else d[symbol]

    def candidates(self, i: _ObjectInvoke) -> list[_ModelInvoke]:
        """The model invokes an object invoke can be: those its identities name (all of them,
        where LLVM merged calls), else those with its callee."""
        named = [self.by_identity[n] for n in i.callsites if n in self.by_identity]
        return named or [m for m in self.model_invokes if i.callee == "?" or i.callee == m.callee]

    def propagate(self, d: dict) -> bool:
        """Narrow the domains `d` in place; False when one becomes empty."""
        changed = True

        def narrow(symbol: str, allowed: set[int]) -> bool:
            nonlocal changed
            if symbol == self.parent:
                return 0 in allowed
            new = d[symbol] & allowed
            if new != d[symbol]:
                d[symbol] = new
                changed = True
            return bool(new)

        while changed:
            changed = False
            for s in self.symbols:          # every funclet's code is one model funclet
                if len(d[s]) == 1:
                    for t in self.symbols:
                        if t != s and not narrow(t, d[t] - d[s]):
                            return False
            for s, h in self.home.items():  # its try is in its parent's code
                parents = self._dom(d, h)
                if not narrow(s, {f for f in d[s] if self.model_parent[f] in parents}):
                    return False
                if h != self.parent and not narrow(h, {self.model_parent[f] for f in d[s]}):
                    return False
            for i in self.invokes:          # its covering handlers are its model invoke's chain
                homes = self._dom(d, i.function)
                fits = [m for m in self.candidates(i) if m.funclet in homes and len(m.chain) >= len(i.cover)
                        and all(d[s] & set(m.chain) for s in i.cover)]
                exact = bool(i.callsites) and all(n in self.by_identity for n in i.callsites)
                if not fits or (exact and len(fits) < len(self.candidates(i))):
                    return False
                if not narrow(i.function, {m.funclet for m in fits}):
                    return False
                for s in i.cover:
                    reach = set.intersection(*(set(m.chain) for m in fits)) if exact else \
                        set().union(*(m.chain for m in fits))
                    if not narrow(s, reach):
                        return False
        return True

    def _fits(self, i: _ObjectInvoke, m: _ModelInvoke, a: dict[str, int], present: set[int]) -> bool:
        home = 0 if i.function == self.parent else a[i.function]
        return m.funclet == home and tuple(f for f in m.chain if f in present) == tuple(a[s] for s in i.cover)

    def consistent(self, a: dict[str, int]) -> bool:
        present = set(a.values())
        for i in self.invokes:
            fits = [self._fits(i, m, a, present) for m in self.candidates(i)]
            exact = bool(i.callsites) and all(n in self.by_identity for n in i.callsites)
            if not (all(fits) if exact else any(fits)):
                return False
        return True

    def solve(self) -> tuple[dict[str, int], tuple[int, ...], str]:
        """The assignment, the model funclets other consistent assignments place elsewhere,
        and what chose between them ("" when nothing had to)."""
        solutions: list[dict[str, int]] = []
        d0 = {s: set(v) for s, v in self.domains.items()}
        if not self.propagate(d0):
            raise _error(self._why(d0), "funclet-match")

        def search(d: dict) -> None:
            self.tried += 1
            if self.tried > SEARCH_BUDGET:
                raise _error(f"no funclet assignment settled within {SEARCH_BUDGET} tries", "funclet-match")
            open_ = [s for s in self.symbols if len(d[s]) > 1]
            if not open_:
                a = {s: next(iter(d[s])) for s in self.symbols}
                if len(set(a.values())) == len(a) and self.consistent(a):
                    solutions.append(a)
                return
            s = min(open_, key=lambda x: (len(d[x]), self.symbols.index(x)))
            for value in sorted(d[s]):
                trial = {k: set(v) for k, v in d.items()}
                trial[s] = {value}
                if self.propagate(trial):
                    search(trial)
                if len(solutions) >= MAX_SOLUTIONS:
                    return

        search(d0)
        if not solutions:
            raise _error("no assignment of LLVM's funclets to the model's fits the clauses and invokes "
                         "of the object" + self._pins(), "funclet-match")
        if len(solutions) == 1:
            return solutions[0], (), ""
        # Evidence exhausted: prefer LLVM's funclet order = the module's pad order (always so
        # at O0), then the invokes' code order = the module's block order.
        keys = [(self.inversions(a), self.disorder(a)) for a in solutions]
        best = min(range(len(solutions)), key=lambda n: (keys[n], n))
        chosen = solutions[best]
        moved = {f for a in solutions for s in self.symbols if a[s] != chosen[s] for f in (a[s], chosen[s])}
        rivals = [k for n, k in enumerate(keys) if n != best]
        decided = ("module order" if all(k[0] != keys[best][0] for k in rivals) else
                   "invoke order" if all(k != keys[best] for k in rivals) else "search order")
        return chosen, tuple(sorted(moved)), decided

    def inversions(self, a: dict[str, int]) -> int:
        """Pairs of funclets LLVM laid out in the opposite order of their pads in the module."""
        seq = [a[s] for s in self.symbols]
        return sum(1 for x in range(len(seq)) for y in range(x + 1, len(seq)) if seq[x] > seq[y])

    def disorder(self, a: dict[str, int]) -> int:
        """Pairs of invokes whose code order is the opposite of the module order of the model
        invokes they match under `a`, per function."""
        present = set(a.values())
        by_function: dict[str, list[int]] = defaultdict(list)
        for i in self.invokes:
            positions = [m.position for m in self.candidates(i) if self._fits(i, m, a, present)]
            if positions:
                by_function[i.function].append(min(positions))
        return sum(1 for seq in by_function.values()
                   for x in range(len(seq)) for y in range(x + 1, len(seq)) if seq[x] > seq[y])

    def _why(self, d: dict) -> str:
        empty = [s for s in self.symbols if not d[s]]
        if empty and empty[0] in self.pinned:
            return (f"LLVM's {empty[0]} carries {self.pinned[empty[0]]}, but the clauses and invokes of the "
                    f"object say otherwise (its try, or a dispatch chain)" + self._pins())
        if empty:
            return f"no model funclet fits LLVM's {empty[0]} (kind, class token, calls, try, invokes)" + self._pins()
        return "the invokes of the object fit no invoke of the model" + self._pins()

    def _pins(self) -> str:
        if not self.pinned:
            return ""
        return "; pad markers: " + "; ".join(f"{s}: {what}" for s, what in self.pinned.items())


__all__ = ["MAX_SOLUTIONS", "SEARCH_BUDGET", "FuncletMatch", "match_funclets"]
