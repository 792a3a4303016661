"""The terminal view: one section per stage, in pipeline order, cross-referenced.

    === il ===        the IL listing with its EH regions (il.listing)
    === ir ===        the LLVM module: parent + outlined filters
    === funclets ===  the funclet model: tree, states, layout, and where each funclet landed
    === image ===     the final layout table, then every range disassembled with one lane per
                      clause beside the code
    === clauses ===   the CORINFO_EH_CLAUSE table decoded, each clause naming its ranges,
                      then the encoded bytes (one clause a line, one dword a field)
    === unwind ===    the UNWIND_INFO of every range, decoded and in hex
    === checks ===    validator, image verify, funclet model verify, LLVM differential, dispatch
    === error ===     (a run that stopped) stage, kind, method, offset, reason
    === timings ===   per stage (the only part that differs from run to run)

Clauses are referred to as `#k` (native clause index) everywhere; ranges as `range n <kind>
f<funclet>`; IL clauses as `IL #k`.
"""

from __future__ import annotations

from ..pipeline import STAGES
from .method import (
    FILTER_BEGIN,
    HANDLER_BEGIN,
    TRY_BEGIN,
    TRY_END,
    ClauseRow,
    Insn,
    MethodView,
    stack_probe_span,
)

SECTIONS = ("il", "ir", "funclets", "image", "clauses", "unwind")

_LANE_LEGEND = ("lanes, one column per clause: [ its try begins in this instruction, | inside the try, "
                "] the try's last covered byte (a return address), * begins and ends here; "
                "F filter begins, f filter; H handler begins, h handler")


def render_text(view: MethodView, sections=SECTIONS, *, timings: bool = True) -> str:
    """The whole view: a header, the chosen sections that exist, checks, error, timings."""
    parts = [header(view)]
    for name in sections:
        body = render_section(view, name)
        if body is not None:
            parts.append(_title(name, view) + "\n" + body)
    parts.append("=== checks ===\n" + checks(view))
    if view.run.error is not None:
        parts.append("=== error ===\n" + error_text(view.run.error))
    if timings:
        parts.append("=== timings (seconds vary from run to run) ===\n" + timings_text(view))
    return "\n\n".join(parts) + "\n"


def render_section(view: MethodView, name: str) -> str | None:
    """One section's body, None when its stage was not reached."""
    run = view.run
    if name == "il":
        return view.il_text
    if name == "ir":
        return run.reader.module.rstrip("\n") if run.reader is not None else None
    if name == "funclets":
        return funclets(view) if run.model is not None else None
    if name == "image":
        return image(view) if run.image is not None else None
    if name == "clauses":
        return clauses(view) if run.clauses is not None else None
    if name == "unwind":
        return unwind(view) if run.image is not None else None
    raise ValueError(f"no section {name!r}")


def header(view: MethodView) -> str:
    run = view.run
    lines = [f"llilc-eh translate: {view.title}" + (f"  ({view.assembly})" if view.assembly else "")]
    finally_mode = "a copy per leave" if view.clone_finally else "continuation selectors"
    status = ("ok" if run.ok else f"ERROR in stage {run.error.stage}" if run.error is not None
              else "findings (see checks)")
    lines.append(f"  O{run.opt}, profile {run.profile}, finally normal path: {finally_mode}; "
                 f"stage reached: {run.stage_reached}; {status}")
    lines.append("  #k: native clause k (clauses.bin order); IL #k and the funclet labels (`finally #0`): IL "
                 "clause k; fN: model funclet N; range n: n-th code range of the final image; offsets: from "
                 "the main body's start")
    return "\n".join(lines)


def _title(name: str, view: MethodView) -> str:
    run = view.run
    if name == "il":
        return "=== il: IL listing with EH regions (#k here: IL clause k) ==="
    if name == "ir":
        filters = len(run.reader.filters)
        return f"=== ir: LLVM module, parent {run.reader.parent} + {filters} outlined filter(s) ==="
    if name == "funclets":
        m = run.model
        return (f"=== funclets: funclet model, {len(m.funclets)} funclets, {len(m.states)} EH states, "
                f"{len(m.invokes)} invokes ===")
    if name == "image":
        im = run.image
        return (f"=== image: final code, {im.code_size} bytes in {len(im.ranges)} ranges "
                f"({im.padding} bytes padding) ===")
    if name == "clauses":
        return (f"=== clauses: CORINFO_EH_CLAUSE table ({run.profile}), {len(run.clauses.clauses)} clauses, "
                f"{len(run.clause_bytes)} bytes ===")
    return f"=== unwind: UNWIND_INFO per range (CLR form), {len(run.image.unwind_data)} bytes ==="


# --------------------------------------------------------------------------------------------
# funclets


def funclets(view: MethodView) -> str:
    m = view.run.model
    image = view.run.image
    head = (f" {'idx':<5} {'kind':<15} {'label':<28} {'parent':>6} {'state':>5} {'IL':>4}  "
            f"{'final range':<26} context")
    lines = [f"parent {m.parent}", head]
    for f in m.funclets:
        r = image.range_of(f.index) if image is not None else None
        n = image.ranges.index(r) if r is not None else None
        where = f"{n} [{r.begin:#06x}, {r.end:#06x})" if r is not None else \
            ("no code (removed by LLVM)" if image is not None and f.index in image.absent else "-")
        context = f.context + (f"; filter of [{f.handler}]" if f.handler is not None else "") \
            + (f"; its filter [{f.filter}]" if f.filter is not None else "")
        label = "  " * f.depth + f.label
        lines.append(f" {f'[{f.index}]':<5} {f.kind.value:<15} {label:<28} {_dash(f.parent):>6} {_dash(f.state):>5} "
                     f"{_dash(f.clause, '#'):>4}  {where:<26} {context}")
    if m.catchswitches:
        lines.append("catchswitches (handler order):")
        for cs in m.catchswitches:
            handlers = ", ".join(f"[{h}] {m.funclets[h].label}" for h in cs.handlers)
            unwind = f"unwind to {cs.unwind}" if cs.unwind else "unwind to caller"
            lines.append(f"  {cs.name} in [{cs.parent}] {m.funclets[cs.parent].label}: {handlers}; {unwind}")
    if m.states:
        lines.append("EH states (next / enclosing / handler parent; -1: the caller):")
        for s in m.states:
            lines.append(f"  {s.number:3d}  [{s.funclet}] {m.funclets[s.funclet].label:<24} next {s.next:3d}  "
                         f"enclosing {s.enclosing:3d} ({s.enclosing_from})  parent {s.handler_parent:3d}")
    lines.append("layout (final image order): "
                 + ", ".join(f"[{i}] {m.funclets[i].label}" for i in m.layout))
    return "\n".join(lines)


def _span(start: int, end: int) -> str:
    return f"[{start:#06x}, {end:#06x})"


def _dash(value, prefix: str = "") -> str:
    return "-" if value is None else f"{prefix}{value}"


# --------------------------------------------------------------------------------------------
# image


def image(view: MethodView) -> str:
    im = view.run.image
    lines = [f" {'range':<5} {'[start,  end)':<17} {'size':>5}  {'kind':<15} {'funclet':<26} {'unwind':<8} symbol"]
    for r in view.ranges:
        lines.append(f" {r.index:<5} [{r.start:#06x}, {r.end:#06x}) {r.size:>5}  {r.kind.value:<15} "
                     f"{f'{r.funclet} {r.label}':<26} {r.unwind_kind:<8} {r.symbol}")
        if r.roles:
            lines.append(f"{'':25}{'; '.join(r.roles)}")
    if im.absent:
        lines.append(f" without code (LLVM removed them): funclets {', '.join(map(str, im.absent))}")
    if im.ambiguous:
        lines.append(f" matched ambiguously, decided by {im.decided_by}: funclets {', '.join(map(str, im.ambiguous))}")
    if im.filter_constants is not None:
        fc = im.filter_constants
        lines.append(f" filter constants: psp_slot_offset {fc.psp_slot_offset}, fp_offset {fc.fp_offset}")
    lines.append(f" target: {im.target}")
    if im.read_only_data:
        lines.append(f" read-only data: {len(im.read_only_data)} bytes at {im.read_only_data_offset:#06x}")
    if im.cells:
        lines.append(f" data cells (8 bytes each, in the read-only data, filled by the installer): {len(im.cells)}")
        lines += [f"   {at:#06x}  {symbol}" for at, symbol in im.cells]
    probe = stack_probe_span(im)
    if probe is not None:
        lines.append(f" stack probe routine (ours, in no range): [{probe[0]:#06x}, {probe[1]:#06x})")
    externals = view.run.reader.externals if view.run.reader is not None else {}
    if externals:
        by_kind: dict[str, int] = {}
        for e in externals.values():
            by_kind[e.kind] = by_kind.get(e.kind, 0) + 1
        lines.append(f" external symbols (reader/externals.py): {len(externals)}: "
                     + ", ".join(f"{n} {k}" for k, n in sorted(by_kind.items())))
    code_relocs = [r for r in im.relocations if r.offset < im.code_size]
    data_relocs = [r for r in im.relocations if r.offset >= im.code_size]
    lines.append(f" relocations: {len(code_relocs)} in the code (external symbols, named in the disassembly)"
                 + (f", {len(data_relocs)} in the read-only data" if data_relocs else ""))
    lines += [f"   {r}" for r in data_relocs]
    lines.append(f" fixups (references re-encoded by the relink): {len(im.fixups)}")
    lines += [f"   {f}" for f in im.fixups]
    lines.append("")
    lines.append(_LANE_LEGEND)
    lanes = len(view.clauses)
    for d in view.disassembly:
        r = view.ranges[d.range]
        lines.append("")
        lines.append(f"-- range {r.index} [{r.start:#06x}, {r.end:#06x}) {r.kind.value}, funclet {r.funclet} "
                     f"({r.label}), {r.unwind_kind}: {r.symbol}")
        if r.roles:
            lines.append(f"   {'; '.join(r.roles)}")
        lines += _lane_header(lanes)
        for insn in d.insns:
            lines.append(_insn_line(view, insn, lanes))
        if d.padding is not None:
            lines += _gap(d, lanes)
    return "\n".join(lines)


def _gap(d, lanes: int) -> list[str]:
    """The gap after a range: int3 padding, and our stack probe routine if it sits there."""
    a, b = d.padding
    if not d.probe:
        return [f"   {a:#06x}  {'':{lanes}}  padding [{a:#06x}, {b:#06x}), {b - a} bytes of int3"]
    p, q = d.probe[0].address, d.probe[-1].end
    out = [f"   {a:#06x}  {'':{lanes}}  padding [{a:#06x}, {p:#06x}), {p - a} bytes of int3"] if p > a else []
    out.append(f"-- stack probe routine [{p:#06x}, {q:#06x}) (ours, in no range: prologs and dynamic "
               f"allocas call it with the size in RAX)")
    out += [f"   {i.address:#06x}  {'':{lanes}}  {i.raw.hex():<22} {i.text}" for i in d.probe]
    if b > q:
        out.append(f"   {q:#06x}  {'':{lanes}}  padding [{q:#06x}, {b:#06x}), {b - q} bytes of int3")
    return out


def _lane_header(lanes: int) -> list[str]:
    if not lanes:
        return []
    out = []
    if lanes > 10:
        out.append(f"   {'':6}  " + "".join(str(k // 10) if k >= 10 else " " for k in range(lanes)))
    out.append(f"   {'':6}  " + "".join(str(k % 10) for k in range(lanes)))
    return out


def _lane(row: ClauseRow, insn: Insn) -> str:
    c, a, b = row.clause, insn.address, insn.end
    if a < c.try_end and c.try_start < b:
        begins, ends = a <= c.try_start < b, a <= c.try_end - 1 < b
        return "*" if begins and ends else "[" if begins else "]" if ends else "|"
    if c.filter_start is not None and a < c.handler_start and c.filter_start < b:
        return "F" if a <= c.filter_start < b else "f"
    if a < c.handler_end and c.handler_start < b:
        return "H" if a <= c.handler_start < b else "h"
    return " "


def _insn_line(view: MethodView, insn: Insn, lanes: int) -> str:
    lanes_text = "".join(_lane(row, insn) for row in view.clauses)
    notes = _event_notes(insn) + list(insn.notes)
    text = f"   {insn.address:#06x}  {lanes_text:{lanes}}  {insn.raw.hex():<22} {insn.text}"
    if notes:
        text = f"{text:<96} ; " + "; ".join(notes)
    return text.rstrip()


def _event_notes(insn: Insn) -> list[str]:
    """`try #0 #1 begins @0x0147`: one note per kind of event, the clauses grouped by offset."""
    out = []
    words = {TRY_BEGIN: "try {k} begins @{o}", TRY_END: "try {k} ends @{o}",
             FILTER_BEGIN: "filter {k} begins", HANDLER_BEGIN: "handler {k} begins"}
    for what, pattern in words.items():
        by_offset: dict[int, list[int]] = {}
        for e in insn.events:
            if e.what == what:
                by_offset.setdefault(e.offset, []).append(e.clause)
        for offset, ks in by_offset.items():
            out.append(pattern.format(k=" ".join(f"#{k}" for k in ks), o=f"{offset:#06x}"))
    return out


# --------------------------------------------------------------------------------------------
# clauses


def clauses(view: MethodView) -> str:
    run = view.run
    head = (f" {'#':>2}  {'flags':<18} {'try [start, end)':<17} {'in':<25} {'handler':<17} {'=':<25} "
            f"{'IL':<4} class token / filter")
    lines = [head] if view.clauses else [" (no clauses)"]
    for row in view.clauses:
        c = row.clause
        try_in = view.ranges[row.try_range].short if row.try_range is not None else "? (no range)"
        handler = view.ranges[row.handler_range].short if row.handler_range is not None else "? (no range)"
        if c.filter_start is not None:
            target = view.ranges[row.filter_range].short if row.filter_range is not None else "no range"
            tail = f"filter {c.filter_start:#06x} = {target}, ends {row.filter_end:#06x}"
        elif c.class_token is not None:
            tail = f"class 0x{c.class_token:08X} {row.class_name}"
        else:
            tail = ""
        if row.clause.is_duplicate:
            tail += f"  DUPLICATE of #{row.duplicate_of}" if row.duplicate_of is not None else "  DUPLICATE"
        lines.append(f" {row.index:>2}  {row.flags_text:<18} {_span(c.try_start, c.try_end):<17} {try_in:<25} "
                     f"{_span(c.handler_start, c.handler_end):<17} {handler:<25} {_dash(row.il_clause, '#'):<4} "
                     f"{tail}".rstrip())
    lines.append("")
    lines.append(f"encoded (clauses.bin, {len(run.clause_bytes)} bytes; fields: flags, try start, try end, "
                 "handler start, handler end, class token | filter offset):")
    data = run.clause_bytes
    for k in range(0, len(data), 24):
        words = " ".join(data[k + i:k + i + 4].hex() for i in range(0, 24, 4))
        lines.append(f" {k // 24:>2}  {words}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# unwind


def unwind(view: MethodView) -> str:
    lines = []
    for n, rec in enumerate(view.unwind):
        r = view.ranges[n] if n < len(view.ranges) else None
        info = rec.info
        data = rec.data
        offset = r.unwind_offset if r is not None else view.image.runtime_functions[n].unwind_rva
        where = (f"range {n} {r.kind.value} f{rec.funclet}" if r is not None else
                 "stack probe" if rec.funclet is None else f"funclet {rec.funclet}")
        lines.append(f"{where}: {rec.kind.value:<8} [{rec.start:#06x}, {rec.end:#06x})  unwind.bin "
                     f"+{offset:#06x}, {len(data)} bytes" + ("  (synthesized: a frameless leaf)"
                                                           if rec.synthesized else ""))
        frame = (f"frame register {info.frame_register_name}, offset {info.frame_offset:#x}"
                 if info.frame_register else "no frame register")
        lines.append(f"  version {info.version}, flags {info.flags}, prolog {info.prolog_size} bytes, {frame}, "
                     f"{info.count_of_codes} code slot(s)")
        lines += [f"    {op.describe(info.frame_register, info.frame_offset)}" for op in info.codes]
        lines.append(f"  hex {data.hex(' ')}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# checks, error, timings


def _findings(check: str, findings) -> list[str]:
    """One check's line (clean, N findings, or not run: None) and its findings."""
    if findings is None:
        return [f"{check}: not run"]
    return [f"{check}: " + ("clean" if not findings else f"{len(findings)} finding(s)")] + [f"  {f}" for f in findings]


def checks(view: MethodView) -> str:
    run = view.run
    lines = []
    lines += _findings(f"validator ({run.profile})" if run.clauses is not None else "validator",
                       run.findings if run.clauses is not None else None)
    lines += _findings("image verify", run.image_findings if run.image is not None else None)
    if run.model is not None:
        lines += _findings("funclet model verify", view.model_findings)
    if run.differential is not None:
        # LLVM's table describes LLVM's own layout (the object's .text), so its offsets are those.
        lines.append("LLVM differential (in LLVM's own layout: .text offsets of method.obj): "
                     + str(run.differential).replace("\n  ", "\n  "))
    else:
        lines.append("LLVM differential: not run")
    # per call site: IL offset, call-site id, return address, what the CLR visits, equal or not
    lines.append(str(run.dispatch) if getattr(run, "dispatch", None) is not None else "dispatch: not run")
    if run.clauses is not None:
        from ..clauses.generate import decode_clauses
        back = decode_clauses(run.clause_bytes) == run.clauses.clauses
        lines.append(f"clauses.bin decodes back to the table: {'yes' if back else 'NO'}")
    lines.append("verdict: " + ("ok" if run.ok else "error" if run.error is not None else "findings"))
    return "\n".join(lines)


def error_text(e) -> str:
    offset = e.offset_text() if e.offset is not None else "-"
    return (f"stage {e.stage}, kind {e.kind}\nmethod {e.method or '-'}\noffset {offset}\nreason {e.reason}")


def timings_text(view: MethodView) -> str:
    seconds = view.run.seconds
    order = [s for s in STAGES if s in seconds] + [s for s in seconds if s not in STAGES]
    lines = [f"  {s:<14} {seconds[s] * 1000:9.2f} ms" for s in order]
    total = sum(v for k, v in seconds.items() if k != "codegen")   # codegen-wait holds the worker's time
    lines.append(f"  {'total':<14} {total * 1000:9.2f} ms  (codegen = the LLVM worker's own time, "
                 "inside codegen-wait)")
    if getattr(view.run.codegen, "cached", False):
        lines.append("  LLVM did not run: its result came from the LLVM result cache (--no-cache reruns it)")
    return "\n".join(lines)


__all__ = ["SECTIONS", "checks", "clauses", "error_text", "funclets", "header", "image", "render_section",
           "render_text", "timings_text", "unwind"]
