"""The synchronized method's own clause (clauses/synchronized.py) and its helper calls
(reader/synchronized.py), on IL assembled here. The runtime behaviour (the lock taken, released
on return and by the fault) is tests/runtime/test_real_code.py's."""

from __future__ import annotations

import re

import pytest

from llilc_eh.assembly.body import ClauseKind
from llilc_eh.clauses.synchronized import ENDFINALLY, PROLOG, analyze_synchronized, monitor_clause
from llilc_eh.errors import ReaderError
from llilc_eh.il.method import analyze
from llilc_eh.reader.jitee import JitEE
from llilc_eh.reader.lint import check_module
from llilc_eh.reader.translate import Options, translate
from llilc_eh.target import LINUX_X64, WIN_X64
from tests.reader.reader_builds import il_library

IL = """
.assembly extern mscorlib {}
.assembly sync {}
.class public C extends [mscorlib]System.Object {
  .field int32 count
  .method public hidebysig instance int32 Guarded(int32 k) cil managed synchronized {
    .maxstack 3
    .try {
      ldarg.0  ldarg.0  ldfld int32 C::count  ldarg.1  add  stfld int32 C::count
      leave.s DONE
    } catch [mscorlib]System.Exception { pop  leave.s DONE }
  DONE:
    ldarg.0  ldfld int32 C::count  ret
  }
  .method public static void StaticThrows() cil managed synchronized {
    .try { newobj instance void [mscorlib]System.Exception::.ctor()  throw }
    finally { endfinally }
  }
  .method public static int32 RetInTry() cil managed synchronized {
    .try { ldc.i4.1  ret } finally { endfinally }
  }
}
"""


@pytest.fixture(scope="module")
def asm(tmp_path_factory):
    return il_library(tmp_path_factory.mktemp("sync"), "sync", IL)


def _body(asm, name):
    return asm.body(asm.find_method(f"C::{name}").rid)


def test_the_clause_is_the_last_and_least_nested(asm):
    body = _body(asm, "Guarded")
    il = analyze_synchronized(body)
    assert not il.errors, il.errors
    c = il.body.clauses[-1]
    n = body.code_size
    assert (c.index, c.kind, c.try_start, c.try_end, c.handler_start, c.handler_end) == \
        (len(body.clauses), ClauseKind.FAULT, 0, n + 1, n + 1, n + 2)
    assert il.body.code == body.code + PROLOG + ENDFINALLY and monitor_clause(il) == c
    assert monitor_clause(analyze(body)) is None          # the control: the plain body has none
    # the original `ret` at the top level is inside the new try: not a finding here...
    # ... though plain analysis of the same body says it is
    assert [e.kind for e in analyze(il.body).errors] == ["ret-inside-region"]


def test_a_ret_inside_a_try_of_the_il_stays_a_finding(asm):
    """Only the returns the JIT's try swallowed are forgiven: a `ret` inside an IL try is wrong
    IL with or without the monitor clause."""
    il = analyze_synchronized(_body(asm, "RetInTry"))
    assert [e.kind for e in il.errors] == ["ret-inside-region"]


@pytest.mark.parametrize("name, static", [("Guarded", False), ("StaticThrows", True)])
def test_linux_code_enters_and_exits(asm, name, static):
    rid = asm.find_method(f"C::{name}").rid
    result = translate(asm, analyze_synchronized(asm.body(rid)), JitEE(asm), Options(target=LINUX_X64))
    check_module(result.module, method=name)
    suffix = "_STATIC" if static else ""
    enters = re.findall(rf"invoke [^\n]*@CORINFO_HELP_MON_ENTER{suffix}\(ptr %lock\d+, ptr %sync.acquired\)",
                        result.module)
    exits = re.findall(rf"@CORINFO_HELP_MON_EXIT{suffix}\(ptr %lock\d+, ptr %sync.acquired\)", result.module)
    assert len(enters) == 1, result.module
    # Guarded: one ret + the fault; StaticThrows: no ret (it always throws), the fault only
    assert len(exits) == (1 if static else 2), result.module
    assert re.search(r"cleanuppad within none \[i32 1\]", result.module)
    assert ("method-sync" in {e.kind for e in result.externals.values()}) == static


def test_a_body_without_the_clause_is_refused_on_linux_and_left_alone_on_windows(asm):
    body = _body(asm, "Guarded")
    with pytest.raises(ReaderError) as e:
        translate(asm, analyze(body), JitEE(asm), Options(target=LINUX_X64))
    assert e.value.kind == "synchronized"
    win = translate(asm, analyze(body), JitEE(asm), Options(target=WIN_X64))
    assert "MON_ENTER" not in win.module
