"""Synchronized methods without a try of their own are offered to llilc-eh and compiled by it.

Their only EH is the JIT's: the monitor taken at entry and released on every return and by a
fault clause of the JIT's own (clauses/synchronized.py, reader/synchronized.py). altjit.c used to
decline fast every method whose IL has no clause, so these were RyuJIT's in silence, by default
and under --all-eh alike; now it asks getMethodAttribs (CORINFO_FLG_SYNCH) and the service selects
them as methods with EH (service._identify), the report saying why (`il_clauses` 0,
`synchronized` true) and the summary "the JIT's monitor clause, none in its IL".

programs/synchronized_plain.cs: instance and static synchronized methods, no try in any of them
-- two threads racing on a read-wait-write inside each lock lose no update; two threads contend
for a lock whose method throws out often (each throw must release the lock, or the other thread
waits for ever); after a throw another thread gets the lock at once. Selected by default (no
--methods): the compiled set is asserted, so a method left to RyuJIT fails the test (it did
before altjit.c asked). Negative control: `no-monitor-clause` (the JIT's fault left out of the
installed table) -- the lock stays held after the throw and the other thread times out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llilc_eh.check.toolchain import compile_cs, run_on_coreclr

PROGRAM = Path(__file__).resolve().parent / "programs" / "synchronized_plain.cs"
PLAIN = {"Account::Deposit", "Account::Withdraw", "Ledger::Add", "Ledger::Take"}


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    return compile_cs(PROGRAM, tmp_path_factory.mktemp("synchronized_plain") / "synchronized_plain.exe",
                      str(PROGRAM.parent / "shared" / "contention.cs"))      # the two-thread harness


@pytest.fixture(scope="module")
def oracle(program):
    done = run_on_coreclr(program)
    assert done.returncode == 0, done.stderr
    # what the program checks, as RyuJIT runs it: no update lost, throws out under contention,
    # the lock released by every throw
    assert "instance race: 8000\nstatic race: 16000\n" in done.stdout
    assert "balance + 3 * taken = 4000, some thrown: True, locked after: False" in done.stdout
    assert "added - taken = True, some thrown: True" in done.stdout
    assert "overdrawn by 7 held=True after=False other thread gets it: True" in done.stdout
    assert "static: True held=True other thread gets it: True" in done.stdout
    return done


@pytest.mark.parametrize("opt, clone", [(2, False), (0, False), (2, True)])
def test_synchronized_without_il_clauses_are_ours(run_captured, program, oracle, opt, clone):
    out = run_captured(program, opt=opt, clone_finally=clone)      # the default selection: no --methods
    assert (out.stdout.decode(), out.exit_code) == (oracle.stdout, 0), out.stderr.decode()[-3000:]
    compiled = {c["method"]: c for c in out.report["compiled"]}
    assert set(compiled) >= PLAIN, out.report["declined"]
    for name in PLAIN:
        # no clause in the IL; the installed table holds the JIT's fault (a funclet)
        assert (compiled[name]["il_clauses"], compiled[name]["synchronized"]) == (0, True)
        assert compiled[name]["clauses"] >= 1 and compiled[name]["funclets"] >= 1
    # a method with IL clauses of its own is not called synchronized
    assert (compiled["Program::Withdrawals"]["il_clauses"], compiled["Program::Withdrawals"]["synchronized"]) \
        == (1, False)
    from llilc_eh.runtime.driver import summary
    assert "Account::Withdraw" in summary(out.report) and \
        "the JIT's monitor clause, none in its IL" in summary(out.report)


def test_negative_control_without_the_monitor_clause(run_captured, program):
    """`solo` runs only the single-thread throws (no thread then waits for ever on a lock left
    held): without the JIT's fault in the table the lock survives the throw."""
    out = run_captured(program, ["solo"], damage="no-monitor-clause")
    text = out.stdout.decode()
    assert "overdrawn by 7 held=True after=True other thread gets it: False" in text, text
    assert "static: True held=True other thread gets it: False" in text, text
    assert {c["method"] for c in out.report["compiled"]} >= {"Account::Withdraw", "Ledger::Take"}
