"""check.dispatch: the CLR's two passes over a native table vs ECMA-335 over the IL.

* the simulator on hand-written tables (table order, end offsets, the limit clause,
  duplicates, cloned-finally clauses, filters);
* every EH method of the embedded sample through the whole pipeline at O0 and O2: every
  call site and scenario dispatches as the IL says (0 mismatches) -- the positive result;
* mutations of real tables (swap two clauses, shorten a try by one byte, drop a duplicate,
  move a filter): each is a reported mismatch -- the negative controls that show the
  comparison can fail.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest

from llilc_eh.assembly.loader import Assembly
from llilc_eh.assembly.native import ClauseFlags, NativeClause
from llilc_eh.check.dispatch import (
    Event,
    Scenario,
    TypeOracle,
    check_ours,
    clr_dispatch,
)
from llilc_eh.cli import sample_path
from llilc_eh.pipeline import Pipeline, eh_methods


class _Names:
    """A stand-in type hierarchy for the simulator-only tests: token -> ancestry."""

    def __init__(self, table):
        self.table = table

    def class_ancestry(self, token):
        return self.table[token]


EXC, ARG, IOE = 0x01000010, 0x01000011, 0x01000012
ORACLE = TypeOracle(_Names({
    EXC: ("[corelib]System.Exception", "[corelib]System.Object"),
    ARG: ("[corelib]System.ArgumentException", "[corelib]System.Exception", "[corelib]System.Object"),
    IOE: ("[corelib]System.InvalidOperationException", "[corelib]System.Exception", "[corelib]System.Object"),
}))


def clause(flags, try_start, try_end, handler_start, handler_end, token=0):
    return NativeClause(ClauseFlags(flags), try_start, try_end, handler_start, handler_end, token)


def never(_):
    return None


def test_table_order_end_offsets_and_limit_clause():
    # inner finally, a catch of ArgumentException, outer finally: [0x10, 0x20) protects 0x1f, not 0x20
    table = [clause(2, 0x10, 0x20, 0x40, 0x50), clause(0, 0x10, 0x30, 0x50, 0x60, ARG),
             clause(2, 0x10, 0x38, 0x60, 0x70)]
    d = clr_dispatch(table, 0x1F, Scenario(ARG), ORACLE, never)
    assert d.events == (Event("test", 1, True), Event("cleanup", 0), Event("catch", 1))
    # a derived class is caught by its base's catch; an unrelated one runs both finallys
    assert clr_dispatch(table, 0x20, Scenario(IOE), ORACLE, never).events == (
        Event("test", 1, False), Event("cleanup", 2), Event("leaves", None))
    # the try's end is exclusive: the return address 0x38 is outside everything
    assert clr_dispatch(table, 0x38, Scenario(None), ORACLE, never).events == (Event("leaves", None),)
    # base-class catch takes the derived exception
    base = [clause(0, 0, 8, 8, 9, EXC)]
    assert clr_dispatch(base, 4, Scenario(ARG), ORACLE, never).catcher == 0


def test_filters_duplicates_and_cloned_finally():
    table = [clause(1, 0x10, 0x20, 0x50, 0x60, 0x40),        # filter, its code at 0x40
             clause(0, 0x10, 0x20, 0x60, 0x70, EXC),
             clause(0 | 8, 0x70, 0x80, 0x60, 0x70, EXC),      # duplicate for a funclet at 0x70
             clause(2 | 8, 0x30, 0x30, 0x30, 0x38)]            # cloned finally: empty try
    il = {0: 7, 1: 8, 2: 8}
    d = clr_dispatch(table, 0x18, Scenario(None, accepting=7), ORACLE, il.get)
    assert d.events == (Event("filter", 0, True), Event("catch", 0))
    d = clr_dispatch(table, 0x18, Scenario(None), ORACLE, il.get)
    assert d.events == (Event("filter", 0, False), Event("test", 1, True), Event("catch", 1))
    # a throw in the funclet finds the enclosing catch through the duplicate
    assert clr_dispatch(table, 0x75, Scenario(IOE), ORACLE, il.get).catcher == 2
    # nothing covers the cloned finally's empty try
    assert clr_dispatch(table, 0x30, Scenario(None), ORACLE, il.get).events == (Event("leaves", None),)


# --------------------------------------------------------------------------------------------
# The sample through the whole pipeline


@pytest.fixture(scope="module")
def sample():
    return Assembly(sample_path())


@pytest.fixture(scope="module")
def runs(sample, pool):
    out = {}
    for opt in (0, 2):
        pipeline = Pipeline(sample, pool, opt=opt)
        out[opt] = (pipeline, list(pipeline.stream(eh_methods(sample))))
    return out


@pytest.mark.parametrize("opt", [0, 2])
def test_sample_dispatches_as_the_il_says(runs, opt):
    _, done = runs[opt]
    checks = [r.dispatch for r in done]
    assert all(c is not None for c in checks), [r.name for r in done if r.dispatch is None]
    assert sum(len(c.sites) for c in checks) > 400
    assert sum(c.scenarios for c in checks) > 700
    # every kind of event occurs: the check is not vacuous
    kinds = {e.kind for c in checks for s in c.sites for r in s.results for e in r.il}
    assert kinds == {"test", "filter", "cleanup", "catch", "leaves"}
    assert [str(m) for c in checks for m in c.mismatches] == []


def _mutants(run):
    """(name, mutated clause list) for each mutation that applies to `run`'s table, each
    chosen so that some call site is covered by what it changes."""
    clauses = list(run.clauses.clauses)
    pcs = sorted({s.pc for s in run.dispatch.sites})

    def covers(c, pc):
        return c.try_start <= pc < c.try_end

    terminating = {"finally", "fault"}
    for i in range(len(clauses)):
        for j in range(i + 1, len(clauses)):
            a, b = clauses[i], clauses[j]
            same_pass = (a.kind in terminating) == (b.kind in terminating)
            if same_pass and a.handler_start != b.handler_start and any(covers(a, p) and covers(b, p) for p in pcs):
                swapped = clauses[:]
                swapped[i], swapped[j] = b, a
                yield "swap", swapped
                break
        else:
            continue
        break
    for i, c in enumerate(clauses):
        if not c.is_duplicate and (c.try_end - 1) in pcs:
            shorter = clauses[:]
            shorter[i] = dataclasses.replace(c, try_end=c.try_end - 1)
            yield "shorten", shorter
            break
    for i, c in enumerate(clauses):
        if c.is_duplicate and any(covers(c, p) for p in pcs):
            yield "drop-duplicate", clauses[:i] + clauses[i + 1:]
            break
    filters = [i for i, c in enumerate(clauses) if c.kind == "filter" and not c.is_duplicate]
    for i in filters:
        later = [j for j in range(i + 1, len(clauses)) if not clauses[j].is_duplicate
                 and clauses[j].kind not in terminating and any(covers(clauses[i], p) and covers(clauses[j], p)
                                                                for p in pcs)]
        if later:
            moved = clauses[:i] + clauses[i + 1:]
            moved.insert(later[-1], clauses[i])     # after the later clause it shares call sites with
            yield "move-filter", moved
            break


@pytest.mark.parametrize("opt", [0, 2])
def test_mutations_are_reported(runs, opt):
    pipeline, done = runs[opt]
    seen = {}
    for run in done:
        assert not run.dispatch.mismatches         # negative control: the real table is clean
        for name, mutated in _mutants(run):
            m = copy.copy(run)
            m.clauses = dataclasses.replace(run.clauses, clauses=tuple(mutated))
            check = check_ours(m, pipeline.oracle)
            seen.setdefault(name, []).append(bool(check.mismatches))
    assert set(seen) == {"swap", "shorten", "drop-duplicate", "move-filter"}
    assert min(len(v) for v in seen.values()) >= 3, {k: len(v) for k, v in seen.items()}
    for name, found in seen.items():
        assert all(found), f"{name}: {found.count(False)} of {len(found)} mutants went unreported"


def test_a_mismatch_is_a_failure_record(runs):
    """run_failures (validate --translate's records, translate's exit 2) names every mismatch,
    with the return address as its offset; a clean run has none."""
    from llilc_eh.batch import dispatch_counts, run_failures
    pipeline, done = runs[2]
    run = next(r for r in done if r.dispatch.sites and any(c.kind == "catch" for c in r.clauses.clauses))
    assert not [f for f in run_failures(run) if f["kind"] == "dispatch-mismatch"] and run.ok
    m = copy.copy(run)
    m.clauses = dataclasses.replace(run.clauses, clauses=tuple(
        c for c in run.clauses.clauses if c.kind != "catch"))
    m.dispatch = check_ours(m, pipeline.oracle)
    failures = [f for f in run_failures(m) if f["kind"] == "dispatch-mismatch"]
    assert failures and not m.ok
    assert {f["offset"] for f in failures} <= {s.pc for s in m.dispatch.sites}
    assert all(f["method"] == run.name and "CLR [" in f["reason"] for f in failures)
    counts = dispatch_counts(m.dispatch)
    assert counts["mismatches"] == len(failures) and counts["methods"] == 1
