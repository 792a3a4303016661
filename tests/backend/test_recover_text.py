"""recover's reading of LLVM's assembly text: the plain line shapes it reads in one pass
(`recover._LINES`: instructions, directives, labels, the inline-asm brackets) mean what the
general statement path makes of the same lines. Why a test: those shapes are a speed cut, so
a shape that drifts from the general path would change recovery silently."""

from __future__ import annotations

import importlib

import pytest
from conftest import OPT_LEVELS

# the module, not the function `llilc_eh.backend.recover` the package exports under its name
recover = importlib.import_module("llilc_eh.backend.recover")


def general_path(text: str) -> str:
    """The same text with no line in a plain shape: a trailing comment sends every
    statement line through `_statements` (which drops it), so each is read by the general
    path. Whole-line comments (the markers) and blank lines stay as they are."""
    out = []
    for line in text.split("\n"):
        stripped = line.strip()
        out.append(line if not stripped or stripped.startswith("#") else f"{line}  # general")
    return "\n".join(out)


def shapes(text: str) -> dict[str, int]:
    """How many lines take each plain shape (and how many none)."""
    counts = {"instruction": 0, "directive": 0, "label": 0, "other": 0}
    for head, _, directive, _, label, _ in recover._LINES.findall(text):
        counts["instruction" if head else "directive" if directive else "label" if label else "other"] += 1
    return counts


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_plain_shapes_read_as_the_general_path(sample_compiled, opt):
    texts = [m.result.asm for m in sample_compiled[opt] if hasattr(m.result, "asm")]
    assert len(texts) == len(sample_compiled[opt])
    total = {"instruction": 0, "directive": 0, "label": 0}
    for text in texts:
        general = general_path(text)
        assert shapes(general)["instruction"] == shapes(general)["directive"] == shapes(general)["label"] == 0
        assert recover._text_items(text) == recover._text_items(general)
        for k in total:
            total[k] += shapes(text)[k]
    # every shape was exercised, and the general text really avoided them
    assert all(total.values()), total


def test_a_drifted_shape_is_seen(sample_compiled, monkeypatch):
    """Negative control: a plain shape that skips what the general path keeps (.p2align
    taken for a silent directive) makes the two readings differ."""
    text = next(m.result.asm for m in sample_compiled[0] if ".p2align" in getattr(m.result, "asm", ""))
    assert recover._text_items(text) == recover._text_items(general_path(text))
    monkeypatch.setattr(recover, "_SILENT", recover._SILENT | {".p2align"})
    assert recover._text_items(text) != recover._text_items(general_path(text))
