"""`format_number`: how log lines, console recorders and reports show a
number. Pure Python, imported by every layer that prints numbers."""

from __future__ import annotations

import math


def format_number(x: float) -> str:
    """Formats a number for a log line: thousands separators, 4 significant digits.

    Args:
        x: Any float, including NaN and infinities.

    Returns:
        `"826,256"` style for magnitudes in [1e3, 1e9), else the shortest of
        4 significant digits (`"0.0123"`, `"1.5e+12"`, `"nan"`, `"inf"`).

    Example:

    >>> format_number(826256.0), format_number(0.5), format_number(3.0)
    ('826,256', '0.5', '3')
    """
    if math.isfinite(x) and 1e3 <= abs(x) < 1e9:
        return f"{x:,.0f}"
    return f"{x:.4g}"
