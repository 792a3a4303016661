"""The C alt JIT itself: it builds, exports what CoreCLR 3.1 looks up, answers the loader
with the JIT-EE version the 3.1.23 runtime checks, and its ICorJitCompiler has the 7 slots."""

from __future__ import annotations

import ctypes
import uuid

from llilc_eh.runtime import build
from llilc_eh.runtime.install import helper_numbers
from llilc_eh.runtime.jitinfo import slots

JIT_EE_VERSION = uuid.UUID("d609bed1-7831-49fc-bd49-b6f054dd4d46")


def test_builds_and_exports(altjit):
    lib = ctypes.CDLL(str(altjit))
    for name in ("jitStartup", "getJit", "llilc_call_trapped"):
        assert getattr(lib, name)        # AttributeError if not exported


def test_build_is_idempotent_and_keyed_by_source(altjit):
    assert build.ensure_built() == altjit
    assert build.built_path() == altjit
    assert build.SOURCE.read_bytes() and altjit.stat().st_size > 0


def test_getjit_answers_the_version_identifier(altjit):
    lib = ctypes.CDLL(str(altjit))
    lib.getJit.restype = ctypes.c_void_p
    compiler = lib.getJit()
    vtable = ctypes.cast(compiler, ctypes.POINTER(ctypes.POINTER(ctypes.c_void_p)))[0]
    get_version = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(vtable[4])
    guid = ctypes.create_string_buffer(16)
    get_version(compiler, guid)
    assert uuid.UUID(bytes_le=guid.raw) == JIT_EE_VERSION


class _JitInfo:
    """A stand-in ICorJitInfo with the two slots altjit.c's fast path calls: getMethodAttribs
    (slot 0, answering `attribs`, counting its calls) and runWithErrorTrap (slot 113, calling
    the function it is given). The real runtime's answers are tested by running programs
    (test_synchronized_plain.py); this checks the C path alone."""

    def __init__(self, attribs: int):
        self.calls = 0

        def get_method_attribs(this, ftn):
            self.calls += 1
            return attribs

        def run_with_error_trap(this, function, param):
            ctypes.CFUNCTYPE(None, ctypes.c_void_p)(function)(param)
            return 1

        self._slots = [ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p)(get_method_attribs),
                       ctypes.CFUNCTYPE(ctypes.c_uint8, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
                           run_with_error_trap)]
        self._vtable = (ctypes.c_void_p * 179)()
        self._vtable[0] = ctypes.cast(self._slots[0], ctypes.c_void_p).value
        self._vtable[113] = ctypes.cast(self._slots[1], ctypes.c_void_p).value
        self._object = ctypes.c_void_p(ctypes.addressof(self._vtable))

    @property
    def address(self) -> int:
        return ctypes.addressof(self._object)


def _compile_method(altjit):
    lib = ctypes.CDLL(str(altjit))
    lib.getJit.restype = ctypes.c_void_p
    compiler = lib.getJit()
    vtable = ctypes.cast(compiler, ctypes.POINTER(ctypes.POINTER(ctypes.c_void_p)))[0]
    compile_method = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                      ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p)(vtable[0])
    return lambda comp, info: compile_method(compiler, comp, ctypes.addressof(info), 0, None, None)


def test_compile_method_declines_a_method_without_eh_fast(altjit):
    """No EH clause, not synchronized and no selection by name: CORJIT_SKIPPED without touching
    Python (one getMethodAttribs asked)."""
    jit = _JitInfo(attribs=0x00000008)        # CORINFO_FLG_STATIC only
    info = (ctypes.c_uint8 * 256)()           # a CORINFO_METHOD_INFO with EHcount 0
    assert _compile_method(altjit)(jit.address, info) == 0x80000004
    assert jit.calls == 1


def test_compile_method_offers_a_synchronized_method_without_eh(altjit, tmp_path, monkeypatch):
    """CORINFO_FLG_SYNCH (0x20) with EHcount 0 goes past the fast decline to Python, which -- not
    configured here -- reports that it could not start (an event line) and skips the method:
    the proof that the C side did not decline it. Control: the same method with EH clauses
    also goes to Python without asking getMethodAttribs."""
    events = tmp_path / "events.jsonl"
    monkeypatch.setenv("LLILC_EH_EVENTS", str(events))
    monkeypatch.delenv("LLILC_EH_RUN_CONFIG", raising=False)
    jit = _JitInfo(attribs=0x00000020 | 0x00000008)
    info = (ctypes.c_uint8 * 256)()
    assert _compile_method(altjit)(jit.address, info) == 0x80000004
    assert jit.calls == 1
    assert '"event": "startup-failed"' in events.read_text()
    with_eh = _JitInfo(attribs=0)
    ctypes.c_uint32.from_buffer(info, 32).value = 1     # EHcount
    assert _compile_method(altjit)(with_eh.address, info) == 0x80000004
    assert with_eh.calls == 0


def test_slot_list_names_the_slots_we_call():
    s = slots()
    assert len(s) == 179
    assert (s["getMethodInfo"], s["resolveToken"], s["runWithErrorTrap"], s["getHelperFtn"], s["allocMem"],
            s["setEHinfo"], s["getJitFlags"]) == (3, 28, 113, 125, 161, 167, 178)


def test_helper_numbers_follow_corinfo_h():
    h = helper_numbers()
    assert h["CORINFO_HELP_UNDEF"] == 0 and h["CORINFO_HELP_COUNT"] == len(h) - 1
    # CorInfoHelpFunc v3.1.23: DIV=1 ... NEWFAST=30, NEWSFAST=31 (arithmetic helpers first)
    assert (h["CORINFO_HELP_DIV"], h["CORINFO_HELP_NEWFAST"], h["CORINFO_HELP_NEWSFAST"]) == (1, 30, 31)
