"""Stack joins of a native int and a byref (issue 12, item 7b).

mcs and csc compile `fixed (T* p = array)` to a join where the null/empty path leaves a native
int (`ldc.i4.0; conv.u`) and the other a byref (`ldelema`). ECMA-335 III.1.8.1.3 allows the
pair in unverifiable code and CoreCLR's importer merges it to a byref (re-importing a
successor already imported as native int); the reader refused it as `stack-mismatch`. Here:
the merge rule itself; hand-written IL with the join reached in both orders and once only by a
back edge after the join was translated; joins that must still fail; real mcs `fixed` code in
try/finally, try/catch with a filter and inside a catch handler. Programs run on CoreCLR against
their .expected traces, and every method goes through the whole pipeline at O0 and O2.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from llilc_eh.assembly.loader import Assembly
from llilc_eh.check.toolchain import assemble, run_on_coreclr
from llilc_eh.errors import ReaderError
from llilc_eh.il.method import analyze
from llilc_eh.pipeline import Pipeline
from llilc_eh.reader import stack
from llilc_eh.reader import translate as reader
from llilc_eh.reader.jitee import JitEE

HERE = Path(__file__).resolve().parent
OPT_LEVELS = (0, 2)
JOINS = ("NintFirst", "ByrefFirst", "BackEdge")
REFUSED = {"Int32VsObject": ("obj", "i32"), "Int32VsByref": ("byref", "i32")}
FIXED = ("Sum", "Count", "InHandler")      # mcs's `fixed` over an array: an nint/byref join each


# -- the rule ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("a, b, merged", [
    ((("nint", None),), (("byref", None),), (("byref", None),)),
    ((("byref", None),), (("nint", None),), (("byref", None),)),
    ((("i32", None), ("nint", None)), (("i32", None), ("byref", None)), (("i32", None), ("byref", None))),
    ((("i32", None),), (("obj", None),), None),
    ((("i32", None),), (("byref", None),), None),     # CoreCLR widens this one (JIT64 compat); we do not
    ((("i64", None),), (("byref", None),), None),
    ((("nint", None),), (("obj", None),), None),
    ((("byref", None),), (("obj", None),), None),
    ((("nint", None),), (), None),
    ((("vt", "S1"),), (("vt", "S2"),), None),
])
def test_merge_rule(a, b, merged):
    assert stack._merge_shapes(a, b) == merged
    assert stack._merge_shapes(b, a) == merged


# -- hand-written IL --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def joins_exe(tmp_path_factory) -> Path:
    return assemble(HERE / "stack_joins.il", tmp_path_factory.mktemp("stack_joins"))


@pytest.fixture(scope="module")
def joins_asm(joins_exe) -> Assembly:
    return Assembly(joins_exe)


def _method(asm: Assembly, name: str):
    return analyze(asm.body(asm.find_method(name).rid))


def _arrivals(monkeypatch, asm: Assembly, name: str) -> tuple[list[tuple[int, tuple]], reader.ReaderResult]:
    """Every (offset, stack shape) the translator brings to a block, in order, over all attempts."""
    seen = []
    original = reader.Translator._enqueue

    def spy(self, offset, ctx, shape):
        seen.append((offset, shape))
        return original(self, offset, ctx, shape)

    monkeypatch.setattr(reader.Translator, "_enqueue", spy)
    result = reader.translate(asm, _method(asm, name), JitEE(asm))
    monkeypatch.setattr(reader.Translator, "_enqueue", original)
    return seen, result


def _joins(seen) -> dict[int, list[str]]:
    """Offsets reached both with a native int and with a byref at one depth -> the kinds there,
    in arrival order."""
    out = {}
    for offset in dict.fromkeys(o for o, _ in seen):
        shapes = [s for o, s in seen if o == offset]
        for depth in range(max(map(len, shapes))):
            kinds = [s[depth][0] for s in shapes if len(s) > depth]
            if {"nint", "byref"} <= set(kinds):
                out[offset] = kinds
    return out


def _join_loads(module: str, offset: int) -> list[str]:
    """The spill-slot loads that open the (first) block of IL `offset`, in whatever context."""
    block = re.search(rf"^IL_{offset:04x}(?:\.[\w.]+)?:.*\n((?:  %\S+ = load .*\n)*)", module, re.M)
    assert block, f"no block IL_{offset:04x}"
    return block.group(1).strip().splitlines()


@pytest.mark.parametrize("name, first", [("NintFirst", "nint"), ("ByrefFirst", "byref")])
def test_join_in_either_order_is_a_byref(monkeypatch, joins_asm, name, first):
    seen, result = _arrivals(monkeypatch, joins_asm, f"Joins::{name}")
    joins = _joins(seen)
    assert len(joins) == 1, joins
    [(offset, kinds)] = joins.items()
    assert kinds[0] == first, f"{name} should reach its join with a {first} first: {kinds}"
    assert len(kinds) == 2, "one attempt: the join was not translated before its second predecessor"
    loads = _join_loads(result.module, offset)
    assert len(loads) == 2
    assert re.fullmatch(r"%\S+ = load i32, ptr %stk0\.i32", loads[0].strip())
    assert re.fullmatch(r"%\S+ = load ptr, ptr %stk1\.byref", loads[1].strip())   # typed byref


def test_join_found_by_a_back_edge_translates_the_method_again(monkeypatch, joins_asm):
    m = _method(joins_asm, "Joins::BackEdge")
    with pytest.raises(stack._Rejoin) as first:      # one attempt alone meets the retyped join
        reader.Translator(joins_asm, m, JitEE(joins_asm)).run()
    seen, result = _arrivals(monkeypatch, joins_asm, "Joins::BackEdge")
    offset = first.value.key[0]
    # entry (nint), back edge (byref, after LOOP was translated); the 2nd attempt: the same two
    assert _joins(seen) == {offset: ["nint", "byref", "nint", "byref"]}
    assert first.value.shape == (("byref", None),)
    [load] = _join_loads(result.module, offset)
    assert re.fullmatch(r"%\S+ = load ptr, ptr %stk0\.byref", load.strip())
    again = reader.translate(joins_asm, m, JitEE(joins_asm)).module
    assert again == result.module                     # deterministic, restart included


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_incompatible_joins_still_fail(joins_asm, name):
    with pytest.raises(ReaderError) as e:
        reader.translate(joins_asm, _method(joins_asm, f"Joins::{name}"), JitEE(joins_asm))
    assert e.value.kind == "stack-mismatch"
    assert e.value.offset is not None and name in e.value.method
    assert f"IL_{e.value.offset:04x}" in str(e.value)
    assert all(f"'{k}'" in e.value.reason for k in REFUSED[name])


def _pipeline_runs(asm: Assembly, rids, pool) -> dict:
    """(method name, opt) -> its whole-pipeline run."""
    runs = {}
    for opt in OPT_LEVELS:
        for run in Pipeline(asm, pool, opt=opt).run_many(rids):
            runs[run.il.body.name, opt] = run
    return runs


def test_joins_through_the_pipeline(joins_asm, pool):
    runs = _pipeline_runs(joins_asm, [joins_asm.find_method(f"Joins::{n}").rid for n in JOINS], pool)
    bad = {k: str(r.error or r.findings or r.image_findings) for k, r in runs.items() if not r.ok}
    assert bad == {}
    assert all(len(r.clauses.clauses) >= 1 for r in runs.values())


def test_joins_program_on_coreclr(joins_exe):
    proc = run_on_coreclr(joins_exe)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (HERE / "stack_joins.expected").read_text()


# -- real mcs `fixed` code --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fixed_exe(tmp_path_factory) -> Path:
    if shutil.which("mcs") is None:
        raise RuntimeError("mcs not found on PATH (Debian: apt-get install mono-devel)")
    out = tmp_path_factory.mktemp("fixed_pointers") / "fixed_pointers.exe"
    proc = subprocess.run(["mcs", "-unsafe", "-target:exe", f"-out:{out}", str(HERE / "fixed_pointers.cs")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and out.is_file(), proc.stdout + proc.stderr
    return out


@pytest.mark.parametrize("name", FIXED)
def test_mcs_fixed_code_has_the_join(monkeypatch, fixed_exe, name):
    """The pattern is what mcs really emits (else the pipeline test below proves nothing)."""
    asm = Assembly(fixed_exe)
    seen, result = _arrivals(monkeypatch, asm, f"FixedPointers::{name}")
    joins = _joins(seen)
    assert joins, f"mcs no longer emits a native int / byref join in {name}"
    for offset in joins:
        assert any("load ptr, ptr %stk0.byref" in line for line in _join_loads(result.module, offset))


def test_mcs_fixed_code_through_the_pipeline(fixed_exe, pool):
    asm = Assembly(fixed_exe)
    rids = [rid for rid in asm.methods_with_il() if asm.body(rid).clauses]
    runs = _pipeline_runs(asm, rids, pool)
    assert sorted({n for n, _ in runs}) == sorted(f"FixedPointers::{n}" for n in (*FIXED, "Chars"))
    bad = {k: str(r.error or r.findings or r.image_findings) for k, r in runs.items() if not r.ok}
    assert bad == {}
    # the filter (`when`) of Count is outlined and placed
    assert any(len(r.reader.filters) == 1 for (n, _), r in runs.items() if n.endswith("Count"))


def test_mcs_fixed_program_on_coreclr(fixed_exe):
    proc = run_on_coreclr(fixed_exe)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (HERE / "fixed_pointers.expected").read_text()
