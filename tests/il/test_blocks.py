"""build_blocks(): leaders and successors on hand-made bodies, a partition property, CoreLib."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings, strategies as st

from il_strategies import bodies
from ilbytes import assemble, encode
from llilc_eh.errors import ILError
from llilc_eh.il.blocks import BasicBlock, block_at, build_blocks
from llilc_eh.il.decoder import Instruction, decode
from llilc_eh.il.opcodes import Flow
from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.loader import Assembly


def blocks_of(source: str, **kw) -> tuple[BasicBlock, ...]:
    return build_blocks(decode(assemble(source)), **kw)


def shape(blocks):
    """(start, end, successors, terminator) per block: what the tests compare."""
    return [(b.start, b.end, b.successors, b.terminator.value) for b in blocks]


def test_straight_line_is_one_block():
    (b,) = blocks_of("ldarg.0\ncall 0x0A000001\nret")
    assert (b.index, b.start, b.end, b.first_instr, b.last_instr) == (0, 0, 7, 0, 2)
    assert b.successors == () and b.terminator is Flow.RETURN


def test_if_else():
    blocks = blocks_of("""
            ldarg.0             // 0
            brfalse.s ELSE      // 1
            ldc.i4.1            // 3
            stloc.0             // 4
            br.s JOIN           // 5
    ELSE:   ldc.i4.2            // 7
            stloc.0             // 8
    JOIN:   ldloc.0             // 9
            ret                 // a
    """)
    assert shape(blocks) == [
        (0, 3, (7, 3), "cond_branch"),     # taken target first, then the fall-through
        (3, 7, (9,), "branch"),
        (7, 9, (9,), "next"),              # cut by the JOIN leader: falls into it
        (9, 11, (), "return"),
    ]
    assert [(b.first_instr, b.last_instr) for b in blocks] == [(0, 1), (2, 4), (5, 6), (7, 8)]


def test_loop_back_edge():
    blocks = blocks_of("""
            ldc.i4.0
            stloc.0
    HEAD:   ldloc.0
            ldc.i4.s 10
            bge.s EXIT
            ldloc.0
            ldc.i4.1
            add
            stloc.0
            br.s HEAD
    EXIT:   ret
    """)
    assert shape(blocks) == [(0, 2, (2,), "next"), (2, 7, (13, 7), "cond_branch"),
                             (7, 13, (2,), "branch"), (13, 14, (), "return")]


def test_switch_cases_then_default_each_once():
    blocks = blocks_of("""
            ldarg.0
            switch A B A        // 1: 1 + 4 + 12 = 17 bytes
            br.s C              // 18: default
    A:      ldc.i4.1            // 20
            ret
    B:      ldc.i4.2            // 22
            ret
    C:      ldc.i4.3            // 24
            ret
    """)
    assert shape(blocks) == [(0, 18, (20, 22, 18), "switch"), (18, 20, (24,), "branch"),
                             (20, 22, (), "return"), (22, 24, (), "return"), (24, 26, (), "return")]


def test_cond_branch_to_next_instruction_has_one_successor():
    blocks = blocks_of("ldarg.0\nbrtrue.s N\nN: ret")
    assert shape(blocks) == [(0, 3, (3,), "cond_branch"), (3, 4, (), "return")]


def test_try_finally_with_region_leaders():
    # .try { call; leave.s OUT } finally { call; endfinally }  OUT: ret
    source = """
    TRY:    call 0x0A000001     // 0
            leave.s OUT         // 5
    FIN:    call 0x0A000002     // 7
            endfinally          // 12
    OUT:    ret                 // 13
    """
    try_start, try_end, handler_start, handler_end = 0, 7, 7, 13
    blocks = blocks_of(source, extra_leaders=[try_start, try_end, handler_start, handler_end])
    assert shape(blocks) == [(0, 7, (13,), "leave"), (7, 13, (), "endfinally"), (13, 14, (), "return")]


def test_region_boundary_splits_straight_line_code():
    # try [0, 2) catch [2, 5): the try ends without a terminator of its own in this toy
    blocks = blocks_of("nop\nnop\npop\nleave.s E\nE: ret", extra_leaders=[0, 2, 2, 5])
    assert shape(blocks) == [(0, 2, (2,), "next"), (2, 5, (5,), "leave"), (5, 6, (), "return")]


def test_filter_throw_rethrow_endfilter_jmp_have_no_successors():
    blocks = blocks_of("""
            ldarg.0
            brtrue.s T
            jmp 0x06000001
    T:      ldarg.1
            brtrue.s R
            ldnull
            throw
    R:      rethrow
    F:      pop
            ldc.i4.1
            endfilter
    """, extra_leaders=[13])
    assert [(b.start, b.successors, b.terminator.value) for b in blocks] == [
        (0, (8, 3), "cond_branch"), (3, (), "jmp"), (8, (13, 11), "cond_branch"),
        (11, (), "throw"), (13, (), "rethrow"), (15, (), "endfilter")]


def test_extra_leader_at_body_end_is_ignored():
    il = assemble("nop\nret")
    assert len(build_blocks(decode(il), extra_leaders=[0, len(il)])) == 1


@pytest.mark.parametrize("leader", [2, 5, -1, 8, 100])
def test_region_boundary_not_instruction(leader):
    instrs = decode(assemble("nop\nldc.i4 7\nret"))     # instructions at 0, 1, 6
    with pytest.raises(ILError) as info:
        build_blocks(instrs, extra_leaders=[leader], method="M")
    assert (info.value.kind, info.value.offset, info.value.method) == (
        "region-boundary-not-instruction", leader, "M")


def test_prefix_group_is_never_split():
    source = """
            ldarg.0             // 0
            brtrue.s P          // 1
            nop                 // 3
    P:      unaligned. 1        // 4
            volatile.           // 7
            ldind.i4            // 9
            pop                 // 10
            ret                 // 11
    """
    blocks = blocks_of(source, extra_leaders=[4])
    assert shape(blocks) == [(0, 3, (4, 3), "cond_branch"), (3, 4, (4,), "next"), (4, 12, (), "return")]
    for inside in (7, 9):
        with pytest.raises(ILError) as info:
            blocks_of(source, extra_leaders=[inside])
        assert (info.value.kind, info.value.offset) == ("region-boundary-after-prefix", inside)


def test_branch_into_prefix_group_from_hand_made_instructions():
    # decode() rejects this already; build_blocks checks its own input too.
    instrs = list(decode(assemble("ldarg.0\nbrtrue.s P\nP: volatile.\nldsfld 0x04000001\nret")))
    branch = instrs[1]
    assert (branch.operand, instrs[3].offset) == (3, 5)
    instrs[1] = Instruction(branch.offset, branch.op, 5, branch.size)   # now aims at the ldsfld
    with pytest.raises(ILError) as info:
        build_blocks(instrs)
    assert (info.value.kind, info.value.offset) == ("branch-into-prefixed-instruction", 1)


def test_falls_off_end():
    with pytest.raises(ILError) as info:
        blocks_of("ldarg.0\nbrtrue.s E\nE: nop")
    assert (info.value.kind, info.value.offset) == ("falls-off-end", 3)
    with pytest.raises(ILError) as info:
        blocks_of("ldarg.0\ncall 0x0A000001")
    assert info.value.kind == "falls-off-end"


def test_empty_instruction_list():
    with pytest.raises(ILError) as info:
        build_blocks(())
    assert (info.value.kind, info.value.offset) == ("empty-body", 0)


def test_block_at():
    blocks = blocks_of("ldarg.0\nbrfalse.s E\nnop\nE: ret")   # [0,3) [3,4) [4,5)
    assert [block_at(blocks, o).start for o in range(5)] == [0, 0, 0, 3, 4]
    for outside in (-1, 5, 99):
        with pytest.raises(ValueError):
            block_at(blocks, outside)


def test_block_text():
    blocks = blocks_of("ldarg.0\nbrfalse.s E\nnop\nE: ret")
    assert str(blocks[0]) == "BB00 [IL_0000, IL_0003) cond_branch -> IL_0004, IL_0003"
    assert str(blocks[2]) == "BB02 [IL_0004, IL_0005) return -> -"


# -- the partition property ----------------------------------------------------------------

def assert_partition(instrs, blocks, leaders=()):
    """Blocks tile the body in order, start at leaders, and never end where flow continues oddly."""
    starts = [b.start for b in blocks]
    assert starts[0] == 0 and blocks[-1].end == instrs[-1].end
    assert all(a.end == b.start for a, b in zip(blocks, blocks[1:]))
    assert [b.index for b in blocks] == list(range(len(blocks)))
    assert blocks[0].first_instr == 0 and blocks[-1].last_instr == len(instrs) - 1
    assert all(a.last_instr + 1 == b.first_instr for a, b in zip(blocks, blocks[1:]))
    start_set = set(starts)
    for b in blocks:
        assert instrs[b.first_instr].offset == b.start and instrs[b.last_instr].end == b.end
        assert b.terminator is instrs[b.last_instr].op.flow
        assert set(b.successors) <= start_set
        assert not instrs[b.last_instr].op.is_prefix
        for k in range(b.first_instr, b.last_instr):       # no terminator inside a block
            assert not instrs[k].op.flow.ends_block
        for k in range(b.first_instr + 1, b.last_instr + 1):
            assert instrs[k].offset not in leaders
    for instr in instrs:
        assert set(instr.targets) <= start_set


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_blocks_partition_random_bodies(data):
    body = data.draw(bodies(terminated=True))
    instrs = decode(encode(body))
    groups = [k for k, i in enumerate(instrs) if k == 0 or not instrs[k - 1].op.is_prefix]
    extra = data.draw(st.lists(st.sampled_from([instrs[k].offset for k in groups]), max_size=6))
    blocks = build_blocks(instrs, extra_leaders=extra + [instrs[-1].end])
    leaders = set(extra) | {t for i in instrs for t in i.targets}
    assert_partition(instrs, blocks, leaders)


# -- the real corpus -----------------------------------------------------------------------

def test_every_corelib_body_decodes_and_partitions():
    start = time.perf_counter()
    asm = Assembly(Corpus().find("System.Private.CoreLib.dll").location)
    items = [(b.token, b.code) for b in map(asm.body, asm.methods_with_il())]
    read = time.perf_counter()
    count = 0
    for token, il in items:
        instrs = decode(il, method=f"0x{token:08X}")
        blocks = build_blocks(instrs, method=f"0x{token:08X}")
        assert blocks[0].start == 0 and blocks[-1].end == len(il)
        assert all(a.end == b.start for a, b in zip(blocks, blocks[1:]))
        starts = {b.start for b in blocks}
        assert all(s in starts for b in blocks for s in b.successors)
        count += len(instrs)
    done = time.perf_counter()
    print(f"\nCoreLib: {len(items)} bodies, {count} instructions; read {read - start:.2f} s, "
          f"decode+blocks {done - read:.2f} s ({count / (done - read):,.0f} instr/s)")
    assert len(items) == 19586 and count == 425247   # monodis lists the same 425,247
