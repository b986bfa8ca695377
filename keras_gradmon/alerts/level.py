"""`RunningLevel`: a subject's typical value over its last steps.

The growth and spike rules judge a new value against the run's own scale:
the median of log(value) over the last `window` steps (its level), and the
standard deviation of log(value) there (its spread). The median is robust:
a few wild summaries, the bursts of noise once the loss is near zero or the
first summaries of an explosion do not move it. The spread includes the
heavy tail of a noisy run, so that a norm that often jumps 5x between
batches is judged on that scale. The window is counted in steps, not
summaries, so a rule means the same at `every_n_steps=1` and at 100; at
least `min_samples` summaries are kept whatever their age (sparse summaries
still give a spread), and at most `max_samples` (denser summaries are
thinned to one per `window / max_samples` steps), so the cost does not grow
with the frequency. Beside them it keeps the largest value of the same
steps (every value, thinned or not), so a rule can tell a new high from the
heavy tail the run has already shown.
"""

from __future__ import annotations

import bisect
import math
from collections import deque


class RunningLevel:
    """The median and spread of log(value) over the last `window` steps.

    Args:
        window: Steps of history: a sample more than `window` steps older
            than the newest is dropped, unless only `min_samples` are left.
        min_samples: Samples kept whatever their age.
        max_samples: At most about this many samples are kept: when
            summaries are denser than `window / max_samples` steps apart,
            one sample per such stride enters.

    Example:

    >>> level = RunningLevel(window=100)
    >>> for step, value in [(1, 1.0), (2, 4.0), (3, 2.0)]:
    ...     level.add(step, value)
    >>> round(level.value(), 6), round(level.peak(), 6), level.span(4), len(level)
    (2.0, 4.0, 3, 3)
    """

    def __init__(
        self, window: int, min_samples: int = 20, max_samples: int = 256
    ) -> None:
        self.window = window
        self.min_samples = min_samples
        self.stride = max(1, window // max_samples)
        self._samples: deque[tuple[int, float]] = deque()
        # The same logs in order (the median in O(1)) and their sums (the
        # std in O(1)): a rule judges every summary of every subject.
        self._sorted: list[float] = []
        self._sum = 0.0
        self._sum_sq = 0.0
        # Every value's log since the oldest sample kept, each smaller than
        # the one before it: the first is the largest (a monotonic queue).
        self._peaks: deque[tuple[int, float]] = deque()

    def add(self, step: int, value: float) -> None:
        """Takes a finite, positive `value` seen at `step` (others are
        ignored: they have no log)."""
        if not (value > 0 and math.isfinite(value)):
            return
        y = math.log(value)
        while self._peaks and self._peaks[-1][1] <= y:
            self._peaks.pop()
        self._peaks.append((step, y))
        if not self._samples or step - self._samples[-1][0] >= self.stride:
            self._samples.append((step, y))
            bisect.insort(self._sorted, y)
            self._sum += y
            self._sum_sq += y * y
        while (
            len(self._samples) > self.min_samples
            and step - self._samples[0][0] > self.window
        ):
            _, old = self._samples.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]
            self._sum -= old
            self._sum_sq -= old * old
        while self._peaks[0][0] < self._samples[0][0]:
            self._peaks.popleft()

    def span(self, step: int) -> int:
        """Steps from the oldest sample kept to `step` (0 with none)."""
        return step - self._samples[0][0] if self._samples else 0

    def log_median(self) -> float:
        """The median of log(value) over the samples kept."""
        ordered, middle = self._sorted, len(self._sorted) // 2
        if len(ordered) % 2:
            return ordered[middle]
        return 0.5 * (ordered[middle - 1] + ordered[middle])

    def value(self) -> float:
        """The level itself: exp of the median of log(value)."""
        return math.exp(self.log_median())

    def peak(self) -> float:
        """The largest value seen since the oldest sample kept (every value
        counts, also those the thinning left out of the samples)."""
        return math.exp(self._peaks[0][1])

    def log_std(self) -> float:
        """The standard deviation of log(value) over the samples kept."""
        count = len(self._samples)
        mean = self._sum / count
        return math.sqrt(max(self._sum_sq / count - mean * mean, 0.0))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RunningLevel):
            return NotImplemented
        mine = (self.window, self.min_samples, self.stride, self._samples)
        theirs = (other.window, other.min_samples, other.stride, other._samples)
        return mine == theirs and self._peaks == other._peaks

    def __len__(self) -> int:
        return len(self._samples)
