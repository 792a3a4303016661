"""Framework code under llilc-eh: what CoreLib's own methods needed to run as we compile them.

With ReadyToRun off (`--all-eh`, or COMPlus_ReadyToRun=0) the runtime JIT-compiles CoreLib,
and its very first managed method, AppContext.Setup, does `new string(char*)`. The reader
allocated the string with NEWSFAST and called the constructor on it; CoreCLR calls a string's
constructor with a null `this` and takes the string it returns (CORINFO_FLG_VAROBJSIZE). With
Setup ours the host said "Failed to create CoreCLR, HRESULT: 0x80070057"; with every `System.*`
method ours the runtime died of a stack overflow after 308 methods (docs/runtime.md). Found by
bisection (`run --limit N`: N=1 already failed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llilc_eh.check.toolchain import compile_cs, run_on_coreclr
from llilc_eh.runtime.driver import declined_by_reason, reason_class

PROGRAMS_DIR = Path(__file__).resolve().parent / "programs"


@pytest.fixture(scope="module")
def newobj_string(tmp_path_factory) -> Path:
    return compile_cs(PROGRAMS_DIR / "newobj_string.cs", tmp_path_factory.mktemp("fw") / "newobj_string.exe", "-unsafe")


def test_string_constructors_run_as_ryujits(run_captured, newobj_string):
    """`new string(...)` in four overloads and one that throws: the output is RyuJIT's (it was a
    SIGSEGV, exit 139); multi-dimensional arrays through CORINFO_HELP_NEW_MDARR_NONVARARG (the
    `.ctor` call threw InvalidProgramException from Int32[,]::.ctor)."""
    oracle = run_on_coreclr(newobj_string)
    assert "xxxhiabh" in oracle.stdout                 # the oracle ran what we think it ran
    out = run_captured(newobj_string)
    assert (out.stdout.decode(), out.exit_code) == (oracle.stdout, oracle.returncode), out.stderr.decode()[-2000:]
    assert "corner 3 18 5 7\noverflow OverflowException" in oracle.stdout
    assert {c["method"] for c in out.report["compiled"]} == {"Strings::Make", "Strings::Bad", "Strings::Grid",
                                                             "Strings::Cube"}
    assert out.report["declined"] == []


def test_corelib_first_method_appcontext_setup(run_captured, newobj_string, monkeypatch):
    """CoreLib's AppContext.Setup compiled by llilc-eh with ReadyToRun off: the runtime starts
    and the program prints what it prints under RyuJIT alone."""
    monkeypatch.setenv("COMPlus_ReadyToRun", "0")
    oracle = run_on_coreclr(newobj_string)
    out = run_captured(newobj_string, methods=["System.AppContext::Setup"])
    assert [c["method"] for c in out.report["compiled"]] == ["System.AppContext::Setup"]
    assert (out.stdout.decode(), out.exit_code) == (oracle.stdout, oracle.returncode), out.stderr.decode()[-2000:]


def test_bisection_knobs_decline_by_name(run_captured, newobj_string):
    """--limit 1 compiles the first selected method only, --only the named ones; the rest are
    declined as left out (never silently skipped)."""
    out = run_captured(newobj_string, limit=1)
    assert len(out.report["compiled"]) == 1
    assert {reason_class(d["reason"]) for d in out.report["declined"]} == {"left out by --limit N (bisection)"}
    out = run_captured(newobj_string, only=["Strings::Bad"])
    assert [c["method"] for c in out.report["compiled"]] == ["Strings::Bad"]
    assert {d["method"] for d in out.report["declined"]} == {"Strings::Make", "Strings::Grid", "Strings::Cube"}


def test_reason_classes_aggregate_what_names_one_method():
    declined = [
        {"method": "A::x", "reason": "[reader/thread-static] method 0x06000001 A::x, IL_0004: linux-x64: ..."},
        {"method": "B::y", "reason": "[reader/thread-static] method 0x06000002 B::y, IL_0010: other text"},
        {"method": "C::z", "reason": "calls [System.Private.CoreLib]Internal.Runtime.CompilerServices.Unsafe::As<"
                                     "object>(object), a JIT intrinsic whose IL never returns (only RyuJIT expands it)"},
        {"method": "D::w", "reason": "calls [System.Private.CoreLib]Internal.Runtime.CompilerServices.Unsafe::"
                                     "AsPointer<string>(!!0&), a JIT intrinsic whose IL never returns (only RyuJIT "
                                     "expands it)"},
        {"method": "E::v", "reason": "resolving class:[System.Private.CoreLib]System.Void: class 0x01000002 cell: "
                                     "the runtime threw in resolveToken"},
        {"method": "F::u", "reason": "internal error: KeyError: 'x'"},
    ]
    groups = declined_by_reason(declined)
    assert [(g["reason"], g["count"]) for g in groups] == [
        ("[reader/thread-static]", 2),
        ("calls …, a JIT intrinsic whose IL never returns (only RyuJIT expands it)", 2),
        ("internal error", 1),
        ("resolving …: class 0x… cell: the runtime threw in resolveToken", 1)]
    assert groups[0]["methods"] == ["A::x", "B::y"]


def test_calls_into_shared_generic_struct_code(run_captured, tmp_path):
    """AsyncTaskMethodBuilder<string> and KeyValuePair<string,int> from our code: the output is
    RyuJIT's (before: SIGSEGV in S1, and G1 printed "caught"); an async Task<string> method too."""
    exe = compile_cs(PROGRAMS_DIR / "shared_struct.cs", tmp_path / "shared_struct.exe")
    oracle = run_on_coreclr(exe)
    assert "kv[kv, 1]" in oracle.stdout and "ok2" in oracle.stdout
    out = run_captured(exe)
    assert (out.stdout.decode(), out.exit_code) == (oracle.stdout, oracle.returncode), out.stderr.decode()[-2000:]
    assert {c["method"] for c in out.report["compiled"]} >= {"Shared::S1", "Shared::S2", "Shared::I1", "Shared::G1"}
    assert out.report["declined"] == []
