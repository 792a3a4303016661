"""Metadata names outside ASCII, from the IL to the object and back (issue 12, item 1).

An LLVM name is a byte string: in a quoted name LLVM's lexer reads `\\XX` as one byte
(UnEscapeLexed), so a name must be written as its UTF-8 bytes. The reader once escaped each
*code point*: `Ç` became the lone byte 0xC7 (not UTF-8: llvmlite's decode failed), `Ω` (U+03A9)
became `\\3A9`, the bytes `:9`, so `K::Ωμέγα` came back as `K:::9;C:D;3;1` and `Ω` collided
with `:9`. These tests hold the spelling to LLVM's own reading of it (llvmlite parses the
name and gives it back), and run `tests/reader/names_unicode.il` -- one method per name, all
of the same EH shape -- through the whole pipeline at O0 and O2: the symbols LLVM writes into
the object and its assembly text must decode to the exact metadata names, and the clause
tables must not depend on the name.
"""

from __future__ import annotations

import re
from pathlib import Path

import llvmlite.binding as llvm
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llilc_eh.assembly.loader import Assembly
from llilc_eh.backend.codegen import CodegenPool, object_symbol
from llilc_eh.backend.recover import FUNCLET_NAME
from llilc_eh.check.toolchain import assemble, run_on_coreclr
from llilc_eh.pipeline import Pipeline
from llilc_eh.reader.ir import quote_global

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "names_unicode.il"
TYPE = "Ünïcødé"
# The methods of names_unicode.il, `type::name` exactly as its source spells them (the test's own
# copy: what the pipeline reports is compared with these, not with our metadata reader's answer).
# K holds the names that gave a wrong symbol with verdict ok once no other name failed first.
METHODS = tuple(f"{TYPE}::{n}" for n in ("Plain", "Çà", "Ünïcødé", "Ωμέγα", "例外", "Ω", ":9", 'a"b\\c')) \
    + tuple(f"K::{n}" for n in ("Ωμέγα", "例外", "Ω", ":9"))
CONTROL = f"{TYPE}::Plain"
OPT_LEVELS = (0, 2)


def _codepoint_escape(name: str) -> str:
    """The spelling the reader used before the fix (`\\XX` of each code point): the negative
    control -- the round-trip checks below must reject it."""
    if name.replace("_", "a").replace(".", "a").replace("$", "a").isalnum() and not name[0].isdigit():
        return f"@{name}"
    return '@"' + "".join(f"\\{ord(ch):02X}" if ch in '"\\' or not 32 <= ord(ch) < 127 else ch
                          for ch in name) + '"'


def _llvm_reads(spelled: list[str]) -> list[str] | None:
    """The names LLVM's parser gives the globals spelled so, in order (None: it refused the
    module or its names do not decode as UTF-8, as llvmlite reports them)."""
    text = "\n".join(f"{g} = external global i8" for g in spelled)
    try:
        module = llvm.parse_assembly(text)
        return [g.name for g in module.global_variables]
    except (RuntimeError, UnicodeDecodeError):
        return None


# -- the spelling, against LLVM's parser and printer -------------------------------------------------

NAMED = [f"{m}$0x06000002" for m in METHODS] + ["Ns.Type::.ctor$0x06000001", "a-b", "$x.y_z", "9lives"]


def test_llvm_reads_back_every_name_exactly():
    assert _llvm_reads([quote_global(n) for n in NAMED]) == NAMED


def test_the_old_spelling_fails_the_same_check():
    # negative control: the check above is able to fail, and fails on what issue 12 reported
    assert _llvm_reads([_codepoint_escape(f"{TYPE}::Çà")]) is None          # 0xC7 0xE0: not UTF-8
    assert _llvm_reads([_codepoint_escape("K::Ωμέγα$0x06000001")]) == ["K:::9;C:D;3;1$0x06000001"]
    # two methods, one symbol: U+03A9 written \\3A9 is the bytes `:9`
    assert _llvm_reads([_codepoint_escape("K::Ω$0x06000001")]) == _llvm_reads([_codepoint_escape("K:::9$0x06000001")])


def test_distinct_names_distinct_symbols_same_name_same_symbol():
    spelled = [quote_global(n) for n in NAMED]
    assert len(set(spelled)) == len(NAMED)
    assert spelled == [quote_global(n) for n in NAMED]
    assert quote_global("K::Ω$0x06000001") != quote_global("K:::9$0x06000001")


def test_the_spelling_is_llvms_own():
    """LLVM prints a module's names back exactly as the reader wrote them: the IR text the
    funclet model and lint read and LLVM's print of it agree on every name."""
    spelled = [quote_global(n) for n in NAMED]
    printed = str(llvm.parse_assembly("\n".join(f"{g} = external global i8" for g in spelled)))
    assert re.findall(r'^(@(?:"[^"]*"|\S+)) = external global i8$', printed, re.M) == spelled


def test_plain_names_stay_unquoted_and_ascii_only_takes_the_fast_path():
    assert quote_global("Ns.Type::M$0x06000001") == '@"Ns.Type::M$0x06000001"'
    assert quote_global("_Zfoo-1.a") == "@_Zfoo-1.a"
    assert quote_global("_Zfoo$1.a") == '@"_Zfoo$1.a"'   # the lexer takes `$`, the printer quotes it
    assert quote_global("Ωμέγα") == '@"\\CE\\A9\\CE\\BC\\CE\\AD\\CE\\B3\\CE\\B1"'  # str.isalnum() is true here
    assert quote_global("ª") == '@"\\C2\\AA"'          # a Latin-1 letter: isalnum() again
    assert quote_global("١٢") == '@"\\D9\\A1\\D9\\A2"'   # Arabic-Indic digits: isalnum(), isdigit()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
                        min_size=1, max_size=12), min_size=1, max_size=8, unique=True))
def test_any_name_round_trips_through_llvm(names):
    spelled = [quote_global(n) for n in names]
    assert _llvm_reads(spelled) == names
    assert len(set(spelled)) == len(names)
    # how the backend reads a spelling (LLVM's mangler drops a leading \x01: "use this name as is")
    assert [object_symbol(s) for s in spelled] == [n.removeprefix("\x01") for n in names]


# -- the whole pipeline ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def exe(tmp_path_factory) -> Path:
    # A folder of its own: the CoreCLR host resolves the entry assembly's name in the app folder,
    # and an older exe of the same assembly name there runs instead (seen while writing this test).
    return assemble(SOURCE, tmp_path_factory.mktemp("names_unicode"))


@pytest.fixture(scope="module")
def runs(exe) -> dict[tuple[str, int], object]:
    asm = Assembly(exe)
    by_name = {}
    for rid in asm.methods_with_il():
        body = asm.body(rid)
        if body.clauses:
            by_name[body.name] = rid
    assert sorted(by_name) == sorted(METHODS)
    out = {}
    with CodegenPool(1) as pool:
        for opt in OPT_LEVELS:
            pipeline = Pipeline(asm, pool, opt=opt)
            for name, run in zip(METHODS, pipeline.run_many([by_name[m] for m in METHODS])):
                out[name, opt] = run
    return out


CASES = [pytest.param(m, opt, id=f"{m.encode('unicode_escape').decode()}-O{opt}")
         for opt in OPT_LEVELS for m in METHODS]


def _symbol(run, name: str) -> str:
    return f"{name}$0x{run.il.body.token:08X}"


@pytest.mark.parametrize("name, opt", CASES)
def test_verdict_clean(runs, name, opt):
    run = runs[name, opt]
    assert run.error is None, str(run.error)
    assert run.ok, (run.findings, run.image_findings)
    assert run.il.body.name == name


@pytest.mark.parametrize("name, opt", CASES)
def test_object_symbols_decode_to_the_metadata_name(runs, name, opt):
    run = runs[name, opt]
    parent = _symbol(run, name)
    assert object_symbol(run.reader.parent) == parent
    assert run.image.parent == parent
    # the COFF symbol table: the parent, its funclets (LLVM's `?catch$N@?0?<parent>@4HA`) and
    # the outlined filter, each naming the parent exactly
    functions = [s.name for s in run.coff.functions_in(".text")]
    assert parent in functions
    funclets = [m for m in map(FUNCLET_NAME.fullmatch, functions) if m]
    assert funclets and all(m["parent"] == parent for m in funclets)
    assert f"{parent}$filter1" in functions
    assert set(functions) == {parent, f"{parent}$filter1", *(m.group(0) for m in funclets)}
    # the filter's frame constants: undefined symbols the image resolves by the parent's name
    undefined = {s.name for s in run.coff.symbols if not s.is_defined}
    assert {f"{parent}$psp_slot_offset", f"{parent}$fp_offset"} <= undefined
    assert run.image.filter_constants is not None
    # the assembly text: recovery found the same functions under the same names
    assert sorted(f.name for f in run.recovered.functions) == sorted(functions)
    assert [f.parent for f in run.recovered.functions if f.is_funclet] == [parent] * len(funclets)
    assert f'"{parent.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}":' in run.codegen.asm


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_same_shape_same_clause_table(runs, opt):
    tables = {name: runs[name, opt].clause_bytes for name in METHODS}
    assert tables[CONTROL], "the control method has a table"
    assert len(runs[CONTROL, opt].clauses.clauses) >= 3
    assert {name: t for name, t in tables.items() if t != tables[CONTROL]} == {}
    code = {name: runs[name, opt].image.code for name in METHODS}
    assert {name: len(c) for name, c in code.items() if len(c) != len(code[CONTROL])} == {}


# -- line and control characters, through LLVM's text route -----------------------------------------

# metadata name -> how ilasm's single-quoted identifier writes it
CONTROL_NAMES = {"a\tb": "a\\tb", "a\x01b": "a\\001b", "a\rb": "a\\rb", "a\x0bb": "a\\013b",
                 "a\x0cb": "a\\014b", "a\x1cb": "a\\034b", "a\x7fb": "a\x7fb", "a\x85b": "a\x85b",
                 "a\u2028b": "a\u2028b", "a\u2029b": "a\u2029b", "a\nb": "a\\nb", 'a"b\\c': 'a\\"b\\\\c'}


@pytest.fixture(scope="module")
def control_runs(tmp_path_factory) -> dict:
    """Methods named with line and control characters, each a try/finally and no filter: their
    objects are LLVM's assembler run on its own text (the route `names_unicode.il`'s
    localescape methods do not take)."""
    methods = "".join(f"""
  .method public static void '{spelled}'() cil managed
  {{
    .try {{
      call void [mscorlib]System.Console::WriteLine()
      leave.s OUT
    }} finally {{
      call void [mscorlib]System.Console::WriteLine()
      endfinally
    }}
  OUT:
    ret
  }}""" for spelled in CONTROL_NAMES.values())
    folder = tmp_path_factory.mktemp("control_names")
    source = folder / "control_names.il"
    source.write_text(".assembly extern mscorlib {}\n.assembly control_names {}\n"
                      f".class public auto ansi abstract sealed K extends [mscorlib]System.Object\n{{{methods}\n}}\n",
                      encoding="utf-8")
    asm = Assembly(assemble(source, folder, dll=True))
    rids = [rid for rid in asm.methods_with_il() if asm.body(rid).clauses]
    with CodegenPool(1) as pool:
        return {(run.il.body.name, opt): run for opt in OPT_LEVELS
                for run in Pipeline(asm, pool, opt=opt).run_many(rids)}


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_line_and_control_characters(control_runs, opt):
    """Python's str.splitlines() took U+0085, U+2028, U+2029, \\v, \\f and \\x1c inside a quoted
    symbol for line ends (the assembly text reader lost the function); a newline is the one
    character LLVM's text route cannot carry (printed `\\n`, assembled as those two characters),
    so the reader writes it as `\\n` itself and the symbol is the same on both routes."""
    assert sorted(n for n, o in control_runs if o == opt) == sorted(f"K::{n}" for n in CONTROL_NAMES)
    for name in CONTROL_NAMES:
        run = control_runs[f"K::{name}", opt]
        assert run.error is None and run.ok, (name, str(run.error))
        assert run.codegen.route == "assemble"
        parent = f"K::{name.replace(chr(10), chr(92) + 'n')}$0x{run.il.body.token:08X}"
        functions = [s.name for s in run.coff.functions_in(".text")]
        assert functions[0] == parent and run.image.parent == parent, name
        assert all(FUNCLET_NAME.fullmatch(f)["parent"] == parent for f in functions[1:]), name
        assert sorted(f.name for f in run.recovered.functions) == sorted(functions)


def test_program_output_on_coreclr(exe):
    proc = run_on_coreclr(exe)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == SOURCE.with_suffix(".expected").read_text(encoding="utf-8")
