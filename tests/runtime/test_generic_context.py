"""Shared generic methods compiled by llilc-eh (runtime/generic.py): the hidden MethodDesc
argument received after `this`, kept in an escaped frame slot, and reported in the GC info as
GENERICS_INST_CONTEXT_MD, so that the runtime resolves `catch (T)` per instantiation -- from
the main body, from inside a catch funclet and from inside a finally funclet (where it follows
the PSPSym to the parent frame first).

Oracle: the same program with RyuJIT only. Negative control: the GC info without the generic
context (damage "no-generic-context") -- measured: every `catch (T)` then misses (the runtime
cannot resolve T) and the output changes. A body that needs the instantiation (typeof(T))
is compiled with a runtime lookup (test_shared_lookups.py has the rest); with the metadata
JIT-EE, which cannot answer lookups, it is declined by name with the IL offset of the token.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llilc_eh.check.toolchain import compile_cs, run_on_coreclr
from llilc_eh.gcinfo import GenericsInstContextKind, decode
from llilc_eh.runtime.driver import reason_class
from llilc_eh.runtime.generic import LOOKUP_REASON_CLASS

PROGRAM = Path(__file__).resolve().parent / "programs" / "generic_catch_funclets.cs"
SHARED = {"Program::InCatch", "Program::InFinally", "Program::Instance", "Program::WithFilter"}
CONFIGS = {"O0": dict(opt=0), "O2": dict(opt=2), "O2-clone": dict(opt=2, clone_finally=True)}


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    exe = compile_cs(PROGRAM, tmp_path_factory.mktemp("generic") / "generic_catch_funclets.exe", "-optimize+")
    return exe, run_on_coreclr(exe)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_shared_generic_catch_equals_ryujit(program, run_captured, config):
    exe, oracle = program
    assert "caught by catch T inside a finally" in oracle.stdout     # the program does what it says
    assert "WithFilter: caught by catch T 0" in oracle.stdout and "WithFilter: caught by the filter's handler 10" \
        in oracle.stdout
    out = run_captured(exe, **CONFIGS[config])
    assert out.stdout.decode() == oracle.stdout, out.stderr.decode()[-2000:]
    assert out.exit_code == oracle.returncode == 0
    compiled = {c["method"]: c for c in out.report["compiled"]}
    assert SHARED <= set(compiled)
    for name in SHARED:
        info = decode(bytes.fromhex(compiled[name]["gc_info"]))
        assert info.generics_inst_context == GenericsInstContextKind.MD
        assert info.generics_inst_context_offset < 0            # below the caller's SP, in the frame
        assert info.prolog_size >= 1
    assert "Program::Main" in compiled and "Program::Main" not in SHARED
    assert decode(bytes.fromhex(compiled["Program::Main"]["gc_info"])).generics_inst_context is None
    # typeof(T) is found through a runtime lookup (runtime/lookup.py): ours too
    assert out.report["declined"] == []
    assert decode(bytes.fromhex(compiled["Program::Lookup"]["gc_info"])).generics_inst_context \
        == GenericsInstContextKind.MD


def test_the_metadata_jitee_declines_a_runtime_lookup_by_name(program, run_captured):
    # only the runtime answers lookups: with metadata answering, typeof(T) is declined with its
    # token and IL offset, and RyuJIT's code prints the right type
    exe, oracle = program
    out = run_captured(exe, opt=2, jitee="metadata")
    assert out.stdout.decode() == oracle.stdout
    declined = {d["method"]: d["reason"] for d in out.report["declined"]}
    assert set(declined) == {"Program::Lookup"}
    assert "IL_" in declined["Program::Lookup"] and "ldtoken !!0" in declined["Program::Lookup"]
    assert reason_class(declined["Program::Lookup"]) == LOOKUP_REASON_CLASS


def test_negative_control_without_the_generic_context_catch_t_misses(program, run_captured):
    exe, oracle = program
    out = run_captured(exe, opt=2, damage="no-generic-context")
    assert SHARED <= {c["method"] for c in out.report["compiled"]}
    for c in out.report["compiled"]:
        assert decode(bytes.fromhex(c["gc_info"])).generics_inst_context is None
    text = out.stdout.decode()
    assert text != oracle.stdout
    assert "caught by catch T" not in text        # measured: no catch (T) matches any more
    assert "Main: ArgumentException escaped InCatch" in text
