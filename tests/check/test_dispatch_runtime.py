"""check.dispatch against the real runtime: the event sequence the simulator predicts for a
throw, over our own native table (O0 and O2) and by the IL reference, equals the trace
CoreCLR 3.1 prints when the tests/il program runs.

Each handler and filter of these programs prints a line first; a region's *label* is the
first string literal it loads (a filter's: the one ending in its verdict, `filter: 1`, when
it has one per verdict). A case names the throw (method, IL offset of the throwing
instruction or call), the scenario that happens at run time and the line printed right
before the throw (the anchor); frames after the first are the callers the exception leaves
into, composed as CoreCLR's two passes do across frames: every frame's first pass (filters)
up to the catching frame, then every frame's second pass (finallys, faults), then the
catch. The predicted lines must appear, contiguously, in the program's CoreCLR output.
Negative control: for every case, the scenarios that did *not* happen predict a different
sequence, which must not be the one printed there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llilc_eh.assembly.loader import Assembly
from llilc_eh.check.dispatch import (
    Scenario,
    clr_dispatch,
    il_dispatch,
    map_events,
    our_clause_map,
    scenarios,
)
from llilc_eh.check.toolchain import assemble, run_on_coreclr
from llilc_eh.pipeline import Pipeline, eh_methods

IL_DIR = Path(__file__).resolve().parents[1] / "il"
UNNAMED = None

# (program, anchor line, [(method, IL offset, exception class or UNNAMED, accepting filter clause)],
#  number of predicted lines to compare: all unless a handler throws before the catch runs)
CASES = [
    ("nested_filters", "try: throw", [("InnerRejectsOuterAccepts", 0x0F, UNNAMED, 2)], None),
    ("nested_filters", "try: throw", [("InnerAccepts", 0x0F, UNNAMED, 0)], None),
    ("nested_filters", "try: throw InvalidOperationException", [("FilterInHandler", 0x0F, UNNAMED, 1)], None),
    ("nested_filters", "outer handler: throw ArgumentException", [("FilterInHandler", 0x2E, UNNAMED, 0)], None),
    ("filter_first_pass", "try: throw", [("Filtered", 0x0B, UNNAMED, 1)], None),
    ("filter_first_pass", "try: throw", [("Filtered", 0x0B, UNNAMED, None), ("Caller", None, UNNAMED, None)], None),
    ("filter_first_pass", "callee try: throw",
     [("CalleeWithFinally", 0x0F, UNNAMED, None), ("CallerWithFilter", None, UNNAMED, 0)], None),
    ("mutual_protect", "try", [("Run", 0x0B, "System.ArgumentException", None)], None),
    ("mutual_protect", "catch 2/try: throw", [("Run", 0x51, "System.NotSupportedException", None)], None),
    ("mutual_protect", "catch 3: throw ArgumentException", [("Run", 0x6F, "System.ArgumentException", None)], None),
    # the finally throws: the first exception's trace stops after the finally's first line
    ("throw_in_finally", "try: throw InvalidOperationException",
     [("Replace", 0x14, "System.InvalidOperationException", None)], 2),
    ("throw_in_finally", "finally: throw ArgumentException", [("Replace", 0x29, "System.ArgumentException", None)],
     None),
]
PROGRAMS = sorted({c[0] for c in CASES})


@pytest.fixture(scope="module")
def programs(tmp_path_factory, pool):
    """{program: (CoreCLR output lines, {opt: {method name: MethodRun}}, Pipeline)}."""
    out_dir = tmp_path_factory.mktemp("dispatch")
    out = {}
    for name in PROGRAMS:
        exe = assemble(IL_DIR / f"{name}.il", out_dir)
        ran = run_on_coreclr(exe)
        assert ran.returncode == 0, ran.stderr
        asm = Assembly(exe)
        runs, pipelines = {}, {}
        for opt in (0, 2):
            pipelines[opt] = Pipeline(asm, pool, opt=opt)
            runs[opt] = {r.name.split("::")[-1]: r for r in pipelines[opt].stream(eh_methods(asm))}
        out[name] = (ran.stdout.splitlines(), runs, pipelines)
    return out


def _strings(run, start: int, end: int, asm: Assembly) -> list[str]:
    return [asm.names.user_string(ins.operand) for ins in run.il.instructions
            if start <= ins.offset < end and ins.op.name == "ldstr"]


def _label(run, asm, event) -> str | None:
    """The line a handler or filter prints first (module docstring); None for events that print nothing."""
    if event.kind not in ("filter", "cleanup", "catch") or not isinstance(event.clause, int):
        return None
    c = run.il.body.clauses[event.clause]
    if event.kind == "filter":
        texts = _strings(run, c.filter_start, c.handler_start, asm)
        by_verdict = [t for t in texts if t.endswith(f": {int(bool(event.verdict))}")]
        return (by_verdict or texts or [None])[0]
    texts = _strings(run, c.handler_start, c.handler_end, asm)
    return texts[0] if texts else None


def _scenario(pipeline, run, exception: str | None, accepting: int | None) -> Scenario:
    if exception is None:
        return Scenario(None, accepting)
    for c in run.il.body.clauses:
        if c.class_token is not None and pipeline.oracle.ancestry(c.class_token)[0].endswith("]" + exception):
            return Scenario(c.class_token, accepting)
    raise AssertionError(f"no catch of {exception} in {run.name}")


def _pcs(run, il_offset: int | None, callee: str | None) -> list[int]:
    """The return addresses of the calls at `il_offset` (None: the calls of `callee`)."""
    if il_offset is None:
        ids = {c.callsite for c in run.model.calls if callee and callee in c.callee}
        pcs = [p.return_address for p in run.placed.calls if p.callsite in ids]
    else:
        pcs = [s.pc for s in run.dispatch.sites if s.il_offset == il_offset]
    assert pcs, f"{run.name}: no call site at {il_offset if il_offset is not None else callee}"
    return pcs


def _frame_events(pipeline, run, il_offset, pc, scenario, native: bool):
    """(first pass, second pass, catcher label or None) of one frame, IL clause numbers."""
    if native:
        clauses = run.clauses.clauses
        d = clr_dispatch(clauses, pc, scenario, pipeline.oracle,
                         our_clause_map(clauses, run.image, run.model, filters=True).get)
        events = map_events(d.events, our_clause_map(clauses, run.image, run.model))
    else:
        events = il_dispatch(run.il.regions, il_offset, scenario, pipeline.oracle).events
    first = [e for e in events if e.kind in ("test", "filter")]
    second = [e for e in events if e.kind == "cleanup"]
    end = events[-1]
    return first, second, end if end.kind == "catch" else None


def _predict(prog, opt, anchor, frames, native: bool, override=None) -> list[list[str]]:
    """The predicted lines, one list per combination of the frames' call sites."""
    lines, runs, pipelines = prog
    pipeline = pipelines[opt]
    asm = pipeline.asm
    per_frame = []
    callee = None
    for i, (method, il_offset, exception, accepting) in enumerate(frames):
        run = runs[opt][method]
        scenario = override if (override is not None and i == 0) else _scenario(pipeline, run, exception, accepting)
        options = []
        for pc in _pcs(run, il_offset, callee):
            site_il = il_offset if il_offset is not None else next(
                c.il_offset for c in run.model.calls if callee in c.callee)
            options.append((run, _frame_events(pipeline, run, site_il, pc, scenario, native)))
        per_frame.append(options)
        callee = method
    predictions = []

    def combine(i, chosen):
        if i == len(per_frame):
            out, seconds = [anchor], []
            for run, (first, second, catcher) in chosen:
                out += [x for x in (_label(run, asm, e) for e in first) if x]
                seconds += [x for x in (_label(run, asm, e) for e in second) if x]
                if catcher is not None:
                    predictions.append(out + seconds + [x for x in [_label(run, asm, catcher)] if x])
                    return
            predictions.append(out + seconds)
            return
        for option in per_frame[i]:
            combine(i + 1, chosen + [option])
            if chosen and chosen[-1][1][2] is not None:
                break
    combine(0, [])
    return predictions


def _printed(lines: list[str], predicted: list[str]) -> bool:
    n = len(predicted)
    return any(all(lines[j + t].startswith(predicted[t]) for t in range(n)) for j in range(len(lines) - n + 1))


@pytest.mark.parametrize("opt", [0, 2])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[2][0][0]}-{c[2][0][1]}")
def test_predicted_trace_is_what_coreclr_prints(programs, case, opt):
    program, anchor, frames, upto = case
    prog = programs[program]
    lines = prog[0]
    for native in (True, False):
        for predicted in _predict(prog, opt, anchor, frames, native):
            predicted = predicted[:upto] if upto else predicted
            assert len(predicted) >= 2, predicted
            assert _printed(lines, predicted), (native, predicted, lines)


@pytest.mark.parametrize("case", [c for c in CASES if c[3] is None], ids=lambda c: f"{c[0]}-{c[2][0][0]}-{c[2][0][1]}")
def test_other_scenarios_predict_other_traces(programs, case):
    """Negative control: where the trace was printed, a scenario that did not happen and
    dispatches differently predicts a sequence that is not the printed one (cases whose
    trace is cut short by a throwing finally are left out: their prefix says too little)."""
    program, anchor, frames, upto = case
    prog = programs[program]
    lines, runs, pipelines = prog
    method, il_offset, exception, accepting = frames[0]
    run = runs[2][method]
    actual = _scenario(pipelines[2], run, exception, accepting)
    happened = [p[:upto] if upto else p for p in _predict(prog, 2, anchor, frames, True)]
    n = len(happened[0])
    printed = next(lines[j:j + n] for j in range(len(lines) - n + 1)
                   if all(lines[j + t].startswith(happened[0][t]) for t in range(n)))
    others = [s for s in scenarios(run.il.regions, il_offset) if s != actual]
    differing = 0
    for s in others:
        for predicted in _predict(prog, 2, anchor, frames, True, override=s):
            predicted = predicted[:upto] if upto else predicted
            if predicted in happened:
                continue                # this scenario dispatches alike here
            differing += 1
            assert not (len(predicted) == n and all(printed[t].startswith(predicted[t]) for t in range(n))), \
                (s, predicted, printed)
    assert differing or not others
