"""Binary layout of a clause table, declared once with construct.

A CLR JIT reports its clauses one CORINFO_EH_CLAUSE at a time (`setEHcount`, then
`setEHinfo` per clause) and ReadyToRun stores them as consecutive 24-byte records (the
count comes from the size of the method's ExceptionInfo entry), so a table is just the
records back to back, with no header. The record itself is declared in
`assembly/structs.py` (`CorInfoEHClause`).
"""

from __future__ import annotations

from construct import GreedyRange

from ..assembly.structs import CorInfoEHClause

ClauseTable = GreedyRange(CorInfoEHClause)
CLAUSE_SIZE = CorInfoEHClause.sizeof()
