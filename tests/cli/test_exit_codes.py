"""The command-line contract, driven through the real `llilc-eh` as a shell runs it.

One exit-status policy for every command (`cli.EXIT_STATUS`): 0 ran and everything is clean,
1 usage error or unusable input/output (nothing was judged), 2 ran and found failures or
findings (or an internal error of ours), 128+N stopped by signal N (130 Ctrl-C, 143 SIGTERM,
141 a closed output pipe). No stderr line is ever a traceback (without --debug); output
paths are checked before any work; non-regular files never block a run.
"""

from __future__ import annotations

import json
import re
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llilc_eh import cli
from llilc_eh.assembly.corpus import Corpus
from llilc_eh.check.toolchain import assemble
from llilc_eh.cli import sample_path

MALFORMED = Path(__file__).resolve().parents[1] / "il" / "malformed" / "bad_regions.il"
BAD_METHOD = "Tests.Malformed.Bad::LeaveOutOfFinally"         # leave-out-of-handler at IL_0002
# A path no user, not even root, can create a file in: sysfs refuses new files (EACCES).
UNWRITABLE = "/sys/llilc-eh-test-output"


def llilc(*args: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llilc_eh.cli", *args], capture_output=True, text=True,
                          timeout=timeout, check=False, **kw)


def no_traceback(proc: subprocess.CompletedProcess) -> bool:
    return "Traceback" not in proc.stderr and "Traceback" not in proc.stdout


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """Real inputs of every kind: the sample, a truncated corpus assembly, an IL program with
    region violations (ilasm), a FIFO named like an assembly, folders of them."""
    root = tmp_path_factory.mktemp("inputs")
    corpus = Corpus()
    real = corpus.find("System.Collections.dll").location
    damaged = root / "damaged" / "System.Collections.dll"
    damaged.parent.mkdir()
    data = Path(real).read_bytes()
    damaged.write_bytes(data[:len(data) // 3])                 # MZ and PE headers intact, the rest cut
    (root / "damaged" / "empty.dll").write_bytes(b"")
    with_fifo = root / "with_fifo"
    with_fifo.mkdir()
    (with_fifo / "sample.dll").write_bytes(sample_path().read_bytes())
    os.mkfifo(with_fifo / "x.dll")
    empty = root / "no_assemblies"
    empty.mkdir()
    (empty / "readme.txt").write_text("nothing here\n")
    return {"sample": sample_path(), "damaged": damaged, "damaged_folder": damaged.parent,
            "malformed": assemble(MALFORMED, root / "malformed"), "fifo": with_fifo / "x.dll",
            "fifo_folder": with_fifo, "empty_folder": empty,
            "corelib": Path(corpus.find("System.Private.CoreLib.dll").location)}


# --------------------------------------------------------------------------------------------
# the table


TABLE = [
    # (what, arguments with {placeholders}, exit status, text on stdout or stderr)
    ("no arguments: the sample's translate view", [], 0, "=== clauses"),
    ("--help prints the exit-status table", ["--help"], 0, "130  interrupted"),
    ("a subcommand's --help too", ["validate", "--help"], 0, "2    ran and found failures"),
    ("an unknown flag", ["--bogus"], 1, "unrecognized arguments: --bogus"),
    ("a bad option value", ["il", "--index", "x"], 1, "invalid int value"),
    ("validate without inputs", ["validate"], 1, "the following arguments are required"),
    ("r2r without an assembly", ["r2r"], 1, "r2r needs an assembly"),
    ("il of a missing file", ["il", "/nonexistent/x.dll"], 1, "No such file or directory"),
    ("validate of a missing path", ["validate", "/nonexistent/x.dll"], 1, "No such file or directory"),
    ("validate of a folder without assemblies", ["validate", "{empty_folder}"], 1, "no assemblies"),
    ("il of a damaged (truncated) assembly", ["il", "{damaged}"], 1, "System.Collections.dll"),
    ("validate of a damaged assembly: ran, a file error", ["validate", "{damaged}", "-q"], 2, "failures: 1 "),
    ("validate of a folder of broken files", ["validate", "{damaged_folder}", "-q"], 2, "failures: 2 "),
    ("il of a FIFO", ["il", "{fifo}"], 1, "not a regular file"),
    ("validate naming a FIFO", ["validate", "{fifo}"], 1, "not a regular file or a folder"),
    ("validate of a folder holding a FIFO: skipped", ["validate", "{fifo_folder}", "-q"], 0, "failures: none"),
    ("validate over the sample", ["validate", "{sample}", "-q"], 0, "failures: none"),
    ("validate with failing methods", ["validate", "{malformed}", "-q"], 2, "il:leave-out-of-handler 1"),
    ("il of a method with a region violation", ["il", "{malformed}", "--method", BAD_METHOD], 2,
     "ECMA-335 violation"),
    ("translate of a method with an IL error", ["translate", "{malformed}", "--method", BAD_METHOD], 2,
     "[il/leave-out-of-handler]"),
    ("translate of an unknown method", ["translate", "--method", "Tests.Nope::Nothing"], 1, "no method named"),
    ("a method named two ways", ["il", "--method", "Tests.TryCatch.Program::Thrower", "--token", "0x06000001"], 1,
     "name the method one way"),
    ("an overload index without a method", ["il", "--index", "1"], 1, "--index picks an overload"),
    ("translate of a method without an IL body",
     ["translate", "{corelib}", "--method", "System.IO.Stream::Flush", "--stage", "il"], 1, "no-il-body"),
    ("r2r of an image without native code",
     ["r2r", "{sample}", "--method", "Tests.TryCatch.Program::Thrower"], 1, "not a ReadyToRun image"),
]


@pytest.mark.parametrize("what, args, status, text", TABLE, ids=[row[0] for row in TABLE])
def test_exit_status_table(inputs, what, args, status, text):
    proc = llilc(*[a.format(**inputs) for a in args], timeout=120)     # a FIFO read would hang: timeout
    assert proc.returncode == status, f"{what}: {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr}"
    assert text in proc.stdout + proc.stderr, what
    assert no_traceback(proc), proc.stderr
    if status == 1:                      # nothing judged: the reason on stderr, one line after the usage
        assert proc.stderr.strip() and not proc.stdout.strip()


def test_the_table_covers_every_status():
    assert {row[2] for row in TABLE} == {0, 1, 2}


# --------------------------------------------------------------------------------------------
# what the statuses count


def test_validate_counts_every_failure_and_lists_file_errors(inputs, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    for name in ("damaged", "malformed", "sample"):
        (folder / Path(inputs[name]).name).write_bytes(Path(inputs[name]).read_bytes())
    report = tmp_path / "r.json"
    proc = llilc("validate", str(folder), "-q", "--list-failures", "--json", str(report))
    assert proc.returncode == 2, proc.stderr
    files = {Path(f["path"]).name: f for f in json.loads(report.read_text())["files"]}
    method_failures = sum(len(f["failures"]) for f in files.values())
    assert files["System.Collections.dll"]["file_error"] is not None and method_failures >= 11
    summary = next(line for line in proc.stdout.splitlines() if line.startswith("failures: "))
    assert summary.startswith(f"failures: {method_failures + 1} ({method_failures} methods, 1 unreadable file): ")
    listed = [line for line in proc.stdout.splitlines() if "] " in line and line.split(":")[0] in files]
    assert len(listed) == method_failures + 1
    assert any(line.startswith("System.Collections.dll: [file:") for line in listed)


def test_translate_failures_count_in_the_summary_and_the_status(inputs, tmp_path):
    """A method whose regions are sound but whose pipeline run fails is a failure of the run:
    before, the summary said `failures: none` beside a pipeline table listing it, status 0."""
    source = tmp_path / "unresolved.il"
    source.write_text("""
.assembly extern mscorlib { .publickeytoken = (B7 7A 5C 56 19 34 E0 89) .ver 4:0:0:0 }
.assembly extern Missing { .ver 1:0:0:0 }
.assembly Unresolved { }
.class public auto ansi Tests.Unresolved extends [mscorlib]System.Object {
  .method public static void Main() cil managed {
    .entrypoint
    .locals init (valuetype [Missing]Missing.S v)
    .try { ldloca.s v  ldfld int32 [Missing]Missing.S::F  pop  leave.s done }
    catch [mscorlib]System.Exception { pop  leave.s done }
    done: ret
  }
}
""")
    exe = assemble(source, tmp_path / "out")
    proc = llilc("validate", str(exe), "--translate", "-q", "--list-failures")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "pipeline: 0 of 1 EH methods end to end clean" in proc.stdout
    summary = next(line for line in proc.stdout.splitlines() if line.startswith("failures: "))
    assert summary.startswith("failures: 1 (1 method, 0 unreadable files): reader:")
    assert f"{exe.name}: [reader:" in proc.stdout and "Tests.Unresolved::Main" in proc.stdout
    one = llilc("translate", str(exe), "--method", "Tests.Unresolved::Main", "--stage", "ir")
    assert one.returncode == 2 and "llilc-eh: error: [reader/" in one.stderr and no_traceback(one)


@pytest.mark.parametrize("severity", ["error", "convention"])
def test_translate_exits_2_on_a_validator_finding_of_either_severity(capsys, monkeypatch, severity):
    """Our generator's tables are clean on the sample under every profile and O level (no real
    finding to show), so one is injected after the real validator ran: a convention finding
    counts on our own tables (docs/decisions.md), as `validate --translate` records it."""
    from llilc_eh import pipeline
    from llilc_eh.clauses.validate import Finding

    real = pipeline.validate

    def with_a_finding(table, profile):
        return [*real(table, profile), Finding("sibling-order", (0, 1), "clause #1 before #0 (injected)", severity)]

    monkeypatch.setattr(pipeline, "validate", with_a_finding)
    assert cli.main(["translate", "--method", "Tests.CatchAndFilter.Program::CatchFilterCatch", "--json"]) == 2
    out, err = capsys.readouterr()
    js, = json.loads(out)["methods"]
    assert js["ok"] is False and js["error"] is None
    assert err == ("llilc-eh: finding: [clauses/validator:sibling-order] method 0x06000002 "
                   "Tests.CatchAndFilter.Program::CatchFilterCatch: clause #1 before #0 (injected)\n")
    monkeypatch.setattr(pipeline, "validate", real)            # the control: the same run, clean
    assert cli.main(["translate", "--method", "Tests.CatchAndFilter.Program::CatchFilterCatch", "--json"]) == 0
    assert capsys.readouterr().err == ""


# --------------------------------------------------------------------------------------------
# the boundary


def test_an_internal_error_is_one_line_and_debug_shows_the_traceback(capsys, monkeypatch):
    def broken(*_a, **_kw):
        raise ZeroDivisionError("a bug of ours")

    monkeypatch.setattr(cli, "analyze", broken)
    assert cli.main(["il"]) == 2
    out, err = capsys.readouterr()
    assert err == ("llilc-eh: internal error: ZeroDivisionError: a bug of ours "
                   "(--debug shows the traceback)\n")
    # the negative control: the same failure with --debug (before or after the subcommand)
    # does show a traceback, so its absence above is not a blind check
    for args in (["--debug", "il"], ["il", "--debug"]):
        assert cli.main(args) == 2
        out, err = capsys.readouterr()
        assert "Traceback" in err and "ZeroDivisionError: a bug of ours" in err


def test_a_closed_output_pipe_is_quiet():
    proc = subprocess.Popen([sys.executable, "-m", "llilc_eh.cli", "il"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline()                  # the listing is ~100 KB: the writer is blocked now
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 128 + signal.SIGPIPE and err == ""


# --------------------------------------------------------------------------------------------
# output paths: checked before any work


@pytest.mark.parametrize("option, target, why", [
    ("--json", "{tmp}/missing/r.json", "its folder {tmp}/missing does not exist"),
    ("--json", "{tmp}", "is a folder"),
    ("--timings", "{tmp}/missing/t.tsv", "its folder {tmp}/missing does not exist"),
    ("--json", UNWRITABLE + ".json", "cannot be written"),
])
def test_validate_checks_its_output_files_before_the_batch(inputs, tmp_path, option, target, why):
    """Over CoreLib with --translate (minutes of work): the refusal comes at once, with no
    summary, so it cannot have come after the batch (the timeout would have struck first)."""
    target, why = target.format(tmp=tmp_path), why.format(tmp=tmp_path)
    proc = llilc("validate", str(inputs["corelib"]), "--translate", "-q", option, target, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith(f"llilc-eh: error: {option} {target}: {why}")
    assert proc.stderr.count("\n") == 1
    assert proc.stdout == ""


def test_translate_checks_its_output_paths_before_the_pipeline(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    for args, why in ((["--emit-dir", str(blocker)], f"--emit-dir {blocker}: exists and is not a folder"),
                      (["--emit-dir", UNWRITABLE], f"--emit-dir {UNWRITABLE}: cannot write into it"),
                      (["--svg", str(tmp_path / "no" / "a.svg")],
                       f"--svg {tmp_path / 'no' / 'a.svg'}: its folder {tmp_path / 'no'} does not exist")):
        proc = llilc("translate", *args)
        assert proc.returncode == 1 and proc.stderr.startswith(f"llilc-eh: error: {why}"), proc.stderr
        assert proc.stdout == "" and no_traceback(proc)
    assert blocker.read_text() == "not a folder"
    # a folder that does not exist yet is created, parents too
    proc = llilc("translate", "--emit-dir", str(tmp_path / "a" / "b"), "--stage", "clauses")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "a" / "b" / "clauses.bin").is_file()


def test_an_output_fifo_without_reader_is_refused_not_waited_for(tmp_path):
    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)
    proc = llilc("validate", str(sample_path()), "-q", "--json", str(fifo), timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == f"llilc-eh: error: --json {fifo}: cannot be written: a FIFO that no process reads\n"


def test_a_checked_output_file_is_left_as_it_was(tmp_path):
    from llilc_eh.view.emit import check_output_file
    existing = tmp_path / "old.json"
    existing.write_text("previous report")
    check_output_file(existing, "--json")
    check_output_file(tmp_path / "new.json", "--json")
    assert existing.read_text() == "previous report" and not (tmp_path / "new.json").exists()


# --------------------------------------------------------------------------------------------
# interrupted runs


def _start_validate(*args: str) -> subprocess.Popen:
    # a session of its own: the signal goes to the whole group, as Ctrl-C at a terminal does
    return subprocess.Popen([sys.executable, "-m", "llilc_eh.cli", "validate", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for_line(proc: subprocess.Popen, prefix: str, limit: float = 120) -> list[str]:
    """stderr lines up to the first starting with `prefix` (the progress line of a file that
    finished); a guard against a run that never prints it."""
    lines, end = [], time.monotonic() + limit
    while time.monotonic() < end:
        ready, _, _ = select.select([proc.stderr], [], [], 1)
        if ready:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith(prefix):
                return lines
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError(f"no {prefix!r} line: {lines}")


@pytest.mark.parametrize("jobs, signum", [(1, signal.SIGINT), (2, signal.SIGINT), (2, signal.SIGTERM)])
def test_an_interrupted_validate_prints_the_summary_of_what_finished(inputs, tmp_path, jobs, signum):
    """`validate --translate` of CoreLib (minutes) beside a junk file larger than it (taken
    first, done at once): stopped after the junk file's progress line, the run ends with
    128+signal, a summary of the one finished file, no report file, no traceback from the
    process or its workers, and no worker left running."""
    junk = tmp_path / "junk.dll"
    with open(junk, "wb") as f:
        f.truncate(2 * inputs["corelib"].stat().st_size)       # sparse: no MZ header
    report = tmp_path / "r.json"
    proc = _start_validate(str(junk), str(inputs["corelib"]), "--translate", "--jobs", str(jobs),
                           "--json", str(report))
    before = _wait_for_line(proc, "[1/2] junk.dll")
    os.killpg(proc.pid, signum)
    try:
        out, err = proc.communicate(timeout=60)    # a guard: CoreLib alone takes minutes
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signum, err
    # no worker (batch or LLVM) outlives the run: the process group is empty
    for _ in range(100):
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)                            # LLVM workers exit on their pipe's EOF
    else:
        raise AssertionError("processes of the interrupted run are still alive")
    assert "interrupted: 1 of 2 files finished" in out and "junk.dll" in out
    assert "System.Private.CoreLib.dll" not in out
    assert "failures: 1 (0 methods, 1 unreadable file): file:bad-pe 1" in out
    assert err.startswith("llilc-eh: interrupted") and "Traceback" not in "".join(before) + err
    assert not report.exists()


def test_readme_and_help_give_the_same_exit_statuses():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    table = readme[readme.index("### Exit status"):]
    in_readme = {int(m) for m in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)}
    in_help = {int(line.split()[0]) for line in cli.EXIT_STATUS.splitlines()[1:] if line[:5].strip().isdigit()}
    assert in_readme == in_help == {0, 1, 2, 130, 141}
