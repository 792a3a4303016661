"""`MethodView`: one `MethodRun` with its cross-references computed (see the package docstring).

Everything here is a plain value derived from the run; the renderers (text, report, svg)
only format it. A run that stopped early gives a view with the later parts empty.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import capstone

from ..assembly.native import ClauseFlags, NativeClause
from ..backend.image import FinalImage
from ..backend.relink import STACK_PROBE_CODE, Fixup, ImageRelocation
from ..funclets.model import FuncletKind
from ..pipeline import MethodRun, UnwindRecord

Namer = Callable[[int], str]

# Clause events, in the order they are listed at one instruction.
TRY_BEGIN, TRY_END, FILTER_BEGIN, HANDLER_BEGIN, HANDLER_END = (
    "try-begin", "try-end", "filter-begin", "handler-begin", "handler-end")
_EVENT_ORDER = {TRY_END: 0, TRY_BEGIN: 1, FILTER_BEGIN: 2, HANDLER_BEGIN: 3, HANDLER_END: 4}

_BRANCHES = frozenset({"call", "jmp"})
_RIP_OPERAND = re.compile(r"\[rip(?: [+-] 0x[0-9a-f]+)?\]")
_RIP_DISPLACEMENT = re.compile(r"\[rip ([+-]) (0x[0-9a-f]+|[0-9]+)\]")
_IMMEDIATE = re.compile(r"0x[0-9a-f]+")


@dataclass(frozen=True)
class RangeRow:
    """One range of the final image, with what the clauses make of it."""

    index: int                  # position in the final image (ranges[0]: the main body)
    funclet: int                # model funclet index
    kind: FuncletKind
    label: str                  # the model's label: `finally #0`, `filter-handler #3 (copy 1/2)`
    start: int
    end: int
    symbol: str                 # the object symbol whose code it is
    unwind_kind: str            # ROOT | HANDLER | FILTER (CorJitFuncKind)
    unwind_offset: int          # of its UNWIND_INFO in the image's unwind data
    unwind_synthesized: bool
    roles: tuple[str, ...]      # `handler of #0 #4`, `filter of #3`, `holds the tries of #0 #1`, ...

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def short(self) -> str:
        """`range 1 finally f3`: how other sections refer to it."""
        return f"range {self.index} {self.kind.value} f{self.funclet}"


@dataclass(frozen=True)
class ClauseRow:
    """One native clause with the ranges and the IL clause it refers to."""

    index: int
    clause: NativeClause
    flag_names: tuple[str, ...]     # the kind first, then DUPLICATED / SAMETRY
    try_range: int | None           # index of the range holding the try (its first byte)
    handler_range: int | None
    filter_range: int | None
    il_clause: int | None           # the IL clause its handler funclet is the code of
    class_name: str | None          # catch: the class token's name
    duplicate_of: int | None        # a duplicate: the primary it repeats

    @property
    def flags_text(self) -> str:
        return "|".join(self.flag_names)

    @property
    def filter_end(self) -> int | None:
        """A filter's code ends where its handler begins (the CLR knows no other end)."""
        return self.clause.handler_start if self.clause.filter_start is not None else None


@dataclass(frozen=True)
class Event:
    clause: int
    what: str                       # TRY_BEGIN, TRY_END, FILTER_BEGIN, HANDLER_BEGIN, HANDLER_END
    offset: int                     # the offset the clause names (an end is exclusive)

    def __str__(self) -> str:
        return f"{self.what.replace('-', ' ')} #{self.clause} @{self.offset:#06x}"


@dataclass(frozen=True)
class Insn:
    """One instruction of the final image."""

    address: int
    raw: bytes
    mnemonic: str
    operands: str                   # capstone's, with external symbols named
    notes: tuple[str, ...]          # symbols, fixups, targets in other ranges
    events: tuple[Event, ...]

    @property
    def end(self) -> int:
        return self.address + len(self.raw)

    @property
    def text(self) -> str:
        return f"{self.mnemonic} {self.operands}".rstrip()


@dataclass(frozen=True)
class DisasmRange:
    range: int                      # RangeRow.index
    insns: tuple[Insn, ...]
    padding: tuple[int, int] | None  # [start, end) of the gap after it (int3), if any
    probe: tuple[Insn, ...] = ()     # our stack probe routine, when it sits in that gap


@dataclass(frozen=True)
class MethodView:
    run: MethodRun
    title: str                      # `0x06000062 Tests.Ns.Type::Name`
    assembly: str                   # the assembly's file name
    il_text: str | None             # the IL listing (il.listing.render)
    il_json: dict | None
    ranges: tuple[RangeRow, ...]
    clauses: tuple[ClauseRow, ...]
    disassembly: tuple[DisasmRange, ...]
    unwind: tuple[UnwindRecord, ...]
    model_findings: tuple[str, ...]
    clone_finally: bool = False     # the reader's option (Options.clone_finally)

    @property
    def image(self) -> FinalImage | None:
        return self.run.image

    def range_at(self, offset: int) -> RangeRow | None:
        return next((r for r in self.ranges if r.start <= offset < r.end), None)

    def where(self, offset: int) -> str:
        """`0x0041 (range 0 root f0 +0x41)`: an image offset in the words of the layout table."""
        r = self.range_at(offset)
        if r is None:
            return f"{offset:#06x}"
        return f"{offset:#06x} ({r.short} +{offset - r.start:#x})"


# --------------------------------------------------------------------------------------------
# Building


def build_view(run: MethodRun, names=None, assembly: str = "", *, clone_finally: bool = False) -> MethodView:
    """The view of `run`; `names` (`Assembly.names`) names tokens, classes and IL operands;
    `assembly` (a file name) and `clone_finally` (the reader option the run used) are shown."""
    from ..il.listing import render, to_json

    token_namer = names.token if names is not None else None
    type_namer = names.type_name if names is not None else None
    il_text = render(run.il, token_namer, type_namer) if run.il is not None else None
    il_json = to_json(run.il, token_namer, type_namer) if run.il is not None else None
    ranges: tuple[RangeRow, ...] = ()
    clauses: tuple[ClauseRow, ...] = ()
    disassembly: tuple[DisasmRange, ...] = ()
    records = tuple(run.unwind_records())
    if run.image is not None:
        clauses = _clause_rows(run, type_namer)
        ranges = _range_rows(run, clauses)
        disassembly = _disassemble(run.image, ranges, clauses)
    findings = tuple(str(f) for f in run.model.verify()) if run.model is not None else ()
    return MethodView(run, run.name, assembly, il_text, il_json, ranges, clauses, disassembly, records, findings,
                      clone_finally)


def _clause_rows(run: MethodRun, type_namer: Namer | None) -> tuple[ClauseRow, ...]:
    if run.clauses is None:
        return ()
    image, model = run.image, run.model

    def range_index(offset: int) -> int | None:
        return next((n for n, r in enumerate(image.ranges) if r.begin <= offset < r.end), None)

    rows = []
    table = run.clauses.clauses
    plain = ~(ClauseFlags.DUPLICATED | ClauseFlags.SAMETRY)
    for k, c in enumerate(table):
        names = [c.kind]
        names += [f.name.lower() for f in (ClauseFlags.DUPLICATED, ClauseFlags.SAMETRY) if f in c.flags]
        handler = range_index(c.handler_start)
        funclet = image.ranges[handler].funclet if handler is not None else None
        il_clause = model.funclets[funclet].clause if funclet is not None and model is not None else None
        class_name = None
        if c.class_token is not None:
            class_name = type_namer(c.class_token) if type_namer is not None else f"0x{c.class_token:08X}"
        duplicate_of = None
        if c.is_duplicate:       # the primary it repeats: same kind (SAMETRY aside), same handler
            duplicate_of = next((j for j, p in enumerate(table) if not p.is_duplicate and p.flags & plain == c.flags & plain
                                 and (p.handler_start, p.handler_end, p.class_token_or_filter)
                                 == (c.handler_start, c.handler_end, c.class_token_or_filter)), None)
        rows.append(ClauseRow(k, c, tuple(names), range_index(c.try_start), handler,
                              range_index(c.filter_start) if c.filter_start is not None else None,
                              il_clause, class_name, duplicate_of))
    return tuple(rows)


def _range_rows(run: MethodRun, clauses: tuple[ClauseRow, ...]) -> tuple[RangeRow, ...]:
    image, model = run.image, run.model
    records = run.unwind_records()
    out = []
    for n, (r, rec, rf) in enumerate(zip(image.ranges, records, image.runtime_functions)):
        roles = []
        for role, ks in (("handler of", [c.index for c in clauses if c.handler_range == n]),
                         ("filter of", [c.index for c in clauses if c.filter_range == n]),
                         ("holds the tries of", [c.index for c in clauses
                                                 if c.try_range == n and not c.clause.is_duplicate]),
                         ("is the try of duplicates", [c.index for c in clauses
                                                       if c.try_range == n and c.clause.is_duplicate])):
            if ks:
                roles.append(f"{role} " + " ".join(f"#{k}" for k in ks))
        label = model.funclets[r.funclet].label if model is not None else r.kind.value
        out.append(RangeRow(n, r.funclet, r.kind, label, r.begin, r.end, r.function, rec.kind.value,
                            rf.unwind_rva, r.unwind_synthesized, tuple(roles)))
    return tuple(out)


# --------------------------------------------------------------------------------------------
# Disassembly


def _events(clauses: tuple[ClauseRow, ...]) -> list[tuple[int, Event]]:
    """(the byte an event is attached to, the event): begins at their offset, ends at the last
    byte they cover."""
    out = []
    for row in clauses:
        c = row.clause
        out.append((c.try_start, Event(row.index, TRY_BEGIN, c.try_start)))
        out.append((c.try_end - 1, Event(row.index, TRY_END, c.try_end)))
        if c.filter_start is not None:
            out.append((c.filter_start, Event(row.index, FILTER_BEGIN, c.filter_start)))
        out.append((c.handler_start, Event(row.index, HANDLER_BEGIN, c.handler_start)))
        out.append((c.handler_end - 1, Event(row.index, HANDLER_END, c.handler_end)))
    return out


def _disassemble(image: FinalImage, ranges: tuple[RangeRow, ...],
                 clauses: tuple[ClauseRow, ...]) -> tuple[DisasmRange, ...]:
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)   # Intel syntax by default
    relocations = {r.offset: r for r in image.relocations if r.offset < len(image.code)}
    fixups = {f.site: f for f in image.fixups if f.site < len(image.code)}
    events = _events(clauses)
    probe = stack_probe_span(image)
    out = []
    for n, r in enumerate(ranges):
        insns = []
        for address, raw, mnemonic, operands in _decode(md, image.code, r.start, r.end):
            end = address + len(raw)
            here = sorted((e for at, e in events if address <= at < end),
                          key=lambda e: (_EVENT_ORDER[e.what], e.clause))
            rels = [relocations[o] for o in range(address, end) if o in relocations]
            fix = [fixups[o] for o in range(address, end) if o in fixups]
            operands, notes = _annotate(mnemonic, operands, end, rels, fix, r, ranges)
            insns.append(Insn(address, raw, mnemonic, operands, tuple(notes), tuple(here)))
        following = ranges[n + 1].start if n + 1 < len(ranges) else len(image.code)
        padding = (r.end, following) if following > r.end else None
        routine = ()
        if padding is not None and probe is not None and r.end <= probe[0] < following:
            routine = tuple(Insn(a, raw, m, ops, (), ()) for a, raw, m, ops in _decode(md, image.code, *probe))
        out.append(DisasmRange(n, tuple(insns), padding, routine))
    return tuple(out)


def stack_probe_span(image: FinalImage) -> tuple[int, int] | None:
    """[start, end) of our stack probe routine (linux-x64: LLVM's prologs call it; it belongs
    to no range, so a view that showed the gaps between ranges as int3 padding hid it)."""
    if image.stack_probe is None:
        return None
    return image.stack_probe, image.stack_probe + len(STACK_PROBE_CODE)


def _decode(md, code: bytes, start: int, end: int):
    """(address, bytes, mnemonic, operands) over [start, end); an undecodable byte is `.byte`."""
    at = start
    while at < end:
        for address, size, mnemonic, operands in md.disasm_lite(code[at:end], at):
            yield address, code[address:address + size], mnemonic, operands
            at = address + size
        if at < end:            # capstone stopped at a byte it cannot decode
            yield at, code[at:at + 1], ".byte", f"{code[at]:#04x}"
            at += 1


def _symbol(rel: ImageRelocation) -> str:
    return f"{rel.symbol}{rel.addend:+#x}" if rel.addend else rel.symbol


def _annotate(mnemonic: str, operands: str, end: int, rels: list[ImageRelocation], fixups: list[Fixup],
              here: RangeRow, ranges: tuple[RangeRow, ...]) -> tuple[str, list[str]]:
    """Name external symbols in the operands; note where image-internal references lead."""
    notes = []
    for rel in rels:
        kind = rel.type.name if hasattr(rel.type, "name") else f"0x{rel.type:X}"
        if mnemonic in _BRANCHES and len(rels) == 1:
            operands = _symbol(rel)                       # call/jmp rel32 to an external symbol
        elif _RIP_OPERAND.search(operands) and len(rels) == 1 and kind.startswith("REL32"):
            operands = _RIP_OPERAND.sub(f"[rip + {_symbol(rel)}]", operands)
        else:
            notes.append(f"{kind} {_symbol(rel)}")
    for f in fixups:
        if f.kind == "frame-constant":
            notes.append(f"frame constant {f.target} ({f.detail})")
        elif f.kind == "stack-probe":
            notes.append(f"-> {f.target:#06x} (our stack probe routine, in no range)")
        elif f.kind == "cell":
            notes.append(f"-> {f.target:#06x} (data cell {f.detail}, read-only data)")
        else:
            notes.append(f"-> {_where(f.target, here, ranges)} ({f.kind} fixup)")
    if not rels and not fixups:
        # references the relink did not have to touch: the catchret continuation of a funclet
        # whose distance to its parent did not change, branches
        rip = _RIP_DISPLACEMENT.search(operands)
        if rip is not None:
            target = end + (1 if rip.group(1) == "+" else -1) * int(rip.group(2), 0)
            notes.append(f"-> {_where(target, here, ranges)}")
        elif (mnemonic.startswith("j") or mnemonic == "call") and _IMMEDIATE.fullmatch(operands):
            target = int(operands, 0)
            if not here.start <= target < here.end:
                notes.append(f"-> {_where(target, here, ranges)}")
    return operands, notes


def _where(target: int, here: RangeRow, ranges: tuple[RangeRow, ...]) -> str:
    r = next((r for r in ranges if r.start <= target < r.end), None)
    if r is None:
        return f"{target:#06x} (outside the code: read-only data)" if target >= ranges[-1].end else f"{target:#06x}"
    if r.index == here.index:
        return f"{target:#06x}"
    return f"{target:#06x} in {r.short} +{target - r.start:#x}"


__all__ = ["FILTER_BEGIN", "HANDLER_BEGIN", "HANDLER_END", "TRY_BEGIN", "TRY_END", "ClauseRow", "DisasmRange",
           "Event", "Insn", "MethodView", "RangeRow", "build_view"]
