"""Control-flow rules of ECMA-335 around EH regions (I.12.4.2.5 – I.12.4.2.8, III.3).

Every edge of the method's flow graph is checked against the region tree:

* an ordinary edge (branch, conditional branch, switch, fall-through) stays in its region,
  except that it may *enter* one or more tries at their first instruction — the CLR allows
  it and Mono's mcs emits such branches;
* `leave` may exit tries and catch / filter handlers (never a finally, fault or filter part)
  and may likewise enter tries at their first instruction;
* `endfinally` only inside a finally or fault, `endfilter` only as the last instruction of a
  filter part, `rethrow` only inside a catch or filter handler, `ret` and `jmp` outside every
  region. (Falling off the end of the body is refused earlier, by the block builder.)

These rules are written as one edge walk so that each violation names the instruction
(its IL offset) and the regions involved.
"""

from __future__ import annotations

from ..errors import ILError
from .opcodes import Flow
from .regions import Region, RegionKind, RegionTree


def check_control_flow(tree: RegionTree, instructions, *, method: str | None = None) -> list[ILError]:
    """All violations of the EH control-flow rules, in instruction order."""
    errors: list[ILError] = []
    code_size = tree.root.end

    def err(reason: str, offset: int, kind: str) -> None:
        errors.append(ILError(reason, method=method, offset=offset, kind=kind))

    offsets = [ins.offset for ins in instructions]
    located = tree.innermost_each(offsets)
    last = len(instructions) - 1
    for k, ins in enumerate(instructions):
        op = ins.op
        if op.is_prefix:
            continue
        flow = op.flow
        src = located[k]
        if op.has_targets:
            if flow is Flow.LEAVE:
                _check_leave(tree, ins, src, err)
            else:
                for target in ins.targets:
                    _check_edge(tree, ins.offset, src, target, "branch", err)
        # A fall-through edge off the end is build_blocks' to refuse. One to the next
        # instruction (at `end`) in the same region, as most are, needs no check, nor a
        # search for the region of its target.
        end = ins.end
        if flow.falls_through and end < code_size and (
                k == last or offsets[k + 1] != end or located[k + 1] is not src):
            _check_edge(tree, ins.offset, src, end, "fall-through", err)
        if flow in _ALLOWED_IN_SOME_REGIONS:
            _check_placement(tree, ins, flow, src, err)
    return errors


# The flows of instructions only some regions may hold. A set membership: most instructions
# are none of them, and each `Flow.X` test costs a slow class-attribute lookup in Python 3.11
# (see il.decoder._OPERAND_TEXT).
_ALLOWED_IN_SOME_REGIONS = frozenset({Flow.ENDFINALLY, Flow.ENDFILTER, Flow.RETHROW, Flow.RETURN, Flow.JMP})


def _check_placement(tree: RegionTree, ins, flow: Flow, src: Region, err) -> None:
    """endfinally, endfilter, rethrow, ret and jmp: in the regions that allow them."""
    if flow is Flow.ENDFINALLY:
        h = tree.enclosing_handler(src)
        if h is None or not h.kind.is_cleanup:
            err(f"endfinally outside a finally or fault handler (in {_where(h, tree)})",
                ins.offset, "endfinally-outside-finally")
    elif flow is Flow.ENDFILTER:
        if src.kind is not RegionKind.FILTER:
            err(f"endfilter outside a filter (in {src.label})", ins.offset, "endfilter-outside-filter")
        elif ins.end != src.end:
            err(f"endfilter is not the last instruction of {src.label}", ins.offset,
                "endfilter-not-last")
    elif flow is Flow.RETHROW:
        h = tree.enclosing_handler(src)
        if h is None or not h.kind.is_catchlike:
            err(f"rethrow outside a catch handler (in {_where(h, tree)})", ins.offset,
                "rethrow-outside-catch")
    elif src.kind is not RegionKind.ROOT:   # ret, jmp
        name = ins.op.name
        err(f"{name} inside {src.label}: a protected region or handler is left only by leave, "
            f"throw or its end instruction", ins.offset, f"{name}-inside-region")


def _where(region: Region | None, tree: RegionTree) -> str:
    return region.label if region is not None else "the method body"


def _entered_tries_ok(tree: RegionTree, common: list[Region], dst_path: list[Region], target: int) -> bool:
    """The regions the edge enters are tries that all start exactly at the target."""
    return all(r.kind is RegionKind.TRY and r.start == target for r in dst_path[len(common):])


def _split(tree: RegionTree, src: Region, dst: Region):
    src_path, dst_path = tree.path(src), tree.path(dst)
    n = 0
    while n < min(len(src_path), len(dst_path)) and src_path[n] is dst_path[n]:
        n += 1
    return src_path, dst_path, src_path[:n]


def _check_edge(tree: RegionTree, offset: int, src: Region, target: int, what: str, err) -> None:
    if not 0 <= target < tree.root.end:
        return  # the decoder reports targets outside the body
    dst = tree.innermost(target)
    if dst is src:
        return
    src_path, dst_path, common = _split(tree, src, dst)
    if len(common) < len(src_path):
        exited = src_path[len(common)]
        err(f"{what} to IL_{target:04x} leaves {exited.label} (only leave, throw or the region's end "
            f"instruction may)", offset, f"{what}-out-of-region")
    elif not _entered_tries_ok(tree, common, dst_path, target):
        entered = dst_path[len(common)]
        err(f"{what} to IL_{target:04x} enters {entered.label} other than at a try's first instruction",
            offset, f"{what}-into-region")


def _check_leave(tree: RegionTree, ins, src: Region, err) -> None:
    target = ins.targets[0]
    if not 0 <= target < tree.root.end:
        return
    dst = tree.innermost(target)
    src_path, dst_path, common = _split(tree, src, dst)
    for r in reversed(src_path[len(common):]):
        if not r.kind.leave_may_exit:
            err(f"leave to IL_{target:04x} exits {r.label}: a {r.kind.value} is left only by its end "
                f"instruction", ins.offset, "leave-out-of-handler")
            return
    if not _entered_tries_ok(tree, common, dst_path, target):
        entered = dst_path[len(common)]
        err(f"leave to IL_{target:04x} enters {entered.label} other than at a try's first instruction",
            ins.offset, "leave-into-region")
