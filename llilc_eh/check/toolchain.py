"""The external toolchain: Mono's ilasm and mcs, the CoreCLR 3.1 host and the Mono runtime.

The test programs under tests/il/ are the ground truth for EH semantics: what the real
runtimes print is what our pipeline has to reproduce. This module is the one place that
knows how to assemble them and run them, so that tests and tools agree on the details:

- ilasm sometimes prints ``***** FAILURE *****`` yet exits 0, and a stale output file
  from an earlier run would then pass for a fresh one; we check the text and remove the
  output first.
- The CoreCLR host (``dotnet prog.exe``) refuses to run an exe without a
  ``prog.runtimeconfig.json`` naming the framework; the wheel's runtime has no ICU, so
  globalization must be invariant.
- The runtimes run with the exe's directory as working directory: Mono writes its
  crash dumps (mono_crash.*.json) into the current directory.
- Every subprocess has a timeout: a program that loops (a wrong ``leave`` target, an
  ``endfinally`` that falls back into its try) must fail the test, not hang the run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from llilc_eh.assembly.corpus import Corpus

TIMEOUT = 30  # seconds, for every subprocess
CORECLR_VERSION = "3.1.23"

_FAILURE_MARK = "***** FAILURE *****"


class ToolchainError(RuntimeError):
    """An external tool is missing or failed; the message carries the tool's own output."""


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ToolchainError(f"{name} not found on PATH (Debian: apt-get install mono-devel)")
    return path


def assemble(il_path: str | os.PathLike, out_dir: str | os.PathLike, *, dll: bool = False) -> Path:
    """Assemble one .il file with ilasm into out_dir; return the .exe (or .dll) path.

    Raises ToolchainError with ilasm's output when ilasm fails, including the case where it
    prints its FAILURE banner but exits 0, or produces no file.
    """
    il_path = Path(il_path)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / (il_path.stem + (".dll" if dll else ".exe"))
    if out.exists():
        out.unlink()  # never mistake a stale output for a fresh one
    cmd = [_tool("ilasm"), "/dll" if dll else "/exe", f"/output:{out}", str(il_path)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        raise ToolchainError(f"ilasm timed out after {TIMEOUT} s on {il_path}") from e
    text = proc.stdout + proc.stderr
    if proc.returncode != 0 or _FAILURE_MARK in text or not out.is_file():
        raise ToolchainError(f"ilasm failed on {il_path} (exit {proc.returncode}):\n{text.strip()}")
    return out


MCS_TIMEOUT = 120  # seconds: mcs on a workload-sized program under a loaded machine


def compile_cs(source: str | os.PathLike, out: str | os.PathLike, *flags: str) -> Path:
    """Compile one C# file with Mono's mcs into out (flags as mcs takes them: -target:library,
    -unsafe, -r:...); return out.

    The one place tests and tools build C# programs: a stale output is removed first (as for
    ilasm), and a failure raises ToolchainError with mcs's own output, naming the source.
    """
    source, out = Path(source), Path(out)
    if out.exists():
        out.unlink()
    cmd = [_tool("mcs"), "-nologo", *flags, f"-out:{out}", str(source)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=MCS_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        raise ToolchainError(f"mcs timed out after {MCS_TIMEOUT} s on {source}") from e
    if proc.returncode != 0 or not out.is_file():
        raise ToolchainError(f"mcs failed on {source} (exit {proc.returncode}):\n{(proc.stdout + proc.stderr).strip()}")
    return out


def write_runtimeconfig(exe: str | os.PathLike) -> Path:
    """Write <exe stem>.runtimeconfig.json next to exe so that the dotnet host accepts it."""
    exe = Path(exe)
    config = {
        "runtimeOptions": {
            "tfm": "netcoreapp3.1",
            "framework": {"name": "Microsoft.NETCore.App", "version": CORECLR_VERSION},
            "configProperties": {"System.Globalization.Invariant": True},
        }
    }
    path = exe.with_name(exe.stem + ".runtimeconfig.json")
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def _run(cmd: list[str], what: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, cwd=cwd, env=env)
    except subprocess.TimeoutExpired as e:
        raise ToolchainError(f"{what} timed out after {TIMEOUT} s: {' '.join(cmd)}") from e


def run_on_coreclr(exe: str | os.PathLike, args: list[str] = (), *, jit_everything: bool = False
                   ) -> subprocess.CompletedProcess:
    """Run exe on the CoreCLR 3.1 runtime from the corpus (the runtime our JIT targets).
    `jit_everything`: ReadyToRun and tiering off, so RyuJIT compiles the framework too, fully
    optimised -- the oracle beside `llilc-eh run --all-eh`.

    Returns the completed process (stdout, stderr, returncode); a non-zero exit is not an
    error here, the caller judges it.
    """
    exe = Path(exe)
    dotnet = Corpus().dotnet
    if not dotnet.is_file():
        raise ToolchainError(f"CoreCLR host {dotnet} is missing (run tools/fetch_corpus.py)")
    write_runtimeconfig(exe)
    env = dict(os.environ, DOTNET_CLI_TELEMETRY_OPTOUT="1", DOTNET_NOLOGO="1")
    if jit_everything:
        env.update(COMPlus_ReadyToRun="0", COMPlus_TieredCompilation="0")
    return _run([str(dotnet), str(exe.resolve()), *args], "CoreCLR", exe.parent, env)


def run_on_mono(exe: str | os.PathLike, args: list[str] = ()) -> subprocess.CompletedProcess:
    """Run exe on Mono: a second, independent implementation of the same EH semantics."""
    exe = Path(exe)
    return _run([_tool("mono"), str(exe.resolve()), *args], "mono", exe.parent)
