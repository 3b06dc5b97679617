"""A token bucket as GCRA (generic cell rate algorithm): each request reserves its slot.

Every caller learns at once how long it must wait, then waits without holding the lock, so
concurrent requests queue in arrival order and the long-run rate is exact. A request proceeds
once the tokens it costs have accrued (less the burst allowance), so a transfer larger than the
burst is paced, never refused, and the last request of a run is paid for too.
"""

from __future__ import annotations

import threading
import time


class TokenBucket:
    """`rate` tokens per second, bursts of up to `burst` tokens."""

    def __init__(self, rate: float, burst: float) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError("rate and burst must be positive")
        self.rate = rate
        self.burst = burst
        self._lock = threading.Lock()
        # Theoretical arrival time: when the bucket would be full again.
        self._tat = time.monotonic()

    def reserve(self, tokens: float) -> float:
        """Take `tokens`; the seconds the caller must wait before proceeding."""
        with self._lock:
            now = time.monotonic()
            self._tat = max(self._tat, now) + tokens / self.rate
            return max(0.0, self._tat - now - self.burst / self.rate)


def ops_bucket(rate: float) -> TokenBucket:
    """Operations per second: bursts of a tenth of a second's worth, at least one."""
    return TokenBucket(rate, max(1.0, rate / 10))


def bytes_bucket(rate: float) -> TokenBucket:
    """Bytes per second: bursts of a tenth of a second's worth, at least 128 KiB (one request)."""
    return TokenBucket(rate, max(128 * 1024.0, rate / 10))
