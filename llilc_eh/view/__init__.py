"""The researcher's view of one method: every pipeline stage side by side, cross-referenced.

    view = build_view(run, names)        # a MethodRun (pipeline.py) → MethodView
    render_text(view, sections, ...)     # the terminal view (text.py)
    report(view, ...)                    # one JSON-ready dict (report.py)
    layout_svg(view)                     # the picture of the final layout (svg.py)
    emit(view, run, folder)              # every artifact as a file (emit.py)

`build_view` (method.py) computes the cross-references once, so that the text, the JSON and
the SVG can never disagree: which final range holds each clause's try, handler and filter,
which IL clause a native clause comes from, which primary a duplicate repeats, and the
disassembly of every range (capstone, Intel syntax, final offsets) with external call
targets named from the image's relocations and moved references from its fixups, and each
instruction marked with the clause events (try begins / ends, handler or filter begins)
that fall inside it.

Decisions:

* A try range is [call start + 1, return address + 1) (`clauses.generate`), so a try
  begins *inside* its first call instruction and ends inside the instruction after its last
  call. An event is attached to the instruction holding the byte it names: a begin to the
  instruction holding the start offset, an end to the instruction holding the last covered
  byte (end - 1: the covered return address). The lane of a clause then marks exactly the
  instructions whose bytes the runtime may look up in it.
* Everything but the timings is a function of the input (same input, same bytes): LLVM's
  output is deterministic, offsets are integers, no paths, dates or floats in the JSON.
  Timings appear only in the human text, in a final section that `--no-timings` omits,
  and in the JSON only when asked for.
* The section names are the `--stage` names: il, ir, funclets, image, clauses, unwind, and
  the fixed tail checks, timings.
"""

from .emit import emit
from .method import (
           ClauseRow,
           DisasmRange,
           Event,
           Insn,
           MethodView,
           RangeRow,
           build_view,
)
from .report import report
from .svg import layout_svg
from .text import SECTIONS, render_text

__all__ = ["SECTIONS", "ClauseRow", "DisasmRange", "Event", "Insn", "MethodView", "RangeRow", "build_view",
           "emit", "layout_svg", "render_text", "report"]
