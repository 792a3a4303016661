"""`llilc-eh translate`: the side-by-side view of one method through the whole pipeline.

The view's claims are checked against the artifacts themselves: the clause list against the
bytes it says it decodes from, the layout against the code bytes, the unwind records against
unwind.bin, the picture against the ranges; and same input, same bytes.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from llilc_eh import cli
from llilc_eh.backend.coff import CoffObject
from llilc_eh.clauses.generate import decode_clauses
from llilc_eh.errors import BackendError
from llilc_eh.unwind import decode_unwind_info, encode_unwind_info

FILTER = "Tests.CatchAndFilter.Program::CatchFilterCatch"           # catch, filter, catch on one try
TRY_IN_CATCH = "Tests.TryInCatch.Program::Nested"                   # a try/finally inside a catch
FINALLY = "Tests.FinallyTwoTargets.Program::TwoTargets"              # one finally, two leave targets
DEFAULT = cli.DEFAULT_METHOD                                          # filter, finallys, nested tries
SECTIONS = ("=== il", "=== ir", "=== funclets", "=== image", "=== clauses", "=== unwind", "=== checks")
SVG = "{http://www.w3.org/2000/svg}"


def llilc(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llilc_eh.cli", *args], capture_output=True, text=True,
                          timeout=300, check=False, cwd=cwd)


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def only_method(text: str) -> dict:
    """The one method document of a `--json` print ({"command", "assembly", "methods": [...]})."""
    doc = json.loads(text)
    assert doc["command"] == "translate" and len(doc["methods"]) == 1
    return doc["methods"][0]


@pytest.fixture(scope="module")
def reports():
    """The --json report of each test method, computed once."""
    out = {}
    for method in (FILTER, TRY_IN_CATCH, FINALLY, DEFAULT):
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            assert cli.main(["translate", "--method", method, "--json"]) == 0
        out[method] = only_method(text.getvalue())
    return out


# --------------------------------------------------------------------------------------------
# the text view


@pytest.mark.parametrize("method", [FILTER, TRY_IN_CATCH, FINALLY])
def test_text_view_has_every_section_in_pipeline_order(capsys, reports, method):
    rc, out, err = run_main(capsys, "translate", "--method", method)
    assert rc == 0, err
    where = [out.index(s) for s in (*SECTIONS, "=== timings")]
    assert where == sorted(where)
    js = reports[method]
    assert js["ok"] and js["error"] is None
    # the image section opens each range's disassembly at the range's offsets, and every
    # instruction of the report is printed at its address
    for r in js["image"]["ranges"]:
        assert f"-- range {r['index']} [{r['start']:#06x}, {r['end']:#06x}) {r['kind']}, funclet {r['funclet']}" in out
    image = out[out.index("=== image"):out.index("=== clauses")]
    for d in js["image"]["disassembly"]:
        for insn in d["instructions"]:
            assert f"   {insn['address']:#06x}  " in image
    # one clause line per clause, naming the range kinds of its try and handler
    table = out[out.index("=== clauses"):out.index("=== unwind")].splitlines()
    for c in js["clauses"]["clauses"]:
        line = next(x for x in table if x.startswith(f" {c['index']:>2}  "))
        handler = js["image"]["ranges"][c["handler_range"]]
        assert f"range {handler['index']} {handler['kind']} f{handler['funclet']}" in line
        assert f"[{c['try'][0]:#06x}, {c['try'][1]:#06x})" in line
        assert ("DUPLICATE of #" in line) == c["duplicate"]
    assert "validator (coreclr-psp): clean" in out and "image verify: clean" in out
    assert "clauses.bin decodes back to the table: yes" in out


def test_disassembly_marks_try_and_handler_starts_with_clause_numbers(reports):
    js = reports[DEFAULT]
    insns = [i for d in js["image"]["disassembly"] for i in d["instructions"]]
    for c in js["clauses"]["clauses"]:
        begins = [i for i in insns for e in i["events"] if e["clause"] == c["index"] and e["event"] == "try-begin"]
        ends = [i for i in insns for e in i["events"] if e["clause"] == c["index"] and e["event"] == "try-end"]
        handler = [i for i in insns for e in i["events"]
                   if e["clause"] == c["index"] and e["event"] == "handler-begin"]
        assert len(begins) == len(ends) == len(handler) == 1
        start, end = c["try"]
        # the instruction holding the try's first byte, the one holding its last covered byte
        assert begins[0]["address"] <= start < begins[0]["address"] + len(begins[0]["bytes"]) // 2
        assert ends[0]["address"] <= end - 1 < ends[0]["address"] + len(ends[0]["bytes"]) // 2
        assert handler[0]["address"] == c["handler"][0]
    # external call targets are named from the image's relocations
    calls = [i for i in insns if i["mnemonic"] == "call"]
    assert calls and all(not i["operands"].startswith("0x") for i in calls)
    assert any(i["operands"] == "CORINFO_HELP_THROW" for i in calls)


def test_default_view_shows_filter_finally_nested_handlers_and_duplicates(reports):
    js = reports[DEFAULT]
    kinds = {c["kind"] for c in js["clauses"]["clauses"]}
    assert {"filter", "finally", "catch"} <= kinds
    assert any(c["duplicate"] for c in js["clauses"]["clauses"])
    funclets = js["funclets"]["funclets"]
    assert any(f["parent"] not in (None, 0) for f in funclets)          # a funclet nested in a funclet
    # the filter sits immediately before its handler in the final image
    ranges = js["image"]["ranges"]
    for c in js["clauses"]["clauses"]:
        if c["filter"] is not None:
            f = ranges[c["filter_range"]]
            assert f["kind"] == "filter" and f["start"] == c["filter"][0]
            assert ranges[f["index"] + 1]["start"] == c["handler"][0] == c["filter"][1]


# --------------------------------------------------------------------------------------------
# JSON


@pytest.mark.parametrize("method", [FILTER, TRY_IN_CATCH, FINALLY, DEFAULT])
def test_json_clauses_decode_back_from_their_hex(reports, method):
    js = reports[method]
    clauses = js["clauses"]["clauses"]
    decoded = decode_clauses(bytes.fromhex(js["clauses"]["hex"]))
    assert [(int(c.flags), c.try_start, c.try_end, c.handler_start, c.handler_end, c.class_token_or_filter)
            for c in decoded] == \
        [(c["flags"], *c["try"], *c["handler"], c["class_token_or_filter"]) for c in clauses]
    ranges = js["image"]["ranges"]
    for c in clauses:
        handler = ranges[c["handler_range"]]
        assert (handler["start"], handler["end"]) == tuple(c["handler"])
        holder = ranges[c["try_range"]]
        assert holder["start"] <= c["try"][0] < c["try"][1] <= holder["end"]
        if c["duplicate"]:
            primary = clauses[c["duplicate_of"]]
            assert not primary["duplicate"] and primary["handler"] == c["handler"]
    il = js["il"]["clauses"]
    assert {c["il_clause"] for c in clauses} <= {c["index"] for c in il}


def test_json_unwind_records_are_the_bytes_of_unwind_data(reports):
    js = reports[DEFAULT]
    blob = bytes.fromhex(js["unwind"]["hex"])
    kinds = [r["kind"] for r in js["unwind"]["records"]]
    assert kinds[0] == "ROOT" and "FILTER" in kinds and "HANDLER" in kinds
    for rec, rf in zip(js["unwind"]["records"], js["image"]["runtime_functions"], strict=True):
        assert rec["offset"] == rf["unwind"] and [rec["start"], rec["end"]] == [rf["begin"], rf["end"]]
        data = bytes.fromhex(rec["hex"])
        assert blob[rec["offset"]:rec["offset"] + len(data)] == data
        info = decode_unwind_info(blob, rec["offset"])
        assert encode_unwind_info(info) == data and info.prolog_size == rec["prolog_size"]
        assert [op["op"] for op in rec["codes"]] == [op.op.name for op in info.codes]


def test_json_is_deterministic_and_timings_only_on_request(capsys):
    rc, first, _ = run_main(capsys, "translate", "--method", FINALLY, "--json")
    assert rc == 0
    rc, second, _ = run_main(capsys, "translate", "--method", FINALLY, "--json")
    assert first == second and "timings" not in only_method(first)
    rc, timed, _ = run_main(capsys, "translate", "--method", FINALLY, "--json", "--timings")
    assert set(only_method(timed)["timings"]) >= {"il", "reader", "codegen", "clauses"}


def test_profiles_and_opt_levels(capsys):
    rc, out, err = run_main(capsys, "translate", "--opt", "0", "--profile", "nativeaot", "--json")
    assert rc == 0, err
    js = only_method(out)
    assert js["options"] == {"opt": 0, "profile": "nativeaot", "clone_finally": False}
    assert js["method"]["name"] == DEFAULT and js["clauses"]["profile"] == "nativeaot"
    assert not any(c["duplicate"] for c in js["clauses"]["clauses"])      # NativeAOT: no duplicates
    rc, out, err = run_main(capsys, "translate", "--method", FINALLY, "--clone-finally", "--json", "--stage", "ir")
    assert rc == 0, err
    assert only_method(out)["selector_cases"] == {}                        # a copy per leave: no selectors


# --------------------------------------------------------------------------------------------
# files


def test_emit_dir_writes_every_artifact_consistently(tmp_path, capsys):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "rodata.bin").write_bytes(b"from an earlier run")
    rc, out, err = run_main(capsys, "translate", "--emit-dir", str(folder), "--json")
    assert rc == 0, err
    js = only_method(out)
    names = {p.name for p in folder.iterdir()}
    assert names == {"method.ll", "method.obj", "method.s", "image.bin", "clauses.bin", "pdata.bin", "unwind.bin",
                     "unwind.json", "report.json", "layout.svg"}          # no read-only data in this method
    assert json.loads((folder / "report.json").read_text()) == js
    assert (folder / "clauses.bin").read_bytes() == bytes.fromhex(js["clauses"]["hex"])
    image = (folder / "image.bin").read_bytes()
    assert len(image) == js["image"]["code_size"] and image.hex() == js["image"]["code"]
    assert (folder / "method.ll").read_text() == js["ir"]["module"]
    coff = CoffObject.parse((folder / "method.obj").read_bytes())
    assert coff.section(".text").data
    assert "llilc.callsite" in (folder / "method.s").read_text()
    ranges = js["image"]["ranges"]
    assert len((folder / "pdata.bin").read_bytes()) == 12 * len(ranges)
    unwind = (folder / "unwind.bin").read_bytes()
    assert unwind.hex() == js["unwind"]["hex"]
    records = json.loads((folder / "unwind.json").read_text())
    assert [(r["kind"], r["range"], r["start"], r["end"]) for r in records] == \
        [(r["unwind_kind"], r["index"], r["start"], r["end"]) for r in ranges]
    for r in records:
        assert decode_unwind_info(unwind, r["offset"]).size == r["size"]
    svg = ET.parse(folder / "layout.svg").getroot()
    boxes = [e for e in svg.iter(f"{SVG}rect") if e.get("class") == "range"]
    assert [(int(e.get("data-range")), int(e.get("data-funclet"))) for e in boxes] == \
        [(r["index"], r["funclet"]) for r in ranges]
    tries = [e for e in svg.iter(f"{SVG}rect") if (e.get("class") or "").startswith("try")]
    assert len(tries) == len(js["clauses"]["clauses"])
    assert sum("duplicate" in e.get("class") for e in tries) == sum(c["duplicate"] for c in js["clauses"]["clauses"])


def test_svg_option_writes_the_same_picture(tmp_path, capsys):
    rc, _, err = run_main(capsys, "translate", "--method", FILTER, "--svg", str(tmp_path / "a.svg"),
                          "--emit-dir", str(tmp_path / "d"), "--stage", "clauses")
    assert rc == 0, err
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "d" / "layout.svg").read_bytes()
    ET.parse(tmp_path / "a.svg")


def test_two_runs_give_byte_identical_outputs(tmp_path):
    outs = []
    for n in (1, 2):
        proc = llilc("translate", "--method", TRY_IN_CATCH, "--no-timings", "--emit-dir", str(tmp_path / f"d{n}"))
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout)
    assert outs[0] == outs[1] and "=== timings" not in outs[0] and "=== unwind" in outs[0]
    files = sorted(p.name for p in (tmp_path / "d1").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "d2").iterdir())
    for name in files:
        assert (tmp_path / "d1" / name).read_bytes() == (tmp_path / "d2" / name).read_bytes(), name


# --------------------------------------------------------------------------------------------
# stages, defaults, errors


def test_stage_ir_still_prints_only_the_module(capsys):
    rc, out, err = run_main(capsys, "translate", "--method", FILTER, "--stage", "ir")
    assert rc == 0, err
    assert out.startswith("; llilc-eh reader:") and "===" not in out and "push" not in out
    assert "catchswitch within none [label %catch0, label %filter-handler1, label %catch2]" in out
    rc, out, err = run_main(capsys, "translate", "--method", FINALLY, "--stage", "ir", "--json")
    js = only_method(out)
    assert list(js["selector_cases"].values()) == [2] and js["cleanuppads"] == 1 and js["module"].startswith(";")


def test_single_stages_print_only_their_section(capsys):
    rc, out, _ = run_main(capsys, "translate", "--stage", "clauses")
    assert rc == 0 and "===" not in out and "DUPLICATE of #1" in out and "encoded (clauses.bin" in out
    rc, out, _ = run_main(capsys, "translate", "--stage", "unwind")
    assert rc == 0 and "===" not in out and "ROOT" in out and "FILTER" in out
    rc, out, _ = run_main(capsys, "translate", "--stage", "funclets")
    assert rc == 0 and "layout (final image order)" in out and "push" not in out
    rc, out, _ = run_main(capsys, "translate", "--stage", "il")
    assert rc == 0 and "filter { // #3" in out and "define" not in out


def test_bare_command_is_the_translate_view_of_the_default_method():
    bare = llilc()
    assert bare.returncode == 0, bare.stderr
    assert f"llilc-eh translate: 0x06000062 {DEFAULT}" in bare.stdout
    assert all(s in bare.stdout for s in SECTIONS) and "=== timings" in bare.stdout
    explicit = llilc("translate")
    cut = "=== timings"
    assert explicit.stdout[:explicit.stdout.index(cut)] == bare.stdout[:bare.stdout.index(cut)]


def test_bad_method_name_is_an_error_naming_it():
    proc = llilc("translate", "--method", "Tests.Nope::Nothing")
    assert proc.returncode == 1
    assert "Tests.Nope::Nothing" in proc.stderr and "Traceback" not in proc.stderr


def test_a_failing_stage_prints_what_came_before_and_the_error(capsys, monkeypatch):
    def refuse(*_args, **_kw):
        raise BackendError("no room for the funclets", kind="relink", offset=0x12)

    monkeypatch.setattr("llilc_eh.pipeline.link_final_image", refuse)
    rc, out, err = run_main(capsys, "translate", "--no-timings")
    assert rc == 2                                      # ran, and a stage failed
    for s in ("=== il", "=== ir", "=== funclets", "=== checks", "=== error"):
        assert s in out
    assert "=== image" not in out and "=== clauses" not in out
    error = out[out.index("=== error"):]
    assert "stage backend, kind relink" in error and "offset +0x12" in error and DEFAULT in error
    assert "llilc-eh: error: [backend/relink]" in err and DEFAULT in err and "no room for the funclets" in err
    rc, out, err = run_main(capsys, "translate", "--json")
    js = only_method(out)
    assert rc == 2 and js["error"]["kind"] == "relink" and js["error"]["offset"] == 0x12
    assert js["image"] is None and js["clauses"] is None and js["ir"]["module"]


# --------------------------------------------------------------------------------------------
# linux-x64: what the code holds besides its ranges


def test_linux_view_shows_target_cells_externals_and_the_stack_probe(tmp_path, capsys):
    """A 12000-byte frame makes LLVM's prolog call our stack probe routine, which the final
    image places after the ranges; the view used to count it as int3 padding. Now every byte of
    the code is a range, int3 padding or the probe routine, and the probe is disassembled."""
    from llilc_eh.check.toolchain import assemble
    src = tmp_path / "frame.il"
    src.write_text(r"""
.assembly extern mscorlib {}
.assembly frame {}
.class public sequential ansi sealed beforefieldinit Big extends [mscorlib]System.ValueType
{ .pack 1 .size 12000 .field public int32 A }
.class public auto ansi beforefieldinit P extends [mscorlib]System.Object
{
  .method public static int32 Frame() cil managed
  { .maxstack 2 .locals init (valuetype Big b)
    .try { ldstr "x" call void P::F(string) ldloca.s b ldfld int32 Big::A leave.s done }
    finally { ldstr "y" call void P::F(string) endfinally }
    done: ldc.i4.0 ret }
  .method public static void F(string s) cil managed { ret }
}
""")
    dll = str(assemble(src, tmp_path, dll=True))
    rc, out, _ = run_main(capsys, "translate", dll, "--method", "P::Frame", "--target", "linux-x64",
                          "--stage", "image", "--no-timings")
    assert rc == 0, out
    assert " target: linux-x64" in out
    assert "-- stack probe routine [" in out and "test qword ptr [r11], r11" in out
    assert " data cells (8 bytes each" in out and "str:0x70000001" in out
    assert "external symbols (reader/externals.py):" in out and "2 string" in out
    assert "(our stack probe routine, in no range)" in out and "(data cell str:0x70000001, read-only data)" in out
    # every byte accounted for: the ranges + int3 padding + the probe routine = the code size
    doc = only_method(llilc("translate", dll, "--method", "P::Frame", "--target", "linux-x64", "--json").stdout)
    image = doc["image"]
    int3 = sum(int(x.split(" bytes of int3")[0].rsplit(" ", 1)[-1]) for x in out.splitlines() if "bytes of int3" in x)
    probe = next(x for x in out.splitlines() if x.startswith("-- stack probe routine"))
    p, q = (int(v, 16) for v in probe.split("[")[1].split(")")[0].split(", "))
    assert q - p == 32 and int3 == image["padding"] and image["stack_probe"] == [p, q]
    assert image["target"] == "linux-x64" and [c["symbol"] for c in image["cells"]] == ["str:0x70000001",
                                                                                      "str:0x70000005"]
    assert sum(r["end"] - r["start"] for r in image["ranges"]) + int3 + (q - p) == image["code_size"]


def test_win_view_has_no_probe_routine(capsys):
    """Negative control: win-x64 calls __chkstk (an external), the view shows no routine."""
    rc, out, _ = run_main(capsys, "translate", "--method", DEFAULT, "--stage", "image", "--no-timings")
    assert rc == 0 and " target: win-x64" in out and "stack probe routine" not in out
