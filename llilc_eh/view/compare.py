"""Ours beside RyuJIT: one method's clause table, code and funclets from llilc-eh and from the
ReadyToRun image, both set against the IL clauses (`translate --compare-r2r`, and the
per-method records of `validate --per-method`).

Why a separate classification for our side: `check.compare` aligns a JIT's *primary* clauses
with the IL's in order, which is right for RyuJIT (one primary per surviving IL clause, in IL
order) but not for our table, where one IL clause may own several primaries -- a *split try*
(another run of calls of the same try, same handler, `clauses.generate`) or a *handler copy*
(the same IL handler compiled twice, e.g. a handler nested in a finally that has a normal-path
copy). Our funclet model knows which IL clause each handler funclet is the code of, so our
side is classified from that fact instead of by alignment:

    native role   il #k         the first primary of IL clause k
                  split #k      another try run of the same handler funclet
                  copy #k       a primary whose handler is another copy of IL clause k's handler
                  duplicate     a DUPLICATED clause (a funclet's code inside a try)
                  cloned-finally, synchronized-monitor-exit, unexplained   (RyuJIT, `check.compare`)
    IL fate       kept, finally-became-fault, removed (no primary at all)

Code size: the bytes from the main body's start to the last funclet's end -- ours
`FinalImage.code` (alignment padding between ranges included), RyuJIT's last RUNTIME_FUNCTION
end minus the main one's start (its funclets follow the main body contiguously). A `Side` is
a pure function of one method's results: the same input gives the same record.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import capstone

from ..assembly.body import ClauseKind, ILClause
from ..check.compare import CLONED_FINALLY, DUPLICATE, FINALLY_TO_FAULT, KEPT, REMOVED

SPLIT = "split"
COPY = "copy"
OURS = "llilc-eh"
RYUJIT = "RyuJIT"


@dataclass(frozen=True)
class Side:
    """One JIT's result for one method, in the words both sides share."""

    jit: str
    clauses: int
    primaries: int
    duplicates: int
    split: int                  # extra try runs of a handler (ours only)
    copies: int                 # extra handler copies of an IL clause (ours only)
    cloned_finally: int         # RyuJIT's cloned-finally markers (FINALLY|DUPLICATED, empty try)
    code_size: int
    funclets: int
    il_fates: tuple[str, ...]   # per IL clause
    roles: tuple[str, ...]      # per native clause

    def classification(self) -> str:
        """`identical`, or the sorted set of what differs from the IL (as check.compare says it)."""
        kinds = {f for f in self.il_fates if f != KEPT}
        kinds |= {r.split(" ")[0] for r in self.roles if not r.startswith("il #")}
        return "+".join(sorted(kinds)) or "identical"

    def as_dict(self) -> dict:
        return {"clauses": self.clauses, "primaries": self.primaries, "duplicates": self.duplicates,
                "split": self.split, "copies": self.copies, "cloned_finally": self.cloned_finally,
                "code_size": self.code_size, "funclets": self.funclets,
                "classification": self.classification(), "il_fates": list(self.il_fates),
                "roles": list(self.roles)}


def our_side(run) -> Side | None:
    """Our table classified against the IL through the funclet model (None: no table)."""
    if run.clauses is None or run.image is None or run.model is None:
        return None
    image, model = run.image, run.model
    il_clauses = run.il.body.clauses

    def il_clause_of(offset: int) -> int | None:
        r = next((r for r in image.ranges if r.begin <= offset < r.end), None)
        return model.funclets[r.funclet].clause if r is not None else None

    roles, first_handler, seen = [], {}, set()
    for c in run.clauses.clauses:
        if c.is_duplicate:
            roles.append(DUPLICATE)
            continue
        k = il_clause_of(c.handler_start)
        handler = (c.handler_start, c.handler_end)
        if k is None:
            roles.append("unexplained")
        elif handler in seen:
            roles.append(f"{SPLIT} #{k}")
        elif k in first_handler:
            roles.append(f"{COPY} #{k}")
        else:
            first_handler[k] = c
            roles.append(f"il #{k}")
        seen.add(handler)
    fates = []
    for il in il_clauses:
        c = first_handler.get(il.index)
        if c is None:
            fates.append(REMOVED)
        elif il.kind is ClauseKind.FINALLY and c.kind == "fault":
            fates.append(FINALLY_TO_FAULT)
        else:
            fates.append(KEPT)
    count = Counter(r.split(" ")[0] for r in roles)
    return Side(OURS, len(roles), len(roles) - count[DUPLICATE], count[DUPLICATE], count[SPLIT], count[COPY], 0,
                image.code_size, len(image.ranges) - 1, tuple(fates), tuple(roles))


def ryujit_side(check) -> Side:
    """RyuJIT's table for one ReadyToRun body (`check.r2r.R2RMethodCheck`), classified by
    `check.compare` (roles `il #k`, duplicate, cloned-finally, ...)."""
    m = check.method
    clauses = m.native.clauses
    cmp = check.comparison
    roles = tuple(cmp.native_roles) if cmp is not None else ("",) * len(clauses)
    fates = tuple(cmp.il_fates) if cmp is not None else ()
    dup = sum(r == DUPLICATE for r in roles)
    cloned = sum(r == CLONED_FINALLY for r in roles)
    size = m.runtime_functions[-1].end_rva - m.main.begin_rva
    return Side(RYUJIT, len(clauses), len(clauses) - dup - cloned, dup, 0, 0, cloned, size, len(m.funclets),
                fates, roles)


def r2r_body(image, token: int, *, instantiation: bool = False):
    """RyuJIT's body for a MethodDef token: the one reached through the MethodDef entry points
    (a generic method's instantiations are other code), None when the image has none. With
    `instantiation`, a method that has only instantiated bodies gets the first of them (by
    address): what `translate --compare-r2r` shows for one method, saying so; the records and
    their aggregates keep to MethodDef bodies."""
    if image is None:
        return None
    bodies = image.methods_for_token(token)
    plain = next((b for b in bodies if not b.is_instantiation), None)
    if plain is None and instantiation and bodies:
        return min(bodies, key=lambda b: b.rva)
    return plain


# --------------------------------------------------------------------------------------------
# RyuJIT's code


@dataclass(frozen=True)
class NativeLine:
    address: int                # from the method's start
    text: str                   # `mnemonic operands`, capstone's Intel syntax


def ryujit_disassembly(asm, m) -> tuple[tuple[str, tuple[NativeLine, ...]], ...]:
    """Every code range of RyuJIT's body (main, then funclets), offsets from the method start.
    Calls and RIP-relative operands are left as capstone prints them: R2R code reaches other
    methods through import cells the runtime fills."""
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    out = []
    for n, rf in enumerate(m.runtime_functions):
        start = asm.rva_to_offset(rf.begin_rva)
        if start is None:
            out.append(("main" if n == 0 else f"funclet {n}", ()))
            continue
        code = bytes(asm.data[start:start + rf.size])
        base = rf.begin_rva - m.rva
        lines, at = [], 0
        while at < len(code):
            for address, size, mnemonic, operands in md.disasm_lite(code[at:], base + at):
                lines.append(NativeLine(address, f"{mnemonic} {operands}".rstrip()))
                at = address - base + size
            if at < len(code):
                lines.append(NativeLine(base + at, f".byte {code[at]:#04x}"))
                at += 1
        out.append(("main" if n == 0 else f"funclet {n}", tuple(lines)))
    return tuple(out)


# --------------------------------------------------------------------------------------------
# The text view


def _columns(left: list[str], right: list[str], width: int) -> list[str]:
    rows = max(len(left), len(right))
    left = left + [""] * (rows - len(left))
    right = right + [""] * (rows - len(right))
    return [f"{a[:width]:<{width}} | {b}".rstrip() for a, b in zip(left, right)]


def _fate_cell(side: Side | None, k: int) -> str:
    if side is None:
        return "-"
    if k >= len(side.il_fates):
        return "-"
    own = [str(i) for i, r in enumerate(side.roles) if r.endswith(f"#{k}") and not r.startswith("il ")] \
        if side.jit == OURS else []
    first = [str(i) for i, r in enumerate(side.roles) if r == f"il #{k}"]
    text = side.il_fates[k] + (f" #{first[0]}" if first else "")
    return text + (f" (+{len(own)}: " + " ".join(f"#{i}" for i in own) + ")" if own else "")


def render_compare(view, ours: Side | None, theirs: Side | None, check, ryu_code, *,
                   why_no_r2r: str | None = None, names=None) -> str:
    """The `translate --compare-r2r` text: counts, the IL clauses with their fate on each side,
    both clause tables with each clause's role, both disassemblies side by side."""
    from ..il.listing import clause_text

    run = view.run
    type_name = names.type_name if names is not None else None
    il_clauses: tuple[ILClause, ...] = run.il.body.clauses if run.il is not None else ()
    lines = [f"// ours beside RyuJIT: {view.title} ({view.assembly})", ""]
    rows = [("clauses", "clauses"), ("primaries", "primaries"), ("duplicates", "duplicates"),
            ("split tries (extra runs)", "split"), ("handler copies", "copies"),
            ("cloned-finally markers", "cloned_finally"), ("code size (bytes)", "code_size"),
            ("funclets", "funclets")]
    lines.append(f"{'':<28} {'IL':>6} {OURS:>10} {RYUJIT:>10}")
    for label, attr in rows:
        il = str(len(il_clauses)) if attr == "clauses" else ""
        a = str(getattr(ours, attr)) if ours else "-"
        b = str(getattr(theirs, attr)) if theirs else "-"
        lines.append(f"{label:<28} {il:>6} {a:>10} {b:>10}")
    if ours and theirs and theirs.code_size:
        lines.append(f"{'code size ours / RyuJIT':<28} {'':>6} {ours.code_size / theirs.code_size:>21.2f}")
    lines.append(f"{'classification':<28} {'':>6} {ours.classification() if ours else '-'}  |  "
                 f"{theirs.classification() if theirs else '-'}")
    if theirs is None:
        lines.append(f"RyuJIT: {why_no_r2r or 'no ReadyToRun body for this method'}")
    elif check.method.is_instantiation:
        lines.append(f"RyuJIT: the generic definition has no body of its own; this is the first instantiated "
                     f"body in the image (RVA 0x{check.method.rva:08X})")
    if run.error is not None:
        lines.append(f"llilc-eh: stopped at [{run.error.stage}/{run.error.kind}] {run.error.describe()}")
    lines += ["", "IL clauses and their fate (#n: the native clause that is its primary; +k: more of ours)"]
    width = max([len(clause_text(c, type_name)) for c in il_clauses] + [10])
    for c in il_clauses:
        lines.append(f"{clause_text(c, type_name):<{width}}  ours: {_fate_cell(ours, c.index):<28} "
                     f"RyuJIT: {_fate_cell(theirs, c.index)}")
    ours_rows = [f"{OURS} (offsets from the method start)"]
    if run.clauses is not None and ours is not None:
        ours_rows += [f"{i:<2} {c}  <- {role}" for i, (c, role) in enumerate(zip(run.clauses.clauses, ours.roles))]
    theirs_rows = [f"{RYUJIT} (offsets from the method start)"]
    if check is not None and theirs is not None:
        theirs_rows += [f"{i:<2} {c}  <- {role}" if role else f"{i:<2} {c}"
                        for i, (c, role) in enumerate(zip(check.method.native.clauses, theirs.roles))]
    lines += ["", "clause tables"]
    lines += _columns(ours_rows, theirs_rows, 96)
    lines += ["", "code (capstone, Intel syntax)"]
    left = []
    for d in view.disassembly:
        r = view.ranges[d.range]
        left.append(f"; range {r.index} {r.label} [{r.start:#06x}, {r.end:#06x})")
        left += [f"{i.address:04x}  {i.text}" for i in d.insns]
    right = []
    for label, insns in ryu_code or ():
        span = f" [{insns[0].address:#06x}, ...)" if insns else " (not in the file)"
        right.append(f"; {label}{span}")
        right += [f"{i.address:04x}  {i.text}" for i in insns]
    lines += _columns(left, right, 64)
    return "\n".join(lines) + "\n"


def compare_json(ours: Side | None, theirs: Side | None, check, *, why_no_r2r: str | None = None) -> dict:
    """The `--compare-r2r --json` part of a method's document (deterministic)."""
    return {
        "ours": ours.as_dict() if ours else None,
        "ryujit": None if theirs is None else {
            **theirs.as_dict(), "rva": check.method.rva, "instantiation": check.method.is_instantiation,
            "clauses_table": [{"flags": int(c.flags), "kind": c.kind, "try": [c.try_start, c.try_end],
                               "handler": [c.handler_start, c.handler_end],
                               "class_token_or_filter": c.class_token_or_filter}
                              for c in check.method.native.clauses]},
        "ryujit_missing": why_no_r2r if theirs is None else None,
    }
