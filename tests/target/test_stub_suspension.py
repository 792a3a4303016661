"""A thread the GC suspends inside the installer's IAT_PVALUE call stub, on the real runtime.

The installer reaches an IAT_PVALUE callee (the runtime gives the address of a cell holding its
entry) through a stub of ours, `mov rax, cell; jmp [rax]`. The runtime can interrupt a thread
there like anywhere else (GC suspension on Linux is a signal delivered wherever the thread runs),
and for an IP of ours that is no safe point CoreCLR 3.1 reads the UNWIND_INFO of the
RUNTIME_FUNCTION holding it (IsIPInProlog), asserting only in debug builds that there is one.
The stubs used to lie after the read-only data, in no RUNTIME_FUNCTION and past the code size:
gc_stub.cs crashed the runtime (exit 139, 3 of 3 runs at O2). Now they lie right after the code,
inside the method's code size, under a frameless leaf RUNTIME_FUNCTION of their own
(runtime/install.py; the structural check with its negative control is tests/runtime/test_install.py).

IAT_PVALUE needs tiered compilation (3.1 gives it for methods versionable with vtable slot
backpatch, method.cpp TryGetMultiCallableAddrOfCode), which `run` turns off: this test turns it
on for the run's environment. It asserts that D::Sum was compiled with a stub each time (or it
would pass without testing anything). Control: the same program under RyuJIT alone, tiering on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llilc_eh.check.toolchain import compile_cs, run_on_coreclr

HERE = Path(__file__).parent
ARGS = ["2000"]                       # collections
EXPECTED = "collections 2000, Sum 55, ran many times\n"


@pytest.fixture(scope="module")
def gc_stub(tmp_path_factory) -> Path:
    return compile_cs(HERE / "gc_stub.cs", tmp_path_factory.mktemp("gc_stub") / "gc_stub.exe", "-optimize+")


@pytest.fixture
def tiered(monkeypatch):
    """`run`'s environment with tiered compilation on (the driver turns it off)."""
    from llilc_eh.runtime import driver
    plain = driver.environment

    def environment(*args, **kw):
        return {**plain(*args, **kw), "COMPlus_TieredCompilation": "1"}
    monkeypatch.setattr(driver, "environment", environment)


def test_control_ryujit_alone_runs_it(gc_stub, monkeypatch):
    monkeypatch.setenv("COMPlus_TieredCompilation", "1")
    done = run_on_coreclr(gc_stub, ARGS)
    assert done.returncode == 0 and done.stdout == EXPECTED, (done.returncode, done.stderr)


@pytest.mark.parametrize("opt", (0, 2))
def test_collections_while_a_thread_is_in_our_call_stub(gc_stub, run_captured, tiered, opt):
    outcome = run_captured(gc_stub, ARGS, methods=["D::Sum"], opt=opt)
    compiled = outcome.report.get("compiled", [])
    assert compiled and {m["method"] for m in compiled} == {"D::Sum"}, outcome.report
    assert all(m["stubs"] >= 1 for m in compiled), compiled       # the IAT_PVALUE path was taken
    assert outcome.exit_code == 0, (outcome.exit_code, outcome.stderr.decode()[-2000:])
    assert outcome.stdout.decode() == EXPECTED
