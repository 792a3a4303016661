"""What the reader knows about its module's EH structure, handed to the later stages as data.

The reader writes IR text for LLVM (`reader/ir.py`), but some facts it decides have no place
in the IR: which IL clause a pad is the handler of, which IL instruction a call was
translated from. They used to travel as IR comments (`; IL clause #k` on a pad's block,
`; IL_xxxx:` before each IL instruction) that LLVM's printer drops, so the funclet model
re-read the reader's text, split it into functions, blocks and instructions a second time
and matched it to LLVM's print by position. Now the reader records them here as it emits
the pads and the calls, and the funclet model looks them up by name: a pad by its token
name (`%cp3`), a call by its call-site marker (`"# llilc.callsite N"`, the identity that
also finds the call in LLVM's machine code, DESIGN decision 8). The comments stay in the
text for whoever reads the IR; nothing parses them.

Each entry also says where in the IR the reader put the thing and how (a pad's block and
kind; a call's block, callee, funclet bundle and unwind destination), so that the funclet
lint (`reader.lint`, rule `reader-table`) can hold the table to the module LLVM parsed: a
table that does not describe its IR, or IR that does not match its table, is a finding,
not a silently wrong clause or IL offset.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

# The identities the reader writes into the IR as inline-asm comments (zero bytes of code):
# they survive LLVM's optimiser and printer and reappear in its assembly text, where recovery
# finds the calls and pads again. Declared here, with the table that names them.
CALLSITE_MARKER = "llilc.callsite"  # the inline-asm comment before every call (`Translator.call`)
PAD_MARKER = "llilc.pad"            # the inline-asm comment right after every pad (`Translator.pad_marker`)

#: the markers as LLVM prints them in IR (`call void asm sideeffect "# llilc.callsite 7", ""()`)
CALLSITE_IN_IR = re.compile(r'\basm\b[^"]*"# ' + re.escape(CALLSITE_MARKER) + r' (\d+)"')
PAD_IN_IR = re.compile(r'\basm\b[^"]*"# ' + re.escape(PAD_MARKER) + r' (\d+)"')


@dataclass(frozen=True)
class PadEntry:
    """A catchpad or cleanuppad the reader emitted (one per copy of a handler)."""

    name: str           # its token as LLVM prints it (`%cp3`)
    block: str          # the block it opens (`%catch0.c2`)
    kind: str           # catch | filter-handler | finally | fault (the IL handler region's kind)
    clause: int         # the IL clause it is the handler of
    marker: int         # its pad marker N (emitted only with Options.pad_markers)


@dataclass(frozen=True)
class CallEntry:
    """A call or invoke the reader emitted through `Translator.call` (every call but LLVM
    intrinsics and the zero-byte markers), named by its call-site marker."""

    function: str               # the LLVM function (`@"..."` as the reader writes it)
    callsite: int               # N of the `"# llilc.callsite N"` marker right before it
    block: str                  # the block that holds marker and call
    il_offset: int | None       # the IL instruction it was translated from (None: the method's
                                # prolog, e.g. a parameter copy in the entry block)
    callee: str                 # `@name` or the `%value` of an indirect call
    unwind: str | None          # an invoke's unwind destination (a pad block); None: a call
    funclet: str | None         # the pad its funclet bundle names; None: no bundle


@dataclass(frozen=True)
class ReaderTable:
    """The side table of one reader module: its pads and calls, in emission order."""

    parent: str
    pads: tuple[PadEntry, ...] = ()
    calls: tuple[CallEntry, ...] = ()

    @cached_property
    def pad_by_name(self) -> dict[str, PadEntry]:
        return {p.name: p for p in self.pads}

    @cached_property
    def call_by_marker(self) -> dict[tuple[str, int], CallEntry]:
        """(function, call-site marker N) -> the call."""
        return {(c.function, c.callsite): c for c in self.calls}


__all__ = ["CallEntry", "PadEntry", "ReaderTable"]
