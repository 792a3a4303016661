"""RyuJIT's ground truth, judged: every ReadyToRun body with EH, checked three ways.

For one compiled body of a ReadyToRun image:
* the native clause table against the CLR clause validator (RyuJIT's tables run in
  production, so every finding is a false positive of ours or a corrupted image);
* the native clauses against the IL clauses of the method (what RyuJIT kept, turned into
  faults, removed, duplicated, cloned: `check.compare`);
* the UNWIND_INFO of its main body and of every funclet decoded, and re-encoded
  byte-identically.
The result is a plain value the CLI prints and the batch driver counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..assembly.body import ILClause
from ..assembly.loader import Assembly
from ..assembly.r2r.reader import R2RMethod, ReadyToRunImage
from ..clauses.validate import Finding, validate
from ..unwind import UnwindInfo, decode_unwind_info, encode_unwind_info
from .compare import Comparison, compare


@dataclass(frozen=True)
class R2RMethodCheck:
    method: R2RMethod
    il_clauses: tuple[ILClause, ...] | None   # None for stubs (no IL body)
    findings: tuple[Finding, ...]
    comparison: Comparison | None
    unwind: tuple[UnwindInfo, ...]            # main body first, then each funclet
    unwind_mismatches: tuple[int, ...]        # unwind RVAs undecodable or re-encoding differently


def decode_unwind(image: ReadyToRunImage, rva: int) -> tuple[UnwindInfo, bool]:
    """The UNWIND_INFO at `rva` and whether it re-encodes to the same bytes."""
    data = image.unwind_bytes(rva)
    info = decode_unwind_info(data)
    return info, encode_unwind_info(info) == bytes(data[:info.size])


def check_method(asm: Assembly, image: ReadyToRunImage, m: R2RMethod, profile: str = "coreclr-psp",
                 unwind_cache: dict[int, tuple[UnwindInfo, bool] | None] | None = None) -> R2RMethodCheck:
    cache = {} if unwind_cache is None else unwind_cache
    infos, bad = [], []
    for rva in m.unwind_rvas:
        if rva not in cache:
            cache[rva] = decode_unwind(image, rva)
        if cache[rva] is None:  # could not be decoded: the batch driver recorded why
            bad.append(rva)
            continue
        info, same = cache[rva]
        infos.append(info)
        if not same:
            bad.append(rva)
    il_clauses = None
    comparison = None
    if m.has_il and m.tokens:
        rid = m.tokens[0] & 0xFFFFFF
        il_clauses = asm.body(rid).clauses
        comparison = compare(il_clauses, m.native, synchronized=asm.is_synchronized(rid))
    return R2RMethodCheck(m, il_clauses, tuple(validate(m.native, profile)), comparison,
                          tuple(infos), tuple(bad))
