"""Region tree: structure and the structural ECMA-335 rules, on clause tables stated by hand.

Each layout below is a tiny method whose instructions are all `nop`-sized (one byte), so
offsets are instruction boundaries and the clause table alone decides the tree. The
property tests build random properly nested EH structures, check the tree's invariants,
then break one rule and require the matching finding.
"""

from hypothesis import given, settings, strategies as st

from llilc_eh.assembly.body import ClauseKind, ILClause
from llilc_eh.il.regions import RegionKind, build_region_tree

CATCH, FILTER, FINALLY, FAULT = ClauseKind.CATCH, ClauseKind.FILTER, ClauseKind.FINALLY, ClauseKind.FAULT


def clause(i, kind, t, h, f=None, token=0x01000001):
    return ILClause(i, kind, t[0], t[1], h[0], h[1],
                    class_token=token if kind is CATCH else None,
                    filter_start=f if kind is FILTER else None)


def tree_of(clauses, size=40, endfilter_at=()):
    last = {e: "endfilter" for e in endfilter_at}
    return build_region_tree(tuple(clauses), size, tuple(range(size)), method="T::M",
                             last_instruction_names=last)


def kinds(tree):
    return [e.kind for e in tree.errors]


def test_try_catch_tree():
    t = tree_of([clause(0, CATCH, (0, 10), (10, 20))])
    assert not t.errors
    assert [r.kind for r in t.regions] == [RegionKind.ROOT, RegionKind.TRY, RegionKind.CATCH]
    try_, catch = t.regions[1], t.regions[2]
    assert try_.handlers == (2,) and catch.try_region == 1 and catch.parent == 0 == try_.parent
    assert t.innermost(5) is try_ and t.innermost(15) is catch and t.innermost(25) is t.root


def test_mutual_protect_shares_one_try():
    t = tree_of([clause(0, CATCH, (0, 10), (10, 15)), clause(1, FILTER, (0, 10), (20, 25), f=15),
                 clause(2, FINALLY, (0, 25), (25, 30))], endfilter_at=(20,))
    assert not t.errors
    tries = t.tries
    assert len(tries) == 2
    inner = next(r for r in tries if r.end == 10)
    assert inner.clauses == (0, 1) and len(inner.handlers) == 2
    fh = t.regions[inner.handlers[1]]
    assert fh.kind is RegionKind.FILTER_HANDLER and t.regions[fh.filter_region].kind is RegionKind.FILTER
    assert t.regions[inner.parent].kind is RegionKind.TRY
    assert t.max_try_depth == 2


def test_try_inside_handler_and_depth():
    t = tree_of([clause(0, FINALLY, (12, 14), (14, 18)), clause(1, CATCH, (0, 10), (10, 20))])
    assert not t.errors
    inner_try = next(r for r in t.tries if r.start == 12)
    assert t.enclosing_handler(inner_try).kind is RegionKind.CATCH
    assert t.try_depth(inner_try) == 1


def test_twelve_nested_finallys():
    n = 12
    clauses = [clause(i, FINALLY, (0, 2 * i + 2), (2 * i + 2, 2 * i + 4)) for i in range(n)]
    # innermost first: try i ends where its finally starts, and try i+1 encloses both.
    t = tree_of(clauses, size=2 * n + 4)
    assert not t.errors, t.errors
    assert t.max_try_depth == n


def test_overlap_is_reported():
    t = tree_of([clause(0, CATCH, (0, 10), (10, 20)), clause(1, CATCH, (5, 15), (20, 25))])
    assert "overlapping-regions" in kinds(t)


def test_clause_outside_body_and_empty():
    t = tree_of([clause(0, CATCH, (0, 10), (10, 50)), clause(1, FINALLY, (3, 3), (10, 12))])
    assert kinds(t) == ["clause-outside-body", "empty-region"]
    assert t.errors[0].offset == 10 and "IL_000a" in str(t.errors[0])


def test_boundary_not_instruction():
    t = build_region_tree((clause(0, CATCH, (0, 3), (3, 6)),), 8, (0, 2, 4, 6), method="T::M")
    assert set(kinds(t)) == {"region-boundary-not-instruction"}


def test_handler_inside_own_try():
    t = tree_of([clause(0, CATCH, (0, 20), (10, 15))])
    assert "handler-overlaps-try" in kinds(t)


def test_handler_nesting_mismatch():
    # inner try sits in the outer try, its handler outside of it
    t = tree_of([clause(0, CATCH, (2, 5), (12, 15)), clause(1, CATCH, (0, 10), (10, 12))])
    assert "handler-nesting-mismatch" in kinds(t)


def test_filter_must_end_in_endfilter():
    assert "filter-without-endfilter" in kinds(tree_of([clause(0, FILTER, (0, 10), (15, 20), f=10)]))
    assert not tree_of([clause(0, FILTER, (0, 10), (15, 20), f=10)], endfilter_at=(15,)).errors


def test_clause_order_inner_first():
    t = tree_of([clause(0, CATCH, (0, 20), (20, 25)), clause(1, CATCH, (2, 5), (5, 8))])
    assert kinds(t) == ["clause-order"]


# -- properties -------------------------------------------------------------------------------

@st.composite
def nested_structures(draw, depth=0):
    """A list of (kind, try_len, handler_lens, children-in-try) trees, laid out later."""
    n = draw(st.integers(0 if depth else 1, 2 if depth < 3 else 0))
    out = []
    for _ in range(n):
        handlers = draw(st.lists(st.sampled_from([CATCH, FILTER, FINALLY, FAULT]), min_size=1, max_size=3))
        if FINALLY in handlers or FAULT in handlers:
            handlers = [handlers[0]]  # C#-like: a finally/fault protects its try alone
        inner = draw(nested_structures(depth + 1))
        in_handler = draw(nested_structures(depth + 1)) if depth < 2 else []
        out.append((handlers, inner, in_handler))
    return out


def layout(structs, pos, clauses, endfilters):
    """Lay out the structures from `pos`; returns the end offset. Clauses are appended inner-first."""
    for handlers, inner, in_handler in structs:
        try_start = pos
        pos = layout(inner, pos + 1, clauses, endfilters) + 1
        try_end = pos
        spans = []
        for k in handlers:
            f = None
            if k is FILTER:
                f = pos
                pos += 2
                endfilters.append(pos)
            h0 = pos
            pos = layout(in_handler if k is handlers[0] else [], pos + 1, clauses, endfilters) + 1
            spans.append((k, h0, pos, f))
        for k, h0, h1, f in spans:
            clauses.append(clause(len(clauses), k, (try_start, try_end), (h0, h1), f=f))
    return pos


@settings(max_examples=200, deadline=None)
@given(nested_structures())
def test_generated_structures_are_accepted(structs):
    clauses, endfilters = [], []
    size = layout(structs, 0, clauses, endfilters) + 1
    t = tree_of(clauses, size=size, endfilter_at=endfilters)
    assert not t.errors, [str(e) for e in t.errors]
    # invariants: children inside parents; handlers beside their try; every clause in the tree
    for r in t.regions[1:]:
        parent = t.regions[r.parent]
        assert parent.encloses(r) and r.depth == parent.depth + 1
        if r.try_region is not None:
            assert r.parent == t.regions[r.try_region].parent
    covered = sorted(c for r in t.regions if r.kind.is_handler for c in r.clauses)
    assert covered == list(range(len(clauses)))


@settings(max_examples=200, deadline=None)
@given(nested_structures(), st.data())
def test_reversed_order_is_rejected(structs, data):
    clauses, endfilters = [], []
    size = layout(structs, 0, clauses, endfilters) + 1
    nested_pairs = [(a, b) for a in clauses for b in clauses
                    if a.index < b.index and a.try_range != b.try_range
                    and b.try_start <= a.try_start and a.try_end <= b.try_end]
    if not nested_pairs:
        return
    a, b = data.draw(st.sampled_from(nested_pairs))
    swapped = list(clauses)
    swapped[a.index], swapped[b.index] = b, a
    renumbered = [ILClause(i, c.kind, c.try_start, c.try_end, c.handler_start, c.handler_end,
                           c.class_token, c.filter_start) for i, c in enumerate(swapped)]
    assert "clause-order" in kinds(tree_of(renumbered, size=size, endfilter_at=endfilters))
