"""clauses stage: CORINFO_EH_CLAUSE tables — made from the funclet model, judged whoever made them.

The stage turns the funclet model and the final code offsets into the table a CLR JIT
hands the runtime (one `NativeClause` per CORINFO_EH_CLAUSE, end offsets in the two
"length" fields; primaries inner-before-outer then lower-before-higher, duplicates after
them: design decision 10), and it judges any such table — ours, LLVM's own CoreCLR table,
RyuJIT's from a ReadyToRun image — with one validator (`validate.py`, decision 12).

    validate(method: NativeMethod, profile="coreclr-psp") -> list[Finding]

Profiles: `coreclr-psp` (default: CoreCLR x64 .NET Core 3.1 – .NET 9, PSPSym, duplicate
clauses), `coreclr-net10` (no PSPSym; same table rules), `nativeaot` (SAMETRY, no
duplicate clauses). The rules, their sources and the legal patterns a naive checker would
reject (cloned-finally clauses, identical try ranges of distinct tries) are documented in
`validate.py`.
"""

from .validate import (CONVENTION, DEFAULT_PROFILE, ERROR, RULE_NAMES, RULES, ClauseTable, Finding,
                       Profile, Rule, error_findings, validate)

__all__ = ["CONVENTION", "DEFAULT_PROFILE", "ERROR", "RULE_NAMES", "RULES", "ClauseTable", "Finding",
           "Profile", "Rule", "error_findings", "validate"]
