"""A thread the GC suspends inside our stack probe routine, on the real runtime.

The final image places its stack probe routine after the code, in no range; the runtime can
still interrupt a thread there (GC suspension on Linux is a signal delivered wherever the
thread runs), and for an IP in our code that is no safe point CoreCLR 3.1 reads the
UNWIND_INFO of the RUNTIME_FUNCTION holding it (IsIPInProlog), asserting only in debug
builds that there is one. Without a RUNTIME_FUNCTION of its own for the probe, gc_probe.cs
crashed the runtime (exit 139, SIGSEGV in IsIPInProlog from
HandleGCSuspensionForInterruptedThread; 3 of 3 runs, and under gdb the interrupted IP was in
the probe's loop). Now the probe has one, a frameless leaf (backend.image, "Unwind data").

gc_probe.cs: Touch (try/finally, a 1 MB stackalloc: llilc-eh compiles it, it calls the probe)
runs in a loop on a second thread while the main thread collects 2,000 times. Control: the
same program under RyuJIT alone ends cleanly, so the program itself is sound.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llilc_eh.check.toolchain import compile_cs, run_on_coreclr

HERE = Path(__file__).parent
ARGS = ["2000", str(1 << 20)]          # collections, stackalloc bytes
EXPECTED = "collections 2000, Touch ran many times\n"


@pytest.fixture(scope="module")
def gc_probe(tmp_path_factory) -> Path:
    return compile_cs(HERE / "gc_probe.cs", tmp_path_factory.mktemp("gc_probe") / "gc_probe.exe", "-unsafe",
                      "-optimize+")


def test_control_ryujit_alone_runs_it(gc_probe):
    done = run_on_coreclr(gc_probe, ARGS)
    assert done.returncode == 0 and done.stdout == EXPECTED, (done.returncode, done.stderr)


@pytest.mark.parametrize("opt", (0, 2))
def test_collections_while_a_thread_is_in_our_stack_probe(gc_probe, run_captured, opt):
    outcome = run_captured(gc_probe, ARGS, methods=["GcProbe::Touch"], opt=opt)
    assert {m["method"] for m in outcome.report.get("compiled", [])} == {"GcProbe::Touch"}, outcome.report
    assert outcome.exit_code == 0, (outcome.exit_code, outcome.stderr.decode()[-2000:])
    assert outcome.stdout.decode() == EXPECTED
