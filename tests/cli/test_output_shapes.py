"""Output shapes: `--json` prints one shape whatever the number of methods, a method is named
as the user resolved it even when it has no body, and a text section of several methods
says whose it is."""

from __future__ import annotations

import json
import re

import pytest

from llilc_eh import cli
from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.loader import Assembly
from llilc_eh.cli import sample_path

ONE = "Tests.CatchAndFilter.Program::CatchFilterCatch"


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def eh_methods() -> list[str]:
    """`0x06xxxxxx Ns.Type::Name` of every method with EH of the sample, in table order."""
    asm = Assembly(sample_path())
    return [f"0x{ref.token:08X} {ref.name}" for ref in (asm.method(rid) for rid in asm.methods_with_il())
            if asm.body(ref.rid).has_eh]


@pytest.mark.parametrize("command, extra", [("il", ()), ("translate", ("--stage", "funclets")),
                                            ("translate", ("--stage", "ir"))])
def test_json_has_one_shape_for_one_method_and_for_many(capsys, eh_methods, command, extra):
    rc, one, err = run_main(capsys, command, str(sample_path()), "--method", ONE, "--json", *extra)
    assert rc == 0, err
    rc, many, err = run_main(capsys, command, str(sample_path()), "--json", *extra)
    assert rc == 0, err
    one, many = json.loads(one), json.loads(many)
    for doc in (one, many):
        assert list(doc) == ["command", "assembly", "methods"]
        assert doc["command"] == command and doc["assembly"] == "sample.dll" and isinstance(doc["methods"], list)
    assert len(one["methods"]) == 1 and len(many["methods"]) == len(eh_methods) > 1
    # the one method's document is the same whether it is printed alone or among the others
    assert one["methods"][0] in many["methods"]


def test_a_method_without_a_body_is_named_as_resolved(capsys):
    corelib = Corpus().find("System.Private.CoreLib.dll").location
    rc, out, err = run_main(capsys, "translate", str(corelib), "--method", "System.IO.Stream::Flush", "--json",
                            "--stage", "il")
    assert rc == 1                                   # unusable: nothing to translate
    js, = json.loads(out)["methods"]
    assert js["method"]["name"] == "System.IO.Stream::Flush" and js["method"]["token"].startswith("0x06")
    assert js["error"]["kind"] == "no-il-body" and js["error"]["method"].endswith("System.IO.Stream::Flush")
    assert "System.IO.Stream::Flush: method has no IL body" in err


@pytest.mark.parametrize("stage", ["clauses", "funclets"])
def test_a_stage_of_every_method_has_a_header_before_each_section(capsys, eh_methods, stage):
    rc, out, err = run_main(capsys, "translate", str(sample_path()), "--stage", stage)
    assert rc == 0, err
    headers = re.findall(r"^// method (0x06[0-9A-F]{6} \S+)$", out, re.MULTILINE)
    assert headers == eh_methods
    # each header is followed by its own section, not by another header
    sections = re.split(r"^// method .*$", out, flags=re.MULTILINE)[1:]
    assert len(sections) == len(headers) and all(s.strip() for s in sections)
    # one method alone: the section only, as before
    rc, alone, _ = run_main(capsys, "translate", str(sample_path()), "--method", ONE, "--stage", stage)
    assert "// method" not in alone and alone.strip() in out
