"""Cross-check of the assembly and il stages against monodis, Mono's IL disassembler.

monodis is an independent reader of the same bytes: its own PE/metadata loader, its own
method-header and EH-section parser, its own opcode table. For every method with EH we
compare what it lists with what our stages produce:

* the instruction stream: every instruction's IL offset and mnemonic, in order;
* the clause list: kind, try range, handler range, filter start and catch class name,
  clause by clause in table order;
* the method's identity (name) and code size, so that a record is never compared with
  the wrong method.

**Running it.** `monodis FILE` (no `--output`: with `--output=` monodis also extracts the
managed resources into the current directory) over the whole assembly once, stdout
captured, working directory a fresh temporary directory. A sample is disassembled in one
run too, with monodis' `--filter=FILE` option: a file `[AssemblyName]` / `T:<TypeDef rid>`
/ `M:<MethodDef rid>` restricts the listing to those rows; we list the sampled methods and
the types that declare them (with their enclosing types: a method is printed only inside
its type, a nested type only inside its enclosing type). CoreLib: ~8 s for the whole
listing, <1 s for a 10% sample.

monodis resolves the types a signature names through Mono's *own* class library, and on
some framework assemblies (Microsoft.VisualBasic.Core, System.Data.Common, ...) it dies
(SIGSEGV, or an assertion in get.c) on a type it cannot find there. The listing up to that
point is kept, the method it died in is reported as not compared ("monodis-failed"), and
monodis runs again, filtered to the methods still missing (`list_methods`). Methods it never
reaches are reported as "not-listed". On the same assemblies monodis also lists some
methods with no body at all (only `// Method begins at RVA`: Mono could not load the method
header, typically because a local's type is missing from its class library); those are
"monodis-failed" too. None of these is a mismatch: monodis has no opinion on them.

**Reading the listing** (monodis/main.c `dis_method_list`, monodis/dis-cil.c
`disassemble_cil`, Mono 6.8):

* `// method line N` opens every method; N is the MethodDef row (i + 1 over the table), so
  records map to tokens exactly. (`--show-method-tokens` is not used: Mono 6.8 prints a
  wrong token there, e.g. `0x6000001` for rows 2 and 3.) `} // end of method T::M` closes
  it; T is the declaring type's simple name (no namespace, no enclosing type).
* `IL_xxxx:  mnemonic operand` is an instruction; switch targets continue on lines of their
  own (`IL_xxxx,`), which have no colon.
* EH is printed as blocks around the instructions, decided per clause *before* and
  *after* each instruction by comparing offsets: before the instruction at `try_offset`
  `.try { // i`, at `handler_offset` `catch <class> { // i` / `finally  { // i` /
  `fault  { // i` / for a filter clause `} { // i` (closing the filter part), at
  `filter_offset` `filter {` (no index); after the instruction that ends at
  `try_offset + try_len` `} // end .try i`, at handler end `} // end handler i`.
  So a block line's offset is that of the next instruction listed, or the code size after
  the last one. A `filter {` belongs to the next `} { // i` at its nesting depth (a stack).
* A try is printed once, for the first clause that has it: `.try` is omitted for clause i
  when an *earlier* clause (any j < i, not only i - 1) has the identical try range. The
  listing then only says "clause i shares an earlier clause's try", so monodis' record
  carries `shared_try` and no range for it; ours sets the flag by the same rule (keeping
  its range for display), and for such a clause only the flag is compared. What this
  cannot see: a shared try attributed to the wrong earlier range (every distinct range is
  still compared where monodis prints it).
* A boundary that does not fall on an instruction start is never printed; such a clause
  comes back with the missing field None, which is a mismatch.

**Normalisations** (cosmetic differences only, each a documented monodis behaviour):

1. `endfault`: monodis prints `endfinally` (0xDC) as `endfault` while inside a fault
   handler (its `in_fault` flag; it also stays set inside a finally nested in a fault).
   Compared as `endfinally`.
2. Catch classes are printed with their kind keyword (`class X`, `valuetype X`); the
   keyword is dropped.
3. monodis names a catch class through the class Mono *resolves* it to in its own class
   library, not through the TypeRef: its scope is the Mono assembly that defines the type
   (`[mscorlib]`, `[System]`, `[System.Xml]`, ...), not the TypeRef's resolution scope
   (`[netstandard]`, `[System.Runtime]`, `[System.Net.Primitives]`, ...). So the scope of a
   TypeRef is not compared: `[X]Ns.Name` matches `[Y]Ns.Name` for any Y. A name without
   scope (a TypeDef of the assembly itself) must be printed without scope.
4. A catch class that is a generic parameter (TypeSpec `!n` / `!!n`) is printed as
   `class n` (Mono 6.8 names the unresolved parameter class by its number). `n` matches
   our `!n` or `!!n`.
5. When Mono cannot parse a method's signature, monodis names the method
   `<NULL METHOD SIGNATURE>` in its `end of method` line (and still lists the body); the
   method is identified by its row all the same, so only the type part of the name is
   compared then.

Nothing else is normalised: offsets, mnemonics (dncil's names equal Mono's opcode
names), clause order, kinds, ranges and the rest of a class name must be identical.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..assembly.body import ClauseKind
from ..assembly.loader import Assembly
from ..errors import LlilcEhError
from ..il.method import analyze
from .toolchain import ToolchainError

MONODIS_TIMEOUT = 300  # seconds; the whole of CoreLib takes ~8 s

# -- records -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClauseRecord:
    """One EH clause as a monodis listing states it (None: the listing does not say)."""

    index: int
    kind: str | None                 # catch / filter / finally / fault
    shared_try: bool                 # the try is an earlier clause's (printed once, there)
    try_start: int | None
    try_end: int | None
    handler_start: int | None
    handler_end: int | None
    filter_start: int | None = None  # filter clauses only
    class_name: str | None = None    # catch clauses only

    def __str__(self) -> str:
        def at(v):
            return "?" if v is None else f"IL_{v:04x}"
        tr = f"{at(self.try_start)}..{at(self.try_end)}"
        if self.shared_try:
            tr = "(shared with an earlier clause)" if self.try_start is None else f"{tr} (shared)"
        extra = ""
        if self.kind == "catch":
            extra = f" class {self.class_name}"
        elif self.kind == "filter":
            extra = f" filter {at(self.filter_start)}"
        return (f"#{self.index} {self.kind or '?'} try {tr} handler "
                f"{at(self.handler_start)}..{at(self.handler_end)}{extra}")


@dataclass(frozen=True)
class MethodRecord:
    """What one side says about one method: identity, instructions, clauses."""

    rid: int
    name: str                                    # ours `Ns.Type::Name`; monodis `Type::Name`
    code_size: int | None
    instructions: tuple[tuple[int, str], ...]    # (IL offset, mnemonic)
    clauses: tuple[ClauseRecord, ...]
    problems: tuple[str, ...] = ()               # what the listing parser could not make sense of
    line: int = 0                                # line of `// method line N` in the listing
    complete: bool = True                        # False: the listing stops inside the method

    @property
    def token(self) -> int:
        return 0x06000000 | self.rid


@dataclass(frozen=True)
class Mismatch:
    token: int
    method: str
    aspect: str      # missing / name / code-size / instructions / clause-count / clause / ours-failed / ...
    detail: str

    def __str__(self) -> str:
        return f"0x{self.token:08X} {self.method}: [{self.aspect}] {self.detail}"


@dataclass(frozen=True)
class CrossCheckReport:
    assembly: str
    methods: int                   # EH methods compared
    instructions: int              # instructions compared (ours, in the methods compared)
    clauses: int                   # clauses compared
    mismatches: tuple[Mismatch, ...]
    selected: int                  # EH methods selected for comparison
    eh_methods: int                # EH methods in the assembly
    monodis_seconds: float
    seconds: float
    monodis_runs: int = 1
    monodis_notes: tuple[str, ...] = ()        # exit status and stderr of runs that failed
    not_compared: tuple[Mismatch, ...] = ()    # selected methods monodis could not list

    @property
    def ok(self) -> bool:
        """No disagreement (methods monodis could not list are counted apart)."""
        return not self.mismatches

    @property
    def complete(self) -> bool:
        return self.methods == self.selected and not self.not_compared

    def summary(self) -> str:
        sample = "" if self.selected == self.eh_methods else f" (sample of {self.eh_methods})"
        missing = f", {len(self.not_compared)} not listed by monodis" if self.not_compared else ""
        runs = f" in {self.monodis_runs} runs" if self.monodis_runs > 1 else ""
        return (f"{self.assembly}: {self.methods} EH methods{sample}, {self.instructions} instructions, "
                f"{self.clauses} clauses compared{missing}; {len(self.mismatches)} mismatch(es); "
                f"monodis {self.monodis_seconds:.1f} s{runs}, total {self.seconds:.1f} s")

    def __str__(self) -> str:
        lines = [self.summary()]
        lines.extend(f"  monodis: {n}" for n in self.monodis_notes)
        lines.extend(f"  {m}" for m in self.mismatches)
        lines.extend(f"  not compared: {m}" for m in self.not_compared)
        return "\n".join(lines)

    def as_dict(self) -> dict:
        def rows(ms):
            return [{"token": f"0x{m.token:08X}", "method": m.method, "aspect": m.aspect, "detail": m.detail}
                    for m in ms]
        return {"assembly": self.assembly, "methods": self.methods, "instructions": self.instructions,
                "clauses": self.clauses, "selected": self.selected, "eh_methods": self.eh_methods,
                "monodis_seconds": round(self.monodis_seconds, 3), "seconds": round(self.seconds, 3),
                "monodis_runs": self.monodis_runs, "monodis_notes": list(self.monodis_notes),
                "mismatches": rows(self.mismatches), "not_compared": rows(self.not_compared)}


# -- running monodis -----------------------------------------------------------------------


@dataclass(frozen=True)
class MonodisRun:
    text: str
    returncode: int
    stderr: str
    seconds: float

    @property
    def status(self) -> str:
        if self.returncode < 0:
            try:
                return f"killed by {signal.Signals(-self.returncode).name}"
            except ValueError:
                return f"killed by signal {-self.returncode}"
        return f"exit status {self.returncode}"

    @property
    def notes(self) -> tuple[str, ...]:
        if self.returncode == 0:
            return ()
        lines = [line.strip() for line in self.stderr.splitlines() if line.strip()]
        return (self.status + (f": {lines[-1][:300]}" if lines else ""),)


def run_monodis(path: str | Path, *, image_name: str | None = None, methods: set[int] | None = None,
                types: set[int] | None = None) -> MonodisRun:
    """Disassemble the assembly at `path` in one monodis run.

    With `methods` (MethodDef rids), `types` (TypeDef rids, enclosing types included) and
    `image_name` (the Assembly row's name, which is how monodis matches a filter section),
    only those methods inside those types are listed. Raises ToolchainError when monodis
    is missing or does not finish in time; a monodis that dies is a `MonodisRun` with a
    non-zero `returncode` and the listing up to that point.
    """
    exe = shutil.which("monodis")
    if exe is None:
        raise ToolchainError("monodis not found on PATH (Debian: apt-get install mono-utils)")
    with tempfile.TemporaryDirectory(prefix="llilc-monodis-") as tmp:
        cmd = [exe]
        if methods is not None and image_name:
            flt = Path(tmp) / "filter.txt"
            flt.write_text("\n".join([f"[{image_name}]"] + [f"T:{t}" for t in sorted(types or ())]
                                     + [f"M:{m}" for m in sorted(methods)]) + "\n")
            cmd.append(f"--filter={flt}")
        cmd.append(str(Path(path).resolve()))
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, timeout=MONODIS_TIMEOUT, cwd=tmp)
        except subprocess.TimeoutExpired as e:
            raise ToolchainError(f"monodis timed out after {MONODIS_TIMEOUT} s on {path}") from e
        seconds = time.perf_counter() - start
    return MonodisRun(proc.stdout.decode("utf-8", errors="replace"), proc.returncode,
                      proc.stderr.decode("utf-8", errors="replace"), seconds)


# -- parsing the listing -------------------------------------------------------------------

_METHOD_LINE = re.compile(r"^\s*// method line (\d+)\s*$")
_METHOD_END = re.compile(r"^\s*\} // end of (?:global )?method (.*?)\s*$")
_CODE_SIZE = re.compile(r"^\s*// Code size (\d+)")
_INSTRUCTION = re.compile(r"^\s*IL_([0-9a-fA-F]+):\s+(\S+)")
_TRY_OPEN = re.compile(r"^\s*\.try \{ // (\d+)\s*$")
_TRY_CLOSE = re.compile(r"^\s*\} // end \.try (\d+)\s*$")
_HANDLER_CLOSE = re.compile(r"^\s*\} // end handler (\d+)\s*$")
_FILTER_HANDLER_OPEN = re.compile(r"^\s*\} \{ // (\d+)\s*$")
_FILTER_OPEN = re.compile(r"^\s*filter \{\s*$")
_HANDLER_OPEN = re.compile(r"^\s*(catch|finally|fault) (.*?)\s*\{ // (\d+)\s*$")

_MNEMONIC_ALIASES = {"endfault": "endfinally"}   # normalisation 1


class _MethodParser:
    """Collects one method's lines; `finish` turns block events into clauses."""

    def __init__(self, rid: int, line: int):
        self.rid = rid
        self.line = line
        self.code_size: int | None = None
        self.instructions: list[tuple[int, str]] = []
        # (event, clause index or None, instruction position, extra)
        self.events: list[tuple[str, int | None, int, str | None]] = []
        self.problems: list[str] = []

    def feed(self, text: str) -> None:
        stripped = text.lstrip()
        if stripped.startswith("IL_"):
            m = _INSTRUCTION.match(stripped)
            if m:
                name = m.group(2)
                self.instructions.append((int(m.group(1), 16), _MNEMONIC_ALIASES.get(name, name)))
            return  # else a switch target line
        if not stripped or stripped[0] not in "/.}cf":
            return
        at = len(self.instructions)
        if (m := _CODE_SIZE.match(stripped)) and self.code_size is None:
            self.code_size = int(m.group(1))
        elif m := _TRY_OPEN.match(stripped):
            self.events.append(("try-open", int(m.group(1)), at, None))
        elif m := _TRY_CLOSE.match(stripped):
            self.events.append(("try-close", int(m.group(1)), at, None))
        elif m := _HANDLER_CLOSE.match(stripped):
            self.events.append(("handler-close", int(m.group(1)), at, None))
        elif m := _FILTER_HANDLER_OPEN.match(stripped):
            self.events.append(("handler-open", int(m.group(1)), at, "filter"))
        elif _FILTER_OPEN.match(stripped):
            self.events.append(("filter-open", None, at, None))
        elif m := _HANDLER_OPEN.match(stripped):
            kind, klass, index = m.group(1), m.group(2), int(m.group(3))
            self.events.append(("handler-open", index, at, f"{kind} {klass}" if kind == "catch" else kind))

    def _offset(self, position: int) -> int | None:
        if position < len(self.instructions):
            return self.instructions[position][0]
        return self.code_size

    def finish(self, name: str, *, complete: bool = True) -> MethodRecord:
        tries: dict[int, list[int | None]] = {}
        handlers: dict[int, list] = {}      # index -> [kind, class, start, end]
        filters: dict[int, int | None] = {}
        open_filters: list[int | None] = []
        for event, index, position, extra in self.events:
            offset = self._offset(position)
            if event == "try-open":
                tries.setdefault(index, [None, None])[0] = offset
            elif event == "try-close":
                tries.setdefault(index, [None, None])[1] = offset
            elif event == "filter-open":
                open_filters.append(offset)
            elif event == "handler-open":
                entry = handlers.setdefault(index, [None, None, None, None])
                if extra == "filter":
                    entry[0] = "filter"
                    if open_filters:
                        filters[index] = open_filters.pop()
                    else:
                        self.problems.append(f"filter handler #{index} without a `filter {{` before it")
                elif extra.startswith("catch "):
                    entry[0], entry[1] = "catch", normalize_class_name(extra[len("catch "):])
                else:
                    entry[0] = extra
                entry[2] = offset
            elif event == "handler-close":
                handlers.setdefault(index, [None, None, None, None])[3] = offset
        if open_filters:
            self.problems.append(f"{len(open_filters)} `filter {{` block(s) without a handler")
        if self.instructions and self.code_size is None:
            self.problems.append("no `// Code size` line")
        count = max(list(tries) + list(handlers), default=-1) + 1
        clauses = []
        for i in range(count):
            kind, klass, hstart, hend = handlers.get(i, [None, None, None, None])
            tstart, tend = tries.get(i, [None, None])
            clauses.append(ClauseRecord(index=i, kind=kind, shared_try=i not in tries,
                                        try_start=tstart, try_end=tend,
                                        handler_start=hstart, handler_end=hend,
                                        filter_start=filters.get(i), class_name=klass))
        return MethodRecord(rid=self.rid, name=name, code_size=self.code_size,
                            instructions=tuple(self.instructions), clauses=tuple(clauses),
                            problems=tuple(self.problems), line=self.line, complete=complete)


def parse_listing(text: str) -> dict[int, MethodRecord]:
    """Every method of a monodis listing, by MethodDef rid. Never raises on odd input: what
    cannot be understood is left out of a record or noted in its `problems`."""
    records: dict[int, MethodRecord] = {}
    current: _MethodParser | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if current is not None:
            stripped = line.lstrip()
            if stripped.startswith("} // end of "):
                m = _METHOD_END.match(stripped)
                if m:
                    records[current.rid] = current.finish(m.group(1))
                    current = None
                    continue
            elif stripped.startswith("// method line"):
                pass  # falls through: an unterminated method, then a new one
            else:
                current.feed(line)
                continue
        m = _METHOD_LINE.match(line)
        if m:
            if current is not None:
                records[current.rid] = _cut(current)
            current = _MethodParser(int(m.group(1)), number)
    if current is not None:
        records[current.rid] = _cut(current)
    return records


def _cut(parser: _MethodParser) -> MethodRecord:
    parser.problems.append("listing ends inside the method (no `end of method`)")
    return parser.finish("?", complete=False)


def normalize_class_name(text: str) -> str:
    """A catch class as monodis prints it, without its kind keyword (normalisation 2)."""
    text = text.strip()
    for keyword in ("class ", "valuetype "):
        if text.startswith(keyword):
            return text[len(keyword):]
    return text


_SCOPE = re.compile(r"^\[([^\]]*)\](.*)$")
_GENERIC_PARAMETER = re.compile(r"^!!?(\d+)$")


def class_names_agree(ours: str | None, theirs: str | None) -> bool:
    """Our catch class name against monodis', under normalisations 3 and 4."""
    if ours == theirs:
        return True
    if ours is None or theirs is None:
        return False
    g = _GENERIC_PARAMETER.match(ours)
    if g and theirs == g.group(1):
        return True                                   # `!!0` printed as `class 0`
    o, t = _SCOPE.match(ours), _SCOPE.match(theirs)
    return bool(o and t) and o.group(2) == t.group(2)  # scope: where Mono found the type


# -- our side --------------------------------------------------------------------------------


def our_record(asm: Assembly, rid: int) -> MethodRecord:
    """Our assembly + il stages' view of one method, encoded as a monodis listing states it."""
    body = asm.body(rid)
    method = analyze(body)
    names = asm.names
    clauses = []
    for c in body.clauses:
        shared = any(e.try_range == c.try_range for e in body.clauses[:c.index])
        klass = None
        if c.kind is ClauseKind.CATCH:
            try:
                klass = names.type_name(c.class_token)
            except LlilcEhError as e:
                klass = f"<{e.reason}>"
        clauses.append(ClauseRecord(index=c.index, kind=c.kind.word, shared_try=shared,
                                    try_start=c.try_start, try_end=c.try_end,
                                    handler_start=c.handler_start, handler_end=c.handler_end,
                                    filter_start=c.filter_start, class_name=klass))
    return MethodRecord(rid=rid, name=body.name, code_size=body.code_size,
                        instructions=tuple((i.offset, i.op.name) for i in method.instructions),
                        clauses=tuple(clauses))


# -- comparison ------------------------------------------------------------------------------


def simple_name(name: str) -> str:
    """`Ns.Outer/Inner::M` -> `Inner::M`: the form of monodis' `end of method` line (the
    declaring type's own name, no namespace, no enclosing type)."""
    owner, sep, method = name.rpartition("::")
    if not sep:
        return name
    owner = owner.rsplit("/", 1)[1] if "/" in owner else owner.rsplit(".", 1)[-1]
    return f"{owner}::{method}"


_NULL_SIGNATURE = "<NULL METHOD SIGNATURE>"


def names_agree(ours: str, theirs: str) -> bool:
    """Our `Ns.Type::Name` against monodis' `Type::Name` (normalisation 5)."""
    if theirs == "?":
        return True           # the listing stopped inside the method; reported apart
    expected = simple_name(ours)
    theirs = theirs.replace("'", "")
    if theirs.endswith("::" + _NULL_SIGNATURE):
        return expected.rpartition("::")[0] == theirs.rpartition("::")[0]
    return expected == theirs


def compare(ours: MethodRecord, theirs: MethodRecord) -> list[Mismatch]:
    """Every disagreement between our record and monodis' for one method."""
    out: list[Mismatch] = []

    def bad(aspect: str, detail: str) -> None:
        out.append(Mismatch(ours.token, ours.name, aspect, detail))

    for problem in theirs.problems:
        bad("listing", f"{problem} (monodis listing line {theirs.line})")
    if not names_agree(ours.name, theirs.name):
        bad("name", f"ours {ours.name!r}, monodis {theirs.name!r}")
    if ours.code_size != theirs.code_size:
        bad("code-size", f"ours {ours.code_size}, monodis {theirs.code_size}")
    if ours.instructions != theirs.instructions:
        a, b = ours.instructions, theirs.instructions
        i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))

        def show(seq):
            return f"IL_{seq[i][0]:04x} {seq[i][1]}" if i < len(seq) else "end of listing"
        bad("instructions", f"{len(a)} vs {len(b)} instructions; first difference at #{i}: "
                            f"ours {show(a)}, monodis {show(b)}")
    if len(ours.clauses) != len(theirs.clauses):
        bad("clause-count", f"ours {len(ours.clauses)}, monodis {len(theirs.clauses)}")
    for c, t in zip(ours.clauses, theirs.clauses):
        diffs = []
        if c.kind != t.kind:
            diffs.append(f"kind {c.kind} vs {t.kind}")
        if c.shared_try != t.shared_try:
            diffs.append("try shared with an earlier clause: "
                         f"ours {'yes' if c.shared_try else 'no'}, monodis {'yes' if t.shared_try else 'no'}")
        elif not c.shared_try and (c.try_start, c.try_end) != (t.try_start, t.try_end):
            diffs.append(f"try {c.try_start}..{c.try_end} vs {t.try_start}..{t.try_end}")
        if (c.handler_start, c.handler_end) != (t.handler_start, t.handler_end):
            diffs.append(f"handler {c.handler_start}..{c.handler_end} vs {t.handler_start}..{t.handler_end}")
        if c.filter_start != t.filter_start:
            diffs.append(f"filter start {c.filter_start} vs {t.filter_start}")
        if c.kind == "catch" and not class_names_agree(c.class_name, t.class_name):
            diffs.append(f"class {c.class_name!r} vs {t.class_name!r}")
        if diffs:
            bad("clause", f"#{c.index}: " + "; ".join(diffs) + f"  (ours: {c}; monodis: {t})")
    return out


# -- driver ----------------------------------------------------------------------------------

MAX_MONODIS_RUNS = 32


def eh_methods(asm: Assembly) -> list[int]:
    """MethodDef rids of every method with an IL body and at least one EH clause, in table
    order. A body we cannot read is included, so that the comparison reports it."""
    out = []
    for rid in asm.methods_with_il():
        try:
            if asm.body(rid).clauses:
                out.append(rid)
        except LlilcEhError:
            out.append(rid)
    return out


def _image_name(asm: Assembly) -> str | None:
    table = asm.pe.net.mdtables.Assembly
    if table is None or not table.num_rows:
        return None
    return asm.names.string(table.rows[0].struct.Name_StringIndex)


def _types_of(asm: Assembly, methods: set[int]) -> set[int]:
    """TypeDef rids declaring `methods`, with their enclosing types: monodis prints a
    method only inside its type, and a nested type only inside its enclosing type."""
    enclosing: dict[int, int] = {}
    table = asm.pe.net.mdtables.NestedClass
    for i in range(table.num_rows if table is not None else 0):
        row = table.rows[i].struct
        enclosing[row.NestedClass_Index] = row.EnclosingClass_Index
    types: set[int] = set()
    for rid in methods:
        try:
            t = asm.names.method_owner(rid) & 0xFFFFFF
        except LlilcEhError:
            continue
        while t and t not in types:
            types.add(t)
            t = enclosing.get(t, 0)
    return types


@dataclass(frozen=True)
class Listing:
    """What monodis listed of the selected methods, over as many runs as it took."""

    records: dict[int, MethodRecord]
    failed: dict[int, str]            # rid -> why monodis could not list it
    runs: tuple[MonodisRun, ...]


def list_methods(asm: Assembly, selected: list[int], *, whole: bool) -> Listing:
    """Run monodis over the assembly (the whole of it when `whole`, else a `--filter` of the
    selected methods) and parse the listing.

    monodis dies on some assemblies (SIGSEGV, or an assertion) when a type a signature
    names cannot be resolved through Mono's own class library. Then the methods listed
    completely are kept, the one it died in is recorded as failed, and monodis runs again
    on the methods still missing, filtered so that it skips what it has done; as long as
    each run gets further, up to MAX_MONODIS_RUNS runs.
    """
    image = _image_name(asm)
    pending = list(selected)
    methods = None if whole else set(pending)
    records: dict[int, MethodRecord] = {}
    failed: dict[int, str] = {}
    runs: list[MonodisRun] = []
    while len(runs) < MAX_MONODIS_RUNS:
        run = run_monodis(asm.path, image_name=image, methods=methods,
                          types=None if methods is None else _types_of(asm, methods))
        runs.append(run)
        part = parse_listing(run.text)
        if run.returncode == 0:
            records.update(part)
            break
        done = {rid: r for rid, r in part.items() if r.complete}
        records.update(done)
        cut = [rid for rid, r in part.items() if not r.complete]
        for rid in cut:
            failed[rid] = f"monodis died ({run.status}) while listing it"
        progress = bool(cut) or any(rid in done for rid in pending)
        pending = [rid for rid in pending if rid not in records and rid not in failed]
        if not pending or not progress or image is None:
            break
        methods = set(pending)
    return Listing(records, failed, tuple(runs))


def crosscheck(path: str | Path, *, every: int = 1, limit: int | None = None) -> CrossCheckReport:
    """Compare every `every`-th EH method of the assembly (table order; at most `limit` of
    them) with monodis' listing: one monodis run over the whole assembly, or a `--filter`
    run for a sample (more runs only if monodis dies on the way)."""
    start = time.perf_counter()
    asm = Assembly(path)
    all_eh = eh_methods(asm)
    selected = all_eh[::max(every, 1)]
    if limit is not None:
        selected = selected[:max(limit, 0)]
    whole = len(selected) == len(all_eh)
    listing = list_methods(asm, selected, whole=whole)

    mismatches: list[Mismatch] = []
    not_compared: list[Mismatch] = []
    methods = instructions = clauses = 0
    for rid in selected:
        theirs = listing.records.get(rid)
        try:
            ours = our_record(asm, rid)
        except LlilcEhError as e:
            mismatches.append(Mismatch(0x06000000 | rid, asm.names.method_name(rid), "ours-failed",
                                       f"[{e.stage}/{e.kind}] {e.describe()}"))
            continue
        if theirs is None:
            if rid in listing.failed:
                not_compared.append(Mismatch(ours.token, ours.name, "monodis-failed", listing.failed[rid]))
            elif listing.runs[-1].returncode != 0:
                not_compared.append(Mismatch(ours.token, ours.name, "not-listed",
                                             f"monodis died ({listing.runs[-1].status}) before listing it"))
            else:
                mismatches.append(Mismatch(ours.token, ours.name, "missing",
                                           "monodis listed no such method (`// method line`)"))
            continue
        if theirs.complete and theirs.code_size is None and not theirs.instructions and not theirs.clauses:
            # `// Method begins at RVA ...` and nothing else: Mono could not load the header.
            not_compared.append(Mismatch(ours.token, ours.name, "monodis-failed",
                                         f"monodis printed no body (listing line {theirs.line}; Mono could "
                                         f"not load the method header, typically a local's type that its "
                                         f"class library lacks)"))
            continue
        methods += 1
        instructions += len(ours.instructions)
        clauses += len(ours.clauses)
        mismatches.extend(compare(ours, theirs))
    if whole:
        # A method monodis shows with EH blocks that we think has none.
        selected_set = set(selected)
        for rid, theirs in sorted(listing.records.items()):
            if theirs.clauses and rid not in selected_set:
                mismatches.append(Mismatch(theirs.token, asm.names.method_name(rid), "extra-eh",
                                           f"monodis lists {len(theirs.clauses)} clause(s); ours none"))
    notes = tuple(f"run {i + 1}: {note}" for i, run in enumerate(listing.runs) for note in run.notes)
    return CrossCheckReport(assembly=Path(path).name, methods=methods, instructions=instructions,
                            clauses=clauses, mismatches=tuple(mismatches), selected=len(selected),
                            eh_methods=len(all_eh),
                            monodis_seconds=sum(r.seconds for r in listing.runs),
                            seconds=time.perf_counter() - start, monodis_runs=len(listing.runs),
                            monodis_notes=notes, not_compared=tuple(not_compared))
