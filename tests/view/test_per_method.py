"""`validate --translate --per-method FILE` and `llilc-eh diff A B`.

Records are checked against the run that wrote them (one per EH method, the summary's
counts), for determinism (two runs, same bytes), and the diff against a change we know:
selectors vs a finally copy per leave over the embedded sample.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llilc_eh.cli import sample_path

TWO_TARGETS = "Tests.FinallyTwoTargets.Program::TwoTargets"


def llilc(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llilc_eh.cli", *args], capture_output=True, text=True,
                          timeout=600, check=False, cwd=cwd)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """{name: (path, summary)} for selectors (twice) and cloned finallys over the sample."""
    d = tmp_path_factory.mktemp("records")
    out = {}
    for name, extra in (("a", ()), ("a2", ()), ("clone", ("--clone-finally",))):
        path = d / f"{name}.jsonl"
        r = llilc("validate", str(sample_path()), "--translate", "-q", "--per-method", str(path), *extra)
        assert r.returncode == 0, r.stderr
        out[name] = (path, r.stdout)
    return out


def test_one_record_per_eh_method(records):
    path, summary = records["a"]
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    eh = int(summary.splitlines()[1].split()[3])             # the summary's EH column for sample.dll
    assert len(rows) == eh == len({r["token"] for r in rows})
    assert [(r["file"], r["token"]) for r in rows] == sorted((r["file"], r["token"]) for r in rows)
    row = next(r for r in rows if r["name"] == TWO_TARGETS)
    assert row["status"] == "ok" and row["il"]["kinds"] == {"finally": 1}
    assert row["ours"]["clauses"] == 1 and row["ours"]["split"] == 0
    assert row["options"] == {"clone_finally": False, "opt": 2, "profile": "coreclr-psp"}
    assert row["ryujit"] is None                             # the sample has no ReadyToRun code
    assert "seconds" not in row


def test_records_are_deterministic(records):
    assert records["a"][0].read_bytes() == records["a2"][0].read_bytes()


def test_diff_names_what_changed(records):
    r = llilc("diff", str(records["a"][0]), str(records["clone"][0]))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("diff a.jsonl -> clone.jsonl: ")
    two = next(line for line in lines if TWO_TARGETS in line)
    assert "clauses 1 -> 2" in two and "split tries 0 -> 1" in two
    split = next(line for line in lines if line.startswith("split tries"))
    a = sum(json.loads(x)["ours"]["split"] for x in records["a"][0].read_text().splitlines())
    b = sum(json.loads(x)["ours"]["split"] for x in records["clone"][0].read_text().splitlines())
    assert split.split()[2:4] == [str(a), str(b)] and a < b


def test_diff_of_a_file_with_itself_is_empty(records):
    r = llilc("diff", str(records["a"][0]), str(records["a2"][0]))
    assert r.returncode == 0
    assert "per method (fields that changed):\n  none" in r.stdout


def test_usage(tmp_path, records):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    r = llilc("diff", str(bad), str(records["a"][0]))
    assert r.returncode == 1 and "bad.jsonl:1: not a per-method record" in r.stderr and "Traceback" not in r.stderr
    r = llilc("validate", str(sample_path()), "--per-method", str(tmp_path / "x.jsonl"))
    assert r.returncode == 1 and "needs --translate" in r.stderr
    assert not (tmp_path / "x.jsonl").exists()
