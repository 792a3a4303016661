"""The region checks over every method with EH of the real corpus: zero false errors.

The corpus is production code (the .NET Core 3.1 framework, Python.Runtime): every one of
its methods is legal IL, so every finding would be a false error of ours. The counts are
the facts measured independently (DESIGN.md); a drift means the reader lost or invented
methods or clauses.
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
    return {r.path: r for r in batch.run(files, jobs=2, progress=False)}


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
