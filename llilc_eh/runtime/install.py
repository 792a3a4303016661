"""Compile one method with our pipeline and install it in the runtime (placeholder: target check)."""
from __future__ import annotations

from .service import Declined


def compile_and_install(service, jit, info, asm_name, token, name, entry_ptr, size_ptr) -> dict:
    try:
        from ..target import LINUX_X64  # noqa: F401
    except ImportError:
        raise Declined("linux-x64 target not available (llilc_eh.target has not landed)") from None
    raise Declined("install not written yet")
