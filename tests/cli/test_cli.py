"""The command line as a user runs it: default run, listings, JSON, errors, batch robustness."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from llilc_eh.cli import sample_path


def llilc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llilc_eh.cli", *args], capture_output=True, text=True,
                          timeout=120)


def test_default_runs_on_the_embedded_sample():
    proc = llilc()
    assert proc.returncode == 0, proc.stderr
    # the translate view of the default method: a filter, finallys, nested handlers
    assert "Tests.TryInFilterHandler.Program::Run" in proc.stdout
    assert "validator" in proc.stdout and "ROOT" in proc.stdout and "FILTER" in proc.stdout
    proc = llilc("il")
    assert proc.returncode == 0, proc.stderr
    # every EH method of the sample is listed with its regions
    assert "Tests.CatchAndFilter.Program::CatchFilterCatch" in proc.stdout
    assert "filter { // #1" in proc.stdout and "} // end filter-handler" in proc.stdout
    assert "ECMA-335 violation" not in proc.stdout


def test_il_json_matches_listing():
    proc = llilc("il", str(sample_path()), "--method", "Tests.CatchAndFilter.Program::CatchFilterCatch", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["command"] == "il" and doc["assembly"] == "sample.dll" and len(doc["methods"]) == 1
    data = doc["methods"][0]
    assert [c["kind"] for c in data["clauses"]] == ["catch", "filter", "catch"]
    assert data["clauses"][0]["class"] == "[mscorlib]System.ArgumentException"
    kinds = [r["kind"] for r in data["regions"]]
    assert kinds.count("try") == 1 and "filter" in kinds and "filter-handler" in kinds
    offsets = [i["offset"] for i in data["instructions"]]
    assert offsets == sorted(offsets) and data["errors"] == []


def test_errors_exit_nonzero_with_reason():
    proc = llilc("il", str(sample_path()), "--method", "Tests.Nope::Nothing")
    assert proc.returncode == 1
    assert "no method named 'Tests.Nope::Nothing'" in proc.stderr and "Traceback" not in proc.stderr


def test_validate_survives_bad_files_and_is_deterministic(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "sample.dll").write_bytes(sample_path().read_bytes())
    (folder / "broken.dll").write_bytes(sample_path().read_bytes()[:300])
    (folder / "empty.exe").write_bytes(b"")
    outs = []
    for n in (1, 2):
        report = tmp_path / f"r{n}.json"
        proc = llilc("validate", str(folder), "--jobs", str(n), "--json", str(report), "-q")
        assert proc.returncode == 2, proc.stderr            # ran; two files are file errors
        assert "failures: 2 (0 methods, 2 unreadable files)" in proc.stdout
        outs.append(report.read_bytes())
    assert outs[0] == outs[1]
    files = {Path(f["path"]).name: f for f in json.loads(outs[0])["files"]}
    assert files["broken.dll"]["file_error"]["kind"] == "not-a-clr-assembly"
    assert files["empty.exe"]["file_error"] is not None
    assert files["sample.dll"]["with_eh"] >= 40 and files["sample.dll"]["failures"] == []


def test_validate_translate_runs_the_whole_pipeline(tmp_path):
    """`validate --translate`: every EH method of the sample end to end at O2, a coverage table,
    a JSON report identical with 1 and 2 jobs, per-method timings apart from it."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "sample.dll").write_bytes(sample_path().read_bytes())
    (folder / "broken.dll").write_bytes(sample_path().read_bytes()[:300])
    outs = []
    for n in (1, 2):
        report, timings = tmp_path / f"r{n}.json", tmp_path / f"t{n}.tsv"
        proc = llilc("validate", str(folder), "--translate", "--jobs", str(n), "--json", str(report),
                     "--timings", str(timings), "-q")
        assert proc.returncode == 2, proc.stderr            # broken.dll is a file error
        assert "failures: 1 (0 methods, 1 unreadable file): file:not-a-clr-assembly 1" in proc.stdout
        outs.append(report.read_bytes())
        sample = next(f for f in json.loads(outs[-1])["files"] if f["path"].endswith("sample.dll"))
        assert sample["translated"] == sample["with_eh"] == 67 and sample["translate_failures"] == []
        assert sum(sample["differential"].values()) == 67 and "unexplained" not in sample["differential"]
        rows = timings.read_text().splitlines()
        assert len(rows) == 1 + 67 and all(float(r.split("\t")[0]) > 0 for r in rows[1:])
        assert "pipeline: 67 of 67 EH methods end to end clean" in proc.stdout
    assert outs[0] == outs[1]


def test_r2r_side_by_side():
    from llilc_eh.assembly.corpus import Corpus
    dll = Corpus().find("System.Data.Common.dll").location
    proc = llilc("r2r", str(dll), "--method", "System.Data.DataTable::set_Locale")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "funclet 5  [0x0303, 0x033e)" in out
    assert "<- cloned-finally" in out and "finally-became-fault" in out
    assert "validator: 0 finding(s)" in out and "PUSH_NONVOL reg=RBX" in out
    doc = json.loads(llilc("r2r", str(dll), "--method", "System.Data.DataTable::set_Locale", "--json").stdout)
    assert doc["command"] == "r2r" and len(doc["methods"]) == 1
    js = doc["methods"][0]
    assert len(js["native_clauses"]) == 9 and len(js["ranges"]) == 6 and js["findings"] == []


def test_r2r_on_an_il_only_image_is_a_clear_error():
    proc = llilc("r2r", str(sample_path()), "--method", "Tests.TryCatch.Program::Thrower")
    assert proc.returncode == 1 and "not a ReadyToRun image" in proc.stderr and "Traceback" not in proc.stderr


def test_translate_prints_the_verified_module_with_il_offsets():
    proc = llilc("translate", "--method", "Tests.CatchAndFilter.Program::CatchFilterCatch", "--stage", "ir")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "catchswitch within none [label %catch0, label %filter-handler1, label %catch2]" in out
    assert '; IL_0000:  ldstr "try: throw"' in out and "$filter1" in out
    js, = json.loads(llilc("translate", "--method", "Tests.FinallyTwoTargets.Program::TwoTargets", "--stage", "ir",
                          "--json").stdout)["methods"]
    assert list(js["selector_cases"].values()) == [2] and js["cleanuppads"] == 1
