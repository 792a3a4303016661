"""unwind stage: x64 UNWIND_INFO per code range (main body, each handler, each filter).

LLVM writes one UNWIND_INFO per function and per funclet into `.xdata`; this stage reads it
(`decode_unwind_info`), keeps every bit of it as a printable value (`UnwindInfo`, whose text
follows `llvm-readobj --unwind`), writes it back byte for byte (`encode_unwind_info`) and
turns it into the form a CLR JIT hands the runtime (`to_clr`: no language handler; the
runtime appends its own personality routine). The binary layouts are declared once, with
construct, in `structs.py`; meaning and the codec live in `codec.py`.

The same decoder reads the UNWIND_INFOs of ReadyToRun images (RyuJIT's, with the runtime's
personality RVA after each), so ours and RyuJIT's can be compared.
"""

from .codec import (GPR_NAMES, HANDLER_FLAGS, XMM_NAMES, RuntimeFunction, UnwindError, UnwindFlags,
                    UnwindInfo, UnwindOp, UnwindOpKind, decode_unwind_info, encode_unwind_info, to_clr)

__all__ = [
    "GPR_NAMES", "HANDLER_FLAGS", "XMM_NAMES", "RuntimeFunction", "UnwindError", "UnwindFlags",
    "UnwindInfo", "UnwindOp", "UnwindOpKind", "decode_unwind_info", "encode_unwind_info", "to_clr",
]
