"""Per-method records (`validate --translate --per-method FILE.jsonl`) and their diff
(`llilc-eh diff A.jsonl B.jsonl`).

Why records: a batch summary keeps counts, so two strategies (selectors vs cloned finallys,
O0 vs O2, one version of llilc-eh vs the next) cannot be compared method by method. A record
is one JSON object per method with EH: its IL shape, what we made of it (`view.compare.Side`:
clauses, duplicates, split tries, handler copies, code size, funclets, the fate of each IL
clause), RyuJIT's table and code size where the ReadyToRun image has a body for it, the LLVM
differential's class, the outcome, and the options used.

Determinism: a record is a pure function of one method's results (no paths beyond the file's
name, no dates, no timings unless `--per-method-seconds` asks for them), and the file is
sorted by (file, token), so a run split across processes or machines writes the same bytes
as one process does.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from ..errors import LlilcEhError
from ..il.regions import RegionKind
from .compare import our_side, r2r_body, ryujit_side

# What `diff` compares per method: (label, path into the record).
DIFF_FIELDS = (
    ("status", ("status",)),
    ("clauses", ("ours", "clauses")),
    ("duplicates", ("ours", "duplicates")),
    ("split tries", ("ours", "split")),
    ("handler copies", ("ours", "copies")),
    ("code size", ("ours", "code_size")),
    ("funclets", ("ours", "funclets")),
    ("differential", ("differential",)),
    ("dispatch mismatches", ("dispatch", "mismatches")),
)


def il_shape(il) -> dict:
    """The IL's EH shape: clauses by kind, try depth, mutual protection, try in a handler."""
    tree = il.regions
    return {"code_size": il.body.code_size, "clauses": len(il.body.clauses),
            "kinds": dict(sorted(Counter(c.kind.word for c in il.body.clauses).items())),
            "try_depth": tree.max_try_depth,
            "mutual_protect": any(len(r.handlers) > 1 for r in tree.regions),
            "try_in_handler": any(r.kind is RegionKind.TRY and tree.enclosing_handler(r) is not None
                                  for r in tree.regions)}


def _ryujit(asm, image, token: int) -> dict | None:
    """RyuJIT's side for one method, None without a ReadyToRun body. A damaged image's error
    is the record's (`ryujit_error`), never the run's."""
    from ..check.r2r import check_method

    body = r2r_body(image, token)
    if body is None:
        return None
    side = ryujit_side(check_method(asm, image, body))
    return side.as_dict()


def method_record(file: str, run, asm, image, options: dict, *, seconds: bool = False) -> dict:
    """The record of one pipeline run (`pipeline.MethodRun`); `image` the file's
    ReadyToRunImage or None."""
    token = run.il.body.token if run.il is not None else 0x06000000 | run.rid
    e = run.error
    ours = our_side(run)
    failures = _failures(run)
    rec = {"file": file, "token": f"0x{token:08X}",
           "name": run.il.body.name if run.il is not None else run.name.partition(" ")[2],
           "il": il_shape(run.il) if run.il is not None else None,
           "status": f"{e.stage}:{e.kind}" if e is not None else (failures[0] if failures else "ok"),
           "ours": ours.as_dict() if ours is not None else None,
           "differential": run.differential.classification if run.differential is not None else None,
           "dispatch": _dispatch(run),
           "options": options}
    try:
        rec["ryujit"] = _ryujit(asm, image, token)
    except LlilcEhError as exc:
        rec["ryujit"], rec["ryujit_error"] = None, f"{exc.stage}:{exc.kind}"
    if seconds:
        rec["seconds"] = round(sum(v for k, v in run.seconds.items() if k != "codegen-wait"), 6)
    return rec


def failed_record(file: str, failure: dict, options: dict) -> dict | None:
    """The record of an EH method that never reached the pipeline (its IL broke a rule, or
    its body could not be read), from the batch's failure record; None when the failure
    names no method token."""
    token, _, name = (failure.get("method") or "").partition(" ")
    if not token.startswith("0x06"):
        return None
    return {"file": file, "token": token.upper().replace("0X", "0x"), "name": name, "il": None,
            "status": f"{failure['stage']}:{failure['kind']}", "ours": None, "differential": None,
            "dispatch": None, "options": options, "ryujit": None}


def _failures(run) -> list[str]:
    from ..batch import run_failures
    return [f"{f['stage']}:{f['kind']}" for f in run_failures(run)] if run.error is None else []


def _dispatch(run):
    """The dispatch check's counts when the pipeline ran one (`check.dispatch`), else None."""
    d = getattr(run, "dispatch", None)
    if d is None:
        return None
    return {"call_sites": len(getattr(d, "sites", ())), "scenarios": getattr(d, "scenarios", 0),
            "mismatches": len(getattr(d, "mismatches", ())),
            "unchecked": dict(sorted(getattr(d, "unchecked", {}).items()))}


def dumps_records(records: list[dict], *, seconds: bool = True) -> str:
    """One JSON line per record, sorted by (file, token): the same bytes however the run was split
    (`seconds=False` leaves timings out: `--html` times every run, the records file only when asked)."""
    rows = sorted(records, key=lambda r: (r["file"], r["token"]))
    if not seconds:
        rows = [{k: v for k, v in r.items() if k != "seconds"} for r in rows]
    return "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in rows)


# --------------------------------------------------------------------------------------------
# diff


def load_records(path: str | Path) -> dict[tuple[str, str], dict]:
    """A records file by (file, token); a line that is not a record is unusable input."""
    out = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise LlilcEhError(f"{path}: {e.strerror}", kind="bad-input") from None
    except UnicodeDecodeError:
        raise LlilcEhError(f"{path}: not a records file (not UTF-8 text)", kind="bad-input") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            key = (rec["file"], rec["token"])
        except (ValueError, KeyError, TypeError):
            raise LlilcEhError(f"{path}:{n}: not a per-method record (validate --per-method writes them)",
                               kind="bad-input") from None
        out[key] = rec
    return out


def _get(rec: dict | None, path: tuple[str, ...]):
    for k in path:
        if not isinstance(rec, dict):
            return None
        rec = rec.get(k)
    return rec


def _total(recs, path) -> int:
    return sum(v for v in (_get(r, path) for r in recs) if isinstance(v, int) and not isinstance(v, bool))


def diff_records(a: dict, b: dict, *, name_a: str = "A", name_b: str = "B", limit: int | None = None) -> str:
    """Per method and in aggregate, what changed from `a` to `b` (both from `load_records`)."""
    both = sorted(set(a) & set(b))
    only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    lines = [f"diff {name_a} -> {name_b}: {len(both)} methods in both, {len(only_a)} only in {name_a}, "
             f"{len(only_b)} only in {name_b}"]
    opts = ({json.dumps(r.get("options"), sort_keys=True) for r in a.values()},
            {json.dumps(r.get("options"), sort_keys=True) for r in b.values()})
    lines.append(f"options: {name_a} {' '.join(sorted(opts[0]))}; {name_b} {' '.join(sorted(opts[1]))}")
    lines += [f"A = {name_a}, B = {name_b}", "",
              f"{'aggregate (methods in both)':<30} {'A':>12} {'B':>12} {'change':>10} {'methods changed':>16}"]
    ra, rb = [a[k] for k in both], [b[k] for k in both]
    for label, path in DIFF_FIELDS:
        changed = sum(_get(x, path) != _get(y, path) for x, y in zip(ra, rb))
        if label in ("status", "differential"):
            lines.append(f"{label:<30} {'':>12} {'':>12} {'':>10} {changed:>16}")
            continue
        ta, tb = _total(ra, path), _total(rb, path)
        pct = f"{100.0 * (tb - ta) / ta:+.1f}%" if ta else ""
        lines.append(f"{label:<30} {ta:>12} {tb:>12} {pct:>10} {changed:>16}")
    ok = lambda r: r.get("status") == "ok"  # noqa: E731
    lines.append(f"{'clean (status ok)':<30} {sum(map(ok, ra)):>12} {sum(map(ok, rb)):>12}")
    if any("seconds" in r for r in ra) and any("seconds" in r for r in rb):
        sa = sum(r.get("seconds") or 0 for r in ra)
        sb = sum(r.get("seconds") or 0 for r in rb)
        lines.append(f"{'seconds (not deterministic)':<30} {sa:>12.2f} {sb:>12.2f}")
    moves = Counter((x.get("status"), y.get("status")) for x, y in zip(ra, rb) if x.get("status") != y.get("status"))
    if moves:
        lines += ["", "status changes:"] + [f"  {n:>6}  {s} -> {t}" for (s, t), n in moves.most_common()]
    # Code size distribution of B / A per method (both with code).
    ratios = sorted(_get(y, ("ours", "code_size")) / _get(x, ("ours", "code_size")) for x, y in zip(ra, rb)
                    if _get(x, ("ours", "code_size")) and _get(y, ("ours", "code_size")))
    if ratios:
        q = lambda p: ratios[min(len(ratios) - 1, int(p * len(ratios)))]  # noqa: E731
        lines.append(f"code size B/A per method: min {ratios[0]:.2f}, p10 {q(0.1):.2f}, "
                     f"median {q(0.5):.2f}, p90 {q(0.9):.2f}, max {ratios[-1]:.2f} ({len(ratios)} methods)")
    lines += ["", "per method (fields that changed):"]
    shown = 0
    for k in both:
        x, y = a[k], b[k]
        changes = [f"{label} {_get(x, p)} -> {_get(y, p)}" for label, p in DIFF_FIELDS if _get(x, p) != _get(y, p)]
        if not changes:
            continue
        shown += 1
        if limit is None or shown <= limit:
            lines.append(f"  {k[0]} {k[1]} {x.get('name', '')}: " + "; ".join(changes))
    if limit is not None and shown > limit:
        lines.append(f"  ... {shown - limit} more (--all shows every one)")
    if shown == 0:
        lines.append("  none")
    for label, keys in ((f"only in {name_a}", only_a), (f"only in {name_b}", only_b)):
        if keys:
            lines.append(f"{label}: " + ", ".join(f"{f} {t}" for f, t in keys[:20])
                         + (f" ... ({len(keys)})" if len(keys) > 20 else ""))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# ours beside RyuJIT, in aggregate


def _quantiles(values: list[float], fmt: str = ".2f") -> str:
    v = sorted(values)
    q = lambda p: v[min(len(v) - 1, int(p * len(v)))]  # noqa: E731
    return (f"min {v[0]:{fmt}}, p10 {q(0.1):{fmt}}, median {q(0.5):{fmt}}, p90 {q(0.9):{fmt}}, "
            f"max {v[-1]:{fmt}}")


def versus_ryujit(records: dict, *, name: str = "", top: int = 10) -> str:
    """`llilc-eh diff A.jsonl` (one file): our tables beside RyuJIT's over the methods that have
    both -- our run clean and a ReadyToRun body -- in aggregate and per-method distributions."""
    recs = list(records.values())
    both = [r for r in recs if r.get("status") == "ok" and r.get("ours") and r.get("ryujit")]
    lines = [f"ours beside RyuJIT{' in ' + name if name else ''}: {len(recs)} EH methods, {len(both)} with our clean "
             f"run and a ReadyToRun body ({sum(1 for r in recs if r.get('ryujit'))} with a body, "
             f"{sum(1 for r in recs if r.get('status') == 'ok')} clean)"]
    if not both:
        return "\n".join(lines) + "\n"
    opts = sorted({json.dumps(r.get("options"), sort_keys=True) for r in both})
    lines.append("options: " + " ".join(opts))
    il = sum(r["il"]["clauses"] for r in both if r.get("il"))
    lines += ["", f"{'':<26} {'IL':>9} {'llilc-eh':>10} {'RyuJIT':>10} {'ours/RyuJIT':>12}"]
    for label, key in (("clauses", "clauses"), ("primaries", "primaries"), ("duplicates", "duplicates"),
                       ("split tries (extra runs)", "split"), ("handler copies", "copies"),
                       ("cloned-finally markers", "cloned_finally"), ("funclets", "funclets"),
                       ("code size (bytes)", "code_size")):
        a = sum(r["ours"][key] for r in both)
        b = sum(r["ryujit"][key] for r in both)
        ratio = f"{a / b:.2f}" if b else "-"
        lines.append(f"{label:<26} {il if key == 'clauses' else '':>9} {a:>10} {b:>10} {ratio:>12}")
    ratios = [r["ours"]["code_size"] / r["ryujit"]["code_size"] for r in both if r["ryujit"]["code_size"]]
    lines += ["", f"code size ours/RyuJIT per method: {_quantiles(ratios)}"]
    delta = Counter()
    for r in both:
        d = r["ours"]["clauses"] - r["ryujit"]["clauses"]
        delta["fewer" if d < 0 else "same" if d == 0 else "more"] += 1
    lines.append(f"clauses per method, ours vs RyuJIT: more {delta['more']}, same {delta['same']}, fewer {delta['fewer']}"
                 f"; ours - RyuJIT {_quantiles([r['ours']['clauses'] - r['ryujit']['clauses'] for r in both], 'd')}")
    for side, key in (("llilc-eh", "ours"), ("RyuJIT", "ryujit")):
        fates = Counter(f for r in both for f in r[key]["il_fates"])
        roles = Counter(x.split(" ")[0] for r in both for x in r[key]["roles"])
        lines.append(f"IL clause fates, {side}: " + ", ".join(f"{k} {v}" for k, v in sorted(fates.items()))
                     + "; native clauses by role: " + ", ".join(f"{k} {v}" for k, v in sorted(roles.items())))
    for side, key in (("llilc-eh", "ours"), ("RyuJIT", "ryujit")):
        cls = Counter(r[key]["classification"] for r in both)
        lines.append(f"methods by classification, {side}: "
                     + ", ".join(f"{k} {v}" for k, v in cls.most_common(8))
                     + (f", ... ({len(cls)} classes)" if len(cls) > 8 else ""))
    lines += ["", f"most clauses more than RyuJIT (top {top}):"]
    for r in sorted(both, key=lambda r: (r["ryujit"]["clauses"] - r["ours"]["clauses"], r["file"], r["token"]))[:top]:
        lines.append(f"  {r['ours']['clauses']:>4} vs {r['ryujit']['clauses']:>3}  {r['file']} {r['token']} {r['name']}")
    lines += ["", f"largest code size ratio (top {top}):"]
    for r in sorted(both, key=lambda r: (-r["ours"]["code_size"] / max(1, r["ryujit"]["code_size"]), r["file"],
                                         r["token"]))[:top]:
        lines.append(f"  {r['ours']['code_size'] / max(1, r['ryujit']['code_size']):>5.2f}  {r['ours']['code_size']:>6} vs "
                     f"{r['ryujit']['code_size']:>6}  {r['file']} {r['token']} {r['name']}")
    return "\n".join(lines) + "\n"
