"""gcinfo stage: GCINFO v2 (AMD64) — the GC info a CLR JIT hands the runtime with each method.

`decode` reads GC info the way CoreCLR 3.1's GcInfoDecoder does, `encode` writes it the way
RyuJIT's GcInfoEncoder does (byte-identical on RyuJIT's own output, checked over CoreLib's
ReadyToRun image), `GcInfo` is the printable value between them, and `for_method` is what
llilc-eh emits for a method of its own: code length of the whole method, PSPSym,
WantsReportOnlyLeaf, stack base register, no slots. The bit layout is declared once in
`structs.py`; `r2r.py` finds RyuJIT's GC info in ReadyToRun images for the oracle tests.
"""

from .codec import Chunk, GcInfo, GcSlot, decode, decode_sized, encode, for_method, method_info
from .errors import GcInfoError
from .structs import GcInfoHeaderFlags, GcSlotFlags, GcStackSlotBase, GenericsInstContextKind, ReturnKind

__all__ = ["Chunk", "GcInfo", "GcInfoError", "GcInfoHeaderFlags", "GcSlot", "GcSlotFlags", "GcStackSlotBase",
           "GenericsInstContextKind", "ReturnKind", "decode", "decode_sized", "encode", "for_method",
           "method_info"]
