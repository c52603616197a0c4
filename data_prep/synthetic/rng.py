"""Deterministic per-item random streams.

Every generated item (run ``i``, policy case ``i``) gets its own ``random.Random`` seeded from a hash
of ``(seed, stream, index)``, so generation is order-independent and shardable: item ``i`` is the same
whichever process makes it and whatever was generated before it. No global random state is used.
"""

from __future__ import annotations

import hashlib
import random
from datetime import UTC, datetime, timedelta


def derive_seed(seed: int, stream: str, index: int) -> int:
    h = hashlib.sha256(f"ledgerwright-synth/{stream}/{seed}/{index}".encode()).digest()
    return int.from_bytes(h[:8], "big")


def derive_rng(seed: int, stream: str, index: int) -> random.Random:
    return random.Random(derive_seed(seed, stream, index))


EPOCH = datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC)


def iso(t: datetime) -> str:
    """ISO 8601 UTC with a Z suffix, seconds precision: ``2026-03-14T09:30:00Z``."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def seeded_time(rng: random.Random, *, max_days: int = 240) -> datetime:
    """A working-hours time stamp derived only from the stream (never from the clock)."""
    return EPOCH + timedelta(days=rng.randrange(max_days), minutes=15 * rng.randrange(32))


def weighted_choice(rng: random.Random, weights: dict[str, float], rest: str | None = None) -> str:
    """Pick a key with the given probabilities; the remaining mass goes to ``rest``."""
    x = rng.random()
    acc = 0.0
    for key, w in weights.items():
        acc += w
        if x < acc:
            return key
    if rest is None:
        return list(weights)[-1]
    return rest
