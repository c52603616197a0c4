"""OpenTelemetry traces (OTLP JSON) with GenAI tool spans into runs: one run per trace.

The input is OTLP's JSON encoding of ``TracesData`` / ``ExportTraceServiceRequest`` (a ``.json`` file
holds one, a ``.jsonl`` file one per line, as the collector's file exporter writes them):
``resourceSpans[].scopeSpans[].spans[]``, each span with ``traceId``, ``spanId``, ``name``,
``startTimeUnixNano``, ``status`` and ``attributes`` as ``[{key, value: AnyValue}]``.

Tool calls are the spans of the GenAI semantic conventions' ``execute_tool`` operation
(``gen_ai.operation.name: execute_tool``, or a span named ``execute_tool <tool>``):
``gen_ai.tool.name`` (else the name's suffix), ``gen_ai.tool.call.id``, ``gen_ai.tool.call.arguments``
and ``gen_ai.tool.call.result`` (JSON text or structured values; both opt-in in the conventions, so
missing arguments read as ``{}``). A span whose status code is ``ERROR`` (2) or that carries
``error.type`` is ``failed``; OTLP has no word for a refused call, so nothing is ``rejected``.
Calls are ordered by start time, ties by their order in the file. Spans of one trace may be spread
over several lines or resources; they are gathered by ``traceId``.

``workflow_id``/``family``: the first ``gen_ai.agent.name`` in the trace, else the resource's
``service.name``, else ``otel-trace``. Task messages: the system and user text of the first span with
``gen_ai.input.messages`` (and ``gen_ai.system_instructions``); declared tools: the first
``gen_ai.tool.definitions``, else each called tool by name with its ``gen_ai.tool.description``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
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

TOOL_OPERATION = "execute_tool"
ERROR_CODES = (2, "STATUS_CODE_ERROR")


@dataclass
class Span:
    where: str  # field path in its JSON text
    lines: LazyLines
    order: int
    start: int
    name: str
    attrs: dict
    error: bool
    resource: dict
    attr_pos: dict = field(default_factory=dict)  # attribute key -> its index in the span's list

    def line(self, fld: str) -> int:
        """The line of a field of this span, ``attributes[<key>]`` included."""
        head, sep, key = fld.partition(".attributes[")
        key = key.split("]")[0]
        if sep and key in self.attr_pos:
            return self.lines.line(f"{head}.attributes[{self.attr_pos[key]}]")
        return self.lines.line(fld)


@dataclass
class Trace:
    trace_id: str
    spans: list[Span] = field(default_factory=list)
    problem: tuple[Span | None, str, str] | None = None  # (span, field, problem)


def any_value(v: Any, where: str) -> Any:
    """An OTLP JSON ``AnyValue`` as a plain value."""
    if not isinstance(v, dict) or len(v) > 1:
        raise Problem(where, "expected an AnyValue object with one of stringValue, intValue, ...")
    if not v:
        return None
    ((kind, x),) = v.items()
    if kind == "stringValue" and isinstance(x, str):
        return x
    if kind == "boolValue" and isinstance(x, bool):
        return x
    if kind == "intValue" and (
        isinstance(x, int) and not isinstance(x, bool) or isinstance(x, str) and x.lstrip("-").isdigit()
    ):
        return int(x)
    if kind == "doubleValue" and isinstance(x, int | float | str) and not isinstance(x, bool):
        return float(x)
    if kind == "bytesValue" and isinstance(x, str):
        return x
    if kind == "arrayValue" and isinstance(x, dict):
        return [any_value(e, f"{where}.arrayValue.values[{i}]") for i, e in enumerate(x.get("values") or [])]
    if kind == "kvlistValue" and isinstance(x, dict):
        return attributes(x.get("values") or [], f"{where}.kvlistValue.values")
    raise Problem(f"{where}.{kind}", "not a valid AnyValue")


def attributes(items: Any, where: str) -> dict:
    if not isinstance(items, list):
        raise Problem(where, "expected a list of {key, value}")
    out: dict = {}
    for i, kv in enumerate(items):
        w = f"{where}[{i}]"
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            raise Problem(w, "expected {key, value}")
        if kv["key"] in out:
            raise Problem(f"{w}.key", f"attribute {kv['key']!r} repeats")
        out[kv["key"]] = any_value(kv.get("value", {}), f"{w}.value")
    return out


def _nanos(v: Any, where: str) -> int:
    if isinstance(v, int) and not isinstance(v, bool) or isinstance(v, str) and v.isdigit():
        return int(v)
    raise Problem(where, "expected nanoseconds since the epoch (a decimal string or integer)")


def _list(obj: dict, key: str, where: str) -> list:
    v = obj.get(key, [])
    if not isinstance(v, list):
        raise Problem(f"{where}.{key}", "expected a list")
    return v


def collect(doc: Any, lines: LazyLines, traces: dict[str, Trace], counter: list[int]) -> None:
    """Add the spans of one OTLP JSON document to ``traces``.

    A broken envelope or a span without a trace id raises Problem and adds nothing from the document
    (half a document would import traces with spans silently missing); a span's own problems (bad
    attributes, times) reject its trace only.
    """
    pending: list[tuple[Any, str, dict]] = []
    if not isinstance(doc, dict):
        raise Problem("$", "expected an OTLP JSON object with resourceSpans")
    if "resourceSpans" not in doc:
        raise Problem("$.resourceSpans", "missing (not OTLP JSON traces)")
    for i, rs in enumerate(_list(doc, "resourceSpans", "$")):
        rw = f"$.resourceSpans[{i}]"
        if not isinstance(rs, dict):
            raise Problem(rw, "expected an object")
        res = rs.get("resource") or {}
        resource = (
            attributes(res.get("attributes", []), f"{rw}.resource.attributes")
            if isinstance(res, dict)
            else {}
        )
        for j, ss in enumerate(_list(rs, "scopeSpans", rw)):
            sw = f"{rw}.scopeSpans[{j}]"
            if not isinstance(ss, dict):
                raise Problem(sw, "expected an object")
            for k, sp in enumerate(_list(ss, "spans", sw)):
                w = f"{sw}.spans[{k}]"
                if not isinstance(sp, dict) or not isinstance(sp.get("traceId"), str) or not sp["traceId"]:
                    raise Problem(f"{w}.traceId", "missing (a span must name its trace)")
                pending.append((sp, w, resource))
    for sp, w, resource in pending:
        _add_span(sp, w, lines, resource, traces, counter)


def _add_span(
    sp: Any, w: str, lines: LazyLines, resource: dict, traces: dict[str, Trace], counter: list[int]
) -> None:
    trace = traces.setdefault(sp["traceId"].lower(), Trace(sp["traceId"].lower()))
    counter[0] += 1
    try:
        status = sp.get("status") or {}
        span = Span(
            where=w,
            lines=lines,
            order=counter[0],
            start=_nanos(sp.get("startTimeUnixNano"), f"{w}.startTimeUnixNano"),
            name=sp.get("name") if isinstance(sp.get("name"), str) else "",
            attrs=attributes(sp.get("attributes", []), f"{w}.attributes"),
            error=isinstance(status, dict) and status.get("code") in ERROR_CODES,
            resource=resource,
            attr_pos={kv["key"]: i for i, kv in enumerate(sp.get("attributes", []))},
        )
    except Problem as exc:
        if trace.problem is None:
            trace.problem = (Span(w, lines, counter[0], 0, "", {}, False, {}), exc.field, exc.problem)
        return
    trace.spans.append(span)


def _tool_name(span: Span) -> str | None:
    a = span.attrs
    if a.get("gen_ai.operation.name") != TOOL_OPERATION and not span.name.startswith(TOOL_OPERATION + " "):
        return None
    name = a.get("gen_ai.tool.name") or span.name[len(TOOL_OPERATION) + 1 :].strip()
    if not isinstance(name, str) or not name:
        raise Problem(f"{span.where}.attributes", "an execute_tool span without gen_ai.tool.name")
    return name


def _attr_where(span: Span, key: str) -> str:
    return f"{span.where}.attributes[{key}]"


def _call(span: Span, tool: str) -> TraceCall:
    a = span.attrs
    cid = a.get("gen_ai.tool.call.id")
    if not isinstance(cid, str) or not cid:
        raise Problem(
            _attr_where(span, "gen_ai.tool.call.id"),
            "missing: a call without an id cannot be matched to a ledger entry",
        )
    args = a.get("gen_ai.tool.call.arguments", {})
    where = _attr_where(span, "gen_ai.tool.call.arguments")
    failed = span.error or "error.type" in a
    result = parse_json_result(a.get("gen_ai.tool.call.result"))
    if failed and result is None and "error.type" in a:
        result = {"error": {"type": a["error.type"]}}
    return TraceCall(
        cid, tool, parse_json_arguments(args, where), "failed" if failed else "succeeded", result, span.where
    )


def _json_attr(span: Span, key: str) -> Any:
    v = span.attrs[key]
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError as exc:
            raise Problem(_attr_where(span, key), f"not valid JSON: {exc}") from None
    return v


def _messages(spans: list[Span]) -> list[dict]:
    for s in spans:
        if "gen_ai.input.messages" not in s.attrs and "gen_ai.system_instructions" not in s.attrs:
            continue
        out = []
        if "gen_ai.system_instructions" in s.attrs:
            out.append(
                {"role": "system", "content": _parts_text(_json_attr(s, "gen_ai.system_instructions"))}
            )
        msgs = _json_attr(s, "gen_ai.input.messages") if "gen_ai.input.messages" in s.attrs else []
        if not isinstance(msgs, list):
            raise Problem(_attr_where(s, "gen_ai.input.messages"), "expected a list of messages")
        for m in msgs:
            if isinstance(m, dict) and m.get("role") in ("system", "user"):
                out.append({"role": m["role"], "content": _parts_text(m.get("parts", m.get("content")))})
        return out
    return []


def _parts_text(parts: Any) -> str:
    if isinstance(parts, str):
        return parts
    if isinstance(parts, list):
        texts = [p.get("content") for p in parts if isinstance(p, dict) and p.get("type") == "text"]
        return "\n".join(t for t in texts if isinstance(t, str))
    return ""


def _tools(spans: list[Span]) -> list[dict]:
    for s in spans:
        if "gen_ai.tool.definitions" in s.attrs:
            defs = _json_attr(s, "gen_ai.tool.definitions")
            out = []
            for d in defs if isinstance(defs, list) else []:
                fn = d.get("function") if isinstance(d, dict) and isinstance(d.get("function"), dict) else d
                if isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"]:
                    out.append(function_tool(fn["name"], fn.get("description"), fn.get("parameters")))
            return out
    out, names = [], set()
    for s in spans:
        name = _tool_name(s)
        if name and name not in names:
            names.add(name)
            out.append(function_tool(name, s.attrs.get("gen_ai.tool.description")))
    return out


def convert_trace(trace: Trace, labeller: Labeller, source: str) -> tuple[dict, str]:
    spans = sorted(trace.spans, key=lambda s: (s.start, s.order))
    calls = []
    for s in spans:
        tool = _tool_name(s)
        if tool is not None:
            calls.append(_call(s, tool))
    agent = next(
        (
            s.attrs["gen_ai.agent.name"]
            for s in spans
            if isinstance(s.attrs.get("gen_ai.agent.name"), str) and s.attrs["gen_ai.agent.name"]
        ),
        None,
    )
    service = next(
        (s.resource.get("service.name") for s in spans if isinstance(s.resource.get("service.name"), str)),
        None,
    )
    return build_trace_run(
        run_id=f"otel-{trace.trace_id}",
        workflow_id=agent or service or "otel-trace",
        messages=_messages(spans),
        tools=_tools(spans),
        calls=calls,
        labeller=labeller,
        provenance={"source": "otel-genai", "file": Path(source).name, "trace_id": trace.trace_id},
        metadata={"trace_id": trace.trace_id, "service": service, "agent": agent, "spans": len(spans)},
        where=spans[0].where if spans else "$",
    )


def iter_items(paths: list[Path], labeller: Labeller | None = None) -> Iterator[Item]:
    labeller = labeller or Labeller()
    yield from trace_items(paths, collect, lambda trace, src, seen: _one(trace, labeller, src, seen))


def _one(trace: Trace, labeller: Labeller, src: str, seen: dict[str, str]) -> Iterator[Item]:
    if trace.problem is not None:
        span, fld, problem = trace.problem
        yield Rejected(src, span.lines.line(fld), fld, problem)
        return
    first = min(trace.spans, key=lambda s: s.order)
    line = first.lines.line(first.where)
    try:
        run, gold = convert_trace(trace, labeller, src)
    except Problem as exc:
        at = next(
            (s for s in trace.spans if exc.field.startswith(s.where + ".") or exc.field == s.where), first
        )
        yield Rejected(src, at.line(exc.field), exc.field, exc.problem)
        return
    except Exception as exc:  # quarantine, never a traceback; the reason names the failure
        yield Rejected(
            src, line, first.where, f"cannot convert trace {trace.trace_id}: {type(exc).__name__}: {exc}"
        )
        return
    if run["run_id"] in seen:
        yield Rejected(src, line, f"{first.where}.traceId", f"duplicate of {seen[run['run_id']]}")
        return
    seen[run["run_id"]] = f"{src}:{line}"
    yield Accepted("run", run, src, line, gold)
