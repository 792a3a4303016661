"""`llilc-eh run` counts exceptions through our frames (runtime/events.py): exceptions thrown and
catch / filter / finally / fault handlers run, in the methods llilc-eh compiled and in all,
exactly, from an out-of-process EventPipe session, with the program's own first-chance count
as the control.

What could make this pass in silence, and what holds it:
  * counts right by accident: every figure of programs/exception_counts.cs is asserted exactly,
    per method too, with the work split between methods we compile and RyuJIT's control frames
    (a throw in RyuJIT's Control.Throw caught in ours, a throw in our Thrower caught in RyuJIT's);
  * "ours" meaning everything: the negative control runs the same program with a --methods glob
    that selects nothing -- the totals stay, every count in ours is 0;
  * a lossy session looking lossless: the control is asserted equal on every run, and a trace with
    one ExceptionThrown event removed must report it lost (the harness can see a loss);
  * finally and fault told apart only in name: tests/il/fault_handler.il runs 3 faults and 1
    finally, each counted under its own kind from our clause table.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from llilc_eh.check.toolchain import assemble, compile_cs, write_runtimeconfig

PROGRAMS = Path(__file__).resolve().parent / "programs"
IL_DIR = Path(__file__).resolve().parents[1] / "il"
EXPECTED_STDOUT = b"Ours.Run: 4045, finallys: 4\nControl.CatchOurs: 3\n"
TOTAL_HANDLERS = {"catch": 16, "filter": 4, "finally or fault": 4}


@pytest.fixture(scope="module")
def counts_exe(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("exception_counts")
    return compile_cs(PROGRAMS / "exception_counts.cs", out / "exception_counts.exe", "-optimize+")


def _exceptions(outcome) -> dict:
    assert outcome.stdout == EXPECTED_STDOUT, outcome.stderr.decode(errors="replace")
    assert outcome.exit_code == 0
    ex = outcome.report["exceptions"]
    # the control: every exception the program saw arrived as an event, none lost
    assert ex["first_chance"] == 16 and ex["thrown"] == 16 and ex["lost"] == 0, ex
    assert ex["sequence_gaps"] == 0 and ex["complete"] and ex["ending"] == "exit" and ex["problems"] == [], ex
    assert ex["rethrown"] == 2
    assert ex["handlers"] == TOTAL_HANDLERS
    return ex


@pytest.mark.parametrize("opt", [0, 2])
def test_counts_in_our_methods_and_ryujits(run_captured, counts_exe, opt):
    out = run_captured(counts_exe, methods=["Counts.Ours::*"], opt=opt)
    assert {m["method"] for m in out.report["compiled"]} == {"Counts.Ours::Run", "Counts.Ours::Thrower"}
    ex = _exceptions(out)
    assert ex["thrown_ours"] == 12          # 5 + 2 + 2 rethrown in Run, 3 in Thrower
    assert ex["handlers_ours"] == {"catch": 13, "filter": 4, "finally": 4, "fault": 0}
    assert ex["by_method"] == [
        {"method": "exception_counts!Counts.Ours::Run", "thrown": 9, "catch": 13, "filter": 4, "finally": 4, "fault": 0},
        {"method": "exception_counts!Counts.Ours::Thrower", "thrown": 3, "catch": 0, "filter": 0, "finally": 0,
         "fault": 0}]
    summary = __import__("llilc_eh.runtime.driver", fromlist=["summary"]).summary(out.report)
    assert "16 thrown (2 rethrown), 12 in methods compiled by llilc-eh" in summary
    assert "16 first-chance exception(s) in process = 16 ExceptionThrown events received; no event lost" in summary


def test_negative_control_nothing_selected_counts_nothing_ours(run_captured, counts_exe):
    out = run_captured(counts_exe, methods=["Counts.Nothing::*"])
    assert out.report["compiled"] == []
    ex = _exceptions(out)
    assert ex["thrown_ours"] == 0 and ex["by_method"] == []
    assert ex["handlers_ours"] == {"catch": 0, "filter": 0, "finally": 0, "fault": 0}


def test_default_selection_moves_the_control_catches_into_ours(run_captured, counts_exe):
    """Every EH method of the program (the default): Control.CatchOurs is ours now, Thrower
    (no EH) RyuJIT's -- its 3 throws leave ours, its 3 catches join."""
    out = run_captured(counts_exe)
    assert {m["method"] for m in out.report["compiled"]} == {"Counts.Ours::Run", "Counts.Control::CatchOurs"}
    ex = _exceptions(out)
    assert ex["thrown_ours"] == 9
    assert ex["handlers_ours"] == {"catch": 16, "filter": 4, "finally": 4, "fault": 0}


def test_fault_and_finally_told_apart(run_captured, tmp_path):
    exe = assemble(IL_DIR / "fault_handler.il", tmp_path)
    out = run_captured(exe)
    assert out.stdout.decode().replace("\r\n", "\n") == (IL_DIR / "fault_handler.expected").read_text()
    ex = out.report["exceptions"]
    assert (ex["first_chance"], ex["thrown"], ex["lost"], ex["thrown_ours"]) == (2, 2, 0, 2)
    assert ex["handlers"] == {"catch": 2, "filter": 0, "finally or fault": 4}
    assert ex["handlers_ours"] == {"catch": 2, "filter": 0, "finally": 1, "fault": 3}
    by = {m["method"].split("::")[1]: m for m in ex["by_method"]}
    assert (by["Faulty"]["fault"], by["Mixed"]["fault"], by["Mixed"]["finally"]) == (1, 2, 1)


UNHANDLED = """
using System;
static class P {
    static int Main() {
        try { throw new FormatException("caught"); } catch (FormatException) { Console.WriteLine("caught"); }
        throw new InvalidOperationException("unhandled");
    }
}
"""


def test_unhandled_exception_stops_the_session_first(run_captured, tmp_path):
    """An unhandled exception kills the process without the runtime's shutdown (which is what
    flushes the session at a normal exit): the hook's UnhandledException handler makes the driver
    stop the session first, so the run is counted whole and the program's exit status stays."""
    source = tmp_path / "unhandled.cs"
    source.write_text(UNHANDLED)
    exe = compile_cs(source, tmp_path / "unhandled.exe")
    out = run_captured(exe)
    assert out.exit_code == 134 and b"unhandled" in out.stderr
    ex = out.report["exceptions"]
    assert (ex["first_chance"], ex["thrown"], ex["lost"], ex["ending"]) == (2, 2, 0, "unhandled exception")
    assert ex["handlers_ours"]["catch"] == 1 and ex["thrown_ours"] == 2


def test_no_exception_count(run_captured, counts_exe):
    out = run_captured(counts_exe, methods=["Counts.Nothing::*"], count_exceptions=False)
    assert out.stdout == EXPECTED_STDOUT and "exceptions" not in out.report


def test_no_diagnostics_socket_says_so(run_captured, counts_exe, monkeypatch):
    """COMPlus_EnableDiagnostics=0: no socket, no session -- the program runs unchanged (the hook
    is told at once) and the report says why nothing was counted."""
    monkeypatch.setenv("COMPlus_EnableDiagnostics", "0")
    out = run_captured(counts_exe, methods=["Counts.Nothing::*"])
    assert out.stdout == EXPECTED_STDOUT and out.exit_code == 0
    ex = out.report["exceptions"]
    assert ex["thrown"] is None and ex["first_chance"] == 16
    assert any("COMPlus_EnableDiagnostics=0" in p for p in ex["problems"]), ex["problems"]
    from llilc_eh.runtime.driver import summary
    assert "exceptions: not counted -- no EventPipe session: COMPlus_EnableDiagnostics=0" in summary(out.report)


def test_a_lost_event_is_reported_lost(counts_exe):
    """Negative control of the control: the same session on plain CoreCLR (no alt JIT), then one
    ExceptionThrown event taken out of its trace -- count() must call it lost."""
    from llilc_eh.assembly.corpus import Corpus
    from llilc_eh.runtime.events import EVENT_EXCEPTION_THROWN, ExceptionWatch, count, summary_lines
    write_runtimeconfig(counts_exe)
    watch = ExceptionWatch()
    proc = subprocess.Popen([str(Corpus().dotnet), str(counts_exe)], stdout=subprocess.PIPE,
                            env=watch.environment(dict(os.environ)), pass_fds=watch.child_fds)
    watch.attach(proc.pid)
    stdout, _ = proc.communicate(timeout=300)
    result = watch.finish()
    assert stdout == EXPECTED_STDOUT
    whole = count(result, [])
    assert (whole["thrown"], whole["first_chance"], whole["lost"]) == (16, 16, 0)
    assert whole["handlers"] == TOTAL_HANDLERS
    events = list(result.trace.events)
    first = next(i for i, e in enumerate(events) if e.event_id == EVENT_EXCEPTION_THROWN)
    del events[first]
    damaged = dataclasses.replace(result, trace=dataclasses.replace(result.trace, events=events))
    short = count(damaged, [])
    assert (short["thrown"], short["lost"]) == (15, 1)
    assert any("lost 1 event(s)" in line for line in summary_lines(short))


def test_command_line_summary_and_report(altjit, counts_exe, tmp_path):
    """`llilc-eh run` as a command: the summary's exception lines on stderr, the report's
    `exceptions`; --no-exception-count leaves both out."""
    import json
    import sys

    def llilc_eh(*args):
        return subprocess.run([sys.executable, "-m", "llilc_eh.cli", "run", *args], capture_output=True, text=True,
                              timeout=300)
    report = tmp_path / "r.json"
    proc = llilc_eh("--methods", "Counts.Ours::*", "--report", str(report), str(counts_exe))
    assert proc.returncode == 0 and proc.stdout.encode() == EXPECTED_STDOUT, proc.stderr
    assert "exceptions: 16 thrown (2 rethrown), 12 in methods compiled by llilc-eh" in proc.stderr
    assert "in ours: catch 13, filter 4, finally 4, fault 0" in proc.stderr
    assert json.loads(report.read_text())["exceptions"]["thrown_ours"] == 12
    proc = llilc_eh("--no-exception-count", "--methods", "Counts.Ours::*", "--report", str(report), str(counts_exe))
    assert proc.returncode == 0 and "exceptions:" not in proc.stderr
    assert "exceptions" not in json.loads(report.read_text())
