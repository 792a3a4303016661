"""check.dispatch on RyuJIT's tables: ReadyToRun DEBUG_INFO and CoreLib's EH bodies.

* the debug-info reader on every CoreLib body with EH: bounds in native order, IL offsets
  inside the body or a sentinel, the prolog first; a body's entries land in its own IL;
* every CoreLib body with EH and IL dispatches as its IL says at every call the bounds
  place: no unexplained mismatch (an explained one: the bounds put the call where another
  region dispatches alike -- optimized code keeps sparse bounds);
* negative controls: mutants of RyuJIT's real tables (a try one byte short, a dropped
  duplicate, two clauses swapped) are reported as mismatches.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.loader import Assembly
from llilc_eh.assembly.r2r.debuginfo import DebugInfo, Mapping
from llilc_eh.assembly.r2r.reader import ReadyToRunImage
from llilc_eh.check.compare import compare
from llilc_eh.check.dispatch import TypeOracle, check_ryujit
from llilc_eh.il.method import analyze
from llilc_eh.reader.jitee import JitEE


@pytest.fixture(scope="module")
def corelib():
    asm = Assembly(Corpus().framework_dir / "System.Private.CoreLib.dll")
    image = ReadyToRunImage(asm)
    return asm, image, DebugInfo(image), TypeOracle(JitEE(asm))


def _bodies(corelib):
    asm, image, debug, _ = corelib
    for m in image.methods(eh_only=True):
        if m.has_il and m.tokens:
            rid = m.tokens[0] & 0xFFFFFF
            il = analyze(asm.body(rid))
            if not il.errors:
                yield m, il, debug.bounds(m.main.index), asm.is_synchronized(rid)


def test_debug_info_bounds(corelib):
    asm, image, debug, _ = corelib
    assert debug.present
    with_bounds = 0
    bodies = list(_bodies(corelib))
    for m, il, bounds, _ in bodies:
        if bounds is None or not bounds.entries:
            continue
        with_bounds += 1
        natives = [e.native_offset for e in bounds.entries]
        assert natives == sorted(natives)
        assert bounds.entries[0].il_offset == Mapping.PROLOG and natives[0] == 0
        assert all(e.native_offset <= m.native.code_size for e in bounds.entries)
        starts = {i.offset for i in il.instructions}
        assert all(e.il_offset in starts or e.il_offset < 0 or e.il_offset == il.body.code_size
                   for e in bounds.entries), m.tokens
    assert len(bodies) > 1200 and with_bounds > 0.95 * len(bodies)


def _check(corelib, m, il, bounds, sync, native=None):
    asm, _, _, oracle = corelib
    if native is not None:
        m = dataclasses.replace(m, native=dataclasses.replace(m.native, clauses=tuple(native)))
    return check_ryujit(asm, m, bounds, il, compare(il.body.clauses, m.native, synchronized=sync), oracle,
                        synchronized=sync)


def test_corelib_dispatches_as_its_il_says(corelib):
    sites = scenarios = mismatches = weak = 0
    unexplained = []
    for m, il, bounds, sync in _bodies(corelib):
        d = _check(corelib, m, il, bounds, sync)
        sites += len(d.sites)
        scenarios += d.scenarios
        mismatches += len(d.mismatches)
        unexplained += d.unexplained
        weak += sum(1 for s in d.sites if not s.equal and "WEAK" in (s.explanation or ""))
    assert sites > 14000 and scenarios > 17000
    assert [str(u) for u in unexplained] == []
    assert mismatches < 0.02 * scenarios       # explained ones: imprecise bounds, rare
    assert weak <= 0.001 * sites, weak         # and those only some region explains, rarer


def _covers(c, pc):
    return c.try_start <= pc < c.try_end


def test_mutants_of_ryujit_tables_are_reported(corelib):
    found = Counter()
    for m, il, bounds, sync in _bodies(corelib):
        d = _check(corelib, m, il, bounds, sync)
        if d.mismatches:
            continue                 # judge mutants only where the real table is clean
        pcs = {s.pc for s in d.sites}
        clauses = list(m.native.clauses)
        mutants = []
        for i, c in enumerate(clauses):
            if not c.is_duplicate and (c.try_end - 1) in pcs:
                shorter = clauses[:]
                shorter[i] = dataclasses.replace(c, try_end=c.try_end - 1)
                mutants.append(("shorten", shorter))
                break
        for i, c in enumerate(clauses):
            if c.is_duplicate and not c.is_cloned_finally and any(_covers(c, p) for p in pcs):
                mutants.append(("drop-duplicate", clauses[:i] + clauses[i + 1:]))
                break
        for name, mutated in mutants:
            found[name, bool(_check(corelib, m, il, bounds, sync, mutated).mismatches)] += 1
    for name in ("shorten", "drop-duplicate"):
        reported, missed = found[name, True], found[name, False]
        assert reported > 50, found
        assert missed <= 0.01 * (reported + missed), found
