"""The gcinfo stage's one error type."""

from __future__ import annotations

from ..errors import LlilcEhError


class GcInfoError(LlilcEhError):
    """GC info cannot be decoded (truncated, a number too long, counts the data cannot hold),
    or a GcInfo value cannot be encoded (an offset the normalisation would lose, ...)."""

    stage = "gcinfo"

    def offset_text(self) -> str:
        # Offsets are bit positions in the GC info, not IL offsets.
        return f"gcinfo bit {self.offset}"
