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


def test_compile_method_declines_a_method_without_eh_fast(altjit):
    """No EH clause and no selection by name: CORJIT_SKIPPED without touching Python."""
    lib = ctypes.CDLL(str(altjit))
    lib.getJit.restype = ctypes.c_void_p
    compiler = lib.getJit()
    vtable = ctypes.cast(compiler, ctypes.POINTER(ctypes.POINTER(ctypes.c_void_p)))[0]
    compile_method = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                      ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p)(vtable[0])
    info = (ctypes.c_uint8 * 256)()           # a CORINFO_METHOD_INFO with EHcount 0
    assert compile_method(compiler, None, ctypes.addressof(info), 0, None, None) == 0x80000004


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
