"""Null checks the reader leaves out and those it keeps (reader/nonnull.py, issue 16 item 4).

null_checks.il holds one method per rule, each reading fields inside a try whose handler
would see a wrongly omitted check: `this` read in one block and in blocks it dominates (one
check), a null `this` passed by `call`, a variable stored null after its check, a catch's
continuation that the try's check does not dominate, a local whose address is taken, a
method with a filter, a loop over a list, values that are never null. The counts below are
the checks the reader writes; the control counts them with every check written, so the
counting can tell. The program runs on CoreCLR with llilc-eh compiling its EH methods at O0
and O2 and must print what RyuJIT's run prints; every EH method goes through the whole
pipeline with the dispatch check (0 mismatches).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llilc_eh.assembly.loader import Assembly
from llilc_eh.check.toolchain import assemble, run_on_coreclr
from llilc_eh.pipeline import Pipeline, eh_methods
from null_check_counts import count_checks, write_every_check

HERE = Path(__file__).resolve().parent
NS = "Tests.NullChecks."
# method -> (checks written, checks with every one written)
CHECKS = {
    "Node::SumTwice": (1, 4),       # `this` invariant: the first block's check dominates the rest
    "Program::Reassigned": (2, 2),  # starg null between the two reads
    "Program::AfterCatch": (2, 2),  # the continuation is reached from the catch, not the check
    "Program::Exposed": (2, 2),     # ldloca: a callee stores null through it
    "Program::WithFilter": (2, 2),  # a filter may store into the frame: nothing followed
    "Program::Walk": (1, 2),        # Value and Next of one n share a check; n is stored each turn
    "Program::Fresh": (0, 2),       # newobj, ldstr
}


@pytest.fixture(scope="module")
def exe(tmp_path_factory) -> Path:
    return assemble(HERE / "null_checks.il", tmp_path_factory.mktemp("null_checks"))


def _one_throw_block_per_region(result, checks: int) -> None:
    # one throw block per region (Translator.check): at most one helper call per check
    assert (result.helper_calls.get("CORINFO_HELP_THROWNULLREF", 0) > 0) == (checks > 0)
    assert result.helper_calls.get("CORINFO_HELP_THROWNULLREF", 0) <= checks


def _checks(exe: Path) -> dict[str, int]:
    return count_checks(exe, NS, CHECKS, _one_throw_block_per_region)


def test_checks_left_out_and_kept(exe):
    assert _checks(exe) == {name: kept for name, (kept, _) in CHECKS.items()}


def test_control_every_check_written(exe, monkeypatch):
    """With `null_check` forgetting what it knows, every dereference is checked: the counts
    above are the reader's choice, not an accident of the program."""
    write_every_check(monkeypatch)
    assert _checks(exe) == {name: every for name, (_, every) in CHECKS.items()}


@pytest.mark.parametrize("opt", [0, 2])
def test_every_method_through_the_pipeline(exe, pool, opt):
    asm = Assembly(exe)
    runs = Pipeline(asm, pool, opt=opt).run_many(eh_methods(asm))
    assert len(runs) == 7
    for run in runs:
        assert run.ok, (run.name, run.error, run.findings, run.image_findings)
        assert run.dispatch is not None and run.dispatch.mismatches == [], run.name


@pytest.mark.parametrize("opt", [0, 2])
def test_program_prints_what_ryujit_prints(exe, run_captured, opt):
    oracle = run_on_coreclr(exe)
    assert "SumTwice: NullReferenceException" in oracle.stdout     # the null `this` does throw
    out = run_captured(exe, opt=opt)
    assert out.stdout.decode() == oracle.stdout, out.stderr.decode()[-2000:]
    assert out.exit_code == oracle.returncode == 0
    assert out.report["declined"] == []
    assert len(out.report["compiled"]) == 7


def test_one_throw_block_per_region(exe, monkeypatch):
    """Every check writes its compare and branch; the throw block is shared per region and
    context (Translator.check): SumTwice's four checks (control) in one try call the helper
    once, AfterCatch's two checks in two tries twice."""
    write_every_check(monkeypatch)
    calls = {}
    count_checks(exe, NS, ("Node::SumTwice", "Program::AfterCatch"),
                 lambda result, _: calls.setdefault(result.parent, result.helper_calls.get("CORINFO_HELP_THROWNULLREF", 0)))
    calls = {name: n for parent, n in calls.items() for name in ("Node::SumTwice", "Program::AfterCatch")
             if name in parent}
    assert calls == {"Node::SumTwice": 1, "Program::AfterCatch": 2}
