import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from data_prep.sft.dedup import Deduplicator


def conv(user: str, answer: str) -> list[dict]:
    return [
        {"role": "system", "content": "same prompt"},
        {"role": "user", "content": user},
        {"role": "assistant", "content": answer},
    ]


BODY = "\n".join(
    f"Call {i} (id c{i}): pay_invoice arguments: invoice INV-{2041 + i} amount {i * 100}.00 vendor V-118 succeeded"
    for i in range(30)
)


def test_exact_and_near_duplicates_are_found():
    d = Deduplicator(threshold=0.9)
    assert d.check("a", conv(BODY, "ok")) is None
    assert d.check("b", conv(BODY, "ok")) == ("exact", "a")
    assert d.check("c", conv(BODY + " trailing note", "ok")) == ("near", "a")


def test_contrastive_pairs_with_different_answers_are_kept():
    d = Deduplicator(threshold=0.9)
    assert d.check("in", conv(BODY + " amount 900", '{"decision": "execute_requested"}')) is None
    assert d.check("out", conv(BODY + " amount 9000", '{"decision": "decline"}')) is None


def test_different_texts_are_not_duplicates():
    d = Deduplicator(threshold=0.9)
    assert d.check("a", conv(BODY, "ok")) is None
    other = "\n".join(
        f"Restored event EVT-{7915 + i} on calendar CAL-3116; rejected by permissions" for i in range(30)
    )
    assert d.check("b", conv(other, "ok")) is None


def test_signature_is_deterministic_across_instances():
    assert (Deduplicator(seed=1).signature(BODY) == Deduplicator(seed=1).signature(BODY)).all()


class _Reference:
    """The first implementation (direct formulas, explicit band buckets): the optimized index must
    give the same signatures and the same decisions."""

    def __init__(self, threshold=0.95, num_perm=64, bands=16, shingle_bytes=24, seed=0, sample=4):

        prime = (1 << 61) - 1
        self.threshold, self.bands, self.rows = threshold, bands, num_perm // bands
        self.shingle_bytes, self.sample, self.prime = shingle_bytes, sample, prime
        rng = np.random.default_rng(seed)
        self.a = rng.integers(1, prime, size=num_perm, dtype=np.uint64)
        self.b = rng.integers(0, prime, size=num_perm, dtype=np.uint64)
        self.a31 = self.a % np.uint64(1 << 31)
        self.exact, self.buckets, self.signatures, self.ids = {}, {}, [], []

    def signature(self, text):

        data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint64)
        w = min(self.shingle_bytes, len(data))
        if w == 0:
            data, w = np.zeros(1, dtype=np.uint64), 1
        n = len(data) - w + 1
        h = np.zeros(n, dtype=np.uint64)
        for j in range(w):
            h = h * np.uint64(1_000_003) + data[j : j + n]
        h ^= h >> np.uint64(29)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
        kept = h[(h % np.uint64(self.sample)) == 0]
        if len(kept) == 0:
            kept = h[:1]
        hashes = np.unique(kept & np.uint64(0xFFFFFFFF))
        mixed = (hashes[:, None] * self.a31[None, :] + self.b[None, :]) % np.uint64(self.prime)
        return mixed.min(axis=0)

    def check(self, example_id, messages):

        from data_prep.canonical import digest

        key = digest("sft-example/v1", messages)
        if key in self.exact:
            return ("exact", self.exact[key])
        sig = self.signature("\n".join(m["content"] for m in messages if m["role"] != "system"))
        answers = digest("sft-answers/v1", [m["content"] for m in messages if m["role"] == "assistant"])
        keys = [
            (band, answers + sig[band * self.rows : (band + 1) * self.rows].tobytes().hex())
            for band in range(self.bands)
        ]
        candidates = set()
        for k in keys:
            candidates.update(self.buckets.get(k, ()))
        for idx in sorted(candidates):
            if float(np.mean(self.signatures[idx] == sig)) >= self.threshold:
                return ("near", self.ids[idx])
        self.exact[key] = example_id
        self.signatures.append(sig)
        self.ids.append(example_id)
        for k in keys:
            self.buckets.setdefault(k, []).append(len(self.signatures) - 1)
        return None


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.text(alphabet="ab\u00e9 \n{}:,0123456789", max_size=3000)
        | st.sampled_from(["", "a", "x" * 23, "x" * 24, "y" * 25, BODY, BODY[:-1], "é" * 40]),
        min_size=1,
        max_size=6,
    )
)
def test_signature_equals_direct_formulas(texts):
    ref, new = _Reference(seed=3), Deduplicator(seed=3)
    for text in texts:
        assert (ref.signature(text) == new.signature(text)).all()


def test_long_text_takes_several_blocks_and_still_matches():
    text = "".join(f"row {i}: amount {i * 37 % 1000}.00 ref R-{i * 7919 % 100003}\n" for i in range(2500))
    assert (_Reference().signature(text) == Deduplicator().signature(text)).all()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=5),  # body variant
            st.integers(min_value=0, max_value=3),  # edit
            st.sampled_from(["ok", "no", '{"decision": "decline"}']),
        ),
        min_size=1,
        max_size=25,
    )
)
def test_decisions_equal_the_bucket_index(stream):
    bodies = [BODY, BODY.replace("V-118", "V-119"), BODY[: len(BODY) // 2], "short text", "", BODY * 2]
    edits = ["", " trailing note", "x", BODY[:40]]
    stored: dict[int, list[dict]] = {}
    ref = _Reference(threshold=0.9)
    eager = Deduplicator(threshold=0.9)
    lazy = Deduplicator(threshold=0.9, loader=lambda r: stored[r])
    for i, (body, edit, answer) in enumerate(stream):
        messages = conv(bodies[body] + edits[edit], answer)
        want = ref.check(f"e{i}", messages)
        assert eager.check(f"e{i}", messages) == want
        assert lazy.check(f"e{i}", messages, ref=100 + i) == want
        if want is None:
            stored[100 + i] = messages
    assert len(eager) == len(lazy) == len(ref.ids)
    assert lazy.signatures_taken <= eager.signatures_taken


def test_lazy_signatures_only_for_shared_answers():
    stored: dict[int, list[dict]] = {}
    d = Deduplicator(threshold=0.9, loader=lambda r: stored[r])
    for i in range(5):
        messages = conv(BODY.replace("V-118", f"V-{i}00"), f"answer {i}")
        assert d.check(f"u{i}", messages, ref=i) is None
        stored[i] = messages
    assert d.signatures_taken == 0
    near = conv(BODY.replace("V-118", "V-200") + " trailing note", "answer 2")
    assert d.check("n", near, ref=99) == ("near", "u2")
    assert d.signatures_taken == 2  # the earlier example's (loaded) and the new one's
