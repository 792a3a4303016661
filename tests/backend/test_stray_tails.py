"""Stray tails with invokes: LLVM (O2) sometimes lays out a filter handler's throw block -- its
CORINFO_HELP_THROWNULLREF invoke, which unwinds to an enclosing finally, and the `ud2` after it --
at the end of another funclet's range, entered only by the filter handler's branches (measured in
three System.Net.Http async MoveNext methods once a byref `this` was null-checked, 8d48a04). The
funclet match must attribute that tail's calls to the funclet that branches there
(`relink.stray_tails` before `match_funclets(tails=...)`): read by address, the invoke sits in
the outer catch, whose model funclet no finally covers, and no assignment fits."""

from __future__ import annotations

import pytest

from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.loader import Assembly
from llilc_eh.backend import relink, x86
from llilc_eh.backend.match import match_funclets
from llilc_eh.errors import BackendError
from llilc_eh.pipeline import Pipeline

METHODS = ("System.Net.Http.HttpConnection/ChunkedEncodingReadStream/<ReadAsyncCore>d__8::MoveNext",
           "System.Net.Http.HttpConnection/ChunkedEncodingReadStream/<CopyToAsyncCore>d__10::MoveNext",
           "System.Net.Http.HttpConnection/<SendAsyncCore>d__53::MoveNext")


@pytest.fixture(scope="module")
def runs(pool):
    asm = Assembly(Corpus().framework_dir / "System.Net.Http.dll")
    pipeline = Pipeline(asm, pool, opt=2)
    return [pipeline.run(asm.find_method(name).rid) for name in METHODS]


def test_the_methods_go_through_clean(runs):
    for run in runs:
        assert run.error is None and run.ok, (run.name, run.error, run.image_findings, run.findings)


def test_their_images_move_a_tail_with_an_invoke(runs):
    for run in runs:
        parent = run.image.parent
        own = [f for f in run.recovered.method_functions(parent) if f.name == parent or f.is_funclet]
        text = run.coff.section(".text").data
        decoded = {f.name: x86.decode(x86.md(), text, f.start, f.end, f.name) for f in own}
        tails = relink.stray_tails(own, decoded)
        moved = [(taker, giver, a, b) for taker, pieces in tails.items() for giver, a, b in pieces]
        assert moved, run.name
        by_name = {f.name: f for f in own}
        assert any(c.is_invoke and a <= c.offset < b for _, giver, a, b in moved for c in by_name[giver].calls), \
            run.name


def test_without_the_tails_no_assignment_fits(runs):
    """Negative control: the match reading the invoke by its address (no tails) fails, as every
    one of these methods did before."""
    for run in runs:
        with pytest.raises(BackendError) as e:
            match_funclets(run.recovered, run.coff, run.model, run.image.parent)
        assert e.value.kind == "funclet-match", run.name
