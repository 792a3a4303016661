"""Every tests/il program on CoreCLR 3.1.23 with llilc-eh as the JIT of its EH methods.

The program must print exactly its .expected trace, and the report must show every method
with EH of the program compiled by llilc-eh -- nothing declined but the known, named cases,
nothing silent (a method with EH the runtime compiled without asking the service would be
missing from `compiled`). Configurations: O0 and O2, continuation selectors (the default)
and --clone-finally.

For every compiled method the metadata JIT-EE's answers (field offsets, value classes, class
sizes) are also asked of the runtime (`--compare-jitee`) and must agree.

Controls: with llilc-eh loaded but selecting nothing (every method passes through the
service, which declines it) the output equals a plain CoreCLR run; with every try end one
byte short in the installed tables the output changes -- so the runtime really dispatches
through our tables, and this harness can fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llilc_eh.assembly.loader import Assembly
from llilc_eh.check.toolchain import run_on_coreclr
from llilc_eh.pipeline import eh_methods

IL_DIR = Path(__file__).resolve().parents[1] / "il"
PROGRAMS = sorted(p.stem for p in IL_DIR.glob("*.il") if p.with_suffix(".expected").is_file())
CONFIGS = {"O0": dict(opt=0), "O2": dict(opt=2), "O0-clone": dict(opt=0, clone_finally=True),
           "O2-clone": dict(opt=2, clone_finally=True)}

# Declined on purpose, with the reason the report must give (a substring).
# None: shared generic code (generic_catch's CatchT<__Canon>) is compiled too (runtime/generic.py).
KNOWN_DECLINES: dict[str, dict[str, str]] = {}


def eh_method_names(exe: Path) -> set[str]:
    asm = Assembly(exe)
    return {asm.method(rid).name for rid in eh_methods(asm)}


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", PROGRAMS)
def test_program_runs_compiled_by_llilc_eh(il_programs, run_captured, name, config):
    exe = il_programs[name]
    out = run_captured(exe, compare_jitee=True, **CONFIGS[config])
    expected = (IL_DIR / f"{name}.expected").read_text()
    assert out.stdout.decode() == expected, out.stderr.decode()[-2000:]
    assert out.exit_code == 0
    report = out.report
    known = KNOWN_DECLINES.get(name, {})
    declined = {d["method"]: d["reason"] for d in report["declined"]}
    assert set(declined) == set(known), declined
    for method, why in known.items():
        assert why in declined[method]
    compiled = {c["method"] for c in report["compiled"]}
    assert compiled == eh_method_names(exe) - set(known)
    assert [a for a in report["jitee"] if not a["agree"]] == []    # metadata answers = the runtime's
    for c in report["compiled"]:
        # clauses may be 0: with --clone-finally a try that cannot throw keeps no exceptional path
        assert c["code_bytes"] > 0 and c["clauses"] >= 0 and c["opt"] == CONFIGS[config]["opt"]
        assert c["jit_ms"] > 0


def test_negative_baseline_selecting_nothing_changes_nothing(il_programs, run_captured):
    """The alt JIT loaded, Python asked about every method (selection by name), none
    selected: the output is a plain CoreCLR run's, and the report is empty."""
    exe = il_programs["try_in_filter_handler"]
    plain = run_on_coreclr(exe)
    out = run_captured(exe, methods=["No.Such.Type::Method"])
    assert (out.stdout.decode(), out.exit_code) == (plain.stdout, plain.returncode)
    assert out.report["compiled"] == [] and out.report["declined"] == []


def test_selection_by_name_compiles_only_what_it_names(il_programs, run_captured):
    exe = il_programs["try_catch"]
    out = run_captured(exe, methods=["Tests.TryCatch.Program::Local"])
    assert out.stdout.decode() == (IL_DIR / "try_catch.expected").read_text()
    assert [c["method"] for c in out.report["compiled"]] == ["Tests.TryCatch.Program::Local"]
    assert out.report["declined"] == []
    # every JIT-compiled method was offered to llilc-eh first: Main, FromCallee and Thrower
    # (at least) went on to RyuJIT
    assert out.report["jitted"] == 1 + out.report["jitted_by_ryujit"]
    assert out.report["jitted_by_ryujit"] >= 3


@pytest.mark.parametrize("name", ["try_catch", "nested_filters"])
def test_negative_control_try_ends_one_byte_short_change_the_output(il_programs, run_captured, name):
    """Every installed try ends one byte early: the return address of the throwing call is
    no longer inside it, the runtime finds no handler, the program's output changes."""
    exe = il_programs[name]
    out = run_captured(exe, damage="try-end-short")
    assert out.report["compiled"], "the control must install our (damaged) tables"
    assert out.stdout.decode() != (IL_DIR / f"{name}.expected").read_text()
    assert out.exit_code != 0       # an exception escaped that our table should have caught


def test_selecting_every_method_the_runtime_jits(il_programs, run_captured):
    """`--methods '*'`: every method the runtime compiles is offered to llilc-eh -- the
    program's own (EH or not) and the framework's that have no ReadyToRun code (JIT
    intrinsics, IL stubs, vectorised helpers). The program's are compiled; the others are
    declined by name with their reason (an intrinsic compiled from its IL recursed forever:
    Sse41.get_IsSupported); the output stays the expected one."""
    exe = il_programs["try_catch"]
    out = run_captured(exe, methods=["*"])
    assert out.stdout.decode() == (IL_DIR / "try_catch.expected").read_text()
    compiled = {c["method"] for c in out.report["compiled"]}
    program = {f"Tests.TryCatch.Program::{m}" for m in ("Main", "Local", "FromCallee", "Thrower")}
    assert program <= compiled          # framework methods may be compiled too, as the reader grows
    assert not program & {d["method"] for d in out.report["declined"]}
    reasons = [d["reason"] for d in out.report["declined"]]
    assert any(r.startswith("JIT intrinsic") for r in reasons) and any(r.startswith("IL stub") for r in reasons)
    assert all(d["method"] and not d["method"].startswith("<") for d in out.report["declined"])
