"""The promise of readable histogram edges (`histogram_rows.readable_edges`,
docs/tags.md), checked in exact rational arithmetic on many random float32
ranges: no edge moves by more than a tenth of a bucket from the exact edge,
none is rounded to fewer than 3 significant digits, the edges increase and
hold the range, and each is a decimal of at most 15 digits or exact."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from keras_gradmon.histogram_rows import readable_edges

BUCKETS = 30


def _random_ranges(n: int) -> np.ndarray:
    """`[n, 2]` float64 of float32 ranges: widths from 1e-6 to 100 times the
    magnitude, magnitudes from 1e-38 to 1e37, of either sign, and ranges
    whose bucket is a power of ten."""
    rng = np.random.default_rng(7)
    low = rng.uniform(-1, 1, n) * 10.0 ** rng.uniform(-38, 37, n)
    high = low + np.abs(low) * 10.0 ** rng.uniform(-6, 2, n)
    bucket = 10.0 ** rng.integers(-20, 20, n // 4)
    start = np.round(rng.uniform(-50, 50, n // 4)) * bucket
    low = np.concatenate([low, start])
    high = np.concatenate([high, start + BUCKETS * bucket])
    ranges = np.sort(np.stack([low, high], 1).astype(np.float32), axis=1)
    return ranges[ranges[:, 1] > ranges[:, 0]].astype(np.float64)


def _decade(x: Fraction) -> int:
    """e with 10**e <= x < 10**(e + 1), exactly."""
    e = len(str(int(x))) - 1 if x >= 1 else -len(str(int(1 / x)))
    while Fraction(10) ** e > x:
        e -= 1
    while Fraction(10) ** (e + 1) <= x:
        e += 1
    return e


def test_no_edge_moves_by_more_than_a_tenth_of_a_bucket():
    ranges = _random_ranges(1200)
    edges = readable_edges(ranges[:, :1], ranges[:, 1:], BUCKETS)
    rounded_rows = 0
    for (low, high), row in zip(ranges, edges):
        low, high = Fraction(low), Fraction(high)
        bucket = (high - low) / BUCKETS
        exact = [low + j * bucket for j in range(BUCKETS + 1)]
        moved = [abs(Fraction(e) - x) for e, x in zip(row, exact)]
        assert max(moved) <= bucket / 10, (low, high)
        assert np.all(np.diff(row) > 0) and row[0] <= low and row[-1] >= high
        # At least 3 significant digits: an inner edge moves by at most
        # half a unit of its third digit, an outer one by less than one
        # (a part in 2**50 more: the double nearest the decimal).
        for j, (x, m) in enumerate(zip(exact, moved)):
            if x != 0:
                unit = Fraction(10) ** (_decade(abs(x)) - 2)
                unit = unit if j in (0, BUCKETS) else unit / 2
                assert m <= unit * (1 + Fraction(1, 2**50)), (low, high, j)
        short = all(float(f"{e:.15g}") == e for e in row)
        assert short or row.tolist() == [float(x) for x in exact], (low, high)
        rounded_rows += short
    assert rounded_rows > 0.9 * len(ranges)
