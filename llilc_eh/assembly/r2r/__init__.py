"""ReadyToRun images: RyuJIT's compiled bodies, their funclets and native EH clauses.

`ReadyToRunImage.open(assembly_or_path)` reads the R2R header; everything else is read on
first use. `.methods()` yields one `R2RMethod` per compiled body in RVA order. Layouts are
declared in `structs`, the Native Format primitives live in `native_format`.
"""

from .reader import (EntryPoint, FixupCell, Header, InstanceEntry, MethodSignatureHead, R2RMethod, R2RSummary,
                     ReadyToRunImage, RuntimeFunction, Section, read_method_signature)
from .structs import Machine, MethodSigFlags, ReadyToRunFlags, SectionType, TargetOS

__all__ = [
    "ReadyToRunImage", "R2RMethod", "R2RSummary", "RuntimeFunction", "EntryPoint", "FixupCell",
    "InstanceEntry", "MethodSignatureHead", "read_method_signature", "Header", "Section",
    "SectionType", "ReadyToRunFlags", "MethodSigFlags", "Machine", "TargetOS",
]
