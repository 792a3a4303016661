"""backend stage: LLVM module -> x64 object -> what the code is.

Modules, in pipeline order:

* `codegen` -- `compile_module(ir_text, opt, timeout=)` / `CodegenPool`: LLVM codegen for
  `x86_64-pc-windows-msvc` (small code model, `-trap-unreachable`) in long-lived worker
  processes, so that an LLVM assertion abort or a hang is one method's
  `BackendError(kind="llvm-abort" | "llvm-timeout")`, never the run's. Gives a
  `CodegenResult`: the COFF object bytes, LLVM's assembly text of the same code, timings.
* `coff` (layouts in `structs`) -- `CoffObject.parse(bytes)`: sections with data and
  relocations, symbols with auxiliary records, lookups, `.pdata` resolved through its
  relocations (`runtime_functions`).
* `recover` -- `recover(obj, asm)`: the parent's and every funclet's code range and
  UNWIND_INFO, every label of the assembly text at its code offset, every call site with
  its return address, invokes marked by their EH labels (`RecoveredCode`).
* `llvm_table` -- `decode_llvm_clr_table(obj, parent)`: LLVM's own CoreCLR EH table from
  `.xdata` as `NativeClause`s, raw (a differential oracle for our clause generator).
* `image` -- `link_final_image(recovered, coff, model, parent)`: the final image, main body
  then the funclets in the model's layout (each filter right before its handler), every
  moved reference re-encoded, filter frame constants resolved, jump tables and `.pdata`
  remapped, unwind data in the CLR's form (`FinalImage`, with `map()` and `verify()`).
  Its steps, one job per module: `match` (which object function is which model funclet:
  `match_funclets`), `relink` (lay out, copy, read-only data, cells, our stack probe, every
  moved reference and jump table fixed), `frame` (the filter frame constants read from the
  parent's prolog: `read_frame_constants`), `verify` (the final bytes checked against the
  object: `FinalImage.verify()`), all reading x86 through `x86` (capstone and its cheap
  shortcuts).

Errors are `llilc_eh.errors.BackendError` (stage "backend"); kinds: llvm-parse,
llvm-verify, llvm-error, llvm-abort, llvm-timeout, worker-start, bad-coff, asm-mismatch,
bad-llvm-table, no-function, no-label, funclet-match, relink, frame-constants.
"""

from .codegen import (
                      CodegenPool,
                      CodegenResult,
                      CodegenTimings,
                      compile_module,
                      default_pool,
                      object_symbol,
)
from .coff import (
                      CoffObject,
                      Relocation,
                      RelocationType,
                      RuntimeFunctionEntry,
                      Section,
                      SectionFlags,
                      StorageClass,
                      Symbol,
)
from .frame import FilterConstants, read_frame_constants
from .image import FinalImage, PlacedRange, link_final_image
from .match import FuncletMatch, match_funclets
from .relink import Fixup, ImageRelocation, Segment
from .verify import ImageFinding
from .llvm_table import LlvmClrTable, decode_llvm_clr_table
from .recover import CallSite, CodeFunction, Instruction, RecoveredCode, recover

__all__ = [
    "CallSite", "CodeFunction", "CodegenPool", "CodegenResult", "CodegenTimings", "CoffObject",
    "FilterConstants", "FinalImage", "Fixup", "FuncletMatch", "ImageFinding", "ImageRelocation",
    "Instruction", "LlvmClrTable", "PlacedRange", "RecoveredCode", "Relocation", "RelocationType",
    "RuntimeFunctionEntry", "Section", "SectionFlags", "Segment", "StorageClass", "Symbol",
    "compile_module", "decode_llvm_clr_table", "default_pool", "link_final_image", "match_funclets",
    "object_symbol", "read_frame_constants", "recover",
]
