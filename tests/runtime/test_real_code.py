"""What real code needs (issue 17 item 3), each a C# program under `llilc-eh run` whose output
must equal a RyuJIT-only run, with the methods that exercise the feature compiled by llilc-eh
(a declined method would run RyuJIT's code and pass in silence: the compiled set is asserted).

thread_statics.cs: [ThreadStatic] fields through the runtime's thread-static helpers
(CORINFO_HELP_GETSHARED_{GC,NONGC}THREADSTATIC_BASE with the module and class ids, the offset
from getFieldInfo) -- each of two threads sees its own values, the main thread the defaults,
references held only by thread statics survive forced collections with garbage in between.

synchronized.cs: [MethodImpl(Synchronized)] instance and static methods (with EH of their own:
altjit.c offers llilc-eh methods with IL clauses only) -- the JIT's own fault clause
(clauses/synchronized.py) and the monitor helpers (reader/synchronized.py): two threads racing
on a read-wait-write lose no update; an exception leaving the method releases the lock (another
thread gets it at once), also from a static method, whose lock is its class's.

real_code.cs: the audit of item 3's list -- interface dispatch, statics with class init, the
SysV struct ABI at the sizes sysv_structs.cs leaves out, P/Invoke through its stub, delegates,
localloc beside a catch and a finally, value-type `this`, ldtoken of System.Void and of open
generic types, the thread pool -- every method with EH of the program ours; under --all-eh also
CoreLib's StartupHookProvider::CallStartupHook (typeof(void): resolveToken refused it as a class
token, it is an ldtoken token) and ThreadPoolWorkQueue::Dispatch (it calls Unsafe.As<T>(object),
whose file IL only throws; the runtime's IL for it -- what runs when it is called -- returns).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llilc_eh.check.toolchain import compile_cs, run_on_coreclr

PROGRAMS_DIR = Path(__file__).resolve().parent / "programs"


CONTENTION = PROGRAMS_DIR / "shared" / "contention.cs"     # the two-thread harness of the synchronized programs


def _build(name: str, tmp_path_factory, *more: Path) -> Path:
    return compile_cs(PROGRAMS_DIR / f"{name}.cs", tmp_path_factory.mktemp(name) / f"{name}.exe", *map(str, more))


def _same_as_ryujit(run_captured, exe: Path, **kw):
    oracle = run_on_coreclr(exe)
    out = run_captured(exe, **kw)
    assert (out.stdout.decode(), out.exit_code) == (oracle.stdout, oracle.returncode), out.stderr.decode()[-3000:]
    return oracle, out


@pytest.fixture(scope="module")
def thread_statics(tmp_path_factory) -> Path:
    return _build("thread_statics", tmp_path_factory)


@pytest.mark.parametrize("opt", [0, 2])
def test_thread_statics_per_thread(run_captured, thread_statics, opt):
    oracle, out = _same_as_ryujit(run_captured, thread_statics, opt=opt)
    # the oracle says what per-thread means here: two threads, two sets of values, defaults on main
    assert "1: no throw | 1001 bbb1 10 100 pair! 1000 0.25 7 1+2 box1" in oracle.stdout
    assert "2: thrown2 ccc2 | 1102 ccc2 20 200 pair!! 2000 0.5 7 2+3 box2" in oracle.stdout
    assert "0: defaults: 0 True 0 0" in oracle.stdout and oracle.stdout.count("Holder cctor") == 1
    assert {c["method"] for c in out.report["compiled"]} >= {"TS::Work", "TS::Read"}
    assert not [d for d in out.report["declined"] if d["method"] in ("TS::Work", "TS::Read")]


@pytest.fixture(scope="module")
def synchronized(tmp_path_factory) -> Path:
    return _build("synchronized", tmp_path_factory, CONTENTION)


SYNCHRONIZED = {"Counter::Add", "Counter::Early", "Statics::Bump", "Statics::Throws"}


@pytest.mark.parametrize("opt, clone", [(2, False), (0, True)])
def test_synchronized_methods_hold_and_release_the_lock(run_captured, synchronized, opt, clone):
    oracle, out = _same_as_ryujit(run_captured, synchronized, opt=opt, clone_finally=clone)
    assert "instance race: 8000\nstatic race: 16000\n" in oracle.stdout     # no update lost under the lock
    assert "fail 5 held=True after=False\nother thread gets the instance lock: True" in oracle.stdout
    assert "static fault held in finally=True after=False\nother thread gets the static lock: True" in oracle.stdout
    compiled = {c["method"]: c for c in out.report["compiled"]}
    assert set(compiled) >= SYNCHRONIZED, out.report["declined"]
    # the JIT's fault is a funclet and a clause more than the IL has: Add's IL has one catch, its
    # table the catch, the fault and the fault's duplicate in the catch funclet (O2: a split try, 4)
    assert compiled["Counter::Add"]["clauses"] >= 3 and compiled["Statics::Throws"]["funclets"] == 2


def test_synchronized_negative_control_without_the_monitor_clause(run_captured, synchronized):
    """The same code with the JIT's fault clause left out of the installed table: the exception
    leaves Counter::Add holding the lock -- the program says so (after=True, the other thread
    times out), so the harness sees the clause at work."""
    out = run_captured(synchronized, damage="no-monitor-clause")
    text = out.stdout.decode()
    assert "fail 5 held=True after=True\nother thread gets the instance lock: False" in text, text
    assert {c["method"] for c in out.report["compiled"]} >= SYNCHRONIZED


@pytest.fixture(scope="module")
def real_code(tmp_path_factory) -> Path:
    return compile_cs(PROGRAMS_DIR / "real_code.cs", tmp_path_factory.mktemp("real_code") / "real_code.exe", "-unsafe")


REAL_CODE = {"Program::Dispatch", "Program::Statics", "Program::Structs", "Program::PInvoke", "Program::Delegates",
             "Program::Localloc", "Program::ValueThis", "Tally::Bump", "Program::Tokens", "Program::Pool",
             "Program::MB1", "Program::MB3", "Program::MI3", "Program::MDL", "Program::MLD", "Program::MFI",
             "Program::ML20"}


@pytest.mark.parametrize("opt", [0, 2])
def test_real_code_audit(run_captured, real_code, opt):
    oracle, out = _same_as_ryujit(run_captured, real_code, opt=opt)
    assert "n=6 last 25 finally p1=1" in oracle.stdout and "pid>0 True strlen 12" in oracle.stdout
    assert "Void IComparable`1<> IEquatable`1<> Dictionary`2<> Int32& True" in oracle.stdout
    assert {c["method"] for c in out.report["compiled"]} >= REAL_CODE, out.report["declined"]
    assert out.report["declined"] == []


FRAMEWORK = ["System.Threading.ThreadPoolWorkQueue::Dispatch", "System.StartupHookProvider::CallStartupHook"]


def test_framework_methods_the_audit_reaches(run_captured, real_code, monkeypatch):
    """--all-eh, bisected to the two CoreLib methods and two of the program's: all four ours, the
    output RyuJIT's (R2R off on both sides)."""
    monkeypatch.setenv("COMPlus_ReadyToRun", "0")
    oracle, out = _same_as_ryujit(run_captured, real_code, all_eh=True,
                                  only=FRAMEWORK + ["Program::Tokens", "Program::Pool"])
    assert {c["method"] for c in out.report["compiled"]} == set(FRAMEWORK) | {"Program::Tokens", "Program::Pool"}, \
        [d for d in out.report["declined"] if d["method"] in FRAMEWORK]


@pytest.fixture(scope="module")
def constrained(tmp_path_factory) -> Path:
    from llilc_eh.check.toolchain import assemble
    return assemble(PROGRAMS_DIR / "constrained.il", tmp_path_factory.mktemp("constrained"))


@pytest.mark.parametrize("opt", [0, 2])
def test_constrained_calls_as_ecma_says(run_captured, constrained, opt):
    """constrained.il: a value type's own method is called with the managed pointer -- its
    changes to `this` stay when it then throws (N=3; a boxed copy gave N=2) -- one without
    its own method, a primitive, an enum and a reference type (a null one throws inside the
    try) as RyuJIT runs them."""
    oracle, out = _same_as_ryujit(run_captured, constrained, opt=opt)
    assert oracle.stdout.startswith("bump failed N=3 Own(3)\n")
    assert "Plain 42 Green text\nfinally\nnull string" in oracle.stdout
    assert {c["method"] for c in out.report["compiled"]} == {"Program::Mutations", "Program::Others"}


def test_constrained_negative_control_boxes_every_call(run_captured, constrained):
    """The same code with every constrained-entry cell null (the box path taken): the mutation
    made before the throw is lost with the boxed copy -- the program says N=2."""
    out = run_captured(constrained, damage="constrained-boxed")
    assert out.stdout.decode().startswith("bump failed N=2 Own(2)\n"), out.stdout.decode()


@pytest.fixture(scope="module")
def nullable_box(tmp_path_factory) -> Path:
    return _build("nullable_box", tmp_path_factory)


NULLABLE_BOX = {"NullableBox::Box", "NullableBox::BoxPoint", "NullableBox::Describe", "NullableBox::Constrained",
                "NullableBox::Call", "NullableBox::Unboxed"}


def test_box_of_a_nullable_is_null_or_a_boxed_value(run_captured, nullable_box):
    """`box Nullable<T>` goes through CORINFO_HELP_BOX_NULLABLE (RyuJIT's getBoxHelper) and its
    result is not taken as non-null: a null box reaches a callvirt's null check (NRE caught)."""
    oracle, out = _same_as_ryujit(run_captured, nullable_box)
    assert "boxed none\nnull\nboxed 42\nSystem.Int32 42\nnull\nPoint (3,4)\n" in oracle.stdout
    assert "nre 12" in oracle.stdout and "9 -1 -2" in oracle.stdout
    assert {c["method"] for c in out.report["compiled"]} >= NULLABLE_BOX, out.report["declined"]


def test_box_of_a_nullable_calls_the_nullable_helper(nullable_box):
    """The reader's side: every box of a Nullable uses BOX_NULLABLE, none JIT_Box (which handles
    a Nullable too, in 3.1, but its result was taken as non-null); the control -- boxing the
    int32 for a constrained ToString still uses CORINFO_HELP_BOX."""
    from llilc_eh.assembly.loader import Assembly
    from llilc_eh.pipeline import Pipeline, eh_methods
    from llilc_eh.reader.translate import Options
    from llilc_eh.target import LINUX_X64
    asm = Assembly(nullable_box)
    pipeline = Pipeline(asm, None, options=Options(target=LINUX_X64), framework="netcore")
    helpers = {}
    for rid in eh_methods(asm):
        run = pipeline.front(rid)
        assert run.reader is not None, run.error
        helpers[asm.method(rid).name.split("::")[-1]] = run.reader.helper_calls
    for name in ("Box", "BoxPoint", "Call"):      # each boxes its Nullable argument once
        assert helpers[name].get("CORINFO_HELP_BOX_NULLABLE") == 1, (name, helpers[name])
    assert "CORINFO_HELP_BOX" not in helpers["BoxPoint"]      # (Box's int ToString boxes an int32: JIT_Box)
    assert helpers["Box"].get("CORINFO_HELP_BOX", 0) >= 1
