"""Build outputs: spool lines, read-back, DatasetDicts on disk (empty splits included), compact JSON."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from data_prep.canonical import canonical_bytes, dumps_canonical
from data_prep.sft import SPLITS
from data_prep.sft.pipeline import SplitWriter, _features, save_dataset_dict
from data_prep.sft.render import compact

_text = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=30)
_messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]), "content": _text}),
    max_size=5,
)


def _example(i: int, messages: list[dict]) -> dict:
    return {"id": f"t:{i}", "task": "t", "family": "fam", "source_id": f"r{i}", "messages": messages}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_text, _text, _messages, st.sampled_from(SPLITS)), min_size=1, max_size=6))
def test_spool_lines_are_canonical_and_read_back(tmp_path_factory, items):
    root = tmp_path_factory.mktemp("spool")
    w = SplitWriter(root, ("t",))
    refs = []
    for i, (eid, family, messages, split) in enumerate(items):
        ex = {"id": eid, "task": "t", "family": family, "source_id": f"r{i}", "messages": messages}
        refs.append((w.ref("t", split), ex))
        w.write("t", split, ex, canonical_bytes(messages) if i % 2 else None)
    for ref, ex in refs:
        assert w.read("t", ref) == ex
    w.close()
    lines = {s: (root / "t" / f"{s}.jsonl").read_bytes().splitlines() for s in SPLITS}
    expected = {
        s: [dumps_canonical(ex).encode() for (_, _, _, sp), (_, ex) in zip(items, refs) if sp == s]
        for s in SPLITS
    }
    assert lines == expected


def test_empty_splits_save_and_load_with_their_columns(tmp_path):
    from datasets import load_from_disk

    spool = tmp_path / "jsonl"
    spool.mkdir()
    rows = [
        _example(i, [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}])
        for i in range(3)
    ]
    (spool / "train.jsonl").write_text("".join(dumps_canonical(r) + "\n" for r in rows))
    (spool / "validation.jsonl").write_text("")
    (spool / "heldout.jsonl").write_text("")
    save_dataset_dict(spool, tmp_path / "dd")
    dd = load_from_disk(str(tmp_path / "dd"))
    assert list(dd) == list(SPLITS)
    assert [len(dd[s]) for s in SPLITS] == [3, 0, 0]
    for split in SPLITS:
        assert dd[split].features == _features()
        assert dd[split].column_names == ["id", "task", "family", "source_id", "messages"]
        assert json.loads((tmp_path / "dd" / split / "state.json").read_text())["_split"] == split
    assert dd["train"][2] == rows[2]
    # saving again replaces the directory and gives the same bytes
    first = {
        p.relative_to(tmp_path / "dd"): p.read_bytes() for p in (tmp_path / "dd").rglob("*") if p.is_file()
    }
    save_dataset_dict(spool, tmp_path / "dd")
    again = {
        p.relative_to(tmp_path / "dd"): p.read_bytes() for p in (tmp_path / "dd").rglob("*") if p.is_file()
    }
    assert first == again


def test_all_empty_dataset_dict_loads(tmp_path):
    from datasets import load_from_disk

    spool = tmp_path / "jsonl"
    spool.mkdir()
    for split in SPLITS:
        (spool / f"{split}.jsonl").write_text("")
    save_dataset_dict(spool, tmp_path / "dd")
    dd = load_from_disk(str(tmp_path / "dd"))
    assert {s: len(dd[s]) for s in SPLITS} == dict.fromkeys(SPLITS, 0)
    assert dd["train"].features == _features()


def test_large_split_is_written_in_several_batches(tmp_path):
    from datasets import load_from_disk

    from data_prep.sft import pipeline

    spool = tmp_path / "jsonl"
    spool.mkdir()
    n = pipeline.ARROW_BATCH_ROWS * 2 + 7
    rows = [_example(i, [{"role": "user", "content": "x" * (i % 50)}]) for i in range(n)]
    (spool / "train.jsonl").write_text("".join(dumps_canonical(r) + "\n" for r in rows))
    (spool / "validation.jsonl").write_text(dumps_canonical(rows[0]) + "\n")
    (spool / "heldout.jsonl").write_text("")
    save_dataset_dict(spool, tmp_path / "dd")
    dd = load_from_disk(str(tmp_path / "dd"))
    assert len(dd["train"]) == n and dd["train"][n - 1] == rows[-1] and len(dd["validation"]) == 1


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _text,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(_text, kids, max_size=3),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_compact_equals_json_dumps(value):
    assert compact(value) == json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))
