"""cpblk, initblk, cpobj, mkrefany, refanyval, refanytype, arglist and jmp: the runtime's
semantics, measured, and the reader's translation of each.

Oracle: tests/reader/typed_refs_and_blocks.il uses every one of these opcodes, several
inside try / catch / finally regions, and prints what each case did. CoreCLR 3.1 is the
ground truth: it must print exactly typed_refs_and_blocks.expected, in tier-0 and in fully
optimized code. Mono must print the same except the divergences listed in MONO_DIVERGENCES
(strictly: a divergence that disappears or a new one fails the test).

Then the reader: every method of the program translates (except the invalid
`arglist_outside_vararg`, refused by name), passes the funclet lint and LLVM's verifier
with both finally strategies, has the IR shape each opcode calls for, and LLVM compiles it
at O0 and O2 (a `jmp` becomes a tail jump carrying its call-site marker).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.loader import Assembly
from llilc_eh.assembly.signatures import ElementType, PrimitiveType
from llilc_eh.backend.codegen import CodegenPool, CodegenResult, object_symbol
from llilc_eh.backend.coff import CoffObject
from llilc_eh.backend.recover import recover
from llilc_eh.check.toolchain import assemble, run_on_coreclr, run_on_mono
from llilc_eh.errors import ReaderError
from llilc_eh.il.method import analyze
from llilc_eh.reader.helpers import HELPERS, IMPLICIT_CHECKS
from llilc_eh.reader.jitee import JitEE
from llilc_eh.reader.types import TYPEDREF_SIZE, TYPEDREF_TYPE_OFFSET, TYPEDREF_VALUE_OFFSET
from llilc_eh.reader.lint import check_module
from llilc_eh.reader.translate import Options, translate

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "typed_refs_and_blocks.il"
EXPECTED = HERE / "typed_refs_and_blocks.expected"
NS = "Tests.TypedRefs"

NRE = "System.NullReferenceException"
ICE = "System.InvalidCastException"
IPE = "System.InvalidProgramException"

# CoreCLR line -> what Mono 6.8 prints instead (one or more lines).
MONO_DIVERGENCES = {
    "sizeof_typedref: 16": ["sizeof_typedref: 24"],   # Mono's TypedReference: type, value, klass
    # CoreCLR on Linux rejects the vararg calling convention when it compiles the caller;
    # Mono runs Sum (1 + 3 + 4; the int64 argument fails refanyval int32 and is skipped).
    f"vararg_sum [call]: {IPE}": [f"vararg_sum.skipped: {ICE}", "vararg_sum: 8"],
    f"arglist_outside_vararg [call]: {IPE}": ["arglist_outside_vararg: no exception"],   # Mono accepts it
}

# Methods of the program the reader refuses, with the error kind it names.
REFUSED = {f"{NS}.Program::arglist_outside_vararg": "arglist-outside-vararg"}

JMP_TARGETS = {   # method with a jmp -> its target
    f"{NS}.Program::Jumper": f"{NS}.Program::Target",
    f"{NS}.Program::JumperAfterCatch": f"{NS}.Program::Target",
    f"{NS}.Program::JumperPair": f"{NS}.Program::TargetPair",
    f"{NS}.Program::JumperMake": f"{NS}.Program::MakePair",
    f"{NS}.Holder::AddTwice": f"{NS}.Holder::Add",
}


@pytest.fixture(scope="module")
def exe(tmp_path_factory) -> Path:
    return assemble(PROGRAM, tmp_path_factory.mktemp("typedrefs"))


@pytest.fixture(scope="module")
def coreclr(exe) -> list[str]:
    proc = run_on_coreclr(exe)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.fixture(scope="module")
def asm(exe) -> Assembly:
    return Assembly(exe)


@pytest.fixture(scope="module")
def ee(asm) -> JitEE:
    return JitEE(asm)


def outcome(lines: list[str], case: str) -> str:
    """What the line `<case>: <outcome>` says (exactly one such line)."""
    found = [line.split(": ", 1)[1] for line in lines if line.split(": ", 1)[0] == case]
    assert len(found) == 1, (case, found)
    return found[0]


# --------------------------------------------------------------------------------------------
# The runtimes


def test_the_program_uses_every_opcode(asm):
    used = {i.op.name for rid in asm.methods_with_il() for i in analyze(asm.body(rid)).instructions}
    assert {"cpblk", "initblk", "cpobj", "mkrefany", "refanyval", "refanytype", "arglist", "jmp",
            "volatile.", "unaligned."} <= used


def test_the_program_puts_them_in_handlers_and_tries(asm):
    """cpblk in a finally, initblk and cpobj in a catch, refanyval in a try: each in a region."""
    def region_kinds(opcode):
        kinds = set()
        for rid in asm.methods_with_il():
            m = analyze(asm.body(rid))
            kinds |= {m.regions.innermost(i.offset).kind.value for i in m.instructions if i.op.name == opcode}
        return kinds
    assert "finally" in region_kinds("cpblk")
    assert "catch" in region_kinds("initblk") and "catch" in region_kinds("cpobj")
    assert "try" in region_kinds("refanyval") and "try" in region_kinds("cpobj")


def test_coreclr_prints_the_expected_output(coreclr):
    assert coreclr == EXPECTED.read_text().splitlines()


def test_coreclr_optimized_code_agrees(exe, monkeypatch):
    monkeypatch.setenv("COMPlus_TieredCompilation", "0")   # every method fully optimized
    proc = run_on_coreclr(exe)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == EXPECTED.read_text().splitlines()


def test_mono_agrees_except_the_listed_divergences(exe, coreclr):
    proc = run_on_mono(exe)
    assert proc.returncode == 0, proc.stderr
    expected = [out for line in coreclr for out in MONO_DIVERGENCES.get(line, [line])]
    assert proc.stdout.splitlines() == expected
    assert set(MONO_DIVERGENCES) <= set(coreclr)


def test_measured_facts_the_reader_relies_on(coreclr):
    # cpblk / initblk: a null address faults only with a non-zero size
    assert outcome(coreclr, "cpblk_null_dst_4") == NRE and outcome(coreclr, "cpblk_null_src_3") == NRE
    assert outcome(coreclr, "cpblk_null_dst_0") == "no exception" == outcome(coreclr, "cpblk_null_src_0")
    assert outcome(coreclr, "initblk_null_4") == NRE and outcome(coreclr, "initblk_null_0") == "no exception"
    assert outcome(coreclr, "cpobj_null_dst") == NRE
    null_deref = IMPLICIT_CHECKS["null-deref"]
    assert null_deref.exception == NRE and {"cpblk", "initblk", "cpobj"} <= set(null_deref.opcodes)
    # mkrefany of null and refanyval of it raise nothing: no null checks for them
    assert outcome(coreclr, "mkrefany_null") == "no exception"
    assert outcome(coreclr, "mkrefany_null.load") == NRE
    assert not {"mkrefany", "refanyval"} & set(null_deref.opcodes)
    # refanyval: an exact type match or InvalidCastException, from the helper
    assert outcome(coreclr, "refanyval_wrong_type") == ICE == outcome(coreclr, "refanyval_default")
    assert HELPERS["CORINFO_HELP_GETREFANY"].raises == (ICE,)
    assert not HELPERS["CORINFO_HELP_GETREFANY"].noreturn
    assert outcome(coreclr, "refanytype_default") == "null"
    assert outcome(coreclr, "sizeof_typedref") == str(TYPEDREF_SIZE)
    # varargs: CoreCLR on Linux refuses them; arglist outside a vararg method is invalid
    assert outcome(coreclr, "vararg_sum [call]") == IPE
    assert outcome(coreclr, "arglist_outside_vararg [call]") == IPE
    # jmp passes the current argument values; the caller's copy of a struct is untouched
    assert outcome(coreclr, "jmp_args") == "105" and outcome(coreclr, "jmp_after_catch") == "-1"
    assert outcome(coreclr, "jmp_struct") == "1020" and outcome(coreclr, "jmp_struct.caller_copy") == "1"
    assert outcome(coreclr, "jmp_retbuf.A") == "21" and outcome(coreclr, "jmp_instance") == "16"


def test_typedref_layout_is_corelibs(ee):
    """The reader's TypedReference offsets are the JIT-EE's layout of CoreLib's System.TypedReference."""
    corelib = JitEE(Assembly(Corpus().framework_dir / "System.Private.CoreLib.dll"))
    layout = corelib.layout(corelib.token_type(corelib.type_def("System.TypedReference")))
    assert [(f.name, f.offset) for f in layout.fields] == [("Value", TYPEDREF_VALUE_OFFSET),
                                                           ("Type", TYPEDREF_TYPE_OFFSET)]
    assert layout.size == TYPEDREF_SIZE and layout.align == 8
    # `typedref` in a signature (and ilasm's `[mscorlib]System.TypedReference`) is that 16-byte value
    assert ee.size_and_align(PrimitiveType(ElementType.TYPEDBYREF)) == (TYPEDREF_SIZE, 8)


# --------------------------------------------------------------------------------------------
# The reader


def methods(asm):
    return [asm.method(rid) for rid in asm.methods_with_il()]


def tr(asm, ee, name: str, **options):
    return translate(asm, analyze(asm.body(asm.find_method(name).rid)), ee, Options(**options))


@pytest.mark.parametrize("clone", [False, True], ids=["selectors", "clone-finally"])
def test_every_method_translates_lints_and_verifies(asm, ee, clone):
    translated = 0
    for ref in methods(asm):
        m = analyze(asm.body(ref.rid))
        refused = next((kind for name, kind in REFUSED.items() if ref.name.endswith(name)), None)
        if refused:
            with pytest.raises(ReaderError) as e:
                translate(asm, m, ee, Options(clone_finally=clone))
            assert e.value.kind == refused and e.value.offset == 0
            continue
        result = translate(asm, m, ee, Options(clone_finally=clone))
        check_module(result.module, method=str(ref))      # raises on a lint finding or a verifier error
        translated += 1
    assert translated == len(methods(asm)) - len(REFUSED) >= 40


def _memcpys(text: str) -> list[tuple[str, str, str, str]]:
    return re.findall(r"call void @llvm\.memcpy\.p0\.p0\.i64\(ptr (\S+), ptr (\S+), i64 (\S+), i1 (\w+)\)", text)


def test_cpblk_is_a_memcpy_with_a_size_dependent_null_check(asm, ee):
    text = tr(asm, ee, f"{NS}.Program::cpblk_in_finally").module
    copies = [c for c in _memcpys(text) if c[:2] == ("%loc1", "%loc0")]
    assert len(copies) == 2          # the finally's normal copy and its cleanup funclet
    for dst, src, size, volatile in copies:
        assert re.search(rf"{re.escape(size)} = zext i32 %\w+ to i64", text) and volatile == "false"
        assert re.search(rf"= icmp ne i64 {re.escape(size)}, 0", text)
    # the cleanup copy's throw helper carries the funclet bundle; the normal copy's does not
    throws = re.findall(r"call void @CORINFO_HELP_THROWNULLREF\(\)(.*)", text)
    assert sorted(bool(re.search(r'"funclet"\(token %cp\d+\)', t)) for t in throws) == [False, True]
    # a null source or destination, as a native int: inttoptr, both compared with null
    null_src = tr(asm, ee, f"{NS}.Program::cpblk_null_src").module
    assert len(re.findall(r"= icmp eq ptr %\w+, null", null_src)) == 2
    assert re.search(r"invoke void @CORINFO_HELP_THROWNULLREF\(\) to label %\S+ unwind label %dispatch", null_src)


def test_volatile_and_unaligned_prefixes(asm, ee):
    text = tr(asm, ee, f"{NS}.Program::cpblk_prefixed").module
    [(_, _, size, volatile)] = _memcpys(text)
    assert size == "3" or re.search(rf"{re.escape(size)} = zext i32 3 to i64", text)
    assert volatile == "true"
    assert re.search(r"call void @llvm\.memset\.p0\.i64\(ptr %\w+, i8 %\w+, i64 %\w+, i1 true\)", text)
    # no alignment is claimed anywhere (unaligned. 1 needs nothing more)
    assert not re.search(r"@llvm\.mem(cpy|set)[^\n]*align", text)
    # a prefix applies to one instruction: the plain memcpy of another method stays non-volatile
    assert all(v == "false" for *_, v in _memcpys(tr(asm, ee, f"{NS}.Program::cpobj_struct").module))


def test_initblk_in_a_catch_is_a_memset_of_the_low_byte(asm, ee):
    result = tr(asm, ee, f"{NS}.Program::initblk_in_catch")
    byte = re.search(r"(%\w+) = trunc i32 427 to i8", result.module)       # 0x1AB: the low byte counts
    assert byte and re.search(rf"call void @llvm\.memset\.p0\.i64\(ptr %loc0, i8 {byte.group(1)}, i64 %\w+, "
                              r"i1 false\)", result.module)
    assert re.search(r'call void @CORINFO_HELP_THROWNULLREF\(\) \[ "funclet"\(token %cp\d+\) \]', result.module)
    assert result.catchpads == 1


def test_cpobj_copies_a_struct_by_size_and_a_reference_by_pointer(asm, ee):
    struct = tr(asm, ee, f"{NS}.Program::cpobj_struct").module
    assert ("%loc1", "%loc0", "16", "false") in _memcpys(struct)          # Pair: int32 + int64
    ref = tr(asm, ee, f"{NS}.Program::cpobj_ref_in_catch").module
    assert re.search(r"(%\w+) = load ptr, ptr %loc0\n\s+store ptr \1, ptr %loc1", ref)
    assert not [c for c in _memcpys(ref) if c[:2] == ("%loc1", "%loc0")]
    for text in (struct, ref):
        assert len(re.findall(r"= icmp eq ptr %loc[01], null", text)) == 2


def test_mkrefany_builds_the_two_fields_and_refanyval_is_a_helper_invoke(asm, ee):
    result = tr(asm, ee, f"{NS}.Program::typedref_roundtrip")
    text = result.module
    ref = re.search(rf"(%tmp\d+) = alloca \[{TYPEDREF_SIZE} x i8\], align 8", text).group(1)
    assert f"store ptr %loc0, ptr {ref}" in text                             # Value at 0: &x
    field = re.search(rf"(%addr\d+) = getelementptr i8, ptr {ref}, i64 {TYPEDREF_TYPE_OFFSET}", text).group(1)
    assert f'store ptr @"class:int32", ptr {field}' in text                  # Type at 8: int32's handle
    assert re.search(r'invoke ptr @CORINFO_HELP_GETREFANY\(ptr @"class:int32", ptr %\w+\) to label %\S+ '
                     r'unwind label %dispatch\d+', text)
    assert result.helper_calls["CORINFO_HELP_GETREFANY"] == 1
    wrong = tr(asm, ee, f"{NS}.Program::refanyval_wrong_type").module
    assert re.search(r'invoke ptr @CORINFO_HELP_GETREFANY\(ptr @"class:int64", ptr %tmp\d+\) to label', wrong)
    assert "declare ptr @CORINFO_HELP_GETREFANY(ptr, ptr)" in wrong
    # outside a try: a plain call; mkrefany checks nothing -- the one null check is of the data
    # pointer refanyval gave, which ldfld reads through (a byref is checked as an object is)
    null = tr(asm, ee, f"{NS}.Program::typedref_struct").module
    refany = re.search(r"(%\w+) = call ptr @CORINFO_HELP_GETREFANY\(", null)
    assert refany and re.findall(r"= icmp eq ptr (%[\w.]+), null", null) == [refany.group(1)]


def test_refanytype_loads_the_type_field_as_a_runtime_type_handle(asm, ee):
    text = tr(asm, ee, f"{NS}.Program::Describe").module
    field = re.search(rf"(%addr\d+) = getelementptr i8, ptr %\w+, i64 {TYPEDREF_TYPE_OFFSET}", text).group(1)
    handle = re.search(rf"(%type\d+) = load ptr, ptr {field}\n\s+store ptr \1, ptr (%tmp\d+)", text)
    assert handle, text
    assert re.search(rf"call ptr @\"\[mscorlib\]System\.Type::GetTypeFromHandle\(.*\)\"\(ptr {handle.group(2)}\)",
                     text)


def test_a_vararg_method_takes_its_cookie_where_the_jitee_says(asm, ee):
    ref = asm.find_method(f"{NS}.Program::Sum")
    info = ee.compiled_method(ref.rid)
    text = tr(asm, ee, f"{NS}.Program::Sum").module
    params = re.search(r"define i32 @\"[^\"]+\"\((.*)\) personality", text).group(1).split(", ")
    assert params == ["ptr %varargs.cookie", "ptr %p0"]
    assert info.llvm_param_roles.index("vararg-cookie") == params.index("ptr %varargs.cookie")
    assert "store ptr %varargs.cookie, ptr %varargs.cookie.home" in text
    # arglist: a RuntimeArgumentHandle holding the address of the cookie's home, to ArgIterator
    handle = re.search(r"store ptr %varargs\.cookie\.home, ptr (%tmp\d+)", text).group(1)
    assert re.search(rf'call void @"\[mscorlib\]System\.ArgIterator::\.ctor\(.*\)"\(ptr %loc0, ptr {handle}\)', text)
    # refanyval of GetNextArg's typed reference, inside the try
    assert re.search(r"invoke ptr @CORINFO_HELP_GETREFANY\(ptr @\"class:int32\", ptr %tmp\d+\)", text)


def test_a_vararg_call_passes_its_call_sites_cookie(asm, ee):
    m = analyze(asm.body(asm.find_method(f"{NS}.Program::vararg_sum").rid))
    call = next(i for i in m.instructions if i.op.name == "call")
    callee = ee.method(call.operand)
    text = translate(asm, m, ee).module
    args = re.search(r"call i32 @\"[^\"]+Sum\(string, \.\.\.\)\"\((.*)\)", text).group(1).split(", ")
    assert args[callee.llvm_param_roles.index("vararg-cookie")] == f'ptr @"vasigcookie:0x{call.operand:08X}"'
    assert args[2:] == ["i32 1", "i64 2", "i32 3", "i32 4"]


@pytest.mark.parametrize("method", sorted(JMP_TARGETS))
def test_jmp_is_a_musttail_call_then_ret(asm, ee, method):
    text = tr(asm, ee, method).module
    target = ee.method(next(i.operand for i in analyze(asm.body(asm.find_method(method).rid)).instructions
                            if i.op.name == "jmp"))
    assert JMP_TARGETS[method] in target.display
    callee = re.escape(ee.llvm_global(target.symbol))
    tail = re.search(rf"\n  ((%v\d+) = )?musttail call (\S+) {callee}\((.*)\)\n  ret (.*)\n", text)
    assert tail, text
    _, value, ret_ty, args, ret = tail.groups()
    assert ret == (f"{ret_ty} {value}" if value else "void")
    define = re.search(r"define (\S+) @\"[^\"]+\"\((.*)\) personality", text)
    assert define.group(1) == ret_ty
    assert [a.split(" ")[0] for a in args.split(", ")] == [p.split(" ")[0] for p in define.group(2).split(", ")]
    if method.endswith("JumperPair"):       # the modified struct goes back into the caller's buffer first
        assert re.search(r"call void @llvm\.memcpy\.p0\.p0\.i64\(ptr %p0, ptr %arg0, i64 16, i1 false\)\n.*\n"
                         r".*\n\s+musttail call void .*\(ptr %p0, ptr %v\d+\)", text)
    if method.endswith("JumperMake"):       # the return buffer passes through
        assert args.startswith("ptr %p0, ") and ret == "void"
    if method.endswith("AddTwice"):         # `this` first
        assert re.match(r"ptr %v\d+, i32 %v\d+$", args)


def test_the_refusals_are_named_errors(tmp_path):
    src = tmp_path / "bad.il"
    src.write_text("""
.assembly extern mscorlib {}
.assembly bad {}
.class public auto ansi abstract sealed T extends [mscorlib]System.Object {
  .method public static int32 Target(int64 a) cil managed { ldc.i4.0 ret }
  .method public static int32 WrongSig(int32 a) cil managed { jmp int32 T::Target(int64) }
  .method public static int32 NotEmpty(int64 a) cil managed { ldc.i4.1 jmp int32 T::Target(int64) }
  .method public static vararg int32 FromVararg(int64 a) cil managed { jmp int32 T::Target(int64) }
  .method public static void NoTypedRef() cil managed { .maxstack 2 ldc.i4.0 refanytype pop ret }
  .method public static void NotAPointer() cil managed { .maxstack 2 ldnull mkrefany [mscorlib]System.Object pop ret }
}
""")
    asm = Assembly(assemble(src, tmp_path, dll=True))
    expected = {"WrongSig": "jmp-signature-mismatch", "NotEmpty": "jmp-stack-not-empty",
                "FromVararg": "jmp-vararg", "NoTypedRef": "type-mismatch", "NotAPointer": "type-mismatch"}
    for name, kind in expected.items():
        with pytest.raises(ReaderError) as e:
            translate(asm, analyze(asm.body(asm.find_method(f"T::{name}").rid)))
        assert e.value.kind == kind and f"T::{name}" in str(e.value), (name, e.value)


# --------------------------------------------------------------------------------------------
# LLVM compiles them


@pytest.fixture(scope="module")
def compiled(asm, ee):
    """{opt: {method name: (ReaderResult, CodegenResult | BackendError)}}"""
    readers = {}
    for ref in methods(asm):
        if not any(ref.name.endswith(name) for name in REFUSED):
            readers[ref.name] = translate(asm, analyze(asm.body(ref.rid)), ee)
    out = {}
    with CodegenPool(4) as pool:
        for opt in (0, 2):
            results = pool.compile_many([r.module for r in readers.values()], opt, methods=list(readers))
            out[opt] = {name: (r, res) for (name, r), res in zip(readers.items(), results)}
    return out


@pytest.mark.parametrize("opt", [0, 2])
def test_llvm_compiles_every_method(compiled, opt):
    failed = {name: str(res) for name, (_, res) in compiled[opt].items() if not isinstance(res, CodegenResult)}
    assert failed == {}
    assert len(compiled[opt]) >= 40


@pytest.mark.parametrize("opt", [0, 2])
def test_jmp_compiles_to_a_tail_jump_with_its_marker(asm, ee, compiled, opt):
    for method, target in JMP_TARGETS.items():
        name = next(n for n in compiled[opt] if n.endswith(method))
        reader, result = compiled[opt][name]
        code = recover(CoffObject.parse(result.obj), result.asm)
        parent = code.function(object_symbol(reader.parent))
        callee = next(object_symbol(ee.llvm_global(ee.method(i.operand).symbol))
                      for i in analyze(asm.body(asm.find_method(method).rid)).instructions if i.op.name == "jmp")
        marker = int(re.search(r'"# llilc\.callsite (\d+)", ""\(\)\n\s+(%v\d+ = )?musttail', reader.module).group(1))
        tails = [c for c in parent.calls if c.kind == "tail-jump" and c.callee == callee]
        assert len(tails) == 1 and tails[0].return_offset is None and marker in tails[0].callsites, (name, opt)
        assert not [c for c in parent.calls if c.kind == "call" and c.callee == callee], (name, opt)


def test_refanyval_in_a_try_is_a_machine_call_inside_the_invoke_range(compiled):
    name = next(n for n in compiled[0] if n.endswith("refanyval_wrong_type"))
    reader, result = compiled[0][name]
    code = recover(CoffObject.parse(result.obj), result.asm)
    calls = [c for f in code.functions for c in f.calls if c.callee == "CORINFO_HELP_GETREFANY"]
    assert len(calls) == 1 and calls[0].invoke is not None
