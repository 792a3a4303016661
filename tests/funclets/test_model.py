"""The funclet model held against the IL: every method of the tests/il programs, corpus methods,
hand-made shapes, and broken modules that `verify()` must catch.

The IL side of each assertion is computed here from the clause table and the region tree
(ranges, nesting), not through the model's own IL helpers, so a bug shared by the model and
its check cannot pass unnoticed.
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.loader import Assembly
from llilc_eh.check.toolchain import assemble
from llilc_eh.cli import sample_path
from llilc_eh.funclets import NO_STATE, FuncletError, FuncletKind, build_funclet_model
from llilc_eh.il.method import analyze
from llilc_eh.il.opcodes import Flow
from llilc_eh.il.regions import RegionKind
from llilc_eh.reader.jitee import JitEE
from llilc_eh.reader.translate import Options, translate

ASM = Assembly(sample_path())
EE = JitEE(ASM)
METHODS = [ASM.method(rid) for rid in ASM.methods_with_il()]


def build(name: str, asm=ASM, ee=EE, **options):
    m = analyze(asm.body(asm.find_method(name).rid))
    result = translate(asm, m, ee, Options(**options))
    return m, result, build_funclet_model(result.module, result.parent, m, table=result.table)


# -- the IL side, computed from ranges ---------------------------------------------------------

def _handler(tree, clause):
    return next(r for r in tree.regions if r.kind.is_handler and r.clauses == (clause,))


def _tries_holding(tree, offset):
    """Every try region holding IL offset `offset`, innermost first."""
    return sorted((r for r in tree.tries if r.start <= offset < r.end), key=lambda r: r.end - r.start)


def _outer_try(tree, t):
    outer = [r for r in tree.tries if r is not t and r.start <= t.start and t.end <= r.end]
    return min(outer, key=lambda r: r.end - r.start) if outer else None


def _allowed_parents(tree, clause):
    """Clauses the parent funclet of a copy of `clause`'s handler may have (None: the root):
    the enclosing handlers out to the first one that is not a finally (a finally also runs as
    normal-path code in its try's context, which is no funclet)."""
    allowed, r = [], _handler(tree, clause)
    while r.parent is not None:
        r = tree.regions[r.parent]
        if r.kind.is_handler:
            allowed.append(r.clauses[0])
            if r.kind is not RegionKind.FINALLY:
                return allowed
    return allowed + [None]


def _try_of_state(model, tree, state):
    return tree.regions[_handler(tree, model.states[state].clause).try_region]


def assert_agrees_with_il(model, m):
    """Every structural claim of the model, checked against the IL method `m`."""
    tree = m.regions
    funclets = model.funclets
    assert funclets[0].kind is FuncletKind.ROOT and funclets[0].parent is None
    # kinds and class tokens match the clauses; a filter names its clause's filter part
    for f in funclets[1:]:
        clause = tree.clauses[f.clause]
        if f.kind is FuncletKind.FILTER:
            assert any(r.kind is RegionKind.FILTER and r.clauses == (f.clause,) for r in tree.regions)
            handler = funclets[f.handler]
            assert handler.kind is FuncletKind.FILTER_HANDLER and handler.filter == f.index
            assert handler.clause == f.clause and f.parent == handler.parent
            assert f.function.endswith(f'$filter{f.clause}"')
        else:
            assert f.kind.value == _handler(tree, f.clause).kind.value, (f, clause)
            if f.kind is FuncletKind.CATCH:
                assert f.class_token == clause.class_token
        # the tree: a handler inside another handler is a child of that handler's funclet
        parent = funclets[f.parent]
        assert (None if parent.kind is FuncletKind.ROOT else parent.clause) in _allowed_parents(tree, f.clause)
    # every clause whose try holds a call or a throw has a funclet (every copy listed)
    for c in tree.clauses:
        if any(c.try_start <= i.offset < c.try_end and i.op.flow in (Flow.CALL, Flow.THROW)
               for i in m.instructions):
            assert model.handlers_of(c.index), f"clause #{c.index} can throw but has no pad"
    # catchswitch handler order = clause order of the (mutual-protect) try
    for cs in model.catchswitches:
        clauses = [funclets[h].clause for h in cs.handlers]
        t = tree.regions[_handler(tree, clauses[0]).try_region]
        assert clauses == [tree.regions[h].clauses[0] for h in t.handlers]
        assert all(funclets[h].catchswitch == cs.name for h in cs.handlers)
    # layout: root first, each funclet once, clause order, filter right before its handler
    layout = model.layout
    assert layout[0] == 0 and sorted(layout) == list(range(len(funclets)))
    clauses = [funclets[i].clause for i in layout[1:]]
    assert clauses == sorted(clauses)
    for n, i in enumerate(layout):
        if funclets[i].kind is FuncletKind.FILTER:
            assert layout[n + 1] == funclets[i].handler
        if funclets[i].kind is FuncletKind.FILTER_HANDLER:
            assert funclets[layout[n - 1]].kind is FuncletKind.FILTER
    # states: one per handler funclet, numbered in layout order
    handlers = [i for i in layout if funclets[i].kind.is_handler]
    assert [s.funclet for s in model.states] == handlers
    assert all(funclets[s.funclet].state == s.number for s in model.states)
    for s in model.states:
        t = _try_of_state(model, tree, s.number)
        assert [_try_of_state(model, tree, x) for x in s.try_states] == [t] * len(s.try_states)
        if s.enclosing_from != "nothing leaves it":
            outer = _outer_try(tree, t)
            assert (None if s.enclosing == NO_STATE else _try_of_state(model, tree, s.enclosing)) is outer
    # invokes: the state names the innermost try around the IL offset, and the dispatch chain
    # visits exactly the tries around it, innermost first
    reached = set()
    for c in model.invokes:
        assert c.state is not None and c.state != NO_STATE and c.il_offset is not None, c
        chain = model.protecting(c)
        reached.update(s.number for s in chain)
        visited = []
        for s in chain:
            t = _try_of_state(model, tree, s.number)
            if not visited or visited[-1] is not t:
                visited.append(t)
        around = _tries_holding(tree, c.il_offset)
        if chain[-1].enclosing_from == "nothing leaves it":
            around = around[:len(visited)]
        assert visited == around, (c, [t.label for t in visited], [t.label for t in around])
    # every pad is reached by some exception: from an invoke, through the dispatch chain
    assert reached == {s.number for s in model.states}
    # calls outside every try are calls, calls inside a try are invokes
    for c in model.calls:
        assert c.invoke == bool(_tries_holding(tree, c.il_offset)), c
    assert str(model)


# -- every method of the tests/il programs -----------------------------------------------------

@pytest.mark.parametrize("clone", [False, True], ids=["selectors", "clone-finally"])
def test_every_sample_method_agrees_with_its_il(clone):
    eh = 0
    for ref in METHODS:
        m = analyze(ASM.body(ref.rid))
        result = translate(ASM, m, EE, Options(clone_finally=clone))
        model = build_funclet_model(result.module, result.parent, m, table=result.table)
        assert model.verify() == [], (ref.name, [str(f) for f in model.verify()])
        assert_agrees_with_il(model, m)
        if m.body.clauses:
            eh += 1
        else:
            assert len(model.funclets) == 1 and not model.states and not model.invokes
    assert eh >= 60


@pytest.mark.parametrize("clone", [False, True], ids=["selectors", "clone-finally"])
def test_every_handler_funclet_has_its_own_pad_marker(clone):
    """Without pad markers no funclet has one; with them each handler funclet (each copy) carries the pad marker the reader wrote right after its
    pad, numbered 0..n-1 over the method; the root and the filters carry none; and a pad
    marker is no call site."""
    for ref in METHODS:
        m = analyze(ASM.body(ref.rid))
        plain = translate(ASM, m, EE, Options(clone_finally=clone))
        assert all(f.pad_marker is None for f in build_funclet_model(plain.module, plain.parent, m,
                                                                table=plain.table).funclets)
        result = translate(ASM, m, EE, Options(clone_finally=clone, pad_markers=True))
        model = build_funclet_model(result.module, result.parent, m, table=result.table)
        handlers = [f for f in model.funclets if f.kind.is_handler]
        assert sorted(f.pad_marker for f in handlers) == list(range(len(handlers))), ref.name
        assert all(f.pad_marker is None for f in model.funclets if not f.kind.is_handler)
        assert None not in {c.callsite for c in model.calls} and \
            len({c.callsite for c in model.calls}) == len(model.calls), ref.name
        assert all(f"pad marker {f.pad_marker}" in str(model) for f in handlers)


def test_try_in_finally_copies_states_and_layout():
    _, _, model = build("Tests.TryInFinally.Program::Run")
    # clauses: #0 catch and #1 finally inside finally #2, whose try sits in try #3 (catch)
    labels = [model.funclets[i].label for i in model.layout]
    assert labels == ["root", "catch #0 (copy 1/2)", "catch #0 (copy 2/2)", "finally #1 (copy 1/2)",
                      "finally #1 (copy 2/2)", "finally #2", "catch #3"]
    f = {model.funclets[i].label: model.funclets[i] for i in model.layout}
    finally2 = f["finally #2"]
    # the first copy lies in the finally's normal-path code (main body), the second in its funclet
    assert f["catch #0 (copy 1/2)"].parent == 0 and "normal-path copy of finally #2" in f["catch #0 (copy 1/2)"].context
    assert f["catch #0 (copy 2/2)"].parent == finally2.index and finally2.pad in f["catch #0 (copy 2/2)"].context
    assert {c.index for c in model.children(finally2)} == {f["catch #0 (copy 2/2)"].index,
                                                          f["finally #1 (copy 2/2)"].index}
    # states in layout order; the inner copies' handler parent is finally #2's state
    assert [s.number for s in model.states] == [0, 1, 2, 3, 4, 5]
    assert [s.handler_parent for s in model.states] == [NO_STATE, 4, NO_STATE, 4, NO_STATE, NO_STATE]
    assert [s.enclosing for s in model.states] == [5, 5, 5, 5, 5, NO_STATE]
    # an exception at IL_0005 (try #2): finally #2, then catch #3
    first = next(c for c in model.invokes if c.il_offset == 0x05)
    assert [s.clause for s in model.protecting(first)] == [2, 3]
    assert model.try_clauses(model.protecting(first)[0].number) == (2,)


def test_mutual_protection_with_a_filter():
    _, result, model = build("Tests.CatchAndFilter.Program::CatchFilterCatch")
    (cs,) = model.catchswitches
    assert [model.funclets[h].kind for h in cs.handlers] == [FuncletKind.CATCH, FuncletKind.FILTER_HANDLER,
                                                             FuncletKind.CATCH]
    assert [model.funclets[i].kind.value for i in model.layout] == ["root", "catch", "filter", "filter-handler",
                                                                     "catch"]
    filt = next(f for f in model.funclets if f.kind is FuncletKind.FILTER)
    assert filt.function == result.filters[0] and filt.blocks and filt.pad is None
    # one try, three consecutive states; the dispatch tries them in clause order
    assert [s.try_states for s in model.states] == [(0, 1, 2)] * 3
    assert [s.next for s in model.states] == [1, 2, NO_STATE]
    assert all(len(model.protecting(c)) == 3 for c in model.invokes)


# -- hand-made shapes --------------------------------------------------------------------------

SHAPES = """
.assembly extern mscorlib {}
.assembly funclet_shapes {}
.class public auto ansi T extends [mscorlib]System.Object {
  .method public static void G() cil managed { ret }

  // a filter-protected try inside a finally: two copies of the filter handler, one function
  .method public static void FilterInFinally() cil managed {
    .maxstack 2
    A:   call void T::G()
         leave END
    B:   call void T::G()
         leave.s AFTER
    FLT: pop
         ldc.i4.1
         endfilter
    H:   pop
         leave.s AFTER
    AFTER: endfinally
    END: ret
    .try B to FLT filter FLT handler H to AFTER
    .try A to B finally handler B to END
  }

  // a finally that always throws, inside a try/catch: nothing returns from the cleanup,
  // its exception leaves it for the outer catch; with no outer try it goes to the caller
  .method public static void FinallyAlwaysThrows() cil managed {
    .maxstack 2
    A:   call void T::G()
         leave.s D
    F:   newobj instance void [mscorlib]System.Exception::.ctor()
         throw
    C:   pop
         leave.s D
    D:   ret
    .try A to F finally handler F to C
    .try A to C catch [mscorlib]System.Exception handler C to D
  }

  .method public static void FinallyThrowsToCaller() cil managed {
    .maxstack 2
    A:   call void T::G()
         leave.s D
    F:   newobj instance void [mscorlib]System.Exception::.ctor()
         throw
    D:   ret
    .try A to F finally handler F to D
  }
}
"""


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    out = tmp_path_factory.mktemp("shapes")
    src = out / "funclet_shapes.il"
    src.write_text(SHAPES)
    asm = Assembly(assemble(src, out, dll=True))
    return asm, JitEE(asm)


def test_filter_handler_in_a_finally_gets_a_filter_per_copy(shapes):
    m, result, model = build("T::FilterInFinally", *shapes)
    assert model.verify() == [] and assert_agrees_with_il(model, m) is None
    handlers = [f for f in model.funclets if f.kind is FuncletKind.FILTER_HANDLER]
    filters = [f for f in model.funclets if f.kind is FuncletKind.FILTER]
    assert len(handlers) == 2 and len(filters) == 2 and len(result.filters) == 1
    assert {f.function for f in filters} == {result.filters[0]}     # one function, placed per copy
    assert {model.funclets[h.parent].kind for h in handlers} == {FuncletKind.ROOT, FuncletKind.FINALLY}
    labels = [model.funclets[i].label for i in model.layout]
    assert labels == ["root", "filter #0 (copy 1/2)", "filter-handler #0 (copy 1/2)", "filter #0 (copy 2/2)",
                      "filter-handler #0 (copy 2/2)", "finally #1"]


def test_a_cleanup_that_never_returns_encloses_where_its_exception_goes(shapes):
    m, _, model = build("T::FinallyAlwaysThrows", *shapes)
    assert model.verify() == [] and assert_agrees_with_il(model, m) is None
    fin = next(s for s in model.states if s.kind is FuncletKind.FINALLY)
    catch = next(s for s in model.states if s.kind is FuncletKind.CATCH)
    assert (fin.enclosing, fin.enclosing_from) == (catch.number, "unwind-edge")
    m, _, model = build("T::FinallyThrowsToCaller", *shapes)
    assert model.verify() == [] and assert_agrees_with_il(model, m) is None
    (fin,) = model.states
    assert (fin.enclosing, fin.enclosing_from) == (NO_STATE, "nothing leaves it")


# -- verify() catches broken modules -----------------------------------------------------------

def _mutated(name: str, old: str, new: str, **options):
    m, result, _ = build(name, **options)
    assert result.module.count(old) == 1, old
    text = result.module.replace(old, new)
    return build_funclet_model(text, result.parent, m, table=result.table)


def _rules(model):
    return {f.rule for f in model.verify()}


@pytest.mark.parametrize("name, old, new, rule", [
    ("Tests.CatchAndFilter.Program::CatchFilterCatch", "[label %catch0, label %filter-handler1, label %catch2]",
     "[label %catch2, label %catch0, label %filter-handler1]", "handler-order"),
    ("Tests.CatchAndFilter.Program::CatchFilterCatch", "[i32 16777219]", "[i32 16777220]", "funclet-kind"),
    ("Tests.TryInFinally.Program::Run", "%cp5 = cleanuppad within none []", "%cp5 = cleanuppad within none [i32 1]",
     "funclet-kind"),
    ("Tests.TryInFinally.Program::Run", "(ptr %str29) to label %IL_0029.cont.c3 unwind label %dispatch4.c3",
     "(ptr %str29) to label %IL_0029.cont.c3 unwind label %dispatch1", "invoke-state"),
    ("Tests.TryInFinally.Program::Run", "cleanupret from %cp43 unwind label %dispatch1",
     "cleanupret from %cp43 unwind to caller", "state-enclosing"),
    ("Tests.TryInFinally.Program::Run", "%cs20 = catchswitch within %cp5", "%cs20 = catchswitch within none",
     "missing-copy"),
    ("Tests.TryInFinally.Program::Run",
     ('invoke void @"[mscorlib]System.Console::WriteLine(string)"(ptr %str1) to label %IL_0005.cont '
      'unwind label %finally2'),
     'call void @"[mscorlib]System.Console::WriteLine(string)"(ptr %str1)\n  br label %IL_0005.cont',
     "unprotected-call"),
    ("Tests.TryInFinally.Program::Run", "(ptr %str1) to label %IL_0005.cont unwind label %finally2",
     "(ptr %str1) to label %IL_0005.cont unwind label %IL_0068", "invoke-without-state"),
])
def test_verify_finds_a_broken_module(name, old, new, rule):
    model = _mutated(name, old, new)
    assert rule in _rules(model), [str(f) for f in model.verify()]


def test_the_ir_comments_carry_nothing_the_table_carries_it():
    """The reader's IR comments are for people: without them the model is the same. Its IL
    clauses and offsets come from the reader's side table, so a damaged table is caught."""
    name = "Tests.CatchAndFilter.Program::CatchFilterCatch"
    m, result, model = build(name)
    assert model.verify() == []
    bare = "\n".join(line.split("  ; ")[0] if not line.startswith(" ") else line     # a label's comment
                     for line in result.module.split("\n") if not line.lstrip().startswith(";"))
    assert "; IL clause #" in result.module and "; IL clause #" not in bare and "; IL_" not in bare
    assert repr(build_funclet_model(bare, result.parent, m, table=result.table)) == repr(model)
    table = result.table
    catch0 = next(p for p in table.pads if p.clause == 0)

    def damaged(**changes):
        return build_funclet_model(result.module, result.parent, m, table=dataclasses.replace(table, **changes))

    assert {(f.rule, f.where) for f in damaged(pads=tuple(p for p in table.pads if p is not catch0)).verify()} \
        >= {("pad-without-clause", f"block {catch0.block}")}
    swapped = tuple(dataclasses.replace(p, clause=2) if p is catch0 else p for p in table.pads)
    assert "funclet-kind" in _rules(damaged(pads=swapped))
    invoke = next(c for c in table.calls if c.unwind is not None)
    no_offset = damaged(calls=tuple(c for c in table.calls if c is not invoke))
    assert any(f.rule == "invoke-without-il-offset" for f in no_offset.verify())
    # no table at all: no pad has a clause, no call an IL offset
    assert {"pad-without-clause", "invoke-without-il-offset"} <= _rules(build_funclet_model(result.module,
                                                                                          result.parent, m))


def test_verify_finds_missing_repeated_and_shared_pad_markers():
    name = "Tests.TryInFinally.Program::Run"
    _, _, model = build(name, pad_markers=True)
    marker = 'call void asm sideeffect "# llilc.pad 1", ""()'
    assert _rules(model) == set()
    missing = _mutated(name, "\n  " + marker, "", pad_markers=True)
    assert {(f.rule, f.where) for f in missing.verify()} == {
        ("pad-marker", next(f.label for f in model.funclets if f.pad_marker == 1))}
    twice = _mutated(name, marker, marker + "\n  " + marker.replace(" 1\"", " 99\""), pad_markers=True)
    assert "pad-marker" in _rules(twice)
    shared = _mutated(name, marker, marker.replace(" 1\"", " 0\""), pad_markers=True)
    assert [f.rule for f in shared.verify()] == ["pad-marker"] and "all carry pad marker 0" in str(shared.verify()[0])


def test_verify_finds_a_broken_layout_and_tree():
    _, _, model = build("Tests.CatchAndFilter.Program::CatchFilterCatch")
    layout = list(model.layout)
    layout[2], layout[3] = layout[3], layout[2]         # the handler before its filter
    assert "filter-order" in _rules(dataclasses.replace(model, layout=tuple(layout)))
    assert "layout-order" in _rules(dataclasses.replace(model, layout=tuple(reversed(model.layout))))
    funclets = list(model.funclets)
    funclets[1] = dataclasses.replace(funclets[1], parent=3)
    funclets[3] = dataclasses.replace(funclets[3], parent=1)
    assert "parent-chain" in _rules(dataclasses.replace(model, funclets=tuple(funclets)))


def test_unreadable_input_is_a_funclet_error():
    _, result, _ = build("Tests.CatchAndFilter.Program::CatchFilterCatch")
    with pytest.raises(FuncletError) as e:
        build_funclet_model(result.module, '@"no such function"')
    assert e.value.kind == "parent-missing"
    with pytest.raises(FuncletError) as e:
        build_funclet_model("define void @f( {", "@f")
    assert e.value.kind == "llvm-parse"


def test_the_model_without_the_il_is_the_same_model():
    _, result, model = build("Tests.TryInFinally.Program::Run")
    bare = build_funclet_model(result.module, result.parent, table=result.table)
    assert bare.verify() == []
    assert [f.kind for f in bare.funclets] == [f.kind for f in model.funclets]
    assert bare.states == model.states and bare.invokes == model.invokes and bare.layout == model.layout


# -- the corpus --------------------------------------------------------------------------------

CORPUS_ASSEMBLIES = (("Python.Runtime.dll", None), ("System.Private.CoreLib.dll", 300))


def test_corpus_eh_methods_verify_clean_and_agree_with_their_il():
    corpus = Corpus()
    models = seconds = 0.0
    shapes = {"copies": 0, "nested": 0, "filters": 0, "states": 0, "invokes": 0}
    for name, limit in CORPUS_ASSEMBLIES:
        asm = Assembly(corpus.find(name).location)
        ee = JitEE(asm)
        count = 0
        for rid in asm.methods_with_il():
            body = asm.body(rid)
            if not body.has_eh:
                continue
            if limit is not None and count >= limit:
                break
            count += 1
            m = analyze(body)
            result = translate(asm, m, ee)
            t0 = time.perf_counter()
            model = build_funclet_model(result.module, result.parent, m, table=result.table)
            findings = model.verify()
            seconds += time.perf_counter() - t0
            assert findings == [], (m.name, [str(f) for f in findings])
            assert_agrees_with_il(model, m)
            models += 1
            shapes["copies"] += any(f.copies > 1 for f in model.funclets)
            shapes["nested"] += any(f.depth > 1 for f in model.funclets)
            shapes["filters"] += any(f.kind is FuncletKind.FILTER for f in model.funclets)
            shapes["states"] += len(model.states)
            shapes["invokes"] += len(model.invokes)
    assert models >= 600
    assert shapes["copies"] and shapes["nested"] and shapes["filters"]
    print(f"\nfunclet model: {models:.0f} corpus EH methods, build+verify {seconds:.2f} s "
          f"({1000 * seconds / models:.2f} ms per method); {shapes}")
    assert seconds / models < 0.1      # a regression guard, far above the measured few ms
