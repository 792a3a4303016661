"""The CLR clause validator: hand-written tables per rule, real RyuJIT tables, generated tables.

(a) One legal and one or more broken tables per rule, built around the clr-abi.md example
    (three nested tries, their funclets, duplicates and a cloned finally).
(b) Real tables copied from System.Private.CoreLib 3.1's ReadyToRun image (RyuJIT's own
    output, including the legal patterns a naive checker rejects).
(c) Every EH body of the ReadyToRun framework (RyuJIT 3.1 tables read by `ReadyToRunImage`):
    no findings; and the mutations below applied to CoreLib's real tables.
(d) Property tests: a generator of legal tables — nested try statements (catch, filter,
    finally, fault; mutual protection; tries inside handlers; tries with identical native
    ranges) laid out as main body + funclets, primaries ordered inner-first, duplicates for
    funclets inside tries, cloned finallys — on which the validator finds nothing; then one
    mutation, after which it must find something, and the rule the mutation breaks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llilc_eh.assembly.corpus import Corpus
from llilc_eh.assembly.native import ClauseFlags, CodeRange, NativeClause, NativeMethod
from llilc_eh.assembly.r2r import ReadyToRunImage
from llilc_eh.clauses import CONVENTION, RULE_NAMES, Profile, error_findings, validate
from llilc_eh.errors import AssemblyError

CATCH, FILTER, FINALLY, FAULT = ClauseFlags.NONE, ClauseFlags.FILTER, ClauseFlags.FINALLY, ClauseFlags.FAULT
DUP, SAMETRY = ClauseFlags.DUPLICATED, ClauseFlags.SAMETRY
TOKEN_A, TOKEN_E = 0x01000012, 0x01000011


def clause(flags, try_range, handler, token=0) -> NativeClause:
    return NativeClause(ClauseFlags(flags), *try_range, *handler, token)


def method(main_end, funclets, clauses) -> NativeMethod:
    return NativeMethod(CodeRange(0, main_end), tuple(CodeRange(*f) for f in funclets), tuple(clauses))


def raw(main, funclets, rows) -> NativeMethod:
    """A table as R2R stores it: (flags, try_start, try_end, handler_start, handler_end, token) rows."""
    return NativeMethod(CodeRange(*main), tuple(CodeRange(*f) for f in funclets),
                        tuple(NativeClause(ClauseFlags(r[0]), *r[1:]) for r in rows))


def rules(m: NativeMethod, profile="coreclr-psp") -> set[str]:
    return {f.rule for f in validate(m, profile)}


def with_clauses(m: NativeMethod, clauses) -> NativeMethod:
    return dataclasses.replace(m, clauses=tuple(clauses))


def replace_clause(m: NativeMethod, i: int, **changes) -> NativeMethod:
    cs = list(m.clauses)
    cs[i] = dataclasses.replace(cs[i], **changes)
    return with_clauses(m, cs)


# --- (a) the clr-abi.md example ------------------------------------------------------------
#
#   A: try {                          main [0x00, 0x60)
#        try {                        C: try [0x18, 0x40) finally M
#          try { E } catch { H }      E: try [0x20, 0x30) catch H
#        } finally { M }
#        call-finally thunk           [0x40, 0x48): the normal-path call of M
#      } catch { R }                  A: try [0x10, 0x50) catch R
#   funclets: H [0x60, 0x70), M [0x70, 0x80), R [0x80, 0x90)

H, M, R = (0x60, 0x70), (0x70, 0x80), (0x80, 0x90)
TRY_E, TRY_C, TRY_A = (0x20, 0x30), (0x18, 0x40), (0x10, 0x50)

ABI_EXAMPLE = method(0x60, [H, M, R], [
    clause(CATCH, TRY_E, H, TOKEN_E),            # 0
    clause(FINALLY, TRY_C, M),                   # 1
    clause(CATCH, TRY_A, R, TOKEN_A),            # 2
    clause(FINALLY | DUP, H, M),                 # 3  H is inside C's try
    clause(CATCH | DUP, H, R, TOKEN_A),          # 4  ... and inside A's try
    clause(CATCH | DUP, M, R, TOKEN_A),          # 5  M is inside A's try
    clause(FINALLY | DUP, (0x40, 0x40), (0x40, 0x48)),  # 6  cloned finally: the call-finally thunk
])

NATIVEAOT_EXAMPLE = with_clauses(ABI_EXAMPLE, ABI_EXAMPLE.clauses[:3])


def test_abi_example_is_legal():
    assert validate(ABI_EXAMPLE) == []
    assert validate(ABI_EXAMPLE, Profile.CORECLR_NET10) == []
    assert validate(NATIVEAOT_EXAMPLE, "nativeaot") == []


def test_profiles_and_rule_names():
    assert [p.value for p in Profile] == ["coreclr-psp", "coreclr-net10", "nativeaot"]
    assert Profile.CORECLR_PSP.psp_sym and not Profile.CORECLR_NET10.psp_sym
    assert not Profile.NATIVEAOT.duplicate_clauses
    with pytest.raises(ValueError):
        validate(ABI_EXAMPLE, "mono")
    assert len(set(RULE_NAMES)) == len(RULE_NAMES) == 15
    assert validate(with_clauses(ABI_EXAMPLE, ABI_EXAMPLE.clauses[1:]), rules=["primary-order"]) == []


def test_findings_name_rule_clauses_and_hex_offsets():
    broken = replace_clause(ABI_EXAMPLE, 0, try_end=0x48)
    [finding] = validate(broken, rules=["tries-nested"])
    assert finding.rule == "tries-nested" and finding.clauses == (0, 1)
    assert "[0x20, 0x48)" in finding.message and "[0x18, 0x40)" in finding.message
    assert str(finding).startswith("tries-nested: clause 0 (catch)")


def test_missing_duplicates_are_legal_only_for_nativeaot():
    assert validate(NATIVEAOT_EXAMPLE, "nativeaot") == []
    assert rules(NATIVEAOT_EXAMPLE) == {"duplicate-coverage"}
    assert rules(ABI_EXAMPLE, "nativeaot") == {"clause-flags"}


BROKEN = {
    "code-layout": [
        dataclasses.replace(ABI_EXAMPLE, main=CodeRange(0, 0x64)),                   # main runs into H
        dataclasses.replace(ABI_EXAMPLE, funclets=(CodeRange(*M), CodeRange(*H), CodeRange(*R))),
        dataclasses.replace(ABI_EXAMPLE, main=CodeRange(4, 0x60)),
    ],
    "clause-flags": [
        replace_clause(ABI_EXAMPLE, 1, flags=FINALLY | FAULT),
        replace_clause(ABI_EXAMPLE, 1, flags=FINALLY | ClauseFlags(0x40)),
        replace_clause(ABI_EXAMPLE, 0, class_token_or_filter=0),
    ],
    "ranges-well-formed": [
        replace_clause(ABI_EXAMPLE, 0, try_end=0x20),
        replace_clause(ABI_EXAMPLE, 2, handler_end=0x98),
        replace_clause(ABI_EXAMPLE, 6, handler_end=0x40),
    ],
    "handler-is-funclet": [
        replace_clause(ABI_EXAMPLE, 0, handler_end=0x80),                            # H and M
        with_clauses(ABI_EXAMPLE, ABI_EXAMPLE.clauses[1:]),                          # H owned by no clause
    ],
    "handlers-disjoint": [
        replace_clause(ABI_EXAMPLE, 0, handler_start=0x50, handler_end=0x58),        # inside the main body
        replace_clause(ABI_EXAMPLE, 0, handler_start=M[0], handler_end=M[1]),        # two primaries, one handler
    ],
    "try-placement": [
        replace_clause(ABI_EXAMPLE, 0, try_start=0x58, try_end=0x68),                # main body and H
        replace_clause(ABI_EXAMPLE, 0, try_start=0x62, try_end=0x68),                # inside its own handler
    ],
    "tries-nested": [
        replace_clause(ABI_EXAMPLE, 0, try_start=0x14, try_end=0x1c),                # crosses C's start
    ],
    "primary-order": [
        with_clauses(ABI_EXAMPLE, [ABI_EXAMPLE.clauses[i] for i in (1, 0, 2, 3, 4, 5, 6)]),
        with_clauses(ABI_EXAMPLE, [ABI_EXAMPLE.clauses[i] for i in (2, 1, 0, 3, 4, 5, 6)]),
    ],
    "duplicates-last": [
        with_clauses(ABI_EXAMPLE, [ABI_EXAMPLE.clauses[i] for i in (0, 1, 3, 2, 4, 5, 6)]),
    ],
    "duplicate-matches-primary": [
        replace_clause(ABI_EXAMPLE, 4, class_token_or_filter=TOKEN_E),               # token differs from A's
        replace_clause(ABI_EXAMPLE, 4, try_start=0x20, try_end=0x30),                # over the main body
        with_clauses(ABI_EXAMPLE, [*ABI_EXAMPLE.clauses[:6],                         # R is not inside E's try
                                   clause(CATCH | DUP, R, H, TOKEN_E), ABI_EXAMPLE.clauses[6]]),
        replace_clause(ABI_EXAMPLE, 4, handler_start=0x88),                          # no primary has it
    ],
    "duplicate-coverage": [
        with_clauses(ABI_EXAMPLE, [c for i, c in enumerate(ABI_EXAMPLE.clauses) if i != 4]),
        replace_clause(ABI_EXAMPLE, 5, try_end=0x78),                                # covers half of M
    ],
    "duplicate-order": [
        with_clauses(ABI_EXAMPLE, [ABI_EXAMPLE.clauses[i] for i in (0, 1, 2, 4, 3, 5, 6)]),
    ],
    "cloned-finally": [
        with_clauses(ABI_EXAMPLE, [ABI_EXAMPLE.clauses[i] for i in (0, 1, 2, 3, 6, 4, 5)]),
        replace_clause(ABI_EXAMPLE, 6, try_start=0x5c, try_end=0x5c, handler_start=0x5c, handler_end=0x64),
    ],
    "same-try": [
        replace_clause(ABI_EXAMPLE, 1, flags=FINALLY | SAMETRY),
        replace_clause(ABI_EXAMPLE, 2, flags=CATCH | SAMETRY),
    ],
}


@pytest.mark.parametrize("rule,index", [(r, i) for r, ms in BROKEN.items() for i in range(len(ms))])
def test_broken_table_breaks_its_rule(rule, index):
    findings = validate(BROKEN[rule][index])
    assert rule in {f.rule for f in findings}, "\n".join(map(str, findings))


def test_every_rule_has_a_broken_table():
    assert set(BROKEN) | {"sibling-order"} == set(RULE_NAMES)


def test_sibling_order_is_a_convention():
    # Two unrelated tries in the main body, the higher one first: legal for the runtime.
    m = method(0x40, [(0x40, 0x50), (0x50, 0x60)], [
        clause(CATCH, (0x20, 0x30), (0x50, 0x60), TOKEN_A),
        clause(CATCH, (0x08, 0x10), (0x40, 0x50), TOKEN_A),
    ])
    findings = validate(m)
    assert [(f.rule, f.severity) for f in findings] == [("sibling-order", CONVENTION)]
    assert error_findings(findings) == []
    assert validate(with_clauses(m, m.clauses[::-1])) == []


def test_r2r_system_exception_bit_is_accepted_on_catch_clauses_for_coreclr():
    m = replace_clause(ABI_EXAMPLE, 0, flags=ClauseFlags(0x20))
    assert validate(m) == []
    assert "clause-flags" in rules(replace_clause(ABI_EXAMPLE, 1, flags=FINALLY | ClauseFlags(0x20)))
    assert rules(replace_clause(NATIVEAOT_EXAMPLE, 0, flags=ClauseFlags(0x20)), "nativeaot") == {"clause-flags"}


def test_filter_clause_layout():
    # try [0x10,0x20) filter F [0x40,0x50) handler [0x50,0x60); inside an outer fault try [0x08,0x30)
    legal = method(0x40, [(0x40, 0x50), (0x50, 0x60), (0x60, 0x70)], [
        clause(FILTER, (0x10, 0x20), (0x50, 0x60), 0x40),
        clause(FAULT, (0x08, 0x30), (0x60, 0x70)),
        clause(FAULT | DUP, (0x50, 0x60), (0x60, 0x70)),   # the handler funclet, not the filter, is protected
    ])
    assert validate(legal) == []
    assert "handler-is-funclet" in rules(replace_clause(legal, 0, class_token_or_filter=0x44))
    assert "ranges-well-formed" in rules(replace_clause(legal, 0, class_token_or_filter=0x60))
    protects_filter = with_clauses(legal, [*legal.clauses, clause(FAULT | DUP, (0x40, 0x50), (0x60, 0x70))])
    assert "duplicate-matches-primary" in rules(protects_filter)
    try_in_filter = with_clauses(legal, [clause(FAULT, (0x44, 0x48), (0x60, 0x70)), *legal.clauses[:2]])
    assert "try-placement" in rules(try_in_filter)


def test_mutual_protection_and_identical_tries():
    # try [0x10,0x30) catch A, catch E (mutual protection), inside try [0x10,0x30) fault:
    # three clauses with one native try range; only the fault's try encloses the catch funclets.
    m = method(0x40, [(0x40, 0x50), (0x50, 0x60), (0x60, 0x70)], [
        clause(CATCH, (0x10, 0x30), (0x40, 0x50), TOKEN_A),
        clause(CATCH | SAMETRY, (0x10, 0x30), (0x50, 0x60), TOKEN_E),
        clause(FAULT, (0x10, 0x30), (0x60, 0x70)),
        clause(FAULT | DUP, (0x40, 0x50), (0x60, 0x70)),
        clause(FAULT | DUP, (0x50, 0x60), (0x60, 0x70)),
    ])
    assert validate(m) == []
    # Without SAMETRY a duplicate of the sibling catch is ambiguous (identical tries) and accepted;
    # with SAMETRY the validator knows the two catches are one try and rejects it.
    sibling_dup = clause(CATCH | DUP, (0x40, 0x50), (0x50, 0x60), TOKEN_E)
    plain = with_clauses(m, [*replace_clause(m, 1, flags=CATCH).clauses, sibling_dup])
    assert "duplicate-matches-primary" not in rules(plain)
    assert "duplicate-matches-primary" in rules(with_clauses(m, [*m.clauses, sibling_dup]))


def test_split_try_is_legal():
    # LLVM's layout at O0: the normal-path copy of a finally (its calls unprotected by it) sits
    # between two runs of its try, so the finally gets two primaries -- one handler, two
    # disjoint tries in the main body -- inside a catch whose try holds both; the catch's
    # funclet lies inside nothing, the finally's inside the catch's try (one duplicate).
    fin, cat = (0x40, 0x50), (0x50, 0x60)
    m = method(0x40, [fin, cat], [
        clause(FINALLY, (0x08, 0x10), fin),
        clause(FINALLY, (0x20, 0x28), fin),
        clause(CATCH, (0x08, 0x30), cat, TOKEN_A),
        clause(CATCH | DUP, fin, cat, TOKEN_A),
    ])
    assert validate(m) == []
    # Split parts must not overlap, must be one handler (kind, token) and lie in one region.
    assert "handlers-disjoint" in rules(replace_clause(m, 1, try_start=0x0c))
    assert "handlers-disjoint" in rules(replace_clause(m, 1, flags=FAULT))
    catch_split = with_clauses(m, [clause(CATCH, (0x08, 0x10), cat, TOKEN_A), clause(CATCH, (0x20, 0x28), cat, TOKEN_E),
                                   clause(FINALLY, (0x08, 0x30), fin)])
    assert "handlers-disjoint" in rules(catch_split)
    # A split try's duplicates name the handler, not one part of it: the duplicate pairs with
    # part 1 (the first with that handler) although part 2 is the one holding the inner try.
    inner, outer = (0x40, 0x50), (0x50, 0x60)
    nested = method(0x40, [inner, outer], [
        clause(CATCH, (0x08, 0x10), outer, TOKEN_A),     # outer try, part 1
        clause(FINALLY, (0x20, 0x28), inner),            # inner try, inside part 2
        clause(CATCH, (0x18, 0x30), outer, TOKEN_A),     # outer try, part 2
        clause(CATCH | DUP, inner, outer, TOKEN_A),      # the inner handler lies in the outer try
    ])
    assert validate(nested) == []
    assert "duplicate-coverage" in rules(with_clauses(nested, nested.clauses[:3]))


def test_cloned_finally_inside_a_funclet_is_legal():
    # CoreLib 3.1 @0x48cd20: a try/finally inside a finally handler; its call-finally thunk
    # [0x124, 0x12e) lies in that handler's funclet.
    m = raw((0, 0x99), [(0x99, 0xbf), (0xbf, 0x135)], [
        (0x2, 0xf0, 0x124, 0x99, 0xbf, 0),
        (0x2, 0x19, 0x89, 0xbf, 0x135, 0),
        (0xa, 0x89, 0x89, 0x89, 0x92, 0),
        (0xa, 0x124, 0x124, 0x124, 0x12e, 0),
    ])
    assert validate(m) == []
    # Clause 0's try lies in clause 1's handler: it must come first, though it starts higher.
    assert "primary-order" in rules(with_clauses(m, [m.clauses[i] for i in (1, 0, 2, 3)]))


# --- (b) real RyuJIT tables (System.Private.CoreLib 3.1, ReadyToRun) -----------------------

REAL_TABLES = {
    # five funclets, nine duplicates, a cloned finally; two tries one byte apart
    "0x5be310": raw((0, 0x691), [(0x691, 0x6f2), (0x6f2, 0x734), (0x734, 0x76f), (0x76f, 0x7a2), (0x7a2, 0x803)], [
        (0x0, 0x4ba, 0x630, 0x691, 0x6f2, 0x2000046), (0x4, 0x4ba, 0x631, 0x6f2, 0x734, 0),
        (0x4, 0x23c, 0x646, 0x734, 0x76f, 0), (0x2, 0x68, 0x654, 0x76f, 0x7a2, 0),
        (0x0, 0x68, 0x669, 0x7a2, 0x803, 0x2000046), (0xc, 0x691, 0x6f2, 0x6f2, 0x734, 0),
        (0xc, 0x691, 0x6f2, 0x734, 0x76f, 0), (0xa, 0x691, 0x6f2, 0x76f, 0x7a2, 0),
        (0x8, 0x691, 0x6f2, 0x7a2, 0x803, 0x2000046), (0xc, 0x6f2, 0x734, 0x734, 0x76f, 0),
        (0xa, 0x6f2, 0x734, 0x76f, 0x7a2, 0), (0x8, 0x6f2, 0x734, 0x7a2, 0x803, 0x2000046),
        (0xa, 0x734, 0x76f, 0x76f, 0x7a2, 0), (0x8, 0x734, 0x76f, 0x7a2, 0x803, 0x2000046),
        (0x8, 0x76f, 0x7a2, 0x7a2, 0x803, 0x2000046), (0xa, 0x65c, 0x65c, 0x65c, 0x669, 0),
    ]),
    # a filter clause, duplicates of a fault, a cloned finally
    "0x47da60": raw((0, 0x2b1), [(0x2b1, 0x308), (0x308, 0x354), (0x354, 0x3d3), (0x3d3, 0x414)], [
        (0x2, 0x113, 0x14f, 0x2b1, 0x308, 0), (0x1, 0x18f, 0x229, 0x354, 0x3d3, 0x308),
        (0x4, 0x88, 0x241, 0x3d3, 0x414, 0), (0xc, 0x2b1, 0x308, 0x3d3, 0x414, 0),
        (0xc, 0x354, 0x3d3, 0x3d3, 0x414, 0), (0xa, 0x182, 0x182, 0x182, 0x18f, 0),
    ]),
    # catch and filter on one try (mutual protection), then a second filter
    "0x3aac30": raw((0, 0x139), [(0x139, 0x15e), (0x15e, 0x18e), (0x18e, 0x1c1), (0x1c1, 0x1f1), (0x1f1, 0x216)], [
        (0x0, 0x6a, 0xb3, 0x139, 0x15e, 0x20000cf), (0x1, 0x6a, 0xb3, 0x18e, 0x1c1, 0x15e),
        (0x1, 0xe5, 0x113, 0x1f1, 0x216, 0x1c1),
    ]),
    # catch and fault with one native try range: distinct tries, the catch funclet duplicated to the fault
    "0x3d8d60": raw((0, 0x212), [(0x212, 0x249), (0x249, 0x283)], [
        (0x0, 0x34, 0x1f1, 0x212, 0x249, 0x2000057), (0x4, 0x34, 0x1f1, 0x249, 0x283, 0),
        (0xc, 0x212, 0x249, 0x249, 0x283, 0),
    ]),
    # a try inside the other clause's catch funclet, listed first though it starts higher
    "0x571940": raw((0, 0x86), [(0x86, 0x9f), (0x9f, 0x123)], [
        (0x0, 0xd3, 0xfc, 0x86, 0x9f, 0x200009f), (0x0, 0x15, 0x34, 0x9f, 0x123, 0x200009f),
    ]),
}


@pytest.mark.parametrize("name", sorted(REAL_TABLES))
def test_real_ryujit_table_is_legal(name):
    assert validate(REAL_TABLES[name]) == []
    assert validate(REAL_TABLES[name], "coreclr-net10") == []


def test_real_table_mutations():
    big = REAL_TABLES["0x5be310"]
    assert "duplicate-order" in rules(with_clauses(big, [big.clauses[i] for i in (0, 1, 2, 3, 4, 6, 5, *range(7, 16))]))
    assert "duplicate-coverage" in rules(with_clauses(big, [c for i, c in enumerate(big.clauses) if i != 8]))
    assert "handlers-disjoint" in rules(replace_clause(big, 8, flags=CATCH))
    assert "primary-order" in rules(with_clauses(big, [big.clauses[i] for i in (1, 0, *range(2, 16))]))
    filt = REAL_TABLES["0x47da60"]
    assert "handler-is-funclet" in rules(replace_clause(filt, 1, class_token_or_filter=0x2b1))


# --- (d) generated legal tables ------------------------------------------------------------


@dataclass(eq=False)
class Handler:
    kind: str                     # catch, filter, finally, fault
    body: list                    # code sizes (int) and nested Stmts, in order
    token: int = 0
    prolog: int = 1
    filter_size: int = 0
    funclet: tuple[int, int] = (0, 0)
    filter_funclet: tuple[int, int] | None = None


@dataclass(eq=False)
class Stmt:
    """One try with its handlers (several catch/filter handlers: mutual protection)."""

    body: list
    handlers: list[Handler]
    try_range: tuple[int, int] = (0, 0)
    region: object = None         # None: the main body; else the Handler whose funclet holds the try
    after: int = 0                # code bytes right after the try in its body (for a call-finally thunk)
    clauses: list[int] = field(default_factory=list)


def bodies(depth: int):
    code = st.integers(0, 12)
    if depth >= 3:
        return st.lists(code, min_size=1, max_size=1)

    @st.composite
    def body(draw):
        items = []
        for _ in range(draw(st.integers(0, 2))):
            items.append(draw(code))
            items.append(draw(stmts(depth + 1)))
        items.append(draw(code))
        return items
    return body()


def stmts(depth: int):
    @st.composite
    def stmt(draw):
        shape = draw(st.sampled_from(["catch", "catch", "finally", "fault"]))
        if shape == "catch":
            kinds = draw(st.lists(st.sampled_from(["catch", "filter"]), min_size=1, max_size=3))
        else:
            kinds = [shape]
        handlers = []
        for kind in kinds:
            handlers.append(Handler(kind, draw(bodies(depth + 1)) if draw(st.booleans()) else [draw(st.integers(0, 8))],
                                    token=0x01000000 | draw(st.integers(1, 0xFFF)), prolog=draw(st.integers(1, 4)),
                                    filter_size=draw(st.integers(1, 8)) if kind == "filter" else 0))
        return Stmt(draw(bodies(depth)), handlers)
    return stmt()


def body_size(body) -> int:
    return sum(item if isinstance(item, int) else max(1, body_size(item.body)) for item in body)


def lay_out(body, pos: int, region, stmts_out: list, handlers_out: list) -> int:
    for k, item in enumerate(body):
        if isinstance(item, int):
            pos += item
            continue
        size = max(1, body_size(item.body))
        item.try_range, item.region = (pos, pos + size), region
        nxt = body[k + 1] if k + 1 < len(body) else 0
        item.after = nxt if isinstance(nxt, int) else 0
        lay_out(item.body, pos, region, stmts_out, handlers_out)
        stmts_out.append(item)
        handlers_out.extend((item, h) for h in item.handlers)
        pos += size
    return pos


def enclosing_stmts(s: Stmt, parent: dict) -> list[Stmt]:
    """The try statements whose *try* (logically) holds s, innermost first."""
    chain, node = [], s
    while node in parent:
        holder, part = parent[node]
        if part == "try":
            chain.append(holder)
        node = holder
    return chain


def index_parents(body, holder, part, parent: dict) -> None:
    for item in body:
        if isinstance(item, Stmt):
            if holder is not None:
                parent[item] = (holder, part)
            index_parents(item.body, item, "try", parent)
            for h in item.handlers:
                index_parents(h.body, item, "handler", parent)


@dataclass
class Generated:
    method: NativeMethod
    profile: str


@st.composite
def legal_tables(draw, profile=None):
    profile = profile or draw(st.sampled_from([p.value for p in Profile]))
    top = draw(bodies(0))
    top[0] += 1                                      # a prolog: no try at the method entry
    stmts_, handlers = [], []
    main_end = lay_out(top, 0, None, stmts_, handlers)
    main_end = max(main_end, 1)
    # Funclets: every handler (a filter right before its handler) in a drawn order, nested
    # handlers laid out as their funclet is placed.
    order = draw(st.permutations(range(len(handlers)))) if handlers else []
    pending = [handlers[i] for i in order]
    funclets, pos = [], main_end
    placed = 0
    while placed < len(pending):
        s, h = pending[placed]
        placed += 1
        pos += draw(st.sampled_from([0, 0, 0, 4]))   # alignment padding, sometimes
        if h.kind == "filter":
            h.filter_funclet = (pos, pos + h.filter_size)
            funclets.append(h.filter_funclet)
            pos += h.filter_size
        start = pos
        nested_stmts, nested_handlers = [], []
        end = lay_out(h.body, start + h.prolog, h, nested_stmts, nested_handlers)
        h.funclet = (start, end)
        funclets.append(h.funclet)
        pos = end
        stmts_.extend(nested_stmts)
        pending.extend(nested_handlers)              # nested handlers go after, in discovery order

    parent: dict = {}
    index_parents(top, None, None, parent)

    # Primary order: a random topological order of "nested first" and, for unrelated tries in
    # one code region, "lower first"; the clauses of one try stay together, in handler order.
    def region_key(s):
        return id(s.region)

    def nested(a: Stmt, b: Stmt) -> bool:           # a directly inside b's try or one of its handlers
        return parent.get(a, (None,))[0] is b

    before = {s: set() for s in stmts_}
    for a in stmts_:
        for b in stmts_:
            if a is b:
                continue
            if nested(a, b) or (region_key(a) == region_key(b) and a.try_range[1] <= b.try_range[0]
                  and a.try_range != b.try_range):
                before[b].add(a)
    ordered, done = [], set()
    while len(ordered) < len(stmts_):
        ready = [s for s in stmts_ if s not in done and before[s] <= done]
        s = ready[draw(st.integers(0, len(ready) - 1))]
        ordered.append(s)
        done.add(s)

    coreclr = profile != "nativeaot"
    sametry = not coreclr or draw(st.booleans())     # RyuJIT >= .NET 8 marks mutual protection
    clauses: list[NativeClause] = []
    kind_flags = {"catch": CATCH, "filter": FILTER, "finally": FINALLY, "fault": FAULT}

    def primary(s: Stmt, k: int, h: Handler) -> NativeClause:
        flags = kind_flags[h.kind] | (SAMETRY if sametry and k > 0 else ClauseFlags.NONE)
        token = h.filter_funclet[0] if h.kind == "filter" else h.token if h.kind == "catch" else 0
        return NativeClause(flags, *s.try_range, *h.funclet, token)

    for s in ordered:
        for k, h in enumerate(s.handlers):
            s.clauses.append(len(clauses))
            clauses.append(primary(s, k, h))

    if coreclr:
        # Duplicates, as genReportEH makes them: per primary in table order, its handler funclet
        # (not the filter part) once per clause of each enclosing try, inner to outer.
        groups = []
        for s in ordered:
            for h in s.handlers:
                group = []
                for outer in enclosing_stmts(s, parent):
                    for k, oh in enumerate(outer.handlers):
                        c = primary(outer, 0, oh)
                        group.append(dataclasses.replace(c, flags=c.flags | DUP, try_start=h.funclet[0],
                                                         try_end=h.funclet[1]))
                if group:
                    groups.append(group)
        for group in draw(st.permutations(groups)):  # groups may come in any order
            clauses.extend(group)
        # Cloned finallys: a call-finally thunk right after some try/finally, at the very end.
        for s in ordered:
            if s.handlers[0].kind == "finally" and s.after > 0 and draw(st.booleans()):
                at = s.try_range[1]
                clauses.append(NativeClause(FINALLY | DUP, at, at, at, at + draw(st.integers(1, s.after)), 0))

    m = NativeMethod(CodeRange(0, main_end), tuple(CodeRange(*f) for f in funclets), tuple(clauses))
    return Generated(m, profile)


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(legal_tables())
def test_generated_legal_tables_have_no_findings(g):
    findings = validate(g.method, g.profile)
    assert findings == [], "\n".join(map(str, [*findings, *g.method.clauses]))


# --- mutations: each breaks a rule the validator must name ---------------------------------


def _region(m: NativeMethod, start: int, end: int) -> int | None:
    for r, reg in enumerate((m.main, *m.funclets)):
        if reg.start <= start and end <= reg.end:
            return r
    return None


def _tr(c):
    return (c.try_start, c.try_end)


def _hr(c):
    return (c.handler_start, c.handler_end)


def _cloned(c) -> bool:
    return c.is_duplicate and c.kind == "finally" and c.try_start == c.try_end == c.handler_start


def _moved(cs, i, j):
    cs = list(cs)
    cs.insert(j, cs.pop(i))
    return cs


def swap_nested_primaries(m, draw):
    cs = m.clauses
    pairs = [(a, b) for a in range(len(cs)) for b in range(a + 1, len(cs))
             if not cs[a].is_duplicate and not cs[b].is_duplicate and _tr(cs[a]) != _tr(cs[b])
             and ((_region(m, *_tr(cs[a])) == _region(m, *_tr(cs[b]))
                   and cs[b].try_start <= cs[a].try_start and cs[a].try_end <= cs[b].try_end)
                  or (cs[b].handler_start <= cs[a].try_start and cs[a].try_end <= cs[b].handler_end))]
    return _swap_one(cs, pairs, draw, "primary-order")


def swap_duplicates(m, draw):
    cs = m.clauses
    pairs = [(a, b) for a in range(len(cs)) for b in range(a + 1, len(cs))
             if cs[a].is_duplicate and cs[b].is_duplicate and not _cloned(cs[a]) and not _cloned(cs[b])
             and _tr(cs[a]) == _tr(cs[b]) and _hr(cs[a]) != _hr(cs[b])]
    return _swap_one(cs, pairs, draw, "duplicate-order")


def _swap_one(cs, pairs, draw, rule):
    """Swap one drawn pair of clauses whose order matters; the finding `rule` must follow."""
    if not pairs:
        return None
    a, b = draw(st.sampled_from(pairs))
    swapped = list(cs)
    swapped[a], swapped[b] = cs[b], cs[a]
    return swapped, {rule}


def overlap_handlers(m, draw):
    cs = m.clauses
    funclets = [(f.start, f.end) for f in m.funclets]
    choices = [(i, k) for i, c in enumerate(cs) if not c.is_duplicate
               for k in range(len(funclets) - 1) if funclets[k] == _hr(c)]
    if not choices:
        return None
    i, k = draw(st.sampled_from(choices))
    nxt = funclets[k + 1]
    mutated = list(cs)
    mutated[i] = dataclasses.replace(cs[i], handler_end=draw(st.integers(nxt[0] + 1, nxt[1])))
    return mutated, {"handlers-disjoint"}


def share_handler(m, draw):
    cs = m.clauses
    primaries = [i for i, c in enumerate(cs) if not c.is_duplicate]
    # Not a legal split try: i taking j's handler must differ from j in kind or token, or
    # have a try that overlaps j's or lies in another code region.
    pairs = [(i, j) for i in primaries for j in primaries if i != j
             and not (cs[i].flags == cs[j].flags and cs[i].class_token_or_filter == cs[j].class_token_or_filter
                      and (cs[i].try_end <= cs[j].try_start or cs[j].try_end <= cs[i].try_start)
                      and _region(m, *_tr(cs[i])) == _region(m, *_tr(cs[j])))]
    if not pairs:
        return None
    i, j = draw(st.sampled_from(pairs))
    mutated = list(cs)
    mutated[i] = dataclasses.replace(cs[i], handler_start=cs[j].handler_start, handler_end=cs[j].handler_end)
    return mutated, {"handlers-disjoint"}


def drop_duplicate_flag(m, draw):
    cs = m.clauses
    dups = [i for i, c in enumerate(cs) if c.is_duplicate and not _cloned(c)]
    if not dups:
        return None
    i = draw(st.sampled_from(dups))
    mutated = list(cs)
    mutated[i] = dataclasses.replace(cs[i], flags=cs[i].flags & ~DUP)
    return mutated, {"handlers-disjoint"}


def flag_primary_as_duplicate(m, draw):
    cs = m.clauses
    primaries = [i for i, c in enumerate(cs) if not c.is_duplicate]
    i = draw(st.sampled_from(primaries))
    mutated = list(cs)
    mutated[i] = dataclasses.replace(cs[i], flags=cs[i].flags | DUP)
    return mutated, {"duplicates-last", "duplicate-matches-primary", "clause-flags"}


def duplicate_before_primary(m, draw):
    cs = m.clauses
    dups = [i for i, c in enumerate(cs) if c.is_duplicate]
    last_primary = max(i for i, c in enumerate(cs) if not c.is_duplicate)
    if not dups:
        return None
    return _moved(cs, draw(st.sampled_from(dups)), draw(st.integers(0, last_primary))), {"duplicates-last"}


def move_filter(m, draw):
    cs = m.clauses
    filters = [i for i, c in enumerate(cs) if c.filter_start is not None and not c.is_duplicate]
    if not filters:
        return None
    i = draw(st.sampled_from(filters))
    others = [f.start for f in m.funclets if f.start != cs[i].filter_start]
    mutated = list(cs)
    mutated[i] = dataclasses.replace(cs[i], class_token_or_filter=draw(st.sampled_from(others)))
    return mutated, {"handler-is-funclet", "ranges-well-formed"}


def handler_into_main(m, draw):
    cs = m.clauses
    primaries = [i for i, c in enumerate(cs) if not c.is_duplicate]
    i = draw(st.sampled_from(primaries))
    start = draw(st.integers(0, m.main.end - 1))
    end = draw(st.integers(start + 1, m.main.end))
    mutated = list(cs)
    mutated[i] = dataclasses.replace(cs[i], handler_start=start, handler_end=end)
    return mutated, {"handlers-disjoint"}


def wrong_sametry(m, draw):
    cs = m.clauses
    choices = [i for i in range(1, len(cs)) if _tr(cs[i]) != _tr(cs[i - 1])]
    if not choices:
        return None
    i = draw(st.sampled_from(choices))
    mutated = list(cs)
    mutated[i] = dataclasses.replace(cs[i], flags=cs[i].flags | SAMETRY)
    return mutated, {"same-try"}


def drop_duplicate(m, draw):
    """Remove a duplicate whose primary's try strictly contains the funclet owner's try."""
    cs = m.clauses
    choices = []
    for d, c in enumerate(cs):
        if not c.is_duplicate or _cloned(c):
            continue
        owner = next((p for p in cs if not p.is_duplicate and _hr(p) == _tr(c)), None)
        enclosing = next((q for q in cs if not q.is_duplicate and _hr(q) == _hr(c)), None)
        if owner and enclosing and _tr(owner) != _tr(enclosing) \
                and _region(m, *_tr(owner)) == _region(m, *_tr(enclosing)):
            choices.append(d)
    if not choices:
        return None
    d = draw(st.sampled_from(choices))
    return [c for i, c in enumerate(cs) if i != d], {"duplicate-coverage"}


MUTATIONS = [swap_nested_primaries, swap_duplicates, overlap_handlers, share_handler, drop_duplicate_flag,
             flag_primary_as_duplicate, duplicate_before_primary, move_filter, handler_into_main,
             wrong_sametry, drop_duplicate]


@SETTINGS
@given(legal_tables(), st.data())
def test_every_mutation_is_caught(g, data):
    m = g.method
    if not m.clauses:
        return
    applied = []
    for mutation in MUTATIONS:
        result = mutation(m, data.draw)
        if result is not None:
            applied.append((mutation.__name__, result))
    name, (clauses, expected) = data.draw(st.sampled_from(applied), label="mutation")
    broken = with_clauses(m, clauses)
    found = {f.rule for f in validate(broken, g.profile)}
    assert found & expected, f"{name}: expected one of {sorted(expected)}, found {sorted(found)}\n" + \
        "\n".join(map(str, broken.clauses))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(legal_tables(profile="coreclr-psp"), st.data())
def test_each_mutation_kind_is_exercised(g, data):
    # The same check, one mutation kind at a time, so that rare kinds get their share.
    for mutation in MUTATIONS:
        result = mutation(g.method, data.draw) if g.method.clauses else None
        if result is None:
            continue
        clauses, expected = result
        found = {f.rule for f in validate(with_clauses(g.method, clauses), g.profile)}
        assert found & expected, f"{mutation.__name__}: expected {sorted(expected)}, found {sorted(found)}"


# --- (c) every RyuJIT table of the ReadyToRun framework --------------------------------------


@pytest.fixture(scope="session")
def corelib_eh_bodies() -> list[NativeMethod]:
    image = ReadyToRunImage.open(Corpus().find("System.Private.CoreLib.dll").location)
    return [body.native for body in image.methods(eh_only=True)]


def test_every_corelib_table_is_legal(corelib_eh_bodies):
    assert len(corelib_eh_bodies) == 1254
    for m in corelib_eh_bodies:
        assert validate(m) == [], str(m)


def test_every_framework_table_is_legal():
    bodies = 0
    for f in Corpus().of("dotnetcore2"):
        try:
            image = ReadyToRunImage.open(f.location)
        except AssemblyError as e:
            assert e.kind == "not-ready-to-run", f"{f.name}: {e}"
            continue
        for body in image.methods(eh_only=True):
            bodies += 1
            findings = validate(body.native)
            assert findings == [], f"{f.name} {body}\n" + "\n".join(map(str, findings))
    assert bodies == 6059


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_corelib_tables_are_caught(corelib_eh_bodies, data):
    m = data.draw(st.sampled_from(corelib_eh_bodies), label="body")
    applied = [(mutation.__name__, result) for mutation in MUTATIONS
               for result in [mutation(m, data.draw)] if result is not None]
    name, (clauses, expected) = data.draw(st.sampled_from(applied), label="mutation")
    broken = with_clauses(m, clauses)
    found = {f.rule for f in validate(broken)}
    assert found & expected, f"{name}: expected one of {sorted(expected)}, found {sorted(found)}\n" + \
        "\n".join(map(str, broken.clauses))
