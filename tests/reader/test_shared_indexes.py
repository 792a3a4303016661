"""The metadata indexes of a referenced assembly (TypeDefs and forwarders by name, layouts,
generic counts, members by name) are built once per opened Assembly for the process
(`reader.typesys._INDEXES`), not once per TypeSystem: a batch makes a TypeSystem per
validated file (and one more for RyuJIT's dispatch check), and each read CoreLib's whole
TypeDef table again. Pinned here: two TypeSystems binding the same unchanged library share
its indexes; a library rewritten on disk (another Assembly: `assembly.resolve._OPENED` keys
by size and mtime) is indexed afresh -- a type that moved to another row is found at its new
row, not at the old one (the negative control shows the old row would name another type)."""

from __future__ import annotations

import pytest

from llilc_eh.assembly import resolve
from llilc_eh.assembly.loader import Assembly
from llilc_eh.assembly.names import TokenKind
from llilc_eh.reader import typesys
from llilc_eh.reader.jitee import JitEE

from reader_builds import mcs, mcs_library

LIB_V1 = "public class A : System.InvalidOperationException { }\n"
LIB_V2 = "public class Z : System.Exception { }\npublic class A : System.ArgumentException { }\n"
PROG = "public static class P { public static int Main() { try { throw new A(); } catch (A) { return 1; } } }\n"


@pytest.fixture(autouse=True)
def fresh_tables(monkeypatch):
    monkeypatch.setattr(resolve, "_OPENED", {})


def _type_ref(asm: Assembly, name: str) -> int:
    names = asm.names
    tokens = [(TokenKind.TYPE_REF << 24) | r for r in range(1, names.row_count(TokenKind.TYPE_REF) + 1)]
    return next(t for t in tokens if names.type_name(t) == name)


def _lib_module(ee: JitEE):
    return next(m for m in ee._modules.values() if m.name == "lib")


def test_indexes_shared_and_renewed_with_the_file(tmp_path):
    lib = mcs_library(tmp_path / "lib.dll", LIB_V1)
    prog = mcs(tmp_path / "prog.exe", PROG, f"-r:{lib}")
    first, second = JitEE(Assembly(prog)), JitEE(Assembly(prog))
    a_ref = _type_ref(first.asm, "[lib]A")
    assert first.class_ancestry(a_ref)[:2] == ("[lib]A", "[System.Private.CoreLib]System.InvalidOperationException")
    assert second.class_ancestry(a_ref) == first.class_ancestry(a_ref)
    m1, m2 = _lib_module(first), _lib_module(second)
    assert m1 is not m2                                  # each TypeSystem its own module ...
    assert m1.asm is m2.asm                              # ... of the one opened Assembly
    assert m1._index is m2._index is typesys._INDEXES[m1.asm]
    assert "typedefs" in m1._index                       # built by the first, used by the second
    old_rid = m1.find_typedef("", "A")

    mcs_library(tmp_path / "lib.dll", LIB_V2)            # rewritten: A is now the second TypeDef after <Module>
    third = JitEE(Assembly(prog))
    assert third.class_ancestry(a_ref)[:2] == ("[lib]A", "[System.Private.CoreLib]System.ArgumentException")
    m3 = _lib_module(third)
    assert m3.asm is not m1.asm and m3._index is not m1._index
    assert m3.find_typedef("", "A") == old_rid + 1
    # negative control: the old index's row names another type in the new file
    assert m3.type_ns_name((TokenKind.TYPE_DEF << 24) | old_rid) == ("", "Z")
