"""What the target tests share, fixtures included: the embedded sample (every tests/il
program in one DLL) through the whole pipeline for each target, at O0 and O2, with
continuation selectors and with cloned finallys. A module of its own, imported by the test
modules, not a conftest.py: pytest imports every conftest.py as the module `conftest`, and
tests/backend's modules import names from theirs, which another folder's conftest loaded
after it (several folders given on one command line) would shadow."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

import pytest

from llilc_eh.assembly.loader import Assembly
from llilc_eh.backend.codegen import CodegenPool
from llilc_eh.cli import sample_path
from llilc_eh.pipeline import MethodRun, Pipeline, eh_methods
from llilc_eh.reader.translate import Options
from llilc_eh.target import LINUX_X64, WIN_X64, Target

OPT_LEVELS = (0, 2)
CONFIGS = tuple((opt, clone) for clone in (False, True) for opt in OPT_LEVELS)


def config_name(opt: int, clone: bool) -> str:
    return f"O{opt}{' clone-finally' if clone else ''}"


@dataclass
class TargetRuns:
    asm: Assembly
    rids: list[int]
    target: Target
    runs: dict[tuple[int, bool], list[MethodRun]]    # (opt, clone_finally) -> one run per rid

    def all(self):
        for config, runs in self.runs.items():
            for run in runs:
                yield config, run


def run_sample(target: Target, pool: CodegenPool) -> TargetRuns:
    asm = Assembly(sample_path())
    rids = eh_methods(asm)
    runs = {}
    for opt, clone in CONFIGS:
        pipeline = Pipeline(asm, pool, opt=opt, options=Options(clone_finally=clone, target=target),
                            differential=False)
        runs[(opt, clone)] = pipeline.run_many(rids)
    return TargetRuns(asm, rids, target, runs)


_FUNCTION = re.compile(r"RuntimeFunction \{(.*?)\n  \}", re.S)
_FIELD = re.compile(r"^\s*(StartAddress|PrologSize): (.*)$", re.M)
_CODE_OFFSET = re.compile(r"^\s*0x([0-9A-F]{2}): ", re.M)


def readobj_unwind(readobj: str, path) -> dict[str, tuple[int, list[int]]]:
    """{function symbol: (prolog size, code offsets)} from `llvm-readobj --unwind`."""
    text = subprocess.run([readobj, "--unwind", str(path)], check=True, capture_output=True, text=True).stdout
    out = {}
    for body in _FUNCTION.findall(text):
        fields = dict(_FIELD.findall(body))
        start = fields["StartAddress"].rsplit(" (", 1)[0]
        if " +0x" in start:
            continue          # a range starting inside a function (none expected)
        out[start] = (int(fields["PrologSize"]), [int(x, 16) for x in _CODE_OFFSET.findall(body)])
    return out


@pytest.fixture(scope="session")
def target_pool():
    with CodegenPool(1) as pool:
        yield pool


@pytest.fixture(scope="session")
def linux(target_pool) -> TargetRuns:
    return run_sample(LINUX_X64, target_pool)


@pytest.fixture(scope="session")
def windows(target_pool) -> TargetRuns:
    return run_sample(WIN_X64, target_pool)


@pytest.fixture(scope="session")
def readobj():
    path = shutil.which("llvm-readobj")
    assert path, "llvm-readobj (Debian package llvm) is required"
    return path
