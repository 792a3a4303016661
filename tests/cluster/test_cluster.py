"""`validate --cluster` on a real Dask LocalCluster: the same report bytes as `--jobs 2`, and
faults (a worker killed mid-run, a method that keeps killing workers) handled.

CPU is kept modest (two cores are shared): one LocalCluster of two single-thread workers for
the module, the sample and two small corpus assemblies with `--translate`, a small `--chunk`
so that every file is really split into parts (the property under test is the merge).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed")   # a dependency (pyproject): present in the suite

from llilc_eh import batch, cluster  # noqa: E402
from llilc_eh.assembly.corpus import Corpus  # noqa: E402
from llilc_eh.cli import sample_path  # noqa: E402

LLILC_EH = Path(sys.executable).parent / "llilc-eh"
FRAMEWORK = Corpus().framework_dir
SMALL = [str(FRAMEWORK / "System.Security.Claims.dll"), str(FRAMEWORK / "System.Threading.Channels.dll")]
SAMPLE = str(sample_path())


# The LLVM result cache (backend/cache.py) off everywhere here: the workers must really run
# LLVM (each its own CodegenPool), not read what the --jobs run stored.
NO_LLVM_CACHE = {"LLILC_EH_LLVM_CACHE": "off"}


def _cli(*args: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(LLILC_EH), "validate", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **NO_LLVM_CACHE, **(env or {})}, cwd=cwd)


@pytest.fixture(scope="module")
def local_cluster():
    """Two worker processes, one thread each, as `--cluster local:2` makes them (their
    environment without the LLVM result cache)."""
    saved = {k: os.environ.get(k) for k in NO_LLVM_CACHE}
    os.environ.update(NO_LLVM_CACHE)
    try:
        cluster_ = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                            dashboard_address=":0", silence_logs=50)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    with cluster_ as lc, distributed.Client(lc) as client:
        assert set(client.run(lambda: os.environ.get("LLILC_EH_LLVM_CACHE")).values()) == {"off"}
        yield lc, client


@pytest.fixture(scope="module")
def jobs2_reports(tmp_path_factory):
    """`--jobs 2 --translate` reports (bytes) of the sample and of the two corpus assemblies."""
    out = {}
    d = tmp_path_factory.mktemp("jobs2")
    for name, files in (("sample", [SAMPLE]), ("small", SMALL)):
        r = _cli(*files, "--translate", "--jobs", "2", "-q", "--json", str(d / f"{name}.json"),
                 "--per-method", str(d / f"{name}.jsonl"))
        assert r.returncode in (0, 2), r.stderr
        out[name] = ((d / f"{name}.json").read_bytes(), r.returncode)
        out[name + ".jsonl"] = (d / f"{name}.jsonl").read_bytes()
    return out


def test_parts_merge_into_the_whole_file_report():
    """Without Dask: the parts `plan` cuts, each run by `validate_file` and merged, are the
    whole-file report; with a part missing or doubled they are not (the comparison can fail)."""
    parts = cluster.plan([SAMPLE, *SMALL], chunk=7)
    for path in (SAMPLE, *SMALL):
        mine = [p for p in parts if p.path == path]
        assert len(mine) > 2 and mine[-1].native and mine[-1].rids == ()
        reports = [batch.validate_file(path, only=p.rids, native=p.native) for p in mine]
        whole = batch.validate_file(path)
        assert cluster.merge(path, reports).as_dict() == whole.as_dict()
        assert sum(p.weight for p in mine) == whole.with_eh
    # Negative controls: a part lost, or a part counted twice, is a different report.
    mine = [p for p in parts if p.path == SAMPLE]
    reports = [batch.validate_file(SAMPLE, only=p.rids, native=p.native) for p in mine]
    whole = batch.validate_file(SAMPLE).as_dict()
    assert cluster.merge(SAMPLE, reports[1:]).as_dict() != whole
    assert cluster.merge(SAMPLE, reports[:1] + reports).as_dict() != whole


def test_address_parsing():
    assert cluster.parse_address("local") == ("local", 2)
    assert cluster.parse_address("local:3") == ("local", 3)
    assert cluster.parse_address("tcp://10.0.0.1:8786") == ("remote", "tcp://10.0.0.1:8786")
    for bad in ("local:0", "local:x", "host:8786", "tcp://"):
        with pytest.raises(cluster.LlilcEhError):
            cluster.parse_address(bad)


def test_bad_cluster_address_is_unusable_input():
    r = _cli(SAMPLE, "--cluster", "nowhere", "-q")
    assert r.returncode == 1 and "Traceback" not in r.stderr and "--cluster nowhere" in r.stderr
    r = _cli(SAMPLE, "--cluster", "tcp://127.0.0.1:9", "-q")      # nothing listens on the discard port
    assert r.returncode == 1 and "Traceback" not in r.stderr and "cannot reach" in r.stderr


@pytest.mark.parametrize("name", ["sample", "small"])
def test_report_equals_jobs2(name, local_cluster, jobs2_reports, tmp_path):
    """The CLI against the running scheduler's address: the JSON report's bytes and the exit
    status are `--jobs 2`'s."""
    lc, _ = local_cluster
    files = [SAMPLE] if name == "sample" else SMALL
    r = _cli(*files, "--translate", "--cluster", lc.scheduler_address, "--chunk", "8",
             "--json", str(tmp_path / "c.json"), "--per-method", str(tmp_path / "c.jsonl"))
    expected, status = jobs2_reports[name]
    assert r.returncode == status, r.stderr
    assert (tmp_path / "c.json").read_bytes() == expected
    records = (tmp_path / "c.jsonl").read_bytes()
    assert records == jobs2_reports[name + ".jsonl"]          # the per-method records too
    assert records.count(b"\n") == json.loads(expected)["files"][0]["with_eh"] + \
        sum(f["with_eh"] for f in json.loads(expected)["files"][1:])
    assert "EH methods)" in r.stderr          # progress: per file, counted in EH methods (not a tty)
    assert all(line.startswith("[") for line in r.stderr.splitlines()), r.stderr    # nothing else


def test_worker_killed_mid_run(local_cluster, jobs2_reports):
    """os.kill of a worker process while parts are still running: Dask reruns its tasks on
    the surviving (or restarted) worker; the report is still complete and identical."""
    lc, client = local_cluster
    before = set(client.run(os.getpid).values())
    killed = []

    def kill_busy_worker(part, done, total):
        if killed:
            return
        busy = [addr for addr, keys in client.processing().items() if keys]
        assert busy and done < total, "nothing left running: the kill would not be mid-run"
        pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
        os.kill(pid, signal.SIGKILL)
        killed.append((pid, done, total))

    reports = cluster.run(SMALL, progress=False, client=client, chunk=4, translate=True, on_part=kill_busy_worker)
    assert killed and killed[0][0] in before
    client.wait_for_workers(2, timeout=60)
    assert killed[0][0] not in set(client.run(os.getpid).values())     # that process is gone
    assert batch.json_report(reports).encode() == jobs2_reports["small"][0]


def test_method_that_keeps_killing_workers(tmp_path, jobs2_reports):
    """A method whose task kills every worker that runs it (fault injection: the worker sends
    itself SIGKILL) becomes one batch/worker-lost failure naming it; every other method's
    results are the --jobs run's, and the run finishes (exit 2: a failure)."""
    path = SMALL[0]
    parts = cluster.plan([path], chunk=8)
    victim = parts[1].eh[0]                       # an EH method of the second chunk
    env = {cluster.FAULT_ENV: f"kill:{victim}", "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1"}
    r = _cli(path, "--cluster", "local:2", "--chunk", "8", "--json", str(tmp_path / "c.json"), "-q", env=env)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    got = json.loads((tmp_path / "c.json").read_text())["files"][0]
    lost = [f for f in got["failures"] if f["stage"] == "batch"]
    assert len(lost) == 1 and lost[0]["kind"] == "worker-lost"
    assert lost[0]["method"].startswith(f"0x{0x06000000 | victim:08X} ")
    plain = tmp_path / "j.json"
    assert _cli(path, "-q", "--json", str(plain)).returncode in (0, 2)
    want = json.loads(plain.read_text())["files"][0]
    assert [f for f in got["failures"] if f["stage"] != "batch"] == want["failures"]
    for key in ("methods", "with_il", "with_eh", "native"):
        assert got[key] == want[key], key
    assert sum(got["clauses"].values()) < sum(want["clauses"].values())   # the lost method's clauses
    assert "batch:worker-lost 1" in r.stdout


def test_worker_killed_once_is_retried(tmp_path, jobs2_reports):
    """A task whose worker dies once (SIGKILL in the middle of the run, injected at one
    method's chunk) is run again elsewhere: the report is the --jobs 2 report, exit status
    too, and the kill did happen (its marker exists)."""
    marker = tmp_path / "killed-once"
    parts = cluster.plan(SMALL, chunk=8)
    victim = parts[1].eh[0]
    env = {cluster.FAULT_ENV: f"kill:{victim}:{marker}"}
    r = _cli(*SMALL, "--translate", "--cluster", "local:2", "--chunk", "8", "--json", str(tmp_path / "c.json"),
             "-q", env=env)
    expected, status = jobs2_reports["small"]
    assert marker.exists(), "the fault was not injected: this test would prove nothing"
    assert r.returncode == status, r.stderr
    assert (tmp_path / "c.json").read_bytes() == expected


def test_cluster_send_bytes(tmp_path, local_cluster, jobs2_reports):
    """--cluster-send: the workers get the bytes (content-addressed, sha256-checked), cache
    them under $LLILC_EH_CACHE/cluster/<sha256>/ and the report still names the client's paths."""
    lc, client = local_cluster
    cache = tmp_path / "cache"
    where = str(cache)
    client.run(lambda: os.environ.__setitem__("LLILC_EH_CACHE", where))     # in each worker process
    try:
        reports = cluster.run([SAMPLE], progress=False, client=client, chunk=8, translate=True, send=True)
    finally:
        client.run(lambda: os.environ.pop("LLILC_EH_CACHE", None))
    assert batch.json_report(reports).encode() == jobs2_reports["sample"][0]
    from llilc_eh.assembly.corpus import sha256_of
    assert (cache / "cluster" / sha256_of(Path(SAMPLE)) / "sample.dll").read_bytes() == Path(SAMPLE).read_bytes()


def test_sent_bytes_are_checked(tmp_path, monkeypatch):
    """A blob whose bytes do not hash to its name is refused (a named error, not a run on
    the wrong file); the right one is written once and then reused from the cache."""
    monkeypatch.setenv("LLILC_EH_CACHE", str(tmp_path))
    data = Path(SAMPLE).read_bytes()
    import hashlib
    sha = hashlib.sha256(data).hexdigest()
    with pytest.raises(cluster.LlilcEhError, match="do not match sha256"):
        cluster._materialise(SAMPLE, sha, data[:-1])
    path = Path(cluster._materialise(SAMPLE, sha, data))
    assert path.read_bytes() == data and path.parent.name == sha
    path.write_bytes(data[:-1])                      # a damaged cached copy is noticed too
    with pytest.raises(cluster.LlilcEhError, match="cached copy"):
        cluster._materialise(SAMPLE, sha, data)


@pytest.mark.parametrize("how", ["SIGINT-group", "SIGTERM"])
def test_interrupted_run(how):
    """Ctrl-C at a terminal (SIGINT to the whole process group: the local workers too) or
    SIGTERM to llilc-eh, once a file has finished: 130 / 143, the summary of the finished
    files, no traceback from us or from a Dask worker."""
    files = [str(FRAMEWORK / f"{n}.dll") for n in ("System.Collections", "System.Console",
                                                      "System.Security.Claims", "System.Threading.Channels")]
    p = subprocess.Popen([str(LLILC_EH), "validate", *files, "--translate", "--cluster", "local:2", "--chunk", "4"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env={**os.environ, **NO_LLVM_CACHE})
    first = p.stderr.readline()                     # "[1/4] NAME (k/K EH methods)": a file finished
    assert first.startswith("[1/4] "), first
    if how == "SIGINT-group":
        os.killpg(p.pid, signal.SIGINT)
    else:
        os.kill(p.pid, signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert p.returncode == (130 if how == "SIGINT-group" else 143), (out[-500:], err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "interrupted: " in out, (out[-500:], err)
    finished = int(out.split("interrupted: ")[1].split(" of 4")[0])
    assert 1 <= finished < 4, (out[-500:], err)
