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
