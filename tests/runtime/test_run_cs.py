"""The C# programs of tests/runtime/cs (mcs) with llilc-eh as the JIT of their EH methods:
stdout and exit code byte-identical to a RyuJIT-only run of the same program on the same
runtime (the oracle), and the declines exactly the known, named ones.

Known gaps would be strict xfails (CRASHES) or named declines (KNOWN_DECLINES), so that a fix
shows up. gc crashed until the reader's constrained-call transform (5aca914): `i.ToString()` is
`constrained. [System.Int32] callvirt Object::ToString()` and `this` was loaded through the
int32's byref as an object (gdb: CORINFO_HELP_VIRTUAL_FUNC_PTR got 0x7fff00000000).
No program has a known decline: every method with EH is compiled by llilc-eh (values'
structs by value too, since the reader's SysV classification, 7659614).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from llilc_eh.check.toolchain import compile_cs, run_on_coreclr

CS_DIR = Path(__file__).resolve().parent / "cs"
PROGRAMS = sorted(p.stem for p in CS_DIR.glob("*.cs"))
CONFIGS = {"O0": dict(opt=0), "O2": dict(opt=2), "O2-clone": dict(opt=2, clone_finally=True)}
CRASHES: dict[str, str] = {}      # program -> why it is known to fail (strict xfail)
KNOWN_DECLINES: dict[str, dict[str, str]] = {}     # program -> {method: reason substring}


@pytest.fixture(scope="module")
def cs_programs(tmp_path_factory) -> dict[str, Path]:
    out_dir = tmp_path_factory.mktemp("cs")
    programs = {}
    for name in PROGRAMS:
        programs[name] = compile_cs(CS_DIR / f"{name}.cs", out_dir / f"{name}.exe", "-optimize+")
    return programs


@pytest.fixture(scope="module")
def ryujit_runs(cs_programs) -> dict[str, subprocess.CompletedProcess]:
    return {name: run_on_coreclr(exe) for name, exe in cs_programs.items()}


def _cases():
    for name in PROGRAMS:
        for config in CONFIGS:
            marks = [pytest.mark.xfail(reason=CRASHES[name], strict=True)] if name in CRASHES else []
            yield pytest.param(name, config, marks=marks, id=f"{name}-{config}")


@pytest.mark.parametrize("name, config", list(_cases()))
def test_cs_program_output_equals_ryujit(cs_programs, ryujit_runs, run_captured, name, config):
    oracle = ryujit_runs[name]
    out = run_captured(cs_programs[name], compare_jitee=True, **CONFIGS[config])
    assert out.stdout.decode() == oracle.stdout, out.stderr.decode()[-2000:]
    assert out.exit_code == oracle.returncode
    declined = {d["method"]: d["reason"] for d in out.report["declined"]}
    known = KNOWN_DECLINES.get(name, {})
    assert set(declined) == set(known), declined
    assert all(why in declined[m] for m, why in known.items())
    assert out.report["compiled"] or known
    assert [a for a in out.report["jitee"] if not a["agree"]] == []    # metadata answers = the runtime's


def test_jitee_comparison_sees_answers_and_can_fail(cs_programs, run_captured):
    """values.cs touches struct fields and sizes: the comparison has answers to compare, and
    with every metadata field offset shifted by 8 (the negative control) they differ."""
    good = run_captured(cs_programs["values"], compare_jitee=True)
    answers = good.report["jitee"]
    assert {"field offset", "value class", "class size"} <= {a["question"] for a in answers}
    assert all(a["agree"] for a in answers)
    bad = run_captured(cs_programs["values"], compare_jitee=True, damage="jitee-field-offset")
    offsets = [a for a in bad.report["jitee"] if a["question"] == "field offset"]
    assert offsets and not any(a["agree"] for a in offsets)
    assert bad.stdout == good.stdout          # only the comparison was damaged, not the code


PROGRAMS_DIR = CS_DIR.parent / "programs"
# tests/runtime/programs: each a known way our code went wrong in the runtime, now right
PROGRAM_METHODS = {
    # typeof, an int[] initializer (InitializeArray + RuntimeFieldHandle), a field handle: with
    # the raw handles in the structs typeof crashed and the initializer threw ArgumentException
    "tokens": {"Tokens::Primes", "Tokens::Types", "Tokens::Fields"},
    # static constructors not yet run when our code touches the class (explicit, initialiser,
    # struct static, in a catch, written in a finally): the code calls CORINFO_HELP_INITCLASS;
    # the cctors print, so their order is checked against RyuJIT's
    "statics": {"Statics::ReadPrecise", "Statics::InCatch", "Statics::Struct"},
}


@pytest.mark.parametrize("name", sorted(PROGRAM_METHODS))
def test_program_equals_ryujit(run_captured, tmp_path, name):
    exe = compile_cs(PROGRAMS_DIR / f"{name}.cs", tmp_path / f"{name}.exe")
    oracle = run_on_coreclr(exe)
    out = run_captured(exe, compare_jitee=True)
    assert (out.stdout.decode(), out.exit_code) == (oracle.stdout, oracle.returncode)
    assert {c["method"] for c in out.report["compiled"]} == PROGRAM_METHODS[name]
    assert out.report["declined"] == []
    assert all(a["agree"] for a in out.report["jitee"])
