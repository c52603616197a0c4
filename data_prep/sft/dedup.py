"""Exact and near-duplicate detection over rendered examples.

Exact: the canonical digest of the messages. Near: the same answers (assistant turns identical) to
nearly the same prompt: MinHash over byte shingles of the conversation (system prompt excluded) with LSH banding, so a
new example is compared only with candidates that share a band and its answers; a candidate is a
duplicate when its estimated Jaccard similarity reaches the threshold. Requiring identical answers
keeps contrastive pairs (one request in scope, a near-identical one out of scope) apart: they
differ in exactly what the model must learn. Hashes are deterministic (no Python ``hash``),
so the same corpus always keeps the same examples.
"""

from __future__ import annotations

import numpy as np

from data_prep.canonical import digest

_PRIME = (1 << 61) - 1


class Deduplicator:
    """Streaming: ``check(messages)`` returns None for a new example (and remembers it), or
    ``("exact" | "near", id_of_earlier)``."""

    def __init__(
        self,
        threshold: float = 0.95,
        num_perm: int = 64,
        bands: int = 16,
        shingle_bytes: int = 24,
        seed: int = 0,
        sample: int = 4,
    ):
        if num_perm % bands:
            raise ValueError("bands must divide num_perm")
        self.threshold = threshold
        self.bands = bands
        self.rows = num_perm // bands
        self.shingle_bytes = shingle_bytes
        self.sample = sample
        rng = np.random.default_rng(seed)
        self.a = rng.integers(1, _PRIME, size=num_perm, dtype=np.uint64)
        self.b = rng.integers(0, _PRIME, size=num_perm, dtype=np.uint64)
        self.a31 = self.a % np.uint64(1 << 31)
        self.exact: dict[str, str] = {}
        self.buckets: dict[tuple[int, str], list[int]] = {}
        self.signatures: list[np.ndarray] = []
        self.ids: list[str] = []

    def signature(self, text: str) -> np.ndarray:
        """MinHash signature of the example's shingles: byte windows of ``shingle_bytes`` hashed by a
        polynomial rolling hash (vectorized, wrapping mod 2^64), then a fixed 1-in-``sample`` subset
        (chosen by hash value, so two texts keep the same shingles) to bound the work per example."""
        data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint64)
        w = min(self.shingle_bytes, len(data))
        if w == 0:
            data, w = np.zeros(1, dtype=np.uint64), 1
        n = len(data) - w + 1
        h = np.zeros(n, dtype=np.uint64)
        base = np.uint64(1_000_003)
        for j in range(w):
            h = h * base + data[j : j + n]
        h ^= h >> np.uint64(29)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
        kept = h[(h % np.uint64(self.sample)) == 0]
        if len(kept) == 0:
            kept = h[:1]
        hashes = np.unique(kept & np.uint64(0xFFFFFFFF))
        # (a*x + b) mod p: x < 2^32 and a < 2^31 keep the product below 2^63.
        mixed = (hashes[:, None] * self.a31[None, :] + self.b[None, :]) % np.uint64(_PRIME)
        return mixed.min(axis=0)

    def check(self, example_id: str, messages: list[dict]) -> tuple[str, str] | None:
        key = digest("sft-example/v1", messages)
        if key in self.exact:
            return ("exact", self.exact[key])
        # the system prompt is the same for every example of a task: leave it out of the similarity
        text = "\n".join(m["content"] for m in messages if m["role"] != "system")
        sig = self.signature(text)
        answers = digest("sft-answers/v1", [m["content"] for m in messages if m["role"] == "assistant"])
        keys = [
            (band, answers + sig[band * self.rows : (band + 1) * self.rows].tobytes().hex())
            for band in range(self.bands)
        ]
        candidates: set[int] = set()
        for key_b in keys:
            candidates.update(self.buckets.get(key_b, ()))
        for idx in sorted(candidates):
            if float(np.mean(self.signatures[idx] == sig)) >= self.threshold:
                return ("near", self.ids[idx])
        self.exact[key] = example_id
        idx = len(self.signatures)
        self.signatures.append(sig)
        self.ids.append(example_id)
        for key_b in keys:
            self.buckets.setdefault(key_b, []).append(idx)
        return None
