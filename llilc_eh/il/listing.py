"""Human and machine views of an `ILMethod`: a monodis-like listing and a JSON-ready dict.

The listing shows the region structure inline, the way monodis does (`.try {` ... `} // end
.try`), so a reader sees which instructions each try, handler and filter covers; then the
raw clauses as encoded, the region tree and the basic blocks. Token operands and catch
classes are named through the caller's `namer`, so the il stage stays free of metadata.
"""

from __future__ import annotations

from typing import Callable

from ..assembly.body import ClauseKind, ILClause
from .method import ILMethod
from .regions import Region, RegionKind

Namer = Callable[[int], str]


def _hex_token(token: int) -> str:
    return f"0x{token:08X}"


def handler_opening(r: Region, clauses: tuple[ILClause, ...], type_namer: Namer) -> str:
    c = clauses[r.clauses[0]]
    if r.kind is RegionKind.CATCH:
        return f"catch {type_namer(c.class_token)} {{ // #{c.index}"
    if r.kind is RegionKind.FILTER:
        return f"filter {{ // #{c.index}"
    if r.kind is RegionKind.FILTER_HANDLER:
        return f"handler {{ // filter #{c.index}"
    return f"{r.kind.value} {{ // #{c.index}"


def clause_text(c: ILClause, type_namer: Namer) -> str:
    extra = ""
    if c.kind is ClauseKind.CATCH:
        extra = f"  class {type_namer(c.class_token)} ({_hex_token(c.class_token)})"
    elif c.kind is ClauseKind.FILTER:
        extra = f"  filter IL_{c.filter_start:04x}"
    enc = "fat" if c.fat else "small"
    return (f"#{c.index}  {c.kind.word:<7} try IL_{c.try_start:04x} to IL_{c.try_end:04x}  "
            f"handler IL_{c.handler_start:04x} to IL_{c.handler_end:04x}{extra}  [{enc}]")


def render(m: ILMethod, namer: Namer | None = None, type_namer: Namer | None = None) -> str:
    namer = namer or _hex_token
    type_namer = type_namer or namer
    tree = m.regions
    lines = [m.body.header_text()]
    opens: dict[int, list[Region]] = {}
    closes: dict[int, list[Region]] = {}
    for r in tree.regions[1:]:
        opens.setdefault(r.start, []).append(r)
        closes.setdefault(r.end, []).append(r)
    depth = 0
    for ins in m.instructions:
        for r in sorted(closes.get(ins.offset, ()), key=lambda r: -r.depth):
            depth -= 1
            lines.append("  " * (depth + 1) + f"}} // end {r.kind.value}")
        for r in sorted(opens.get(ins.offset, ()), key=lambda r: r.depth):
            if r.kind is RegionKind.TRY:
                head = f".try {{ // #{','.join(map(str, r.clauses))}"
            else:
                head = handler_opening(r, tree.clauses, type_namer)
            lines.append("  " * (depth + 1) + head)
            depth += 1
        lines.append("  " * (depth + 1) + ins.format(namer))
    for r in sorted(closes.get(m.body.code_size, ()), key=lambda r: -r.depth):
        depth -= 1
        lines.append("  " * (depth + 1) + f"}} // end {r.kind.value}")
    if tree.clauses:
        lines.append("")
        lines.append("// EH clauses, as encoded:")
        lines.extend("//   " + clause_text(c, type_namer) for c in tree.clauses)
        lines.append("// region tree:")
        lines.extend("//   " + line for line in str(tree).splitlines())
        lines.append(f"// max try depth {tree.max_try_depth}")
    lines.append(f"// {len(m.blocks)} basic blocks")
    if m.errors:
        lines.append(f"// {len(m.errors)} ECMA-335 violation(s):")
        lines.extend(f"//   [{e.kind}] {e.describe()}" for e in m.errors)
    return "\n".join(lines)


def to_json(m: ILMethod, namer: Namer | None = None, type_namer: Namer | None = None) -> dict:
    namer = namer or _hex_token
    type_namer = type_namer or namer
    b = m.body
    return {
        "token": _hex_token(b.token),
        "name": b.name,
        "header": {"format": "tiny" if b.tiny else "fat", "rva": b.rva, "code_size": b.code_size,
                   "max_stack": b.max_stack, "init_locals": b.init_locals,
                   "local_sig_token": _hex_token(b.local_sig_token) if b.local_sig_token else None,
                   "sections": [{"offset": s.offset, "eh_table": s.eh_table, "fat": s.fat,
                                 "data_size": s.data_size, "clauses": s.clause_count}
                                for s in b.sections]},
        "instructions": [{"offset": i.offset, "opcode": i.op.name, "size": i.size,
                          "operand": _operand_json(i.operand), "text": i.format(namer)}
                         for i in m.instructions],
        "clauses": [{"index": c.index, "kind": c.kind.word, "try": [c.try_start, c.try_end],
                     "handler": [c.handler_start, c.handler_end], "fat": c.fat,
                     "class_token": _hex_token(c.class_token) if c.class_token is not None else None,
                     "class": type_namer(c.class_token) if c.class_token is not None else None,
                     "filter": c.filter_start}
                    for c in b.clauses],
        "regions": [{"index": r.index, "kind": r.kind.value, "start": r.start, "end": r.end,
                     "parent": r.parent, "clauses": list(r.clauses), "try": r.try_region,
                     "handlers": list(r.handlers), "filter": r.filter_region, "depth": r.depth}
                    for r in m.regions.regions],
        "blocks": [{"start": bb.start, "end": bb.end, "successors": list(bb.successors),
                    "region": m.regions.innermost(bb.start).index}
                   for bb in m.blocks],
        "max_try_depth": m.regions.max_try_depth,
        "errors": [e.as_dict() for e in m.errors],
    }


def _operand_json(operand):
    if isinstance(operand, tuple):
        return list(operand)
    if isinstance(operand, float) and operand != operand:
        return "NaN"
    if isinstance(operand, float) and operand in (float("inf"), float("-inf")):
        return str(operand)
    return operand
