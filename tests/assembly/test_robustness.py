"""The robustness campaign in the suite (issue 12, item 8): a few hundred seeded mutants of
real assemblies -- the embedded sample, a small and a mid-sized ReadyToRun framework assembly
-- through every step a user runs (load, listing, il analysis, the reader, the whole pipeline
for a few, the ReadyToRun checks). Every outcome must be clean or a named error of a stage the
step reaches; `internal`, `wrong-stage`, `hang` and `bad-ir` (IR of ours that LLVM refuses)
are defects. `tools/mutate.py` is the same
harness at scale (tens of thousands of mutants, `--replay SEED` for one).

The negative controls prove the harness can fail: a genuine bug of ours (a KeyError), an
error of a stage the step cannot reach, a step that never ends and IR LLVM refuses are each
classified as the defect they are.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from llilc_eh.errors import ReaderError

REPO = Path(__file__).resolve().parents[2]
SEEDS = range(100_000, 100_360)      # 360 mutants, 120 of each source
PIPELINE_EVERY = 120                 # three of them through the whole pipeline


def _load_tool():
    spec = importlib.util.spec_from_file_location("llilc_eh_tools_mutate", REPO / "tools" / "mutate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module      # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


mutate = _load_tool()


@pytest.fixture(scope="module")
def runner():
    r = mutate.Runner(mutate.default_sources(), pipeline_every=PIPELINE_EVERY, time_limit=10)
    yield r
    r.close()


@pytest.fixture(scope="module")
def reports(runner):
    return [runner.run(seed) for seed in SEEDS]


def test_every_mutant_ends_clean_or_in_a_named_error_of_its_stage(reports):
    defects = [f"seed {r.seed} {r.source} [{'; '.join(r.changes)}] {o.step}: {o.result} {o.detail}"
               for r in reports for o in r.defects]
    assert not defects, "\n".join(defects)
    for r in reports:
        for o in r.outcomes:
            if o.result != "ok":
                stage, _, kind = o.result.partition("/")
                assert stage in mutate.ALLOWED_STAGES[o.step], (r.seed, o)
                # a stable kind someone chose (not the class-name default of an unnamed error)
                assert re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", kind), (r.seed, o)


def test_the_campaign_reaches_every_layer(reports):
    """Not vacuous: every strategy ran, mutants fail in many distinct ways, most still load,
    and the reader, the whole pipeline and the R2R checks all ran on some."""
    strategies = Counter(s for r in reports for s in r.strategies)
    assert set(strategies) == set(mutate.STRATEGIES), strategies
    results = Counter(o.result for r in reports for o in r.outcomes if o.result != "ok")
    assert len(results) >= 20, results
    steps = Counter(o.step for r in reports for o in r.outcomes if o.result == "ok")
    assert steps["load"] > len(SEEDS) // 2
    assert steps["reader"] > 0 and steps["r2r"] > 0
    assert steps["pipeline"] + sum(o.step == "pipeline" for r in reports for o in r.outcomes) >= 1
    assert any(o.result.startswith(("il/", "reader/")) for r in reports for o in r.outcomes)


def test_mutants_are_reproducible_by_seed(runner):
    a, b = runner.mutant(12345), runner.mutant(12345)
    assert a.data == b.data and a.changes == b.changes
    sources = {x.path.name: x.data for x in runner.anatomies}
    differ = sum(runner.mutant(seed).data != sources[runner.mutant(seed).source] for seed in range(30))
    assert differ >= 25       # a few changes write the value a field already had


def test_control_a_bug_of_ours_is_internal(runner, monkeypatch):
    import llilc_eh.il.method

    def broken(body):
        raise KeyError("a bug of ours")
    monkeypatch.setattr(llilc_eh.il.method, "analyze", broken)
    report = runner.execute(runner.clean(0))
    assert [o.result for o in report.outcomes if o.step == "il"] == ["internal/KeyError"], report.outcomes
    assert report.defects


def test_control_an_error_of_an_unreachable_stage_is_wrong_stage(runner, monkeypatch):
    from llilc_eh.assembly.loader import Assembly

    def body(self, rid):
        raise ReaderError("the reader cannot run while listing", kind="impossible")
    monkeypatch.setattr(Assembly, "body", body)
    report = runner.execute(runner.clean(0))
    assert any(o.result == "wrong-stage/reader/impossible" for o in report.outcomes), report.outcomes


def test_control_a_step_that_never_ends_is_a_hang(monkeypatch):
    import llilc_eh.il.method

    def forever(body):
        while True:
            pass
    monkeypatch.setattr(llilc_eh.il.method, "analyze", forever)
    r = mutate.Runner(mutate.default_sources()[:1], pipeline_every=0, time_limit=1)
    try:
        report = r.execute(r.clean(0))
    finally:
        r.close()
    assert [o.result for o in report.outcomes][-1] == "hang", report.outcomes


def test_control_ir_llvm_refuses_is_a_defect():
    """A damaged method must be refused by the reader's own checks at its IL offset; IR that
    LLVM's parser or verifier refuses is a bug of ours even though it is a named error."""
    for kind in ("llvm-parse", "llvm-verify"):
        outcome = mutate.classify("reader", ReaderError("LLVM cannot parse the module", kind=kind))
        assert outcome.result == f"bad-ir/reader/{kind}" and outcome.defect
    assert not mutate.classify("reader", ReaderError("stack underflow", kind="stack-underflow")).defect
