"""IL-vs-native comparison on hand-stated tables: each RyuJIT transformation is recognised."""

from llilc_eh.assembly.body import ClauseKind, ILClause
from llilc_eh.assembly.native import ClauseFlags as F, CodeRange, NativeClause, NativeMethod
from llilc_eh.check.compare import compare


def il(i, kind, t, h, token=None):
    return ILClause(i, kind, t[0], t[1], h[0], h[1], class_token=token,
                    filter_start=h[0] - 2 if kind is ClauseKind.FILTER else None)


def nm(*clauses):
    return NativeMethod(CodeRange(0, 0x100), (CodeRange(0x100, 0x140), CodeRange(0x140, 0x180)), clauses)


CATCH_IL = il(0, ClauseKind.CATCH, (0, 10), (10, 20), token=0x01000005)
FINALLY_IL = il(1, ClauseKind.FINALLY, (0, 20), (20, 30))


def test_identical():
    c = compare((CATCH_IL, FINALLY_IL), nm(NativeClause(F.NONE, 0x10, 0x20, 0x100, 0x140, 0x01000005),
                                           NativeClause(F.FINALLY, 0x10, 0x40, 0x140, 0x180, 0)))
    assert c.identical and c.classification() == "identical" and c.matches == ((0, 0), (1, 1))


def test_cloned_finally_becomes_fault():
    c = compare((CATCH_IL, FINALLY_IL), nm(NativeClause(F.NONE, 0x10, 0x20, 0x100, 0x140, 0x01000005),
                                           NativeClause(F.FAULT, 0x10, 0x40, 0x140, 0x180, 0),
                                           NativeClause(F.FINALLY | F.DUPLICATED, 0x50, 0x50, 0x50, 0x60, 0)))
    assert c.il_fates == ("kept", "finally-became-fault")
    assert c.native_roles[2] == "cloned-finally"
    assert c.classification() == "cloned-finally+finally-became-fault"


def test_removed_empty_finally_and_duplicates():
    c = compare((CATCH_IL, FINALLY_IL), nm(NativeClause(F.NONE, 0x10, 0x20, 0x100, 0x140, 0x01000005),
                                           NativeClause(F.NONE | F.DUPLICATED, 0x150, 0x160, 0x100, 0x140,
                                                        0x01000005)))
    assert c.il_fates == ("kept", "removed") and c.native_roles[1] == "duplicate"


def test_unexplained_and_nesting_mismatch():
    wrong_token = compare((CATCH_IL,), nm(NativeClause(F.NONE, 0x10, 0x20, 0x100, 0x140, 0x01000006)))
    assert wrong_token.il_fates == ("removed",) and wrong_token.native_roles == ("unexplained",)
    swapped = compare((CATCH_IL, FINALLY_IL), nm(NativeClause(F.NONE, 0x10, 0x50, 0x100, 0x140, 0x01000005),
                                                 NativeClause(F.FINALLY, 0x10, 0x40, 0x140, 0x180, 0)))
    assert swapped.problems and "nesting-mismatch" in swapped.classification()


def test_synchronized_method_gets_a_fault_of_the_jit():
    fault = NativeClause(F.FAULT, 0x10, 0x40, 0x140, 0x180, 0)
    assert compare((), nm(fault), synchronized=True).native_roles == ("synchronized-monitor-exit",)
    assert compare((), nm(fault)).native_roles == ("unexplained",)


def test_nesting_through_a_duplicate():
    """A try inside a handler funclet is nested, natively, in the duplicates of the clauses
    whose try enclosed that handler in IL (System.Data.DataColumn::set_Expression)."""
    il_clauses = (il(0, ClauseKind.CATCH, (4, 8), (8, 10), token=0x01000005),   # inside #1's handler
                  il(1, ClauseKind.CATCH, (0, 2), (2, 12), token=0x01000005),
                  il(2, ClauseKind.FINALLY, (0, 12), (12, 14)))
    inner = NativeClause(F.NONE, 0x150, 0x160, 0x100, 0x140, 0x01000005)   # try in funclet 0x140..
    middle = NativeClause(F.NONE, 0x10, 0x20, 0x140, 0x170, 0x01000005)
    outer = NativeClause(F.FAULT, 0x10, 0x40, 0x170, 0x180, 0)
    funclets = (CodeRange(0x100, 0x140), CodeRange(0x140, 0x170), CodeRange(0x170, 0x180))
    without = NativeMethod(CodeRange(0, 0x100), funclets, (inner, middle, outer))
    assert compare(il_clauses, without).problems
    dup = NativeClause(F.FAULT | F.DUPLICATED, 0x140, 0x170, 0x170, 0x180, 0)
    with_dup = NativeMethod(CodeRange(0, 0x100), funclets, (inner, middle, outer, dup))
    assert not compare(il_clauses, with_dup).problems
