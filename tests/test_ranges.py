"""The one range analysis (``fsmooth.dps.ranges``) that DPS and code generation share."""
from __future__ import annotations

import sympy

from fsmooth.dps.ranges import Ranges, in_range, interval


def test_ranges_and_proofs():
    n, m = sympy.symbols("n m", integer=True, nonnegative=True)
    i, j, e = sympy.symbols("i j e", integer=True)
    ranges = Ranges().inside(i, n - 1).inside(j, i - 1)
    assert interval(i + j, ranges) == (0, 2 * n - 3)
    assert ranges.given(i, m) == ranges  # a loop variable keeps its own range
    guarded = ranges.given(e, m - 1)
    assert guarded.bounds_of(e) == (None, m - 1) and guarded.given(e, 0) == guarded
    proof = in_range(j, n, ranges)
    assert proof is not None and proof.low == 0
    assert proof.facts == ("0 <= i <= n - 1", "0 <= j <= i - 1")
    assert in_range(j, n - 2, ranges) is None
