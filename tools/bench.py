#!/usr/bin/env python3
"""Time each pipeline stage over the EH methods of real assemblies; print the figures.

Usage: tools/bench.py [--assembly NAME ...] [--opt 0|2] [--jobs N] [--limit N]
                      [--no-differential] [--profile N] [--no-ryujit] [--ryujit-repeats N]
                      [--cache-runs [--cache-jobs N]]

NAME is a corpus file name or a path (repeatable; positional paths work too). Default:
System.Private.CoreLib.dll and Python.Runtime.dll from the corpus (1,008 EH methods).
Every EH method goes through the whole pipeline (`llilc_eh.pipeline`): IL, reader, lint +
verify, funclet model, LLVM codegen, recovery, final image + verify, clause generation,
validator, LLVM differential. A benchmark, not a test: a method's failure is counted and
the run goes on.

How it runs, as `Pipeline.run_many` does: the front half of every method in this process,
then `CodegenPool.compile_many` on `--jobs` LLVM workers, then the back half here. The
workers are started (and warmed at the same O level) before the clock starts; loading the
assemblies and finding their EH methods (every IL body is parsed) is timed apart.

What is counted where:

* stage seconds are `MethodRun.seconds` (`il` includes reading the method body); `codegen` is the worker's own time
  (`CodegenTimings.worker`: parse + verify, the O<n> pipeline, the codegen run that prints
  the assembly text, and the object -- assembled from that text, or for the few modules on
  the direct route a second codegen run; `route` counts them). The isolation overhead, `codegen-wait` minus
  `codegen` (pickling, pipes, scheduling), is shown apart and is not in the stage total.
* LLVM = the worker's time + LLVM's work inside this process. `lint` parses the module
  with llvmlite, prints it (`str(module)`: LLVM's printer, which the lint reads), runs the
  Python rules and LLVM's verifier; `model` reuses that reading (`reader.lint.read_module`).
  Those LLVM calls are timed in a side measurement after the run (`reader.lint.parse`,
  `str(module)`, `reader.lint.verify_module` on each method's module): lint's LLVM share is
  parse + print + verify. Python = everything else, which
  includes the native libraries Python drives (capstone in recovery and image, construct,
  dnfile); `--profile` shows how much.
* single-core methods/s = methods / sum of stage times (one core doing all of it, without
  the isolation overhead); wall methods/s = methods / wall time of the three phases. The
  front and back halves run in one Python process, so with several workers only the LLVM
  phase is parallel and the wall time stays bounded below by the Python time.
* all of the above is wall time, which on a shared machine includes waiting for a core.
  The CPU section times the same run on CPU clocks: this process per phase
  (`time.process_time`, also per method) and the workers (their own CPU clock per module), with
  the load average at the start and the end. Its methods/s and Python/LLVM split are far
  less sensitive to other load than the wall figures, though not immune (shared caches,
  the hypervisor's scheduling): compare runs made under a similar load average.

RyuJIT in the same run (`--no-ryujit` skips it): `tools/ryujit_bench.cs`, built with mcs,
runs on the pinned CoreCLR 3.1.23 and times `RuntimeHelpers.PrepareMethod` (one JIT
compilation: the prestub runs once) on the same EH methods, each assembly's in one process,
`--ryujit-repeats` fresh processes per JIT mode (per-method median over them). Two modes
(`RYUJIT_MODES`): full-opt (ReadyToRun off, tiering off) beside our O2, tier-0 (tiering on,
quick JIT also for methods with loops, call counting off so nothing is promoted) beside our
O0; the ratio is printed for the mode that matches `--opt`, the other mode's figures too.
Generic definitions (and methods of generic types) are not prepared: PrepareMethod needs an
instantiation, we compile the definition. A method the runtime had already compiled while
starting (the first call returns in under `ALREADY_COMPILED_S`; a JIT compilation measured
>= 11 us, a no-op call < 1 us) is counted apart. Ours per method is the sum of its stage
times (wall, the LLVM worker's time included), RyuJIT's the Stopwatch around the call
(wall); compared over the methods both compiled (ours: every stage clean).

`--cache-runs` instead times `llilc-eh validate --translate --json` twice on the assemblies
(a folder is passed on as a folder: the whole corpus is one argument) with an empty LLVM
result cache (`backend.cache`, a fresh temporary folder): cold, then warm; it prints both
wall times, EH methods per second of each (the EH methods of the report over the wall time),
the ratio, the cache's entries and size, and whether the two JSON reports are byte-identical
(exit 2 if not).

`--profile N` instead runs cProfile over N EH methods of the first assembly and prints the
top functions by cumulative and by own time, front and back half apart, and own time by
library. The last line of a normal run is a JSON summary (one line, sorted keys); the exit
status is 0 when every method came through clean, 2 otherwise.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Self

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.loader import Assembly
from llilc_eh.backend.cache import LlvmCache
from llilc_eh.backend.codegen import OBJECT_ROUTES, CodegenPool, CodegenResult
from llilc_eh.batch import tune_gc
from llilc_eh.check.toolchain import ToolchainError, compile_cs, write_runtimeconfig
from llilc_eh.errors import LlilcEhError
from llilc_eh.pipeline import STAGES, MethodRun, Pipeline, eh_methods, summarize
from llilc_eh.reader.lint import parse, verify_module

DEFAULT_ASSEMBLIES = ("System.Private.CoreLib.dll", "Python.Runtime.dll")
FRONT = ("il", "reader", "lint", "model")
BACK = ("recover", "image", "clauses", "validate", "differential")
# the worker's own split of `codegen` (CodegenTimings fields)
WORKER_PARTS = (("parse", "parse + verify (+ copies)"), ("opt", "O<n> pass pipeline"),
                ("asm", "codegen: assembly text"), ("codegen", "object (assembled; direct: 2nd codegen)"))
DRIVER_SOURCE = Path(__file__).resolve().with_name("ryujit_bench.cs")
# CoreCLR 3.1's knobs (src/inc/clrconfigvalues.h at v3.1.23): ReadyToRun=0 makes CoreLib's
# precompiled code unused, so every method is JIT-compiled; TC_QuickJitForLoops=1 lets tier 0
# take methods with loops too (3.1's default sends them to full opt); TC_CallCounting=0 keeps
# tier-0 code without ever promoting it (no background tier-1 JIT competing for the cores).
RYUJIT_MODES = {
    "full-opt": {"COMPlus_ReadyToRun": "0", "COMPlus_TieredCompilation": "0"},
    "tier-0": {"COMPlus_ReadyToRun": "0", "COMPlus_TieredCompilation": "1", "COMPlus_TC_QuickJit": "1",
               "COMPlus_TC_QuickJitForLoops": "1", "COMPlus_TC_CallCounting": "0"},
}
MODE_OF_OPT = {2: "full-opt", 0: "tier-0"}
ALREADY_COMPILED_S = 5e-6   # measured on CoreLib: no-op calls 0.1-0.7 us, compilations >= 11 us
WARMUP_IR = "define i32 @warmup(i32 %x) {\n  %y = add i32 %x, 1\n  ret i32 %y\n}\n"


@dataclass
class Target:
    """One assembly under test: its pipeline and the EH methods it runs."""

    name: str
    pipeline: Pipeline
    rids: list[int]
    bodies: int          # IL bodies parsed to find the EH methods


@dataclass
class Batch:
    runs: list[MethodRun]
    owners: list[str]           # the assembly of each run
    wall: dict[str, float]      # front, llvm, back
    cpu: dict[str, float]       # front, llvm-main, back (this process), workers
    cpu_per_method: dict[str, list[float]]   # front, back: this process's CPU seconds per call
    starts: int                 # worker processes started during the timed run
    restarts: int
    gc: GcClock                 # this process's cyclic garbage collections during the run
    cpu_of_run: dict[int, float]  # index in runs -> CPU seconds: this process's front + back, its worker's


# -- running -----------------------------------------------------------------------------------

class GcClock:
    """The CPU time of this process's cyclic garbage collections while it is installed
    (`gc.callbacks`): collections and seconds per generation. Why measured apart: it is a
    tunable (`batch.GC_THRESHOLDS`), and an A/B of whole runs cannot see a few percent on
    a shared machine, while the collector's own time can be read exactly."""

    def __init__(self):
        self.collections, self.seconds = [0, 0, 0], [0.0, 0.0, 0.0]
        self._started = 0.0

    def __enter__(self) -> Self:
        gc.callbacks.append(self._tick)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self._tick)

    def _tick(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.collections[info["generation"]] += 1
            self.seconds[info["generation"]] += time.process_time() - self._started


def resolve(names: list[str], corpus: Corpus, folders: bool = False) -> list[Path]:
    """Corpus names or paths; with `folders` (`--cache-runs`, which hands them to `validate`)
    a folder stays a folder: `validate` takes every assembly in it."""
    return [Path(n) if folders and Path(n).is_dir() else corpus.locate(n) for n in names or DEFAULT_ASSEMBLIES]


def load(paths: list[Path], pool: CodegenPool, args) -> list[Target]:
    targets = []
    for path in paths:
        asm = Assembly(path)
        rids = eh_methods(asm)
        if args.limit is not None:
            rids = rids[:args.limit]
        pipeline = Pipeline(asm, pool, opt=args.opt, differential=args.differential)
        _ = pipeline.ee     # the JIT-EE interface is built once per assembly: setup, not a method's cost
        targets.append(Target(path.name, pipeline, rids, sum(1 for _ in asm.methods_with_il())))
    return targets


def warm_up(pool: CodegenPool, opt: int) -> None:
    """Start every worker and create its target machine at `opt`, off the clock."""
    parse(WARMUP_IR)    # llvmlite in this process, too
    for result in pool.compile_many([WARMUP_IR] * (2 * pool.size), opt):
        if isinstance(result, LlilcEhError):
            raise result


def run_batch(targets: list[Target], pool: CodegenPool, opt: int) -> Batch:
    """The three phases of `Pipeline.run_many`, over all assemblies, each on the wall clock
    and on the CPU clocks (this process; the workers' own clock per module, `CodegenTimings.cpu`)."""
    starts, restarts = pool.starts, pool.restarts
    wall, cpu = {}, {}
    per_method: dict[str, list[float]] = {"front": [], "back": []}
    cpu_clock = time.process_time
    with GcClock() as gc_clock:
        c0, t0 = cpu_clock(), time.perf_counter()
        fronts = []
        cpu_of_run: dict[int, float] = {}
        for t in targets:
            for rid in t.rids:
                c = cpu_clock()
                fronts.append((t, t.pipeline.front(rid)))
                per_method["front"].append(cpu_clock() - c)
                cpu_of_run[len(fronts) - 1] = per_method["front"][-1]
        c1, t1 = cpu_clock(), time.perf_counter()
        todo = [(i, t, r) for i, (t, r) in enumerate(fronts) if r.error is None]
        results = pool.compile_many([r.reader.module for _, _, r in todo], opt, methods=[r.name for _, _, r in todo])
        c2, t2 = cpu_clock(), time.perf_counter()
        for (i, t, r), result in zip(todo, results):
            c = cpu_clock()
            t.pipeline.back(r, result)
            per_method["back"].append(cpu_clock() - c)
            cpu_of_run[i] += per_method["back"][-1] + (result.timings.cpu if isinstance(result, CodegenResult) else 0.0)
        c3, t3 = cpu_clock(), time.perf_counter()
    wall["front"], wall["llvm"], wall["back"] = t1 - t0, t2 - t1, t3 - t2
    cpu["front"], cpu["llvm-main"], cpu["back"] = c1 - c0, c2 - c1, c3 - c2
    # Modules that failed in a worker (an abort, a timeout) are not counted: their worker's
    # clock went with it.
    cpu["workers"] = sum(r.timings.cpu for r in results if isinstance(r, CodegenResult))
    return Batch([r for _, r in fronts], [t.name for t, _ in fronts], wall, cpu, per_method,
                 pool.starts - starts, pool.restarts - restarts, gc_clock, cpu_of_run)


def in_process_llvm(runs: list[MethodRun]) -> dict[str, list[float]]:
    """Side measurement: the LLVM calls `lint` and `model` make, per method that got a module;
    wall seconds per call, and CPU seconds (`cpu-*`, one total each)."""
    out: dict[str, list[float]] = {k: [] for k in ("parse", "print", "verify",
                                                   "cpu-parse", "cpu-print", "cpu-verify")}
    wall, cpu = time.perf_counter, time.process_time
    for r in runs:
        if r.reader is None or "lint" not in r.seconds:
            continue
        try:
            c0, t0 = cpu(), wall()
            module = parse(r.reader.module)
            c1, t1 = cpu(), wall()
            str(module)
            c2, t2 = cpu(), wall()
            verify_module(module)
            c3, t3 = cpu(), wall()
        except LlilcEhError:
            continue
        for k, w, c in (("parse", t1 - t0, c1 - c0), ("print", t2 - t1, c2 - c1), ("verify", t3 - t2, c3 - c2)):
            out[k].append(w)
            out[f"cpu-{k}"].append(c)
    return out


# -- RyuJIT in the same run ---------------------------------------------------------------------

@dataclass
class RyuJitTimes:
    """One JIT mode over one assembly: per rid, the median seconds of its compilations
    (methods compiled now), and each other method's status."""

    seconds: dict[int, float]
    status: Counter             # ok, already-compiled, generic, failed:..., unresolved:...


def build_driver(folder: Path) -> Path:
    """tools/ryujit_bench.cs compiled by mcs into `folder`, with its runtimeconfig."""
    try:
        exe = compile_cs(DRIVER_SOURCE, folder / "ryujit_bench.exe", "-optimize+")
    except ToolchainError as e:
        raise SystemExit(f"bench: {e}") from None
    write_runtimeconfig(exe)
    return exe


def ryujit_run(dotnet: Path, exe: Path, assembly: Path, rids: list[int], mode: str) -> dict[int, tuple[str, float]]:
    """One driver process: rid -> (status, seconds of the first PrepareMethod call)."""
    tokens = exe.with_name(f"{assembly.stem}.tokens")
    tokens.write_text("".join(f"0x{0x06000000 | rid:08X}\n" for rid in rids))
    env = dict(os.environ, DOTNET_CLI_TELEMETRY_OPTOUT="1", DOTNET_NOLOGO="1", **RYUJIT_MODES[mode])
    proc = subprocess.run([str(dotnet), str(exe), str(assembly), str(tokens)], capture_output=True, text=True,
                          env=env, cwd=exe.parent, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"bench: the RyuJIT driver failed on {assembly.name} ({mode}, exit {proc.returncode}): "
                         f"{proc.stderr.strip()[-2000:]}")
    out = {}
    for line in proc.stdout.splitlines():
        token, status, first, _second, frequency = line.split("\t")
        seconds = int(first) / int(frequency)
        if status == "ok" and seconds < ALREADY_COMPILED_S:
            status = "already-compiled"
        out[int(token, 16) & 0xFFFFFF] = (status, seconds)
    return out


def ryujit(targets: list[Target], repeats: int) -> dict[str, dict[str, RyuJitTimes]]:
    """Every JIT mode over every assembly's EH methods: mode -> assembly name -> times. A
    method counts as compiled now only if it was in every repeat."""
    dotnet = Corpus().dotnet
    out: dict[str, dict[str, RyuJitTimes]] = {m: {} for m in RYUJIT_MODES}
    with tempfile.TemporaryDirectory(prefix="llilc-eh-ryujit-") as tmp:
        exe = build_driver(Path(tmp))
        for t in targets:
            path = Path(t.pipeline.asm.path)
            for mode in RYUJIT_MODES:
                runs = [ryujit_run(dotnet, exe, path, t.rids, mode) for _ in range(repeats)]
                seconds, status = {}, Counter()
                for rid in t.rids:
                    seen = [r[rid] for r in runs if rid in r]
                    kinds = {s for s, _ in seen}
                    if len(seen) == repeats and kinds == {"ok"}:
                        seconds[rid] = statistics.median(v for _, v in seen)
                        status["ok"] += 1
                    else:
                        status[sorted(kinds - {"ok"})[0] if kinds - {"ok"} else "missing"] += 1
                out[mode][t.name] = RyuJitTimes(seconds, status)
    return out


def ryujit_lines(runs: list[MethodRun], owners: list[str], times: dict[str, dict[str, RyuJitTimes]],
                 opt: int, cpu_of_run: dict[int, float]) -> dict:
    """Ours vs RyuJIT per method over the methods both compiled; the ratio for the matching
    mode (O2 ~ full-opt, O0 ~ tier-0). Ours also by CPU time (this process's front and back
    half + the worker's clock), which other load on the machine inflates less."""
    ours = {(a, r.rid): sum(r.seconds.get(s, 0.0) for s in STAGES) for a, r in zip(owners, runs) if r.ok}
    ours_cpu = {(a, r.rid): cpu_of_run.get(i, 0.0) for i, (a, r) in enumerate(zip(owners, runs)) if r.ok}
    record = {}
    for mode, per_assembly in times.items():
        status = sum((t.status for t in per_assembly.values()), Counter())
        theirs = {(a, rid): v for a, t in per_assembly.items() for rid, v in t.seconds.items()}
        both = sorted(set(ours) & set(theirs))
        matching = MODE_OF_OPT.get(opt) == mode
        print(f"  RyuJIT {mode}{' (beside ours at O%d)' % opt if matching else ' (for reference)'}: "
              f"{', '.join(f'{k} {n}' for k, n in sorted(status.items()))}")
        if not theirs:
            continue
        r_all = list(theirs.values())
        print(f"    RyuJIT, all {len(r_all)} compiled: median {ms(statistics.median(r_all)).strip()} ms, "
              f"mean {ms(statistics.fmean(r_all)).strip()} ms, total {sum(r_all):.3f} s")
        entry = {"ryujit_methods": len(r_all), "ryujit_median_ms": round(statistics.median(r_all) * 1e3, 4),
                 "ryujit_mean_ms": round(statistics.fmean(r_all) * 1e3, 4), "status": dict(sorted(status.items()))}
        if both and matching:
            o = [ours[k] for k in both]
            t = [theirs[k] for k in both]
            med_ratio = statistics.median(o) / statistics.median(t)
            mean_ratio = statistics.fmean(o) / statistics.fmean(t)
            per = sorted(a / b for a, b in zip(o, t))
            print(f"    over the {len(both)} methods both compiled (ours clean at O{opt}):")
            print(f"      ours   median {ms(statistics.median(o))} ms   mean {ms(statistics.fmean(o))} ms")
            oc = [ours_cpu[k] for k in both]
            print(f"      (ours by CPU time: median {ms(statistics.median(oc))} ms   mean {ms(statistics.fmean(oc))} ms)")
            print(f"      RyuJIT median {ms(statistics.median(t))} ms   mean {ms(statistics.fmean(t))} ms")
            print(f"      ratio  of medians {med_ratio:6.1f}x  of means {mean_ratio:6.1f}x  "
                  f"(per method: median {statistics.median(per):.1f}x, quartiles {per[len(per) // 4]:.1f}x-"
                  f"{per[3 * len(per) // 4]:.1f}x)")
            entry.update(both=len(both), ours_median_ms=round(statistics.median(o) * 1e3, 4),
                         ours_mean_ms=round(statistics.fmean(o) * 1e3, 4),
                         both_ryujit_median_ms=round(statistics.median(t) * 1e3, 4),
                         both_ryujit_mean_ms=round(statistics.fmean(t) * 1e3, 4),
                         ratio_of_medians=round(med_ratio, 2), ratio_of_means=round(mean_ratio, 2),
                         ours_cpu_median_ms=round(statistics.median(oc) * 1e3, 4),
                         ours_cpu_mean_ms=round(statistics.fmean(oc) * 1e3, 4),
                         cpu_ratio_of_means=round(statistics.fmean(oc) / statistics.fmean(t), 2),
                         per_method_ratio_median=round(statistics.median(per), 2))
        record[mode] = entry
    return record


# -- the LLVM result cache: cold vs warm validate --translate --------------------------------------

def cache_runs(args) -> int:
    """`validate --translate --json` twice over the assemblies with a fresh LLVM result cache:
    cold (every module compiled and stored), then warm (every module read back). Wall and CPU
    time of each (the command and all its processes: RUSAGE_CHILDREN), and the two reports
    compared byte for byte."""
    import resource
    corpus = Corpus()
    paths = resolve(args.assembly + args.assemblies, corpus, folders=True)
    cli = [sys.executable, "-m", "llilc_eh.cli", "validate", *map(str, paths), "--translate", "--quiet",
           "--opt", str(args.opt), "--jobs", str(args.cache_jobs)]
    figures = {}
    with tempfile.TemporaryDirectory(prefix="llilc-eh-cache-bench-") as tmp:
        env = dict(os.environ, LLILC_EH_LLVM_CACHE=str(Path(tmp) / "llvm"))
        reports = {}
        for run in ("cold", "warm"):
            out = Path(tmp) / f"{run}.json"
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            proc = subprocess.run([*cli, "--json", str(out)], env=env, capture_output=True, text=True,
                                  cwd=Path(__file__).resolve().parents[1])
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            if proc.returncode not in (0, 2) or not out.is_file():
                print(f"bench: validate --translate ({run}) exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
                return 1
            reports[run] = out.read_bytes()
            line = next((x for x in proc.stdout.splitlines() if x.startswith("pipeline:")), "")
            entries, size = LlvmCache(Path(tmp) / "llvm").size()
            eh = sum(f.get("with_eh", 0) for f in json.loads(reports[run]).get("files", []))
            figures[run] = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "exit": proc.returncode,
                            "cache_entries": entries, "cache_mb": round(size / (1 << 20), 2), "eh_methods": eh,
                            "eh_methods_per_s": round(eh / wall, 2) if wall else 0.0}
            print(f"{run:>5}: wall {wall:7.2f} s, CPU {cpu:7.2f} s (all processes), exit {proc.returncode}; "
                  f"{eh} EH methods, {eh / wall if wall else 0:.1f} EH methods/s by wall; "
                  f"cache {entries} entries, {size / (1 << 20):.1f} MB")
            print(f"       {line}")
    identical = reports["cold"] == reports["warm"]
    speedup = figures["cold"]["wall_s"] / figures["warm"]["wall_s"]
    cpu_speedup = figures["cold"]["cpu_s"] / figures["warm"]["cpu_s"]
    print(f"warm vs cold: {speedup:.2f}x faster by wall, {cpu_speedup:.2f}x by CPU; JSON reports "
          f"{'byte-identical' if identical else 'DIFFER'} ({len(reports['cold'])} bytes)")
    print(json.dumps({"bench": "llvm cache", "assemblies": [p.name for p in paths], "opt": args.opt,
                      "jobs": args.cache_jobs, **figures, "wall_speedup": round(speedup, 2),
                      "cpu_speedup": round(cpu_speedup, 2), "identical": identical,
                      "load_average": round(os.getloadavg()[0], 2)}, sort_keys=True))
    return 0 if identical else 2


# -- reporting ---------------------------------------------------------------------------------

def ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.2f}"


def stage_table(runs: list[MethodRun]) -> tuple[dict[str, float], dict[str, float], float]:
    totals = {s: sum(r.seconds.get(s, 0.0) for r in runs) for s in STAGES}
    medians = {}
    total = sum(totals.values())
    print(f"  {'stage':<14} {'total s':>8} {'median ms':>10} {'mean ms':>9} {'share':>7} {'methods/s':>10}")
    for s in STAGES:
        values = [r.seconds[s] for r in runs if s in r.seconds]
        if not values:
            medians[s] = 0.0
            print(f"  {s:<14} {'(not run)':>8}")
            continue
        medians[s] = statistics.median(values)
        mean = totals[s] / len(values)
        rate = f"{1 / mean:10.0f}" if mean else f"{'-':>10}"
        print(f"  {s:<14} {totals[s]:8.2f} {ms(medians[s]):>10} {ms(mean):>9} "
              f"{100 * totals[s] / total if total else 0:6.1f}% {rate}")
    per_method = [sum(r.seconds.get(s, 0.0) for s in STAGES) for r in runs]
    print(f"  {'all stages':<14} {total:8.2f} {ms(statistics.median(per_method)):>10} "
          f"{ms(total / len(runs)):>9} {100.0:6.1f}% {len(runs) / total:10.1f}")
    return totals, medians, total


def overhead_lines(runs: list[MethodRun]) -> dict[str, float]:
    done = [r for r in runs if "codegen" in r.seconds]
    if not done:
        print("  (no method reached codegen)")
        return {"wait": 0.0, "overhead": 0.0, "overhead_median": 0.0}
    wait = [r.seconds["codegen-wait"] for r in done]
    over = [r.seconds["codegen-wait"] - r.seconds["codegen"] for r in done]
    print(f"  {'codegen-wait':<14} {sum(wait):8.2f} {ms(statistics.median(wait)):>10} "
          f"{ms(sum(wait) / len(wait)):>9}          (round trip to the worker, as the caller waited)")
    print(f"  {'isolation':<14} {sum(over):8.2f} {ms(statistics.median(over)):>10} "
          f"{ms(sum(over) / len(over)):>9}          (codegen-wait - codegen: pickling, pipes, wake-up)")
    return {"wait": sum(wait), "overhead": sum(over), "overhead_median": statistics.median(over)}


def split_table(runs: list[MethodRun], totals: dict[str, float], total: float,
                side: dict[str, list[float]]) -> tuple[dict[str, float], dict[str, int]]:
    """The Python/LLVM split (seconds), and how many objects took each route."""
    done = [r for r in runs if r.codegen is not None]
    worker = {k: sum(getattr(r.codegen.timings, k) for r in done) for k, _ in WORKER_PARTS}
    worker_total = totals["codegen"]
    p, pr, v = (sum(side[k]) for k in ("parse", "print", "verify"))
    lint_llvm = min(p + pr + v, totals["lint"])
    llvm_total = worker_total + lint_llvm
    python = total - llvm_total
    front_python = sum(totals[s] for s in FRONT) - lint_llvm
    back_python = sum(totals[s] for s in BACK)

    def line(label: str, seconds: float, indent: int = 2) -> None:
        pad = " " * indent
        print(f"{pad}{label:<{50 - indent}} {seconds:8.2f} s {100 * seconds / total if total else 0:6.1f}%")

    line("LLVM", llvm_total)
    routes = Counter(r.codegen.route for r in done)
    line(f"worker (codegen; objects {', '.join(f'{n} {OBJECT_ROUTES[k]}' for k, n in sorted(routes.items()))})",
         worker_total, 4)
    for k, label in WORKER_PARTS:
        line(label, worker[k], 6)
    line("in this process: lint's parse + print + verify", lint_llvm, 4)
    line("Python (incl. capstone, construct, dnfile)", python)
    line("front half (il, reader, lint, model)", front_python, 4)
    line("back half (recover ... differential)", back_python, 4)
    if side["parse"]:
        med = {k: statistics.median(side[k]) * 1e3 for k in ("parse", "print", "verify")}
        print(f"  side measurement over {len(side['parse'])} modules: parse {p:.2f} s, print {pr:.2f} s, "
              f"verify {v:.2f} s (median {med['parse']:.2f} / {med['print']:.2f} / {med['verify']:.2f} ms);")
        print(f"  lint's Python rules = lint stage - those = {totals['lint'] - lint_llvm:.2f} s")
    return {"llvm": llvm_total, "llvm_worker": worker_total, "llvm_in_process": lint_llvm,
            "python": python, "python_front": front_python, "python_back": back_python,
            **{f"worker_{k}": worker[k] for k, _ in WORKER_PARTS}}, dict(sorted(routes.items()))


def cpu_lines(n: int, batch: Batch, side: dict[str, list[float]], split: dict[str, float],
              load: list[float]) -> dict[str, float]:
    """The same run on the CPU clocks: robust to other processes competing for the cores."""
    c = batch.cpu
    main = c["front"] + c["llvm-main"] + c["back"]
    total = main + c["workers"]
    llvm_here = sum(side["cpu-parse"]) + sum(side["cpu-print"]) + sum(side["cpu-verify"])
    llvm = c["workers"] + llvm_here
    python = main - llvm_here
    print("CPU time (the figures above are wall time; with other load on the machine they include")
    print(f"waiting for a core; load average {load[0]:.1f} at the start, {load[1]:.1f} at the end, "
          f"{os.cpu_count()} CPUs)")

    def row(label: str, seconds: float, note: str = "") -> None:
        print(f"  {label:<48} {seconds:8.2f} s {100 * seconds / total if total else 0:6.1f}%{note}")

    med = {h: statistics.median(v) * 1e3 if v else 0.0 for h, v in batch.cpu_per_method.items()}
    row("this process, front half", c["front"], f"   (wall {batch.wall['front']:.2f} s; median {med['front']:.2f} ms/method)")
    row("this process, during the LLVM phase", c["llvm-main"], "   (isolation: pickling, pipes)")
    row("this process, back half", c["back"], f"   (wall {batch.wall['back']:.2f} s; median {med['back']:.2f} ms/method)")
    row("LLVM workers (their CPU clock per module)", c["workers"], f"   (worker-reported {split['llvm_worker']:.2f} s wall)")
    row("LLVM = workers + lint parse, print, verify", llvm)
    row("Python = this process - its LLVM calls", python)
    collections = "/".join(str(n) for n in batch.gc.collections)
    row("  of which the cyclic GC", sum(batch.gc.seconds),
        f"   ({collections} collections of generation 0/1/2; thresholds {gc.get_threshold()})")
    print(f"  {'single core by CPU time':<48} {total:8.2f} s {n / total:8.1f} methods/s")
    if python > 0:
        print(f"  {'Python-bound ceiling by CPU time':<48} {python:8.2f} s {n / python:8.1f} methods/s")
    return {"cpu_s": total, "cpu_front_s": c["front"], "cpu_llvm_main_s": c["llvm-main"], "cpu_back_s": c["back"],
            "cpu_workers_s": c["workers"], "cpu_llvm_s": llvm, "cpu_python_s": python,
            "cpu_llvm_share": llvm / total if total else 0.0, "cpu_methods_per_s": n / total if total else 0.0,
            "cpu_front_median_ms": med["front"], "cpu_back_median_ms": med["back"],
            "cpu_gc_s": sum(batch.gc.seconds)}


def failure_lines(runs: list[MethodRun], owners: list[str]) -> dict:
    summary = summarize(runs)
    failures = summary["failures"]
    print(f"  ok {summary['ok']} of {summary['methods']}; failures by stage/kind: "
          f"{', '.join(f'{k} {n}' for k, n in failures.items()) or 'none'}")
    print(f"  validator findings {summary['validator_findings']}, image findings {summary['image_findings']}; "
          f"LLVM differential: {', '.join(f'{k} {n}' for k, n in summary['differential'].items()) or 'not run'}")
    bad = [(asm, r) for asm, r in zip(owners, runs) if not r.ok]   # assembly order, then table order
    for asm, r in bad[:10]:
        why = (f"{r.error.stage}/{r.error.kind}: {r.error.reason.splitlines()[0][:100]}" if r.error is not None
               else f"{len(r.findings)} validator / {len(r.image_findings)} image finding(s)"
               + (f", differential {r.differential.classification}" if r.differential is not None else ""))
        print(f"    {asm} {r.name}: {why}")
    if len(bad) > 10:
        print(f"    ... and {len(bad) - 10} more")
    return summary


def bench(args) -> int:
    corpus = Corpus()
    paths = resolve(args.assembly + args.assemblies, corpus)
    with CodegenPool(args.jobs) as pool:
        t0 = time.perf_counter()
        targets = load(paths, pool, args)
        setup = time.perf_counter() - t0
        rj = ryujit(targets, args.ryujit_repeats) if args.ryujit else None
        warm_up(pool, args.opt)
        loadavg = [os.getloadavg()[0]]
        batch = run_batch(targets, pool, args.opt)
        loadavg.append(os.getloadavg()[0])
    side = in_process_llvm(batch.runs)
    runs = batch.runs
    n = len(runs)
    if not n:
        print("no EH methods")
        return 1

    print(f"llilc-eh pipeline benchmark: O{args.opt}, {args.jobs} LLVM worker(s), LLVM differential "
          f"{'on' if args.differential else 'off'}, limit {args.limit if args.limit is not None else 'none'}")
    for t in targets:
        print(f"  {t.name}: {len(t.rids)} EH methods ({t.bodies} IL bodies parsed to find them)")
    print(f"  setup (load, find EH methods, JIT-EE): {setup:.2f} s, not in the figures below")
    print()
    print(f"per stage ({n} methods; median/mean over the methods that ran the stage)")
    totals, medians, total = stage_table(runs)
    over = overhead_lines(runs)
    print()
    print("Python vs LLVM (stage wall time, summed over methods)")
    split, routes = split_table(runs, totals, total, side)
    print()
    wall_total = sum(batch.wall.values())
    single = n / total
    print("end to end")

    def row(label: str, seconds: float, rate: bool = True) -> None:
        print(f"  {label:<48} {seconds:8.2f} s" + (f" {n / seconds:8.1f} methods/s" if rate and seconds else ""))

    row("single core (sum of stage times)", total)
    row("single core + isolation overhead", total + over["overhead"])
    row(f"wall clock, {args.jobs} LLVM worker(s)", wall_total)
    row("  front half (this process)", batch.wall["front"], rate=False)
    row(f"  LLVM (compile_many on {args.jobs} worker(s))", batch.wall["llvm"], rate=False)
    row("  back half (this process)", batch.wall["back"], rate=False)
    row("Python-bound ceiling (methods / Python time)", split["python"])
    print("  note: the front and back halves run in this one Python process; only the LLVM phase uses")
    print("  the workers, so with 2+ workers the wall time stays bounded below by the Python time.")
    print()
    cpu = cpu_lines(n, batch, side, split, loadavg)
    if batch.starts or batch.restarts:
        print(f"  worker processes started during the run: {batch.starts} ({batch.restarts} after a failure)")
    print()
    rj_record = None
    if rj is not None:
        print(f"ours vs RyuJIT per method (RyuJIT: PrepareMethod on CoreCLR 3.1.23, in this run, median of "
              f"{args.ryujit_repeats} processes per method)")
        rj_record = ryujit_lines(runs, batch.owners, rj, args.opt, batch.cpu_of_run)
        print()
    print("failures")
    summary = failure_lines(runs, batch.owners)
    print()
    record = {
        "bench": "llilc-eh pipeline", "opt": args.opt, "jobs": args.jobs, "differential": args.differential,
        "assemblies": {t.name: len(t.rids) for t in targets}, "methods": n, "ok": summary["ok"],
        "failures": summary["failures"], "validator_findings": summary["validator_findings"],
        "image_findings": summary["image_findings"], "differential_classes": summary["differential"],
        "stage_s": {s: round(totals[s], 3) for s in STAGES},
        "stage_median_ms": {s: round(medians[s] * 1e3, 3) for s in STAGES},
        "total_s": round(total, 3), "isolation_overhead_s": round(over["overhead"], 3),
        "isolation_overhead_median_ms": round(over["overhead_median"] * 1e3, 3),
        **{k: round(v, 3) for k, v in split.items()},
        "object_routes": routes, "llvm_share": round(split["llvm"] / total, 4), "python_share": round(split["python"] / total, 4),
        "single_core_methods_per_s": round(single, 2),
        "wall_s": {k: round(v, 3) for k, v in batch.wall.items()}, "wall_total_s": round(wall_total, 3),
        "wall_methods_per_s": round(n / wall_total, 2), "setup_s": round(setup, 3),
        **{k: round(v, 4 if k.endswith("share") else 3) for k, v in cpu.items()},
        "gc_collections": batch.gc.collections, "load_average": [round(x, 2) for x in loadavg],
        "ryujit": rj_record,
    }
    print(json.dumps(record, sort_keys=True))
    return 0 if summary["ok"] == n else 2


# -- profiling ---------------------------------------------------------------------------------

def _where(filename: str) -> str:
    """A short, stable name for a profiled function's file."""
    if filename == "~":
        return "~"
    p = Path(filename)
    parts = p.parts
    for anchor in ("llilc_eh", "site-packages"):
        if anchor in parts:
            i = parts.index(anchor)
            return "/".join(parts[i + (anchor == "site-packages"):])
    return p.name


def _library(filename: str) -> str:
    w = _where(filename)
    if w == "~":
        return "C builtins (re, str, list, ... called from Python)"
    if w.startswith("llilc_eh/"):
        return "llilc_eh." + w.split("/")[1].removesuffix(".py")
    if "/" in w:
        return w.split("/")[0] + " (incl. its native calls)"
    return "stdlib / other"


def profile_report(name: str, prof: cProfile.Profile, top: int) -> None:
    stats = pstats.Stats(prof)
    entries = stats.stats   # (file, line, function) -> (cc, nc, tt, ct, callers)
    total = sum(tt for _, _, tt, _, _ in entries.values())

    def label(key) -> str:
        filename, line, func = key
        return func if filename == "~" else f"{_where(filename)}:{line}({func})"

    print(f"{name}: {total:.2f} s profiled")
    for title, index in (("cumulative", 3), ("own time", 2)):
        print(f"  top {top} by {title}")
        print(f"    {'calls':>9} {'own s':>7} {'cum s':>7}  function")
        rows = sorted(entries.items(), key=lambda kv: (-kv[1][index], label(kv[0])))[:top]
        for key, (_, nc, tt, ct, _) in rows:
            print(f"    {nc:9d} {tt:7.2f} {ct:7.2f}  {label(key)}")
    by_library: Counter = Counter()
    for (filename, _, _), (_, _, tt, _, callers) in entries.items():
        if filename == "~" and callers:     # a C builtin: charged to whoever called it
            for (caller_file, _, _), caller_stats in callers.items():
                by_library[_library(caller_file)] += caller_stats[2]
        else:
            by_library[_library(filename)] += tt
    print("  own time by library (a C builtin's time charged to its caller's library)")
    for lib, tt in sorted(by_library.items(), key=lambda kv: (-kv[1], kv[0])):
        if tt < 0.005:
            continue
        print(f"    {tt:7.2f} s {100 * tt / total if total else 0:5.1f}%  {lib}")
    print()


def profile(args) -> int:
    corpus = Corpus()
    path = resolve(args.assembly + args.assemblies, corpus)[0]
    with CodegenPool(args.jobs) as pool:
        args.limit = args.profile
        target = load([path], pool, args)[0]
        warm_up(pool, args.opt)
        front, back = cProfile.Profile(), cProfile.Profile()
        front.enable()
        runs = []
        for rid in target.rids:
            runs.append(target.pipeline.front(rid))
        front.disable()
        todo = [r for r in runs if r.error is None]
        results = pool.compile_many([r.reader.module for r in todo], args.opt)
        back.enable()
        for r, result in zip(todo, results):
            target.pipeline.back(r, result)
        back.disable()
    print(f"cProfile over {len(runs)} EH methods of {target.name}, O{args.opt} "
          f"({summarize(runs)['ok']} ok; LLVM codegen runs in the workers, not profiled)")
    print()
    profile_report("front half (il, reader, lint, model)", front, args.top)
    profile_report("back half (recover, image, clauses, validate, differential)", back, args.top)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("assemblies", nargs="*", help="assembly paths or corpus names (as --assembly)")
    ap.add_argument("--assembly", action="append", default=[], metavar="NAME",
                    help="a corpus file name or a path; repeatable (default: CoreLib and Python.Runtime)")
    ap.add_argument("--opt", type=int, choices=(0, 2), default=2, help="LLVM optimisation level (default 2)")
    ap.add_argument("--jobs", type=int, default=1, help="LLVM worker processes (default 1: the single-core figure)")
    ap.add_argument("--limit", type=int, help="at most N EH methods per assembly (table order)")
    ap.add_argument("--no-differential", dest="differential", action="store_false",
                    help="skip the LLVM differential stage")
    ap.add_argument("--profile", type=int, metavar="N",
                    help="cProfile N EH methods of the first assembly instead (front and back half)")
    ap.add_argument("--top", type=int, default=15, help="functions per profile table (default 15)")
    ap.add_argument("--cache-runs", action="store_true",
                    help="time validate --translate cold then warm with a fresh LLVM result cache instead")
    ap.add_argument("--cache-jobs", type=int, default=1, metavar="N", help="--jobs of those runs (default 1)")
    ap.add_argument("--no-ryujit", dest="ryujit", action="store_false",
                    help="do not run RyuJIT (tools/ryujit_bench.cs on CoreCLR 3.1) beside ours")
    ap.add_argument("--ryujit-repeats", type=int, default=3, metavar="N",
                    help="RyuJIT driver processes per JIT mode and assembly (default 3)")
    args = ap.parse_args()
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")
    tune_gc()       # as the CLI does
    if args.cache_runs:
        return cache_runs(args)
    return profile(args) if args.profile else bench(args)


if __name__ == "__main__":
    sys.exit(main())
