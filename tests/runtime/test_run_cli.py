"""`llilc-eh run` as a command: arguments, streams and exit code of the program pass through,
the summary follows on stderr (and as JSON with --report), --require-all turns a decline into
exit status 2, an unusable program is exit status 1 with one line and no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from llilc_eh.check.toolchain import compile_cs

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"


def llilc_eh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llilc_eh.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO)


@pytest.fixture(scope="module")
def exit_args(tmp_path_factory) -> Path:
    return compile_cs(PROGRAMS / "exit_args.cs", tmp_path_factory.mktemp("cs") / "exit_args.exe")


def test_arguments_streams_and_exit_code_pass_through(altjit, exit_args, tmp_path):
    report = tmp_path / "report.json"
    proc = llilc_eh("run", "--report", str(report), str(exit_args), "7", "--opt", "x y")
    assert proc.returncode == 7
    assert proc.stdout == "arg 7\narg --opt\narg x y\n"     # options after the program are its own
    assert proc.stderr.startswith("finally to stderr\n")    # the program's stderr comes first
    assert "llilc-eh run: 1 method(s) compiled by llilc-eh, 0 declined" in proc.stderr
    assert "COMPlus_gcConservative=1" in proc.stderr
    doc = json.loads(report.read_text())
    assert doc["gc"] == "conservative" and doc["exit_code"] == 7 and doc["declined"] == []
    assert [c["method"] for c in doc["compiled"]] == ["ExitArgs::Main"]
    assert set(doc["compiled"][0]) >= {"method", "token", "code_bytes", "clauses", "funclets", "jit_ms", "opt"}


def test_a_handler_of_ours_decides_the_exit_code(altjit, exit_args):
    proc = llilc_eh("run", "--opt", "0", str(exit_args))
    assert (proc.returncode, proc.stdout) == (99, "caught IndexOutOfRangeException\n")


def test_require_all_is_exit_status_2_when_a_selected_method_was_declined(altjit, tmp_path):
    # Lookup<T> needs a runtime lookup (typeof(T)) in shared code, which the metadata JIT-EE
    # cannot answer: declined (runtime/generic.py)
    exe = str(compile_cs(PROGRAMS / "generic_catch_funclets.cs", tmp_path / "generic_catch_funclets.exe"))
    plain = llilc_eh("run", "--jitee", "metadata", exe)
    assert plain.returncode == 0 and "declined  Program::Lookup" in plain.stderr
    strict = llilc_eh("run", "--jitee", "metadata", "--require-all", exe)
    assert strict.returncode == 2 and strict.stdout == plain.stdout


def test_require_all_keeps_the_programs_status_when_nothing_was_declined(altjit, il_programs):
    assert llilc_eh("run", "--require-all", str(il_programs["try_catch"])).returncode == 0


def test_an_unusable_program_is_status_1_without_a_traceback(tmp_path):
    proc = llilc_eh("run", str(tmp_path / "missing.exe"))
    assert proc.returncode == 1
    assert "missing.exe" in proc.stderr and "Traceback" not in proc.stderr
    text = tmp_path / "not_an_assembly.exe"
    text.write_text("hello")
    proc = llilc_eh("run", str(text))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
