"""The reader on every method of the tests/il programs: verified, lint-clean, and shaped like the IL.

Each structural assertion is derived from the IL side (the clause table and region tree),
not from the reader's own bookkeeping: a pad per handler with the right kind and class
token, one outlined function per filter, selector cases per distinct leave target,
helper invokes inside tries, funclet bundles on calls in funclets.
"""

from __future__ import annotations

import re

import pytest

from llilc_eh.assembly.body import ClauseKind
from llilc_eh.assembly.loader import Assembly
from llilc_eh.cli import sample_path
from llilc_eh.errors import ReaderError
from llilc_eh.il.method import analyze
from llilc_eh.il.regions import RegionKind
from llilc_eh.reader.jitee import JitEE
from llilc_eh.reader.lint import check_module, lint, verify
from llilc_eh.reader.translate import Options, translate

ASM = Assembly(sample_path())
EE = JitEE(ASM)
METHODS = [ASM.method(rid) for rid in ASM.methods_with_il()]
EH_METHODS = [m for m in METHODS if ASM.body(m.rid).has_eh]


def tr(name: str, **options):
    m = analyze(ASM.body(ASM.find_method(name).rid))
    return m, translate(ASM, m, EE, Options(**options))


@pytest.mark.parametrize("clone", [False, True], ids=["selectors", "clone-finally"])
def test_every_method_translates_verifies_and_lints(clone):
    assert len(METHODS) >= 100 and len(EH_METHODS) >= 60
    for ref in METHODS:
        m = analyze(ASM.body(ref.rid))
        result = translate(ASM, m, EE, Options(clone_finally=clone))
        check_module(result.module, method=str(ref))    # raises on a lint finding or a verifier error


def _pads(text: str) -> dict[int, str]:
    """IL clause index -> the pad instruction emitted for it (first copy)."""
    pads = {}
    for label_clause, pad in re.findall(r"^[\w.-]+:  ; IL clause #(\d+)\n  (%\w+ = \w+pad .*)$", text, re.MULTILINE):
        pads.setdefault(int(label_clause), pad)
    return pads


@pytest.mark.parametrize("ref", EH_METHODS, ids=lambda r: r.name.split(".", 1)[1])
def test_a_pad_of_the_right_kind_per_clause(ref):
    m = analyze(ASM.body(ref.rid))
    result = translate(ASM, m, EE)
    pads = _pads(result.module)
    for c in m.body.clauses:
        if not _can_throw_in(m, c.try_start, c.try_end):
            assert c.index not in pads, "a handler no exception can reach needs no pad (RyuJIT drops it too)"
            continue
        pad = pads[c.index]
        if c.kind is ClauseKind.CATCH:
            token = c.class_token - (1 << 32 if c.class_token >= 1 << 31 else 0)
            assert re.search(rf"catchpad within %cs\d+ \[i32 {token}\]$", pad), pad
        elif c.kind is ClauseKind.FILTER:
            assert re.search(rf'catchpad within %cs\d+ \[i32 0, ptr @".*\$filter{c.index}"\]$', pad), pad
        elif c.kind is ClauseKind.FINALLY:
            assert pad.endswith("[]") and "cleanuppad" in pad
        else:
            assert pad.endswith("[i32 1]") and "cleanuppad" in pad
    filters = [c for c in m.body.clauses if c.kind is ClauseKind.FILTER and _can_throw_in(m, c.try_start, c.try_end)]
    assert len(result.filters) == len(filters)
    for f in result.filters:
        assert re.search(rf"define i32 {re.escape(f)}\(ptr %establisher, ptr %exception\)", result.module)
    # every call or invoke in a funclet carries its bundle; nothing in the parent does
    assert not lint(result.module)


_CHECKED = {"div", "div.un", "rem", "rem.un", "ldfld", "ldflda", "stfld", "ldlen", "ckfinite", "castclass",
            "isinst", "box", "unbox", "unbox.any", "newarr", "ldvirtftn"}


def _can_throw_in(m, start: int, end: int) -> bool:
    """Whether an instruction in [start, end) can raise: a call, a throw, or an implicit check."""
    from llilc_eh.il.opcodes import Flow
    return any(start <= i.offset < end and (
        i.op.flow in (Flow.CALL, Flow.THROW, Flow.RETHROW) or i.op.name in _CHECKED
        or i.op.name.startswith(("ldelem", "stelem", "conv.ovf", "add.ovf", "sub.ovf", "mul.ovf")))
        for i in m.instructions)


def test_selector_cases_one_per_leave_target():
    _, result = tr("Tests.FinallyTwoTargets.Program::TwoTargets")
    assert list(result.selector_cases.values()) == [2]
    assert re.search(r"switch i32 %sel\d+, label %leave[\w.]+ \[i32 1, label %leave[\w.]+\]", result.module)
    _, cloned = tr("Tests.FinallyTwoTargets.Program::TwoTargets", clone_finally=True)
    assert cloned.selector_cases == {} and "switch" not in cloned.module
    # the finally runs once per leave on the normal path: two normal copies instead of one
    assert len(re.findall(r'^IL_0025\.c\d+:', cloned.module, re.MULTILINE)) == 3   # 2 normal + 1 cleanup


def test_leave_through_five_finallys_chains_every_copy():
    m, result = tr("Tests.LeaveFiveFinallys.Program::LeaveAll")
    finallys = [c for c in m.body.clauses if c.kind is ClauseKind.FINALLY]
    assert len(finallys) == 5 and result.cleanuppads == 5
    assert len(result.selector_cases) == 5
    # the innermost finally's normal copy continues to the next finally out: chained, not skipped
    assert len(re.findall(r"store i32 \d+, ptr %sel\d+\.c\d+", result.module)) >= 5


def test_throw_and_implicit_checks_are_helper_invokes_inside_tries():
    _, result = tr(_first_with("throw"))
    assert re.search(r"invoke void @CORINFO_HELP_THROW\(ptr %\w+\)( \[.*\])? to label", result.module)
    _, div = tr(_first_with("div", "Tests.ImplicitExceptions"))
    assert re.search(r"invoke void @CORINFO_HELP_THROWDIVZERO\(\) to label %\w+ unwind label %dispatch", div.module)
    assert "CORINFO_HELP_OVERFLOW" in div.module     # INT_MIN / -1


def test_rethrow_is_a_bundled_call_in_the_catch_funclet():
    ref = _first_with("rethrow")
    _, result = tr(ref)
    assert re.search(r'call void @CORINFO_HELP_RETHROW\(\) \[ "funclet"\(token %cp\d+\) \]', result.module) or \
        re.search(r'invoke void @CORINFO_HELP_RETHROW\(\) \[ "funclet"\(token %cp\d+\) \] to label', result.module)


def test_leaving_nested_catches_is_a_catchret_chain():
    ref = _first_nested_catch()
    _, result = tr(ref)
    assert len(re.findall(r"catchret from %cp\d+ to label", result.module)) >= 2


def test_filters_are_outlined_and_reach_parent_locals():
    _, result = tr(_first_filter_using_locals())
    assert "@llvm.localescape(" in result.module and "@llvm.localrecover(" in result.module
    assert "$psp_slot_offset" in result.module and "$fp_offset" in result.module


_PAD_LINE = re.compile(r"^  %\w+ = (?:catchpad|cleanuppad) .*\n(.*)$", re.MULTILINE)
_PAD_MARKER = re.compile(r'^  call void asm sideeffect "# llilc\.pad (\d+)", ""\(\)$', re.MULTILINE)


@pytest.mark.parametrize("clone", [False, True], ids=["selectors", "clone-finally"])
def test_every_pad_is_followed_by_its_own_pad_marker(clone):
    """With pad markers on, the first thing in every funclet is `# llilc.pad N`, N counting the method's pads from 0
    in the order the module prints them (each copy of a handler's pad gets its own), with no
    funclet bundle (inline asm, as the call-site marker) -- and the lint accepts it."""
    copies = 0
    for ref in EH_METHODS:
        m = analyze(ASM.body(ref.rid))
        assert "llilc.pad" not in translate(ASM, m, EE, Options(clone_finally=clone)).module  # off by default
        result = translate(ASM, m, EE, Options(clone_finally=clone, pad_markers=True))
        after = _PAD_LINE.findall(result.module)
        assert len(after) == result.catchpads + result.cleanuppads, ref.name
        numbers = [int(_PAD_MARKER.fullmatch(line).group(1)) for line in after]
        assert numbers == list(range(len(after))), ref.name
        assert len(_PAD_MARKER.findall(result.module)) == len(after)
        assert not lint(result.module)
        clauses = re.findall(r"^[\w.-]+:  ; IL clause #(\d+)\n  %\w+ = \w+pad ", result.module, re.MULTILINE)
        copies += len(clauses) - len(set(clauses))
    assert copies > 0     # handlers with several pads (copies) have a marker each


def test_cloned_finally_copies_number_their_pads_apart(tmp_path):
    """clone_finally gives each leave its own normal-path copy of a finally, and so each copy of
    a try inside it its own catchpad: every one gets its own pad marker."""
    from llilc_eh.check.toolchain import assemble
    src = tmp_path / "cloned.il"
    src.write_text("""
.assembly extern mscorlib {}
.assembly cloned {}
.class public auto ansi T extends [mscorlib]System.Object {
  .method public static void G() cil managed { ret }
  .method public static void M(bool b) cil managed {
    .maxstack 2
    A:  ldarg.0
        brfalse.s B
        call void T::G()
        leave.s X
    B:  call void T::G()
        leave.s Y
    F:  call void T::G()
        leave.s FE
    FC: pop
        leave.s FE
    FE: endfinally
    X:  ret
    Y:  call void T::G()
        ret
    .try F to FC catch [mscorlib]System.Exception handler FC to FE
    .try A to F finally handler F to X
  }
}
""")
    asm = Assembly(assemble(src, tmp_path, dll=True))
    m = analyze(asm.body(asm.find_method("T::M").rid))
    shared, cloned = (translate(asm, m, options=Options(clone_finally=c, pad_markers=True)) for c in (False, True))
    for result in (shared, cloned):
        after = _PAD_LINE.findall(result.module)
        assert [int(_PAD_MARKER.fullmatch(line).group(1)) for line in after] == \
            list(range(result.catchpads + result.cleanuppads))
        assert not lint(result.module)
    # the catch has a pad in the cleanup funclet and one per normal-path copy of the finally
    assert (shared.catchpads, shared.cleanuppads) == (2, 1)
    assert (cloned.catchpads, cloned.cleanuppads) == (3, 1)


def test_volatile_and_unaligned_prefixes_reach_the_memory_access(tmp_path):
    """`volatile.` makes the one access it prefixes a volatile load/store (a volatile memcpy
    for a value type); `unaligned. N` gives it `align N`; the access after it is plain again."""
    from llilc_eh.check.toolchain import assemble
    src = tmp_path / "prefixes.il"
    src.write_text("""
.assembly extern mscorlib {}
.assembly prefixes {}
.class public sequential ansi sealed V extends [mscorlib]System.ValueType { .field public int64 a .field public int64 b }
.class public auto ansi T extends [mscorlib]System.Object {
  .field public int32 f
  .field public static int16 s
  .method public static int32 M(int32* p, class T t, valuetype V* v) cil managed {
    .maxstack 4
    .locals init (valuetype V w, int32 r)
    .try {
      ldarg.0
      volatile. ldind.i4
      ldarg.0
      ldc.i4.7
      unaligned. 1 stind.i4
      ldarg.1
      volatile. ldfld int32 T::f
      add
      ldarg.1
      ldc.i4.3
      volatile. unaligned. 2 stfld int32 T::f
      ldc.i4.5
      volatile. stsfld int16 T::s
      ldarg.2
      volatile. ldobj V
      stloc.0
      ldarg.0
      ldind.i4
      add
      stloc.1
      leave.s done
    } catch [mscorlib]System.Exception { pop  ldc.i4.m1  stloc.1  leave.s done }
    done: ldloc.1
    ret
  }
  .method public static int32 N(int32* p, valuetype V* v) cil managed {
    .maxstack 2
    ldarg.1  initobj V
    ldarg.0  ldind.i4  ret
  }
}
""")
    asm = Assembly(assemble(src, tmp_path, dll=True))
    result = translate(asm, analyze(asm.body(asm.find_method("T::M").rid)))
    ir = result.module
    assert re.search(r"= load volatile i32, ptr %\S+\n", ir)                 # volatile. ldind.i4
    assert re.search(r"store i32 7, ptr %\S+, align 1\n", ir)                # unaligned. 1 stind.i4
    assert len(re.findall(r"= load volatile i32, ptr ", ir)) == 2             # ... and volatile. ldfld
    assert re.search(r"store volatile i32 3, ptr %\S+, align 2\n", ir)       # volatile. unaligned. 2 stfld
    assert re.search(r"store volatile i16 \S+, ptr ", ir)                    # volatile. stsfld
    assert re.search(r"memcpy\.p0\.p0\.i64\(ptr %\S+, ptr %\S+, i64 16, i1 true\)", ir)  # volatile. ldobj V
    assert len(re.findall(r"= load i32, ptr ", ir)) >= 1                      # the last ldind.i4: plain
    assert not lint(ir)
    verify(ir)
    # an indirect access through a null address raises NullReferenceException (measured on
    # CoreCLR: helpers.IMPLICIT_CHECKS), so initobj and ldind test their address first; both
    # checks (one region) branch to one throw block (Translator.check)
    plain = translate(asm, analyze(asm.body(asm.find_method("T::N").rid))).module
    assert plain.count("icmp eq ptr %") == 2 and plain.count("call void @CORINFO_HELP_THROWNULLREF()") == 1
    verify(plain)


def test_output_is_deterministic():
    for ref in EH_METHODS[:20]:
        m = analyze(ASM.body(ref.rid))
        assert translate(ASM, m, EE).module == translate(ASM, m, JitEE(ASM)).module


def test_unsupported_shape_is_a_named_error(tmp_path):
    from llilc_eh.check.toolchain import assemble
    src = tmp_path / "mixed.il"
    src.write_text("""
.assembly extern mscorlib {}
.assembly mixed {}
.class public auto ansi T extends [mscorlib]System.Object {
  .method public static void M() cil managed {
    .maxstack 2
    A: call void T::M()
       leave.s D
    H1: pop
        leave.s D
    H2: endfinally
    D: ret
    .try A to H1 catch [mscorlib]System.Exception handler H1 to H2
    .try A to H1 finally handler H2 to D
  }
}
""")
    asm = Assembly(assemble(src, tmp_path, dll=True))
    m = analyze(asm.body(asm.find_method("T::M").rid))
    with pytest.raises(ReaderError) as e:
        translate(asm, m)
    assert e.value.kind == "mixed-handlers-on-try" and e.value.offset == 0 and "T::M" in str(e.value)


# -- finding methods by what they contain ------------------------------------------------------

def _first_with(opcode: str, prefix: str = "Tests.") -> str:
    for ref in EH_METHODS:
        if ref.name.startswith(prefix) and any(i.op.name == opcode for i in analyze(ASM.body(ref.rid)).instructions):
            return ref.name
    raise AssertionError(f"no EH method with {opcode} under {prefix}")


def _first_nested_catch() -> str:
    for ref in EH_METHODS:
        tree = analyze(ASM.body(ref.rid)).regions
        for r in tree.regions:
            if r.kind is RegionKind.TRY and tree.enclosing_handler(r) is not None \
                    and tree.enclosing_handler(r).kind is RegionKind.CATCH \
                    and any(tree.regions[h].kind is RegionKind.CATCH for h in r.handlers):
                return ref.name
    raise AssertionError("no catch nested in a catch")


def _first_filter_using_locals() -> str:
    for ref in EH_METHODS:
        m = analyze(ASM.body(ref.rid))
        for r in m.regions.regions:
            if r.kind is RegionKind.FILTER and any(
                    i.op.name.startswith(("ldloc", "stloc", "ldarg", "starg")) and r.contains(i.offset)
                    for i in m.instructions):
                return ref.name
    raise AssertionError("no filter that touches locals or arguments")
