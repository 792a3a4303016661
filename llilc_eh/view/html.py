"""HTML pages: one self-contained page per method (`translate --html FILE`) and an index of a
batch run (`validate --translate --html DIR`).

Self-contained means no network and no files beside the page: the style, the script and the
layout picture (`svg.layout_svg`) are inline, so a page can be mailed or archived as is.

Method page: the clause table on top; select a clause (click its row, or open the page at
`#clause-K`) and everything it means lights up -- its try lanes (the instructions whose bytes
its try covers), its handler funclet (the pad) and a filter's code in the disassembly, the IL
clause's try and handler regions in the IL listing, its lane in the picture. The cross-
references are computed here, in Python (which instruction lies in which clause's ranges),
and written as `data-` attributes; the script only toggles classes. With `--compare-r2r`
material (a ReadyToRun image) RyuJIT's table and disassembly follow ours.

Index: per-assembly and per-method tables from the per-method records (`view.records`),
sortable by any column (click its header), each method linked to its page, and three plots
drawn as inline SVG: clauses ours vs RyuJIT per method, the code-size ratio ours/RyuJIT, the
pipeline time per method (the only part that differs from run to run).
"""

from __future__ import annotations

import html
import json
import re
from collections import Counter

from .method import MethodView
from .svg import layout_svg

_STYLE = """
body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:18px} h2{font-size:15px;margin-top:22px}
pre,code,.mono{font:12px/1.35 ui-monospace,monospace}
table{border-collapse:collapse} td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left;white-space:nowrap}
th{background:#f3f3f3;position:sticky;top:0;cursor:pointer}
tr.clause{cursor:pointer} tr.clause:hover{background:#eef}
tr.sel{background:#ffe8a3!important}
.cols{display:flex;gap:16px;align-items:flex-start} .cols>div{flex:1;min-width:0;overflow:auto;max-height:80vh}
.line{display:block;white-space:pre}
.hl-try{background:#fbd38d} .hl-handler{background:#9ae6b4} .hl-filter{background:#90cdf4}
.hl-il-try{background:#fbd38d} .hl-il-handler{background:#9ae6b4}
.range{font-weight:bold;color:#555;display:block;margin-top:6px}
.ok{color:#276749} .bad{color:#c53030} .muted{color:#777}
.plots{display:flex;gap:24px;flex-wrap:wrap}
"""

_METHOD_SCRIPT = """
function clear(){for(const c of ['hl-try','hl-handler','hl-filter','hl-il-try','hl-il-handler','sel'])
  document.querySelectorAll('.'+c).forEach(e=>e.classList.remove(c));
  document.querySelectorAll('rect.hlrect').forEach(e=>e.remove());}
function mark(sel,cls){document.querySelectorAll(sel).forEach(e=>e.classList.add(cls));}
function select(k){clear();const row=document.getElementById('clause-'+k);if(!row)return;row.classList.add('sel');
  mark('[data-try~="'+k+'"]','hl-try');mark('[data-handler~="'+k+'"]','hl-handler');mark('[data-filter~="'+k+'"]','hl-filter');
  const il=row.dataset.il;if(il!==undefined&&il!==''){mark('[data-il-try~="'+il+'"]','hl-il-try');mark('[data-il-handler~="'+il+'"]','hl-il-handler');}
  const svg=document.querySelector('#layout svg');
  if(svg){for(const t of svg.querySelectorAll('text.lanelabel')){if(t.textContent.startsWith('#'+k+' ')){
    const b=t.getBBox();const r=document.createElementNS('http://www.w3.org/2000/svg','rect');
    r.setAttribute('class','hlrect');r.setAttribute('x',0);r.setAttribute('y',b.y-8);r.setAttribute('width',svg.getAttribute('width'));
    r.setAttribute('height',34);r.setAttribute('fill','#ffd166');r.setAttribute('fill-opacity','0.35');svg.insertBefore(r,svg.children[2]);}}}
  history.replaceState(null,'','#clause-'+k);}
document.querySelectorAll('tr.clause').forEach(r=>r.addEventListener('click',()=>select(r.dataset.k)));
const m=location.hash.match(/^#clause-(\\d+)$/);if(m)select(m[1]);
"""

_INDEX_SCRIPT = """
function sortBy(th){const table=th.closest('table');const i=[...th.parentNode.children].indexOf(th);
  const body=table.tBodies[0];const rows=[...body.rows];const dir=th.dataset.dir==='asc'?'desc':'asc';
  table.querySelectorAll('th').forEach(h=>delete h.dataset.dir);th.dataset.dir=dir;
  const key=r=>{const c=r.cells[i];const v=c.dataset.v!==undefined?c.dataset.v:c.textContent;const n=parseFloat(v);
    return isNaN(n)?v:n;};
  rows.sort((a,b)=>{const x=key(a),y=key(b);const c=(typeof x===typeof y)?(x<y?-1:x>y?1:0):(typeof x==='number'?-1:1);
    return dir==='asc'?c:-c;});
  rows.forEach(r=>body.appendChild(r));}
document.querySelectorAll('th').forEach(th=>th.addEventListener('click',()=>sortBy(th)));
"""


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _page(title: str, body: str, script: str) -> str:
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_e(title)}</title>"
            f"<style>{_STYLE}</style></head><body>\n{body}\n<script>{script}</script></body></html>\n")


def _spans(ranges: list[tuple[int, int, int]], lo: int, hi: int) -> str:
    """The clause indices whose [start, end) meets [lo, hi)."""
    return " ".join(str(k) for start, end, k in ranges if start < hi and lo < end)


# --------------------------------------------------------------------------------------------
# One method


def method_page(view: MethodView, *, compare: dict | None = None, index_href: str | None = None) -> str:
    """The page of one method; `compare` = {"ours", "theirs", "check", "code"} for RyuJIT's
    side (`view.compare`)."""
    run = view.run
    parts = [f"<h1>{_e(view.title)}</h1>",
             f"<p class=\"muted\">{_e(view.assembly)} &middot; O{run.opt} &middot; {_e(run.profile.value)}"
             f" &middot; {'clone-finally' if view.clone_finally else 'continuation selectors'}"
             + (f" &middot; <a href=\"{_e(index_href)}\">index</a>" if index_href else "") + "</p>"]
    if run.error is not None:
        parts.append(f"<p class=\"bad\">stopped: [{_e(run.error.stage)}/{_e(run.error.kind)}] "
                     f"{_e(run.error.describe())}</p>")
    # the clause table
    rows = []
    for row in view.clauses:
        c = row.clause
        tail = (f"filter {c.filter_start:#06x}" if c.filter_start is not None else
                _e(row.class_name or f"0x{c.class_token:08X}") if c.class_token is not None else "")
        rows.append(f"<tr class=\"clause\" id=\"clause-{row.index}\" data-k=\"{row.index}\" "
                    f"data-il=\"{'' if row.il_clause is None else row.il_clause}\"><td>#{row.index}</td>"
                    f"<td>{_e(row.flags_text)}</td><td class=\"mono\"><a href=\"#insn-{c.try_start:04x}\">"
                    f"[{c.try_start:#06x}, {c.try_end:#06x})</a></td><td class=\"mono\"><a href=\"#insn-"
                    f"{c.handler_start:04x}\">[{c.handler_start:#06x}, {c.handler_end:#06x})</a></td>"
                    f"<td>{'' if row.il_clause is None else 'IL #' + str(row.il_clause)}</td>"
                    f"<td>{'' if row.duplicate_of is None else 'duplicate of #' + str(row.duplicate_of)}</td>"
                    f"<td class=\"mono\">{tail}</td></tr>")
    parts.append("<h2>clauses (select one)</h2><table id=\"clauses\"><thead><tr><th>#</th><th>flags</th><th>try</th>"
                 "<th>handler</th><th>IL clause</th><th>duplicate</th><th>class / filter</th></tr></thead><tbody>"
                 + "".join(rows) + "</tbody></table>")
    if view.image is not None:
        parts.append(f"<h2>layout</h2><div id=\"layout\">{layout_svg(view)}</div>")
    parts.append("<div class=\"cols\"><div><h2>IL</h2>" + _il_html(view) + "</div><div><h2>code (final image)</h2>"
                 + _code_html(view) + "</div></div>")
    if compare is not None:
        parts.append(_ryujit_html(compare))
    if run.reader is not None:
        parts.append("<details><summary>LLVM IR</summary><pre id=\"ir\">" + _e(run.reader.module) + "</pre></details>")
    return _page(view.title, "\n".join(parts), _METHOD_SCRIPT)


def _il_html(view: MethodView) -> str:
    if view.il_text is None:
        return "<p class=\"muted\">no IL</p>"
    clauses = view.run.il.body.clauses
    tries = [(c.try_start, c.try_end, c.index) for c in clauses]
    handlers = [(c.filter_start if c.filter_start is not None else c.handler_start, c.handler_end, c.index)
                for c in clauses]
    out = []
    for line in view.il_text.splitlines():
        m = re.match(r"\s*IL_([0-9a-fA-F]{4}):", line)
        if m:
            at = int(m.group(1), 16)
            out.append(f"<span class=\"line\" id=\"il-{at:04x}\" data-il-try=\"{_spans(tries, at, at + 1)}\" "
                       f"data-il-handler=\"{_spans(handlers, at, at + 1)}\">{_e(line)}</span>")
        else:
            out.append(f"<span class=\"line\">{_e(line)}</span>")
    return "<pre id=\"il\">" + "".join(out) + "</pre>"


def _code_html(view: MethodView) -> str:
    if not view.disassembly:
        return "<p class=\"muted\">no code</p>"
    tries, handlers, filters = [], [], []
    for row in view.clauses:
        c = row.clause
        tries.append((c.try_start, c.try_end, row.index))
        handlers.append((c.handler_start, c.handler_end, row.index))
        if c.filter_start is not None:
            filters.append((c.filter_start, c.handler_start, row.index))
    out = []
    for d in view.disassembly:
        r = view.ranges[d.range]
        out.append(f"<span class=\"range\" data-handler=\"{_spans(handlers, r.start, r.end)}\">range {r.index} "
                   f"{_e(r.label)} [{r.start:#06x}, {r.end:#06x})</span>")
        for i in d.insns:
            events = " ".join(f"<a href=\"#clause-{e.clause}\">{_e(str(e))}</a>" for e in i.events)
            notes = ("  ; " + _e(", ".join(i.notes))) if i.notes else ""
            out.append(f"<span class=\"line\" id=\"insn-{i.address:04x}\" data-try=\"{_spans(tries, i.address, i.end)}\""
                       f" data-handler=\"{_spans(handlers, i.address, i.end)}\" data-filter=\""
                       f"{_spans(filters, i.address, i.end)}\">{i.address:04x}  {_e(i.text)}{notes}"
                       f"{'  ' + events if events else ''}</span>")
    return "<pre id=\"code\">" + "".join(out) + "</pre>"


def _ryujit_html(compare: dict) -> str:
    ours, theirs, check, code = compare["ours"], compare["theirs"], compare["check"], compare["code"]
    if theirs is None:
        return f"<h2>RyuJIT</h2><p class=\"muted\">{_e(compare.get('why') or 'no ReadyToRun body')}</p>"
    rows = [f"<tr><td>{label}</td><td>{getattr(ours, a) if ours else '-'}</td><td>{getattr(theirs, a)}</td></tr>"
            for label, a in (("clauses", "clauses"), ("duplicates", "duplicates"), ("split tries", "split"),
                             ("handler copies", "copies"), ("cloned-finally markers", "cloned_finally"),
                             ("code size", "code_size"), ("funclets", "funclets"))]
    table = ("<table id=\"versus\"><thead><tr><th></th><th>llilc-eh</th><th>RyuJIT</th></tr></thead><tbody>"
             + "".join(rows) + "</tbody></table>")
    clauses = "".join(f"<span class=\"line\">{i:<2} {_e(c)}  &lt;- {_e(role)}</span>"
                      for i, (c, role) in enumerate(zip(check.method.native.clauses, theirs.roles)))
    lines = []
    for label, insns in code:
        lines.append(f"<span class=\"range\">{_e(label)}</span>")
        lines += [f"<span class=\"line\">{i.address:04x}  {_e(i.text)}</span>" for i in insns]
    inst = (" <span class=\"muted\">(an instantiation's body: the generic definition has none)</span>"
            if check.method.is_instantiation else "")
    return (f"<h2>RyuJIT (ReadyToRun){inst}</h2>{table}<p>IL fates, ours: {_e(', '.join(ours.il_fates) if ours else '-')}; "
            f"RyuJIT: {_e(', '.join(theirs.il_fates))}</p><pre id=\"ryujit-clauses\">{clauses}</pre>"
            f"<details open><summary>RyuJIT's code</summary><pre id=\"ryujit-code\">{''.join(lines)}</pre></details>")


def method_page_name(record: dict) -> str:
    """Where `validate --html DIR` puts a method's page, relative to DIR."""
    return f"{record['file']}/{record['token']}.html"


# --------------------------------------------------------------------------------------------
# The index of a batch run


def _svg_scatter(points: list[tuple[float, float]], xlabel: str, ylabel: str, title: str, diagonal=True) -> str:
    w, h, pad = 360, 300, 42
    if not points:
        return ""
    top = max(max(x for x, _ in points), max(y for _, y in points), 1)
    sx = lambda v: pad + (w - pad - 10) * v / top  # noqa: E731
    sy = lambda v: h - pad - (h - pad - 24) * v / top  # noqa: E731
    counts = Counter(points)
    dots = "".join(f"<circle cx=\"{sx(x):.1f}\" cy=\"{sy(y):.1f}\" r=\"{min(8, 2 + n ** 0.5):.1f}\" "
                   f"fill=\"#3182ce\" fill-opacity=\"0.5\"><title>{x:g}, {y:g}: {n} methods</title></circle>"
                   for (x, y), n in sorted(counts.items()))
    diag = (f"<line x1=\"{sx(0):.1f}\" y1=\"{sy(0):.1f}\" x2=\"{sx(top):.1f}\" y2=\"{sy(top):.1f}\" "
            "stroke=\"#aaa\" stroke-dasharray=\"4 3\"/>") if diagonal else ""
    return (f"<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot\" width=\"{w}\" height=\"{h}\">"
            f"<text x=\"{w / 2}\" y=\"14\" text-anchor=\"middle\" font-size=\"12\">{_e(title)}</text>"
            f"<line x1=\"{pad}\" y1=\"{h - pad}\" x2=\"{w - 10}\" y2=\"{h - pad}\" stroke=\"#333\"/>"
            f"<line x1=\"{pad}\" y1=\"{h - pad}\" x2=\"{pad}\" y2=\"24\" stroke=\"#333\"/>{diag}{dots}"
            f"<text x=\"{w / 2}\" y=\"{h - 8}\" text-anchor=\"middle\" font-size=\"11\">{_e(xlabel)} (0..{top:g})</text>"
            f"<text x=\"12\" y=\"{h / 2}\" font-size=\"11\" transform=\"rotate(-90 12 {h / 2})\" "
            f"text-anchor=\"middle\">{_e(ylabel)}</text></svg>")


def _svg_histogram(values: list[float], bins: list[float], xlabel: str, title: str) -> str:
    w, h, pad = 360, 300, 42
    if not values:
        return ""
    counts = [0] * len(bins)
    for v in values:
        k = next((i for i in range(len(bins) - 1, -1, -1) if v >= bins[i]), 0)
        counts[k] += 1
    top = max(counts) or 1
    bw = (w - pad - 10) / len(bins)
    bars = "".join(f"<rect class=\"bar\" x=\"{pad + i * bw + 1:.1f}\" y=\"{h - pad - (h - pad - 24) * n / top:.1f}\" "
                   f"width=\"{bw - 2:.1f}\" height=\"{(h - pad - 24) * n / top:.1f}\" fill=\"#38a169\">"
                   f"<title>&gt;= {bins[i]:g}: {n}</title></rect>" for i, n in enumerate(counts))
    ticks = "".join(f"<text x=\"{pad + i * bw + bw / 2:.1f}\" y=\"{h - pad + 13}\" font-size=\"9\" "
                    f"text-anchor=\"middle\">{bins[i]:g}</text>" for i in range(0, len(bins), max(1, len(bins) // 8)))
    return (f"<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot\" width=\"{w}\" height=\"{h}\">"
            f"<text x=\"{w / 2}\" y=\"14\" text-anchor=\"middle\" font-size=\"12\">{_e(title)} (max bar {top})</text>"
            f"<line x1=\"{pad}\" y1=\"{h - pad}\" x2=\"{w - 10}\" y2=\"{h - pad}\" stroke=\"#333\"/>{bars}{ticks}"
            f"<text x=\"{w / 2}\" y=\"{h - 8}\" text-anchor=\"middle\" font-size=\"11\">{_e(xlabel)}</text></svg>")


def index_page(records: list[dict], files: list[dict], *, pages: bool = True, title: str = "llilc-eh validate") -> str:
    """The index: `files` = [{"name", "methods", "eh", "ok", "failed", "file_error"}], `records`
    the per-method records (with "seconds" when timed); `pages`: link each method to its page."""
    recs = sorted(records, key=lambda r: (r["file"], r["token"]))
    parts = [f"<h1>{_e(title)}</h1>", f"<p>{len(files)} assemblies, {len(recs)} methods with EH, "
             f"{sum(r['status'] == 'ok' for r in recs)} clean end to end.</p>"]
    frows = "".join(
        f"<tr><td>{_e(f['name'])}</td><td>{f['methods']}</td><td>{f['eh']}</td><td>{f['ok']}</td>"
        f"<td class=\"{'bad' if f['failed'] or f['file_error'] else 'ok'}\">{f['failed']}</td>"
        f"<td>{_e(f['file_error'] or '')}</td></tr>" for f in files)
    parts.append("<h2>assemblies</h2><table id=\"files\"><thead><tr><th>assembly</th><th>methods</th><th>EH</th>"
                 "<th>clean</th><th>failed</th><th>file error</th></tr></thead><tbody>" + frows + "</tbody></table>")
    both = [r for r in recs if r.get("ours") and r.get("ryujit")]
    plots = [_svg_scatter([(r["ryujit"]["clauses"], r["ours"]["clauses"]) for r in both], "RyuJIT clauses",
                          "llilc-eh clauses", "clauses per method: ours vs RyuJIT"),
             _svg_histogram([r["ours"]["code_size"] / r["ryujit"]["code_size"] for r in both if r["ryujit"]["code_size"]],
                            [x / 4 for x in range(0, 17)], "code size ours / RyuJIT", "code-size ratio per method")]
    secs = [r["seconds"] * 1000 for r in recs if isinstance(r.get("seconds"), (int, float))]
    if secs:
        plots.append(_svg_histogram(secs, [0, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750, 1000],
                                    "milliseconds (not deterministic)", "pipeline time per method"))
    parts.append("<h2>plots</h2><div class=\"plots\">" + "".join(plots) + "</div>")
    rows = []
    for r in recs:
        o, y = r.get("ours") or {}, r.get("ryujit") or {}
        name = _e(r["name"])
        link = f"<a href=\"{_e(method_page_name(r))}\">{name}</a>" if pages and r.get("il") is not None else name
        ratio = f"{o['code_size'] / y['code_size']:.2f}" if o and y and y.get("code_size") else ""
        secs = f"{1000 * r['seconds']:.1f}" if isinstance(r.get("seconds"), (int, float)) else ""
        cell = lambda v: "" if v is None else _e(v)  # noqa: E731
        rows.append(
            f"<tr><td>{_e(r['file'])}</td><td class=\"mono\">{_e(r['token'])}</td><td>{link}</td>"
            f"<td class=\"{'ok' if r['status'] == 'ok' else 'bad'}\">{_e(r['status'])}</td>"
            f"<td>{cell((r.get('il') or {}).get('clauses'))}</td><td>{cell(o.get('clauses'))}</td>"
            f"<td>{cell(y.get('clauses'))}</td><td>{cell(o.get('duplicates'))}</td><td>{cell(o.get('split'))}</td>"
            f"<td>{cell(o.get('code_size'))}</td><td>{cell(y.get('code_size'))}</td><td>{ratio}</td>"
            f"<td>{cell(o.get('funclets'))}</td><td>{cell(y.get('funclets'))}</td>"
            f"<td>{_e(o.get('classification', ''))}</td><td>{_e(y.get('classification', ''))}</td><td>{secs}</td></tr>")
    heads = ["assembly", "token", "method", "status", "IL clauses", "ours clauses", "RyuJIT clauses", "duplicates",
             "split", "ours code", "RyuJIT code", "ratio", "ours funclets", "RyuJIT funclets", "ours class",
             "RyuJIT class", "ms"]
    parts.append("<h2>methods (click a header to sort)</h2><table id=\"methods\"><thead><tr>"
                 + "".join(f"<th>{h}</th>" for h in heads) + "</tr></thead><tbody>" + "".join(rows)
                 + "</tbody></table>")
    parts.append(f"<script type=\"application/json\" id=\"records\">{_e(json.dumps(len(recs)))}</script>")
    return _page(title, "\n".join(parts), _INDEX_SCRIPT)


def write_method_page(folder: str, record: dict, run, asm, image, clone_finally: bool) -> None:
    """`validate --html`: one run's page at `method_page_name(record)` under `folder`, with
    RyuJIT's side when the image has a body for it; the index links to it."""
    from pathlib import Path

    from .method import build_view
    page = Path(folder) / method_page_name(record)
    page.parent.mkdir(parents=True, exist_ok=True)
    view = build_view(run, asm.names, record["file"], clone_finally=clone_finally)
    page.write_text(method_page(view, compare=compare_material(asm, image, run), index_href="../index.html"),
                    encoding="utf-8")


def compare_material(asm, image, run) -> dict | None:
    """RyuJIT's side of a method page (None without a ReadyToRun image)."""
    if image is None or run.il is None:
        return None
    from ..check.r2r import check_method
    from .compare import our_side, r2r_body, ryujit_disassembly, ryujit_side
    body = r2r_body(image, run.il.body.token, instantiation=True)
    if body is None:
        return {"ours": our_side(run), "theirs": None, "check": None, "code": (),
                "why": "no ReadyToRun body for this method (not precompiled, or generic)"}
    check = check_method(asm, image, body)
    return {"ours": our_side(run), "theirs": ryujit_side(check), "check": check, "code": ryujit_disassembly(asm, body)}


def write_index(folder: str, reports) -> None:
    """`validate --html DIR`: DIR/index.html from the batch's reports and their records."""
    from pathlib import Path
    files = []
    for r in reports:
        failed = len({f["method"] for f in r.translate_failures})
        files.append({"name": Path(r.path).name, "methods": r.methods, "eh": r.with_eh,
                      "ok": r.translated or 0, "failed": failed + len({f["method"] for f in r.failures}),
                      "file_error": f"{r.file_error['kind']}: {r.file_error['reason']}" if r.file_error else None})
    records = [x for r in reports for x in r.records]
    (Path(folder) / "index.html").write_text(index_page(records, files), encoding="utf-8")
