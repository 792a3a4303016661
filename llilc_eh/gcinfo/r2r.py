"""RyuJIT's GC info in ReadyToRun images: where it is, and what must hold of it.

The runtime finds a method's GC info right after the UNWIND_INFO of its main runtime
function (ReadyToRunJitManager::GetGCInfoToken, codeman.cpp v3.1.23): at
ALIGN_UP(4 + 2 * CountOfUnwindCodes + 4, 4) from the UNWIND_INFO — the header, the code
slots, and the personality routine RVA that is always present in R2R. Its version is 2 from
ReadyToRun major version 2 on (GCInfoToken::ReadyToRunVersionToGcInfoVersion). Funclets have
no GC info of their own: the main one covers the whole method. Bodies with identical unwind
data and GC info share one blob.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..assembly.r2r import R2RMethod, ReadyToRunImage
from ..errors import LlilcEhError
from .codec import GcInfo, decode_sized, encode
from .errors import GcInfoError
from .structs import RBP

_UNWIND_HEADER = 4
_UNWIND_CODE = 2
_PERSONALITY_RVA = 4


def gc_info_bytes(image: ReadyToRunImage, method: R2RMethod) -> memoryview:
    """The image from the method's GC info to the end of its section (no length is stored)."""
    unwind = image.unwind_bytes(method.main.unwind_rva)
    if len(unwind) < _UNWIND_HEADER:
        raise GcInfoError(f"UNWIND_INFO at RVA 0x{method.main.unwind_rva:X} is truncated", kind="bad-unwind-rva")
    size = _UNWIND_HEADER + _UNWIND_CODE * unwind[2] + _PERSONALITY_RVA
    return unwind[(size + 3) & ~3:]


def round_trip(data: bytes | memoryview, info: GcInfo | None = None,
               size: int | None = None) -> tuple[bool, bytes | None]:
    """Does `encode(decode(data))` give back the GC info at the start of `data` byte for byte?
    (The encoder may write trailing zero bits the decoder never reads — an untracked-only
    table still gets its live-state flag — so the re-encoding must cover at least what the
    decoder read and equal the data over its own length.) Returns (same, re-encoding)."""
    if info is None or size is None:
        info, size = decode_sized(data)
    try:
        again = encode(info)
    except GcInfoError:
        return False, None
    return len(again) >= size and bytes(data[:len(again)]) == again, again


def gc_info_version(image: ReadyToRunImage) -> int:
    return 1 if image.header.major_version == 1 else 2


def violations(info: GcInfo, method: R2RMethod) -> list[str]:
    """What must hold of RyuJIT's GC info for `method` (empty: all holds)."""
    found = []
    code = method.native.code_size
    if info.code_length != code:
        found.append(f"code length {info.code_length} != {code} (main + funclets)")
    if any(not 0 <= p < info.code_length for p in info.safe_points):
        found.append("a safe point outside the code")
    if list(info.safe_points) != sorted(set(info.safe_points)):
        found.append("safe points not strictly ascending")
    if (info.psp_sym_offset is not None) != bool(method.funclets):
        found.append(f"PSPSym {'present' if info.psp_sym_offset is not None else 'absent'} with "
                     f"{len(method.funclets)} funclet(s)")
    if info.stack_base_register not in (None, RBP):
        found.append(f"stack base register {info.stack_base_register} is not RBP")
    if any(stop > info.code_length for _, stop in info.interruptible_ranges):
        found.append("an interruptible range past the code")
    return found


@dataclass
class Survey:
    """Counts over the GC infos of one or more images."""

    bodies: int = 0
    funclet_bodies: int = 0           # bodies with funclets (all of them, shared blobs or not)
    decoded: int = 0
    distinct: int = 0                 # distinct GC info blobs (bodies may share one)
    round_tripped: int = 0
    not_round_tripped: int = 0
    decode_errors: int = 0
    violations: int = 0
    slim: int = 0
    fat: int = 0
    with_funclets: int = 0
    report_only_leaf_with_funclets: int = 0
    with_tracked: int = 0
    with_safe_points: int = 0
    with_ranges: int = 0
    with_both: int = 0                # safe points and interruptible ranges (RyuJIT: never)
    features: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def add(self, other: "Survey") -> None:
        for name in self.__dataclass_fields__:
            value = getattr(other, name)
            if isinstance(value, int):
                setattr(self, name, getattr(self, name) + value)
        self.features.update(other.features)
        self.examples.extend(other.examples[: max(0, 20 - len(self.examples))])

    def __str__(self) -> str:
        feats = ", ".join(f"{k} {n}" for k, n in sorted(self.features.items()))
        return (f"{self.bodies} bodies ({self.funclet_bodies} with funclets), {self.decoded} GC infos decoded ({self.distinct} distinct blobs, "
                f"{self.decode_errors} errors); round trip: {self.round_tripped} identical, "
                f"{self.not_round_tripped} different; {self.violations} invariant violation(s); "
                f"slim {self.slim}, fat {self.fat}; {self.with_funclets} with funclets "
                f"({self.report_only_leaf_with_funclets} WantsReportOnlyLeaf); tracked slots "
                f"{self.with_tracked}, safe points {self.with_safe_points}, interruptible ranges "
                f"{self.with_ranges}, both {self.with_both}; features: {feats}")


def survey_image(path: str | Path, limit: int | None = None) -> Survey:
    """Decode, check and re-encode the GC info of every body of one R2R image."""
    image = ReadyToRunImage.open(path)
    if gc_info_version(image) != 2:
        raise GcInfoError(f"{Path(path).name}: ReadyToRun {image.header.version} carries GC info version 1, "
                          f"not read here", kind="unsupported-gcinfo-version")
    out = Survey()
    seen: set[int] = set()
    for n, method in enumerate(image.methods()):
        if limit is not None and n >= limit:
            break
        out.bodies += 1
        out.funclet_bodies += bool(method.funclets)
        try:
            data = gc_info_bytes(image, method)
            info, size = decode_sized(data)
        except LlilcEhError as e:
            out.decode_errors += 1
            out.examples.append(f"0x{method.rva:X}: {e}")
            continue
        out.decoded += 1
        bad = violations(info, method)
        if bad:
            out.violations += 1
            out.examples.append(f"0x{method.rva:X}: {'; '.join(bad)}")
        rva = method.main.unwind_rva
        if rva in seen:
            continue
        seen.add(rva)
        out.distinct += 1
        _tally(out, info, method)
        same, again = round_trip(data, info, size)
        if same:
            out.round_tripped += 1
        else:
            out.not_round_tripped += 1
            out.examples.append(f"0x{method.rva:X}: re-encoded {again.hex() if again else None} "
                                f"vs {bytes(data[:max(size, 1)]).hex()}")
    return out


def _tally(out: Survey, info: GcInfo, method: R2RMethod) -> None:
    out.slim += info.slim
    out.fat += not info.slim
    if method.funclets:
        out.with_funclets += 1
        out.report_only_leaf_with_funclets += info.wants_report_only_leaf
    out.with_tracked += info.num_tracked > 0
    out.with_safe_points += bool(info.safe_points)
    out.with_ranges += bool(info.interruptible_ranges)
    out.with_both += bool(info.safe_points) and bool(info.interruptible_ranges)
    for name, on in (("vararg", info.is_vararg), ("gs-cookie", info.gs_cookie_offset is not None),
                     ("security-object", info.security_object_offset is not None),
                     ("psp-sym", info.psp_sym_offset is not None),
                     ("generics-context", info.generics_inst_context is not None),
                     ("stack-base-register", info.stack_base_register is not None),
                     ("report-only-leaf", info.wants_report_only_leaf),
                     ("enc", info.edit_and_continue_preserved_area is not None),
                     ("reverse-pinvoke", info.reverse_pinvoke_frame_slot is not None),
                     ("stack-area", info.size_of_stack_area != 0),
                     ("untracked", info.num_untracked > 0),
                     ("shared-live-sets", bool(info.live_sets) and len(info.live_sets) < len(info.safe_points)),
                     ("struct-return", info.return_kind > 3)):
        if on:
            out.features[name] += 1
