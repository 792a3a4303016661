"""check.dispatch.code_range_finder: RyuJIT's dispatch check asks which code range (main
body, funclet) holds an offset for every call and debug-info entry, so it bisects -- and
must still answer what the plain scan in table order answers: the first range holding the
offset, None outside all of them, whatever the ranges (empty ones, ranges touching, and
the overlapping ranges of a damaged image, where the scan is kept)."""

from __future__ import annotations

import random

from llilc_eh.check.dispatch import code_range_finder


def _scan(ranges, offset):
    return next((i for i, (b, e) in enumerate(ranges) if b <= offset < e), None)


def _layouts(rng: random.Random, overlapping: bool):
    for _ in range(400):
        n = rng.randint(0, 6)
        if overlapping:
            ranges = []
            for _ in range(n):
                b = rng.randint(0, 60)
                ranges.append((b, b + rng.randint(0, 20)))
        else:
            cuts = sorted(rng.sample(range(0, 80), 2 * n)) if n else []
            ranges = [(cuts[2 * i], cuts[2 * i + rng.choice((0, 1))] if rng.random() < 0.1
                       else cuts[2 * i + 1]) for i in range(n)]
            if rng.random() < 0.5 and n > 1:      # ranges that touch: one's end is the next's start
                ranges = [(b, ranges[i + 1][0] if i + 1 < n else e) for i, (b, e) in enumerate(ranges)]
            rng.shuffle(ranges)                    # funclets need not follow the main body in order
        yield ranges


def test_same_answer_as_the_scan():
    rng = random.Random(16)
    bisected = scanned = 0
    for overlapping in (False, True):
        for ranges in _layouts(rng, overlapping):
            find = code_range_finder(ranges)
            disjoint = find.__name__ == "find"
            bisected += disjoint
            scanned += not disjoint
            for offset in range(-2, 90):
                assert find(offset) == _scan(ranges, offset), (ranges, offset)
    assert bisected > 300 and scanned > 100      # both ways were exercised


def test_negative_control_a_wrong_answer_is_seen():
    """A finder that forgets a range's end (bisection alone) answers otherwise somewhere: the
    comparison above can fail."""
    import bisect
    ranges = [(0, 10), (20, 30)]
    starts = [b for b, _ in ranges]

    def careless(offset):
        j = bisect.bisect_right(starts, offset) - 1
        return j if j >= 0 else None
    assert any(careless(o) != _scan(ranges, o) for o in range(40))
    assert all(code_range_finder(ranges)(o) == _scan(ranges, o) for o in range(40))
