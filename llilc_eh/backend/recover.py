"""What the code in an object is: functions, funclets, labels, instructions, call sites.

LLVM gives us two views of the same code: the COFF object (bytes, symbols, relocations,
`.pdata`/`.xdata`) and its assembly text (labels such as `.Ltmp3`, `.LBB0_6`,
`$ehgcr_0_6`, `.Lfunc_end0`, funclet symbols `?catch$3@?0?<parent>@4HA` /
`?dtor$5@?0?<parent>@4HA`, `.seh_*` directives). Only the text names the EH labels that
bracket each invoke's call; only the object holds the bytes. `recover` walks both in
lock step: every instruction of the text's `.text` section is disassembled with capstone
at the current offset (mnemonics must agree), `.p2align` advances to the boundary, data
directives advance by their size, and every label gets the offset of what follows it. A
disagreement is a `BackendError(kind="asm-mismatch")`, never a guess.

From that walk and the object:
* functions: each function symbol in `.text` (the parent, every funclet, each outlined
  filter) with its code range -- from its `.pdata` RUNTIME_FUNCTION where it has one,
  checked against the walk -- and the `.xdata` offset and decoded UNWIND_INFO of that
  entry (a frameless leaf has no RUNTIME_FUNCTION; its range comes from the walk);
* call sites: every `call` (direct, with the callee from its REL32 relocation; or
  indirect) and every tail `jmp` to a symbol, with the return address (the offset after
  the call). A call between an EH begin label and the next EH label is an invoke: LLVM
  writes one `.Ltmp` label right before each invoke's call sequence and one after it (after
  the `nop` the Win64 target puts there to keep the return address inside the range).
  Each call site also carries the identities N of the reader's call-site markers that
  reach it (`CallSite.callsites`): the inline asm `"# llilc.callsite N"` is zero bytes and
  shows in the text as a comment line between `#APP` and `#NO_APP`; the call it marks is
  the first call (or tail jump) execution reaches from it -- falling through conditional
  branches, following unconditional ones, since LLVM's tail merging (O2) turns two marked
  `call THROW; ud2` tails into one call both markers jump to. A marker that reaches a
  `ret`, a trap or its function's end before any call is an `asm-mismatch` (LLVM kept
  the marker and dropped its call: never observed, and never guessed around).
* pads: the reader's pad markers `"# llilc.pad N"` (zero bytes, right after each catchpad
  and cleanuppad, so at the top of the funclet's code after its prolog) belong to the
  function whose code they appear in (`CodeFunction.pads`, in text order: the funclet's own
  pad first, its entry block being first): the identity of a funclet even when it holds no
  call. A funclet holds several where LLVM merged a chain of cleanups into it (O2). A pad
  marker before any function symbol is an `asm-mismatch`.

All offsets are `.text` offsets. The parent is the first function in the module, hence at
offset 0, and LLVM's CLR table measures from its start, so for the parent's method these
are also method-relative offsets (`RecoveredCode.method_offset` says so explicitly).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import capstone

from ..assembly.native import CodeRange
from ..errors import BackendError
from ..reader.sidetable import CALLSITE_MARKER, PAD_MARKER
from ..unwind import UnwindInfo, decode_unwind_info
from .coff import CoffObject, RelocationType

FUNCLET_NAME = re.compile(r"\?(?P<kind>catch|dtor)\$(?P<block>\d+)@\?0\?(?P<parent>.*)@4HA")
FUNCLET_KINDS = {"catch": "catch", "dtor": "cleanup"}

# Directives that put bytes into the current section, and how many per operand.
_DATA_SIZES = {".byte": 1, ".short": 2, ".value": 2, ".word": 2, ".2byte": 2, ".long": 4,
               ".int": 4, ".4byte": 4, ".quad": 8, ".8byte": 8}
# Directives that emit nothing into the section they appear in (or only switch sections).
_NO_BYTES = {".def", ".scl", ".type", ".endef", ".globl", ".file", ".seh_proc", ".seh_endproc",
             ".seh_handler", ".seh_handlerdata", ".seh_pushreg", ".seh_stackalloc", ".seh_setframe",
             ".seh_savereg", ".seh_savexmm", ".seh_pushframe", ".seh_endprologue",
             ".seh_startepilogue", ".seh_endepilogue", ".seh_startchained", ".seh_endchained",
             ".seh_unwindversion", ".seh_unwindv2start", ".text", ".section", ".data", ".bss",
             ".addrsig", ".addrsig_sym", ".safeseh", ".linkonce", ".weak", ".lcomm", ".comm",
             ".set", ".cv_fpo_proc", ".cv_fpo_pushreg", ".cv_fpo_stackalloc", ".cv_fpo_endprologue",
             ".cv_fpo_endproc", ".symidx", ".secrel32", ".secidx", ".ident", ".loc", ".cv_loc",
             ".cv_file", ".cv_func_id", ".cv_inline_site_id", ".cv_linetable", ".size"}
_ALIGN = {".p2align", ".balign", ".align"}
_PREFIXES = {"rep", "repe", "repz", "repne", "repnz", "lock", "data16", "data32", "addr32",
             "notrack", "rex64", "cs", "ds", "es", "fs", "gs", "ss"}


# One disassembler for every walk: making a capstone handle costs as much as decoding a
# small method.
_MD_ATT = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
_MD_ATT.syntax = capstone.CS_OPT_SYNTAX_ATT


def _bad(reason: str, offset: int | None = None) -> BackendError:
    return BackendError(reason, kind="asm-mismatch", offset=offset)


class Instruction(NamedTuple):
    """One decoded instruction of the walk. A tuple, not a frozen dataclass: hundreds per
    method, and a frozen dataclass's __init__ (object.__setattr__ per field) cost more than
    the rest of making one."""

    offset: int          # in .text
    size: int
    mnemonic: str        # capstone's (AT&T), e.g. callq, nop, ud2
    operands: str

    @property
    def end(self) -> int:
        return self.offset + self.size

    def __str__(self) -> str:
        return f"{self.offset:#06x}  {self.mnemonic} {self.operands}".rstrip()


@dataclass(frozen=True)
class CallSite:
    """One call instruction (or tail jump) of the code."""

    kind: str                         # "call", "indirect-call", "tail-jump", "indirect-tail-jump"
    callee: str | None                # the symbol called (None: through a register)
    offset: int                       # of the call instruction, in .text
    return_offset: int | None         # the return address (None for a tail jump)
    invoke: tuple[str, str] | None = None   # the EH labels bracketing it, for an invoke
    callsites: tuple[int, ...] = ()   # the reader's call-site markers N that reach it: one, or
                                      # several where LLVM merged calls; none: a call LLVM made
                                      # itself (memcpy, __chkstk, ...)

    @property
    def code_range(self) -> CodeRange:
        return CodeRange(self.offset, self.return_offset if self.return_offset is not None
                         else self.offset)

    @property
    def is_invoke(self) -> bool:
        return self.invoke is not None

    def __str__(self) -> str:
        ret = f"-> {self.return_offset:#06x}" if self.return_offset is not None else "(tail)"
        where = f"  invoke [{self.invoke[0]}, {self.invoke[1]})" if self.invoke else ""
        mark = "".join(f"  #{n}" for n in self.callsites)
        return f"{self.offset:#06x} {ret}  {self.kind:<13} {self.callee or '*'}{where}{mark}"


@dataclass(frozen=True)
class CodeFunction:
    """The parent function, one of its funclets, or another function (an outlined filter)."""

    name: str
    kind: str                         # "function", "catch", "cleanup"
    parent: str | None                # for a funclet: its parent function
    start: int
    end: int
    unwind_offset: int | None         # .xdata offset of its UNWIND_INFO (None: no .pdata entry)
    unwind: UnwindInfo | None
    calls: tuple[CallSite, ...] = ()
    pads: tuple[int, ...] = ()        # the reader's pad markers N in its code, in text order: a
                                      # funclet's own pad (more: cleanups LLVM merged into it); none
                                      # in a parent or filter, or in an object without markers

    @property
    def code_range(self) -> CodeRange:
        return CodeRange(self.start, self.end)

    @property
    def is_funclet(self) -> bool:
        return self.parent is not None

    def __str__(self) -> str:
        unwind = f"unwind .xdata+{self.unwind_offset:#x}" if self.unwind_offset is not None else "no unwind"
        pads = "".join(f"  pad #{n}" for n in self.pads)
        lines = [f"{self.kind:<8} [{self.start:#06x}, {self.end:#06x})  {unwind}  {self.name}{pads}"]
        lines += [f"    {c}" for c in self.calls]
        return "\n".join(lines)


@dataclass(frozen=True)
class RecoveredCode:
    functions: tuple[CodeFunction, ...]          # in .text order
    labels: dict[str, int] = field(repr=False)   # every label of the assembly text -> .text offset
    instructions: tuple[Instruction, ...] = field(repr=False)
    text_size: int = 0

    @cached_property
    def _by_name(self) -> dict[str, CodeFunction]:
        return {f.name: f for f in self.functions}

    def function(self, name: str) -> CodeFunction:
        try:
            return self._by_name[name]
        except KeyError:
            raise BackendError(f"no function {name!r} in the object", kind="no-function") from None

    def funclets_of(self, parent: str) -> tuple[CodeFunction, ...]:
        """The parent's funclets in layout order."""
        return tuple(f for f in self.functions if f.parent == parent)

    def method_functions(self, parent: str) -> tuple[CodeFunction, ...]:
        """The parent and its funclets, in layout order."""
        return tuple(f for f in self.functions if f.name == parent or f.parent == parent)

    def method_offset(self, parent: str, offset: int) -> int:
        """A .text offset as an offset from the parent's start (what LLVM's CLR table uses)."""
        return offset - self.function(parent).start

    def label(self, name: str) -> int:
        try:
            return self.labels[name]
        except KeyError:
            raise BackendError(f"no label {name!r} in the assembly text", kind="no-label") from None

    def calls(self) -> Iterator[CallSite]:
        for f in self.functions:
            yield from f.calls

    def instruction_at(self, offset: int) -> Instruction | None:
        return self._instruction_by_offset.get(offset)

    @cached_property
    def _instruction_by_offset(self) -> dict[int, Instruction]:
        return {i.offset: i for i in self.instructions}

    def __str__(self) -> str:
        return "\n".join(str(f) for f in self.functions)


# -- the assembly text -------------------------------------------------------------------------

# One statement of the text, as a plain tuple (kind, text, args, prefixes): cheap to make,
# hundreds per method. kind: "label", "insn", "align", "data", "prefix", "marker", "pad";
# text: label name / mnemonic / directive / marker number; prefixes: of an instruction, as
# the text writes them.
_Item = tuple

_CALLSITE_MARKER = re.compile(r"\s*#\s*" + re.escape(CALLSITE_MARKER) + r" (\d+)\s*$")  # Translator.call's inline asm
_PAD_MARKER = re.compile(r"\s*#\s*" + re.escape(PAD_MARKER) + r" (\d+)\s*$")  # Translator.pad_marker's
_LABEL = re.compile(r'("(?:[^"\\]|\\.)*"|[^\s:"]+):')
_ASSIGNMENT = re.compile(r"[^\s=]+\s*=")


def _unquote(name: str) -> str:
    """A symbol of the assembly text as LLVM's assembler reads it into the object: MCSymbol::print
    quotes a name with `\\"`, `\\\\` and `\\n` escaped and every other byte (UTF-8 included) as it
    is; the assembler undoes the first two and keeps `\\n` as two characters (the reader never
    names a function with a newline: `translate._mangle`)."""
    if len(name) >= 2 and name[0] == name[-1] == '"':
        return re.sub(r'\\([\\"])', r"\1", name[1:-1])
    return name


_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[^";#]+|[;#]')


def _statements(line: str) -> list[str]:
    """Split one line into statements (`;`-separated) without its `#` comment, respecting
    quoted symbol names."""
    out, current = [], []
    for token in _TOKENS.findall(line):
        if token == "#":
            break
        if token == ";":
            out.append("".join(current))
            current = []
        else:
            current.append(token)
    out.append("".join(current))
    return [s.strip() for s in out if s.strip()]


# Every line of the text, in one of four shapes that need no further splitting, else whole:
#   1, 2  a plain instruction: a tab, a lowercase mnemonic, optionally a tab and operands
#         without `;`, `#`, `=`, tabs or outer whitespace;
#   3, 4  a directive with plain operands (no `;`, `#` or quotes; one trailing `;` allowed):
#         its name and the rest of the line;
#   5     a label alone on its line, unquoted, without `#` or `;`;
#   6     any other line.
# One findall in C splits and classifies the whole text. Each plain shape is exactly what the
# general path below makes of such a line (one statement; no label before an instruction or
# a directive; no assignment), so only the other lines pay for it.
_LINES = re.compile(r'^(?:\t([a-z][a-z0-9]*)(?:\t([^\s;#=](?:[^\t\n;#=]*[^\s;#=])?))?'
                    r'|\t(\.[a-z_0-9]+)((?:[\t ][^;#"\n]*)?;?)'
                    r'|([^\s:"#;]+):'
                    r'|(.*))$', re.MULTILINE)
# Directives that change the section the next statements go to.
_SECTION_DIRECTIVES = {".text", ".section", ".data", ".bss", ".seh_handlerdata"}
# Directives that emit nothing and leave the section alone: a line of one is skipped.
_SILENT = frozenset(_NO_BYTES - _SECTION_DIRECTIVES)


def _text_items(asm: str) -> list[_Item]:
    """The statements of the assembly text that belong to `.text`, in order.

    Most lines have one of `_LINES`'s plain shapes; of the rest, the cheap tests come first:
    a comment line holds at most a marker, most lines are one statement, only a `:` can
    make a label and only an `=` a symbol assignment."""
    items, section = [], ".text"
    append = items.append
    # LLVM ends lines with \n; names hold U+0085, U+2028 ... raw
    for head, args, directive, rest, label, line in _LINES.findall(asm):
        if head:
            if section == ".text" and head not in _PREFIXES and (
                    '"' not in args or "\\" not in args and args.count('"') % 2 == 0):
                append(("insn", head, args or "", ()))
                continue
            line = f"\t{head}\t{args}" if args else f"\t{head}"
        elif directive:
            if directive in _SILENT or section != ".text" and directive not in _SECTION_DIRECTIVES:
                continue
            line = f"\t{directive}{rest}"
        elif label:
            if section == ".text":
                append(("label", label, "", ()))
            continue
        elif line == "\t#APP" or line == "\t#NO_APP":    # inline asm brackets: no marker
            continue
        stripped = line.strip()
        if not stripped:
            continue
        if stripped[0] == "#":      # a whole-line comment: nothing but a marker
            if section == ".text":
                if marker := _CALLSITE_MARKER.match(line):
                    append(("marker", marker.group(1), "", ()))
                elif marker := _PAD_MARKER.match(line):
                    append(("pad", marker.group(1), "", ()))
            continue
        # One statement, as `_statements` would find it: no `;`, no `#`, and quotes that pair
        # up without escapes (its tokeniser drops a quote that opens no quoted name).
        plain = ";" not in line and "#" not in line and (
            '"' not in line or "\\" not in line and line.count('"') % 2 == 0)
        for stmt in (stripped,) if plain else _statements(line):
            while ":" in stmt:  # a line may hold labels followed by a statement
                m = _LABEL.match(stmt)
                if not m:
                    break
                if section == ".text":
                    append(("label", _unquote(m.group(1)), "", ()))
                stmt = stmt[m.end():].strip()
            if not stmt:
                continue
            head, _, args = stmt.replace("\t", " ").partition(" ")
            head, args = head.strip(), args.strip()
            if head.startswith("."):
                if head == ".text":
                    section = ".text"
                elif head == ".section":
                    section = args.split(",")[0].strip()
                elif head in (".data", ".bss"):
                    section = head
                elif head == ".seh_handlerdata":
                    section = ".xdata"  # handler data goes after the UNWIND_INFO
                if section != ".text":
                    continue
                if head in _ALIGN:
                    append(("align", head, args, ()))
                elif head in _DATA_SIZES or head in (".zero", ".space", ".skip", ".ascii", ".asciz"):
                    append(("data", head, args, ()))
                elif head not in _NO_BYTES:
                    raise _bad(f"directive {head} in .text: unknown whether it emits bytes")
            elif "=" in stmt and _ASSIGNMENT.match(stmt):
                continue  # symbol assignment (@feat.00 = 0)
            elif section == ".text":
                prefixes = []
                while head in _PREFIXES and args:  # `rex64 jmpq *%rax`, `lock cmpxchgq ...`
                    prefixes.append(head)
                    head, _, args = args.partition(" ")
                    args = args.strip()
                if head in _PREFIXES:
                    append(("prefix", head, "", ()))
                else:
                    append(("insn", head, args, tuple(prefixes)))
    return items


def _data_size(directive: str, args: str) -> int:
    if directive in _DATA_SIZES:
        return _DATA_SIZES[directive] * len(_split_operands(args))
    if directive in (".zero", ".space", ".skip"):
        return int(_split_operands(args)[0], 0)
    raise _bad(f"data directive {directive} {args} in .text")


def _split_operands(args: str) -> list[str]:
    return [a.strip() for a in re.split(r',(?=(?:[^"]*"[^"]*")*[^"]*$)', args) if a.strip()]


def _align(directive: str, args: str, offset: int) -> int:
    parts = _split_operands(args) if args else []
    if not parts:
        raise _bad(f"{directive} without an argument")
    value = int(parts[0], 0)
    boundary = 1 << value if directive == ".p2align" else value
    target = -(-offset // boundary) * boundary
    if len(parts) >= 3 and parts[2] and target - offset > int(parts[2], 0):
        return offset  # max-skip exceeded: no padding
    return target


def _same_instruction(asm_mnemonic: str, cs_mnemonic: str) -> bool:
    """LLVM's AT&T mnemonic and capstone's name the same instruction (spelling aside)."""
    a, c = asm_mnemonic.lower(), cs_mnemonic.lower().split()[-1]
    if a == c:
        return True
    # Size suffixes and their absence (jmp/jmpq, callq/call, nop/nopw, movabs/movabsq ...).
    for x, y in ((a, c), (c, a)):
        if x.startswith(y) and len(x) - len(y) <= 1:
            return True
    return a.rstrip("bwlq") == c.rstrip("bwlq") and a[:1] == c[:1]


# -- the walk ----------------------------------------------------------------------------------

def recover(obj: bytes | CoffObject, asm: str) -> RecoveredCode:
    """Functions, funclets, labels, instructions and call sites of an object LLVM emitted
    together with `asm`, its assembly text (`CodegenResult.obj`, `.asm`)."""
    coff = obj if isinstance(obj, CoffObject) else CoffObject.parse(obj)
    text = coff.section(".text")
    code = text.data
    md = _MD_ATT
    # One linear sweep decodes almost every instruction at once (LLVM puts no data in
    # .text); where the sweep went out of step with the text's walk, or stopped at bytes it
    # cannot decode, the instruction is decoded on its own at the walk's offset.
    swept = {d[0]: d for d in md.disasm_lite(code, 0)}

    functions_in_text = coff.functions_in(".text")
    function_symbols = {s.name: s for s in functions_in_text}
    callees = _Callees(text, functions_in_text)
    labels: dict[str, int] = {}
    instructions: list[Instruction] = []
    # per function: [name, start, end of last instruction, calls, pad markers]
    bodies: list[list] = []
    offset = 0
    pending_prefix = False
    open_label: str | None = None      # an EH begin label whose invoke has not ended
    open_calls: list[int] = []         # indices into calls of the current function since it
    calls: list[dict] = []
    markers: list[tuple[int, int, int]] = []   # (N, offset, function index) of call-site markers

    def close_function():
        nonlocal open_label
        if open_label is not None:
            raise _bad(f"EH label {open_label} opens an invoke that never ends", labels[open_label])

    for kind, text, args, prefixes in _text_items(asm):
        if kind == "insn":         # the most common item first
            if offset >= len(code):
                raise _bad(f"instruction {text} past the end of .text ({len(code)} bytes)", offset)
            decoded = swept.get(offset) or next(md.disasm_lite(code[offset:offset + 16], offset, 1), None)
            if decoded is None:
                raise _bad(f"capstone cannot decode the bytes of {text} {args}", offset)
            _, size, mnemonic, operands = decoded
            # A prefix may change what the bytes decode as (`rep bsf` is `tzcnt`): compare only
            # unprefixed instructions; sizes still keep the walk aligned.
            # (The same spelling, the usual case, needs no comparing.)
            if not pending_prefix and not prefixes and text != mnemonic \
                    and not _same_instruction(text, mnemonic):
                raise _bad(f"assembly text says {text} {args}, the object holds "
                           f"{mnemonic} {operands}", offset)
            pending_prefix = False
            insn = Instruction(offset, size, mnemonic, operands)
            instructions.append(insn)
            if not bodies:
                raise _bad(f"instruction {mnemonic} before any function symbol", offset)
            offset += size
            bodies[-1][2] = offset
            if mnemonic.startswith("call") or mnemonic in _JUMPS:
                site = _call_site(callees, insn, "rex64" in prefixes)
                if site is not None:
                    site["callsites"] = []
                    calls.append(site)
                    bodies[-1][3].append(len(calls) - 1)
                    if open_label is not None and not site["kind"].endswith("tail-jump"):
                        open_calls.append(len(calls) - 1)
            continue
        if kind == "marker":
            markers.append((int(text), offset, len(bodies) - 1))
            continue
        if kind == "pad":
            if not bodies:
                raise _bad(f"pad marker {text} before any function symbol", offset)
            bodies[-1][4].append(int(text))
            continue
        if kind == "label":
            labels[text] = offset
            if text in function_symbols:
                close_function()
                sym = function_symbols[text]
                if sym.value != offset:
                    raise _bad(f"function {text} at 0x{sym.value:x} in the object, "
                               f"0x{offset:x} in the assembly text", offset)
                bodies.append([text, offset, offset, [], []])
            elif text.startswith(".Ltmp"):
                if open_label is None:
                    open_label, open_calls = text, []
                elif open_calls:
                    for index in open_calls:
                        calls[index]["invoke"] = (open_label, text)
                    open_label, open_calls = None, []
                else:
                    open_label = text  # two labels, no call between: keep the later
            continue
        if kind == "align":
            offset = _align(text, args, offset)
            continue
        if kind == "data":
            offset += _data_size(text, args)
            continue
        if kind == "prefix":
            pending_prefix = True
    close_function()
    if pending_prefix:
        raise _bad("a prefix ends the assembly text", offset)
    if offset > len(code):
        raise _bad(f"the assembly text covers 0x{offset:x} bytes, .text has 0x{len(code):x}", offset)
    _attach_markers(markers, instructions, calls, bodies)

    entries = {e.begin: e for e in coff.runtime_functions() if e.code_section == ".text"}
    xdata = coff.section(".xdata").data if coff.has_section(".xdata") else b""
    functions = []
    for name, start, end, call_indices, pads in bodies:
        entry = entries.pop(start, None)
        unwind = None
        if entry is not None:
            if entry.end != end:
                raise _bad(f"{name}: .pdata says it ends at 0x{entry.end:x}, its last instruction "
                           f"ends at 0x{end:x}", start)
            unwind = decode_unwind_info(xdata, entry.unwind)
        m = FUNCLET_NAME.fullmatch(name)
        kind, parent = (FUNCLET_KINDS[m["kind"]], m["parent"]) if m else ("function", None)
        sites = tuple(CallSite(c["kind"], c["callee"], c["offset"], c["return_offset"],
                               c.get("invoke"), tuple(c["callsites"])) for c in (calls[i] for i in call_indices))
        functions.append(CodeFunction(name, kind, parent, start, end,
                                      entry.unwind if entry else None, unwind, sites, tuple(pads)))
    if entries:
        stray = ", ".join(f"0x{b:x}" for b in sorted(entries))
        raise _bad(f".pdata entries that start at no function symbol: {stray}")
    return RecoveredCode(tuple(functions), labels, tuple(instructions), len(code))


_STOPS = {"ret", "retq", "ud2", "int3", "hlt"}
_JUMPS = ("jmp", "jmpq")


def _attach_markers(markers: list[tuple[int, int, int]], instructions: list[Instruction],
                    calls: list[dict], bodies: list[list]) -> None:
    """Give each call-site marker to the call it marks: the first call (or tail jump) that
    execution reaches from the marker, falling through conditional branches and following
    unconditional ones. Straight-line text order is not enough: LLVM's tail merging (O2)
    lets two marked blocks jump to one shared `call; ud2` tail, so one machine call may
    carry several markers."""
    index_at = {insn.offset: k for k, insn in enumerate(instructions)}
    call_at = {c["offset"]: c for c in calls}
    starts = [insn.offset for insn in instructions]
    for n, at, body in markers:
        if body < 0:
            raise _bad(f"call-site marker {n} before any function symbol", at)
        _, start, end, _, _ = bodies[body]
        k = bisect.bisect_left(starts, at)
        seen: set[int] = set()
        while True:
            insn = instructions[k] if k < len(instructions) else None
            if insn is None or not start <= insn.offset < end or k in seen:
                raise _bad(f"call-site marker {n} reaches no call in its function", at)
            seen.add(k)
            if insn.offset in call_at:
                call_at[insn.offset]["callsites"].append(n)
                break
            if insn.mnemonic in _STOPS:
                raise _bad(f"call-site marker {n} reaches {insn.mnemonic} at 0x{insn.offset:x} before any call", at)
            if insn.mnemonic in ("jmp", "jmpq") and not insn.operands.startswith("*"):
                target = int(insn.operands, 0)
                if target not in index_at:
                    raise _bad(f"call-site marker {n}: the jump at 0x{insn.offset:x} lands inside an instruction",
                               at)
                k = index_at[target]
                continue
            k += 1


class _Callees:
    """What a call or jump names: the relocation inside its bytes, else the function symbol
    at its target. Looked up by the relocations' offsets in order, not byte by byte."""

    def __init__(self, text, functions) -> None:
        self.text = text
        self.offsets = sorted({r.offset for r in text.relocations})
        self.at: dict[int, str] = {}     # function symbol by address, the first one listed
        for s in functions:
            self.at.setdefault(s.value, s.name)

    def relocation(self, insn: Instruction):
        """The first relocation whose field starts inside `insn` past its first byte."""
        k = bisect.bisect_right(self.offsets, insn.offset)
        if k < len(self.offsets) and self.offsets[k] < insn.end:
            return self.text.relocation_at(self.offsets[k])
        return None


def _call_site(callees: _Callees, insn: Instruction, rex64: bool) -> dict | None:
    """A call or `jmp` instruction as a call-site record; None for a jump that is no tail
    jump. A tail jump is a `jmp` to a symbol through a relocation, or `rex64 jmpq *reg`: the
    Win64 target marks its indirect tail calls with a REX prefix (the unwinder recognises an
    epilogue by it); a jump-table dispatch has none."""
    is_jump = insn.mnemonic in _JUMPS
    reloc = callees.relocation(insn)
    direct = not insn.operands.startswith("*")
    callee = None
    if reloc is not None and reloc.type in (RelocationType.REL32, RelocationType.REL32_1,
                                             RelocationType.REL32_2, RelocationType.REL32_3,
                                             RelocationType.REL32_4, RelocationType.REL32_5):
        callee = reloc.symbol
    elif direct:
        # A direct call resolved by the assembler (a target in .text): name what is there.
        callee = callees.at.get(int(insn.operands, 0)) if insn.operands else None
    if is_jump:
        if not direct and rex64:
            return {"kind": "indirect-tail-jump", "callee": callee if reloc is not None else None,
                    "offset": insn.offset, "return_offset": None}
        if callee is None or not direct or reloc is None:
            return None  # an ordinary branch inside the code
        return {"kind": "tail-jump", "callee": callee, "offset": insn.offset, "return_offset": None}
    return {"kind": "call" if direct else "indirect-call", "callee": callee,
            "offset": insn.offset, "return_offset": insn.end}
