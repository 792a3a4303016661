"""`validate --jobs N` when a worker process dies: the batch goes on and loses nothing.

A worker that dies (a crash below Python, the OOM killer) breaks Python's process pool, which
then fails every unfinished file, whichever one killed it. `batch.run` reruns those files one
at a time until the culprit dies alone; it becomes one `worker-lost` file error, every other
file gets the report a clean run gives it, and the exit status is 2 (ran, found failures).
The death is real: batch.FAULT_ENV makes the worker validating the named file SIGKILL itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from llilc_eh import batch
from llilc_eh.cli import sample_path

NAMES = ("a.dll", "b.dll", "c.dll", "d.dll")


def validate(folder, out, *extra, fault=None):
    env = {k: v for k, v in os.environ.items() if k != batch.FAULT_ENV}
    if fault:
        env[batch.FAULT_ENV] = fault
    return subprocess.run([sys.executable, "-m", "llilc_eh.cli", "validate", str(folder), "-q",
                           "--json", str(out), *extra], capture_output=True, text=True, timeout=300,
                          env=env, check=False)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("worker-lost")
    for name in NAMES:
        shutil.copyfile(sample_path(), d / name)
    return d


def files_of(path) -> dict[str, dict]:
    return {os.path.basename(f["path"]): f for f in json.loads(path.read_text())["files"]}


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_clean_control(folder, tmp_path, jobs):
    """Without the fault every file is clean: the harness sees a clean run as clean."""
    proc = validate(folder, tmp_path / "clean.json", "--jobs", jobs)
    assert proc.returncode == 0, proc.stderr
    assert all(f["file_error"] is None for f in files_of(tmp_path / "clean.json").values())


def test_a_file_that_kills_its_worker_is_one_file_error(folder, tmp_path):
    clean = validate(folder, tmp_path / "clean.json", "--jobs", "2")
    assert clean.returncode == 0, clean.stderr
    proc = validate(folder, tmp_path / "fault.json", "--jobs", "2", "--list-failures", fault="b.dll")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    got, want = files_of(tmp_path / "fault.json"), files_of(tmp_path / "clean.json")
    assert sorted(got) == sorted(NAMES)                       # nothing lost
    assert got["b.dll"]["file_error"]["kind"] == "worker-lost"
    for name in NAMES:
        if name != "b.dll":
            assert got[name] == want[name], name              # the others as a clean run has them
    assert "worker-lost" in proc.stdout
