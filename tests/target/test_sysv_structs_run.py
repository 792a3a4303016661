"""SysV struct passing on the real runtime: tests/target/sysv_structs.cs runs on CoreCLR
3.1.23 with all of its methods with EH compiled by llilc-eh (linux-x64, `llilc-eh run`, zero
declined: --require-all) at O0 and O2, and prints byte for byte what it prints under RyuJIT
alone. Its structs cross between our code and RyuJIT's in both directions."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from llilc_eh.check.toolchain import run_on_coreclr
from llilc_eh.runtime.build import ensure_built
from llilc_eh.runtime.driver import run

SOURCE = Path(__file__).with_name("sysv_structs.cs")
COMPILED = {"T::Calls", "T::MakeP", "T::MakeQ", "T::MakeR", "T::MakeBig", "T::MakeS", "T::MakeBigRef",
            "T::SumP", "T::SumQ", "T::SumR", "T::SumBig", "T::ShowS", "T::IsSmall"}


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sysv") / "sysv_structs.exe"
    proc = subprocess.run([shutil.which("mcs") or "mcs", "-nologo", f"-out:{out}", str(SOURCE)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="module")
def ryujit(program) -> str:
    proc = run_on_coreclr(program)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n") == 4 and "13.125" in proc.stdout     # the oracle printed something real
    return proc.stdout


@pytest.mark.parametrize("opt", (0, 2))
def test_structs_cross_both_ways_as_ryujit_passes_them(program, ryujit, opt):
    ensure_built()
    outcome = run(program, [], opt=opt, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    compiled = {m["method"] for m in outcome.report.get("compiled", [])}
    declined = outcome.report.get("declined", [])
    assert declined == [], declined
    assert COMPILED <= compiled, sorted(COMPILED - compiled)
    assert outcome.exit_code == 0, outcome.stderr
    assert outcome.stdout.decode() == ryujit
