"""Malformed EH structure: our il stage names the rule and the IL offset, and CoreCLR agrees.

tests/il/malformed/bad_regions.il holds one method per broken rule, each with an
`// expect: <kind> IL_xxxx` line. ilasm assembles them as written; the il stage must report
exactly that finding, and the real CoreCLR 3.1 (RyuJIT) must refuse to compile each one —
except where the runtime is known not to enforce the ECMA-335 rule, listed below.
Damaged clause tables that ilasm cannot write (a clause past the body end) are made by
patching the assembled bytes through the same construct declaration the parser reads.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from construct import Container

from llilc_eh.assembly.loader import Assembly
from llilc_eh.assembly.structs import SECTION_HEADER_SIZE, SMALL_CLAUSE_SIZE, SmallEHClause
from llilc_eh.check.toolchain import assemble, run_on_coreclr
from llilc_eh.il.method import analyze

SOURCE = Path(__file__).resolve().parent / "malformed" / "bad_regions.il"
EXPECT = re.compile(r"// expect: (\S+) IL_([0-9a-f]{4})\s*\n\s*\.method public static void (\w+)\(")
CASES = {name: (kind, int(off, 16)) for kind, off, name in EXPECT.findall(SOURCE.read_text())}

# ECMA-335 III.4.24 allows rethrow only in a catch handler; RyuJIT 3.1 does not check it.
CORECLR_ACCEPTS = {"RethrowInFinally"}


@pytest.fixture(scope="module")
def bad_exe(tmp_path_factory) -> Path:
    return assemble(SOURCE, tmp_path_factory.mktemp("malformed"))


def test_every_case_is_declared():
    assert len(CASES) >= 11


@pytest.mark.parametrize("name", sorted(CASES))
def test_il_stage_reports_the_rule(bad_exe, name):
    asm = Assembly(bad_exe)
    m = analyze(asm.body(asm.find_method(f"Tests.Malformed.Bad::{name}").rid))
    kind, offset = CASES[name]
    assert [(e.kind, e.offset) for e in m.errors] == [(kind, offset)]
    assert f"Tests.Malformed.Bad::{name}" in str(m.errors[0])


def test_coreclr_refuses_the_same_methods(bad_exe):
    proc = run_on_coreclr(bad_exe, args=sorted(CASES))
    verdicts = dict(line.split(": ", 1) for line in proc.stdout.splitlines())
    assert set(verdicts) == set(CASES)
    for name, verdict in verdicts.items():
        expected = "accepted" if name in CORECLR_ACCEPTS else "InvalidProgramException"
        assert verdict == expected, name


def _patched(exe: Path, out: Path, method: str, patch) -> Path:
    """Copy `exe` to `out` with `patch(data, body_offset, body)` applied to one method's bytes."""
    asm = Assembly(exe)
    ref = asm.find_method(method)
    body = asm.body(ref.rid)
    data = bytearray(exe.read_bytes())
    start = asm.rva_to_offset(body.rva)
    patch(data, start, body)
    out.write_bytes(bytes(data))
    return out


def test_clause_past_body_end(bad_exe, tmp_path):
    def grow_handler(data, start, body):
        section = start + body.sections[0].offset
        at = section + SECTION_HEADER_SIZE
        raw = SmallEHClause.parse(bytes(data[at:at + SMALL_CLAUSE_SIZE]))
        data[at:at + SMALL_CLAUSE_SIZE] = SmallEHClause.build(Container(raw, handler_length=200))
    exe = _patched(bad_exe, tmp_path / "past.exe", "Tests.Malformed.Bad::BranchOutOfTry", grow_handler)
    asm = Assembly(exe)
    m = analyze(asm.body(asm.find_method("Tests.Malformed.Bad::BranchOutOfTry").rid))
    assert [e.kind for e in m.errors] == ["clause-outside-body"]
    assert m.errors[0].offset == 2 and "code size 4" in m.errors[0].reason
