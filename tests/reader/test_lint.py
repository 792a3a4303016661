"""The funclet lint: legal modules are clean, each rule finds its violation, and LLVM really
punishes what the lint reports.

Every module here is hand-written IR in the reader's shape (triple x86_64-pc-windows-msvc,
personality ProcessCLRException, catchswitch/catchpad for catch, cleanuppad for finally and
fault, a filter's catchpad naming its outlined filter). Legal modules must lint clean, pass
LLVM's verifier and compile. Each violating module breaks one rule; the test pins the exact
set of rules that fire (a violation may imply another, e.g. a catchret into the main body from
a nested catch also puts a block in two funclets) and whether LLVM's verifier notices — where
it does not, only the lint stands between the reader and silently wrong code.

The last tests compile modules with LLVM 22 for x86_64-pc-windows-msvc and read the assembly:
an unbundled call in a funclet (or one whose bundle names the enclosing funclet) is deleted
together with the rest of its block, which ends in `int3`; a `ret` in a funclet deletes the
funclet's body; a non-constant catchpad argument aborts the process (in a subprocess here).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap

import llvmlite.binding as llvm
import pytest

from llilc_eh.errors import ReaderError
from llilc_eh.reader.helpers import HELPERS
from llilc_eh.reader.lint import RULES, LintFinding, _functions, check_module, lint, verify
from llilc_eh.reader.sidetable import CallEntry, PadEntry, ReaderTable

TRIPLE = "x86_64-pc-windows-msvc"

HEADER = f"""target triple = "{TRIPLE}"
declare i32 @ProcessCLRException(...)
declare void @f(i32)
declare void @g()
declare ptr @llvm.eh.exceptionpointer.p0(token)
declare {{i32, i1}} @llvm.sadd.with.overflow.i32(i32, i32)
{HELPERS["CORINFO_HELP_THROWNULLREF"].declaration}
{HELPERS["CORINFO_HELP_OVERFLOW"].declaration}
{HELPERS["CORINFO_HELP_THROW"].declaration}
"""


def module(body: str, extra: str = "", name: str = "m") -> str:
    """A module with one EH function `@name(i32 %x)` whose blocks are `body`."""
    body = textwrap.dedent(body).strip("\n")
    return (HEADER + extra + f"\ndefine i32 @{name}(i32 %x) personality ptr @ProcessCLRException {{\n"
            + body + "\n}\n")


# --------------------------------------------------------------------------------------------
# Legal modules

LEGAL = {
    # try { g() } catch A { f(1) } catch B { store exception } ; both continue in the main body
    "catch": module("""
        entry:
          %slot = alloca ptr
          %xs = alloca i32
          store i32 %x, ptr %xs
          invoke void @g() to label %done unwind label %cs
        done:
          %v = load i32, ptr %xs
          ret i32 %v
        cs:
          %sw = catchswitch within none [label %h1, label %h2] unwind to caller
        h1:
          %p1 = catchpad within %sw [i32 16777217]
          %a = load i32, ptr %xs
          call void @f(i32 %a) [ "funclet"(token %p1) ]
          catchret from %p1 to label %done
        h2:
          %p2 = catchpad within %sw [i32 16777218]
          %e = call ptr @llvm.eh.exceptionpointer.p0(token %p2)
          store ptr %e, ptr %slot
          catchret from %p2 to label %after
        after:
          ret i32 -1
        """),
    # try { g() } finally { f(0) }: the normal path runs a copy chosen by a continuation selector
    "finally-with-selector": module("""
        entry:
          %sel = alloca i32
          store i32 1, ptr %sel
          invoke void @g() to label %leave unwind label %fin
        leave:
          call void @f(i32 0)
          %s = load i32, ptr %sel
          switch i32 %s, label %bad [
            i32 0, label %t0
            i32 1, label %t1
          ]
        t0:
          br label %join
        t1:
          br label %join
        join:
          %r = phi i32 [ 0, %t0 ], [ %s, %t1 ]
          ret i32 %r
        bad:
          unreachable
        fin:
          %c = cleanuppad within none []
          call void @f(i32 0) [ "funclet"(token %c) ]
          cleanupret from %c unwind to caller
        """),
    # try { try { g() } fault { f(2) } } catch { }: the fault unwinds to the outer dispatch
    "fault-in-try": module("""
        entry:
          invoke void @g() to label %done unwind label %fault
        done:
          ret i32 0
        fault:
          %c = cleanuppad within none [i32 1]
          invoke void @f(i32 2) [ "funclet"(token %c) ] to label %fault.end unwind label %cs
        fault.end:
          cleanupret from %c unwind label %cs
        cs:
          %sw = catchswitch within none [label %h] unwind to caller
        h:
          %p = catchpad within %sw [i32 16777217]
          catchret from %p to label %done
        """),
    # try { g() } catch { try { g() } catch { } f(3) }: the inner catchret continues in the outer catch
    "catch-in-catch": module("""
        entry:
          invoke void @g() to label %done unwind label %cs
        done:
          ret i32 0
        cs:
          %sw = catchswitch within none [label %h1] unwind to caller
        h1:
          %p1 = catchpad within %sw [i32 16777217]
          invoke void @g() [ "funclet"(token %p1) ] to label %h1.cont unwind label %cs2
        h1.cont:
          call void @f(i32 3) [ "funclet"(token %p1) ]
          catchret from %p1 to label %done
        cs2:
          %sw2 = catchswitch within %p1 [label %h2] unwind to caller
        h2:
          %p2 = catchpad within %sw2 [i32 16777218]
          catchret from %p2 to label %h1.cont
        """),
    # try { g() } finally { try { g() } catch { } }
    "try-in-finally": module("""
        entry:
          invoke void @g() to label %done unwind label %fin
        done:
          ret i32 0
        fin:
          %c = cleanuppad within none []
          invoke void @g() [ "funclet"(token %c) ] to label %fin.end unwind label %cs
        fin.end:
          cleanupret from %c unwind to caller
        cs:
          %sw = catchswitch within %c [label %h] unwind to caller
        h:
          %p = catchpad within %sw [i32 16777217]
          catchret from %p to label %fin.end
        """),
    # try { g() } filter { @filter } { handler }: marker 0 and the outlined filter function
    "filter": module("""
        entry:
          invoke void @g() to label %done unwind label %cs
        done:
          ret i32 0
        cs:
          %sw = catchswitch within none [label %h] unwind to caller
        h:
          %p = catchpad within %sw [i32 0, ptr @m.filter0]
          %e = call ptr @llvm.eh.exceptionpointer.p0(token %p)
          catchret from %p to label %done
        """, extra="define i32 @m.filter0(ptr %establisher, ptr %exception) {\n  ret i32 1\n}\n"),
    # explicit implicit checks: a null check invoking its throw helper under a try, and an
    # add.ovf in a catch funclet (the intrinsic needs no bundle: nounwind) calling its helper
    "implicit-checks": module("""
        entry:
          %xs = alloca i32
          store i32 %x, ptr %xs
          %obj = inttoptr i32 %x to ptr
          %isnull = icmp eq ptr %obj, null
          br i1 %isnull, label %nullref, label %ok
        nullref:
          invoke void @CORINFO_HELP_THROWNULLREF() to label %unreachable unwind label %cs
        unreachable:
          unreachable
        ok:
          ret i32 0
        cs:
          %sw = catchswitch within none [label %h] unwind to caller
        h:
          %p = catchpad within %sw [i32 16777217]
          %a = load i32, ptr %xs
          %r = call {i32, i1} @llvm.sadd.with.overflow.i32(i32 %a, i32 1)
          %o = extractvalue {i32, i1} %r, 1
          br i1 %o, label %ovf, label %h.ok
        ovf:
          call void @CORINFO_HELP_OVERFLOW() [ "funclet"(token %p) ]
          unreachable
        h.ok:
          %sum = extractvalue {i32, i1} %r, 0
          store i32 %sum, ptr %xs
          catchret from %p to label %ok
        """),
    # the "catch" shape with numbered (unnamed) values and blocks
    "numbered": HEADER + textwrap.dedent("""
        define i32 @m(i32 %0) personality ptr @ProcessCLRException {
          %2 = alloca i32
          invoke void @g() to label %3 unwind label %4
        3:
          ret i32 0
        4:
          %5 = catchswitch within none [label %6] unwind to caller
        6:
          %7 = catchpad within %5 [i32 16777217]
          %8 = load i32, ptr %2
          call void @f(i32 %8) [ "funclet"(token %7) ]
          catchret from %7 to label %3
        }
        """),
}


@pytest.mark.parametrize("name", sorted(LEGAL))
def test_legal_module_is_clean_verified_and_compiles(name):
    text = LEGAL[name]
    assert lint(text) == []
    verify(text)
    check_module(text)
    for opt in (0, 2):
        assert "ProcessCLRException" in _assembly(text, opt)


# --------------------------------------------------------------------------------------------
# One violation per rule: (rule, module, LLVM's verifier accepts it, every rule that fires,
# a piece of the offending instruction, the block named)

VIOLATIONS = {
    "missing-funclet-bundle": (module("""
        entry:
          invoke void @g() to label %done unwind label %cs
        done:
          ret i32 0
        cs:
          %sw = catchswitch within none [label %h] unwind to caller
        h:
          %p = catchpad within %sw [i32 16777217]
          call void @f(i32 1)
          catchret from %p to label %done
        """), True, {"missing-funclet-bundle"}, "call void @f(i32 1)", "%h"),
    # the bundle names the enclosing catch's pad: verified, and silently deleted
    "wrong-funclet-bundle": (module("""
        entry:
          invoke void @g() to label %done unwind label %cs
        done:
          ret i32 0
        cs:
          %sw = catchswitch within none [label %h1] unwind to caller
        h1:
          %p1 = catchpad within %sw [i32 16777217]
          invoke void @g() [ "funclet"(token %p1) ] to label %h1.cont unwind label %cs2
        h1.cont:
          catchret from %p1 to label %done
        cs2:
          %sw2 = catchswitch within %p1 [label %h2] unwind to caller
        h2:
          %p2 = catchpad within %sw2 [i32 16777218]
          call void @f(i32 7) [ "funclet"(token %p1) ]
          catchret from %p2 to label %h1.cont
        """), True, {"wrong-funclet-bundle"}, '@f(i32 7) [ "funclet"(token %p1) ]', "%h2"),
    "ret-in-funclet": (module("""
        entry:
          invoke void @g() to label %done unwind label %cs
        done:
          ret i32 0
        cs:
          %sw = catchswitch within none [label %h] unwind to caller
        h:
          %p = catchpad within %sw [i32 16777217]
          ret i32 1
        """), True, {"ret-in-funclet"}, "ret i32 1", "%h"),
    # the inner catch leaves with the outer catch's token
    "funclet-exit-pad": (module("""
        entry:
          invoke void @g() to label %done unwind label %cs
        done:
          ret i32 0
        cs:
          %sw = catchswitch within none [label %h1] unwind to caller
        h1:
          %p1 = catchpad within %sw [i32 16777217]
          invoke void @g() [ "funclet"(token %p1) ] to label %h1.cont unwind label %cs2
        h1.cont:
          catchret from %p1 to label %done
        cs2:
          %sw2 = catchswitch within %p1 [label %h2] unwind to caller
        h2:
          %p2 = catchpad within %sw2 [i32 16777218]
          catchret from %p1 to label %done
        """), True, {"funclet-exit-pad"}, "catchret from %p1 to label %done", "%h2"),
    # a constant i32 is required; here a constant i64 (the verifier is silent, codegen misreads)
    "catchpad-arg0-not-constant-i32": (module("""
        entry:
          invoke void @g() to label %done unwind label %cs
        done:
          ret i32 0
        cs:
          %sw = catchswitch within none [label %h] unwind to caller
        h:
          %p = catchpad within %sw [i64 16777217]
          catchret from %p to label %done
        """), True, {"catchpad-arg0-not-constant-i32"}, "catchpad within %sw [i64 16777217]", "%h"),
    # a nested catch's catchret jumps straight into the main body (over the outer catch)
    "catchret-target": (module("""
        entry:
          invoke void @g() to label %done unwind label %cs
        done:
          ret i32 0
        cs:
          %sw = catchswitch within none [label %h1] unwind to caller
        h1:
          %p1 = catchpad within %sw [i32 16777217]
          invoke void @g() [ "funclet"(token %p1) ] to label %h1.cont unwind label %cs2
        h1.cont:
          catchret from %p1 to label %done
        cs2:
          %sw2 = catchswitch within %p1 [label %h2] unwind to caller
        h2:
          %p2 = catchpad within %sw2 [i32 16777218]
          catchret from %p2 to label %done
        """), True, {"catchret-target", "block-in-two-funclets", "ret-in-funclet"},
        "catchret from %p2 to label %done", "%h2"),
    # a cleanup unwinds into a dispatch nested in itself (LLVM's verifier catches this one)
    "cleanupret-unwind": (module("""
        entry:
          invoke void @g() to label %done unwind label %fin
        done:
          ret i32 0
        fin:
          %c = cleanuppad within none []
          cleanupret from %c unwind label %cs
        cs:
          %sw = catchswitch within %c [label %h] unwind to caller
        h:
          %p = catchpad within %sw [i32 16777217]
          catchret from %p to label %after
        after:
          unreachable
        """), False, {"cleanupret-unwind"}, "cleanupret from %c unwind label %cs", "%fin"),
    "cross-funclet-value": (module("""
        entry:
          %v = add i32 %x, 1
          invoke void @g() to label %done unwind label %cs
        done:
          ret i32 0
        cs:
          %sw = catchswitch within none [label %h] unwind to caller
        h:
          %p = catchpad within %sw [i32 16777217]
          call void @f(i32 %v) [ "funclet"(token %p) ]
          catchret from %p to label %done
        """), True, {"cross-funclet-value"}, 'call void @f(i32 %v) [ "funclet"(token %p) ]', "%h"),
    "block-in-two-funclets": (module("""
        entry:
          invoke void @g() to label %done unwind label %cs
        done:
          ret i32 0
        cs:
          %sw = catchswitch within none [label %h1, label %h2] unwind to caller
        h1:
          %p1 = catchpad within %sw [i32 16777217]
          br label %common
        h2:
          %p2 = catchpad within %sw [i32 16777218]
          br label %common
        common:
          unreachable
        """), True, {"block-in-two-funclets"}, "unreachable", "%common"),
    # the table says the invoke unwinds to %done: the IR's goes to %cs (TABLES)
    "reader-table": (module("""
        entry:
          call void asm sideeffect "# llilc.callsite 0", ""()
          invoke void @g() to label %done unwind label %cs
        done:
          ret i32 0
        cs:
          %sw = catchswitch within none [label %h] unwind to caller
        h:
          %p = catchpad within %sw [i32 16777217]
          catchret from %p to label %done
        """), True, {"reader-table"}, "invoke void @g()", "%entry"),
}


# The reader's side table the violating module of a rule is linted with (rule reader-table:
# the IR and the table disagree; the rest are linted without a table)
TABLES = {
    "reader-table": ReaderTable("@m", pads=(PadEntry("%p", "%h", "catch", 0, 0),),
                                calls=(CallEntry("@m", 0, "%entry", 0, "@g", "%done", None),)),
}


def test_every_rule_has_a_violating_module():
    assert set(VIOLATIONS) == set(RULES)


@pytest.mark.parametrize("rule", RULES)
def test_violation_is_found(rule):
    text, verifier_accepts, fired, instruction, block = VIOLATIONS[rule]
    findings = lint(text, TABLES.get(rule))
    assert {f.rule for f in findings} == fired
    mine = [f for f in findings if f.rule == rule]
    assert mine and all(isinstance(f, LintFinding) for f in mine)
    assert any(f.function == "m" and f.block == block and instruction in f.instruction for f in mine), mine
    assert all(f"@m, block {f.block}" in str(f) and f.instruction in str(f) for f in mine)
    if verifier_accepts:
        verify(text)
    else:
        with pytest.raises(ReaderError) as e:
            verify(text)
        assert e.value.kind == "llvm-verify"
    with pytest.raises(ReaderError) as e:
        check_module(text, method="Ns.T::M", table=TABLES.get(rule))
    assert e.value.kind == "funclet-lint" and rule in str(e.value) and "Ns.T::M" in str(e.value)


def test_more_violations_of_a_rule():
    base = VIOLATIONS["catchpad-arg0-not-constant-i32"][0]
    no_args = base.replace("[i64 16777217]", "[]")
    not_constant = base.replace("[i64 16777217]", "[i32 %x]")
    assert [f.rule for f in lint(no_args)] == ["catchpad-arg0-not-constant-i32"]
    # %x is an argument: using it in the funclet is also a cross-funclet value
    assert sorted(f.rule for f in lint(not_constant)) == ["catchpad-arg0-not-constant-i32", "cross-funclet-value"]
    # a funclet bundle in the main body (LLVM's verifier rejects `token none` there)
    in_main = LEGAL["catch"].replace('@f(i32 %a) [ "funclet"(token %p1) ]', "@f(i32 %a)").replace(
        "  ret i32 %v", '  call void @g() [ "funclet"(token none) ]\n  ret i32 %v')
    assert sorted(f.rule for f in lint(in_main)) == ["missing-funclet-bundle", "wrong-funclet-bundle"]
    # a value made in a catch funclet and used after its catchret, in the main body
    escaped = VIOLATIONS["cross-funclet-value"][0].replace(
        "  %v = add i32 %x, 1\n", "").replace("call void @f(i32 %v)", "%v = call i32 @h() ").replace(
        "declare void @g()", "declare void @g()\ndeclare i32 @h()").replace(
        "done:\n  ret i32 0", "done:\n  ret i32 0\nafter:\n  ret i32 %v").replace(
        "catchret from %p to label %done", "catchret from %p to label %after")
    findings = lint(escaped)
    assert [(f.rule, f.block) for f in findings] == [("cross-funclet-value", "%after")]
    verify(escaped)


def test_numbered_values_are_named_as_llvm_prints_them():
    text = LEGAL["numbered"].replace('call void @f(i32 %8) [ "funclet"(token %7) ]', "call void @f(i32 %8)")
    [finding] = lint(text)
    assert (finding.rule, finding.block, finding.instruction) == ("missing-funclet-bundle", "%6", "call void @f(i32 %8)")
    assert "funclet %7" in finding.detail


def test_unreachable_blocks_are_not_judged():
    # WinEHPrepare deletes unreachable blocks before it colors
    text = LEGAL["catch"].replace("after:\n  ret i32 -1", "after:\n  ret i32 -1\ndead:\n  call void @f(i32 9) [ \"funclet\"(token none) ]\n  ret i32 0")
    assert lint(text) == []


# quoted names (a value, a block, a callee) and a string holding `%` and `label %x`: the names
# the lint reads must be the quoted ones, nothing inside the string
QUOTED = module("""
    entry:
      %"v x" = add i32 %x, 1
      invoke void @"g q"() to label %"done label" unwind label %cs
    "done label":
      ret i32 0
    cs:
      %sw = catchswitch within none [label %h] unwind to caller
    h:
      %p = catchpad within %sw [i32 16777217]
      call void asm sideeffect "# 100% label %x", ""() [ "funclet"(token %p) ]
      call void @f(i32 %"v x") [ "funclet"(token %p) ]
      catchret from %p to label %"done label"
    """, extra='declare void @"g q"()\n')


def test_quoted_names_and_strings():
    [finding] = lint(QUOTED)
    assert (finding.rule, finding.block, finding.instruction) == (
        "cross-funclet-value", "%h", 'call void @f(i32 %"v x") [ "funclet"(token %p) ]')
    assert finding.detail == 'value %"v x" is defined in the main body and used in funclet %p'
    [f] = _functions(str(llvm.parse_assembly(QUOTED)))
    assert [b.label for b in f.blocks] == ["%entry", '%"done label"', "%cs", "%h"]
    assert [b.label for b in f.blocks[0].successors] == ['%"done label"', "%cs"]
    asm = f.blocks[3].insts[1]
    assert asm.labels == [] and asm.values == ["%p"]


def test_reading_collapses_whitespace_llvm_does_not_print():
    # LLVM prints single spaces, which the lint reads as they are; any other whitespace is
    # collapsed, as if LLVM had printed it
    text = LEGAL["catch"].replace("store i32 %x, ptr %xs", "store  i32 %x,\tptr %xs ")
    [f] = _functions(text)
    store = next(inst for block in f.blocks for inst in block.insts if inst.opcode == "store")
    assert (store.text, store.body, store.values) == ("store i32 %x, ptr %xs",) * 2 + (["%x", "%xs"],)
    assert lint(text) == []


def test_parse_and_verify_errors_are_reader_errors():
    with pytest.raises(ReaderError) as e:
        lint("define void @broken( {")
    assert e.value.kind == "llvm-parse" and e.value.stage == "reader"
    with pytest.raises(ReaderError) as e:
        verify(f'target triple = "{TRIPLE}"\ndefine i32 @m() {{\n  ret void\n}}\n')
    assert e.value.kind == "llvm-parse"
    with pytest.raises(ReaderError) as e:
        verify(VIOLATIONS["cleanupret-unwind"][0])
    assert e.value.kind == "llvm-verify" and "cleanupret must exit its cleanup" in str(e.value)


def _ffi_name(operand) -> str:
    """The printed name of an instruction or argument operand, read through llvmlite."""
    if operand.name:
        return "%" + operand.name
    text = str(operand).strip()
    return text.split(" = ")[0] if " = " in text else text.split()[-1]


def test_reading_llvms_print_agrees_with_llvmlites_value_api():
    # the lint reads LLVM's print; llvmlite's ValueRefs (slow, but LLVM's own answer) must agree
    texts = [*LEGAL.values(), *(v[0] for v in VIOLATIONS.values()), MARKERS]
    for text in texts:
        parsed = llvm.parse_assembly(text)
        read = {f.name: f for f in _functions(str(parsed))}
        for fn in parsed.functions:
            if fn.is_declaration:
                continue
            blocks = read[fn.name].blocks
            assert len(blocks) == len(list(fn.blocks))
            for block, ref in zip(blocks, fn.blocks):
                insts = list(ref.instructions)
                assert [i.opcode for i in block.insts] == [i.opcode for i in insts]
                for inst, iref in zip(block.insts, insts):
                    operands = list(iref.operands)
                    kinds = [op.value_kind for op in operands]
                    assert len(inst.labels) == kinds.count(llvm.ValueKind.basic_block), inst.text
                    values = sorted(_ffi_name(op) for op, k in zip(operands, kinds)
                                    if k in (llvm.ValueKind.argument, llvm.ValueKind.instruction))
                    assert sorted(inst.values) == values, inst.text


# --------------------------------------------------------------------------------------------
# What LLVM 22 does with what the lint reports


def _assembly(text: str, opt: int) -> str:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    machine = llvm.Target.from_triple(TRIPLE).create_target_machine(opt=opt, codemodel="small")
    return machine.emit_assembly(llvm.parse_assembly(text))


def _funclet_code(asm: str, index: int) -> list[str]:
    """The instructions of the `index`-th funclet (``?catch$N@...`` label) up to the next section."""
    lines = asm.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith('"?catch$') and line.endswith(":")]
    code = []
    for line in lines[starts[index] + 1:]:
        s = line.strip()
        if s.startswith((".section", ".def")) or s.startswith('"?'):
            break
        if s and not s.startswith((".", "#")) and not s.endswith(":"):
            code.append(s)
    return code


MARKERS = module("""
    entry:
      invoke void @g() to label %done unwind label %cs
    done:
      ret i32 0
    cs:
      %sw = catchswitch within none [label %h] unwind to caller
    h:
      %p = catchpad within %sw [i32 16777217]
      call void @f(i32 1) [ "funclet"(token %p) ]
      call void @f(i32 2) [ "funclet"(token %p) ]
      call void @f(i32 3) [ "funclet"(token %p) ]
      catchret from %p to label %after
    after:
      ret i32 7
    """)


@pytest.mark.parametrize("opt", [0, 2])
def test_llvm_deletes_an_unbundled_funclet_call_and_the_rest_of_its_block(opt):
    bundled = _funclet_code(_assembly(MARKERS, opt), 0)
    assert "$7" in _assembly(MARKERS, opt).split('"?catch$')[0]        # the continuation returns 7
    assert sum("movl\t$1, %ecx" in s or "movl $1, %ecx" in s for s in bundled) == 1
    assert any("$3" in s for s in bundled) and any("leaq" in s and "%rip" in s for s in bundled)  # catchret

    unbundled = MARKERS.replace('call void @f(i32 2) [ "funclet"(token %p) ]', "call void @f(i32 2)")
    verify(unbundled)                       # LLVM's verifier has no objection
    assert [f.rule for f in lint(unbundled)] == ["missing-funclet-bundle"]
    code = _funclet_code(_assembly(unbundled, opt), 0)
    assert any("$1" in s for s in code)     # the call before it survives
    assert not any("$2" in s or "$3" in s for s in code)        # it and everything after: gone
    assert not any("leaq" in s and "%rip" in s for s in code)   # the catchret too
    assert code[-1] == "int3"               # `unreachable`, trapped (TrapUnreachable on Windows)
    assert "$7" not in _assembly(unbundled, opt).split('"?catch$')[0]  # the continuation is dead


def test_llvm_keeps_unbundled_nounwind_intrinsics_and_inline_asm():
    # the lint's two exemptions, as LLVM 22 applies them
    code = _funclet_code(_assembly(LEGAL["implicit-checks"], 0), 0)
    assert any("CORINFO_HELP_OVERFLOW" in s for s in code)   # after llvm.sadd.with.overflow
    llvm.initialize_native_asmparser()      # without it, inline asm is a fatal error (abort)
    text = MARKERS.replace('call void @f(i32 2) [ "funclet"(token %p) ]', 'call void asm sideeffect "int $$42", ""()')
    assert lint(text) == []
    code = _funclet_code(_assembly(text, 0), 0)
    assert "int\t$42" in code and any("$3" in s for s in code)


def test_llvm_deletes_a_call_whose_bundle_names_the_enclosing_funclet():
    text = VIOLATIONS["wrong-funclet-bundle"][0]
    asm = _assembly(text, 0)
    assert "$7" not in asm and "callq\tf" not in asm


def test_llvm_deletes_the_body_of_a_funclet_that_returns():
    code = _funclet_code(_assembly(VIOLATIONS["ret-in-funclet"][0], 0), 0)
    # only the funclet prolog is left (establisher frame, PSPSym): no ret, no trap, no epilog
    assert not any(s.startswith(("retq", "int3", "popq")) for s in code)
    assert code[0].startswith("pushq")


def test_llvm_aborts_the_process_on_a_non_constant_catchpad_argument():
    text = VIOLATIONS["catchpad-arg0-not-constant-i32"][0].replace("[i64 16777217]", "[i32 %x]")
    verify(text)                            # the verifier accepts it
    program = textwrap.dedent(f"""
        import llvmlite.binding as llvm
        llvm.initialize_all_targets(); llvm.initialize_all_asmprinters()
        m = llvm.parse_assembly({text!r})
        llvm.Target.from_triple({TRIPLE!r}).create_target_machine().emit_assembly(m)
        """)
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "cast<Ty>() argument of incompatible type" in proc.stderr


# --------------------------------------------------------------------------------------------
# The reader's side table (rule reader-table) on real reader output

def _sample_run(name: str = "Tests.TryInFinally.Program::Run", **options):
    from llilc_eh.assembly.loader import Assembly
    from llilc_eh.cli import sample_path
    from llilc_eh.il.method import analyze
    from llilc_eh.reader.jitee import JitEE
    from llilc_eh.reader.translate import Options, translate
    asm = Assembly(sample_path())
    return translate(asm, analyze(asm.body(asm.find_method(name).rid)), JitEE(asm), Options(**options))


def _table_findings(text: str, table: ReaderTable) -> list[str]:
    findings = lint(text, table)
    assert {f.rule for f in findings} == {"reader-table"}, [str(f) for f in findings]
    return [f.detail for f in findings]


def test_the_readers_table_describes_its_module():
    """Every method of the sample, with selectors, cloned finallys and pad markers: the
    reader's table and its module agree; the same module with another method's table does not."""
    from llilc_eh.assembly.loader import Assembly
    from llilc_eh.cli import sample_path
    from llilc_eh.il.method import analyze
    from llilc_eh.reader.jitee import JitEE
    from llilc_eh.reader.translate import Options, translate
    asm = Assembly(sample_path())
    ee = JitEE(asm)
    results = []
    for options in (Options(), Options(clone_finally=True, pad_markers=True)):
        for rid in asm.methods_with_il():
            m = analyze(asm.body(rid))
            if m.body.clauses:
                r = translate(asm, m, ee, options)
                assert lint(r.module, r.table) == [], m.name
                results.append(r)
    assert len(results) >= 120 and sum(len(r.table.pads) for r in results) > 200
    a, b = results[0], results[1]
    assert lint(a.module, dataclasses.replace(b.table, parent=a.parent))     # negative control


def test_a_damaged_table_is_a_finding():
    r = _sample_run()
    table, text = r.table, r.module
    pad = table.pads[1]                             # the finally's pad
    call = next(c for c in table.calls if c.callsite == 18)     # an invoke in a normal-path finally copy
    assert (pad.kind, call.unwind, call.funclet) == ("finally", "%dispatch4.c3", None)

    def pads(new):
        return dataclasses.replace(table, pads=tuple(new(p) if p is pad else p for p in table.pads))

    def calls(new):
        return dataclasses.replace(table, calls=tuple(new(c) if c is call else c for c in table.calls))

    assert _table_findings(text, dataclasses.replace(table, pads=table.pads[:1] + table.pads[2:])) == [
        "pad %cp5 has no entry in the reader's table"]
    assert _table_findings(text, pads(lambda p: dataclasses.replace(p, block="%catch3"))) == [
        "the table puts %cp5 in block %catch3"]
    assert _table_findings(text, pads(lambda p: dataclasses.replace(p, kind="fault"))) == [
        "the table says %cp5 is a fault pad, the IR a finally"]
    assert _table_findings(text, pads(lambda p: dataclasses.replace(p, name="%cp99"))) == [
        "pad %cp5 has no entry in the reader's table", "the table's finally pad %cp99 is not in the module"]
    assert _table_findings(text, calls(lambda c: dataclasses.replace(c, callsite=99))) == [
        "call-site marker 18 has no entry in the reader's table",
        '''the table's call site 99 (of @"[mscorlib]System.Console::WriteLine(string)") is not in the module''']
    assert _table_findings(text, calls(lambda c: dataclasses.replace(c, block="%IL_0000"))) == [
        "the table puts call site 18 in block %IL_0000"]
    assert _table_findings(text, calls(lambda c: dataclasses.replace(c, callee="@g"))) == [
        '''call site 18 calls @"[mscorlib]System.Console::WriteLine(string)", the table says @g''']
    assert _table_findings(text, calls(lambda c: dataclasses.replace(c, unwind=None))) == [
        "call site 18 unwinds to %dispatch4.c3, the table says the caller (a call)"]
    assert _table_findings(text, calls(lambda c: dataclasses.replace(c, funclet="%cp23"))) == [
        "call site 18 has the funclet bundle of the main body, the table says %cp23"]


def test_ir_that_leaves_its_table_is_a_finding():
    r = _sample_run()
    text, marker = r.module, 'call void asm sideeffect "# llilc.callsite 18", ""()'
    assert text.count(marker) == 1
    # the invoke of call site 18 unwinds elsewhere (the verifier accepts it: test_model's invoke-state)
    moved = text.replace("to label %IL_0029.cont.c3 unwind label %dispatch4.c3",
                         "to label %IL_0029.cont.c3 unwind label %dispatch1")
    verify(moved)
    assert _table_findings(moved, r.table) == ["call site 18 unwinds to %dispatch1, the table says %dispatch4.c3"]
    assert _table_findings(text.replace(marker, marker + "\n  " + marker), r.table) == [
        "call-site marker 18 is not followed by its call", "call-site marker 18 appears twice"]
    gone = _table_findings(text.replace("\n  " + marker, ""), r.table)
    assert gone == ['''the table's call site 18 (of @"[mscorlib]System.Console::WriteLine(string)") is not in the module''']
