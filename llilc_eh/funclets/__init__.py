"""The funclets stage: the reader's module → the funclet model of one method.

    build_funclet_model(module_text, parent, il_method=None, table=None) -> FuncletModel

(`table`: the reader's side table, `ReaderResult.table`, where each pad's IL clause and each
call's IL offset come from.) The model (frozen dataclasses, printable) holds the funclets — the root (main body), one per
catchpad / cleanuppad (every copy of a handler), one FILTER per filter handler — with their
blocks (the funclet coloring, read exactly as the funclet lint reads it), the funclet tree,
each catchswitch's handler order, the CLR EH states (one per handler, numbered in layout
order; per state its next handler, enclosing try and handler parent), every call site of the
parent with its IL offset and, for invokes, its state, and the layout order of the final
image (root, then clause order, each filter right before its handler). `verify()` returns
every inconsistency as a finding; given the IL method it also holds the model against the IL
region tree. `model.py` documents each step and the state numbering.
"""

from .model import (
                    NO_STATE,
                    RULES,
                    CallSite,
                    Catchswitch,
                    EHState,
                    Finding,
                    Funclet,
                    FuncletError,
                    FuncletKind,
                    FuncletModel,
                    build_funclet_model,
)

__all__ = ["NO_STATE", "RULES", "CallSite", "Catchswitch", "EHState", "Finding", "Funclet", "FuncletError",
           "FuncletKind", "FuncletModel", "build_funclet_model"]
