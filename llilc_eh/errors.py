"""Errors are values with a reason and a location.

Every stage raises its own subclass of `LlilcEhError`; the batch drivers catch that one
type, record it and go on with the next method. The message always names where the
problem is (`method 0x06001234 Ns.Type::Name, IL_0042: leave into a handler`) so that
a researcher can find it without a debugger.
"""

from __future__ import annotations


class LlilcEhError(Exception):
    """Base of every error the pipeline reports about its input."""

    stage = "llilc-eh"

    def __init__(self, reason: str, *, method: str | None = None, offset: int | None = None,
                 kind: str | None = None):
        self.reason = reason
        self.method = method
        self.offset = offset
        # A short stable name for grouping failures in reports (e.g. "bad-method-header").
        self.kind = kind or type(self).__name__
        super().__init__(self.describe())

    def describe(self) -> str:
        where = []
        if self.method:
            where.append(f"method {self.method}")
        if self.offset is not None:
            where.append(self.offset_text())
        prefix = ", ".join(where)
        return f"{prefix}: {self.reason}" if prefix else self.reason

    def offset_text(self) -> str:
        """How `offset` reads in a message; stages whose offsets are not IL offsets say so."""
        return f"IL_{self.offset:04x}"

    def with_method(self, method: str) -> LlilcEhError:
        """Attach the method name when a lower layer did not know it."""
        if not self.method:
            self.method = method
            self.args = (self.describe(),)
        return self

    def for_method(self, method: str) -> LlilcEhError:
        """Name the method as the caller knows it (token and IL name), replacing what a lower
        layer wrote (the backend and clause stages know only the LLVM symbol)."""
        self.method = method
        self.args = (self.describe(),)
        return self

    def as_dict(self) -> dict:
        return {"stage": self.stage, "kind": self.kind, "method": self.method,
                "offset": self.offset, "reason": self.reason}


class AssemblyError(LlilcEhError):
    """The file, its metadata or a method body cannot be read."""

    stage = "assembly"


class ILError(LlilcEhError):
    """The IL stream or its EH structure violates ECMA-335."""

    stage = "il"


class ReaderError(LlilcEhError):
    """The reader cannot translate a method, or the LLVM module it produced is not sound."""

    stage = "reader"


class BackendError(LlilcEhError):
    """LLVM cannot compile a method (an abort, a hang, a rejected module), or what it produced
    cannot be read back (COFF, unwind data, LLVM's CLR EH table, the assembly text)."""

    stage = "backend"

    def offset_text(self) -> str:
        # Our offsets are byte offsets into the object's sections or the code, not IL offsets.
        return f"+0x{self.offset:x}"


class FuncletError(LlilcEhError):
    """The module cannot be read into a funclet model (unparsable, parent missing, ...)."""

    stage = "funclets"


class ClauseError(LlilcEhError):
    """No sound clause table can be made for a method: the funclet model and the placed code
    disagree (a call reaches a handler that has no code, merged calls with different
    dispatch chains, a funclet whose machine code cannot be identified, ...)."""

    stage = "clauses"

    def offset_text(self) -> str:
        # Code offsets from the method's start, not IL offsets.
        return f"+0x{self.offset:x}"
