"""The il stage's output for one method: instructions, basic blocks, region tree, findings.

`analyze` is the stage's driver, a short list of named steps as in WinEHPrepare:
decode → build the region tree (structural rules) → basic blocks split at region
boundaries → control-flow rules. A method whose IL cannot be decoded raises; a method
whose EH structure breaks ECMA-335 rules comes back with its `errors` listed (every one of
them, each naming its IL offset), so a listing can still show what is there.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..assembly.body import MethodBody
from ..errors import ILError
from .blocks import BasicBlock, build_blocks
from .checks import check_control_flow
from .decoder import Instruction, decode
from .regions import RegionTree, build_region_tree


@dataclass(frozen=True)
class ILMethod:
    body: MethodBody
    instructions: tuple[Instruction, ...]
    blocks: tuple[BasicBlock, ...]
    regions: RegionTree
    errors: tuple[ILError, ...]

    @property
    def name(self) -> str:
        return f"0x{self.body.token:08X} {self.body.name}"

    @property
    def ok(self) -> bool:
        return not self.errors

    def raise_first(self) -> "ILMethod":
        if self.errors:
            raise self.errors[0]
        return self


def region_boundaries(body: MethodBody) -> set[int]:
    """Every offset where a region starts or ends: the extra leaders of the block builder."""
    edges: set[int] = set()
    for c in body.clauses:
        edges.update((c.try_start, c.try_end, c.handler_start, c.handler_end))
        if c.filter_start is not None:
            edges.add(c.filter_start)
    return edges


def analyze(body: MethodBody) -> ILMethod:
    method = f"0x{body.token:08X} {body.name}"
    instructions = decode(body.code, method=method)
    offsets = tuple(i.offset for i in instructions)
    last_before = {i.end: i.op.name for i in instructions}
    tree = build_region_tree(body.clauses, body.code_size, offsets, method=method,
                             last_instruction_names=last_before)
    errors = list(tree.errors)
    if errors:
        # Blocks and flow checks need a sound tree; the structural errors say what to fix first.
        blocks = build_blocks(instructions, method=method)
    else:
        boundaries = {e for e in region_boundaries(body) if e < body.code_size}
        blocks = build_blocks(instructions, extra_leaders=boundaries, method=method)
        errors.extend(check_control_flow(tree, instructions, method=method))
    return ILMethod(body, instructions, blocks, tree, tuple(errors))
