"""`validate --cluster`: the batch on a Dask distributed cluster.

Why Dask: a study over a package ecosystem outgrows one machine, and researchers who have a
cluster already run Dask's scheduler on it; we hand it tasks rather than write a scheduler.
Why the report is still byte-identical to `--jobs N`'s: a task is one *part* of one file's
work (`batch.validate_file` with `only=` a chunk of MethodDef rids and/or `native=` RyuJIT's
tables), the same code `--jobs` runs, and `merge` puts the parts back together in table order
into the `FileReport` that one whole-file call would have made (counts summed, lists
concatenated part by part, the file-level counts and RyuJIT's side taken once).

Splitting (`plan`): the client reads each file's method headers (0.27 s for CoreLib) and
cuts a file with more than `chunk` EH methods into chunks of at most `chunk` EH methods plus
one part for the ReadyToRun tables, so that no task dominates (CoreLib is ~25% of a corpus
run by file); smaller files are one task, exactly `validate_file(path)`. Tasks are submitted
largest first.

Faults: Dask reschedules the tasks of a worker that dies (killed, or an LLVM abort that
escaped the CodegenPool's isolation) on another worker; a result is delivered once per
future and `merge` checks that every planned method is covered exactly once, so nothing is
lost or counted twice. A task that kills `allowed-failures` workers fails with KilledWorker:
its methods are then resubmitted one per task; a single method (or a file's native part)
that reaches the limit is run once more alone (Dask also blames the tasks queued beside the
culprit), and if it still kills workers it becomes one failure record, stage `batch`, kind
`worker-lost`; the run finishes.

Each Dask worker process runs the pipeline with its own LLVM CodegenPool (`batch._pool`, one
per process, started lazily: subprocess.Popen works from Dask's daemonic worker processes).

The corpus: by default workers open the paths the client names (a shared file system);
`send=True` (`--cluster-send`) ships each file's bytes instead, content-addressed: scattered
once per run, written once per worker machine under `$LLILC_EH_CACHE/cluster/<sha256>/`,
sha256-checked, and the worker's path is mapped back to the client's in the report
(docs/cluster.md).
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path

from . import batch
from .errors import LlilcEhError

CHUNK = 64              # EH methods per task for a large assembly (`--chunk`)
LOCAL_WORKERS = 2       # `--cluster local` without a count
FAULT_ENV = "LLILC_EH_CLUSTER_FAULT"   # fault injection for the tests: see `_inject_fault`


@dataclass(frozen=True)
class Part:
    """One task: `rids` None for the whole file, else the chunk's MethodDef rids (empty for the
    native part alone); `weight` = the EH methods it covers (the progress bar's unit)."""

    path: str
    index: int              # the part's place in its file: merge order
    rids: tuple[int, ...] | None
    native: bool
    weight: int
    eh: tuple[int, ...] = ()    # the EH methods among rids (a worker-lost record counts them)


def parse_address(text: str) -> tuple[str, int | str]:
    """`local`, `local:N` -> ("local", N); `tcp://host:port` (any `scheme://`) -> ("remote",
    address). Anything else is unusable input (exit 1, before any work)."""
    if text == "local" or text.startswith("local:"):
        count = text.partition(":")[2] or str(LOCAL_WORKERS)
        if not count.isdigit() or int(count) < 1:
            raise LlilcEhError(f"--cluster {text}: local:N needs a worker count N >= 1", kind="bad-input")
        return "local", int(count)
    if "://" in text and text.partition("://")[2]:
        return "remote", text
    raise LlilcEhError(f"--cluster {text}: expected local, local:N or a scheduler address such as "
                       "tcp://host:8786", kind="bad-input")


def plan(files: list[str], chunk: int = CHUNK) -> list[Part]:
    """Every file's parts. A file that cannot be read here, or has at most `chunk` EH
    methods, is one whole-file part (its errors are then `validate_file`'s own records)."""
    parts: list[Part] = []
    for path in dict.fromkeys(files):
        try:
            asm = batch.Assembly(path)
            rids = list(asm.methods_with_il())
            eh = set()
            for rid in rids:
                try:
                    if asm.body(rid).has_eh:
                        eh.add(rid)
                except Exception:  # noqa: BLE001 - a damaged body: validate_file records it
                    eh.add(rid)
        except Exception:  # noqa: BLE001 - the whole-file task records the file error
            parts.append(Part(path, 0, None, True, 0))
            continue
        if len(eh) <= chunk:
            parts.append(Part(path, 0, None, True, len(eh), tuple(sorted(eh))))
            continue
        current: list[int] = []
        weight = 0
        for rid in rids:
            current.append(rid)
            weight += rid in eh
            if weight == chunk:
                parts.append(_chunk(path, len(parts), current, eh))
                current, weight = [], 0
        if weight:
            parts.append(_chunk(path, len(parts), current, eh))
        parts.append(Part(path, len(parts), (), True, 0))
    # Renumber per file (the index is the merge order within a file).
    out, seen = [], Counter()
    for p in parts:
        out.append(Part(p.path, seen[p.path], p.rids, p.native, p.weight, p.eh))
        seen[p.path] += 1
    return out


def _chunk(path: str, index: int, rids: list[int], eh: set[int]) -> Part:
    mine = tuple(r for r in rids if r in eh)
    return Part(path, index, tuple(rids), False, len(mine), mine)


def merge(path: str, parts: list[batch.FileReport]) -> batch.FileReport:
    """The parts of one file (in part order) as the one report `validate_file(path)` makes:
    file-level values (method counts, the file error, RyuJIT's side) from the part that has
    them, per-method counts summed (`max_try_depth` the maximum), per-method lists
    concatenated in part order -- which is table order, as in one whole-file run, with the
    native part (RyuJIT's side, whose failures validate_file appends last) last. Fields
    added to FileReport later merge by their type (list: concatenate, Counter: add,
    int: sum, else the first value set)."""
    if len(parts) == 1:
        return parts[0]
    out = batch.FileReport(path=path)
    native = [p for p in parts if p.native is not None]
    for f in fields(batch.FileReport):
        name = f.name
        values = [getattr(p, name) for p in parts]
        first = next((v for v in values if v is not None), None)
        if name == "path":
            continue
        if name in ("methods", "with_il", "max_try_depth"):     # file-level (a lost part has 0)
            value = max(values)
        elif name == "native":
            value = native[0].native if native else None
        elif first is None:
            value = None
        elif isinstance(first, Counter):
            value = Counter()
            for v in values:
                value.update(v or {})
        elif isinstance(first, list):
            value = [x for v in values for x in v or ()]
        elif isinstance(first, (int, float)) and not isinstance(first, bool):
            value = sum(v or 0 for v in values)
        else:
            value = first
        setattr(out, name, value)
    return out


def _inject_fault(part: Part) -> None:
    """Fault injection for the tests (a real worker death, not a mock): with
    LLILC_EH_CLUSTER_FAULT=kill:RID[:MARKER] in the workers' environment, a task whose part
    covers MethodDef rid RID (decimal) kills its own worker process with SIGKILL -- every
    time, or, with MARKER, only the first time (MARKER is created as the record of it)."""
    spec = os.environ.get(FAULT_ENV)
    if not spec or not spec.startswith("kill:"):
        return
    _, rid, *marker = spec.split(":", 2)
    covered = part.eh if part.rids is None else part.rids
    if int(rid) not in covered:
        return
    if marker:
        try:
            fd = os.open(marker[0], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def run_part(part: Part, options: dict, blob=None) -> batch.FileReport:
    """The task a Dask worker runs: one part of one file, as `validate_file` does it (its
    LLVM worker is this process's `batch._pool`). `blob` = (sha256, bytes) when the client
    ships the file (`--cluster-send`)."""
    _inject_fault(part)
    path = part.path
    if blob is not None:
        path = _materialise(part.path, *blob)
    report = batch.validate_file(path, only=part.rids, native=part.native, **options)
    if path != part.path:
        _rename(report, path, part.path)
    return report


def _materialise(client_path: str, sha: str, data: bytes) -> str:
    """The shipped file on this worker's disk: `$LLILC_EH_CACHE/cluster/<sha256>/<name>`,
    written once per machine (atomically) and checked against its sha256 each time."""
    from .assembly.corpus import cache_root
    folder = cache_root() / "cluster" / sha
    target = folder / Path(client_path).name
    if not target.exists():
        if hashlib.sha256(data).hexdigest() != sha:
            raise LlilcEhError(f"{client_path}: the bytes received do not match sha256 {sha}", kind="bad-input")
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{target.name}.{os.getpid()}"
        tmp.write_bytes(data)
        os.replace(tmp, target)
    elif hashlib.sha256(target.read_bytes()).hexdigest() != sha:
        raise LlilcEhError(f"{target}: cached copy does not match sha256 {sha}", kind="bad-input")
    return str(target)


def _rename(report: batch.FileReport, worker_path: str, client_path: str) -> None:
    """A report made from the worker's copy, named as the client's file (its texts too)."""
    report.path = client_path
    for record in [report.file_error, *report.failures, *report.translate_failures]:
        if record and isinstance(record.get("reason"), str):
            record["reason"] = record["reason"].replace(worker_path, client_path)


def _lost(part: Part, exc: BaseException) -> batch.FileReport:
    """A part whose task kept killing workers, as one record: one method's (a single-method
    chunk), or the file's native part, or the whole file when it could not be planned."""
    report = batch.FileReport(path=part.path)
    method = None
    if part.rids and len(part.rids) == 1:
        method = f"0x{0x06000000 | part.rids[0]:08X}"
        try:
            method += f" {batch.Assembly(part.path).body(part.rids[0]).name}"
        except Exception:  # noqa: BLE001 - the token alone then
            pass
    what = "the method" if method else ("RyuJIT's tables" if part.rids == () else "the file")
    report.failures.append({"stage": "batch", "kind": "worker-lost", "method": method, "offset": None,
                            "reason": f"{what} killed every Dask worker that ran it ({type(exc).__name__})"})
    report.with_eh = len(part.eh)
    return report


def _split(part: Part) -> list[Part] | None:
    """A part that kept killing workers, one method per part (None: nothing left to split)."""
    if part.rids is None and part.eh:
        # A whole-file part: its methods one by one, then its native part.
        singles = [Part(part.path, part.index, (r,), False, 1, (r,)) for r in part.eh]
        return singles + [Part(part.path, part.index, (), True, 0)]
    if part.rids and len(part.rids) > 1:
        return [Part(part.path, part.index, (r,), False, int(r in part.eh), (r,) if r in part.eh else ())
                for r in part.rids if r in part.eh]
    return None


def _ignore_sigint_plugin():
    from distributed.diagnostics.plugin import WorkerPlugin

    class IgnoreSigint(WorkerPlugin):
        """A local worker ignores SIGINT (see `_connect`)."""

        def setup(self, worker):
            import threading
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, signal.SIG_IGN)

    return IgnoreSigint()


def _connect(address: str, allowed_failures: int | None):
    """A Client of the scheduler at `address`, or of a LocalCluster of N worker processes
    (one thread each: the pipeline is CPU-bound Python plus its LLVM child); the returned
    cluster (or None) must be closed after the client."""
    import dask
    from distributed import Client, LocalCluster

    kind, where = parse_address(address)
    if allowed_failures is not None:
        dask.config.set({"distributed.scheduler.allowed-failures": allowed_failures})
    if kind == "local":
        # Ctrl-C at a terminal reaches the whole process group: the local workers leave
        # stopping to us (as `batch._worker_init` does), or each prints its own traceback.
        # Ignored while they are spawned (the disposition is inherited), and by a plugin in
        # every worker started later (a killed worker's replacement).
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            # dashboard_address ":0": the scheduler's HTTP routes (health, metrics) on a free
            # port; None would still take 8787 and warn when another cluster holds it. Logs
            # only if critical: a lost worker's result is logged as an ERROR ("Couldn't gather
            # keys") although Dask then recomputes it; our records say what matters.
            cluster = LocalCluster(n_workers=where, threads_per_worker=1, processes=True,
                                   dashboard_address=":0", silence_logs=logging.CRITICAL)
        finally:
            signal.signal(signal.SIGINT, previous)
        client = Client(cluster)
        client.register_plugin(_ignore_sigint_plugin(), name="llilc-eh-ignore-sigint")
        return client, cluster
    try:
        return Client(where, timeout="10s"), None
    except (OSError, TimeoutError, ValueError) as exc:
        raise LlilcEhError(f"--cluster {address}: cannot reach a Dask scheduler there ({exc})",
                           kind="bad-input") from None


def run(files: list[str], jobs: int = 1, progress: bool = True, finished: dict | None = None, *,
        address: str = "local", chunk: int = CHUNK, send: bool = False, client=None,
        allowed_failures: int | None = None, on_part=None, **options) -> list[batch.FileReport]:
    """`batch.run` on a Dask cluster: the same reports, in input order. `options` are
    `validate_file`'s (translate, opt, references, ...); `jobs` is the worker count of a
    plain `local` (else the cluster's workers are the jobs). `client`: a connected distributed.Client to use instead of
    `address`. `on_part(part, done, total)` is called in this thread after each finished
    part (the tests kill a worker from it)."""
    from distributed import as_completed
    from distributed.scheduler import KilledWorker

    if chunk < 1:
        raise LlilcEhError(f"--chunk {chunk}: a task needs at least one EH method", kind="bad-input")
    options["references"] = tuple(options.get("references", ()))
    results: dict[str, batch.FileReport] = finished if finished is not None else {}
    parts = plan(files, chunk)
    close = []
    if client is None:
        if address == "local" and jobs > 1:              # `--cluster local --jobs N`: N workers
            address = f"local:{jobs}"
        client, owned = _connect(address, allowed_failures)
        close = [client] + ([owned] if owned else [])
    # The progress `--jobs` shows (view.progress: rich's bar in EH methods with an ETA on a
    # terminal, else a line per finished file); every file's EH methods are known from the
    # plan, and a finished part advances the bar by the EH methods it covers.
    from .view.progress import BatchProgress
    bar = BatchProgress(files, enabled=progress)
    eh_count = Counter()
    for p in parts:
        eh_count[p.path] += p.weight
    pending = Counter(p.path for p in parts)
    got: dict[str, list[tuple[tuple, Part, batch.FileReport]]] = {p: [] for p in pending}
    outstanding: dict[str, tuple] = {}
    queue = as_completed()
    try:
        bar.__enter__()
        for path in eh_count:
            bar.event(("start", path, eh_count[path]))
        blobs = _ship(client, parts) if send else {}

        def submit(part: Part, key: tuple) -> None:
            # pure=False: a retry after a KilledWorker must not reuse the failed task's key.
            future = client.submit(run_part, part, options, blobs.get(part.path), pure=False)
            outstanding[future.key] = (future, part, key)
            queue.add(future)

        # Largest file first (keeps every worker busy to the end), its native part first (one
        # task for CoreLib's R2R tables), its chunks in order: files then finish one by one,
        # which an interrupted run's summary (finished files only) can show.
        size = Counter()
        for p in parts:
            size[p.path] += p.weight
        for p in sorted(parts, key=lambda p: (-size[p.path], p.path, not p.native, p.index)):
            submit(p, (p.index,))
        def finish(part: Part, key: tuple, report: batch.FileReport) -> None:
            got[part.path].append((key, part, report))
            for _ in range(part.weight):
                bar.event(("method", part.path))
            if on_part is not None:
                on_part(part, bar.done_methods, sum(eh_count.values()))
            pending[part.path] -= 1
            if pending[part.path] == 0:
                done = sorted(got.pop(part.path), key=lambda x: x[0])
                _check_complete(part.path, parts, [pt for _, pt, _ in done])
                results[part.path] = merge(part.path, [r for _, _, r in done])
                bar.file_done(part.path, results[part.path].with_eh)

        suspects = []
        for future in queue:
            _, part, key = outstanding.pop(future.key)
            try:
                report = future.result()
            except KilledWorker:
                pieces = _split(part)
                if pieces is None:
                    suspects.append((part, key))        # judged alone, below
                    continue
                pending[part.path] += len(pieces) - 1
                for j, piece in enumerate(pieces):
                    submit(piece, (*key, j))
                continue
            finish(part, key, report)
        # Dask counts a death against every task *assigned* to the dying worker, so a single
        # method can reach allowed-failures only for having been beside the culprit (seen with
        # allowed-failures 1: two records, one innocent). Each is run again alone on the
        # cluster; only one that still kills its workers is lost.
        for part, key in suspects:
            future = client.submit(run_part, part, options, blobs.get(part.path), pure=False)
            outstanding[future.key] = (future, part, key)
            try:
                report = future.result()
            except KilledWorker as exc:
                report = _lost(part, exc)
            outstanding.pop(future.key, None)
            finish(part, key, report)
    except BaseException:
        # Ctrl-C (or a bug): nothing more is wanted from the cluster.
        client.cancel([f for f, _, _ in outstanding.values()])
        raise
    finally:
        bar.__exit__(None, None, None)
        for c in close:
            _quiet_close(c)
    return [results[f] for f in files]


def _check_complete(path: str, planned: list[Part], done: list[Part]) -> None:
    """Every planned EH method of the file in exactly one finished part, and RyuJIT's side
    once: a slip in the splitting would lose or double-count methods silently, so it is an
    internal error instead."""
    mine = [p for p in planned if p.path == path]
    want = sorted(r for p in mine for r in p.eh)
    have = sorted(r for p in done for r in p.eh)
    natives = sum(p.native for p in done)
    if have != want or natives != 1:
        raise RuntimeError(f"{path}: parts cover EH methods {len(have)} of {len(want)} planned "
                           f"({len(set(have))} distinct), native parts {natives}")


def _ship(client, parts: list[Part]) -> dict:
    """`--cluster-send`: each file's bytes scattered once, under its sha256 (content
    addressed: the same file named twice is one blob)."""
    blobs = {}
    for path in dict.fromkeys(p.path for p in parts):
        data = Path(path).read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        blobs[path] = (sha, data)
    # The blobs travel inside the task's arguments the first time; Dask keeps a scattered
    # object in worker memory, so it is sent to a worker once, not once per task.
    futures = client.scatter({sha: (sha, data) for sha, data in blobs.values()}, hash=False)
    return {path: futures[sha] for path, (sha, _) in blobs.items()}


def _quiet_close(thing) -> None:
    """Close a Client or LocalCluster without Dask's shutdown chatter reaching the user."""
    logging.getLogger("distributed").setLevel(logging.CRITICAL)
    try:
        thing.close()
    except Exception:  # noqa: BLE001 - closing is best effort; the results are in
        pass
