"""One JIT-EE protocol, two implementations (issue 13 item 3): the metadata one the reader
asks in `translate`, the runtime one (`runtime/ee.py`, ICorJitInfo) it asks inside dotnet.

- both implementations define every question of the protocol themselves (no inherited
  placeholder answers None);
- in a run (`--jitee runtime`, the default) every layout question the reader asked for each
  compiled method is answered by both and they agree; each kind of question occurs (field
  offsets, value class, sizes, GC references, GC layout, SysV classification, method
  attributes); with the metadata offsets damaged in the comparison the reader's offset
  answers all differ; damaged before the reader asks (the negative control) the output stays
  RyuJIT's when the runtime answers and breaks when metadata does -- the reader builds on
  the runtime's answers;
- `--jitee metadata` gives the same output and records that metadata answered;
- the run binds references in .NET Core even for an assembly whose own choice would be Mono.
The comparison over every method of the suite is in test_run_il.py / test_run_cs.py
(`compare_jitee=True` on every run: the reader's questions included, all must agree).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llilc_eh.check.toolchain import compile_cs, run_on_coreclr
from llilc_eh.ee.protocol import LAYOUT_QUESTIONS, JitEEInterface, members
from llilc_eh.reader.jitee import JitEE
from llilc_eh.runtime.ee import RuntimeJitEE

PROGRAMS = Path(__file__).resolve().parent / "programs"
CS = Path(__file__).resolve().parent / "cs"
READER_QUESTIONS = {"field offset", "value class", "class size", "holds GC references", "GC layout",
                    "SysV classification", "method attributes"}


@pytest.mark.parametrize("impl", [JitEE, RuntimeJitEE])
def test_every_question_of_the_protocol_is_defined_by_each_implementation(impl):
    own = set()
    for cls in impl.__mro__:
        if cls in JitEEInterface.__mro__:       # the protocol and its bases: placeholders only
            continue
        own |= set(cls.__dict__)
    assert set(members()) <= own, set(members()) - own
    assert JitEEInterface in impl.__mro__     # declared, not merely shaped alike
    assert set(LAYOUT_QUESTIONS) <= set(members())


@pytest.fixture(scope="module")
def values_exe(tmp_path_factory) -> Path:
    return compile_cs(CS / "values.cs", tmp_path_factory.mktemp("jitee") / "values.exe")


@pytest.fixture(scope="module")
def returns_exe(tmp_path_factory) -> Path:
    return compile_cs(PROGRAMS / "returns.cs", tmp_path_factory.mktemp("jitee") / "returns.exe")


def test_runtime_answers_the_readers_layout_questions(returns_exe, values_exe, run_captured):
    seen = set()
    for exe in (returns_exe, values_exe):
        oracle = run_on_coreclr(exe)
        out = run_captured(exe, compare_jitee=True)
        assert (out.stdout.decode(), out.exit_code) == (oracle.stdout, oracle.returncode)
        assert out.report["declined"] == [] and out.report["compiled"]
        assert {c["jitee"] for c in out.report["compiled"]} == {"runtime"}
        asked = [a for a in out.report["jitee"] if a["source"] == "reader"]
        # every compiled method asked the runtime something (at least its own attributes)
        assert {a["method"] for a in asked} == {c["method"] for c in out.report["compiled"]}
        assert [a for a in asked if not a["agree"]] == []
        seen |= {a["question"] for a in asked}
    assert READER_QUESTIONS <= seen, READER_QUESTIONS - seen


def test_damaged_metadata_offsets_differ_and_the_code_takes_the_runtimes(values_exe, run_captured):
    """The negative control: metadata's field offsets shifted by 8 in the comparison -- every
    offset the reader asked now differs, and the output is unchanged, because the reader
    used the runtime's answer, not the metadata's."""
    good = run_captured(values_exe, compare_jitee=True)
    bad = run_captured(values_exe, compare_jitee=True, damage="jitee-field-offset")
    offsets = [a for a in bad.report["jitee"] if a["source"] == "reader" and a["question"] == "field offset"]
    assert offsets and not any(a["agree"] for a in offsets)
    assert bad.stdout == good.stdout


def test_metadata_jitee_is_still_a_choice(values_exe, run_captured):
    oracle = run_on_coreclr(values_exe)
    out = run_captured(values_exe, compare_jitee=True, jitee="metadata")
    assert (out.stdout.decode(), out.exit_code) == (oracle.stdout, oracle.returncode)
    assert {c["jitee"] for c in out.report["compiled"]} == {"metadata"}
    assert not [a for a in out.report["jitee"] if a["source"] == "reader"]     # nobody asked the runtime
    assert out.report["jitee"] and all(a["agree"] for a in out.report["jitee"])  # the IL scan still compares


MONO_ONLY = """
using System;
using System.Runtime.Remoting.Messaging;
static class P {
    static object Get() { try { return CallContext.LogicalGetData("k"); } catch (Exception) { return null; } }
    static void Main() { Console.WriteLine(Get() == null); }
}
"""


def test_the_run_binds_in_netcore_whatever_the_assembly_targets(tmp_path):
    """mcs targets Mono's mscorlib; an assembly naming a type .NET Core lacks would be bound in
    Mono by the metadata JIT-EE's own choice -- inside CoreCLR the service binds in .NET Core."""
    from llilc_eh.assembly.loader import Assembly
    from llilc_eh.runtime.service import RUN_FRAMEWORK, RunConfig, Service
    src = tmp_path / "mono_only.cs"
    src.write_text(MONO_ONLY)
    exe = compile_cs(src, tmp_path / "mono_only.exe")
    own_choice, why = JitEE(Assembly(exe)).framework
    assert own_choice.name == "mono", why           # the control: left alone, metadata picks Mono
    service = Service(RunConfig(program=str(exe), assembly="mono_only", search_dirs=[str(tmp_path)],
                                events=str(tmp_path / "events")), trampoline=None)
    ee = service.pipeline("mono_only").ee
    assert isinstance(ee, RuntimeJitEE)
    assert ee.framework[0].name == RUN_FRAMEWORK == "netcore"
    assert Service(RunConfig(program=str(exe), assembly="mono_only", search_dirs=[str(tmp_path)],
                             events=str(tmp_path / "events"), jitee="metadata"),
                   trampoline=None).pipeline("mono_only").ee.framework[0].name == "netcore"


def test_the_reader_builds_on_the_runtimes_answers(values_exe, run_captured):
    """The negative control that tells who answered: every instance field offset the metadata
    JIT-EE gives shifted by 8 *before the reader asks*. With the runtime answering the code is
    still right (the output is RyuJIT's, every offset question differs); with metadata
    answering the same damage breaks the program -- so the runtime's answers are the ones used,
    and this test could see it if they were not."""
    oracle = run_on_coreclr(values_exe)
    ours = run_captured(values_exe, compare_jitee=True, damage="metadata-field-offset")
    assert (ours.stdout.decode(), ours.exit_code) == (oracle.stdout, oracle.returncode)
    offsets = [a for a in ours.report["jitee"] if a["source"] == "reader" and a["question"] == "field offset"]
    assert offsets and not any(a["agree"] for a in offsets)
    broken = run_captured(values_exe, jitee="metadata", damage="metadata-field-offset")
    assert (broken.stdout.decode(), broken.exit_code) != (oracle.stdout, oracle.returncode)


def test_the_runtime_answers_what_metadata_cannot(tmp_path, run_captured):
    """An explicit-layout struct by value: metadata has no SysV classification for it (the
    reader refuses such methods when metadata answers), the runtime has one -- its methods are
    ours and print RyuJIT's output; the log says metadata had no answer (agree None), never
    that the two disagreed."""
    exe = compile_cs(PROGRAMS / "explicit_layout.cs", tmp_path / "explicit_layout.exe")
    oracle = run_on_coreclr(exe)
    ours = run_captured(exe, compare_jitee=True)
    assert (ours.stdout.decode(), ours.exit_code) == (oracle.stdout, oracle.returncode)
    assert {c["method"] for c in ours.report["compiled"]} == {"Explicit::Make", "Explicit::Sum"}
    assert [a for a in ours.report["jitee"] if a["agree"] is False] == []
    unanswered = {(a["question"], a["metadata"], tuple(a["runtime"])) for a in ours.report["jitee"]
                  if a["agree"] is None}
    assert ("SysV classification", None, ("i64", "i64")) in unanswered
    metadata = run_captured(exe, jitee="metadata")
    assert (metadata.stdout.decode(), metadata.exit_code) == (oracle.stdout, oracle.returncode)
    assert {d["method"] for d in metadata.report["declined"]} == {"Explicit::Make", "Explicit::Sum"}
    assert all("abi-unsupported" in d["reason"] for d in metadata.report["declined"])
