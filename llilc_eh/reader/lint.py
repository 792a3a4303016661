"""The funclet lint: rules LLVM's verifier does not check but WinEHPrepare punishes silently.

DESIGN decision 7: every module the reader produces passes `verify()` (LLVM's verifier) and
this lint before anything else uses it (`check_module` does both). The verifier accepts IR
that WinEHPrepare then quietly rewrites (removeImplausibleInstructions, cloneCommonBlocks).
Measured with LLVM 22 (tests/reader/test_lint.py compiles each case):

* a call in a funclet without its `"funclet"` bundle, or with the enclosing funclet's, is
  replaced by `unreachable` together with the rest of its block (the catchret included);
  the funclet ends in `int3` after the last surviving call. Nounwind intrinsics and inline
  asm survive without a bundle;
* a `ret` in a funclet, or a catchret/cleanupret from another funclet's pad, becomes
  `unreachable`: the funclet keeps only its prolog and runs off its end (no trap);
* a block reachable from two funclets is cloned, one copy per funclet;
* a non-constant catchpad argument passes the verifier and aborts the process in codegen
  (an assertion in a `cast<ConstantInt>`).

Each rule below names one such hazard; `lint` returns every violation as a `LintFinding`
naming the function, the block and the instruction.

The funclet coloring
--------------------
Every reachable block gets the set of funclets it belongs to ("colors"): the walk starts
at the entry block in the main body (color `None`); a block that begins with a pad is in
the pad's own funclet (a catchswitch block is its own dispatch color, as in LLVM's
colorEHFunclets); a catchret's target is in the funclet of the catchswitch's parent; every
other edge keeps the color. Unreachable blocks are not colored and not judged (WinEHPrepare
deletes them first).

The rules
---------
missing-funclet-bundle   a call/invoke in a catch/cleanup funclet without a `"funclet"`
                         bundle — except nounwind intrinsics and inline asm, which LLVM
                         exempts too.
wrong-funclet-bundle     a call/invoke whose bundle names another funclet's pad, or any
                         funclet bundle in the main body.
ret-in-funclet           `ret` in a funclet (funclets leave by catchret/cleanupret).
funclet-exit-pad         a catchret/cleanupret in a funclet that is not its pad's.
catchpad-arg0-not-constant-i32
                         a catchpad's first argument (the CLR class token, or a filter's
                         marker) is not a constant i32.
catchret-target          a catchret's target is not a block of the catchswitch's parent
                         funclet: its other (non-catchret) predecessors put it in another
                         funclet, or catchrets from different funclets continue there.
cleanupret-unwind        a cleanupret unwinds to a pad whose parent is not an ancestor of
                         the cleanup (so the unwind does not leave the cleanup).
cross-funclet-value      an SSA value (instruction or argument) defined in one funclet and
                         used in another: values cross funclets through memory (allocas of
                         the entry block). Tokens (pads) are exempt, and so are static
                         allocas, whose address is a frame offset valid in every funclet.
block-in-two-funclets    a block colored by two funclets: LLVM would clone it; the reader
                         emits one copy per funclet itself.
reader-table             (given the reader's side table, `reader.sidetable`) the table does
                         not describe the module: a pad or a call-site marker of the IR
                         without its entry, an entry without its pad or marker, a pad of
                         another block or kind, a call of another block, callee, funclet
                         bundle or unwind destination than its entry says.

The side table carries what the IR cannot (a pad's IL clause, a call's IL offset) to the
funclet model, which looks it up by pad name and call-site marker; this rule is what makes
that lookup safe: the model's facts come from the table, its structure from the IR, and
the two are held to each other here, once, in the stage that reads the IR anyway.

Reading the module: LLVM's own print, not llvmlite's ValueRefs
---------------------------------------------------------------
The module is parsed by LLVM (llvmlite `parse_assembly`) and the lint reads LLVM's canonical
print of it (`str(module)`): one instruction per line (an invoke's `to label`/`unwind label`
and a switch's cases are continuation lines), every block reference written `label %x`
(bare only in phi incoming lists, where it is a block name, not a value), unnamed values and
blocks numbered. llvmlite's ValueRef API would give opcodes and operands but not operand
bundles, successors, attribute groups or the numbers of unnamed values; printing one
instruction (`str(instruction)`) renumbers the whole function, so per-instruction printing is
quadratic; and every ValueRef query is an FFI call (~10 µs): walking a function's operands
that way costs ~120 µs per instruction; the print costs ~2 µs. A value operand is any
`%name` that names an argument or an instruction of the function (blocks and values share
one namespace in LLVM; a named struct type that shares a value's name would be misread,
the reader emits none).

Reading the print costs Python per line and per regex match far more than per character, so
the lint reads a function in few steps: the lines that begin instructions in runs (only
labels, blank lines and continuations one by one), the head (defined value, opcode) of every
instruction in one regex scan, and operands only where asked: the block operands of
terminators, the values of an instruction when a rule needs them. The cross-funclet rule
first scans each group of blocks in the same funclets at once and judges instruction by
instruction only a group where some value crosses.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from dataclasses import dataclass, field

import llvmlite.binding as llvm

from ..errors import ReaderError
from .sidetable import ReaderTable
from .sidetable import CALLSITE_IN_IR

RULES = (
    "missing-funclet-bundle",
    "wrong-funclet-bundle",
    "ret-in-funclet",
    "funclet-exit-pad",
    "catchpad-arg0-not-constant-i32",
    "catchret-target",
    "cleanupret-unwind",
    "cross-funclet-value",
    "block-in-two-funclets",
    "reader-table",
)

_PADS = ("catchpad", "cleanuppad", "catchswitch")
_CALLS = ("call", "invoke", "callbr")

# (no string spans a line: the instructions of a block are read as one text, a line each)
_STRING = r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
_IDENT = r'(?:' + _STRING + r'|[-\w$.]+)'
_LOCAL = "%" + _IDENT
# one token of an instruction: a block operand (`label %x`: group 1), a local name (group 2),
# a global, or a string (a `c"..."` constant is found from its quote)
_TOKEN = re.compile(r'label (' + _LOCAL + r')|(' + _LOCAL + r')|@' + _IDENT + r'|' + _STRING)
# a block operand alone (a literal start: the scan skips to each `label `)
_LABEL = re.compile(r'label (' + _LOCAL + r')')
# `_TOKEN` with only the block operands captured: the same scan, ~1.5 times faster (every
# alternative begins with a literal character the scan can skip to)
_LABEL_TOKEN = re.compile(r'label (' + _LOCAL + r')|' + _LOCAL + r'|@' + _IDENT + r'|' + _STRING)
# every local name, block operands included, and strings (so no `%` inside one is taken for a
# name): a superset of the values an instruction uses, found ~3 times faster than `_TOKEN`
# finds them (both alternatives begin with a literal character the scan can skip to)
_LOCAL_OR_STRING = re.compile(_LOCAL + r'|' + _STRING)
# the same for a text without a quoted local name (`%"`): every local name is found, a `%`
# inside a string at worst adds a name (the scan skips to each `%`)
_UNQUOTED_LOCAL = re.compile(r'%[-\w$.]+')
# the start of a line that does not begin an instruction (in LLVM's print: a label, a blank
# line, a continuation, the closing `}`), after any blank lines; group 1: a plain block label
_OTHER_LINE = re.compile(r'\n\n*(?:([-\w$.]+):|(?!  [%A-Za-z]))')
# the head of each instruction of a function, every one read as a line after "\n": the value
# it defines (group 1), the text from the opcode on (2), the opcode (3)
_HEAD = re.compile(r'\n(?:(' + _LOCAL + r') = )?(?:tail )?(?:musttail )?(?:notail )?(([^ \n]*)[^\n]*)')
_WITHIN = re.compile(r'\bwithin (none|' + _LOCAL + r')')
_FUNCLET_BUNDLE = re.compile(r'"funclet"\(token (' + _LOCAL + r'|none)\)')
_CALLEE = re.compile(r'(@' + _IDENT + r'|' + _LOCAL + r'|\basm\b)')
_GROUP_REF = re.compile(r'#\d+')
# searched in "\n" + the module text: a literal start finds the groups (at the module's end)
# without trying every position
_ATTRIBUTE_GROUP = re.compile(r'\nattributes (#\d+) = \{(.*)\}')
_DECLARE_NAME = re.compile(r'@(' + _IDENT + r')\(')
_CONSTANT_I32 = re.compile(r'i32 -?\d+')
# the reader's call-site marker (`Translator.call`) as LLVM prints inline asm
_CALLSITE_ASM = CALLSITE_IN_IR


@dataclass(frozen=True)
class LintFinding:
    """One violation: which rule, where (function, block, instruction text) and why."""

    rule: str
    function: str
    block: str
    instruction: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: @{self.function}, block {self.block}: {self.detail}\n    {self.instruction}"


# --------------------------------------------------------------------------------------------
# A function as the lint sees it


class _Inst:
    """One instruction. Its operands are read when first asked for: the coloring and the
    rules need the block operands of terminators and the values of a few instructions."""

    __slots__ = ("_labels", "_values", "block", "body", "name", "opcode", "text")

    def __init__(self, text: str, block: _Block, name: str | None, opcode: str, body: str):
        self.text = text            # one line, whitespace collapsed, as LLVM prints it
        self.block = block
        self.name = name            # the value it defines (`%x`), if any
        self.opcode = opcode
        self.body = body            # the text from the opcode on
        self._labels: list[str] | None = None
        self._values: list[str] | None = None

    @property
    def labels(self) -> list[str]:
        """Block operands in order (`label %x`)."""
        if self._labels is None:
            body = self.body
            if "label " not in body:
                self._labels = []
            elif '"' not in body and body.count("label ") == body.count(" label "):
                # no string, and every `label ` follows a space (ends no name): `_TOKEN` would
                # read each where it stands
                self._labels = _LABEL.findall(body)
            else:
                self._labels = [label for label in _LABEL_TOKEN.findall(body) if label]
        return self._labels

    @property
    def values(self) -> list[str]:
        """The function's values (arguments and instructions) among the other `%name`s it
        mentions, in order."""
        if self._values is None:
            known = self.block.function.value_names
            self._values = [local for _, local in _TOKEN.findall(self.body) if local in known] \
                if "%" in self.body else []
        return self._values


@dataclass(eq=False, slots=True)
class _Block:
    label: str                      # as referenced: `%entry`, `%5`, `%"a b"`
    function: _Function
    insts: list[_Inst] = field(default_factory=list)
    # set once the function is read (the rules and the coloring ask them again and again)
    pad: _Inst | None = None        # the pad the block begins with (after PHIs), if any
    terminator: _Inst | None = None
    successors: list[_Block] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)     # positions of its call/invoke/callbr instructions


def _body_texts(text: str, pos: int) -> tuple[list[tuple[str | None, list[str]]], int] | None:
    """A function's blocks as (label, or None for the unlabeled entry block; its instructions),
    read from its first line (at `pos`, right after the `define` line's "\\n") up to its
    closing `}` line, and the position after that line (None: there is none).

    An instruction is its line as printed, less the indentation, its continuation lines (an
    invoke's `to label`/`unwind label`, a switch's cases) joined to it (`_Function._body`
    collapses the whitespace). Only the other lines (labels, blank lines, continuations: a
    few per block) are read one by one; the runs between them, lines that each begin an
    instruction, are taken whole."""
    blocks: list[tuple[str | None, list[str]]] = []
    texts: list[str] | None = None
    run = pos - 1                                           # the "\n" before the next line
    for other in _OTHER_LINE.finditer(text, run):
        if other.start() > run:                             # lines that each begin an instruction
            if texts is None:                               # the unlabeled entry block
                texts = []
                blocks.append((None, texts))
            texts += text[run:other.start()].replace("\n  ", "\n").split("\n")[1:]
        end = text.find("\n", other.end())
        run = end = len(text) if end < 0 else end
        if other.group(1) is not None:                      # a block label (a comment may follow)
            texts = []
            blocks.append((other.group(1), texts))
            continue
        line = text[other.end():end]
        if line.startswith("}"):
            return blocks, end + 1
        stripped = line.strip()
        if not stripped or stripped.startswith((";", "#dbg_")):
            continue
        if not line.startswith(" "):                        # a block label
            label = line[:line.index('"', 1) + 1] if line.startswith('"') else line.split(":", 1)[0]
            texts = []
            blocks.append((label.strip(), texts))
            continue
        if texts is None:                                   # the unlabeled entry block
            texts = []
            blocks.append((None, texts))
        if line.startswith("  ") and line[2] not in " ]":
            texts.append(stripped)
        elif texts:                                         # a continuation line
            texts[-1] += " " + stripped
    return None


def _split_top_level(text: str) -> list[str]:
    """Split at commas outside (), [], {}, <> and strings."""
    parts, depth, current, quoted = [], 0, [], False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in "([{<":
            depth += 1
        elif not quoted and ch in ")]}>":
            depth -= 1
        elif not quoted and ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def _bracketed(text: str, start: int, open_: str, close: str) -> tuple[str, int]:
    """The text inside the bracket opening at text[start], and the index after its close."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return text[start + 1:i], i + 1
    return text[start + 1:], len(text)


class _Function:
    """One defined function read from LLVM's print: blocks, instructions, pads and colors."""

    def __init__(self, header: str, body: list[tuple[str | None, list[str]]], nounwind: set[str],
                 attribute_groups: dict[str, str]):
        self.nounwind = nounwind                    # declared functions that do not unwind
        self.attribute_groups = attribute_groups
        self.name, self.args = self._header(header)
        self.blocks: list[_Block] = []
        self.block_by_label: dict[str, _Block] = {}
        self.inst_by_name: dict[str, _Inst] = {}
        self._body(body)
        self.colors: dict[_Block, list] = self._color()
        self._funclets = {b: tuple(c for c in colors if c is None or c.opcode != "catchswitch")
                          for b, colors in self.colors.items()}

    # -- reading ---------------------------------------------------------------------------

    @staticmethod
    def _header(line: str) -> tuple[str, set[str]]:
        m = _DECLARE_NAME.search(line)
        name = m.group(1)
        params, _ = _bracketed(line, m.end() - 1, "(", ")")
        args = set()
        for param in _split_top_level(params):
            found = re.findall(_LOCAL, param)
            if found:
                args.add(found[-1])
        return (name[1:-1] if name.startswith('"') else name), args

    def _body(self, body: list[tuple[str | None, list[str]]]) -> None:
        numbered_args = sum(1 for a in self.args if a[1:].isdigit())
        # LLVM prints single spaces between words, which is what collapsing the whitespace
        # leaves: checked for the whole function at once (a text is printable if its only
        # whitespace is spaces), any other text is collapsed one by one
        joined = "\n".join(["\n".join(texts) for _, texts in body if texts])
        if "  " in joined or " \n" in joined or joined.endswith(" ") or not joined.replace("\n", " ").isprintable():
            for _, texts in body:
                texts[:] = [" ".join(text.split()) for text in texts]
            joined = "\n".join(["\n".join(texts) for _, texts in body if texts])
        heads = iter(_HEAD.findall("\n" + joined))
        for label, texts in body:
            block = _Block(f"%{numbered_args}" if label is None else "%" + label, self)
            block.insts = insts = [_Inst(text, block, name or None, opcode, rest)
                                   for text, (name, rest, opcode) in zip(texts, heads)]
            for inst in insts:
                if inst.name:
                    self.inst_by_name[inst.name] = inst
            block.calls = [k for k, inst in enumerate(insts) if inst.opcode in _CALLS]
            head = next((i for i in insts if i.opcode != "phi"), None)
            block.pad = head if head is not None and head.opcode in _PADS else None
            block.terminator = insts[-1] if insts else None
            self.blocks.append(block)
            self.block_by_label[block.label] = block
        self.value_names = self.args | set(self.inst_by_name)     # arguments and instructions
        for block in self.blocks:
            if block.terminator is not None:
                block.successors = [self.block_by_label[label] for label in block.terminator.labels
                                    if label in self.block_by_label]

    def inst(self, name: str | None) -> _Inst | None:
        return self.inst_by_name.get(name) if name else None

    # -- pads ------------------------------------------------------------------------------

    def pad_parent(self, pad: _Inst) -> _Inst | None:
        """The `within` operand of a pad: the enclosing pad, or None for `within none`."""
        m = _WITHIN.search(pad.text)
        return None if m is None or m.group(1) == "none" else self.inst(m.group(1))

    def funclet_parent(self, pad: _Inst | None) -> _Inst | None:
        """The funclet (catchpad/cleanuppad, or None: the main body) a pad sits in.

        That is its `within` operand, seen through catchswitches: a catchpad's funclet
        parent is its catchswitch's parent.
        """
        parent = self.pad_parent(pad) if pad is not None else None
        while parent is not None and parent.opcode == "catchswitch":
            parent = self.pad_parent(parent)
        return parent

    def ancestors(self, pad: _Inst | None) -> list[_Inst | None]:
        """The funclets enclosing `pad`'s funclet, innermost first, ending with the main body."""
        chain, current = [], pad
        while current is not None:
            current = self.funclet_parent(current)
            chain.append(current)
        return chain

    def exit_pad(self, term: _Inst) -> _Inst | None:
        """The pad a catchret/cleanupret leaves (`from %pad`)."""
        return self.inst(term.values[0]) if term.values else None

    def bundle(self, inst: _Inst) -> tuple[bool, _Inst | None]:
        """(has a funclet bundle, the pad it names or None for `token none`)."""
        m = _FUNCLET_BUNDLE.search(inst.text)
        if not m:
            return False, None
        return True, (None if m.group(1) == "none" else self.inst(m.group(1)))

    def catchpad_args(self, pad: _Inst) -> list[str]:
        start = pad.text.index("[", _WITHIN.search(pad.text).end())
        inside, _ = _bracketed(pad.text, start, "[", "]")
        return _split_top_level(inside)

    # -- successors and coloring -----------------------------------------------------------

    def _color(self) -> dict[_Block, list]:
        colors: dict[_Block, list] = defaultdict(list)
        if not self.blocks:
            return colors
        work = [(self.blocks[0], None)]
        while work:
            block, color = work.pop()
            if block.pad is not None:
                color = block.pad
            if color in colors[block]:
                continue
            colors[block].append(color)
            term = block.terminator
            succ_color = color
            if term is not None and term.opcode == "catchret":
                succ_color = self.funclet_parent(self.exit_pad(term))
            work.extend((succ, succ_color) for succ in block.successors)
        return {b: c for b, c in colors.items() if c}

    def funclets_of(self, block: _Block) -> tuple[_Inst | None, ...]:
        """The block's colors that are funclets or the main body (not catchswitch dispatch)."""
        return self._funclets.get(block, ())

    # -- calls -----------------------------------------------------------------------------

    def exempt_call(self, inst: _Inst) -> bool:
        """Calls WinEHPrepare keeps without a bundle: nounwind intrinsics and inline asm."""
        m = _CALLEE.search(inst.body, len(inst.opcode))
        if m is None:
            return False
        callee = m.group(1)
        if callee == "asm":
            return True
        if not callee.startswith(("@llvm.", '@"llvm.')):
            return False
        site = " ".join(self.attribute_groups.get(g, "") for g in _GROUP_REF.findall(inst.text))
        return callee[1:].strip('"') in self.nounwind or "nounwind" in site.split()


def _functions(module_text: str) -> list[_Function]:
    groups = {m.group(1): m.group(2) for m in _ATTRIBUTE_GROUP.finditer("\n" + module_text)}
    nounwind: set[str] = set()          # filled by every declaration, before any rule asks
    functions = []
    pos = 0
    while pos <= len(module_text):
        end = module_text.find("\n", pos)
        end = len(module_text) if end < 0 else end
        line, pos = module_text[pos:end], end + 1
        if line.startswith("define "):
            read = _body_texts(module_text, pos)
            if read is None:            # no closing `}`: no function
                break
            body, pos = read
            functions.append(_Function(line, body, nounwind, groups))
        elif line.startswith("declare ") and (m := _DECLARE_NAME.search(line)):
            attrs = " ".join(groups.get(g, "") for g in _GROUP_REF.findall(line[m.end():]))
            if "nounwind" in attrs.split():
                nounwind.add(m.group(1).strip('"'))
    return functions


# --------------------------------------------------------------------------------------------
# The rules


def _describe(pad: _Inst | None) -> str:
    return "the main body" if pad is None else f"funclet {pad.name or pad.text}"


def _rule_bundles(f: _Function, out: list[LintFinding]) -> None:
    for block in f.blocks:
        funclets = f.funclets_of(block)
        insts = block.insts
        for k in block.calls:
            inst = insts[k]
            has_bundle, named = f.bundle(inst)
            for funclet in funclets:
                if funclet is None:
                    if has_bundle:
                        out.append(_finding("wrong-funclet-bundle", f, inst,
                                            "a funclet bundle in the main body"))
                elif not has_bundle:
                    if not f.exempt_call(inst):
                        out.append(_finding("missing-funclet-bundle", f, inst,
                                            f"call in {_describe(funclet)} without its funclet bundle "
                                            f"(LLVM turns it into unreachable)"))
                elif named is not funclet:
                    out.append(_finding("wrong-funclet-bundle", f, inst,
                                        f"bundle names {_describe(named)}, the call is in {_describe(funclet)}"))


def _rule_exits(f: _Function, out: list[LintFinding]) -> None:
    for block in f.blocks:
        term = block.terminator
        if term is None:
            continue
        for funclet in f.funclets_of(block):
            if term.opcode == "ret" and funclet is not None:
                out.append(_finding("ret-in-funclet", f, term, f"ret in {_describe(funclet)}"))
            if term.opcode in ("catchret", "cleanupret"):
                pad = f.exit_pad(term)
                if pad is not funclet:
                    out.append(_finding("funclet-exit-pad", f, term,
                                        f"{term.opcode} from {_describe(pad)} inside {_describe(funclet)}"))


def _rule_catchpad_args(f: _Function, out: list[LintFinding]) -> None:
    for block in f.blocks:
        for inst in block.insts:
            if inst.opcode != "catchpad":
                continue
            args = f.catchpad_args(inst)
            if not args:
                out.append(_finding("catchpad-arg0-not-constant-i32", f, inst, "catchpad without arguments"))
            elif not _CONSTANT_I32.fullmatch(args[0]):
                out.append(_finding("catchpad-arg0-not-constant-i32", f, inst, f"first argument is `{args[0]}`"))


def _rule_catchret_targets(f: _Function, out: list[LintFinding]) -> None:
    # The funclet a target belongs to by itself: the colors its other (non-catchret)
    # predecessors give it. A target reached only by catchrets must be agreed on by all.
    catchrets: dict[_Block, list[tuple[_Inst, _Inst | None]]] = defaultdict(list)
    reached: dict[_Block, set] = defaultdict(set)
    for block in f.blocks:
        term = block.terminator
        if term is None or block not in f.colors:
            continue
        if term.opcode == "catchret":
            target = f.block_by_label[term.labels[0]]
            catchrets[target].append((term, f.funclet_parent(f.exit_pad(term))))
        else:
            for succ in block.successors:
                reached[succ].update(f.funclets_of(block))
    if f.blocks:
        reached[f.blocks[0]].add(None)
    for target, exits in catchrets.items():
        others = reached.get(target, set())
        expected_all = {expected for _, expected in exits}
        for term, expected in exits:
            if others and expected not in others:
                where = " and ".join(_describe(c) for c in others)
                out.append(_finding("catchret-target", f, term,
                                    f"target {target.label} is a block of {where}; this catchret must continue "
                                    f"in {_describe(expected)}, the catchswitch's parent"))
            elif not others and len(expected_all) > 1:
                where = " and ".join(_describe(c) for c in expected_all)
                out.append(_finding("catchret-target", f, term,
                                    f"target {target.label} is reached only by catchrets that continue in {where}; "
                                    f"this one must continue in {_describe(expected)}"))


def _rule_cleanupret_unwind(f: _Function, out: list[LintFinding]) -> None:
    for block in f.blocks:
        term = block.terminator
        if term is None or term.opcode != "cleanupret" or block not in f.colors:
            continue
        if not term.labels:
            continue            # unwind to caller
        dest = f.block_by_label[term.labels[0]]
        dest_pad = dest.pad
        pad = f.exit_pad(term)
        if dest_pad is None:
            continue            # the verifier rejects an unwind edge to a non-pad
        dest_parent = f.funclet_parent(dest_pad)
        if dest_parent not in f.ancestors(pad):
            out.append(_finding("cleanupret-unwind", f, term,
                                f"unwinds to {dest.label}, a pad within {_describe(dest_parent)}, which does not "
                                f"enclose {_describe(pad)}"))


def _rule_cross_funclet_values(f: _Function, out: list[LintFinding]) -> None:
    entry = f.blocks[0] if f.blocks else None
    funclets: dict[_Block, set] = {}

    def funclets_set(block: _Block) -> set:
        if block not in funclets:
            funclets[block] = set(f.funclets_of(block))
        return funclets[block]

    def defined_in(name: str, block: _Block | None) -> set | None:
        """The funclets where a value `block` uses is defined; None when the use needs no
        check: no value of the function, a value of the same block (in the same funclets), a
        pad (the function's only tokens: a token names its funclet, it is no data), a static
        alloca (its address is a frame offset valid in every funclet), unreachable code."""
        d = f.inst_by_name.get(name)
        if d is None:
            return {None} if name in f.args else None
        if d.block is block or d.opcode in _PADS or (d.opcode == "alloca" and d.block is entry) \
                or d.block not in f.colors:
            return None
        return funclets_set(d.block)

    # The screen: blocks in the same funclets cannot cross each other, so each such group is
    # scanned at once for the values it mentions; only those defined outside the group can
    # cross. Nearly every group passes; the blocks of one that does not are judged
    # instruction by instruction.
    groups: dict[tuple, list[_Block]] = defaultdict(list)
    for block in f.blocks:
        if uses := f.funclets_of(block):
            groups[uses].append(block)
    # (the static allocas, which nearly every group uses and none crosses, need no look)
    exempt = {inst.name for inst in entry.insts if inst.opcode == "alloca"} if entry is not None else set()
    suspects: set[_Block] = set()
    for uses, blocks in groups.items():
        insts = [inst for block in blocks for inst in block.insts]
        text = "\n".join([inst.text for inst in insts])
        names = f.value_names.intersection((_LOCAL_OR_STRING if '%"' in text else _UNQUOTED_LOCAL).findall(text))
        names -= exempt
        names.difference_update([inst.name for inst in insts])
        uses_set = set(uses)
        defined_outside = (defined_in(name, None) for name in names)
        if any(defined is not None and uses_set - defined for defined in defined_outside):
            suspects.update(blocks)
    for block in f.blocks:
        if block not in suspects:
            continue
        uses = funclets_set(block)
        for inst in block.insts:
            for value in dict.fromkeys(inst.values):
                defined = defined_in(value, block)
                crossing = uses - defined if defined is not None else None
                if crossing:
                    what = f"argument {value}" if value not in f.inst_by_name else f"value {value}"
                    where = ", ".join(_describe(c) for c in defined)
                    used = ", ".join(_describe(c) for c in crossing)
                    out.append(_finding("cross-funclet-value", f, inst,
                                        f"{what} is defined in {where} and used in {used}"))


def _rule_multicolor(f: _Function, out: list[LintFinding]) -> None:
    for block in f.blocks:
        colors = f.colors.get(block, [])
        if len(colors) > 1:
            head = block.insts[0] if block.insts else None
            out.append(LintFinding("block-in-two-funclets", f.name, block.label,
                                   head.text if head else "",
                                   "reachable from " + ", ".join(_describe(c) for c in colors)))


def _finding(rule: str, f: _Function, inst: _Inst, detail: str) -> LintFinding:
    return LintFinding(rule, f.name, inst.block.label, inst.text, detail)


_RULE_FUNCTIONS = (_rule_bundles, _rule_exits, _rule_catchpad_args, _rule_catchret_targets,
                   _rule_cleanupret_unwind, _rule_cross_funclet_values, _rule_multicolor)


def _pad_kind(f: _Function, pad: _Inst) -> str:
    """The handler kind a pad's IR says: what the reader's table must say of it."""
    args = f.catchpad_args(pad)
    if pad.opcode == "catchpad":
        return "filter-handler" if len(args) >= 2 and args[1].startswith("ptr @") else "catch"
    return "fault" if args else "finally"


def _check_table(functions: list[_Function], table: ReaderTable, out: list[LintFinding]) -> None:
    """Rule reader-table: the reader's side table and the module describe the same pads and
    calls (see the module docstring)."""
    def bare(name: str) -> str:
        name = name.removeprefix("@")
        return name[1:-1] if name.startswith('"') else name

    def finding(f: _Function, inst: _Inst, detail: str) -> None:
        out.append(_finding("reader-table", f, inst, detail))

    parent = bare(table.parent)
    seen_pads: set[str] = set()
    seen_calls: set[tuple[str, int]] = set()
    function_of = {c.function: bare(c.function) for c in table.calls}
    calls = {(function_of[c.function], c.callsite): c for c in table.calls}
    for f in functions:
        for block in f.blocks:
            pad = block.pad
            if pad is not None and pad.opcode != "catchswitch":
                entry = table.pad_by_name.get(pad.name) if f.name == parent else None
                if entry is None:
                    finding(f, pad, f"pad {pad.name} has no entry in the reader's table")
                else:
                    seen_pads.add(entry.name)
                    if entry.block != block.label:
                        finding(f, pad, f"the table puts {pad.name} in block {entry.block}")
                    if entry.kind != (kind := _pad_kind(f, pad)):
                        finding(f, pad, f"the table says {pad.name} is a {entry.kind} pad, the IR a {kind}")
            insts = block.insts
            for k in block.calls:
                inst = insts[k]
                if "asm" not in inst.body or (m := _CALLSITE_ASM.search(inst.text)) is None:
                    continue
                key = (f.name, int(m.group(1)))
                entry = calls.get(key)
                if entry is None:
                    finding(f, inst, f"call-site marker {key[1]} has no entry in the reader's table")
                    continue
                if key in seen_calls:
                    finding(f, inst, f"call-site marker {key[1]} appears twice")
                    continue
                seen_calls.add(key)
                if entry.block != block.label:
                    finding(f, inst, f"the table puts call site {key[1]} in block {entry.block}")
                call = insts[k + 1] if k + 1 < len(insts) else None
                if call is None or call.opcode not in ("call", "invoke") or \
                        ("asm" in call.body and _CALLSITE_ASM.search(call.text)):
                    finding(f, inst, f"call-site marker {key[1]} is not followed by its call")
                    continue
                callee = _CALLEE.search(call.body, len(call.opcode))
                if callee is None or callee.group(1) != entry.callee:
                    finding(f, call, f"call site {key[1]} calls {callee.group(1) if callee else '?'}, "
                                     f"the table says {entry.callee}")
                unwind = call.labels[-1] if call.opcode == "invoke" and call.labels else None
                if unwind != entry.unwind:
                    finding(f, call, f"call site {key[1]} unwinds to {unwind or 'the caller (a call)'}, "
                                     f"the table says {entry.unwind or 'the caller (a call)'}")
                _, bundle = f.bundle(call)
                if (bundle.name if bundle is not None else None) != entry.funclet:
                    finding(f, call, f"call site {key[1]} has the funclet bundle of {_describe(bundle)}, "
                                     f"the table says {entry.funclet or 'none'}")
    for entry in table.pads:
        if entry.name not in seen_pads:
            out.append(LintFinding("reader-table", parent, entry.block, "",
                                   f"the table's {entry.kind} pad {entry.name} is not in the module"))
    for key, entry in calls.items():
        if key not in seen_calls:
            out.append(LintFinding("reader-table", key[0], entry.block, "",
                                   f"the table's call site {key[1]} (of {entry.callee}) is not in the module"))


# --------------------------------------------------------------------------------------------
# Entry points


def parse(module_text: str):
    """Parse textual IR with llvmlite; a parse error is a ReaderError (kind "llvm-parse")."""
    try:
        return llvm.parse_assembly(module_text)
    except RuntimeError as e:
        raise ReaderError(f"LLVM cannot parse the module: {str(e).strip()}", kind="llvm-parse") from None


def read_functions(module) -> list[_Function]:
    """The defined functions of a parsed module as the lint reads them (LLVM's canonical
    print): blocks, instructions, pads and the funclet coloring, in definition order. The
    funclets stage builds its model on this same reading."""
    return _functions(str(module))


def read_module(module_text: str):
    """(parsed module, `read_functions` of it) for a module text, remembered for the last
    few texts: the pipeline's lint and funclet model read the same module one after the
    other, and parsing, printing and reading it is most of what either costs. The two
    only read what they get."""
    return _read_module(module_text)


@functools.lru_cache(maxsize=2)
def _read_module(module_text: str):
    module = parse(module_text)
    return module, read_functions(module)


def lint_module(module, functions: list[_Function] | None = None,
                table: ReaderTable | None = None) -> list[LintFinding]:
    """Every funclet-rule violation in a parsed llvmlite module, function by function
    (`functions`: its `read_functions`, when the caller has them); with the reader's side
    table, also rule reader-table."""
    findings: list[LintFinding] = []
    functions = functions if functions is not None else _functions(str(module))
    for f in functions:
        for rule in _RULE_FUNCTIONS:
            rule(f, findings)
    if table is not None:
        _check_table(functions, table, findings)
    return findings


def lint(module_text: str, table: ReaderTable | None = None) -> list[LintFinding]:
    """Every funclet-rule violation in a module given as LLVM IR text (see the module docstring)."""
    return lint_module(parse(module_text), table=table)


def verify_module(module) -> None:
    """Run LLVM's verifier on a parsed module; raise ReaderError (kind "llvm-verify")."""
    try:
        module.verify()
    except RuntimeError as e:
        raise ReaderError(f"LLVM verifier: {str(e).strip()}", kind="llvm-verify") from None


def verify(module_text: str) -> None:
    """Parse and run LLVM's verifier; raise ReaderError (kind "llvm-parse"/"llvm-verify")."""
    verify_module(parse(module_text))


def check_module(module_text: str, *, method: str | None = None, table: ReaderTable | None = None):
    """DESIGN decision 7 in one call: parse, the funclet lint (with the reader's side table
    when given: `ReaderResult.table`), then LLVM's verifier.

    Returns the parsed llvmlite module; raises ReaderError (kind "funclet-lint") listing
    every finding, or the parser's or verifier's error, naming `method` when given.
    """
    try:
        module, functions = read_module(module_text)
        findings = lint_module(module, functions, table)
        if findings:
            raise ReaderError(f"{len(findings)} funclet lint finding(s):\n" + "\n".join(map(str, findings)),
                              kind="funclet-lint")
        verify_module(module)
    except ReaderError as e:
        raise (e.with_method(method) if method else e) from None
    return module
