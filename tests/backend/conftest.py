"""Shared fixtures of the backend tests: one worker pool, and every method of the embedded
sample (our tests/il programs) translated once and compiled once at O0 and O2."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

import pytest
from construct import ConstructError

from llilc_eh.assembly.body import ClauseKind
from llilc_eh.assembly.loader import Assembly
from llilc_eh.backend.codegen import CodegenPool, CodegenResult, object_symbol
from llilc_eh.backend.coff import CoffObject
from llilc_eh.backend.recover import RecoveredCode, recover
from llilc_eh.cli import sample_path
from llilc_eh.errors import BackendError
from llilc_eh.il.method import analyze
from llilc_eh.reader.jitee import JitEE
from llilc_eh.reader.translate import Options, ReaderResult, translate

OPT_LEVELS = (0, 2)


@dataclass
class CompiledMethod:
    rid: int
    name: str
    reader: ReaderResult
    il_clauses: tuple
    opt: int
    result: CodegenResult | BackendError

    @property
    def parent(self) -> str:
        return object_symbol(self.reader.parent)

    @property
    def has_eh(self) -> bool:
        return bool(self.il_clauses)

    @property
    def has_filter(self) -> bool:
        return any(c.kind == ClauseKind.FILTER for c in self.il_clauses)

    @property
    def pads(self) -> int:
        return self.reader.catchpads + self.reader.cleanuppads

    @property
    def coff(self) -> CoffObject:
        if not hasattr(self, "_coff"):
            self._coff = CoffObject.parse(self.result.obj)
        return self._coff

    @property
    def recovered(self) -> RecoveredCode:
        if not hasattr(self, "_recovered"):
            self._recovered = recover(self.coff, self.result.asm)
        return self._recovered


@pytest.fixture(scope="session")
def pool():
    with CodegenPool(4) as p:
        yield p


def _sample_readers(options: Options) -> list:
    asm = Assembly(sample_path())
    ee = JitEE(asm)
    readers = []
    for rid in asm.methods_with_il():
        body = asm.body(rid)
        name = str(asm.method(rid))
        readers.append((rid, name, translate(asm, analyze(body), ee, options), tuple(body.clauses)))
    return readers


def _compile_sample(pool, readers) -> dict[int, list[CompiledMethod]]:
    compiled = {}
    for opt in OPT_LEVELS:
        results = pool.compile_many([r.module for _, _, r, _ in readers], opt,
                                    methods=[name for _, name, _, _ in readers])
        compiled[opt] = [CompiledMethod(rid, name, reader, clauses, opt, result)
                         for (rid, name, reader, clauses), result in zip(readers, results)]
    return compiled


@pytest.fixture(scope="session")
def sample_readers():
    return _sample_readers(Options())


@pytest.fixture(scope="session")
def sample_compiled(pool, sample_readers) -> dict[int, list[CompiledMethod]]:
    """{opt: [CompiledMethod]} for every method of the sample."""
    return _compile_sample(pool, sample_readers)


@pytest.fixture(scope="session")
def sample_compiled_marked(pool) -> dict[int, list[CompiledMethod]]:
    """The same with the reader's pad markers (`Options.pad_markers`)."""
    return _compile_sample(pool, _sample_readers(Options(pad_markers=True)))


@pytest.fixture(scope="session")
def readobj():
    path = shutil.which("llvm-readobj")
    assert path, "llvm-readobj (Debian package llvm) is required"
    return path


def parse_outcome(parse, data: bytes):
    """What `parse(data)` gives: the value, or a construct error as text (type and message) --
    so that a compiled parser and its declaration can be compared on damaged inputs."""
    try:
        return parse(data)
    except ConstructError as e:
        return f"{type(e).__name__}: {e}"


def run_readobj(readobj: str, path, *flags: str) -> str:
    return subprocess.run([readobj, *flags, str(path)], check=True, capture_output=True,
                          text=True).stdout


_READOBJ_ADDRESS = re.compile(r"(\S+?)(?: \+0x([0-9A-F]+))? \(0x[0-9A-F]+\)")


def parse_readobj_unwind(text: str) -> dict[str, list[dict]]:
    """{file: [{field: value, "codes": [line]}]} from `llvm-readobj --unwind f1 f2 ...`."""
    files: dict[str, list[dict]] = {}
    current = functions = None
    in_codes = False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("File: "):
            functions = files.setdefault(s[len("File: "):], [])
        elif s == "RuntimeFunction {":
            current, in_codes = {"codes": []}, False
            functions.append(current)
        elif s == "UnwindCodes [":
            in_codes = True
        elif in_codes and s == "]":
            in_codes = False
        elif in_codes:
            current["codes"].append(s)
        elif current is not None and s.startswith("Flags ["):
            current["Flags"] = int(re.search(r"\((0x[0-9A-F]+)\)", s).group(1), 16)
        elif current is not None and ": " in s:
            key, value = s.split(": ", 1)
            current.setdefault(key, value)
    return files


def readobj_address(coff: CoffObject, text: str) -> int:
    """An address as llvm-readobj prints it (`symbol +0xN (0xABS)`), resolved in `coff`."""
    symbol, plus = _READOBJ_ADDRESS.fullmatch(text).groups()
    return coff.symbol(symbol).value + int(plus or "0", 16)
