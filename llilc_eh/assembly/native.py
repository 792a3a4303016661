"""Native EH clauses and native method layouts: what a CLR JIT hands the runtime.

A `NativeClause` is one CORINFO_EH_CLAUSE as the runtime stores it (ReadyToRun images
keep them verbatim, RyuJIT reports them through `setEHinfo`, our clause generator emits
them): code offsets relative to the method start, and — unlike IL clauses — *end* offsets
in the two fields the JIT interface calls "length". The binary layout is declared once, in
`structs.py` (`CorInfoEHClause`).

A `NativeMethod` is one compiled body: its main code range, the funclet ranges that follow
it, and its clauses. Both ReadyToRun's RyuJIT bodies and our own final images are described
this way, so one validator (`llilc_eh.clauses`) judges them all.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .structs import CorInfoEHClause


class ClauseFlags(enum.IntFlag):
    """CORINFO_EH_CLAUSE_FLAGS (corinfo.h)."""

    NONE = 0          # a typed catch
    FILTER = 0x1
    FINALLY = 0x2
    FAULT = 0x4
    DUPLICATED = 0x8  # the clause repeats an enclosing one for a funclet's code (CoreCLR x64)
    SAMETRY = 0x10    # NativeAOT: same try as the previous clause (mutual protection)

    @property
    def kind(self) -> str:
        """filter, finally, fault or catch, in that order of precedence. Read from the int
        value by a table of the three kind bits: the dispatch check asks it ~150 times per
        method, and IntFlag's `&` builds a new member each time (~3 us; measured 0.3 s of
        CoreLib's 689 methods under cProfile)."""
        return _KIND_OF_BITS[int(self) & 7]


_KIND_OF_BITS = tuple("filter" if bits & ClauseFlags.FILTER else "finally" if bits & ClauseFlags.FINALLY
                      else "fault" if bits & ClauseFlags.FAULT else "catch" for bits in range(8))
# plain ints: `int & member` would go through IntFlag's reflected `&` again
_CLONED_FINALLY_FLAGS = int(ClauseFlags.FINALLY | ClauseFlags.DUPLICATED)
_DUPLICATED, _FILTER = int(ClauseFlags.DUPLICATED), int(ClauseFlags.FILTER)


@dataclass(frozen=True)
class NativeClause:
    flags: ClauseFlags
    try_start: int
    try_end: int
    handler_start: int
    handler_end: int
    class_token_or_filter: int

    @property
    def kind(self) -> str:
        return self.flags.kind

    @property
    def is_duplicate(self) -> bool:
        return bool(int(self.flags) & _DUPLICATED)

    @property
    def is_cloned_finally(self) -> bool:
        """RyuJIT's marker for a finally cloned onto the normal path: FINALLY|DUPLICATED with an
        empty try at the "handler" (the call-finally code), as the runtime's IsClonedFinally
        (eexcp.h) recognises it. Not a duplicate clause, though it carries the flag."""
        return (int(self.flags) & _CLONED_FINALLY_FLAGS == _CLONED_FINALLY_FLAGS
                and self.try_start == self.try_end == self.handler_start)

    @property
    def filter_start(self) -> int | None:
        return self.class_token_or_filter if int(self.flags) & _FILTER else None

    @property
    def class_token(self) -> int | None:
        return self.class_token_or_filter if self.kind == "catch" else None

    @classmethod
    def parse(cls, data: bytes) -> "NativeClause":
        raw = CorInfoEHClause.parse(data)
        return cls(ClauseFlags(raw.flags), raw.try_start, raw.try_end, raw.handler_start,
                   raw.handler_end, raw.class_token_or_filter_offset)

    def build(self) -> bytes:
        return CorInfoEHClause.build(dict(flags=int(self.flags), try_start=self.try_start,
                                          try_end=self.try_end, handler_start=self.handler_start,
                                          handler_end=self.handler_end,
                                          class_token_or_filter_offset=self.class_token_or_filter))

    def __str__(self) -> str:
        flags = "|".join(f.name.lower() for f in ClauseFlags if f and f in self.flags) or "catch"
        tail = (f"filter {self.filter_start:#06x}" if self.filter_start is not None
                else f"class 0x{self.class_token_or_filter:08X}" if self.kind == "catch" else "")
        return (f"{flags:<18} try [{self.try_start:#06x}, {self.try_end:#06x})  "
                f"handler [{self.handler_start:#06x}, {self.handler_end:#06x})  {tail}").rstrip()


@dataclass(frozen=True)
class CodeRange:
    """[start, end) in bytes, relative to the method's main entry point."""

    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start

    def contains(self, offset: int) -> bool:
        return self.start <= offset < self.end


@dataclass(frozen=True)
class NativeMethod:
    """One compiled body: main code first, then its funclets, and its EH clauses."""

    main: CodeRange
    funclets: tuple[CodeRange, ...]
    clauses: tuple[NativeClause, ...]

    @property
    def code_size(self) -> int:
        return max([self.main.end, *(f.end for f in self.funclets)])
