"""The LLVM differential: our clause table against LLVM's own CoreCLR table of the same code.

    compare_with_llvm(ours, llvm, return_addresses=...) -> Differential

Both tables describe one object's code in LLVM's layout (`generate.placed_from_recovered`
for ours, `backend.llvm_table.decode_llvm_clr_table` for LLVM's). LLVM's table is no
authority (decision 10) but an independent walk of the same code, so every difference
must be one of LLVM's known quirks -- normalised away and counted -- or a classified
difference with its reason.

What is compared
----------------
The runtime looks up return addresses only (`generate`'s docstring), so a try range is
compared by the set of call return addresses it covers -- given `return_addresses`, every
call's in the layout -- never by its bytes. A clause is then (kind, class token, handler
funclet, covered return addresses); primaries are compared in order, duplicates as a set
per (handler, funclet).

LLVM's quirks (normalised, counted in `Differential.quirks`)
------------------------------------------------------------
try-plus-one            LLVM's try offsets are its EH labels + 1 (both ends), ours call
                        start + 1 and return + 1: both cover a call's return address
                        and nothing of its neighbours; only the covered set is compared.
try-bounds              LLVM's begin label precedes the argument set-up, its end label
                        follows the `nop` after the call: other bytes, same calls covered.
handler-end-padding     LLVM ends a handler where the next funclet starts (its table's
                        `ends` list), alignment padding included; we end it at the last
                        instruction, as the funclet's code range (.pdata) does.
primary-after-duplicate LLVM writes clauses in its walk order, funclet by funclet, so a
                        primary of a try inside a funclet may follow a duplicate of an
                        earlier funclet (the runtime stops at the first duplicate).
                        Primaries and duplicates are compared apart.
duplicate-runs          LLVM's duplicates cover the runs of a funclet's invokes that reach
                        the outer handler; ours cover the whole funclet (RyuJIT's rule).
                        Same return addresses when every call in the funclet reaches it.
duplicate-no-calls      a funclet without calls (an empty `catch {}`) inside an outer try:
                        we cover it with a duplicate, LLVM writes none (no invoke, no
                        state change); no return address is covered either way.
split-try               a handler reached from several disjoint runs gets one clause per
                        run on both sides ("LLVM's handler copies"); counted, compared as
                        any primary.
walk-order              LLVM's walk visits the root, then each funclet in its layout, so
                        its primaries come code range by code range: a try inside a
                        handler after that handler's own clause (which decision 10 and the
                        validator's primary-order rule want the other way round). Ours in
                        that order equal LLVM's.
split-at-quiet-call     LLVM's walk closes the open clauses at every call it cannot prove
                        nounwind, also at calls that raise nothing in this frame: a tail
                        jump (at O2 a call after a try becomes one; the frame is gone when
                        its callee throws) and LLVM's own `__chkstk` probe before a dynamic
                        alloca (localloc). So a try whose code surrounds one gets two
                        clauses; no return address lies in the gap and we keep one clause
                        over both runs. Given the quiet calls' offsets, a split is
                        recognised only with one of them in every gap.

Differences (`Differential.differences`, each with a reason)
-------------------------------------------------------------
filter-as-catch         explained: LLVM has no CLR filter clauses ("NYI: filters"); our
                        filter handler's catchpad carries marker 0, so LLVM reports a catch
                        with class token 0 over the filter-handler funclet. The try and
                        handler still must agree.
stray-block             explained: LLVM laid a block of a funclet (its catchret tail, with
                        calls) inside the parent's code range, so in LLVM's own layout that
                        funclet's calls sit in another funclet's .pdata range: no clause
                        table can be right for that layout (the runtime would take those
                        calls for the parent's), LLVM's included. The final image moves the
                        block home (`backend.relink`'s stray tails) and our table is made
                        from it; the comparison in LLVM's layout is not made.
order                   explained when LLVM's order is legal too (inner before outer): its
                        walk closes clauses as it meets state changes, so unrelated tries
                        may come in another order; ours sorts them lower before higher.
order-illegal, split-run, missing-in-llvm, missing-in-ours, coverage, kind, token, handler,
duplicate-coverage      unexplained: a real disagreement, to be looked at.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..assembly.native import NativeClause, NativeMethod
from ..backend.codegen import object_symbol
from ..backend.coff import CoffObject
from ..backend.llvm_table import decode_llvm_clr_table
from ..backend.recover import RecoveredCode
from ..errors import ClauseError
from ..funclets.model import FuncletModel
from .generate import NON_THROWING_CALLEES, generate_clauses, placed_from_recovered
from .validate import validate

EXPLAINED = frozenset({"filter-as-catch", "order", "stray-block"})
QUIRKS = ("try-plus-one", "try-bounds", "handler-end-padding", "primary-after-duplicate", "walk-order",
          "split-at-quiet-call", "duplicate-runs", "duplicate-no-calls", "split-try")


@dataclass(frozen=True)
class Difference:
    reason: str
    detail: str
    ours: tuple[int, ...] = ()      # clause indices in our table
    llvm: tuple[int, ...] = ()      # clause indices in LLVM's

    @property
    def explained(self) -> bool:
        return self.reason in EXPLAINED

    def __str__(self) -> str:
        tag = "explained" if self.explained else "UNEXPLAINED"
        return f"{self.reason} ({tag}): {self.detail}"


@dataclass(frozen=True)
class Differential:
    quirks: Mapping[str, int]
    differences: tuple[Difference, ...]
    ours: int = 0                   # clause counts
    llvm: int = 0
    details: tuple[str, ...] = field(default=(), compare=False)

    @property
    def clean(self) -> bool:
        """Equal once LLVM's quirks are normalised."""
        return not self.differences

    @property
    def unexplained(self) -> tuple[Difference, ...]:
        return tuple(d for d in self.differences if not d.explained)

    @property
    def classification(self) -> str:
        """One word for a method: clean, explained (only explained differences), unexplained."""
        return "clean" if self.clean else "explained" if not self.unexplained else "unexplained"

    def __str__(self) -> str:
        quirks = ", ".join(f"{k} x{v}" for k, v in self.quirks.items() if v) or "none"
        lines = [f"{self.classification}: ours {self.ours} clauses, LLVM's {self.llvm}; quirks: {quirks}"]
        lines += [f"  {d}" for d in self.differences]
        return "\n".join(lines)


@dataclass(frozen=True)
class _Key:
    kind: str
    token: int | None
    handler: int                    # handler start
    region: int | None              # index of the code range holding the try (0: main body)
    covered: frozenset[int]


def compare_with_llvm(ours: NativeMethod, llvm: Iterable[NativeClause],
                      return_addresses: Iterable[int] | None = None,
                      quiet_calls: Iterable[int] | None = None) -> Differential:
    """Our table against LLVM's (module docstring). `return_addresses`: every call's return
    address in the layout both tables describe (the calls the generator saw); without them
    tries compare by their bytes (LLVM's shifted back by one). `quiet_calls`: the offsets of
    the calls that raise nothing in this frame -- tail jumps, LLVM's own `__chkstk` --
    which let a run LLVM split at one be recognised."""
    llvm = tuple(llvm)
    rets = sorted(set(return_addresses)) if return_addresses is not None else None
    regions = (ours.main, *ours.funclets)
    starts = sorted(r.start for r in ours.funclets)
    quirks: Counter = Counter()
    diffs: list[Difference] = []

    def region_of(start: int, end: int) -> int | None:
        for i, r in enumerate(regions):
            if r.start <= start and end <= r.end:
                return i
        return None

    def covered(start: int, end: int) -> frozenset[int]:
        if rets is None:
            return frozenset({start, end})
        return frozenset(r for r in rets if start <= r < end)

    def funclet_end(start: int) -> int | None:
        return next((r.end for r in ours.funclets if r.start == start), None)

    def key(c: NativeClause, shifted: bool) -> _Key:
        lo, hi = (c.try_start - 1, c.try_end - 1) if shifted and rets is None else (c.try_start, c.try_end)
        kind = c.kind
        token = c.class_token_or_filter if kind == "catch" else None
        return _Key(kind, token, c.handler_start, region_of(c.try_start, c.try_end - 1), covered(lo, hi))

    # -- handlers: LLVM's end includes the padding up to the next funclet -----------------
    for c in llvm:
        end = funclet_end(c.handler_start)
        if end is not None and c.handler_end != end:
            following = [s for s in starts if s > c.handler_start]
            if end < c.handler_end and (not following or c.handler_end <= following[0]):
                quirks["handler-end-padding"] += 1
            else:
                diffs.append(Difference("handler", f"LLVM's handler [{c.handler_start:#x}, {c.handler_end:#x}) is "
                                                   f"no funclet of ours (ends at {end:#x})", llvm=(llvm.index(c),)))
        elif end is None:
            diffs.append(Difference("handler", f"LLVM's handler at {c.handler_start:#x} starts no funclet of ours",
                                    llvm=(llvm.index(c),)))
    for c in llvm:
        if rets is not None:
            quirks["try-plus-one"] += 1

    # -- primaries, in order ------------------------------------------------------------------
    lp = [i for i, c in enumerate(llvm) if not c.is_duplicate]
    op = [i for i, c in enumerate(ours.clauses) if not c.is_duplicate]
    if any(i > j for i in lp for j, c in enumerate(llvm) if c.is_duplicate):
        quirks["primary-after-duplicate"] += 1
    lkeys = [key(llvm[i], True) for i in lp]
    okeys = [key(ours.clauses[i], False) for i in op]
    okeys = [_filter_as_catch(k, ours.clauses[i], diffs, i) for k, i in zip(okeys, op)]
    for keys in (lkeys, okeys):
        handlers = Counter(k.handler for k in keys)
        quirks["split-try"] += sum(n - 1 for n in handlers.values()) if keys is okeys else 0
    if rets is not None:
        for i, c in zip(lp, lkeys):
            o = next((k for k in okeys if k == c), None)
            if o is not None and _raw_try(llvm[i], True) != _raw_try_of(ours, okeys.index(o), op):
                quirks["try-bounds"] += 1
    _compare_sequences(ours, llvm, okeys, op, lkeys, lp, diffs, quirks,
                       sorted(quiet_calls) if quiet_calls is not None else None)

    # -- duplicates, as coverage per (handler, funclet) ------------------------------------------
    def dup_cover(table, shifted):
        out: dict[tuple[int, int | None], set[int]] = {}
        index: dict[tuple[int, int | None], list[int]] = {}
        for i, c in enumerate(table):
            if not c.is_duplicate or c.is_cloned_finally:
                continue
            k = key(c, shifted)
            out.setdefault((c.handler_start, k.region), set()).update(k.covered)
            index.setdefault((c.handler_start, k.region), []).append(i)
        return out, index

    ld, lidx = dup_cover(llvm, True)
    od, oidx = dup_cover(ours.clauses, False)
    for where in sorted(set(ld) | set(od), key=lambda w: (w[0], -1 if w[1] is None else w[1])):
        a, b = od.get(where), ld.get(where)
        if a is not None and b is not None and a == b:
            if len(lidx[where]) != len(oidx[where]) or any(
                    (llvm[i].try_start, llvm[i].try_end) != (regions[where[1]].start, regions[where[1]].end)
                    for i in lidx[where] if where[1] is not None):
                quirks["duplicate-runs"] += 1
            continue
        if a is not None and b is None and not a:
            quirks["duplicate-no-calls"] += 1
            continue
        diffs.append(Difference("duplicate-coverage",
                                f"duplicates of the handler at {where[0]:#x} over code range {where[1]}: ours cover "
                                f"{_hex(a)}, LLVM's {_hex(b)}", tuple(oidx.get(where, ())), tuple(lidx.get(where, ()))))
    return Differential(dict(quirks), tuple(diffs), len(ours.clauses), len(llvm))


def _filter_as_catch(k: _Key, c: NativeClause, diffs: list[Difference], i: int) -> _Key:
    """Our filter clause as LLVM writes it: a catch with class token 0 (classified, explained)."""
    if c.kind != "filter":
        return k
    diffs.append(Difference("filter-as-catch", f"our filter clause (filter at {c.filter_start:#x}, handler at "
                                               f"{c.handler_start:#x}) is a catch with token 0 in LLVM's table",
                            ours=(i,)))
    return _Key("catch", 0, k.handler, k.region, k.covered)


def _raw_try(c: NativeClause, shifted: bool) -> tuple[int, int]:
    return (c.try_start - 1, c.try_end - 1) if shifted else (c.try_start, c.try_end)


def _raw_try_of(ours: NativeMethod, k: int, op: list[int]) -> tuple[int, int]:
    c = ours.clauses[op[k]]
    return (c.try_start - 1, c.try_end - 1)     # ours: call start, return address


def _region_rank(ours: NativeMethod, region: int | None) -> int:
    """Where a code range lies in the layout (LLVM walks them in address order)."""
    if region is None:
        return -1
    return ours.main.start if region == 0 else ours.funclets[region - 1].start


def _compare_sequences(ours, llvm, okeys, op, lkeys, lp, diffs, quirks, quiet_calls) -> None:
    remaining = list(range(len(lkeys)))
    matched: list[tuple[int, int]] = []     # (our position, LLVM position)
    for a, k in enumerate(okeys):
        b = next((b for b in remaining if lkeys[b] == k), None)
        parts = [] if b is not None else _split_parts(k, [lkeys[x] for x in remaining])
        if parts:       # ordered by its last part: where LLVM closes what encloses the parts
            raw = sorted((llvm[lp[remaining[x]]].try_start, llvm[lp[remaining[x]]].try_end) for x in parts)
            gaps = list(zip((e for _, e in raw), (s for s, _ in raw[1:])))
            if quiet_calls is not None and all(any(end - 1 <= t < start for t in quiet_calls) for end, start in gaps):
                quirks["split-at-quiet-call"] += 1
            else:
                diffs.append(Difference("split-run", f"our clause (handler at {k.handler:#x}) covers "
                                                     f"{_hex(k.covered)} in one range, LLVM's in {len(parts)} with no "
                                                     f"return address and no quiet call between them",
                                        (op[a],), tuple(lp[remaining[x]] for x in parts)))
            b = remaining[parts[-1]]
            for x in sorted(parts[:-1], reverse=True):
                remaining.pop(x)
        if b is None:
            near = next((b for b in remaining if (lkeys[b].handler, lkeys[b].region) == (k.handler, k.region)
                         and lkeys[b].covered & k.covered), None)
            if near is not None:
                remaining.remove(near)
                o, l_ = k, lkeys[near]
                what = ("kind" if o.kind != l_.kind else "token" if o.token != l_.token else "coverage")
                diffs.append(Difference(what, f"handler at {o.handler:#x}: ours {o.kind} {_tok(o)} covering "
                                              f"{_hex(o.covered)}, LLVM's {l_.kind} {_tok(l_)} covering "
                                              f"{_hex(l_.covered)}", (op[a],), (lp[near],)))
            else:
                diffs.append(Difference("missing-in-llvm", f"our {k.kind} clause (handler at {k.handler:#x}, covering "
                                                           f"{_hex(k.covered)}) has no counterpart", (op[a],)))
            continue
        remaining.remove(b)
        matched.append((a, b))
    for b in remaining:
        k = lkeys[b]
        diffs.append(Difference("missing-in-ours", f"LLVM's {k.kind} clause (handler at {k.handler:#x}, covering "
                                                   f"{_hex(k.covered)}) has no counterpart", llvm=(lp[b],)))
    llvm_order = [b for _, b in sorted(matched)]
    # LLVM's walk visits the root, then each funclet in its layout: its primaries come region
    # by region (a try inside a handler after the handler's own clause). Ours in that order:
    by_region = [b for _, b in sorted(matched, key=lambda m: (_region_rank(ours, okeys[m[0]].region), m[0]))]
    if llvm_order != sorted(llvm_order) and by_region == sorted(by_region):
        quirks["walk-order"] += 1
    elif llvm_order != sorted(llvm_order):
        legal = not validate(NativeMethod(ours.main, ours.funclets, tuple(llvm[i] for i in lp)),
                             rules=("primary-order",))
        diffs.append(Difference("order" if legal else "order-illegal",
                                f"the primaries match but come in another order (LLVM's positions {llvm_order} for "
                                f"ours in order); LLVM's order is {'' if legal else 'not '}inner before outer",
                                tuple(op[a] for a, _ in matched), tuple(lp[b] for _, b in matched)))


def _split_parts(k: _Key, candidates: list[_Key]) -> list[int]:
    """Positions of LLVM clauses of k's handler whose covered calls partition k's (two or
    more of them), else []."""
    parts = [i for i, c in enumerate(candidates) if (c.kind, c.token, c.handler, c.region)
             == (k.kind, k.token, k.handler, k.region) and c.covered and c.covered <= k.covered]
    union = set()
    for i in parts:
        if union & candidates[i].covered:
            return []
        union |= candidates[i].covered
    return parts if len(parts) > 1 and union == k.covered else []


def _tok(k: _Key) -> str:
    return f"0x{k.token:08X}" if k.token is not None else ""


def _hex(xs) -> str:
    return "nothing" if xs is None else "{" + ", ".join(f"{x:#x}" for x in sorted(xs)) + "}"


def llvm_differential(model: FuncletModel, recovered: RecoveredCode, coff: CoffObject,
                      code: Mapping[int, str] | None = None) -> Differential:
    """The whole comparison for one compiled method: our table in LLVM's layout
    (`generate.placed_from_recovered`, profile coreclr-psp: LLVM writes duplicates, no
    SAMETRY) against LLVM's own (`decode_llvm_clr_table`; none written: empty), with the
    layout's return addresses and tail jumps. `code`: the funclet match, when the caller has
    it (`FinalImage.funclet_code`); else it is made again."""
    table = decode_llvm_clr_table(coff, object_symbol(model.parent))
    placed = placed_from_recovered(model, recovered, coff, code)
    try:
        ours = generate_clauses(model, placed)
    except ClauseError as e:
        if e.kind != "callsite-region":
            raise
        return Differential({}, (Difference("stray-block", e.reason),), 0,
                            len(table.clauses) if table is not None else 0)
    parent = recovered.function(object_symbol(model.parent))
    return compare_with_llvm(ours, table.clauses if table is not None else (),
                             [c.return_address for c in placed.calls], quiet_calls(recovered, parent.name))


def quiet_calls(recovered: RecoveredCode, parent: str) -> list[int]:
    """Offsets (from the parent's start) of the method's calls that raise nothing in its
    frame: tail jumps, and calls of LLVM's own that the generator ignores."""
    base = recovered.function(parent).start
    return [s.offset - base for f in recovered.method_functions(parent) for s in f.calls
            if s.return_offset is None or (not s.callsites and s.callee in NON_THROWING_CALLEES)]


__all__ = ["EXPLAINED", "QUIRKS", "Difference", "Differential", "compare_with_llvm", "llvm_differential",
           "quiet_calls"]
