"""Fixtures of the runtime stage: programs run on CoreCLR 3.1.23 with llilc-eh as the alt JIT."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from llilc_eh.runtime.build import ensure_built
from llilc_eh.runtime.driver import RunOutcome, run

RUNTIME_TESTS = Path(__file__).resolve().parent
RUN_TIMEOUT = 300     # seconds per program: a hang is a failure, not a stuck suite


@pytest.fixture(scope="session")
def altjit() -> Path:
    """The C alt JIT, built once per session (a gcc failure fails every test that needs it)."""
    return ensure_built()


def _run_captured(exe: Path, args=(), **kw) -> RunOutcome:
    return run(exe, list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=RUN_TIMEOUT, **kw)


@pytest.fixture(scope="session")
def run_captured(altjit):
    """`llilc-eh run` on an exe with its output captured: run_captured(exe, args, opt=..., ...)."""
    return _run_captured
