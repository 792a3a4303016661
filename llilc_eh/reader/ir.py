"""A small textual LLVM IR writer: functions made of named blocks of instruction lines.

llvmlite's IR builder has no funclet pads (catchswitch, catchpad, cleanuppad, catchret,
cleanupret) and no operand bundles, which are the heart of the Windows EH model, so the
reader writes IR text itself and lets LLVM parse and verify it. Names are allocated from
counters in creation order, so the same IL gives byte-identical IR.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass
class Block:
    label: str
    lines: list[str] = field(default_factory=list)
    terminated: bool = False
    comment: str = ""

    def emit(self, line: str) -> None:
        assert not self.terminated, f"block {self.label} already terminated: {line}"
        self.lines.append(line)

    def terminate(self, line: str) -> None:
        self.emit(line)
        self.terminated = True


class Function:
    """One LLVM function under construction."""

    def __init__(self, name: str, ret: str, params: list[tuple[str, str]], attrs: str = "",
                 personality: str | None = None):
        self.name = name              # already an LLVM global (`@"..."` or `@name`)
        self.ret = ret
        self.params = params          # (type, %name)
        self.attrs = attrs
        self.personality = personality
        self.blocks: list[Block] = []
        self.allocas: list[str] = []  # hoisted into the entry block, before everything else
        self._values = 0
        self._labels: dict[str, int] = {}
        self.entry = self.new_block("entry")

    def value(self, hint: str = "v") -> str:
        self._values += 1
        return f"%{hint}{self._values}"

    def new_block(self, hint: str, comment: str = "") -> Block:
        n = self._labels.get(hint, 0)
        self._labels[hint] = n + 1
        block = Block(hint if n == 0 else f"{hint}.{n}", comment=comment)
        self.blocks.append(block)
        return block

    def alloca(self, name: str, ty: str, align: int = 8) -> str:
        self.allocas.append(f"  {name} = alloca {ty}, align {align}")  # indented: printed verbatim
        return name

    def text(self) -> str:
        params = ", ".join(f"{t} {n}" for t, n in self.params)
        pers = f" personality ptr {self.personality}" if self.personality else ""
        out = [f"define {self.ret} {self.name}({params}){(' ' + self.attrs) if self.attrs else ''}{pers} {{"]
        for i, b in enumerate(self.blocks):
            header = f"{b.label}:" + (f"  ; {b.comment}" if b.comment else "")
            out.append(header)
            if i == 0:
                out.extend(self.allocas)
            if b.lines:   # the block's lines, indented, as one string: a join, not a line at a time
                out.append("  " + "\n  ".join(b.lines))
        out.append("}")
        return "\n".join(out)


# The names LLVM prints unquoted (AsmWriter: no leading digit, only ASCII letters, digits, `-`,
# `.` and `_`; its lexer would also take `$`): `str.isalnum` is true of any Unicode letter or digit.
_UNQUOTED = re.compile(r"[-A-Za-z._][-A-Za-z0-9._]*\Z")
# What a quoted name may hold as it is: printable ASCII but `"` and `\\` (LLVM's `isPrint`).
_NEEDS_ESCAPE = re.compile(r'[^\x20\x21\x23-\x5B\x5D-\x7E]')
# Each byte as LLVM's printEscapedString writes it: `\\` doubled, other printable ASCII but `"`
# as it is, any other byte `\\XX`.
_BYTE_SPELLING = tuple("\\\\" if b == 0x5C else chr(b) if 0x20 <= b <= 0x7E and b != 0x22 else f"\\{b:02X}"
                       for b in range(256))


def quote_global(name: str) -> str:
    """`name` as an LLVM global, spelled as LLVM itself prints it: plain `@name` when LLVM prints
    it unquoted, else `@"..."` with every byte of its UTF-8 outside printable ASCII, and
    `"`, written `\\XX` (uppercase hex), and `\\` doubled.

    LLVM names are byte strings and its lexer reads `\\XX` as one byte (UnEscapeLexed), so the
    escapes are of UTF-8 *bytes*: one per code point (the old spelling) made `Ç` a lone 0xC7
    and `Ω` (`\\3A9`) the bytes `:9`. Distinct names give distinct spellings (a `\\` is always
    the start of an escape, so reading back is unambiguous) and LLVM reads back exactly `name`. Metadata
    names hold no lone surrogates (#Strings is decoded with replacement); one from elsewhere is
    written as its three bytes rather than raising here."""
    if _UNQUOTED.match(name):
        return f"@{name}"
    if not _NEEDS_ESCAPE.search(name):
        return f'@"{name}"'   # nothing to escape: most names (skips the escape a byte at a time)
    escaped = "".join(_BYTE_SPELLING[b] for b in name.encode("utf-8", "surrogatepass"))
    return f'@"{escaped}"'
