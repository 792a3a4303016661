"""`validate --translate` over the whole real corpus: zero false errors, the measured counts,
and the whole pipeline on every method with EH.

The corpus is production code (the .NET Core 3.1 framework, Python.Runtime): every one of
its methods is legal IL and every native clause table RyuJIT wrote for it runs in
production, so every finding would be a false error of ours. The counts are facts
measured independently (DESIGN.md, issue figures); a drift means a reader lost or invented
methods, clauses, funclets or runtime functions.
"""

from __future__ import annotations

from collections import Counter

import pytest

from llilc_eh import batch
from llilc_eh.assembly.corpus import Corpus


@pytest.fixture(scope="module")
def reports():
    corpus = Corpus()
    files = [str(f.location) for f in corpus.files]
    return {r.path: r for r in batch.run(files, jobs=2, progress=False, translate=True)}


def _totals(reports, package):
    files = {str(f.location) for f in Corpus().of(package)}
    picked = [r for p, r in reports.items() if p in files]
    clauses = Counter()
    for r in picked:
        clauses.update(r.clauses)
    return picked, clauses


def test_no_false_errors(reports):
    failures = [(r.path, f) for r in reports.values() for f in r.failures]
    assert not failures, failures[:5]
    assert not [r.path for r in reports.values() if r.file_error]


def test_dotnetcore2_counts(reports):
    picked, clauses = _totals(reports, "dotnetcore2")
    assert len(picked) == 165
    assert sum(r.with_il for r in picked) == 96_589
    assert sum(r.with_eh for r in picked) == 5_374
    assert clauses == {"catch": 2_927, "filter": 143, "finally": 4_338, "fault": 65}
    assert max(r.max_try_depth for r in picked) == 12
    assert sum(r.try_in_handler for r in picked) == 44


def test_python_runtime_counts(reports):
    picked, clauses = _totals(reports, "pythonnet")
    assert [r.with_eh for r in picked] == [319]
    assert sum(clauses.values()) == 469


def test_ryujit_tables(reports):
    corelib = next(r for p, r in reports.items() if p.endswith("System.Private.CoreLib.dll")).native
    assert (corelib.eh_bodies, sum(corelib.clauses.values()), corelib.funclets, corelib.runtime_functions) == \
        (1_254, 1_730, 1_525, 29_855)
    natives = [r.native for r in reports.values() if r.native]
    assert len(natives) == 163          # mscorlib and System.Runtime.WindowsRuntime are IL-only
    assert sum(n.eh_bodies for n in natives) == 6_059
    assert sum(sum(n.clauses.values()) for n in natives) == 10_887
    assert sum(n.unwind_infos for n in natives) == 50_961
    assert sum(n.unwind_round_trip_failures for n in natives) == 0
    assert [f for n in natives for f in n.findings] == []


def test_il_vs_native_is_fully_explained(reports):
    details = Counter()
    for r in reports.values():
        if r.native:
            details.update(r.native.comparison_details)
    assert details["unexplained"] == 0 and details["nesting-mismatch"] == 0
    assert details["kept"] > 4_000 and details["finally-became-fault"] > 3_000


def test_every_eh_method_goes_end_to_end(reports):
    """Every EH method of the corpus (issue figures: 5,374 + 319) goes through the whole
    pipeline at O2: verified, lint-clean IR, LLVM's code, a final image that verifies, a
    clause table from it that the validator passes, unwind data, and LLVM's own table
    agreeing but for explained differences."""
    failures = [(r.path, f) for r in reports.values() for f in r.translate_failures]
    assert not failures, failures[:5]
    assert sum(r.translated for r in reports.values()) == 5_374 + 319
    differential = Counter()
    for r in reports.values():
        differential.update(r.differential)
    assert sum(differential.values()) == 5_374 + 319 and differential["unexplained"] == 0
