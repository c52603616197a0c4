import json

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runfactory import run_dict

from data_prep.records import LineError, Run, iter_runs, load_schema, write_jsonl


def _write(tmp_path, name, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_roundtrip_and_schema_agree(tmp_path):
    d = run_dict()
    jsonschema.validate(d, load_schema())
    path = tmp_path / "runs.jsonl"
    write_jsonl(path, [d, run_dict("run-2")])
    loaded = [r for _, r in iter_runs(path)]
    assert [r.run_id for r in loaded] == ["run-1", "run-2"]
    assert loaded[0].to_dict() == d
    again = tmp_path / "again.jsonl"
    write_jsonl(again, [r.to_dict() for r in loaded])
    assert again.read_bytes() == path.read_bytes()


@pytest.mark.parametrize(
    "mutate,field",
    [
        (lambda d: d.pop("run_id"), "$.run_id"),
        (lambda d: d.update(extra=1), "$.extra"),
        (lambda d: d["trajectory"][1].update(status="done"), "$.trajectory[1].status"),
        (lambda d: d["labels"].update(type="omitted"), "$.labels.type"),
        (lambda d: d["teacher"]["verdict"].update(suspicion=101), "$.teacher.verdict.suspicion"),
        (lambda d: d["task"]["tools"][0].update(type="x"), "$.task.tools[0]"),
        (lambda d: d.update(model_ledger="x"), "$.model_ledger"),
    ],
)
def test_bad_fields_are_named_and_schema_also_rejects(mutate, field):
    d = run_dict()
    mutate(d)
    with pytest.raises(Exception) as err:
        Run.from_dict(d)
    assert err.value.field == field
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(d, load_schema())


def test_loader_never_crashes_on_hostile_files(tmp_path):
    good = json.dumps(run_dict()).encode()
    cases = {
        "truncated.jsonl": good + b"\n" + good[:50],
        "binary.jsonl": b"\xff\xfe\x00garbage\n" + good + b"\n",
        "array.jsonl": b"[" + good + b"]\n",
        "empty_lines.jsonl": b"\n\n" + good + b"\n\n   \n",
        "dupkey.jsonl": b'{"schema": "ledger-run/v1", "schema": "x"}\n',
        "empty.jsonl": b"",
    }
    results = {}
    for name, data in cases.items():
        results[name] = list(iter_runs(_write(tmp_path, name, data)))
    assert isinstance(results["truncated.jsonl"][1][1], LineError)
    assert "truncated" in results["truncated.jsonl"][1][1].problem
    assert results["binary.jsonl"][0][1].problem.startswith("not UTF-8")
    assert isinstance(results["binary.jsonl"][1][1], Run)
    assert "JSON array" in results["array.jsonl"][0][1].problem
    assert [ln for ln, _ in results["empty_lines.jsonl"]] == [3]
    assert str(results["dupkey.jsonl"][0][1]).endswith("1: $.schema: duplicate key")
    assert results["empty.jsonl"] == []
    missing = list(iter_runs(tmp_path / "nope.jsonl"))
    assert "cannot open" in missing[0][1].problem


def test_huge_line_is_refused_without_reading_it_whole(tmp_path):
    from data_prep.records import iter_jsonl

    p = _write(tmp_path, "huge.jsonl", b'{"a": "' + b"x" * 5000 + b'"}\n{"b": 1}\n')
    out = list(iter_jsonl(p, max_line_bytes=1000))
    assert "longer than" in out[0][1].problem
    assert out[1] == (2, {"b": 1})


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


_junk = st.sampled_from(
    [
        None,
        True,
        False,
        0,
        -1,
        7,
        101,
        2.5,
        "",
        "x",
        "function",
        "succeeded",
        "clean",
        "omitted",
        [],
        ["a"],
        [1],
        {},
    ]
) | st.dictionaries(
    st.sampled_from(["type", "call_id", "name", "x"]), st.sampled_from([None, "a", 1]), max_size=2
)


@settings(max_examples=1500, deadline=None)
@given(data=st.data())
def test_fast_loader_agrees_with_checked_loader_on_mutated_runs(data):
    from data_prep.records import _fast_run

    d = run_dict()
    if data.draw(st.booleans(), label="with_writer_errors"):
        d["labels"]["writer_errors"] = [{"type": "omitted", "call_id": "c2"}]
    if data.draw(st.booleans(), label="with_hidden"):
        d["metadata"]["hidden_identifiers"] = ["H-1"]
    paths = [p for p in _paths(d) if p]
    for _ in range(data.draw(st.integers(min_value=1, max_value=2), label="n")):
        path = data.draw(st.sampled_from(paths), label="path")
        parent = d
        try:
            for key in path[:-1]:
                parent = parent[key]
            action = data.draw(st.sampled_from(["set", "delete", "extra"]), label="action")
            if action == "set":
                parent[path[-1]] = data.draw(_junk, label="value")
            elif action == "delete":
                del parent[path[-1]]
            elif isinstance(parent, dict):
                parent["unexpected"] = 1
        except (KeyError, IndexError, TypeError):
            continue
    fast = _fast_run(d)
    try:
        checked = Run._from_dict_checked(d)
    except Exception as exc:  # the checked path refuses: the fast path must not have accepted
        assert fast is None, exc
        with pytest.raises(type(exc)) as err:
            Run.from_dict(d)
        assert str(err.value) == str(exc)
        return
    assert fast is None or fast == checked
    assert Run.from_dict(d) == checked
