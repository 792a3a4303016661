"""What the null-check tests (test_null_checks.py, test_null_checks_adversarial.py) count, in
one place: the null checks the reader writes per method, and the control under which it writes
every one (its knowledge of non-null values forgotten at each check)."""

from __future__ import annotations

import re
from pathlib import Path

from llilc_eh.assembly.loader import Assembly
from llilc_eh.il.method import analyze
from llilc_eh.reader import opcodes
from llilc_eh.reader.jitee import JitEE
from llilc_eh.reader.translate import translate

_CHECK = re.compile(r"= icmp eq ptr (?:%[\w.]+|null), null\n")


def count_checks(exe: Path, namespace: str, names, per_result=None) -> dict[str, int]:
    """Null checks written per method (`namespace` + name); `per_result(result, checks)` is
    called with each ReaderResult for further assertions."""
    asm = Assembly(exe)
    ee = JitEE(asm)
    out = {}
    for name in names:
        result = translate(asm, analyze(asm.body(asm.find_method(namespace + name).rid)), ee)
        out[name] = len(_CHECK.findall(result.module))
        if per_result is not None:
            per_result(result, out[name])
    return out


def write_every_check(monkeypatch) -> None:
    """The control: `null_check` forgets what it knows before each check, so every dereference
    is checked -- the counts the tests expect are the reader's choice, not the program's shape."""
    original = opcodes.BlockTranslator.null_check

    def forgetful(self, obj):
        self.nonnull.clear()
        self.nonnull_slots.clear()
        return original(self, obj)

    monkeypatch.setattr(opcodes.BlockTranslator, "null_check", forgetful)
