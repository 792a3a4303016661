"""Recovery of functions, funclets, unwind data, labels and call sites from the object and
LLVM's assembly text, over every sample method at O0 and O2; unwind data against
`llvm-readobj --unwind`."""

from __future__ import annotations

import collections
import re

import pytest
from conftest import OPT_LEVELS, parse_readobj_unwind, readobj_address, run_readobj

from llilc_eh.backend.codegen import object_symbol
from llilc_eh.backend.recover import FUNCLET_NAME, recover
from llilc_eh.errors import BackendError
from llilc_eh.unwind import encode_unwind_info

_INVOKE = re.compile(r"^\s*(?:%\S+ = )?invoke ", re.MULTILINE)
_CALLEE = re.compile(r'(?:call|invoke) [^@(]*?(@"(?:[^"\\]|\\.)*"|@[\w.$]+)\(')


def ir_callees(module: str) -> collections.Counter:
    """Direct callees of calls and invokes in the IR, intrinsics aside, as object symbols."""
    return collections.Counter(object_symbol(c) for c in _CALLEE.findall(module)
                               if not c.startswith("@llvm."))


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_every_sample_object_is_recovered(sample_compiled, opt):
    for m in sample_compiled[opt]:
        code = m.recovered
        coff = m.coff
        functions = {s.name for s in coff.functions_in(".text")}
        assert {f.name for f in code.functions} == functions
        parent = code.function(m.parent)
        assert parent.start == 0 and parent.kind == "function" and parent.parent is None
        # Every funclet symbol has a .pdata entry; its UNWIND_INFO decodes and re-encodes.
        for f in code.functions:
            if FUNCLET_NAME.fullmatch(f.name):
                assert f.is_funclet and f.parent == m.parent, f.name
                assert f.unwind_offset is not None, f"{m.name}: funclet {f.name} has no .pdata entry"
            if f.unwind is not None:
                xdata = coff.section(".xdata").data
                assert encode_unwind_info(f.unwind) == xdata[f.unwind_offset:f.unwind_offset + f.unwind.size]
        assert {f.name for f in code.funclets_of(m.parent)} == {
            n for n in functions if (x := FUNCLET_NAME.fullmatch(n)) and x["parent"] == m.parent}
        # Functions are disjoint and in order; every call site lies in its function.
        for a, b in zip(code.functions, code.functions[1:]):
            assert a.end <= b.start
        for f in code.functions:
            for site in f.calls:
                assert f.start <= site.offset < f.end
                if site.return_offset is not None:
                    insn = code.instruction_at(site.offset)
                    assert site.return_offset == insn.end <= f.end
                    assert insn.mnemonic.startswith("call")


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_call_sites_match_the_ir(sample_compiled, opt):
    """Each call site names an IR callee; at O0 every call of the IR is there, except calls
    in code LLVM removes as unreachable (after a noreturn throw). O2 may also clone a call
    (tail duplication, unrolling), so there only the callees must be the IR's."""
    for m in sample_compiled[opt]:
        code = m.recovered
        expected = ir_callees(m.reader.module)
        got = collections.Counter(s.callee for s in code.calls() if s.callee is not None)
        if opt == 0:
            assert not (got - expected), f"{m.name}: calls the IR does not make: {got - expected}"
        else:
            assert set(got) <= set(expected), f"{m.name}: callees the IR does not call: {set(got) - set(expected)}"
        if opt == 0:
            invokes = sum(1 for s in code.calls() if s.is_invoke)
            assert invokes <= len(_INVOKE.findall(m.reader.module))
            # Each invoke is bracketed by its own pair of EH labels, right around the call.
            for s in code.calls():
                if s.is_invoke:
                    begin, end = (code.label(x) for x in s.invoke)
                    assert begin <= s.offset and s.return_offset <= end <= s.return_offset + 1


def test_invokes_and_calls_in_a_known_method(sample_compiled):
    m = next(m for m in sample_compiled[0] if "CatchAndFilter.Program::CatchFilterCatch" in m.name)
    code = m.recovered
    main = code.function(m.parent)
    assert [(s.callee, s.is_invoke) for s in main.calls] == [
        ("[mscorlib]System.Console::WriteLine(string)", True),
        ("[sample]Tests.CatchAndFilter.Program::Throw(int32)", True)]
    assert [f.kind for f in code.funclets_of(m.parent)] == ["catch", "catch", "catch"]
    for f in code.funclets_of(m.parent):
        assert [s.callee for s in f.calls] == ["[mscorlib]System.Console::WriteLine(string)"]
        assert not any(s.is_invoke for s in f.calls)
    filter_fn = code.function(object_symbol(m.reader.filters[0]))
    assert filter_fn.kind == "function" and filter_fn.unwind is not None
    assert "indirect-call" in {s.kind for s in filter_fn.calls}   # the virtual get_Message
    assert all(code.labels[f"$ehgcr_0_{n}"] < main.end for n in (6, 7, 8))
    text = str(code)
    assert "invoke [.Ltmp0, .Ltmp1)" in text and "?catch$" in text


def test_tail_jumps_and_leaf_functions(pool):
    ir = """target triple = "x86_64-pc-windows-msvc"
declare void @f(i32)
define void @tail(i32 %a) {
  call void @f(i32 %a)
  tail call void @f(i32 1)
  ret void
}
define i32 @leaf(i32 %a) {
  %r = add i32 %a, 1
  ret i32 %r
}
"""
    result = pool.compile(ir, 2)
    code = recover(result.obj, result.asm)
    tail = code.function("tail")
    assert [(s.kind, s.callee) for s in tail.calls] == [("call", "f"), ("tail-jump", "f")]
    assert tail.calls[1].return_offset is None
    leaf = code.function("leaf")
    assert leaf.unwind_offset is None and leaf.end > leaf.start   # no .pdata entry: a leaf


_PAD_MARKER = re.compile(r'asm sideeffect "# llilc\.pad (\d+)"')


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_pad_markers_are_in_their_funclets(sample_compiled_marked, opt):
    """LLVM keeps the reader's `# llilc.pad N` in the code of the funclet whose pad it follows,
    at O0 and O2: each funclet carries exactly one, the parent and the filters none, and
    no marker is lost (at O0 LLVM keeps every pad; the markers keep even empty cleanups)."""
    funclets = 0
    for m in sample_compiled_marked[opt]:
        code = m.recovered
        written = sorted(int(n) for n in _PAD_MARKER.findall(m.reader.module))
        found = []
        for f in code.functions:
            if f.is_funclet:
                assert len(f.pads) == 1, (m.name, f.name, f.pads)
                funclets += 1
            else:
                assert f.pads == (), (m.name, f.name)
            found += f.pads
            if f.pads:
                assert f"pad #{f.pads[0]}" in str(f)
        assert sorted(found) == written, m.name
    assert funclets >= 100


def test_disagreeing_assembly_text_is_refused(sample_compiled):
    m = next(m for m in sample_compiled[0] if m.has_eh)
    asm = m.result.asm
    with pytest.raises(BackendError) as info:
        recover(m.result.obj, asm.replace("\tcallq\t", "\tmovq\t", 1))
    assert info.value.kind == "asm-mismatch"
    with pytest.raises(BackendError):
        recover(m.result.obj, asm.replace(".p2align\t4", ".p2align\t6"))
    with pytest.raises(BackendError):
        recover(m.result.obj, asm.replace("\t.seh_endprologue", "\t.frobnicate\n\t.seh_endprologue", 1))
    with pytest.raises(BackendError) as info:     # a pad marker outside every function
        recover(m.result.obj, "\t#APP\n\t# llilc.pad 0\n\t#NO_APP\n" + asm)
    assert info.value.kind == "asm-mismatch" and "pad marker 0" in info.value.reason


def test_assembly_text_statements():
    """What `recover` walks, from hand-made lines: labels before a statement, statements
    after `;`, comments, quoted names holding `;` and `#`, an escaped quote, a stray quote
    (dropped, as the assembler's tokeniser drops it), prefixes, markers only in `.text`,
    other sections and symbol assignments skipped."""
    from llilc_eh.backend.recover import _text_items

    lines = (
        '\t.globl\t"a;b#c"',
        '"a;b#c":',
        '.L1: .L2:\tmovq\t%rax, %rbx # copy',
        "\tnop; retq",
        "\t#APP",
        "\t# llilc.callsite 7",
        "\t#NO_APP",
        "\t# llilc.pad 3",
        "\trex64 jmpq\t*%rax",
        "\tlock",
        "@feat.00 = 0",
        '\tcallq\t"g\\"h"',
        '\tcallq\t"unterminated',
        "\t.p2align\t4, 0x90",
        '\t.section\t.xdata,"dr"',
        "\t# llilc.callsite 9",
        ".Lx:",
        "\t.long\t1",
        "\t.text",
        "\t.byte\t1, 2",
    )
    assert [tuple(item) for item in _text_items("\n".join(lines))] == [
        ("label", "a;b#c", "", ()), ("label", ".L1", "", ()), ("label", ".L2", "", ()),
        ("insn", "movq", "%rax, %rbx", ()), ("insn", "nop", "", ()), ("insn", "retq", "", ()),
        ("marker", "7", "", ()), ("pad", "3", "", ()), ("insn", "jmpq", "*%rax", ("rex64",)),
        ("prefix", "lock", "", ()), ("insn", "callq", '"g\\"h"', ()), ("insn", "callq", "unterminated", ()),
        ("align", ".p2align", "4, 0x90", ()), ("data", ".byte", "1, 2", ())]


# -- llvm-readobj --unwind -----------------------------------------------------------------------

def test_unwind_info_agrees_with_readobj(sample_compiled, readobj, tmp_path):
    chosen = [m for m in sample_compiled[0] if m.pads >= 3][:2] + \
             [m for m in sample_compiled[2] if m.pads >= 2][:2]
    assert len(chosen) == 4
    for m in chosen:
        path = tmp_path / f"m{m.rid}_O{m.opt}.obj"
        path.write_bytes(m.result.obj)
        (listed,) = parse_readobj_unwind(run_readobj(readobj, path, "--unwind")).values()
        ours = [f for f in m.recovered.functions if f.unwind is not None]
        assert len(listed) == len(ours) == len(m.coff.runtime_functions())
        for theirs, f in zip(listed, ours):
            info = f.unwind
            assert readobj_address(m.coff, theirs["StartAddress"]) == f.start
            assert readobj_address(m.coff, theirs["EndAddress"]) == f.end
            assert readobj_address(m.coff, theirs["UnwindInfoAddress"]) == f.unwind_offset
            assert int(theirs["Version"]) == info.version and theirs["Flags"] == int(info.flags)
            assert int(theirs["PrologSize"]) == info.prolog_size
            assert int(theirs["UnwindCodeCount"]) == info.count_of_codes
            if info.frame_register:
                assert theirs["FrameRegister"].startswith(info.frame_register_name)
            assert theirs["codes"] == [op.describe(info.frame_register, info.frame_offset)
                                       for op in info.codes]
            if "Handler" in theirs:
                assert theirs["Handler"].startswith("ProcessCLRException")
