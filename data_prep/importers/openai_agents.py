"""OpenAI Agents SDK traces into runs: one run per trace.

The input is what the SDK's tracing exports (``Trace.export()`` and ``Span.export()``, the items its
trace processors receive and its backend exporter posts as ``{"data": [...]}``):

- a trace: ``{"object": "trace", "id", "workflow_name", "group_id", "metadata"}``;
- a span: ``{"object": "trace.span", "id", "trace_id", "parent_id", "started_at", "ended_at",
  "span_data", "error"}``, where ``error`` is null or ``{message, data}`` and ``span_data.type`` is
  ``function`` (``name``, ``input``: the arguments as JSON text, ``output``, ``mcp_data``), ``agent``
  (``name``, ``handoffs``, ``tools``, ``output_type``), ``generation`` (``input``/``output`` messages,
  ``model``), ``response``, ``handoff``, ``guardrail`` (``name``, ``triggered``), ``custom``, ...

A ``.json`` file holds one ``{"data": [...]}`` payload, a list of items, or one item; a ``.jsonl`` file
one of those per line (a file-writing trace processor's output). Spans are gathered by ``trace_id``,
wherever they are in the file.

Tool calls are the ``function`` spans, ordered by ``started_at`` (ties by file order): the span id is
the call id (the export carries no other), ``name`` the tool, ``input`` the arguments, ``output`` the
result (JSON when it parses, else the text). A span with an ``error`` is ``failed``; the export has no
word for a refused call, so nothing is ``rejected``. ``workflow_id``/``family``: the trace's
``workflow_name``, else the first agent's name, else ``openai-agents``. Task messages: the system and
user turns of the first ``generation`` span's input (Responses-API runs export none: then no messages).
Declared tools: the agent spans' ``tools``. Other span types are counted in the run's metadata.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from data_prep.importers.common import Accepted, Item, Problem, Rejected, trace_items
from data_prep.importers.labeller import Labeller
from data_prep.importers.traces import (
    TraceCall,
    build_trace_run,
    function_tool,
    parse_json_arguments,
    parse_json_result,
)
from data_prep.importers.yaml_lines import LazyLines

TRACE_OBJECT = "trace"
SPAN_OBJECT = "trace.span"
DEFAULT_WORKFLOW = "openai-agents"


@dataclass
class Span:
    where: str  # field path in its JSON text
    lines: LazyLines
    order: int
    start: datetime
    span_id: str
    data: dict
    error: dict | None

    @property
    def token(self) -> str:
        """A stand-in for ``where`` while converting: unique in its trace (in JSONL every span is at
        ``$`` of its own line), turned back into ``where`` and a line by ``_locate``."""
        return f"span#{self.order}"


@dataclass
class Trace:
    trace_id: str
    spans: list[Span] = field(default_factory=list)
    header: dict | None = None
    header_at: tuple[LazyLines, str] | None = None  # where the trace record is, for errors
    problem: tuple[LazyLines, str, str] | None = None  # (lines, field, problem): the first bad span


def _items(doc: Any) -> list[tuple[Any, str]]:
    """The exported items of one document, with their field paths."""
    if isinstance(doc, list):
        return [(x, f"$[{i}]") for i, x in enumerate(doc)]
    if isinstance(doc, dict) and "object" not in doc and "data" in doc:
        if not isinstance(doc["data"], list):
            raise Problem("$.data", "expected a list of exported traces and spans")
        return [(x, f"$.data[{i}]") for i, x in enumerate(doc["data"])]
    if isinstance(doc, dict):
        return [(doc, "$")]
    raise Problem("$", 'expected an exported trace or span, a list of them, or {"data": [...]}')


def _trace_id(item: Any, w: str) -> str:
    """The trace an item belongs to; a broken envelope raises (the whole document is refused)."""
    if not isinstance(item, dict):
        raise Problem(w, "expected an object")
    kind = item.get("object")
    if kind not in (TRACE_OBJECT, SPAN_OBJECT):
        raise Problem(f"{w}.object", f"expected {TRACE_OBJECT!r} or {SPAN_OBJECT!r}, got {kind!r}")
    key = "id" if kind == TRACE_OBJECT else "trace_id"
    if not isinstance(item.get(key), str) or not item[key]:
        raise Problem(f"{w}.{key}", "missing (every trace and span must name its trace)")
    return item[key]


def collect(doc: Any, lines: LazyLines, traces: dict[str, Trace], counter: list[int]) -> None:
    """Add one document's items to ``traces``: all of them or, when its envelope is broken, none (half a
    document would import traces with calls silently missing). A bad span rejects its trace only."""
    items = [(item, w, _trace_id(item, w)) for item, w in _items(doc)]
    for item, w, tid in items:
        trace = traces.setdefault(tid, Trace(tid))
        if item["object"] == TRACE_OBJECT:
            if trace.header is None:
                trace.header, trace.header_at = item, (lines, w)
            continue
        counter[0] += 1
        try:
            trace.spans.append(_span(item, w, lines, counter[0]))
        except Problem as exc:
            trace.problem = trace.problem or (lines, exc.field, exc.problem)


def _time(value: Any, where: str) -> datetime:
    try:
        if not isinstance(value, str):
            raise ValueError
        t = datetime.fromisoformat(value)
    except ValueError:
        raise Problem(where, "expected an ISO 8601 time") from None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t


def _span(item: dict, w: str, lines: LazyLines, order: int) -> Span:
    sid = item.get("id")
    if not isinstance(sid, str) or not sid:
        raise Problem(f"{w}.id", "missing span id")
    data = item.get("span_data")
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise Problem(f"{w}.span_data.type", "missing (every span_data names its type)")
    err = item.get("error")
    if err is not None and not (isinstance(err, dict) and isinstance(err.get("message"), str)):
        raise Problem(f"{w}.error", "expected null or a SpanError {message, data}")
    return Span(w, lines, order, _time(item.get("started_at"), f"{w}.started_at"), sid, data, err)


def _call(span: Span) -> TraceCall:
    d, w = span.data, f"{span.token}.span_data"
    if not isinstance(d.get("name"), str) or not d["name"]:
        raise Problem(f"{w}.name", "a function span without a tool name")
    args = d.get("input")
    arguments = parse_json_arguments({} if args in (None, "") else args, f"{w}.input")
    result = parse_json_result(d.get("output"))
    if span.error is not None and result is None:
        result = {
            "error": {k: v for k, v in span.error.items() if k in ("message", "data") and v is not None}
        }
    status = "failed" if span.error is not None else "succeeded"
    return TraceCall(span.span_id, d["name"], arguments, status, result, span.token)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def _messages(spans: list[Span]) -> list[dict]:
    for s in spans:
        if s.data["type"] == "generation" and isinstance(s.data.get("input"), list):
            return [
                {"role": m["role"], "content": _text(m.get("content"))}
                for m in s.data["input"]
                if isinstance(m, dict) and m.get("role") in ("system", "user")
            ]
    return []


def _of_type(spans: list[Span], kind: str) -> list[dict]:
    return [s.data for s in spans if s.data["type"] == kind]


def _tools(spans: list[Span]) -> list[dict]:
    names = [t for a in _of_type(spans, "agent") for t in (a.get("tools") or []) if isinstance(t, str) and t]
    return [function_tool(n) for n in dict.fromkeys(names)]


def _metadata(trace: Trace, spans: list[Span], workflow: str | None, agents: list[str]) -> dict:
    """What the run keeps of the spans that are not tool calls."""
    header = trace.header or {}
    return {
        "trace_id": trace.trace_id,
        "workflow_name": workflow,
        "group_id": header.get("group_id"),
        "agents": agents,
        "spans": len(spans),
        "span_types": dict(sorted(Counter(s.data["type"] for s in spans).items())),
        "handoffs": [[h.get("from_agent"), h.get("to_agent")] for h in _of_type(spans, "handoff")],
        "guardrails_triggered": [g.get("name") for g in _of_type(spans, "guardrail") if g.get("triggered")],
        "mcp_calls": sum(1 for f in _of_type(spans, "function") if f.get("mcp_data")),
    }


def convert_trace(trace: Trace, labeller: Labeller, source: str) -> tuple[dict, str]:
    spans = sorted(trace.spans, key=lambda s: (s.start, s.order))
    calls = [_call(s) for s in spans if s.data["type"] == "function"]
    workflow = (trace.header or {}).get("workflow_name")
    workflow = workflow if isinstance(workflow, str) and workflow else None
    agents = list(
        dict.fromkeys(
            a["name"] for a in _of_type(spans, "agent") if isinstance(a.get("name"), str) and a["name"]
        )
    )
    return build_trace_run(
        run_id=f"openai-agents-{trace.trace_id}",
        workflow_id=workflow or (agents[0] if agents else DEFAULT_WORKFLOW),
        messages=_messages(spans),
        tools=_tools(spans),
        calls=calls,
        labeller=labeller,
        provenance={"source": "openai-agents", "file": Path(source).name, "trace_id": trace.trace_id},
        metadata=_metadata(trace, spans, workflow, agents),
        where=spans[0].token,
    )


def iter_items(paths: list[Path], labeller: Labeller | None = None) -> Iterator[Item]:
    labeller = labeller or Labeller()
    yield from trace_items(paths, collect, lambda trace, src, seen: [_one(trace, labeller, src, seen)])


def _locate(trace: Trace, fld: str, default: Span) -> tuple[Span, str]:
    """The span a conversion problem names and the field's real path."""
    head, dot, rest = fld.partition(".")
    span = next((s for s in trace.spans if s.token == head), None)
    return (span, span.where + dot + rest) if span else (default, fld)


def _one(trace: Trace, labeller: Labeller, src: str, seen: dict[str, str]) -> Item:
    """The trace's run, or why not, at the line of the span at fault (else its first span)."""
    if trace.problem is not None:
        lines, fld, problem = trace.problem
        return Rejected(src, lines.line(fld), fld, problem)
    if not trace.spans:
        lines, w = trace.header_at
        return Rejected(src, lines.line(w), f"{w}.id", f"trace {trace.trace_id} has no spans")
    first = min(trace.spans, key=lambda s: s.order)
    line = first.lines.line(first.where)
    try:
        run, gold = convert_trace(trace, labeller, src)
    except Problem as exc:
        at, fld = _locate(trace, exc.field, first)
        return Rejected(src, at.lines.line(fld), fld, exc.problem)
    except Exception as exc:  # quarantine, never a traceback; the reason names the failure
        return Rejected(
            src, line, first.where, f"cannot convert trace {trace.trace_id}: {type(exc).__name__}: {exc}"
        )
    if run["run_id"] in seen:
        return Rejected(src, line, f"{first.where}.trace_id", f"duplicate of {seen[run['run_id']]}")
    seen[run["run_id"]] = f"{src}:{line}"
    return Accepted("run", run, src, line, gold)
