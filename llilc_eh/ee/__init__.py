"""The JIT-EE interface the reader asks: one protocol (`protocol.JitEEInterface`), two
implementations chosen by the caller -- from metadata (`llilc_eh.reader.jitee.JitEE`) and
from the live runtime (`llilc_eh.runtime.ee.RuntimeJitEE`, inside dotnet only)."""

from .protocol import LAYOUT_QUESTIONS, JitEEInterface

__all__ = ["LAYOUT_QUESTIONS", "JitEEInterface"]
