"""The final image: every sample method at O0 and O2 relinked into our funclet order and
checked -- layout, bytes, references, unwind data and .pdata, filter frame constants -- plus
deliberately broken images that `verify()` must catch, and Python.Runtime's EH methods.

The checks here do not trust the linker's own bookkeeping: the frame constants are read
again from the parent's instructions and UNWIND_INFO, the funclet matching is held against
the data each funclet's IR references (at O0, where LLVM moves no constant across
funclets), and the unwind data is decoded again from the image's bytes.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import re
import struct
import time

import capstone
import pytest
from conftest import OPT_LEVELS
from hypothesis import given, settings
from hypothesis import strategies as st

from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.loader import Assembly
from llilc_eh.assembly.native import CodeRange
from llilc_eh.backend.codegen import object_symbol
from llilc_eh.backend.coff import CoffObject
from llilc_eh.backend.frame import FP_OFFSET_SUFFIX, PSP_SLOT_SUFFIX
from llilc_eh.backend.image import FinalImage, link_final_image
from llilc_eh.backend.match import match_funclets
from llilc_eh.backend.relink import PADDING_BYTE
from llilc_eh.backend.recover import recover
from llilc_eh.cli import sample_path
from llilc_eh.errors import BackendError
from llilc_eh.funclets import FuncletKind, build_funclet_model
from llilc_eh.il.method import analyze
from llilc_eh.reader.jitee import JitEE
from llilc_eh.reader.translate import Options, translate
from llilc_eh.unwind import HANDLER_FLAGS, UnwindInfo, decode_unwind_info, to_clr

_MD = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
_MD.detail = True


@dataclasses.dataclass
class Linked:
    name: str
    opt: int
    module: str
    parent: str
    model: object
    coff: CoffObject
    recovered: object
    image: FinalImage


def _link_sample(compiled) -> dict[int, list[Linked]]:
    asm = Assembly(sample_path())
    images = {}
    for opt in OPT_LEVELS:
        images[opt] = []
        for m in compiled[opt]:
            il = analyze(asm.body(m.rid))
            model = build_funclet_model(m.reader.module, m.reader.parent, il, table=m.reader.table)
            image = link_final_image(m.recovered, m.coff, model, m.reader.parent)
            images[opt].append(Linked(m.name, opt, m.reader.module, m.parent, model, m.coff, m.recovered, image))
    return images


@pytest.fixture(scope="module")
def sample_images(sample_compiled) -> dict[int, list[Linked]]:
    return _link_sample(sample_compiled)


@pytest.fixture(scope="module")
def sample_images_marked(sample_compiled_marked) -> dict[int, list[Linked]]:
    """With the reader's pad markers."""
    return _link_sample(sample_compiled_marked)


def _one(images, opt, name) -> Linked:
    return next(x for x in images[opt] if name in x.name)


# -- every sample method ------------------------------------------------------------------------

def assert_sound(x: Linked) -> None:
    """Everything the final image of one method must satisfy."""
    image, model, code = x.image, x.model, x.recovered
    assert image.verify() == [], (x.name, x.opt, [str(f) for f in image.verify()])
    # Ranges: the model's layout, without the funclets LLVM removed; main body first at 0.
    assert [r.funclet for r in image.ranges] == [i for i in model.layout if i not in image.absent]
    assert image.main == image.ranges[0].code_range and image.main.start == 0
    assert image.ranges[0].function == x.parent
    for k, r in enumerate(image.ranges):
        f = model.funclets[r.funclet]
        assert r.kind is f.kind
        if f.kind is FuncletKind.FILTER:   # immediately before its handler
            assert image.ranges[k + 1].funclet == f.handler
            assert r.function == object_symbol(f.function)
        if f.kind is FuncletKind.FILTER_HANDLER:
            assert image.ranges[k - 1].funclet == f.filter
    absent = {model.funclets[i] for i in image.absent}
    assert all(f.kind.is_handler or model.funclets[f.handler].index in image.absent for f in absent)
    # No bytes lost: every function of the method is placed whole; the rest is int3 padding.
    placed = {r.function for r in image.ranges}
    assert {f.name for f in code.method_functions(x.parent)} <= placed
    text = x.coff.section(".text").data
    alignment = x.coff.section(".text").alignment
    previous = 0
    sources = []
    for r in image.ranges:
        fn = code.function(r.function)
        assert (r.source.start, r.source.end) == (fn.start, fn.end)
        assert r.segments[0].source.start == fn.start and r.begin % alignment == 0
        assert r.size == sum(s.source.size for s in r.segments)
        gap = image.code[previous:r.begin]
        assert gap == bytes([PADDING_BYTE]) * len(gap) and len(gap) < alignment
        previous = r.end
        # bytes equal outside the fields the linker re-encoded
        fixed = {b for fx in image.fixups if r.begin <= fx.site < r.end
                 for b in range(fx.site - 3 if fx.kind == "frame-constant" else fx.site, fx.site + fx.size)}
        for s in r.segments:
            sources.append((s.function, s.source))
            assert all(image.code[s.start + k] == text[s.source.start + k]
                       for k in range(s.source.size) if s.start + k not in fixed), (x.name, r.function)
    assert previous == len(image.code)
    # every byte of every placed function is in exactly one segment (filter copies aside)
    for name in placed:
        fn = code.function(name)
        covered = sorted({src for f, src in sources if f == name}, key=lambda c: c.start)
        assert covered[0].start == fn.start and covered[-1].end == fn.end
        assert all(a.end == b.start for a, b in itertools.pairwise(covered))
    assert sum(r.size for r in image.ranges) + image.padding == len(image.code)
    # Unwind data: decodes from the image's bytes, in the CLR's form, and is the object's.
    assert len(image.runtime_functions) == len(image.ranges)
    for r, rf in zip(image.ranges, image.runtime_functions):
        assert (rf.begin_rva, rf.end_rva) == (r.begin, r.end)
        info = decode_unwind_info(image.unwind_data, rf.unwind_rva)
        assert info == r.unwind
        assert not info.flags & HANDLER_FLAGS and info.handler_rva is None and not info.handler_data
        fn = code.function(r.function)
        assert info == (to_clr(fn.unwind) if fn.unwind is not None else UnwindInfo())
        assert r.unwind_synthesized == (fn.unwind is None)
    assert len(image.pdata()) == 12 * len(image.ranges)
    assert struct.unpack_from("<III", image.pdata(), 12 * (len(image.ranges) - 1)) == \
        tuple(vars(image.runtime_functions[-1]).values())
    str(image)


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_every_sample_method_is_relinked_soundly(sample_images, opt):
    shapes = collections.Counter()
    for x in sample_images[opt]:
        assert_sound(x)
        shapes["methods"] += 1
        shapes["filters"] += sum(r.kind is FuncletKind.FILTER for r in x.image.ranges)
        shapes["moved"] += any(r.begin != r.source.start for r in x.image.ranges)
        shapes["absent"] += bool(x.image.absent)
        assert not x.image.ambiguous, (x.name, x.image.ambiguous)
        # the match the image was laid out by, as later readers of the object get it
        assert x.image.funclet_code == match_funclets(x.recovered, x.coff, x.model, x.parent).code, x.name
        for fx in x.image.fixups:
            shapes[fx.kind] += 1
    assert shapes["methods"] == len(sample_images[opt]) >= 60
    assert shapes["filters"] >= 15 and shapes["moved"] >= 20 and shapes["rip-relative"] >= 40
    assert shapes["frame-constant"] >= 4


def test_funclets_are_matched_to_the_code_of_their_blocks(sample_images):
    """At O0 LLVM propagates no constant across funclets, so the data a funclet's code
    references (string literals, handles) is what its IR blocks reference; and at O0 LLVM
    keeps the module's order of pads. Both independent of the matcher's evidence."""
    checked = 0
    for x in sample_images[0]:
        refs = ir_data_by_block(x.module, x.model.parent)
        text = x.coff.section(".text")
        order = []
        for r in sorted(x.image.ranges, key=lambda r: r.source.start):
            f = x.model.funclets[r.funclet]
            if not f.kind.is_handler:
                continue
            order.append(f.index)
            fn = x.recovered.function(r.function)
            callees = {c.callee for c in fn.calls}
            data = {rel.symbol for rel in text.relocations if fn.start <= rel.offset < fn.end
                    and not x.coff.symbol(rel.symbol).is_defined and rel.symbol not in callees}
            assert data <= set().union(*(refs.get(b, set()) for b in f.blocks)), (x.name, f.label)
            checked += bool(data)
        assert order == sorted(order), x.name
    assert checked >= 60


def test_a_known_method(sample_images):
    x = _one(sample_images, 0, "CatchAndFilter.Program::CatchFilterCatch")
    image = x.image
    kinds = [(r.kind, r.function.split("@")[0]) for r in image.ranges]
    assert kinds == [(FuncletKind.ROOT, x.parent), (FuncletKind.CATCH, "?catch$1"),
                     (FuncletKind.FILTER, x.parent + "$filter1"), (FuncletKind.FILTER_HANDLER, "?catch$2"),
                     (FuncletKind.CATCH, "?catch$3")]
    # LLVM put the filter function last; it now sits before ?catch$2, which moved after it.
    assert image.ranges[2].source.start > image.ranges[4].source.start
    assert image.ranges[3].begin > image.ranges[3].source.start
    # Each catchret's continuation still reaches its $ehgcr label in the main body; the
    # funclets that moved needed their `lea rax, [rip + continuation]` re-encoded.
    continuations = []
    for r in image.ranges[1:]:
        for insn in _MD.disasm(image.code[r.begin:r.end], r.begin):
            if insn.mnemonic == "lea" and insn.op_str.startswith("rax, [rip"):
                continuations.append(insn.address + insn.size + insn.operands[1].mem.disp)
    assert sorted(continuations) == sorted(
        image.map(x.parent, x.recovered.label(f"$ehgcr_0_{n}")) for n in (6, 7, 8))
    moved = [r for r in image.ranges[1:] if r.begin != r.source.start and r.kind is not FuncletKind.FILTER]
    assert {fx.kind for fx in image.fixups} == {"rip-relative"} and len(image.fixups) == len(moved) == 2
    assert image.filter_constants is not None and "SET_FPREG" in str(image)


# -- map ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_map_translates_call_sites_and_labels(sample_images, opt):
    for x in sample_images[opt]:
        image = x.image
        relocations = {r.offset: r for r in image.relocations}
        for r in image.ranges:
            fn = x.recovered.function(r.function)
            for site in fn.calls:
                at = image.map(r.function, site.offset)
                insn = next(_MD.disasm(image.code[at:at + 16], at, 1))
                assert insn.mnemonic in ("call", "jmp") and insn.size == site.code_range.size or \
                    site.return_offset is None
                if site.return_offset is not None:
                    assert image.map(r.function, site.return_offset) == at + insn.size
                if site.callee is not None and not x.coff.symbol(site.callee).is_defined:
                    field = at + insn.size - 4
                    assert relocations[field].symbol == site.callee
            if len(r.segments) == 1:
                assert image.map(r.function, fn.end) == r.end
            assert image.map_text(fn.start) == r.begin
        for label, offset in x.recovered.labels.items():
            if label.startswith("$ehgcr"):    # a catchret continuation: stays in its function
                home = next(r for r in image.ranges if r.source.start <= offset < r.source.end)
                assert home.code_range.contains(image.map_text(offset))
        with pytest.raises(BackendError):
            image.map("no such function", 0)


# -- filter frame constants --------------------------------------------------------------------

_PSP_STORE = re.compile(r"%rsp, (0x[0-9a-f]+|\d+)\(%rsp\)$")


def expected_frame_constants(x: Linked) -> tuple[int, int]:
    """psp_slot_offset and fp_offset as the parent's own prolog and UNWIND_INFO say them."""
    parent = x.recovered.function(x.parent)
    info = parent.unwind
    assert info.frame_register_name == "RBP"
    end_of_prolog = parent.start + info.prolog_size
    store = next(i for i in x.recovered.instructions
                 if end_of_prolog <= i.offset < parent.end and i.mnemonic.startswith("mov")
                 and _PSP_STORE.search(i.operands))
    psp = int(_PSP_STORE.search(store.operands).group(1), 0)
    # LLVM sets RBP after the last allocation, so RBP - Initial-SP is SET_FPREG's offset.
    assert info.codes[0].op.name == "SET_FPREG"
    return psp, info.frame_offset


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_filter_constants_are_resolved_from_the_parent(sample_images, opt):
    patched = 0
    for x in sample_images[opt]:
        image = x.image
        names = {x.parent + PSP_SLOT_SUFFIX, x.parent + FP_OFFSET_SUFFIX}
        assert not any(r.symbol in names for r in image.relocations)
        uses = [r for r in x.coff.section(".text").relocations if r.symbol in names]
        if not any(r.kind is FuncletKind.FILTER for r in image.ranges) and not uses:
            continue
        constants = image.filter_constants
        assert constants is not None
        assert (constants.psp_slot_offset, constants.fp_offset) == expected_frame_constants(x)
        for fx in image.fixups:
            if fx.kind != "frame-constant":
                continue
            patched += 1
            start = fx.site - 3
            insn = next(_MD.disasm(image.code[start:start + 7], start, 1))
            old = next(_MD.disasm(x.coff.section(".text").data[fx.source:fx.source + 7], fx.source, 1))
            assert insn.mnemonic == "mov" and insn.size == 7 == old.size and old.mnemonic == "lea"
            assert insn.op_str.split(",")[0] == old.op_str.split(",")[0]     # same register
            name = "psp_slot_offset" if "psp_slot_offset" in fx.detail else "fp_offset"
            assert insn.operands[1].imm == getattr(constants, name) == fx.target
        assert len([fx for fx in image.fixups if fx.kind == "frame-constant"]) == len(uses)
    assert patched >= 4


def test_frame_constants_measured(sample_images):
    """The values DESIGN quotes (32/40 and 48 in small tests) and more: a table of what
    the sample's parents have."""
    seen = collections.Counter()
    for opt in OPT_LEVELS:
        for x in sample_images[opt]:
            if x.image.filter_constants is not None:
                c = x.image.filter_constants
                seen[(c.psp_slot_offset, c.fp_offset)] += 1
                assert c.psp_slot_offset % 8 == 0 and c.fp_offset % 16 == 0 and 32 <= c.psp_slot_offset
    assert (32, 48) in seen or (40, 48) in seen
    print("\n(psp_slot_offset, fp_offset): count --", dict(seen))


# -- verify catches what is broken --------------------------------------------------------------

def _broken(image: FinalImage, at: int, size: int, delta: int) -> FinalImage:
    code = bytearray(image.code)
    value = int.from_bytes(code[at:at + size], "little", signed=True) + delta
    code[at:at + size] = value.to_bytes(size, "little", signed=True)
    return dataclasses.replace(image, code=bytes(code))


def test_verify_reports_a_broken_displacement(sample_images):
    x = _one(sample_images, 2, "CatchAndFilter.Program::CatchFilterCatch")
    catchret = next(fx for fx in x.image.fixups if fx.kind == "rip-relative")
    findings = _broken(x.image, catchret.site, 4, 1).verify()
    assert [(f.rule, f.offset) for f in findings] == [("reference", catchret.site)]
    # a branch inside a piece that did not need fixing, too
    branch = next(i for r in x.image.ranges for i in _MD.disasm(x.image.code[r.begin:r.end], r.begin)
                  if i.group(capstone.CS_GRP_JUMP) and i.imm_size)
    findings = _broken(x.image, branch.address + branch.imm_offset, branch.imm_size, 2).verify()
    assert ("reference", branch.address + branch.imm_offset) in [(f.rule, f.offset) for f in findings]
    # and the field of a call that stays a relocation
    call = next(r for r in x.image.relocations)
    assert [(f.rule, f.offset) for f in _broken(x.image, call.offset, 4, 1).verify()] == [("relocation", call.offset)]


def test_verify_reports_broken_constants_relocations_and_tables(sample_images):
    x = _one(sample_images, 0, "NestedFilters.Program::FilterUsesLocals")
    constant = next(fx for fx in x.image.fixups if fx.kind == "frame-constant")
    findings = _broken(x.image, constant.site, 4, 8).verify()
    assert [(f.rule, f.offset) for f in findings] == [("frame-constant", constant.site)]
    dropped = dataclasses.replace(x.image, relocations=x.image.relocations[1:])
    assert [f.rule for f in dropped.verify()] == ["relocation"]
    ranges = list(x.image.ranges)
    ranges[1], ranges[2] = ranges[2], ranges[1]
    assert any(f.rule == "range-order" for f in dataclasses.replace(x.image, ranges=tuple(ranges)).verify())
    unwind = bytearray(x.image.unwind_data)
    unwind[x.image.runtime_functions[1].unwind_rva + 1] ^= 1     # the prolog size
    assert [f.rule for f in dataclasses.replace(x.image, unwind_data=bytes(unwind)).verify()] == ["unwind"]


def test_verify_reports_changed_instruction_bytes(sample_images):
    """An instruction that holds nothing relocated or relative, with one register changed:
    same length, other bytes."""
    x = _one(sample_images, 2, "CatchAndFilter.Program::CatchFilterCatch")
    move = next(i for r in x.image.ranges for i in _MD.disasm(x.image.code[r.begin:r.end], r.begin)
                if i.mnemonic == "mov" and len(i.bytes) == 3 and i.bytes[1] == 0x89 and i.bytes[2] >= 0xC0)
    code = bytearray(x.image.code)
    code[move.address + 2] ^= 0x08                    # ModRM.reg: another source register
    findings = dataclasses.replace(x.image, code=bytes(code)).verify()
    assert [(f.rule, f.offset) for f in findings] == [("instruction-bytes", move.address)]


def test_verify_holds_the_image_against_the_objects_own_instructions(sample_images):
    """What verify reads of the object (the link's decode, served again) is what decoding
    each segment afresh gives -- also for a segment that does not start on an instruction
    of it, which the link's decode cannot serve."""
    from llilc_eh.backend import x86
    from llilc_eh.backend.verify import _object_instructions

    def fresh(src, seg):
        try:
            return x86.decode(x86.md(), src.text, seg.source.start, seg.source.end, seg.function)
        except BackendError as e:
            return e.reason

    def served(src, seg):
        try:
            return _object_instructions(x86.md(), src, seg)
        except BackendError as e:
            return e.reason

    for opt in OPT_LEVELS:
        for x in sample_images[opt]:
            for seg in (seg for r in x.image.ranges for seg in r.segments):
                assert served(x.image._source, seg) == fresh(x.image._source, seg), (x.name, str(seg))
    x = _one(sample_images, 2, "CatchAndFilter.Program::CatchFilterCatch")
    seg = x.image.ranges[0].segments[0]
    inside = dataclasses.replace(seg, source=CodeRange(seg.source.start + 1, seg.source.end))
    assert served(x.image._source, inside) == fresh(x.image._source, inside)


# -- LLVM removes funclets at O2 ---------------------------------------------------------------

def test_funclets_llvm_removed_are_absent(sample_images, sample_images_marked):
    """At O2 LLVM deletes a cleanup it finds empty (SimplifyCFG): Counter's finally #2 only
    stores a local that is dead once the exception leaves the method; the funclet has no code
    and the image says so. A pad marker is an instruction of the funclet, so with markers
    LLVM keeps it (an empty funclet: prolog, marker, epilog -- the markers' cost)."""
    x = _one(sample_images, 2, "LocalsInHandlers.Program::Counter")
    fin = next(f for f in x.model.funclets if f.label == "finally #2")
    assert x.image.verify() == [] and x.image.absent == (fin.index,) and not x.image.pad_identities
    assert x.image.range_of(fin.index) is None
    assert "without pad markers" in str(x.image)
    marked = _one(sample_images_marked, 2, "LocalsInHandlers.Program::Counter")
    fin = next(f for f in marked.model.funclets if f.label == "finally #2")
    kept = marked.recovered.function(marked.image.range_of(fin.index).function)
    assert kept.pads == (fin.pad_marker,) and not kept.calls
    assert not any(y.image.absent for opt in OPT_LEVELS for y in sample_images_marked[opt])
    assert len(x.image.code) < len(marked.image.code)


def test_a_model_that_does_not_fit_the_object_is_refused(sample_images):
    x = _one(sample_images, 0, "CatchAndFilter.Program::CatchFilterCatch")
    other = _one(sample_images, 0, "MultiCatch.Program::Dispatch")
    with pytest.raises(BackendError) as info:
        match_funclets(x.recovered, x.coff, other.model, x.parent)
    assert info.value.kind == "funclet-match"
    with pytest.raises(BackendError) as info:
        link_final_image(x.recovered, x.coff, other.model, x.parent)
    assert info.value.kind == "funclet-match"


def _without_identities(code, pads: bool = False):
    """The recovered code without call-site identities, and without pad markers unless `pads`."""
    return dataclasses.replace(code, functions=tuple(
        dataclasses.replace(f, calls=tuple(dataclasses.replace(c, callsites=()) for c in f.calls),
                            pads=f.pads if pads else ())
        for f in code.functions))


def _with_pads(code, pads: dict[str, tuple[int, ...]]):
    return dataclasses.replace(code, functions=tuple(
        dataclasses.replace(f, pads=pads.get(f.name, f.pads)) for f in code.functions))


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_matching_without_call_site_identities(sample_images, opt):
    """An object without the markers is matched by callees, clauses and dispatch chains; where
    that leaves funclets interchangeable the image says so, and at O0 (LLVM keeps the module's
    pad order) the choice is still right."""
    ambiguous = 0
    for x in sample_images[opt]:
        bare = match_funclets(_without_identities(x.recovered), x.coff, x.model, x.parent)
        assert not bare.identities
        exact = {r.funclet: r.function for r in x.image.ranges}
        differ = {i for i, name in bare.code.items() if exact.get(i) != name}
        assert differ <= set(bare.ambiguous), x.name
        if opt == 0:
            assert not differ, x.name
        ambiguous += bool(bare.ambiguous)
    assert ambiguous >= 1     # two sibling finallys that print alike, e.g.


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_pad_markers_alone_decide_every_funclet(sample_images_marked, opt):
    """With pad markers and nothing else of identity (no call-site markers), every funclet
    is matched, none ambiguous: the assignment the full evidence gives."""
    for x in sample_images_marked[opt]:
        assert x.image.pad_identities and not x.image.ambiguous and x.image.decided_by == ""
        padded = match_funclets(_without_identities(x.recovered, pads=True), x.coff, x.model, x.parent)
        assert padded.pads and not padded.ambiguous and padded.decided_by == "", x.name
        assert {i: name for i, name in padded.code.items()} == {r.funclet: r.function for r in x.image.ranges}


def test_merged_cleanups_are_one_of_them(framework_shapes):
    """A funclet with the pad markers of a chain of cleanups LLVM merged stands for the one its
    calls belong to; with nothing to tell them apart, for the chain's head (the pad that opens
    it); with calls of more than one, for none: a funclet-match error."""
    x = framework_shapes["merged-cleanups", 0x0600004B, 2]
    ((kept, gone),) = x.image.merged
    symbol = x.image.range_of(kept).function
    head = x.model.funclets[gone[0]]
    fn = x.recovered.function(symbol)
    assert x.model.states[head.state].enclosing == x.model.funclets[kept].state     # head -> kept
    callless = dataclasses.replace(x.recovered, functions=tuple(
        dataclasses.replace(f, calls=()) if f.name == symbol else f for f in x.recovered.functions))
    bare = match_funclets(callless, x.coff, x.model, x.parent)
    assert bare.code[head.index] == symbol and bare.merged == ((head.index, (kept,)),) and not bare.ambiguous
    # the head's calls too (a call of the head's blocks marked in the funclet): no one funclet fits
    call = next(c for c in x.model.calls if c.funclet == 0)
    head_call = dataclasses.replace(call, funclet=head.index)
    model = dataclasses.replace(x.model, calls=tuple(head_call if c is call else c for c in x.model.calls))
    sites = list(fn.calls)
    sites[0] = dataclasses.replace(sites[0], callsites=(call.callsite,))
    code = dataclasses.replace(x.recovered, functions=tuple(
        dataclasses.replace(f, calls=tuple(sites)) if f.name == symbol else f for f in x.recovered.functions))
    with pytest.raises(BackendError) as info:
        match_funclets(code, x.coff, model, x.parent)
    assert info.value.kind == "funclet-match" and "merged by LLVM" in info.value.reason


def test_pad_markers_against_the_other_evidence(sample_images_marked):
    """A pad marker the rest of the evidence contradicts, one no model funclet has, or one in
    two object funclets is a funclet-match error naming the object funclet and the model's."""
    def refused(x, pads, *words):
        with pytest.raises(BackendError) as info:
            match_funclets(_with_pads(x.recovered, pads), x.coff, x.model, x.parent)
        assert info.value.kind == "funclet-match" and all(w in info.value.reason for w in words), info.value.reason

    # a catch funclet carrying a finally's marker: the kind says otherwise
    x = _one(sample_images_marked, 2, "TryInFinally.Program::Run")
    catch = next(r for r in x.image.ranges if r.kind is FuncletKind.CATCH)
    fin = next(r for r in x.image.ranges if r.kind is FuncletKind.FINALLY)
    n = x.model.funclets[fin.funclet].pad_marker
    refused(x, {catch.function: (n,)}, catch.function, f"pad marker {n}", x.model.funclets[fin.funclet].label,
            "it is a catch funclet")
    refused(x, {catch.function: (999,)}, catch.function, "pad marker 999", "no model funclet")
    own = x.recovered.function(catch.function).pads
    refused(x, {catch.function: own + (n,), fin.function: ()}, catch.function, "several", "no chain of cleanups")
    # two finallys swapped: their calls say otherwise
    x = _one(sample_images_marked, 2, "FinallyChainTargets.Program::Siblings")
    a, b = sorted((x.recovered.function(r.function) for r in x.image.ranges if r.kind is FuncletKind.FINALLY),
                  key=lambda f: f.start)[:2]
    assert a.calls and b.calls
    refused(x, {a.name: b.pads, b.name: a.pads}, a.name, f"pad marker {b.pads[0]}", "calls")
    refused(x, {b.name: a.pads}, a.name, b.name, f"both carry pad marker {a.pads[0]}")


# -- the corpus --------------------------------------------------------------------------------

def test_python_runtime_eh_methods_relink_at_o2(pool):
    asm = Assembly(Corpus().find("Python.Runtime.dll").location)
    ee = JitEE(asm)
    items = []
    for rid in asm.methods_with_il():
        body = asm.body(rid)
        if body.has_eh:
            il = analyze(body)
            items.append((il, translate(asm, il, ee)))
    results = pool.compile_many([r.module for _, r in items], 2)
    totals = collections.Counter()
    seconds = 0.0
    for (il, reader), result in zip(items, results):
        assert not isinstance(result, BackendError), (il.name, result)
        coff = CoffObject.parse(result.obj)
        code = recover(coff, result.asm)
        model = build_funclet_model(reader.module, reader.parent, il, table=reader.table)
        t0 = time.perf_counter()
        image = link_final_image(code, coff, model, reader.parent)
        findings = image.verify()
        seconds += time.perf_counter() - t0
        assert findings == [], (il.name, [str(f) for f in findings])
        assert not image.ambiguous, (il.name, image.ambiguous)
        assert [r.funclet for r in image.ranges] == [i for i in model.layout if i not in image.absent]
        totals["methods"] += 1
        totals["ranges"] += len(image.ranges)
        totals["moved"] += any(r.begin != r.source.start for r in image.ranges)
        totals["absent"] += len(image.absent)
        totals["read-only data"] += bool(image.read_only_data)
        for fx in image.fixups:
            totals[fx.kind] += 1
    assert totals["methods"] == 319
    assert totals["jump-table"] > 0 and totals["rip-relative"] > 0 and totals["frame-constant"] > 0
    print(f"\nPython.Runtime O2: {dict(totals)}; link+verify {seconds:.2f} s "
          f"({1000 * seconds / totals['methods']:.1f} ms per method)")


# -- helpers -----------------------------------------------------------------------------------

_GLOBAL = re.compile(r'@("(?:[^"\\]|\\.)*"|[-\w$.]+)')
_CALLEE = re.compile(r'\b(?:call|invoke)\b[^@%]*?(@(?:"(?:[^"\\]|\\.)*"|[-\w$.]+))\(')
_BLOCK = re.compile(r'^("(?:[^"\\]|\\.)*"|[-\w$.]+):')


def ir_data_by_block(module: str, function: str) -> dict[str, set[str]]:
    """{`%block`: object symbols of the globals it names other than as a callee}."""
    out: dict[str, set[str]] = {}
    block = None
    for line in module.splitlines():
        if block is None:
            if line.startswith("define ") and f"{function}(" in line:
                block = "%entry"
                out[block] = set()
            continue
        if line.startswith("}"):
            break
        if line.lstrip().startswith(";"):
            continue
        label = _BLOCK.match(line)
        if label:
            block = "%" + label.group(1)
            out.setdefault(block, set())
            continue
        callees = set(_CALLEE.findall(line))
        out[block] |= {object_symbol("@" + g) for g in _GLOBAL.findall(line)
                       if "@" + g not in callees and not g.startswith("llvm.")}
    return out


# -- shapes only the framework has ---------------------------------------------------------------

# (assembly, method token, what it shows)
FRAMEWORK_SHAPES = (
    ("System.Data.Common.dll", 0x0600093C, "stray-tail"),      # LLVM put a catchret block in the parent
    ("System.Threading.Tasks.Dataflow.dll", 0x06000181, "stray-tail"),
    ("System.Data.Common.dll", 0x0600095C, "filter-copies"),  # a filter inside a finally: two copies
    ("System.Private.Xml.dll", 0x060028A7, "data-relocation"),  # O2 lookup table of static addresses
    ("System.Private.CoreLib.dll", 0x060002C1, "leaf-filter"),  # a filter without a frame at O2
    ("System.Private.CoreLib.dll", 0x0600004B, "merged-cleanups"),  # O2 merges a finally into the next
)


@pytest.fixture(scope="module")
def framework_shapes(pool):
    corpus = Corpus()
    out = {}
    for name, token, shape in FRAMEWORK_SHAPES:
        asm = Assembly(corpus.find(name).location)
        il = analyze(asm.body(token & 0xFFFFFF))
        # merged cleanups happen only with pad markers (without, LLVM deletes the empty one)
        reader = translate(asm, il, JitEE(asm), Options(pad_markers=shape == "merged-cleanups"))
        model = build_funclet_model(reader.module, reader.parent, il, table=reader.table)
        for opt in OPT_LEVELS:
            result = pool.compile(reader.module, opt)
            coff = CoffObject.parse(result.obj)
            code = recover(coff, result.asm)
            parent = object_symbol(reader.parent)
            out[shape, token, opt] = Linked(il.name, opt, reader.module, parent, model, coff, code,
                                            link_final_image(code, coff, model, reader.parent))
    return out


def test_framework_shapes_relink_soundly(framework_shapes):
    seen = collections.Counter()
    for (shape, _, opt), x in framework_shapes.items():
        assert_sound(x)
        image = x.image
        if shape == "stray-tail" and any(len(r.segments) > 1 for r in image.ranges):
            seen[shape] += 1
            for r in image.ranges:
                for s in r.segments[1:]:
                    # a tail of another function's range, right after the funclet's own code,
                    # cut from the end of that function's range
                    assert s.function != r.function and s.start == r.segments[0].end
                    giver = next(g for g in image.ranges if g.function == s.function)
                    assert giver.segments[-1].source.end == s.source.start and s.source.end == giver.source.end
                    # .pdata follows: the giver's entry ends where the tail began
                    entry = image.runtime_functions[image.ranges.index(giver)]
                    assert entry.end_rva == giver.end < giver.begin + giver.source.size
        if shape == "filter-copies":
            filters = [r for r in image.ranges if r.kind is FuncletKind.FILTER]
            assert len(filters) == 2 and filters[0].function == filters[1].function
            seen[shape] += 1
            with pytest.raises(BackendError):
                image.map(filters[0].function, filters[0].source.start)
            assert [image.map(r.function, r.source.start, funclet=r.funclet) for r in filters] == \
                [r.begin for r in filters]
        if shape == "data-relocation" and image.read_only_data:
            data = [r for r in image.relocations if r.offset >= image.read_only_data_offset]
            seen[shape] += bool(data)
        if shape == "leaf-filter":
            seen[shape] += any(r.unwind_synthesized for r in image.ranges)
        if shape == "merged-cleanups" and image.merged:
            # Interop/Sys::GetCwd: finally #0 only clears a dead local and ends in a cleanupret to
            # finally #1, its only way in; SimplifyCFG appends #1's code to #0's funclet. The
            # funclet holds both pad markers and #1's calls: it stands for #1, #0 has no code.
            seen[shape] += 1
            ((kept, gone),) = image.merged
            fn = x.recovered.function(image.range_of(kept).function)
            assert sorted(fn.pads) == sorted(x.model.funclets[i].pad_marker for i in (kept, *gone))
            assert set(gone) <= set(image.absent) and not image.ambiguous
            assert "LLVM merged the cleanups" in str(image)
    print(f"\nframework shapes seen: {dict(seen)}")
    assert seen["stray-tail"] >= 1 and seen["filter-copies"] >= 2 and seen["merged-cleanups"] == 1


def test_stray_tails_are_only_blocks_no_one_else_reaches():
    """`stray_tails` on hand-made code: a tail of the parent reached only by a funclet moves
    to the funclet; reached from the parent too, or entered by fall-through, it stays."""
    from llilc_eh.backend import x86
    from llilc_eh.backend.relink import stray_tails
    from llilc_eh.backend.recover import CodeFunction

    def functions(text, parent_end, funclet_start):
        parent = CodeFunction("parent", "function", None, 0, parent_end, None, None)
        funclet = CodeFunction("funclet", "catch", "parent", funclet_start, len(text), None, None)
        decoded = {f.name: x86.decode(x86.md(), text, f.start, f.end, f.name) for f in (parent, funclet)}
        return [parent, funclet], decoded

    # parent: xor eax,eax; ret | tail @3: lea rax,[rip-10]; ret | funclet @16: test; jne tail; jmp tail
    tail = bytes.fromhex("488d05f6ffffff") + b"\xc3"
    text = bytes.fromhex("31c0c3") + tail + b"\xcc" * 5 + bytes.fromhex("85c0") + bytes([0x75, (3 - 20) & 0xFF]) \
        + bytes([0xEB, (3 - 22) & 0xFF])
    fns, decoded = functions(text, 11, 16)
    assert stray_tails(fns, decoded) == {"funclet": [("parent", 3, 11)]}
    # the parent falls through into it: it is the parent's code
    fallthrough = bytes.fromhex("31c090") + text[3:]
    fns, decoded = functions(fallthrough, 11, 16)
    assert stray_tails(fns, decoded) == {}
    # the parent jumps there too
    shared = bytes.fromhex("eb01c3") + text[3:]
    fns, decoded = functions(shared, 11, 16)
    assert stray_tails(fns, decoded) == {}


def test_detailed_decoding_is_disasm_a_few_at_a_time(sample_images):
    """`x86.detailed` yields what one `disasm` over the range yields, including where the range
    ends inside an instruction."""
    from llilc_eh.backend import x86

    x = _one(sample_images, 2, "CatchAndFilter.Program::CatchFilterCatch")
    text = x.coff.section(".text").data
    for start, end in ((0, len(text)), (0, 7), (3, len(text) - 1), (5, 5)):
        want = [(i.address, i.size) for i in x86.md().disasm(text[start:end], start)]
        assert [(i.address, i.size) for i in x86.detailed(x86.md(), text, start, end)] == want, (start, end)


_RIP_MODRM = st.sampled_from([0x05, 0x0D, 0x15, 0x1D, 0x25, 0x2D, 0x35, 0x3D]) | st.integers(0, 255)


@settings(max_examples=400, deadline=None)
@given(prefix=st.sampled_from([b"", b"\x48", b"\x4c", b"\x41", b"\x66", b"\xf2", b"\xf3", b"\x67", b"\x2e", b"\x66\x48"]),
       opcode=st.sampled_from([0x8D, 0x8B, 0x89, 0x3B, 0x39, 0x63, 0xFF, 0xE8, 0xE9, 0xEB, 0x0F, 0x80, 0xC7, 0x74])
       | st.integers(0, 255),
       modrm=_RIP_MODRM, rest=st.binary(min_size=12, max_size=12))
def test_relative_fields_read_without_details_are_capstones(prefix, opcode, modrm, rest):
    """`x86.relative_field`'s shortcuts (plain branches, plain rip-relative operands, indirect
    calls and jumps) give what capstone's details give, for whatever the bytes decode to."""
    from llilc_eh.backend import x86

    data = prefix + bytes([opcode, modrm]) + rest
    for address, size, mnemonic, op_str in x86.MD_LITE.disasm_lite(data, 0x1000):
        raw = data[address - 0x1000:address - 0x1000 + size]
        detailed = (x86.capstone_relative_field(next(x86.md().disasm(raw, address, 1)))
                    if mnemonic.startswith(x86.RELATIVE_MNEMONICS) or "rip" in op_str else None)
        assert x86.relative_field(x86.md(), address, raw, mnemonic, op_str) == detailed, (raw.hex(), mnemonic, op_str)
