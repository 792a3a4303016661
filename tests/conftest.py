"""Shared fixtures.

The real toolchain (Mono's ilasm and runtime, the CoreCLR 3.1 host from the corpus) is a
hard requirement of the test suite: the test command installs it, so a missing tool is a
failure, never a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llilc_eh.batch import tune_gc
from llilc_eh.check.toolchain import ToolchainError, assemble

TESTS_DIR = Path(__file__).resolve().parent
IL_DIR = TESTS_DIR / "il"
RUN_TIMEOUT = 300     # seconds per program under `llilc-eh run`: a hang is a failure, not a stuck suite


def pytest_configure(config):
    tune_gc()       # the suite runs the pipeline over many methods, as a batch does
    # The commands the tests run compile with LLVM every time (a test of the pipeline must
    # exercise it, whatever an earlier run left in the user's cache); tests/backend/
    # test_cache.py tests the cache in folders of its own. Set the variable to opt in.
    os.environ.setdefault("LLILC_EH_LLVM_CACHE", "off")


def il_sources() -> list[Path]:
    """Every test program tests/il/*.il, sorted by name."""
    return sorted(IL_DIR.glob("*.il"))


@pytest.fixture(scope="session")
def il_programs(tmp_path_factory) -> dict[str, Path]:
    """Assemble every tests/il/*.il once per session; {program name: exe path}."""
    out_dir = tmp_path_factory.mktemp("il")
    programs, failures = {}, []
    for source in il_sources():
        try:
            programs[source.stem] = assemble(source, out_dir)
        except ToolchainError as e:
            failures.append(str(e))
    if failures:
        raise ToolchainError("\n\n".join(failures))
    return programs


@pytest.fixture(scope="session")
def pool():
    """One LLVM codegen worker for the tests that run the whole pipeline on a few methods
    (tests/backend has its own 4-worker `pool`, which overrides this one there)."""
    from llilc_eh.backend.codegen import CodegenPool
    with CodegenPool(1) as p:
        yield p


@pytest.fixture(scope="session")
def altjit() -> Path:
    """The C alt JIT of `llilc-eh run`, built once per session (a gcc failure fails every test
    that needs it). tests/runtime and tests/target both run programs with it."""
    from llilc_eh.runtime.build import ensure_built    # only the tests that run programs load it
    return ensure_built()


@pytest.fixture(scope="session")
def run_captured(altjit):
    """`llilc-eh run` on an exe with its output captured: run_captured(exe, args, opt=..., ...)."""
    import subprocess

    from llilc_eh.runtime.driver import run

    def run_captured(exe: Path, args=(), **kw):
        return run(exe, list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=RUN_TIMEOUT, **kw)
    return run_captured
