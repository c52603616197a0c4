"""Exact and near-duplicate detection over rendered examples.

Exact: the canonical digest of the messages. Near: the same answers (assistant turns identical) to
nearly the same prompt: MinHash over byte shingles of the conversation (system prompt excluded) with LSH banding, so a
new example is compared only with candidates that share a band and its answers; a candidate is a
duplicate when its estimated Jaccard similarity reaches the threshold. Requiring identical answers
keeps contrastive pairs (one request in scope, a near-identical one out of scope) apart: they
differ in exactly what the model must learn. Hashes are deterministic (no Python ``hash``),
so the same corpus always keeps the same examples.

Memory: the index keeps, per kept example, its id, a 32-byte message digest and where to find it
again; signatures only for examples whose answers another kept example shares. Band buckets are not
materialized: examples are grouped by their answers' digest and a new example's bands are compared
with its group's signatures, which finds exactly the candidates that band buckets keyed by (band,
answers, band values) would.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable

import numpy as np

from data_prep.canonical import canonical_bytes, domain_hash

_PRIME = (1 << 61) - 1
_P = np.uint64(_PRIME)
_BASE = 1_000_003
_BLOCK = 4096  # hashes per block of the (permutations x hashes) product: bounds the work buffers


class _Powers:
    """``BASE**k`` and ``BASE**-k`` modulo 2^64 for k < n (BASE is odd, so it has an inverse)."""

    pos = np.ones(1, dtype=np.uint64)
    neg = np.ones(1, dtype=np.uint64)

    @classmethod
    def upto(cls, n: int) -> tuple[np.ndarray, np.ndarray]:
        if len(cls.pos) < n:
            size = max(n, 2 * len(cls.pos), 4096)
            for name, factor in (("pos", _BASE), ("neg", pow(_BASE, -1, 1 << 64))):
                steps = np.full(size, factor, dtype=np.uint64)
                steps[0] = 1
                setattr(cls, name, np.cumprod(steps, dtype=np.uint64))  # wraps modulo 2^64
        return cls.pos, cls.neg


class _Group:
    """Kept examples that share one answers digest: their indices and signatures (rows)."""

    __slots__ = ("idxs", "sigs")

    def __init__(self, idx: int, sig: np.ndarray):
        self.idxs = [idx]
        self.sigs = np.empty((2, len(sig)), dtype=np.uint64)
        self.sigs[0] = sig

    def add(self, idx: int, sig: np.ndarray) -> None:
        n = len(self.idxs)
        if n == len(self.sigs):
            grown = np.empty((2 * n, self.sigs.shape[1]), dtype=np.uint64)
            grown[:n] = self.sigs
            self.sigs = grown
        self.sigs[n] = sig
        self.idxs.append(idx)


def similarity_text(messages: list[dict]) -> str:
    """The text the near-duplicate signature is taken of: the conversation without the system prompt
    (the same for every example of a task)."""
    return "\n".join(m["content"] for m in messages if m["role"] != "system")


class Deduplicator:
    """Streaming: ``check(example_id, messages)`` returns None for a new example (and remembers it),
    or ``("exact" | "near", id_of_earlier)``.

    With a ``loader`` (``ref -> messages`` of an example kept earlier, e.g. read back from the spool it
    was written to) and a ``ref`` per checked example, signatures are computed lazily: an example whose
    answers no earlier kept example shares cannot be a near duplicate, so its signature is only taken
    (from the loaded messages) once a second example with the same answers arrives. The decisions are
    the same as with eager signatures; most examples never need one.
    """

    def __init__(
        self,
        threshold: float = 0.95,
        num_perm: int = 64,
        bands: int = 16,
        shingle_bytes: int = 24,
        seed: int = 0,
        sample: int = 4,
        loader: Callable[[int], list[dict]] | None = None,
    ):
        if num_perm % bands:
            raise ValueError("bands must divide num_perm")
        self.threshold = threshold
        self.num_perm = num_perm
        self.bands = bands
        self.rows = num_perm // bands
        self.shingle_bytes = shingle_bytes
        self.sample = sample
        self.loader = loader
        rng = np.random.default_rng(seed)
        self.a = rng.integers(1, _PRIME, size=num_perm, dtype=np.uint64)
        self.b = rng.integers(0, _PRIME, size=num_perm, dtype=np.uint64)
        self.a31 = self.a % np.uint64(1 << 31)
        self._a_col = self.a31[:, None].copy()
        self._b_col = self.b[:, None].copy()
        self._buf = np.empty((2, num_perm * _BLOCK), dtype=np.uint64)
        self.exact: dict[bytes, int] = {}  # message digest -> index of the kept example
        # answers digest -> the only kept example with these answers (index, signature not taken
        # yet) or a _Group
        self.groups: dict[bytes, int | _Group] = {}
        self.ids: list[str] = []
        self._refs = array("q")
        self.signatures_taken = 0

    def __len__(self) -> int:
        return len(self.ids)

    def signature(self, text: str) -> np.ndarray:
        """MinHash signature of the example's shingles: byte windows of ``shingle_bytes`` hashed by a
        polynomial rolling hash (wrapping mod 2^64), then a fixed 1-in-``sample`` subset (chosen by
        hash value, so two texts keep the same shingles) to bound the work per example.

        The window hash ``sum_j data[i+j] * BASE**(w-1-j)`` is computed from prefix sums of
        ``data[k] * BASE**-k`` (exact modulo 2^64), and ``(a*x + b) mod (2^61-1)`` by the Mersenne
        reduction; both give the same values as the direct formulas."""
        self.signatures_taken += 1
        data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint64)
        w = min(self.shingle_bytes, len(data))
        if w == 0:
            data, w = np.zeros(1, dtype=np.uint64), 1
        size = len(data)
        n = size - w + 1
        pos, neg = _Powers.upto(size)
        prefix = np.zeros(size + 1, dtype=np.uint64)
        np.cumsum(data * neg[:size], out=prefix[1:])
        h = prefix[w:] - prefix[:n]
        h *= pos[w - 1 : size]
        h ^= h >> np.uint64(29)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
        if self.sample & (self.sample - 1) == 0:
            kept = h[(h & np.uint64(self.sample - 1)) == 0]
        else:
            kept = h[(h % np.uint64(self.sample)) == 0]
        if len(kept) == 0:
            kept = h[:1]
        kept &= np.uint64(0xFFFFFFFF)
        kept.sort()
        hashes = kept[np.concatenate(([True], kept[1:] != kept[:-1]))]
        # (a*x + b) mod p: x < 2^32 and a < 2^31 keep a*x + b below 2^64.
        out = None
        for start in range(0, len(hashes), _BLOCK):
            block = hashes[None, start : start + _BLOCK]
            cells = self.num_perm * block.shape[1]
            x = self._buf[0, :cells].reshape(self.num_perm, -1)
            r = self._buf[1, :cells].reshape(self.num_perm, -1)
            np.multiply(self._a_col, block, out=x)
            x += self._b_col
            np.bitwise_and(x, _P, out=r)
            x >>= np.uint64(61)
            r += x  # congruent to a*x + b and below 2p
            if r.max() >= _P:
                np.subtract(r, _P, out=x)
                np.minimum(r, x, out=r)
            low = r.min(axis=1)
            out = low if out is None else np.minimum(out, low)
        return out

    def check(
        self,
        example_id: str,
        messages: list[dict],
        *,
        canonical: bytes | None = None,
        ref: int | None = None,
    ) -> tuple[str, str] | None:
        """``canonical``: ``canonical_bytes(messages)`` when the caller has it; ``ref``: how the
        ``loader`` finds this example's messages again once it is kept."""
        key, answers = self.digests(messages, canonical)
        return self.check_digests(example_id, key, answers, ref=ref, messages=messages)

    @staticmethod
    def digests(messages: list[dict], canonical: bytes | None = None) -> tuple[bytes, bytes]:
        """``(example digest, answers digest)``: what :meth:`check_digests` decides on (the messages
        themselves are needed only for a signature, and then loaded)."""
        h = _EXAMPLE_HASH.copy()
        h.update(canonical_bytes(messages) if canonical is None else canonical)
        key = h.digest()
        h = _ANSWERS_HASH.copy()
        h.update(canonical_bytes([m["content"] for m in messages if m["role"] == "assistant"]))
        return key, h.digest()

    def check_digests(
        self,
        example_id: str,
        key: bytes,
        answers: bytes,
        *,
        ref: int | None = None,
        messages: list[dict] | None = None,
    ) -> tuple[str, str] | None:
        """:meth:`check` from the digests; ``messages`` (or the ``loader`` and ``ref``) give the
        example's text when a signature is needed."""
        first = self.exact.get(key)
        if first is not None:
            return ("exact", self.ids[first])
        group = self.groups.get(answers)
        lazy = self.loader is not None and ref is not None
        if messages is None and not lazy:
            raise RuntimeError(f"no way to load example {example_id} for its signature")
        if group is None:
            idx = self._keep(example_id, key, ref)
            if lazy:
                self.groups[answers] = idx
            else:
                self.groups[answers] = _Group(idx, self.signature(similarity_text(messages)))
            return None
        if type(group) is int:
            # a second example with these answers: take the first one's signature now
            ref_first = self._refs[group]
            if ref_first < 0 or self.loader is None:
                raise RuntimeError(f"no way to load example {self.ids[group]} for its signature")
            first_sig = self.signature(similarity_text(self.loader(ref_first)))
            group = self.groups[answers] = _Group(group, first_sig)
        if messages is None:
            messages = self.loader(ref)
        sig = self.signature(similarity_text(messages))
        # candidates: same answers and at least one identical band, checked oldest first
        n = len(group.idxs)
        same = group.sigs[:n] == sig
        candidates = same.reshape(n, self.bands, self.rows).all(axis=2).any(axis=1)
        close = candidates & (same.mean(axis=1) >= self.threshold)
        if close.any():
            return ("near", self.ids[group.idxs[int(close.argmax())]])
        group.add(self._keep(example_id, key, ref), sig)
        return None

    def _keep(self, example_id: str, key: bytes, ref: int | None) -> int:
        idx = len(self.ids)
        self.ids.append(example_id)
        self.exact[key] = idx
        self._refs.append(-1 if ref is None else ref)
        return idx


_EXAMPLE_HASH = domain_hash("sft-example/v1")
_ANSWERS_HASH = domain_hash("sft-answers/v1")
