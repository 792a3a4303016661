"""`llilc-eh list` (methods by EH shape) and `--method` as a researcher types it: partial
names, C#-like parameter lists, "did you mean" on a miss.

The listing's filters are checked against the clause tables read directly from the bodies,
the lookup against real CoreLib overloads.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.loader import Assembly
from llilc_eh.cli import sample_path
from llilc_eh.errors import AssemblyError
from llilc_eh.view.methods import find_method, simple_params

CORELIB = Corpus().framework_dir / "System.Private.CoreLib.dll"


def llilc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llilc_eh.cli", *args], capture_output=True, text=True,
                          timeout=300, check=False)


def listed(*args: str) -> list[dict]:
    r = llilc("list", str(sample_path()), "--json", *args)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["command"] == "list"
    return doc["methods"]


@pytest.fixture(scope="module")
def bodies():
    asm = Assembly(sample_path())
    return {f"0x{asm.body(rid).token:08X}": asm.body(rid) for rid in asm.methods_with_il() if asm.body(rid).has_eh}


def test_list_is_every_eh_method(bodies):
    rows = listed()
    assert [r["token"] for r in rows] == sorted(bodies)
    for r in rows:
        assert r["clauses"] == len(bodies[r["token"]].clauses)


@pytest.mark.parametrize("flag,kind", [("--filter", "filter"), ("--fault", "fault"), ("--catch", "catch"),
                                       ("--finally", "finally")])
def test_kind_filters_match_the_clause_tables(bodies, flag, kind):
    want = sorted(t for t, b in bodies.items() if any(c.kind.word == kind for c in b.clauses))
    assert want, f"the sample has a {kind} clause"
    assert [r["token"] for r in listed(flag)] == want


def test_shape_filters_narrow(bodies):
    everything = listed()
    mutual = listed("--mutual-protect")
    assert mutual and len(mutual) < len(everything) and all(r["mutual_protect"] for r in mutual)
    assert "Tests.MutualProtect.Program::Run" in " ".join(r["signature"] for r in mutual)
    nested = listed("--try-in-handler")
    assert nested and all(r["try_in_handler"] for r in nested)
    deep = listed("--min-depth", "3")
    assert deep and all(r["try_depth"] >= 3 for r in deep) and len(deep) < len(everything)
    many = listed("--min-clauses", "4")
    assert [r["token"] for r in many] == sorted(t for t, b in bodies.items() if len(b.clauses) >= 4)
    named = listed("--name", "tryinfilter")
    assert named and all("tryinfilter" in r["signature"].lower() for r in named)


def test_text_line_has_the_full_signature():
    r = llilc("list", str(sample_path()), "--name", "CatchFilterCatch")
    assert r.returncode == 0
    assert r.stdout.startswith("0x06000002 ") and "Tests.CatchAndFilter.Program::CatchFilterCatch(" in r.stdout
    assert "[3 clauses: catch 2 filter 1; depth 1; mutual-protect]" in r.stdout


def test_csharp_parameter_lists_compare_with_ilasm_ones():
    il = "(class System.Collections.Generic.List`1<class System.Threading.Tasks.Task>, int32, valuetype " \
         "System.Threading.CancellationToken)"
    assert simple_params(il) == simple_params("List<Task>, int, CancellationToken") == "List<Task>,int32,CancellationToken"
    assert simple_params("native int, int32&, string[]") == simple_params("IntPtr, ref int, string[]")
    assert simple_params("(int64)") != simple_params("(int)")            # the control: a different type


def test_lookup_by_partial_name_and_csharp_signature():
    asm = Assembly(CORELIB)
    exact = asm.find_method("System.Threading.Tasks.Task::WaitAllBlockingCore")
    for query in ("WaitAllBlockingCore", "Task::WaitAllBlockingCore", "Task.WaitAllBlockingCore",
                  "Tasks.Task.WaitAllBlockingCore(List<Task>, int, CancellationToken)"):
        assert find_method(asm, query) == exact, query
    # Overloads told apart by a C# parameter list: String.IndexOf(char) vs IndexOf(string).
    a = find_method(asm, "String.IndexOf(char)")
    b = find_method(asm, "String.IndexOf(string)")
    assert a != b and a.signature.endswith("::IndexOf(char)") and b.signature.endswith("::IndexOf(string)")


def test_a_miss_says_what_was_meant():
    asm = Assembly(CORELIB)
    with pytest.raises(AssemblyError) as e:
        find_method(asm, "WaitAllBlockingCor")
    assert e.value.kind == "method-not-found" and "did you mean:\n  System.Threading.Tasks.Task::WaitAllBlockingCore" \
        in str(e.value)
    with pytest.raises(AssemblyError) as e:
        find_method(asm, "Task.WaitAllBlockingCore(int)")
    assert "no overload of 'Task.WaitAllBlockingCore' takes (int32)" in str(e.value)
    with pytest.raises(AssemblyError) as e:
        find_method(asm, "Dispose")
    assert e.value.kind == "ambiguous-method" and "matches" in str(e.value)
    r = llilc("il", str(CORELIB), "--method", "WaitAllBlockingCor")
    assert r.returncode == 1 and "did you mean" in r.stderr and "Traceback" not in r.stderr
    for query in ("(", "(int)", " ("):     # no name before the parameter list: said so, as typed
        with pytest.raises(AssemblyError) as e:
            find_method(asm, query)
        assert e.value.kind == "method-not-found" and f"{query!r} names no method" in str(e.value)
