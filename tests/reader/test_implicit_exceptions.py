"""The implicit-check table against the real runtimes, and the helper table's own consistency.

Oracle: tests/reader/implicit_checks.il triggers every check of `IMPLICIT_CHECKS` (null
dereferences through ldfld/stfld/ldflda/ldlen/callvirt/ldelem/stelem/ldelema/unbox.any,
division by zero and INT_MIN/-1 for int32 and int64, the six overflow arithmetic opcodes,
all twenty conv.ovf opcodes from int64 and float64 sources, NaN and infinities, ckfinite,
array bounds below zero and at the length, array store and address type mismatches,
castclass, unbox, newarr and throw of null) inside a try/catch(System.Exception) and prints
the full type name of what it caught. CoreCLR 3.1 is the ground truth: its output must be
exactly the table's exception for every case, in tier-0 and in fully optimized code. Mono
must print the same, except for the divergences listed in MONO_DIVERGENCES — strictly: a
divergence that disappears or a new one fails the test.
"""

from __future__ import annotations

import re
from pathlib import Path

import llvmlite.binding as llvm
import pytest

from llilc_eh.check.toolchain import assemble, run_on_coreclr, run_on_mono
from llilc_eh.reader.helpers import HELPERS, IMPLICIT_CHECKS, helper_declarations

PROGRAM = Path(__file__).resolve().parent / "implicit_checks.il"

NO_EXCEPTION = "no exception"

# Where Mono (6.8) parts from CoreCLR 3.1: case -> what Mono prints. `[call]` marks an
# exception raised by the call to the case method, i.e. when Mono compiles it.
_MONO_REJECTS = "[call] System.InvalidProgramException"   # "float conv.ovf.un opcodes not supported."
MONO_DIVERGENCES = {
    **{f"conv_ovf_{t}_un_from_r8": _MONO_REJECTS for t in ("i1", "u1", "i2", "u2", "i4", "u4", "i8", "i", "u")},
    "conv_ovf_i4_un_from_r8_minus_1": _MONO_REJECTS,
    # Mono truncates a 64-bit array index to 32 bits: index 2^32 reads element 0
    "ldelem_index_i8_beyond": NO_EXCEPTION,
}


def program_cases() -> dict[str, str | None]:
    """{case method: IMPLICIT_CHECKS kind, or None for a boundary that must not throw}, in order."""
    text = PROGRAM.read_text()
    pairs = re.findall(r"// check: (\S+).*\n\s*\.method public static void (\w+)\(", text)
    return {name: (None if kind == "none" else kind) for kind, name in pairs}


def parse_output(stdout: str) -> dict[str, str]:
    """`<case>: <type>` / `<case> [call]: <type>` lines -> {case: outcome}."""
    outcomes = {}
    for line in stdout.splitlines():
        m = re.fullmatch(r"(\w+)( \[call\])?: (.+)", line.strip())
        assert m, f"unexpected output line {line!r}"
        name, at_call, what = m.groups()
        assert name not in outcomes, f"case {name} printed twice"
        outcomes[name] = f"[call] {what}" if at_call else what
    return outcomes


@pytest.fixture(scope="module")
def exe(tmp_path_factory) -> Path:
    return assemble(PROGRAM, tmp_path_factory.mktemp("implicit"))


@pytest.fixture(scope="module")
def coreclr(exe) -> dict[str, str]:
    proc = run_on_coreclr(exe)
    assert proc.returncode == 0, proc.stderr
    return parse_output(proc.stdout)


def expected(kind: str | None) -> str:
    return NO_EXCEPTION if kind is None else IMPLICIT_CHECKS[kind].exception


# --------------------------------------------------------------------------------------------
# The program covers the table


def test_program_covers_every_implicit_check():
    cases = program_cases()
    assert len(cases) == len(set(cases)) > 100
    assert set(IMPLICIT_CHECKS) <= set(cases.values()) - {None}
    assert set(cases.values()) - {None} <= set(IMPLICIT_CHECKS)


def test_program_covers_the_required_instructions():
    names = set(program_cases())
    required = {
        "ldfld_null", "stfld_null", "ldlen_null", "callvirt_virtual_null", "ldelem_null",
        "conv_ovf_i4_from_r8_nan", "ckfinite_r8_nan", "ckfinite_r8_pos_inf",
        "ldelem_index_negative", "ldelem_index_length", "stelem_index_negative", "stelem_index_length",
        "stelem_ref_wrong_type", "castclass_wrong_type", "unbox_any_wrong_type",
    }
    for t in ("i4", "i8"):
        required |= {f"{op}_{t}_zero" for op in ("div", "div_un", "rem", "rem_un")}
        required |= {f"{op}_{t}_min_by_minus1" for op in ("div", "rem")}
        required |= {f"{op}_{t}" for op in ("add_ovf", "add_ovf_un", "sub_ovf", "sub_ovf_un", "mul_ovf",
                                            "mul_ovf_un")}
    for target in ("i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8"):
        required |= {f"conv_ovf_{target}_from_r8", f"conv_ovf_{target}_un_from_r8"}
    assert required <= names, sorted(required - names)
    # from int64: every conv.ovf that can overflow from a 64-bit source, signed and .un
    assert sum(n.endswith("_from_i8") and n.startswith("conv_ovf_") for n in names) >= 14


# --------------------------------------------------------------------------------------------
# CoreCLR 3.1: the ground truth


def test_coreclr_raises_what_the_table_says(coreclr):
    cases = program_cases()
    assert list(coreclr) == list(cases), "every case prints exactly one line, in order"
    wrong = {name: (coreclr[name], expected(kind)) for name, kind in cases.items()
             if coreclr[name] != expected(kind)}
    assert wrong == {}


def test_coreclr_optimized_code_agrees(exe, coreclr, monkeypatch):
    # the first run executes tier-0 code; without tiering every method is fully optimized
    monkeypatch.setenv("COMPlus_TieredCompilation", "0")
    proc = run_on_coreclr(exe)
    assert proc.returncode == 0, proc.stderr
    assert parse_output(proc.stdout) == coreclr


def test_measured_facts_the_reader_relies_on(coreclr):
    assert coreclr["ckfinite_r8_nan"] == "System.OverflowException"          # not ArithmeticException
    assert coreclr["conv_ovf_i4_un_from_r8_minus_1"] == NO_EXCEPTION        # .un ignored for floats
    assert coreclr["conv_ovf_u1_from_r8_minus_0_9"] == NO_EXCEPTION         # truncate, then check
    assert coreclr["conv_ovf_i4_from_r8_min_minus_0_9"] == NO_EXCEPTION
    assert coreclr["conv_ovf_u8_un_from_i8_minus1"] == NO_EXCEPTION         # 2^64-1 fits u8
    assert coreclr["ldelem_index_i8_beyond"] == "System.IndexOutOfRangeException"
    assert coreclr["ldflda_null"] == "System.NullReferenceException"         # even without a load
    assert coreclr["unbox_any_null"] == "System.NullReferenceException"


# --------------------------------------------------------------------------------------------
# Mono: a second implementation, with its divergences listed


def test_mono_agrees_except_the_listed_divergences(exe, coreclr):
    proc = run_on_mono(exe)
    assert proc.returncode == 0, proc.stderr
    mono = parse_output(proc.stdout)
    assert list(mono) == list(coreclr)
    divergences = {name: mono[name] for name in mono if mono[name] != coreclr[name]}
    assert divergences == MONO_DIVERGENCES


# --------------------------------------------------------------------------------------------
# The helper table


def test_every_check_names_a_helper_that_raises_its_exception():
    for check in IMPLICIT_CHECKS.values():
        helper = HELPERS[check.helper]
        assert check.exception in helper.raises, check.kind
        if check.via == "throw-helper":
            assert helper.noreturn and helper.params == () and helper.exception == check.exception, check.kind
        else:
            assert check.via == "checking-helper"


def test_conv_ovf_ranges():
    assert IMPLICIT_CHECKS["conv.ovf.i1"].target_range == (-128, 127)
    assert IMPLICIT_CHECKS["conv.ovf.u2.un"].target_range == (0, 65535)
    assert IMPLICIT_CHECKS["conv.ovf.u"].target_range == (0, 2 ** 64 - 1)        # native int on x64
    assert IMPLICIT_CHECKS["conv.ovf.i.un"].target_range == (-2 ** 63, 2 ** 63 - 1)
    assert len([k for k in IMPLICIT_CHECKS if k.startswith("conv.ovf.")]) == 20


def test_helper_declarations_parse_and_carry_noreturn():
    assert helper_declarations() is HELPERS
    text = 'target triple = "x86_64-pc-windows-msvc"\n' + "\n".join(h.declaration for h in HELPERS.values())
    module = llvm.parse_assembly(text)
    module.verify()
    for helper in HELPERS.values():
        fn = module.get_function(helper.name)
        attrs = " ".join(a.decode() if isinstance(a, bytes) else str(a) for a in fn.attributes)
        assert ("noreturn" in attrs.split()) == helper.noreturn, helper.name
    assert HELPERS["CORINFO_HELP_RNGCHKFAIL"].declaration == "declare void @CORINFO_HELP_RNGCHKFAIL() noreturn"
    assert HELPERS["CORINFO_HELP_THROW"].declaration == "declare void @CORINFO_HELP_THROW(ptr) noreturn"
    assert str(HELPERS["CORINFO_HELP_OVERFLOW"]).startswith("declare void @CORINFO_HELP_OVERFLOW() noreturn")
