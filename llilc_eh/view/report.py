"""The view as one JSON-ready dict: every section of the text view, structured.

Bytes are lowercase hex strings, offsets integers (image offsets: from the main body's
start), tokens `0x`-strings as in `il.listing.to_json`. A section whose stage was not
reached is null; `error` says why. Deterministic: no paths (the assembly's file name only),
no timings unless asked for.

    {"method", "assembly", "options", "stage_reached", "ok", "error",
     "il", "ir", "funclets", "image", "clauses", "unwind", "checks", ["timings"]}
"""

from __future__ import annotations

from ..funclets.model import FuncletModel
from .method import MethodView, stack_probe_span


def report(view: MethodView, *, timings: bool = False, sections=None) -> dict:
    """The whole report, or only `sections` (names as in the text view) besides the header."""
    run = view.run
    out = {
        "method": {"token": f"0x{0x06000000 | run.rid:08X}",
                   "name": view.title.split(" ", 1)[1] if " " in view.title else None},
        "assembly": view.assembly,
        "options": {"opt": run.opt, "profile": str(run.profile), "clone_finally": view.clone_finally},
        "stage_reached": run.stage_reached,
        "ok": run.ok,
        "error": run.error.as_dict() if run.error is not None else None,
    }
    parts = {
        "il": lambda: view.il_json,
        "ir": lambda: _ir(view),
        "funclets": lambda: _funclets(view) if run.model is not None else None,
        "image": lambda: _image(view) if run.image is not None else None,
        "clauses": lambda: _clauses(view) if run.clauses is not None else None,
        "unwind": lambda: _unwind(view) if run.image is not None else None,
        "checks": lambda: _checks(view),
    }
    for name, make in parts.items():
        if sections is None or name in sections or name == "checks":
            out[name] = make()
    if timings:
        out["timings"] = dict(run.seconds)
    return out


def reader_json(view: MethodView) -> dict:
    """What `translate --stage ir --json` has always printed: the reader's result."""
    r = view.run.reader
    return {"method": view.title, "module": r.module, "parent": r.parent, "filters": list(r.filters),
            "catchswitches": r.catchswitches, "catchpads": r.catchpads, "cleanuppads": r.cleanuppads,
            "selector_cases": r.selector_cases, "helper_calls": r.helper_calls}


def _ir(view: MethodView) -> dict | None:
    r = view.run.reader
    if r is None:
        return None
    return {"module": r.module, "parent": r.parent, "filters": list(r.filters), "catchswitches": r.catchswitches,
            "catchpads": r.catchpads, "cleanuppads": r.cleanuppads, "selector_cases": r.selector_cases,
            "helper_calls": r.helper_calls}


def _funclets(view: MethodView) -> dict:
    m: FuncletModel = view.run.model
    image = view.run.image
    ranges = {r.funclet: r.index for r in view.ranges}
    return {
        "parent": m.parent,
        "funclets": [{"index": f.index, "kind": f.kind.value, "label": f.label, "function": f.function,
                      "pad": f.pad, "parent": f.parent, "clause": f.clause,
                      "class_token": f"0x{f.class_token:08X}" if f.class_token is not None else None,
                      "catchswitch": f.catchswitch, "filter": f.filter, "handler": f.handler, "state": f.state,
                      "depth": f.depth, "copy": f.copy, "copies": f.copies, "context": f.context,
                      "blocks": len(f.blocks), "range": ranges.get(f.index),
                      "absent": bool(image is not None and f.index in image.absent)}
                     for f in m.funclets],
        "catchswitches": [{"name": cs.name, "parent": cs.parent, "handlers": list(cs.handlers),
                           "unwind": cs.unwind} for cs in m.catchswitches],
        "states": [{"number": s.number, "funclet": s.funclet, "kind": s.kind.value, "clause": s.clause,
                    "try_states": list(s.try_states), "next": s.next, "enclosing": s.enclosing,
                    "enclosing_from": s.enclosing_from, "handler_parent": s.handler_parent} for s in m.states],
        "invokes": [{"il_offset": c.il_offset, "block": c.block, "funclet": c.funclet, "callee": c.callee,
                     "state": c.state, "callsite": c.callsite,
                     "chain": [s.number for s in m.protecting(c)]} for c in m.invokes],
        "layout": list(m.layout),
    }


def _image(view: MethodView) -> dict:
    im = view.image
    fc = im.filter_constants
    return {
        "parent": im.parent,
        "code_size": im.code_size,
        "padding": im.padding,
        "code": im.code.hex(),
        "ranges": [{"index": r.index, "funclet": r.funclet, "kind": r.kind.value, "label": r.label,
                    "start": r.start, "end": r.end, "symbol": r.symbol, "unwind_kind": r.unwind_kind,
                    "unwind_offset": r.unwind_offset, "unwind_synthesized": r.unwind_synthesized,
                    "segments": [{"function": s.function, "source": [s.source.start, s.source.end],
                                  "start": s.start, "end": s.end} for s in im.ranges[r.index].segments],
                    "roles": list(r.roles)} for r in view.ranges],
        "absent": list(im.absent),
        "ambiguous": list(im.ambiguous),
        "decided_by": im.decided_by,
        "filter_constants": None if fc is None else {"psp_slot_offset": fc.psp_slot_offset,
                                                     "fp_offset": fc.fp_offset, "evidence": list(fc.evidence)},
        "target": im.target,
        "read_only_data": im.read_only_data.hex(),
        "read_only_data_offset": im.read_only_data_offset,
        "cells": [{"offset": at, "symbol": symbol} for at, symbol in im.cells],
        "stack_probe": list(probe) if (probe := stack_probe_span(im)) is not None else None,
        "relocations": [{"offset": r.offset, "type": getattr(r.type, "name", r.type), "symbol": r.symbol,
                         "addend": r.addend} for r in im.relocations],
        "fixups": [{"kind": f.kind, "site": f.site, "size": f.size, "source": f.source, "target": f.target,
                    "detail": f.detail} for f in im.fixups],
        "runtime_functions": [{"begin": f.begin_rva, "end": f.end_rva, "unwind": f.unwind_rva}
                              for f in im.runtime_functions],
        "pdata": im.pdata().hex(),
        "disassembly": [{"range": d.range,
                         "padding": list(d.padding) if d.padding is not None else None,
                         "instructions": [{"address": i.address, "bytes": i.raw.hex(), "mnemonic": i.mnemonic,
                                           "operands": i.operands, "notes": list(i.notes),
                                           "events": [{"clause": e.clause, "event": e.what, "offset": e.offset}
                                                      for e in i.events]}
                                          for i in d.insns]}
                        for d in view.disassembly],
    }


def _clauses(view: MethodView) -> dict:
    run = view.run
    return {
        "profile": str(run.profile),
        "hex": run.clause_bytes.hex(),
        "main": [run.clauses.main.start, run.clauses.main.end],
        "funclets": [[f.start, f.end] for f in run.clauses.funclets],
        "clauses": [{"index": row.index, "flags": int(row.clause.flags), "flag_names": list(row.flag_names),
                     "kind": row.clause.kind, "duplicate": row.clause.is_duplicate,
                     "duplicate_of": row.duplicate_of,
                     "try": [row.clause.try_start, row.clause.try_end],
                     "handler": [row.clause.handler_start, row.clause.handler_end],
                     "class_token_or_filter": row.clause.class_token_or_filter,
                     "class_token": f"0x{row.clause.class_token:08X}" if row.clause.class_token is not None
                     else None,
                     "class": row.class_name,
                     "filter": ([row.clause.filter_start, row.filter_end]
                                if row.clause.filter_start is not None else None),
                     "try_range": row.try_range, "handler_range": row.handler_range,
                     "filter_range": row.filter_range, "il_clause": row.il_clause}
                    for row in view.clauses],
    }


def _unwind(view: MethodView) -> dict:
    im = view.image
    records = []
    for n, rec in enumerate(view.unwind):
        info = rec.info
        records.append({
            "range": n, "kind": rec.kind.value, "funclet": rec.funclet, "start": rec.start, "end": rec.end,
            "offset": im.runtime_functions[n].unwind_rva, "size": len(rec.data), "synthesized": rec.synthesized,
            "version": info.version, "flags": int(info.flags), "prolog_size": info.prolog_size,
            "frame_register": info.frame_register_name, "frame_offset": info.frame_offset,
            "count_of_codes": info.count_of_codes,
            "codes": [{"code_offset": op.code_offset, "op": op.op.name, "op_info": op.op_info,
                       "operand": op.operand, "text": op.describe(info.frame_register, info.frame_offset)}
                      for op in info.codes],
            "hex": rec.data.hex(),
        })
    return {"hex": im.unwind_data.hex(), "records": records}


def _checks(view: MethodView) -> dict:
    run = view.run
    d = run.differential
    return {
        "validator": None if run.clauses is None else
        [{"rule": f.rule, "clauses": list(f.clauses), "message": f.message, "severity": f.severity}
         for f in run.findings],
        "image": None if run.image is None else
        [{"rule": f.rule, "offset": f.offset, "detail": f.detail} for f in run.image_findings],
        "funclet_model": None if run.model is None else list(view.model_findings),
        "differential": None if d is None else {
            "classification": d.classification, "ours": d.ours, "llvm": d.llvm,
            "quirks": {k: v for k, v in d.quirks.items() if v},
            "differences": [{"reason": x.reason, "explained": x.explained, "detail": x.detail,
                             "ours": list(x.ours), "llvm": list(x.llvm)} for x in d.differences]},
        "dispatch": None if getattr(run, "dispatch", None) is None else run.dispatch.to_json(),
    }


__all__ = ["reader_json", "report"]
