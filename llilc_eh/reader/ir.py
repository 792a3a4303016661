"""A small textual LLVM IR writer: functions made of named blocks of instruction lines.

llvmlite's IR builder has no funclet pads (catchswitch, catchpad, cleanuppad, catchret,
cleanupret) and no operand bundles, which are the heart of the Windows EH model, so the
reader writes IR text itself and lets LLVM parse and verify it. Names are allocated from
counters in creation order, so the same IL gives byte-identical IR.
"""

from __future__ import annotations

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


def quote_global(name: str) -> str:
    """`@"name"` with LLVM's escapes for `"` and `\\`; plain `@name` when it needs none."""
    if name.replace("_", "a").replace(".", "a").replace("$", "a").isalnum() and not name[0].isdigit():
        return f"@{name}"
    if name.isascii() and name.isprintable() and '"' not in name and "\\" not in name:
        return f'@"{name}"'   # nothing to escape: most names (skips the escape a character at a time)
    escaped = "".join(f"\\{ord(ch):02X}" if ch in '"\\' or not 32 <= ord(ch) < 127 else ch for ch in name)
    return f'@"{escaped}"'
