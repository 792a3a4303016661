"""A method's outcome does not depend on what the batch translated before it (issue 12, 7a).

Two assemblies where some methods fail and others do not: an mcs `App` whose `Lib` was
deleted after the build (a local of Lib's struct is unresolved-type; a static field of Lib's
class, an instance field of it, a class deriving from it, and methods needing nothing of Lib),
and a corpus assembly (System.IO.Compression) seen through a folder of symlinks to the
framework that lacks one of the assemblies it references (System.Collections). Every EH method goes through the
whole pipeline (`Pipeline.stream`, as a batch does) in table order and in reverse order with
one JIT-EE each, and alone with a fresh JIT-EE; its outcome (ok with its IR text and clause
table, or the error's stage, kind and reason, or the exception a bug of ours raised) must be
the same in all three. For App the batch driver itself (`batch.validate_file`) must record
for each method exactly what the method gives alone.

Before the fix, `ldsfld` of Lib's unresolved static field raised AttributeError out of the
reader; the stream died and the batch recorded that error for `Plain`, a method translated
earlier and clean alone.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llilc_eh import batch
from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.loader import Assembly
from llilc_eh.pipeline import Pipeline, eh_methods
from llilc_eh.reader.jitee import JitEE

from reader_builds import mcs_library

FRAMEWORK = Corpus().framework_dir

LIB_CS = """
namespace Lib {
  public class LibError : System.Exception { public int Code; public LibError(int c) { Code = c; } }
  public class Thing { public static int Counter; public int X; public long Y; public string S; }
  public struct Pair { public int A; public Thing B; }
  public static class Api { public static int Work(int x) { try { return 10 / x; } catch (System.DivideByZeroException) { return -1; } } }
}
"""

APP_CS = """
using System;
namespace App {
  public class Local { public int F; public static int G; }
  public class Mine : Lib.Thing { public int M; }
  public class Program {
    public static int Plain(int x) { try { return 100 / x; } catch (DivideByZeroException) { return 0; } finally { Local.G++; } }
    public static int UsesStatic() { try { return Lib.Thing.Counter; } catch (Exception) { return 1; } }
    public static int UsesField(Lib.Thing t) { try { return t.X; } catch (NullReferenceException) { return 2; } }
    public static int CatchesLib() { try { return Lib.Api.Work(0); } catch (Lib.LibError e) { return e.Code; } }
    public static int Local1(Local l) { try { return l.F; } finally { Local.G = 3; } }
    public static int MineField(Mine m) { try { return m.M + m.X; } catch (Exception) { return 4; } }
    public static int PairLocal() { Lib.Pair p = default(Lib.Pair); try { p.A = 5; return p.A; } finally { Local.G = 6; } }
    public static int Plain2(int[] a) { try { return a[3]; } catch (IndexOutOfRangeException) { return 7; } }
    public static int StoresStatic(int v) { try { Lib.Thing.Counter = v; return v; } finally { Local.G = 8; } }
  }
}
"""

# The corpus case: System.IO.Compression without one of the assemblies it references.
CORPUS_ASSEMBLY = "System.IO.Compression.dll"
WITHHELD = ("System.Collections.dll",)   # 6 of its 49 EH methods need it


@pytest.fixture(scope="module")
def app(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("order")
    lib = mcs_library(root / "Lib.dll", LIB_CS)
    app = mcs_library(root / "App.dll", APP_CS, f"-r:{lib}")
    lib.unlink()
    return app


@pytest.fixture(scope="module")
def partial_framework(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("partial")
    for f in FRAMEWORK.iterdir():
        if f.suffix == ".dll" and f.name not in WITHHELD:
            os.symlink(f, folder / f.name)
    return folder / CORPUS_ASSEMBLY


def _outcome(run) -> tuple:
    if run.error is not None:
        return ("error", run.error.stage, run.error.kind, run.error.reason)
    return ("ran", run.ok, str(run.reader.module), run.clause_bytes.hex(),
            tuple(str(f) for f in run.findings), tuple(str(f) for f in run.image_findings))


def _in_order(path: Path, rids: list[int], pool, **jitee_args) -> dict[int, tuple]:
    """One pipeline (one JIT-EE) over `rids` in this order, as `batch` drives it: a bug of
    ours is recorded for the method the stream raised it at, and the stream goes on after it."""
    asm = Assembly(path)
    pipeline = Pipeline(asm, pool)
    pipeline._ee = JitEE(asm, **jitee_args)
    out: dict[int, tuple] = {}
    todo = list(rids)
    while todo:
        runs = pipeline.stream(todo)
        for i, rid in enumerate(todo):
            try:
                out[rid] = _outcome(next(runs))
            except Exception as exc:  # noqa: BLE001 - what the batch would record
                out[rid] = ("internal", type(exc).__name__, str(exc))
                todo = todo[i + 1:]
                break
        else:
            todo = []
    return out


def _three_ways(path: Path, pool, **jitee_args):
    rids = eh_methods(Assembly(path))
    forward = _in_order(path, rids, pool, **jitee_args)
    backward = _in_order(path, rids[::-1], pool, **jitee_args)
    alone = {}
    for rid in rids:
        alone.update(_in_order(path, [rid], pool, **jitee_args))
    return rids, forward, backward, alone


def _differences(rids, forward, backward, alone) -> list[str]:
    return [f"0x{0x06000000 | rid:08X}: table order {forward[rid][:4]!r}, reverse {backward[rid][:4]!r}, "
            f"alone {alone[rid][:4]!r}" for rid in rids if not forward[rid] == backward[rid] == alone[rid]]


def test_app_with_deleted_reference(app, pool):
    rids, forward, backward, alone = _three_ways(app, pool)
    assert _differences(rids, forward, backward, alone) == []
    names = {rid: Assembly(app).body(rid).name.split("::")[-1] for rid in rids}
    kinds = {names[rid]: o[0] if o[0] != "error" else o[2] for rid, o in alone.items()}
    # The mixture the test needs: methods failing on Lib beside clean ones, no bug of ours.
    assert kinds == {"Plain": "ran", "UsesStatic": "ran", "UsesField": "ran", "CatchesLib": "ran",
                     "Local1": "ran", "MineField": "ran", "PairLocal": "unresolved-type", "Plain2": "ran",
                     "StoresStatic": "ran"}
    assert "[Lib]Lib.Pair" in alone[next(r for r in rids if names[r] == "PairLocal")][3]


def test_batch_records_what_each_method_gives_alone(app, pool):
    """The batch driver, table order: each method's records are its own."""
    rids, _, _, alone = _three_ways(app, pool)
    report = batch.validate_file(str(app), translate=True)
    recorded: dict[str, list] = {}
    for f in report.translate_failures:
        recorded.setdefault(f["method"], []).append((f["stage"], f["kind"], f["reason"]))
    asm = Assembly(app)
    expected = {}
    for rid in rids:
        body = asm.body(rid)
        o = alone[rid]
        if o[0] == "error":
            expected[f"0x{body.token:08X} {body.name}"] = [o[1:]]
    assert recorded == expected
    assert report.translated == len(rids) - len(expected)


def test_corpus_assembly_with_withheld_references(partial_framework, pool):
    rids, forward, backward, alone = _three_ways(partial_framework, pool, search_path=[])
    assert _differences(rids, forward, backward, alone) == []
    failed = [o for o in alone.values() if o[0] != "ran"]
    clean = [o for o in alone.values() if o[0] == "ran" and o[1]]
    # Both kinds present, or the comparison proves little; every failure names what is withheld.
    assert failed and clean, (len(failed), len(clean))
    assert all(o[0] == "error" and o[2] == "unresolved-type" for o in failed), failed[:3]
    assert all(any(w[:-4] in o[3] for w in WITHHELD) for o in failed), failed[:3]


def test_a_bug_of_ours_is_recorded_for_its_own_method(app, monkeypatch):
    """Negative control of the stream's attribution, independent of the reader: a front that
    raises (an injected RuntimeError, standing for any bug of ours) is recorded for its own
    method, while the methods translated before and after it keep their own outcomes. Before
    the fix the record went to the method at the head of the stream."""
    asm = Assembly(app)
    rids = eh_methods(asm)
    victim = rids[4]
    real_front = Pipeline.front

    def front(self, rid, il=None):
        if rid == victim:
            raise RuntimeError("injected")
        return real_front(self, rid, il)

    monkeypatch.setattr(Pipeline, "front", front)
    report = batch.validate_file(str(app), translate=True)
    internal = [f for f in report.translate_failures if f["stage"] == "internal"]
    body = asm.body(victim)
    assert [(f["method"], f["kind"]) for f in internal] == [(f"0x{body.token:08X} {body.name}", "RuntimeError")]
    others = {f["method"] for f in report.translate_failures} - {internal[0]["method"]}
    assert others == {f"0x{asm.body(r).token:08X} {asm.body(r).name}" for r in rids
                      if asm.body(r).name.endswith("PairLocal")}
    assert report.translated == len(rids) - 2
