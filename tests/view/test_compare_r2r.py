"""`translate --compare-r2r`: ours beside RyuJIT for one method of a real ReadyToRun image.

RyuJIT's side is checked against the image itself (the `r2r` command's own reading of the
same body), ours against the clause table `translate` prints; the classification of our
table (split tries, handler copies) against a change that must produce them.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.loader import Assembly
from llilc_eh.backend.codegen import CodegenPool
from llilc_eh.cli import sample_path
from llilc_eh.pipeline import Pipeline
from llilc_eh.reader.translate import Options
from llilc_eh.view.compare import our_side

CORELIB = Corpus().framework_dir / "System.Private.CoreLib.dll"
# Three nested try/finallys: RyuJIT clones two finallys away and turns one into a fault (1
# clause); we keep all three, one handler twice (it sits in a finally with a normal-path copy).
WAIT_ALL = "System.Threading.Tasks.Task::WaitAllBlockingCore"
TWO_TARGETS = "Tests.FinallyTwoTargets.Program::TwoTargets"      # one finally, two leave targets


def llilc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llilc_eh.cli", *args], capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.fixture(scope="module")
def wait_all():
    """(compare JSON, r2r JSON, translate --stage clauses JSON) of WaitAllBlockingCore."""
    cmp = llilc("translate", str(CORELIB), "--method", WAIT_ALL, "--compare-r2r", "--json")
    assert cmp.returncode == 0, cmp.stderr
    r2r = llilc("r2r", str(CORELIB), "--method", WAIT_ALL, "--json")
    assert r2r.returncode == 0, r2r.stderr
    return json.loads(cmp.stdout)["methods"][0], json.loads(r2r.stdout)["methods"][0]


def test_ryujit_side_is_the_images_body(wait_all):
    doc, r2r = wait_all
    theirs = doc["compare_r2r"]["ryujit"]
    assert theirs["clauses_table"] == r2r["native_clauses"]
    assert theirs["clauses"] == len(r2r["native_clauses"])
    assert theirs["funclets"] == len(r2r["ranges"]) - 1
    assert theirs["code_size"] == r2r["ranges"][-1]["end"] - r2r["ranges"][0]["start"]
    assert theirs["il_fates"] == r2r["comparison"]["il_fates"]
    assert theirs["roles"] == r2r["comparison"]["native_roles"]
    # What RyuJIT did here (measured): finally #0 became a fault, the two others were cloned away.
    assert theirs["il_fates"] == ["finally-became-fault", "removed", "removed"]


def test_our_side_accounts_for_every_clause(wait_all):
    doc, _ = wait_all
    ours = doc["compare_r2r"]["ours"]
    table = doc["clauses"]["clauses"] if "clauses" in doc["clauses"] else doc["clauses"]
    assert ours["clauses"] == len(ours["roles"]) == len(table)
    words = [r.split(" ")[0] for r in ours["roles"]]
    assert ours["duplicates"] == words.count("duplicate") == sum(1 for c in table if c["flags"] & 8)
    assert ours["primaries"] == words.count("il") + words.count("split") + words.count("copy")
    # Every IL clause has exactly one first primary, and it is a clause of the IL clause's kind.
    assert sorted(r for r in ours["roles"] if r.startswith("il #")) == [f"il #{k}" for k in range(3)]
    assert ours["il_fates"] == ["kept"] * 3
    assert ours["split"] > 0 and ours["copies"] == 1       # measured: 5 runs more, one handler copied


def test_text_view_sets_both_sides_beside_each_other():
    r = llilc("translate", str(CORELIB), "--method", WAIT_ALL, "--compare-r2r")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("// ours beside RyuJIT: 0x0600213F System.Threading.Tasks.Task::WaitAllBlockingCore")
    assert "finally-became-fault #0" in out and "RyuJIT: removed" in out
    # Both disassemblies, side by side: our range headers on the left, RyuJIT's on the right.
    code = out[out.index("code (capstone"):]
    first = code.splitlines()[1]
    assert first.startswith("; range 0 root") and "| ; main [0x0000" in first
    assert any(line.rstrip().endswith("; funclet 1 [0x017e, ...)") for line in code.splitlines())


def test_split_and_copy_classification_follows_the_code():
    """Negative control for the classifier: the same method under continuation selectors has
    no split try; with a finally copy per leave its try is split around the copy."""
    asm = Assembly(sample_path())
    rid = asm.find_method(TWO_TARGETS).rid
    sides = {}
    with CodegenPool(1) as pool:
        for clone in (False, True):
            run = Pipeline(asm, pool, options=Options(clone_finally=clone)).run(rid)
            assert run.ok, run.error
            sides[clone] = our_side(run)
    assert sides[False].split == 0 and sides[False].roles == ("il #0",)
    assert sides[True].split == 1 and sides[True].roles == ("il #0", "split #0")
    assert sides[True].classification() == "split" and sides[False].classification() == "identical"


def test_not_ready_to_run_is_unusable_input():
    r = llilc("translate", str(sample_path()), "--method", TWO_TARGETS, "--compare-r2r")
    assert r.returncode == 1
    assert r.stderr.startswith("llilc-eh: error: --compare-r2r: sample.dll has no ReadyToRun code")
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_a_generic_method_is_compared_with_an_instantiated_body():
    """HashSet`1::UnionWith has no MethodDef body in System.Collections' image, only instantiated
    ones: the one-method view shows the first of them and says so."""
    dll = Corpus().framework_dir / "System.Collections.dll"
    r = llilc("translate", str(dll), "--method", "HashSet`1::UnionWith", "--compare-r2r", "--json")
    assert r.returncode == 0, r.stderr
    theirs = json.loads(r.stdout)["methods"][0]["compare_r2r"]["ryujit"]
    assert theirs["instantiation"] is True and theirs["il_fates"] == ["finally-became-fault"]
    r2r = json.loads(llilc("r2r", str(dll), "--method", "HashSet`1::UnionWith", "--json").stdout)["methods"]
    first = min(r2r, key=lambda m: m["rva"])
    assert theirs["rva"] == first["rva"] and theirs["clauses_table"] == first["native_clauses"]
    text = llilc("translate", str(dll), "--method", "HashSet`1::UnionWith", "--compare-r2r").stdout
    assert "the generic definition has no body of its own; this is the first instantiated body" in text
