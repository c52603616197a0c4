"""OpenAI Agents SDK traces into runs (``--format openai-agents``).

The files below are written here by hand, small, in the shape the SDK's tracing exports, as published in
``openai/openai-agents-python``: ``src/agents/tracing/spans.py`` (``SpanImpl.export()``: ``object:
"trace.span", id, trace_id, parent_id, started_at, ended_at, span_data, error``),
``src/agents/tracing/traces.py`` (``object: "trace", id, workflow_name, group_id, metadata``) and
``src/agents/tracing/span_data.py`` (``FunctionSpanData.export()``: ``type: "function", name, input,
output, mcp_data``; ``AgentSpanData``: ``name, handoffs, tools, output_type``; ``GenerationSpanData``:
``input, output, model, ...``; ``HandoffSpanData``: ``from_agent, to_agent``; ``GuardrailSpanData``:
``name, triggered``); the backend exporter (``processors.py``) posts ``{"data": [items]}``.
"""

import json

from data_prep.build import main as build_main
from data_prep.importer import main as importer_main
from data_prep.importers import openai_agents
from data_prep.importers.common import Accepted, Rejected
from data_prep.importers.labeller import load_labeller
from data_prep.integrity import verify_run
from data_prep.reconcile import expected_label, reconcile
from data_prep.records import Run, iter_runs

TRACE = "trace_0a1b2c3d4e5f60718293a4b5c6d7e8f9"
LABELS = "rules:\n  - tool: refund_order\n    policy_class: policy_relevant\n"


def span(sid, data, at, parent="span_agent", error=None, trace=TRACE):
    return {
        "object": "trace.span",
        "id": sid,
        "trace_id": trace,
        "parent_id": parent,
        "started_at": f"2026-06-01T10:00:{at:02d}.000000+00:00",
        "ended_at": f"2026-06-01T10:00:{at:02d}.500000+00:00",
        "span_data": data,
        "error": error,
    }


def fn(name, args, output, mcp=None):
    return {"type": "function", "name": name, "input": json.dumps(args), "output": output, "mcp_data": mcp}


def items(trace=TRACE):
    log = {"call_id": "span_refund", "tool_name": "refund_order", "description": "Refunded order 77.",
           "outcome": "succeeded"}  # fmt: skip
    rows = [
        {
            "object": "trace",
            "id": trace,
            "workflow_name": "support-desk",
            "group_id": "conv-5",
            "metadata": None,
        },  # fmt: skip
        span(
            "span_agent",
            {
                "type": "agent",
                "name": "Support",
                "handoffs": ["Billing"],
                "tools": ["get_order", "refund_order", "log_action"],
                "output_type": "str",
            },
            0,
            parent=None,
        ),  # fmt: skip
        span(
            "span_gen",
            {
                "type": "generation",
                "model": "gpt-4.1",
                "input": [
                    {"role": "system", "content": "You are support."},
                    {"role": "user", "content": "Refund order 77."},
                ],
                "output": [],
            },
            1,
        ),  # fmt: skip
        # file order differs from time order: the refund ran after the lookup
        span("span_refund", fn("refund_order", {"order": 77}, '{"refunded": true}'), 4),
        span("span_get", fn("get_order", {"order": 77}, "{'id': 77}", mcp={"server": "orders"}), 2),
        span("span_log", fn("log_action", log, None), 5),
        span("span_guard", {"type": "guardrail", "name": "pii", "triggered": True}, 6),
        span("span_hand", {"type": "handoff", "from_agent": "Support", "to_agent": "Billing"}, 7),
        span(
            "span_fail",
            fn("get_order", {"order": 78}, None),
            8,
            error={"message": "Error running tool", "data": {"error": "timeout"}},
        ),  # fmt: skip
    ]
    for r in rows[1:]:
        r["trace_id"] = trace
    return rows


def write_json(path, doc=None):
    path.write_text(json.dumps({"data": items()} if doc is None else doc, indent=2))
    return path


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_trace_becomes_a_sealed_run(tmp_path):
    labels = tmp_path / "labels.yaml"
    labels.write_text(LABELS)
    (item,) = list(openai_agents.iter_items([write_json(tmp_path / "t.json")], load_labeller(labels)))
    assert isinstance(item, Accepted), str(item)
    run = Run.from_dict(item.record)
    assert verify_run(run) is None
    assert run.run_id == f"openai-agents-{TRACE}" and run.family == "support-desk"
    assert run.task["messages"] == [
        {"role": "system", "content": "You are support."},
        {"role": "user", "content": "Refund order 77."},
    ]
    # time order; the span id is the call id; an errored span is failed with its error as result
    assert [(c.call_id, c.tool, c.status) for c in run.trajectory] == [
        ("span_get", "get_order", "succeeded"),
        ("span_refund", "refund_order", "succeeded"),
        ("span_fail", "get_order", "failed"),
    ]
    assert run.trajectory[1].arguments == {"order": 77} and run.trajectory[1].result == {"refunded": True}
    assert run.trajectory[0].result == "{'id': 77}"  # Python's str() of a dict is kept as text
    assert run.trajectory[2].result == {
        "error": {"message": "Error running tool", "data": {"error": "timeout"}}
    }
    assert [e["position"] for e in run.model_ledger] == [2]  # after the two calls before it
    assert [r["policy_class"] for r in run.env_ledger["records"]] == ["benign", "policy_relevant", "benign"]
    meta = run.metadata
    assert meta["agents"] == ["Support"] and meta["group_id"] == "conv-5" and meta["mcp_calls"] == 1
    assert meta["handoffs"] == [["Support", "Billing"]] and meta["guardrails_triggered"] == ["pii"]
    assert sum(meta["span_types"].values()) == meta["spans"] == 8
    assert reconcile(run).verdict.label == expected_label(run.labels)


def test_jsonl_gathers_a_trace_across_lines_and_splits_traces(tmp_path):
    other = "trace_ffffffffffffffffffffffffffffffff"
    rows = [*items()[3:], *items()[:3], span("s9", fn("get_order", {"order": 1}, "ok"), 1, trace=other)]
    items_ = list(openai_agents.iter_items([write_jsonl(tmp_path / "t.jsonl", rows)]))
    assert [type(i) for i in items_] == [Accepted, Accepted]
    first, second = (Run.from_dict(i.record) for i in items_)
    assert [c.call_id for c in first.trajectory] == ["span_get", "span_refund", "span_fail"]
    assert items_[0].line == 1 and items_[1].line == len(rows)
    # no trace record, no agent span: the default workflow; no logger declared or used: not evaluable
    assert second.family == "openai-agents" and second.model_ledger is None
    assert reconcile(second).verdict.label == "not_evaluable"


def test_bad_span_names_file_line_field(tmp_path):
    rows = items()
    rows[3]["span_data"]["input"] = "{not json"
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    (rej,) = list(openai_agents.iter_items([path]))
    assert isinstance(rej, Rejected) and rej.line == 4
    assert rej.field == "$.span_data.input" and "not valid JSON" in rej.problem
    rows = items()
    rows[5]["started_at"] = "yesterday"
    rows[6]["span_data"] = {"name": "no type"}
    path = write_json(tmp_path / "t.json", {"data": rows})
    (rej,) = list(openai_agents.iter_items([path]))
    assert str(rej).startswith(f"{path}:") and rej.field == "$.data[5].started_at"
    assert '"started_at": "yesterday"' in path.read_text().splitlines()[rej.line - 1]


def test_broken_envelope_adds_nothing_from_its_document(tmp_path):
    rows = items()
    broken = [rows[4], {"object": "trace.span", "id": "x", "span_data": {"type": "custom"}}]
    path = write_jsonl(tmp_path / "t.jsonl", [*rows[:4], broken, "{", *rows[5:]])
    path.write_text(path.read_text().replace('"{"', "{"))  # line 6: not JSON at all
    got = list(openai_agents.iter_items([path]))
    rejected = [(r.line, r.field) for r in got if isinstance(r, Rejected)]
    assert rejected == [(5, "$[1].trace_id"), (6, "$")]
    (run,) = [Run.from_dict(i.record) for i in got if isinstance(i, Accepted)]
    assert "span_get" not in [c.call_id for c in run.trajectory]  # line 5's good span was not half-added


def test_cli_counts_add_up_reruns_are_identical_and_runs_build(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    write_json(src / "a.json")
    bad = items("trace_bad")
    bad[3]["span_data"]["name"] = ""
    write_jsonl(src / "b.jsonl", bad)
    outs = [tmp_path / "c1", tmp_path / "c2"]
    for out in outs:
        argv = ["--format", "openai-agents", str(src), "--out", str(out), "--quiet", "--allow-partial"]
        assert importer_main(argv) == 0
    err = capsys.readouterr().err
    assert f"{src / 'b.jsonl'}:4: $.span_data.name: a function span without a tool name" in err
    c = json.loads((outs[0] / "manifest.json").read_text())["counts"]
    assert c["input_records"] == 2 == c["accepted"] + c["rejected"] and c["runs"] == 1
    tree = [sorted((p.relative_to(o), p.read_bytes()) for p in o.rglob("*") if p.is_file()) for o in outs]
    assert tree[0] == tree[1]
    assert all(verify_run(r) is None for _, r in iter_runs(outs[0] / "runs" / "runs-00000.jsonl"))
    assert build_main(["--corpus", str(outs[0]), "--out", str(tmp_path / "built"), "--no-progress"]) == 0


def test_cli_empty_sources_and_labeller(tmp_path, capsys):
    empty = write_json(tmp_path / "empty.json", {"data": []})
    argv = ["--format", "openai-agents", str(empty), "--out", str(tmp_path / "e1"), "--quiet"]
    assert importer_main(argv) == 1 and "nothing imported" in capsys.readouterr().err
    assert importer_main([*argv[:-2], str(tmp_path / "e2"), "--quiet", "--allow-empty"]) == 0
    labels = tmp_path / "labels.yaml"
    labels.write_text("default: maybe\n")
    argv = ["--format", "openai-agents", str(write_json(tmp_path / "t.json")), "--out", str(tmp_path / "e3"),
            "--labeller", str(labels)]  # fmt: skip
    assert importer_main(argv) == 2 and "labels.yaml:1: $.default" in capsys.readouterr().err
