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


ZIPFILE = "System.IO.Compression.ZipFile.dll"      # 9 EH methods, each with a ReadyToRun body


@pytest.fixture(scope="module")
def zipfile_records(tmp_path_factory):
    from llilc_eh.assembly.corpus import Corpus
    path = Corpus().framework_dir / ZIPFILE
    out = tmp_path_factory.mktemp("zip") / "zip.jsonl"
    r = llilc("validate", str(path), "--translate", "-q", "--per-method", str(out))
    assert r.returncode == 0, r.stderr
    r2r = llilc("r2r", str(path), "--json")
    assert r2r.returncode == 0, r2r.stderr
    bodies = {}
    for m in json.loads(r2r.stdout)["methods"]:
        if not m["instantiation"]:
            bodies[m["tokens"][0]] = m
    return out, [json.loads(line) for line in out.read_text().splitlines()], bodies


def test_ryujit_side_of_a_record_is_the_images_body(zipfile_records):
    _, rows, bodies = zipfile_records
    with_body = [r for r in rows if r["ryujit"] is not None]
    assert len(with_body) == len(rows) == 9
    for r in with_body:
        b = bodies[r["token"]]
        assert r["ryujit"]["clauses"] == len(b["native_clauses"])
        assert r["ryujit"]["funclets"] == len(b["ranges"]) - 1
        assert r["ryujit"]["code_size"] == b["ranges"][-1]["end"] - b["ranges"][0]["start"]
        assert r["ryujit"]["il_fates"] == b["comparison"]["il_fates"]


def test_versus_ryujit_adds_up_the_records(zipfile_records):
    path, rows, _ = zipfile_records
    r = llilc("diff", str(path))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"ours beside RyuJIT in zip.jsonl: 9 EH methods, ")
    both = [x for x in rows if x["status"] == "ok" and x["ryujit"]]
    clauses = next(line for line in lines if line.startswith("clauses "))
    assert clauses.split()[1:4] == [str(sum(x["il"]["clauses"] for x in both)),
                                    str(sum(x["ours"]["clauses"] for x in both)),
                                    str(sum(x["ryujit"]["clauses"] for x in both))]
    size = next(line for line in lines if line.startswith("code size (bytes)"))
    assert size.split()[3:5] == [str(sum(x["ours"]["code_size"] for x in both)),
                                 str(sum(x["ryujit"]["code_size"] for x in both))]


def test_cluster_parts_write_the_same_records(records, tmp_path):
    """A run split into parts on a (local) Dask cluster writes the records of one process."""
    out = tmp_path / "cluster.jsonl"
    r = llilc("validate", str(sample_path()), "--translate", "-q", "--cluster", "local:2", "--chunk", "5",
              "--per-method", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == records["a"][0].read_bytes()
