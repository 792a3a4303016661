#!/usr/bin/env python3
"""The framework under llilc-eh, per workload: the table issue 17 asks for, measured.

Usage: tools/workload_table.py [--opt 0|2] [--repeat N] [--markdown] [WORKLOAD.cs ...]

Default: every program in tests/runtime/workloads. Each is built with mcs (-optimize+), run
once on the pinned CoreCLR alone (ReadyToRun and tiering off: the oracle) and `--repeat` times
under `llilc-eh run --all-eh --report` (ReadyToRun off: every method with EH the runtime JITs,
CoreLib's included, is offered to llilc-eh); the output must equal the oracle's every time
(a row whose output differs is marked and the exit status is 2). Per workload it prints EH
methods requested by the runtime, compiled by llilc-eh (share; framework / program split),
every JIT-compiled method (ours + RyuJIT's), llilc-eh's JIT time (total and median per
method), the exceptions thrown and the handlers run -- in all and in methods we compiled,
from the runtime's own exception events (runtime/events.py), with the loss control -- and the
declines by reason class. A benchmark, not a test: tests/runtime/test_workloads.py holds the
assertions; this prints the figures for notes and docs/runtime.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llilc_eh.check.toolchain import compile_cs, run_on_coreclr  # noqa: E402

WORKLOADS = ROOT / "tests" / "runtime" / "workloads"


def measure(source: Path, work: Path, opt: int, repeat: int) -> dict:
    exe = compile_cs(source, work / f"{source.stem}.exe", "-optimize+")
    oracle = run_on_coreclr(exe, [source.stem], jit_everything=True)    # a workload's argument is its name
    runs = []
    for i in range(repeat):
        report = work / f"{source.stem}.{i}.json"
        done = subprocess.run([sys.executable, "-m", "llilc_eh.cli", "run", "--all-eh", "--opt", str(opt),
                               "--report", str(report), str(exe), source.stem], capture_output=True, text=True, check=False)
        # the summary goes to stderr; stdout is the program's own
        r = json.loads(report.read_text()) if report.is_file() else {}
        runs.append((done.stdout == oracle.stdout and r.get("exit_code") == oracle.returncode, r))
    return {"name": source.stem, "runs": runs}


def row(m: dict) -> dict:
    same = all(ok for ok, _ in m["runs"])
    r = m["runs"][-1][1]
    compiled = r.get("compiled", [])
    program = r.get("assembly")
    ours_program = sum(1 for c in compiled if c.get("assembly") == program)
    ex = r.get("exceptions") or {}
    jit = [c.get("jit_ms") or 0 for c in compiled]
    return {
        "workload": m["name"], "same_output": same, "runs": len(m["runs"]),
        "requested": r.get("requested"), "compiled": len(compiled),
        "share": 100 * len(compiled) / r["requested"] if r.get("requested") else 0.0,
        "framework": len(compiled) - ours_program, "program": ours_program,
        "jitted": r.get("jitted"), "jit_s": sum(jit) / 1000, "jit_median_ms": statistics.median(jit) if jit else 0,
        "thrown": ex.get("thrown"), "thrown_ours": ex.get("thrown_ours"),
        "handlers": ex.get("handlers", {}), "handlers_ours": ex.get("handlers_ours", {}),
        "lost": ex.get("lost"), "first_chance": ex.get("first_chance"),
        "declined": [(g["count"], g["reason"]) for g in r.get("declined_by_reason", [])],
    }


def _handlers(h: dict) -> str:
    return "/".join(str(v) for v in h.values()) if h else "-"


def render(rows: list[dict], markdown: bool) -> str:
    head = ["workload", "same as RyuJIT", "EH requested", "compiled by llilc-eh", "framework / program",
            "JIT-compiled in all", "llilc-eh JIT time", "thrown (in ours)", "handlers run: all (ours)",
            "events lost", "declined, by reason"]
    lines = []
    for x in rows:
        declined = "; ".join(f"{n} {reason}" for n, reason in x["declined"]) or "none"
        lines.append([x["workload"], f"{'yes' if x['same_output'] else 'NO'} ({x['runs']} runs)",
                      str(x["requested"]), f"{x['compiled']} ({x['share']:.0f}%)",
                      f"{x['framework']} / {x['program']}", str(x["jitted"]),
                      f"{x['jit_s']:.1f} s (median {x['jit_median_ms']:.0f} ms)",
                      f"{x['thrown']} ({x['thrown_ours']})",
                      f"{_handlers(x['handlers'])} ({_handlers(x['handlers_ours'])})",
                      f"{x['lost']} of {x['first_chance']}", declined])
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(cells) + " |" for cells in lines]
        out.append("handlers: catch/filter/finally-or-fault in all, catch/filter/finally/fault in ours")
        return "\n".join(out)
    return "\n".join("; ".join(f"{h}: {c}" for h, c in zip(head, cells)) for cells in lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workloads", nargs="*", type=Path)
    p.add_argument("--opt", type=int, default=2, choices=(0, 2))
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = p.parse_args(argv)
    sources = args.workloads or sorted(WORKLOADS.glob("*.cs"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="llilc-eh-workloads-") as tmp:
        for source in sources:
            rows.append(row(measure(source, Path(tmp), args.opt, args.repeat)))
            print(render(rows[-1:], False), file=sys.stderr, flush=True)
    print(render(rows, args.markdown))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(x["same_output"] for x in rows) else 2


if __name__ == "__main__":
    import toolmain     # tools/ (the script's folder is on sys.path)
    toolmain.run(main)
