"""linux-x64 code on the real runtime: C# programs of this folder run on CoreCLR 3.1.23 with
their methods with EH compiled by llilc-eh (`llilc-eh run`, none declined) at O0 and O2 and
print byte for byte what they print under RyuJIT alone, with continuation selectors and with
cloned finallys.

* sysv_structs.cs -- SysV struct passing (reader/abi.py): structs cross between our code and
  RyuJIT's both ways (8/16-byte INTEGER, two doubles, int+float, three floats, 24 bytes by
  memory and return buffer, structs holding strings, register exhaustion, bool/byte/short);
* stack_probe.cs -- our stack probe (backend.relink.STACK_PROBE_CODE): stackalloc of 100 bytes
  to 1 MB and a 12000-byte local struct, on the main thread and on a 4 MB thread;
* statics.cs -- statics of struct type (boxed by CoreCLR: the cell holds the box's slot) with
  a string in them (write barriers), an int and a string static, in try, catch and finally.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llilc_eh.check.toolchain import compile_cs, run_on_coreclr

HERE = Path(__file__).parent
PROGRAMS = {
    "sysv_structs": {"T::Calls", "T::MakeP", "T::MakeQ", "T::MakeR", "T::MakeBig", "T::MakeS", "T::MakeBigRef",
                     "T::SumP", "T::SumQ", "T::SumR", "T::SumBig", "T::ShowS", "T::IsSmall"},
    "stack_probe": {"Probe::Touch", "Probe::Frame"},
    "statics": {"G::Run"},
}


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    """{name: (exe, RyuJIT's output)}"""
    out_dir = tmp_path_factory.mktemp("target_programs")
    built = {}
    for name in PROGRAMS:
        exe = compile_cs(HERE / f"{name}.cs", out_dir / f"{name}.exe", "-unsafe")
        oracle = run_on_coreclr(exe)
        assert oracle.returncode == 0 and oracle.stdout.count("\n") >= 4, oracle.stderr   # it printed something real
        built[name] = (exe, oracle.stdout)
    return built


@pytest.mark.parametrize("clone_finally", (False, True), ids=("selectors", "clone-finally"))
@pytest.mark.parametrize("opt", (0, 2))
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_prints_what_ryujit_prints(programs, run_captured, name, opt, clone_finally):
    exe, expected = programs[name]
    outcome = run_captured(exe, opt=opt, clone_finally=clone_finally)
    compiled = {m["method"] for m in outcome.report.get("compiled", [])}
    declined = outcome.report.get("declined", [])
    assert declined == [], declined
    assert PROGRAMS[name] <= compiled, sorted(PROGRAMS[name] - compiled)
    assert outcome.exit_code == 0, outcome.stderr
    assert outcome.stdout.decode() == expected
