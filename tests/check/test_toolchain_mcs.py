"""check.toolchain.compile_cs, the one way tests and tools build C# with Mono's mcs: a program
compiles and runs on CoreCLR; a broken one raises ToolchainError carrying mcs's own error
(never an assert or a stale file passing for a fresh one)."""

from __future__ import annotations

import pytest

from llilc_eh.check.toolchain import ToolchainError, compile_cs, run_on_coreclr

GOOD = "class P { static int Main() { try { throw new System.Exception(); } catch { return 7; } } }"


def test_compiles_and_runs(tmp_path):
    src = tmp_path / "good.cs"
    src.write_text(GOOD)
    exe = compile_cs(src, tmp_path / "good.exe", "-optimize+")
    assert exe == tmp_path / "good.exe" and exe.is_file()
    assert run_on_coreclr(exe).returncode == 7


def test_errors_carry_mcs_output_and_leave_no_stale_file(tmp_path):
    src = tmp_path / "bad.cs"
    src.write_text(GOOD)
    exe = compile_cs(src, tmp_path / "bad.exe")
    src.write_text(GOOD.replace("return 7;", "return undefined_name;"))
    with pytest.raises(ToolchainError, match=r"bad\.cs.*error CS0103") as e:
        compile_cs(src, exe)
    assert "undefined_name" in str(e.value)
    assert not exe.exists()          # the earlier build did not stay behind as if it were this one
