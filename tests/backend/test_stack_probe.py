"""Our stack probe (llilc_eh.target.stack_probe; backend.relink.STACK_PROBE_CODE): the routine
LLVM's prologs and dynamic allocas call with the size in RAX (`"probe-stack"` names it; on the
Windows triple LLVM does no inline probing and calls whatever the attribute names, measured
with "inline-asm"). The final image places it after the code when a range calls it; the
calls reach it, nothing names it any more, it has a RUNTIME_FUNCTION of its own (a leaf:
tests/target/test_probe_suspension.py runs a thread the GC suspends there), verify() is clean;
win-x64 places nothing."""

from __future__ import annotations

import capstone
import pytest

from llilc_eh.backend.codegen import CodegenPool
from llilc_eh.backend.coff import CoffObject
from llilc_eh.backend.relink import STACK_PROBE_CODE
from llilc_eh.target import LINUX_X64, WIN_X64

_MD = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
_MD.detail = True


def test_the_routine_keeps_the_contract():
    insns = list(_MD.disasm(STACK_PROBE_CODE, 0))
    assert sum(i.size for i in insns) == len(STACK_PROBE_CODE) == 32
    assert [f"{i.mnemonic} {i.op_str}".strip() for i in insns] == [
        "lea r11, [rsp + 8]", "mov r10, r11", "sub r10, rax",
        "sub r11, 0x1000", "cmp r11, r10", "jb 0x1c", "test qword ptr [r11], r11", "jmp 0xb",
        "test qword ptr [r10], r10", "ret"]
    written = set()
    for i in insns:
        _, regs_write = i.regs_access()
        written |= {i.reg_name(r) for r in regs_write}
    assert written <= {"r10", "r11", "rflags", "rsp"}, written     # RAX preserved; rsp: only ret's pop
    assert not any(i.mnemonic in ("push", "pop", "call") for i in insns)


def test_llvm_calls_the_named_probe_on_the_windows_triple():
    """The measurement behind the design: what `"probe-stack"` does to a 20000-byte frame."""
    ir = ('target triple = "x86_64-pc-windows-msvc"\ndeclare x86_64_sysvcc void @g(ptr)\n'
          "define x86_64_sysvcc void @big() ATTRS {\n  %p = alloca [20000 x i8]\n"
          "  call x86_64_sysvcc void @g(ptr %p)\n  ret void\n}\n")
    with CodegenPool(1) as pool:
        def undefined(attrs):
            coff = CoffObject.parse(pool.compile(ir.replace("ATTRS", attrs), 2).obj)
            return {s.name for s in coff.symbols if s.section_number == 0}
        assert undefined("") == {"__chkstk", "g"}
        assert undefined('"probe-stack"="inline-asm"') == {"inline-asm", "g"}     # no inline probing here
        assert undefined(LINUX_X64.define_attributes) == {LINUX_X64.stack_probe, "g"}


@pytest.fixture(scope="module")
def frame_runs(tmp_path_factory):
    """A method with a 12000-byte local struct and one with stackalloc, through the pipeline."""
    from llilc_eh.assembly.loader import Assembly
    from llilc_eh.check.toolchain import assemble
    from llilc_eh.pipeline import Pipeline, eh_methods
    from llilc_eh.reader.translate import Options
    src = tmp_path_factory.mktemp("probe") / "probe.il"
    src.write_text(r"""
.assembly extern mscorlib {}
.assembly probe {}
.class public sequential ansi sealed beforefieldinit Big extends [mscorlib]System.ValueType
{ .pack 1 .size 12000 .field public int32 A }
.class public auto ansi beforefieldinit P extends [mscorlib]System.Object
{
  .method public static int32 Frame() cil managed
  { .maxstack 2 .locals init (valuetype Big b)
    .try { ldloca.s b ldfld int32 Big::A leave.s done } finally { call void P::F() endfinally }
    done: ldc.i4.0 ret }
  .method public static int32 Alloc(int32 n) cil managed
  { .maxstack 2 .locals init (native int p)
    .try { ldarg.0 localloc stloc.0 leave.s done } finally { call void P::F() endfinally }
    done: ldc.i4.0 ret }
  .method public static void F() cil managed { ret }
}
""")
    asm = Assembly(assemble(src, src.parent, dll=True))
    out = {}
    with CodegenPool(1) as pool:
        for target in (LINUX_X64, WIN_X64):
            for opt in (0, 2):
                out[(target.name, opt)] = Pipeline(asm, pool, opt=opt, options=Options(target=target)).run_many(
                    eh_methods(asm))
    return out


@pytest.mark.parametrize("opt", (0, 2))
def test_image_places_the_probe_and_its_calls_reach_it(frame_runs, opt):
    runs = frame_runs[("linux-x64", opt)]
    assert len(runs) == 2
    for run in runs:
        assert run.error is None and run.ok, (run.name, run.error, run.image_findings)
        image = run.image
        assert image.stack_probe is not None and image.stack_probe % 16 == 0, run.name
        assert image.code[image.stack_probe:image.stack_probe + 32] == STACK_PROBE_CODE
        assert image.stack_probe >= max(r.end for r in image.ranges)          # after every range
        calls = [f for f in image.fixups if f.kind == "stack-probe"]
        assert calls and all(f.target == image.stack_probe for f in calls), run.name
        for f in calls:
            assert image.code[f.site - 1] == 0xE8                             # a call rel32
            assert f.site + 4 + int.from_bytes(image.code[f.site:f.site + 4], "little", signed=True) \
                == image.stack_probe
        assert not any(r.symbol == LINUX_X64.stack_probe for r in image.relocations)
        assert {s.name for s in run.coff.symbols if s.section_number == 0} >= {LINUX_X64.stack_probe}


def test_win_x64_keeps_chkstk(frame_runs):
    """Negative control: win-x64 keeps LLVM's __chkstk as an external relocation, places nothing."""
    for opt in (0, 2):
        runs = frame_runs[("win-x64", opt)]
        assert all(run.ok and run.image.stack_probe is None for run in runs)
        with_chkstk = {run.name.split()[-1] for run in runs if any(r.symbol == "__chkstk" for r in run.image.relocations)}
        # (at O2 LLVM deletes both frames: nothing reads them on win-x64, where zeroing is no call)
        assert with_chkstk == ({"P::Frame", "P::Alloc"} if opt == 0 else set()), with_chkstk


def _uncovered(image) -> list[int]:
    """Offsets of the code's bytes that no RUNTIME_FUNCTION holds and are not int3 padding:
    code the runtime could interrupt without finding its UNWIND_INFO."""
    covered = bytearray(len(image.code))
    for f in image.runtime_functions:
        covered[f.begin_rva:f.end_rva] = b"\x01" * (f.end_rva - f.begin_rva)
    return [n for n, (c, b) in enumerate(zip(covered, image.code)) if not c and b != 0xCC]


@pytest.mark.parametrize("opt", (0, 2))
def test_the_probe_has_a_runtime_function_of_its_own(frame_runs, opt):
    """Every byte of code the runtime may interrupt lies in a RUNTIME_FUNCTION: the ranges and,
    after theirs, our probe's -- a frameless leaf -- which the installer reports with the rest
    (`MethodRun.unwind_records`, HANDLER: not the root)."""
    from llilc_eh.backend.relink import PROBE_UNWIND
    from llilc_eh.pipeline import UnwindKind
    from llilc_eh.unwind import decode_unwind_info, encode_unwind_info
    for run in frame_runs[("linux-x64", opt)]:
        image = run.image
        assert len(image.runtime_functions) == len(image.ranges) + 1, run.name
        probe = image.runtime_functions[-1]
        assert (probe.begin_rva, probe.end_rva) == (image.stack_probe, image.stack_probe + 32)
        info = decode_unwind_info(image.unwind_data, probe.unwind_rva)
        assert info == PROBE_UNWIND and info.version == 1 and info.prolog_size == 0 and not info.codes \
            and info.frame_register == 0
        assert _uncovered(image) == [], run.name
        records = run.unwind_records()
        assert [r.kind for r in records[:-1]] == [UnwindKind.ROOT] + [UnwindKind.HANDLER] * (len(records) - 2)
        last = records[-1]
        assert (last.kind, last.funclet, last.start, last.end) == (UnwindKind.HANDLER, None, probe.begin_rva,
                                                                  probe.end_rva)
        assert last.data == encode_unwind_info(PROBE_UNWIND)
        assert image.verify() == []


def test_control_an_image_without_the_probes_runtime_function_is_caught(frame_runs):
    """Negative controls: the probe's RUNTIME_FUNCTION dropped -- bytes of code no
    RUNTIME_FUNCTION holds, and verify() says so; pointed at the main body's UNWIND_INFO (not a
    leaf's) -- verify() says so."""
    import dataclasses

    from llilc_eh.unwind import RuntimeFunction
    run = frame_runs[("linux-x64", 0)][0]
    image = run.image
    dropped = dataclasses.replace(image, runtime_functions=image.runtime_functions[:-1], _source=image._source)
    assert _uncovered(dropped) == list(range(image.stack_probe, image.stack_probe + 32))
    assert [f.rule for f in dropped.verify()] == ["pdata"]
    probe = image.runtime_functions[-1]
    wrong = RuntimeFunction(probe.begin_rva, probe.end_rva, image.runtime_functions[0].unwind_rva)
    misread = dataclasses.replace(image, runtime_functions=image.runtime_functions[:-1] + (wrong,),
                                  _source=image._source)
    assert [f.rule for f in misread.verify()] == ["unwind"]
