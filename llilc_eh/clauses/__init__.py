"""clauses stage: CORINFO_EH_CLAUSE tables — made from the funclet model, judged whoever made them.

The stage turns the funclet model and the final code offsets into the table a CLR JIT
hands the runtime (one `NativeClause` per CORINFO_EH_CLAUSE, end offsets in the two
"length" fields; primaries inner-before-outer then lower-before-higher, duplicates after
them: design decision 10), and it judges any such table — ours, LLVM's own CoreCLR table,
RyuJIT's from a ReadyToRun image — with one validator (`validate.py`, decision 12).

    generate_clauses(model, placed, profile="coreclr-psp") -> NativeMethod   (generate.py)
    encode_clauses(native) -> bytes;  decode_clauses(bytes) -> clauses
    validate(method: NativeMethod, profile="coreclr-psp") -> list[Finding]   (validate.py)
    compare_with_llvm(ours, llvm_clauses, return_addresses) -> Differential (differential.py)

`placed` (`PlacedCode`) is the method in one code layout: main body, each model funclet's
range, every machine call with its call-site identity; `placed_from_image` reads it from
the final image, `placed_from_recovered` from LLVM's own layout (for the LLVM differential). Profiles: `coreclr-psp` (default: CoreCLR x64 .NET Core 3.1 –
.NET 9, PSPSym, duplicate clauses), `coreclr-net10` (no PSPSym; duplicates and SAMETRY),
`nativeaot` (SAMETRY, no duplicate clauses). The rules, their sources and the legal
patterns a naive checker would reject (cloned-finally clauses, identical try ranges of
distinct tries, split tries) are documented in `validate.py`; how a try range follows from
the calls, in `generate.py`; LLVM's quirks, in `differential.py`.
"""

import importlib
from typing import TYPE_CHECKING

# `validate` is imported now: its name is also a submodule's, and the package attribute must
# stay the function whatever is imported later. The rest is imported on first use (PEP 562):
# `differential` and `generate` reach the backend (LLVM, capstone), which the command line's
# parser, needing only the profiles, must not load (`llilc-eh --help`).
from .validate import (
                       CONVENTION,
                       DEFAULT_PROFILE,
                       ERROR,
                       RULE_NAMES,
                       RULES,
                       ClauseTable,
                       Finding,
                       Profile,
                       Rule,
                       error_findings,
                       validate,
)

_LAZY = {
    "Difference": "differential", "Differential": "differential", "compare_with_llvm": "differential",
    "llvm_differential": "differential",
    **dict.fromkeys(("CallSiteMatch", "PlacedCall", "PlacedCode", "decode_clauses", "encode_clauses",
                     "funclet_code", "generate_clauses", "match_call_sites", "placed_from_image",
                     "placed_from_recovered"), "generate"),
}

if TYPE_CHECKING:
    from .differential import Difference, Differential, compare_with_llvm, llvm_differential
    from .generate import (
                           CallSiteMatch,
                           PlacedCall,
                           PlacedCode,
                           decode_clauses,
                           encode_clauses,
                           funclet_code,
                           generate_clauses,
                           match_call_sites,
                           placed_from_image,
                           placed_from_recovered,
    )


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

__all__ = [
                       "CONVENTION",
                       "DEFAULT_PROFILE",
                       "ERROR",
                       "RULES",
                       "RULE_NAMES",
                       "CallSiteMatch",
                       "ClauseTable",
                       "Difference",
                       "Differential",
                       "Finding",
                       "PlacedCall",
                       "PlacedCode",
                       "Profile",
                       "Rule",
                       "compare_with_llvm",
                       "decode_clauses",
                       "encode_clauses",
                       "error_findings",
                       "funclet_code",
                       "generate_clauses",
                       "llvm_differential",
                       "match_call_sites",
                       "placed_from_image",
                       "placed_from_recovered",
                       "validate",
]
