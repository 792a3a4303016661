"""The final layout as an SVG picture, written by hand (plain SVG 1.1 text, deterministic).

    layout_svg(view) -> str

From top to bottom: a title; an axis of image offsets; the code bar -- one box per range
(main body, each handler funclet, each filter) at its offsets, coloured by kind and
labelled with range index, kind, funclet index and [start, end), the int3 padding between
ranges hatched; then one lane per clause, in table order: its try range as a solid bar, its
handler range (and a filter's filter range) as outlined boxes, and an arrow from the try to
where the runtime goes next (the filter, else the handler). Duplicate clauses are drawn
dashed and hatched. Dotted guides drop from every range boundary through the lanes; a key
lists the ranges whose boxes are too narrow for their labels; a legend ends the picture.

Elements carry a class (`range`, `padding`, `try`, `handler`, `filter`, `arrow`, ...) so a
test or a stylesheet can find them: there is exactly one `rect.range` per range.
"""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from ..funclets.model import FuncletKind
from .method import ClauseRow, MethodView

KIND_COLORS = {
    FuncletKind.ROOT: "#a9bcd0",
    FuncletKind.CATCH: "#f4a261",
    FuncletKind.FILTER_HANDLER: "#e9c46a",
    FuncletKind.FILTER: "#8ecae6",
    FuncletKind.FINALLY: "#90be6d",
    FuncletKind.FAULT: "#e76f51",
}
CLAUSE_COLORS = {"catch": KIND_COLORS[FuncletKind.CATCH], "filter": KIND_COLORS[FuncletKind.FILTER_HANDLER],
                 "finally": KIND_COLORS[FuncletKind.FINALLY], "fault": KIND_COLORS[FuncletKind.FAULT]}

LEFT = 250              # lane labels
RIGHT = 30
CHAR = 6.7              # width of one character of the 11px monospace font
MIN_BOX = 64.0          # the narrowest range gets at least this many pixels, if the width allows
MAX_WIDTH = 2400.0
BAR_TOP, BAR_HEIGHT = 92, 58
LANE_HEIGHT = 34


def _f(x: float) -> str:
    """A coordinate: one decimal, no trailing `.0` (deterministic text)."""
    text = f"{x:.1f}"
    return text.removesuffix(".0")


def _attrs(**kw) -> str:
    return "".join(f" {k.rstrip('_').replace('_', '-')}={quoteattr(str(v))}" for k, v in kw.items() if v is not None)


class _Svg:
    def __init__(self):
        self.items: list[str] = []

    def rect(self, x, y, w, h, **kw) -> None:
        self.items.append(f"<rect x=\"{_f(x)}\" y=\"{_f(y)}\" width=\"{_f(max(w, 0))}\" height=\"{_f(h)}\""
                          f"{_attrs(**kw)}/>")

    def line(self, x1, y1, x2, y2, **kw) -> None:
        self.items.append(f"<line x1=\"{_f(x1)}\" y1=\"{_f(y1)}\" x2=\"{_f(x2)}\" y2=\"{_f(y2)}\"{_attrs(**kw)}/>")

    def text(self, x, y, s: str, **kw) -> None:
        self.items.append(f"<text x=\"{_f(x)}\" y=\"{_f(y)}\"{_attrs(**kw)}>{escape(s)}</text>")

    def raw(self, s: str) -> None:
        self.items.append(s)


def layout_svg(view: MethodView) -> str:
    run = view.run
    ranges = view.ranges
    code_size = view.image.code_size if view.image is not None else 0
    if not ranges or code_size == 0:
        return _empty(view)
    narrowest = min(r.size for r in ranges if r.size > 0) if any(r.size for r in ranges) else 1
    scale = max(1000.0 / code_size, MIN_BOX / narrowest)
    scale = min(scale, MAX_WIDTH / code_size)
    plot = code_size * scale
    width = LEFT + plot + RIGHT

    def x(offset: int) -> float:
        return LEFT + offset * scale

    svg = _Svg()
    # -- title and axis
    svg.text(12, 24, f"{view.title} - final layout", class_="title")
    svg.text(12, 44, f"{code_size} bytes in {len(ranges)} ranges, {len(view.clauses)} clauses; O{run.opt}, "
             f"{run.profile}" + (f"; {view.assembly}" if view.assembly else ""), class_="subtitle")
    axis_y = BAR_TOP - 14
    svg.line(x(0), axis_y, x(code_size), axis_y, class_="axis")
    step = next(s for s in (1 << k for k in range(4, 20)) if s * scale >= 56)
    for off in range(0, code_size + 1, step):
        svg.line(x(off), axis_y - 4, x(off), axis_y, class_="axis")
        svg.text(x(off), axis_y - 7, f"{off:#x}", class_="tick")
    svg.text(LEFT - 10, BAR_TOP + BAR_HEIGHT / 2 + 4, "code", class_="lanelabel", text_anchor="end")

    # -- the code bar
    keyed = []
    for r in ranges:
        svg.rect(x(r.start), BAR_TOP, r.size * scale, BAR_HEIGHT, class_="range", fill=KIND_COLORS[r.kind],
                 data_range=r.index, data_funclet=r.funclet)
        lines = [f"r{r.index} {r.kind.value}", f"funclet {r.funclet}", f"{r.start:#x}-{r.end:#x}"]
        box = r.size * scale
        cx = x(r.start) + box / 2
        if max(len(s) for s in lines) * CHAR + 6 <= box:
            for n, s in enumerate(lines):
                svg.text(cx, BAR_TOP + 17 + n * 15, s, class_="boxlabel", text_anchor="middle")
        else:
            short = f"r{r.index}"
            if len(short) * CHAR + 4 <= box:
                svg.text(cx, BAR_TOP + BAR_HEIGHT / 2 + 4, short, class_="boxlabel", text_anchor="middle")
            keyed.append(r)
    edges = sorted({r.start for r in ranges} | {r.end for r in ranges})
    previous = 0
    for r in ranges:
        if r.start > previous:
            svg.rect(x(previous), BAR_TOP, (r.start - previous) * scale, BAR_HEIGHT, class_="padding",
                     fill="url(#hatch)")
        previous = r.end
    if code_size > previous:
        svg.rect(x(previous), BAR_TOP, (code_size - previous) * scale, BAR_HEIGHT, class_="padding",
                 fill="url(#hatch)")

    # -- dispatch ticks: each checked call site's return address, green when the CLR's
    # dispatch there equals the IL's in every scenario, red when not (check.dispatch)
    if getattr(run, "dispatch", None) is not None:
        for s in run.dispatch.sites:
            svg.line(x(s.pc), BAR_TOP + BAR_HEIGHT + 3, x(s.pc), BAR_TOP + BAR_HEIGHT + 15, class_="dispatch",
                     stroke="#2ca02c" if s.equal else "#d62728", data_il=f"IL_{s.il_offset:04x}",
                     data_equal="yes" if s.equal else "no")

    # -- one lane per clause
    lanes_top = BAR_TOP + BAR_HEIGHT + 24
    lanes_bottom = lanes_top + LANE_HEIGHT * len(view.clauses)
    for e in edges:
        svg.line(x(e), BAR_TOP + BAR_HEIGHT, x(e), lanes_bottom, class_="guide")
    for row in view.clauses:
        _lane(svg, row, lanes_top + LANE_HEIGHT * row.index, x, scale, plot, view)

    # -- key for narrow boxes, legend
    y = lanes_bottom + 26
    if keyed:
        svg.text(12, y, "ranges too narrow for their labels:", class_="keytitle")
        for r in keyed:
            y += 16
            svg.text(24, y, f"r{r.index}: {r.kind.value}, funclet {r.funclet} ({r.label}), "
                     f"[{r.start:#06x}, {r.end:#06x})", class_="key")
        y += 24
    y = _legend(svg, y, width)
    height = y + 16
    head = (f"<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{_f(width)}\" height=\"{_f(height)}\" "
            f"viewBox=\"0 0 {_f(width)} {_f(height)}\">")
    background = f"<rect class=\"background\" x=\"0\" y=\"0\" width=\"{_f(width)}\" height=\"{_f(height)}\" fill=\"white\"/>"
    return "\n".join([head, _DEFS, background, *svg.items, "</svg>"]) + "\n"


def _lane(svg: _Svg, row: ClauseRow, top: float, x, scale: float, plot: float, view: MethodView) -> None:
    c = row.clause
    mid = top + LANE_HEIGHT / 2
    dup = c.is_duplicate
    if row.index % 2 == 0:
        svg.rect(LEFT, top, plot, LANE_HEIGHT, class_="lane")
    color = CLAUSE_COLORS.get(c.kind, "#cccccc")
    title = f"#{row.index} {row.flags_text}" + (f"  IL #{row.il_clause}" if row.il_clause is not None else "")
    svg.text(LEFT - 10, mid - 2, title, class_="lanelabel", text_anchor="end")
    detail = f"try {c.try_start:#x}-{c.try_end:#x} -> {c.handler_start:#x}"
    if dup and row.duplicate_of is not None:
        detail = f"dup of #{row.duplicate_of}, " + detail
    svg.text(LEFT - 10, mid + 11, detail, class_="lanedetail", text_anchor="end")
    # handler (and filter) boxes: outlined; the try: solid (hatched when a duplicate)
    hx, hw = x(c.handler_start), (c.handler_end - c.handler_start) * scale
    svg.rect(hx, top + 6, hw, LANE_HEIGHT - 12, class_="handler", fill=color, fill_opacity="0.25",
             stroke=color, stroke_dasharray="5 3" if dup else None)
    if hw >= 7 * CHAR:
        svg.text(hx + hw / 2, mid + 4, "handler", class_="lanetext", text_anchor="middle")
    target = hx
    if c.filter_start is not None:
        fx, fw = x(c.filter_start), (c.handler_start - c.filter_start) * scale
        svg.rect(fx, top + 6, fw, LANE_HEIGHT - 12, class_="filter", fill=KIND_COLORS[FuncletKind.FILTER],
                 fill_opacity="0.35", stroke=KIND_COLORS[FuncletKind.FILTER])
        if fw >= 6 * CHAR:
            svg.text(fx + fw / 2, mid + 4, "filter", class_="lanetext", text_anchor="middle")
        target = fx
    tx, tw = x(c.try_start), max((c.try_end - c.try_start) * scale, 2.0)
    svg.rect(tx, top + 9, tw, LANE_HEIGHT - 18, class_="try duplicate" if dup else "try",
             fill="url(#duphatch)" if dup else color, stroke="#333333",
             stroke_dasharray="4 2" if dup else None)
    # the arrow: from the try's edge to the near edge of where the runtime goes (filter or handler)
    end_of_target = hx + hw
    if tx + tw <= target:
        x1, x2 = tx + tw, target
    elif end_of_target <= tx:
        x1, x2 = tx, end_of_target
    else:
        return      # overlapping: nothing to point at
    svg.line(x1, mid, x2 - 1 if x2 > x1 else x2 + 1, mid, class_="arrow duplicate" if dup else "arrow",
             marker_end="url(#arrow)", stroke_dasharray="4 3" if dup else None)


def _legend(svg: _Svg, y: float, width: float) -> float:
    svg.text(12, y, "legend", class_="keytitle")
    y += 12
    xpos = 12.0
    for kind, color in KIND_COLORS.items():
        svg.rect(xpos, y, 18, 12, class_="swatch", fill=color, stroke="#333333")
        svg.text(xpos + 24, y + 10, kind.value, class_="key")
        xpos += 24 + len(kind.value) * CHAR + 20
    svg.rect(xpos, y, 26, 12, class_="swatch", fill="url(#hatch)", stroke="#333333")
    svg.text(xpos + 32, y + 10, "padding (int3)", class_="key")
    y += 24
    xpos = 12.0
    items = [("try", "try range (primary; colour: the clause's kind)"), ("dup", "try range (duplicate clause)"),
             ("handler", "handler range"), ("filter", "filter range"), ("arrow", "try -> filter or handler")]
    for what, label in items:
        if what == "try":
            svg.rect(xpos, y, 26, 12, class_="swatch", fill=CLAUSE_COLORS["catch"], stroke="#333333")
        elif what == "dup":
            svg.rect(xpos, y, 26, 12, class_="swatch", fill="url(#duphatch)", stroke="#333333",
                     stroke_dasharray="4 2")
        elif what == "handler":
            svg.rect(xpos, y, 26, 12, class_="swatch", fill=CLAUSE_COLORS["catch"], fill_opacity="0.25",
                     stroke=CLAUSE_COLORS["catch"])
        elif what == "filter":
            svg.rect(xpos, y, 26, 12, class_="swatch", fill=KIND_COLORS[FuncletKind.FILTER], fill_opacity="0.35",
                     stroke=KIND_COLORS[FuncletKind.FILTER])
        else:
            svg.line(xpos, y + 6, xpos + 24, y + 6, class_="arrow", marker_end="url(#arrow)")
        svg.text(xpos + 32, y + 10, label, class_="key")
        xpos += 32 + len(label) * CHAR + 22
    svg.text(12, y + 30, "lanes: one per clause, in table order (#k = clause index in clauses.bin); "
             "offsets are from the main body's start", class_="key")
    return y + 30


def _empty(view: MethodView) -> str:
    why = f"no final image: {view.run.error}" if view.run.error is not None else "no final image"
    return (f"<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"900\" height=\"80\" "
            f"viewBox=\"0 0 900 80\">\n{_DEFS}\n<rect class=\"background\" x=\"0\" y=\"0\" width=\"900\" "
            f"height=\"80\" fill=\"white\"/>\n<text class=\"title\" x=\"12\" y=\"24\">{escape(view.title)}</text>\n"
            f"<text class=\"key\" x=\"12\" y=\"50\">{escape(why)}</text>\n</svg>\n")


_DEFS = """<defs>
<style>
text { font-family: 'DejaVu Sans Mono', 'Menlo', 'Consolas', monospace; font-size: 11px; fill: #222222; }
.title { font-size: 15px; font-weight: bold; }
.subtitle { font-size: 12px; fill: #444444; }
.tick { font-size: 10px; fill: #555555; text-anchor: middle; }
.axis { stroke: #555555; stroke-width: 1; }
.range { stroke: #222222; stroke-width: 1; }
.padding { stroke: #999999; stroke-width: 0.5; }
.guide { stroke: #888888; stroke-width: 0.6; stroke-dasharray: 2 3; }
.lane { fill: #f3f3f3; }
.lanelabel { font-weight: bold; }
.lanedetail { font-size: 10px; fill: #555555; }
.lanetext { font-size: 10px; fill: #333333; }
.arrow { stroke: #222222; stroke-width: 1.4; }
.keytitle { font-weight: bold; }
</style>
<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto">
<path d="M 0 0 L 10 5 L 0 10 z" fill="#222222"/>
</marker>
<pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">
<rect width="6" height="6" fill="#eeeeee"/><line x1="0" y1="0" x2="0" y2="6" stroke="#bbbbbb" stroke-width="2"/>
</pattern>
<pattern id="duphatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(-45)">
<rect width="6" height="6" fill="#ffffff"/><line x1="0" y1="0" x2="0" y2="6" stroke="#777777" stroke-width="2.5"/>
</pattern>
</defs>"""


__all__ = ["CLAUSE_COLORS", "KIND_COLORS", "layout_svg"]
