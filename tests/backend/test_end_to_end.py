"""End to end: every EH method of the embedded sample (our tests/il programs) through the
whole pipeline (`llilc_eh.pipeline.Pipeline`) at O0 and O2, and every property the backend
promises checked on what comes out -- from the final image, never from LLVM's layout:

1. the front passed (IR lint + LLVM verify), codegen made an AMD64 object, the final image
   links and `verify()` finds nothing;
2. the clause table passes the validator under all three profiles and its encoding
   round-trips;
3. every IL filter clause is a real filter clause whose FILTER range lies right before its
   handler's range, with only int3 padding between them;
4. a runtime-style lookup of every call's return address in the final image visits exactly
   the handlers of the model's dispatch chain;
5. one unwind record per final range with the right CorJitFuncKind, each the CLR form of
   what LLVM wrote (cross-checked against `llvm-readobj --unwind`), and `.pdata` pointing at
   encoded records that decode back to the same infos;
6. the LLVM differential: clean without filters, only `filter-as-catch` with them;
7. determinism: a second pipeline on a fresh worker pool gives the same bytes.

Counts (methods, filter clauses, calls looked up, unwind records compared) are asserted
too, so no test passes by checking nothing. Every failure names the method and the level.
"""

from __future__ import annotations

import re
import struct
from collections import Counter
from dataclasses import dataclass

import capstone
import pytest
from conftest import OPT_LEVELS, parse_readobj_unwind, readobj_address, run_readobj

from llilc_eh.assembly.body import ClauseKind
from llilc_eh.assembly.loader import Assembly
from llilc_eh.assembly.native import ClauseFlags, NativeClause
from llilc_eh.backend.codegen import CodegenPool
from llilc_eh.backend.relink import PADDING_BYTE
from llilc_eh.clauses.generate import decode_clauses, encode_clauses, generate_clauses
from llilc_eh.clauses.validate import Profile, validate
from llilc_eh.cli import sample_path
from llilc_eh.errors import LlilcEhError
from llilc_eh.funclets import FuncletKind
from llilc_eh.pipeline import MethodRun, Pipeline, UnwindKind, eh_methods
from llilc_eh.reader.lint import check_module
from llilc_eh.unwind import (
    GPR_NAMES,
    HANDLER_FLAGS,
    UnwindInfo,
    UnwindOpKind,
    decode_unwind_info,
)

# Today's sample has 67 methods with EH (3 of them with no call in a try, so no
# clause); the count is computed from the IL clauses and this
# is only a floor, so a new test program does not break the test and a lost one does.
MIN_EH_METHODS = 67
PROFILES = tuple(Profile)
AMD64 = 0x8664

_MD = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)


def where(run: MethodRun) -> str:
    return f"{run.name} O{run.opt}"


@dataclass
class Sample:
    asm: Assembly
    rids: list[int]                          # methods with EH, from their IL clauses
    runs: dict[int, list[MethodRun]]         # opt -> one run per rid, in rid order


@pytest.fixture(scope="module")
def sample() -> Sample:
    asm = Assembly(sample_path())
    rids = []
    for rid in asm.methods_with_il():
        try:
            if asm.body(rid).clauses:
                rids.append(rid)
        except LlilcEhError:            # a body that does not read: the pipeline must say so
            rids.append(rid)
    runs = {}
    with CodegenPool(2) as pool:
        for opt in OPT_LEVELS:
            runs[opt] = Pipeline(asm, pool, opt=opt).run_many(rids)
    return Sample(asm, rids, runs)


def il_filter_clauses(run: MethodRun) -> list[int]:
    return [c.index for c in run.il.body.clauses if c.kind is ClauseKind.FILTER]


def protecting(run: MethodRun, callsite: int) -> list[int]:
    """The handler funclets a call may reach, in dispatch order: the model's chain, less the
    handlers without code in the final image (empty cleanups LLVM removed)."""
    call = next(c for c in run.model.calls if c.callsite == callsite)
    return [s.funclet for s in run.model.protecting(call) if s.funclet in run.placed.funclet_ranges]


# -- counts: every EH method reaches the end ---------------------------------------------------

def test_every_eh_method_reaches_the_end_at_every_level(sample):
    assert eh_methods(sample.asm) == sample.rids
    assert len(sample.rids) >= MIN_EH_METHODS
    filters = sum(c.kind is ClauseKind.FILTER for rid in sample.rids for c in sample.asm.body(rid).clauses)
    assert filters > 0
    for opt in OPT_LEVELS:
        runs = sample.runs[opt]
        assert [r.rid for r in runs] == sample.rids
        for run in runs:
            assert run.error is None, f"{where(run)}: stopped after {run.stage_reached}: {run.error}"
            assert run.has_eh and run.ok, f"{where(run)}: not ok"
            assert run.clauses is not None, f"{where(run)}: no clause table"
        assert sum(len(il_filter_clauses(r)) for r in runs) == filters
        # A try that holds no call needs no clause (FinallyMultiEndfinally::EarlyExit: `leave`
        # only): a table is empty exactly when no call of the code reaches a handler.
        for run in runs:
            protected = [c for c in run.placed.calls if c.callsite is not None and protecting(run, c.callsite)]
            assert bool(run.clauses.clauses) == bool(protected), f"{where(run)}: {len(protected)} protected calls"
            if opt == 0:
                assert bool(run.clauses.clauses) == bool(run.model.invokes), where(run)
        assert sum(bool(r.clauses.clauses) for r in runs) >= MIN_EH_METHODS - 3


# -- 1. front, codegen, image -------------------------------------------------------------------

@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_front_codegen_and_final_image(sample, opt):
    for run in sample.runs[opt]:
        w = where(run)
        assert run.error is None, f"{w}: {run.error}"
        # The front ran the funclet lint and LLVM's verifier (check_module); again, here.
        assert {"il", "reader", "lint", "model"} <= set(run.seconds), f"{w}: {sorted(run.seconds)}"
        check_module(run.reader.module, method=run.name)
        assert run.model.verify() == [], f"{w}: {[str(f) for f in run.model.verify()]}"
        assert run.codegen is not None and run.codegen.opt == opt and run.codegen.obj, f"{w}: no object"
        assert run.coff.machine == AMD64, f"{w}: machine {run.coff.machine:#x}"
        image = run.image
        assert image is not None, f"{w}: no final image"
        assert run.image_findings == [], f"{w}: {[str(f) for f in run.image_findings]}"
        assert image.verify() == [], f"{w}: {[str(f) for f in image.verify()]}"
        assert image.main.start == 0 and image.ranges[0].funclet == 0, f"{w}: main body not first"
        assert [r.funclet for r in image.ranges] == [i for i in run.model.layout if i not in image.absent], w


# -- 2. the clause table ------------------------------------------------------------------------

@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_clause_table_is_valid_for_every_profile_and_round_trips(sample, opt):
    for run in sample.runs[opt]:
        w = where(run)
        image = run.image
        # The table describes the final image: main body and handler ranges are its ranges.
        assert run.clauses.main == image.main, w
        ranges = {(r.begin, r.end): r for r in image.ranges}
        for c in run.clauses.clauses:
            r = ranges.get((c.handler_start, c.handler_end))
            assert r is not None and r.kind.is_handler, f"{w}: handler of {c} is no handler range of the image"
        for profile in PROFILES:
            native = generate_clauses(run.model, run.placed, profile)
            if profile is run.profile:
                assert native == run.clauses, f"{w}: the pipeline's table is not the generator's"
            findings = validate(native, profile)
            assert findings == [], f"{w} {profile}:\n" + "\n".join(map(str, findings))
            data = encode_clauses(native)
            assert len(data) == 24 * len(native.clauses), f"{w} {profile}"
            assert data == b"".join(c.build() for c in native.clauses), f"{w} {profile}"
            assert decode_clauses(data) == native.clauses, f"{w} {profile}: encoding does not round-trip"
            if not profile.duplicate_clauses:
                assert not any(c.is_duplicate for c in native.clauses), f"{w} {profile}: a duplicate"
        assert run.clause_bytes == encode_clauses(run.clauses), f"{w}: clause_bytes"
        assert decode_clauses(run.clause_bytes) == run.clauses.clauses, f"{w}: clause_bytes do not decode"


# -- 3. filters ---------------------------------------------------------------------------------

@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_every_il_filter_is_a_filter_clause_right_before_its_handler(sample, opt):
    checked = Counter()
    for run in sample.runs[opt]:
        w = where(run)
        image, model, clauses = run.image, run.model, run.clauses.clauses
        index = {r.funclet: k for k, r in enumerate(image.ranges)}
        filter_clauses = [c for c in clauses if c.flags & ClauseFlags.FILTER]
        for il in il_filter_clauses(run):
            handlers = [f for f in model.funclets if f.kind is FuncletKind.FILTER_HANDLER and f.clause == il
                        and f.index in index]
            assert handlers, f"{w}: IL clause #{il} (filter) has no handler in the final image"
            for h in handlers:
                k = index[h.index]
                handler = image.ranges[k]
                assert h.filter in index, f"{w}: the filter of {h.label} is not placed"
                filt = image.ranges[index[h.filter]]
                assert filt.kind is FuncletKind.FILTER, f"{w}: {filt}"
                assert index[h.filter] == k - 1, f"{w}: the filter of {h.label} is not the range before it"
                gap = image.code[filt.end:handler.begin]
                assert gap == bytes([PADDING_BYTE]) * len(gap), f"{w}: {gap.hex()} between filter and handler"
                primary = [c for c in clauses if c.flags == ClauseFlags.FILTER
                           and c.handler_start == handler.begin and c.handler_end == handler.end]
                assert primary, f"{w}: IL clause #{il}: no filter clause (flags 1) for {h.label}"
                assert all(c.filter_start == filt.begin for c in primary), \
                    f"{w}: IL clause #{il}: FilterOffset is not the start of its FILTER range"
                checked["handlers"] += 1
            checked["il"] += 1
        # And the other way: every filter clause's filter is a FILTER range, its handler next.
        for c in filter_clauses:
            k = next((k for k, r in enumerate(image.ranges) if r.begin == c.filter_start), None)
            assert k is not None and image.ranges[k].kind is FuncletKind.FILTER, \
                f"{w}: FilterOffset {c.filter_start:#x} of {c} starts no FILTER range"
            assert k + 1 < len(image.ranges) and image.ranges[k + 1].begin == c.handler_start, \
                f"{w}: the handler of {c} is not the range after its filter"
            checked["clauses"] += 1
        assert sum(r.kind is FuncletKind.FILTER for r in image.ranges) == \
            len({c.filter_start for c in filter_clauses}), f"{w}: a FILTER range no clause names"
    assert checked["il"] > 0 and checked["handlers"] >= checked["il"] and checked["clauses"] >= checked["il"]


# -- 4. a runtime-style lookup over the final image --------------------------------------------

def covering(clauses: tuple[NativeClause, ...], pc: int) -> list[NativeClause]:
    """The clauses the CLR visits for a frame at `pc` (TryStart <= pc < TryEnd): the frame's
    own tries (primaries, in table order), then the ones a funclet inherits (duplicates)."""
    hits = [c for c in clauses if c.try_start <= pc < c.try_end and not c.is_cloned_finally]
    return [c for c in hits if not c.is_duplicate] + [c for c in hits if c.is_duplicate]


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_a_runtime_lookup_of_every_return_address_visits_the_dispatch_chain(sample, opt):
    looked_up = Counter()
    for run in sample.runs[opt]:
        w = where(run)
        placed, model, code = run.placed, run.model, run.image.code
        clauses = run.clauses.clauses
        first_duplicate = next((k for k, c in enumerate(clauses) if c.is_duplicate), len(clauses))
        assert all(c.is_duplicate for c in clauses[first_duplicate:]), f"{w}: a primary after a duplicate"
        handler_of = {r.start: i for i, r in placed.funclet_ranges.items()}
        filters = [r for i, r in placed.funclet_ranges.items() if model.funclets[i].kind is FuncletKind.FILTER]
        for call in placed.calls:
            # The call is a call instruction of the final image, ending at the return address.
            insn = next(_MD.disasm(code[call.start:call.return_address], call.start, 1), None)
            assert insn is not None and insn.mnemonic == "call" and insn.size == call.return_address - call.start, \
                f"{w}: no call at {call.start:#x} in the final image"
            got = [handler_of[c.handler_start] for c in covering(clauses, call.return_address)]
            assert not any(r.start <= call.start < r.end for r in filters), \
                f"{w}: the call at {call.start:#x} is a filter's: placed calls are the main body's and handlers'"
            if call.callsite is None:
                looked_up["llvm"] += 1      # a call of LLVM's own: no model chain to hold it to
                continue
            want = protecting(run, call.callsite)
            assert got == want, (f"{w}: call #{call.callsite} at {call.start:#x} (return {call.return_address:#x}) "
                                 f"visits handlers {got}, its dispatch chain is {want}")
            looked_up["protected" if want else "unprotected"] += 1
            looked_up["in-funclet" if call.start >= placed.main.end else "in-main"] += 1
        # A filter's calls: an exception escaping a filter is swallowed by the runtime (the
        # filter says "no"), so no clause of the method may cover them.
        for r in run.image.ranges:
            if r.kind is not FuncletKind.FILTER:
                continue
            for seg in r.segments:
                for s in run.recovered.function(seg.function).calls:
                    if s.return_offset is None or not seg.source.start <= s.offset < seg.source.end:
                        continue
                    ret = s.return_offset + seg.start - seg.source.start
                    assert r.begin < ret <= r.end, f"{w}: filter call at .text+{s.offset:#x} placed outside its range"
                    assert covering(clauses, ret) == [], f"{w}: a clause covers the filter's call returning at {ret:#x}"
                    looked_up["filter"] += 1
    assert looked_up["protected"] >= 100 and looked_up["unprotected"] > 0 and looked_up["in-funclet"] > 0 \
        and looked_up["filter"] > 0, dict(looked_up)


# -- 5. unwind ----------------------------------------------------------------------------------

_CODE = re.compile(r"0x([0-9A-F]{2}): (\w+)(?: (.*))?")


@dataclass
class ListedFunction:
    """One RuntimeFunction as `llvm-readobj --unwind` prints it."""

    start: int
    end: int
    unwind: int
    flags: int
    prolog_size: int
    frame_register: str | None
    frame_offset: int          # bytes (readobj prints the header's value, in units of 16)
    codes: list[tuple]         # (code offset, operation, register, size or offset)
    handler: str | None


def listed_function(coff, raw: dict) -> ListedFunction:
    def address(text: str) -> int:
        return readobj_address(coff, text)

    codes = []
    for line in raw["codes"]:
        offset, op, rest = _CODE.fullmatch(line).groups()
        fields = dict(p.split("=", 1) for p in (rest or "").split(", ") if "=" in p)
        amount = fields.get("size", fields.get("offset"))
        codes.append((int(offset, 16), op, fields.get("reg"),
                      None if amount is None else int(amount, 0)))
    register = raw["FrameRegister"].split(" ")[0]
    return ListedFunction(address(raw["StartAddress"]), address(raw["EndAddress"]),
                          address(raw["UnwindInfoAddress"]), raw["Flags"], int(raw["PrologSize"]),
                          None if register == "-" else register,
                          0 if raw["FrameOffset"] == "-" else int(raw["FrameOffset"], 16) * 16,
                          codes, raw.get("Handler"))


def unwind_meaning(info: UnwindInfo) -> list[tuple]:
    """Our decoded operations in readobj's terms: (code offset, operation, register, amount)."""
    out = []
    for op in info.codes:
        if op.op == UnwindOpKind.SET_FPREG:
            out.append((op.code_offset, op.op.name, GPR_NAMES[info.frame_register], info.frame_offset))
        elif op.op == UnwindOpKind.PUSH_MACHFRAME:
            out.append((op.code_offset, op.op.name, None, None))
        else:
            out.append((op.code_offset, op.op.name, op.register_name,
                        op.size if op.size is not None else op.offset))
    return out


@pytest.fixture(scope="module")
def readobj_listings(sample, readobj, tmp_path_factory) -> dict[int, list[dict]]:
    """{opt: per run (in order), readobj's RuntimeFunctions of its object}; one readobj per level."""
    out = {}
    directory = tmp_path_factory.mktemp("objects")
    for opt in OPT_LEVELS:
        paths = []
        for run in sample.runs[opt]:
            path = directory / f"m{run.rid}_O{opt}.obj"
            path.write_bytes(run.codegen.obj)
            paths.append(path)
        files = parse_readobj_unwind(run_readobj(readobj, paths[0], "--unwind", *map(str, paths[1:])))
        out[opt] = [files[str(p)] for p in paths]
    return out


@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_unwind_records_are_llvms_in_clr_form_and_pdata_points_at_them(sample, readobj_listings, opt):
    compared = Counter()
    for run, listing in zip(sample.runs[opt], readobj_listings[opt]):
        w = where(run)
        image, coff = run.image, run.coff
        listed = {f.start: f for f in (listed_function(coff, raw) for raw in listing)}
        assert len(listed) == len(listing) == len(coff.runtime_functions()), f"{w}: readobj's .pdata"
        xdata = coff.section(".xdata").data if listing else b""
        records = run.unwind_records()
        assert len(records) == len(image.ranges), f"{w}: {len(records)} records, {len(image.ranges)} ranges"
        pdata = [struct.unpack_from("<III", image.pdata(), 12 * k) for k in range(len(image.pdata()) // 12)]
        assert len(image.pdata()) == 12 * len(records) == 12 * len(pdata), f"{w}: .pdata size"
        for rec, r, entry in zip(records, image.ranges, pdata):
            what = f"{w}: range [{r.begin:#x}, {r.end:#x}) of funclet {r.funclet} ({r.function})"
            kind = UnwindKind.ROOT if r.funclet == 0 else \
                UnwindKind.FILTER if r.kind is FuncletKind.FILTER else UnwindKind.HANDLER
            assert rec.kind is kind and (rec.kind is UnwindKind.ROOT) == (r is image.ranges[0]), what
            assert (rec.funclet, rec.start, rec.end) == (r.funclet, r.begin, r.end), what
            fn = run.recovered.function(r.function)
            theirs = listed.get(fn.start)
            if fn.unwind is None:       # a frameless leaf LLVM gave no .pdata entry
                assert theirs is None, f"{what}: readobj lists unwind data recovery missed"
                assert rec.synthesized and rec.info == UnwindInfo(), what
                compared["synthesized"] += 1
            else:
                llvm = fn.unwind
                # What LLVM wrote, read again from .xdata and as llvm-readobj reads it.
                assert decode_unwind_info(xdata, fn.unwind_offset) == llvm, what
                assert theirs is not None, f"{what}: readobj lists no RuntimeFunction at .text+{fn.start:#x}"
                assert (theirs.end, theirs.unwind) == (fn.end, fn.unwind_offset), what
                assert theirs.flags == int(llvm.flags) and theirs.prolog_size == llvm.prolog_size, what
                assert theirs.frame_register == llvm.frame_register_name, what
                assert theirs.frame_offset == (llvm.frame_offset if llvm.frame_register else 0), what
                assert theirs.codes == unwind_meaning(llvm), f"{what}: {theirs.codes} vs {unwind_meaning(llvm)}"
                # LLVM names the personality where it set the handler flags (the parent, and
                # funclets with EH of their own); an outlined filter is a plain function.
                assert (theirs.handler is not None) == bool(llvm.flags & HANDLER_FLAGS), what
                if theirs.handler is not None:
                    assert theirs.handler.startswith("ProcessCLRException"), f"{what}: {theirs.handler}"
                    compared["personality"] += 1
                assert rec.kind is not UnwindKind.FILTER or theirs.handler is None, what
                # The CLR-form record differs from LLVM's only in the handler flags and fields.
                info = rec.info
                assert not rec.synthesized, what
                assert (info.version, info.prolog_size, info.frame_register, info.frame_offset, info.codes,
                        info.padding_slot, info.chained) == \
                    (llvm.version, llvm.prolog_size, llvm.frame_register, llvm.frame_offset, llvm.codes,
                     llvm.padding_slot, llvm.chained), what
                assert info.flags == llvm.flags & ~HANDLER_FLAGS, what
                assert info.handler_rva is None and info.handler_data == b"", what
                compared["readobj"] += 1
            # .pdata: this range, pointing at the encoded record, which decodes back.
            begin, end, at = entry
            assert (begin, end) == (r.begin, r.end), f"{what}: .pdata entry {entry}"
            assert image.unwind_data[at:at + len(rec.data)] == rec.data, f"{what}: unwind data at {at:#x}"
            assert decode_unwind_info(image.unwind_data, at) == rec.info == r.unwind, what
            compared[rec.kind.value] += 1
    assert compared["readobj"] > 0 and compared["ROOT"] == len(sample.runs[opt]), dict(compared)
    assert compared["FILTER"] > 0 and compared["HANDLER"] > compared["ROOT"], dict(compared)


# -- 6. the LLVM differential -------------------------------------------------------------------

@pytest.mark.parametrize("opt", OPT_LEVELS)
def test_llvm_differential_is_clean_or_explained(sample, opt):
    kinds = Counter()
    for run in sample.runs[opt]:
        w, d = where(run), run.differential
        assert d is not None, f"{w}: no differential"
        assert not d.unexplained, f"{w}:\n{d}"
        if il_filter_clauses(run):
            assert {x.reason for x in d.differences} == {"filter-as-catch"}, f"{w}:\n{d}"
        else:
            assert d.clean, f"{w}:\n{d}"
        kinds[d.classification] += 1
    assert kinds["clean"] > 0 and kinds["explained"] > 0 and set(kinds) == {"clean", "explained"}, dict(kinds)


# -- 7. determinism -----------------------------------------------------------------------------

def test_a_second_pipeline_on_a_fresh_pool_gives_the_same_bytes(sample):
    with CodegenPool(2) as pool:
        again = {opt: Pipeline(sample.asm, pool, opt=opt).run_many(sample.rids) for opt in OPT_LEVELS}
    for opt in OPT_LEVELS:
        for first, second in zip(sample.runs[opt], again[opt], strict=True):
            w = where(first)
            assert second.error is None, f"{w}: the second run failed: {second.error}"
            assert second.image.code == first.image.code, f"{w}: image.code differs"
            assert second.clause_bytes == first.clause_bytes, f"{w}: clause_bytes differ"
            assert second.image.unwind_data == first.image.unwind_data, f"{w}: unwind_data differs"
            assert second.image.pdata() == first.image.pdata(), f"{w}: .pdata differs"
            assert second.image.read_only_data == first.image.read_only_data, f"{w}: read-only data differs"
