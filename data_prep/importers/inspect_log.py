"""inspect_ai eval logs (``.eval`` zip or ``.json``) into runs: one run per sample and epoch.

The fields read are those of inspect_ai's published log schema (``inspect_ai.log.EvalLog``,
``EvalSample``, ``inspect_ai.event.ToolEvent``):

- a ``.json`` log is one ``EvalLog`` object: ``eval`` (``task``, ``run_id``, ``eval_id``, ...) and
  ``samples`` (each ``id``, ``epoch``, ``input``, ``events``, ``metadata``);
- a ``.eval`` log is a zip holding ``header.json`` (the ``EvalLog`` without samples) and one
  ``samples/<id>_epoch_<n>.json`` per sample;
- a sample's tool calls are its ``events`` with ``event: tool``, in order: ``id`` (the call id),
  ``function``, ``arguments``, ``result`` and ``error`` (a ``ToolCallError`` ``{type, message}``).

Mappings: no ``error`` is ``succeeded``; an error of type ``approval`` or ``permission`` (the harness
or an approver refused the call) is ``rejected``; any other error is ``failed``, and its message becomes
the call's result when the call returned none. The task messages are the sample's ``input`` (a string is
one user message; chat messages keep their system/user turns, text parts joined). The declared tools
are those of the sample's first ``model`` event. ``workflow_id`` and ``family`` are the task name;
``domain`` is ``metadata.domain`` (sample, then task) or ``other``. Only top-level events are read: tool
events nested inside others (a subtask's, an agent run as a tool) are counted in
``metadata.nested_tool_events_not_imported``, not imported.

A bad sample is rejected as ``file:line: field: problem``; in a ``.eval`` zip the field is prefixed with
the member (``samples/1_epoch_1.json#$.events[3].arguments``) and the line is within that member.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from data_prep.canonical import StrictJSONError, loads_strict
from data_prep.importers.common import Accepted, Item, Problem, Rejected
from data_prep.importers.labeller import Labeller
from data_prep.importers.traces import TraceCall, build_trace_run, function_tool, parse_json_arguments
from data_prep.importers.yaml_lines import LazyLines, json_error_line

REJECTING_ERRORS = ("approval", "permission")
SAMPLE_MEMBER = re.compile(r"^samples/.+\.json$")
MAX_MEMBER_BYTES = 512 * 1024 * 1024


def _text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return "\n".join(p for p in parts if isinstance(p, str))
    return None


def _messages(sample: dict) -> list[dict]:
    value = sample.get("input")
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise Problem("$.input", "expected a string or a list of chat messages")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise Problem(f"$.input[{i}]", "expected a chat message {role, content}")
        if m["role"] not in ("system", "user", "developer"):
            continue
        text = _text(m.get("content"))
        if text is None:
            raise Problem(f"$.input[{i}].content", "expected a string or a list of content parts")
        out.append({"role": m["role"], "content": text})
    return out


def _tools(events: list) -> list[dict]:
    for e in events:
        if isinstance(e, dict) and e.get("event") == "model" and isinstance(e.get("tools"), list):
            return [
                function_tool(t["name"], t.get("description"), t.get("parameters"))
                for t in e["tools"]
                if isinstance(t, dict) and isinstance(t.get("name"), str) and t["name"]
            ]
    return []


def _nested_tool_events(events: list) -> int:
    """Tool events inside other events (a subtask's, or an agent run as a tool): counted, not imported."""
    n = 0
    stack = [e.get("events") for e in events if isinstance(e, dict)]
    while stack:
        inner = stack.pop()
        for e in inner if isinstance(inner, list) else []:
            if isinstance(e, dict):
                n += e.get("event") == "tool"
                stack.append(e.get("events"))
    return n


def _status(error: Any, where: str) -> str:
    if error is None:
        return "succeeded"
    if not isinstance(error, dict) or not isinstance(error.get("type"), str):
        raise Problem(where, "expected null or a ToolCallError {type, message}")
    return "rejected" if error["type"] in REJECTING_ERRORS else "failed"


def _calls(events: list) -> list[TraceCall]:
    calls = []
    for i, e in enumerate(events):
        w = f"$.events[{i}]"
        if not isinstance(e, dict):
            raise Problem(w, "expected an event object")
        if e.get("event") != "tool":
            continue
        for key in ("id", "function"):
            if not isinstance(e.get(key), str) or not e[key]:
                raise Problem(f"{w}.{key}", "missing or not a non-empty string")
        args = parse_json_arguments(e.get("arguments", {}), f"{w}.arguments")
        status = _status(e.get("error"), f"{w}.error")
        result = e.get("result")
        if status != "succeeded" and result in (None, ""):
            result = {"error": e["error"]}
        calls.append(TraceCall(e["id"], e["function"], args, status, result, w))
    return calls


def convert_sample(
    sample: Any, header: dict, labeller: Labeller, source: str, member: str | None
) -> tuple[dict, str]:
    if not isinstance(sample, dict):
        raise Problem("$", "a sample must be an object")
    if not isinstance(sample.get("id"), str | int) or isinstance(sample.get("id"), bool):
        raise Problem("$.id", "expected a string or integer sample id")
    epoch = sample.get("epoch", 1)
    if not isinstance(epoch, int) or isinstance(epoch, bool):
        raise Problem("$.epoch", "expected an integer")
    events = sample.get("events")
    if not isinstance(events, list):
        raise Problem("$.events", "missing or not a list (a log written without events has no tool calls)")
    ev = header.get("eval") if isinstance(header.get("eval"), dict) else {}
    task = ev.get("task") if isinstance(ev.get("task"), str) and ev.get("task") else Path(source).stem
    log_id = next(
        (ev[k] for k in ("run_id", "eval_id", "task_id") if isinstance(ev.get(k), str) and ev[k]), None
    )
    meta = sample.get("metadata") if isinstance(sample.get("metadata"), dict) else {}
    task_meta = ev.get("metadata") if isinstance(ev.get("metadata"), dict) else {}
    domain = next(
        (m["domain"] for m in (meta, task_meta) if isinstance(m.get("domain"), str) and m["domain"]), "other"
    )
    return build_trace_run(
        run_id=f"inspect-{log_id or Path(source).stem}-{sample['id']}-e{epoch}",
        workflow_id=task,
        domain=domain,
        messages=_messages(sample),
        tools=_tools(events),
        calls=_calls(events),
        labeller=labeller,
        provenance={
            "source": "inspect-log",
            "file": Path(source).name,
            **({"member": member} if member else {}),
        },
        metadata={
            "sample_id": sample["id"],
            "epoch": epoch,
            "model": ev.get("model"),
            "sample_metadata": meta,
            **(
                {"nested_tool_events_not_imported": nested} if (nested := _nested_tool_events(events)) else {}
            ),
        },
        where="$.events",
    )


def _load(text: str, member: str | None) -> tuple[Any, LazyLines]:
    lines = LazyLines(text)
    try:
        return loads_strict(text), lines
    except StrictJSONError as exc:
        raise _Located(json_error_line(text, exc, lines), _field(member, exc.path), exc.problem) from None


class _Located(Exception):
    def __init__(self, line: int, field: str, problem: str):
        super().__init__(problem)
        self.line, self.field, self.problem = line, field, problem


def _field(member: str | None, field: str) -> str:
    return f"{member}#{field}" if member else field


def _samples_of_json(path: Path) -> Iterator[tuple[Any, dict, LazyLines, str, str | None]]:
    """(sample, header, lines, sample path prefix, member) for a ``.json`` log."""
    log, lines = _load(path.read_text(encoding="utf-8"), None)
    if not isinstance(log, dict):
        raise _Located(1, "$", "an inspect log must be a JSON object (EvalLog)")
    samples = log.get("samples")
    if samples is None:
        samples = []
    if not isinstance(samples, list):
        raise _Located(lines.line("$.samples"), "$.samples", "expected a list of samples")
    for i, s in enumerate(samples):
        yield s, log, lines, f"$.samples[{i}]", None


def _samples_of_zip(path: Path) -> Iterator[tuple[Any, dict, LazyLines, str, str | None]]:
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise _Located(0, "$", "not a .eval log (not a zip archive)") from None
    with zf:
        names = zf.namelist()
        header: dict = {}
        if "header.json" in names:
            value, _ = _load(_read_member(zf, "header.json"), "header.json")
            header = value if isinstance(value, dict) else {}
        members = sorted((n for n in names if SAMPLE_MEMBER.match(n)), key=_member_order)
        if not members:
            raise _Located(0, "$", "a .eval log without samples/*.json members")
        for name in members:
            try:
                value, lines = _load(_read_member(zf, name), name)
            except _Located as exc:
                yield exc, header, None, "$", name
                continue
            yield value, header, lines, "$", name


def _read_member(zf: zipfile.ZipFile, name: str) -> str:
    info = zf.getinfo(name)
    if info.file_size > MAX_MEMBER_BYTES:
        raise _Located(0, _field(name, "$"), f"member is {info.file_size} bytes, over {MAX_MEMBER_BYTES}")
    try:
        return zf.read(name).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Located(0, _field(name, "$"), f"not UTF-8 (byte {exc.start})") from None
    except (zipfile.BadZipFile, OSError, ValueError) as exc:  # a corrupt member
        raise _Located(0, _field(name, "$"), f"cannot read member: {exc}") from None


def _member_order(name: str) -> tuple:
    """samples/<id>_epoch_<n>.json in id then epoch order (numeric where the id is a number)."""
    stem = name[len("samples/") : -len(".json")]
    sid, _, epoch = stem.rpartition("_epoch_")
    key = (0, int(sid), "") if sid.isdigit() else (1, 0, sid or stem)
    return (*key, int(epoch) if epoch.isdigit() else 0, name)


def iter_items(paths: list[Path], labeller: Labeller | None = None) -> Iterator[Item]:
    labeller = labeller or Labeller()
    seen: dict[str, str] = {}
    for path in paths:
        src = str(path)
        reader = _samples_of_zip if path.suffix == ".eval" else _samples_of_json
        try:
            for sample, header, lines, prefix, member in reader(path):
                if isinstance(sample, _Located):
                    yield Rejected(src, sample.line, sample.field, sample.problem)
                    continue
                yield from _one(sample, header, lines, prefix, member, labeller, src, seen)
        except _Located as exc:
            yield Rejected(src, exc.line, exc.field, exc.problem)
        except (OSError, UnicodeDecodeError) as exc:
            yield Rejected(src, 0, "$", f"cannot read: {getattr(exc, 'strerror', None) or exc}")


def _one(sample, header, lines, prefix, member, labeller, src, seen) -> Iterator[Item]:
    def at(field: str) -> str:
        return prefix + field[1:] if field.startswith("$") else field

    line = lines.line(prefix)
    try:
        run, gold = convert_sample(sample, header, labeller, src, member)
    except Problem as exc:
        yield Rejected(src, lines.line(at(exc.field)), _field(member, at(exc.field)), exc.problem)
        return
    except Exception as exc:  # quarantine, never a traceback; the reason names the failure
        yield Rejected(src, line, _field(member, prefix), f"cannot convert: {type(exc).__name__}: {exc}")
        return
    if run["run_id"] in seen:
        yield Rejected(src, line, _field(member, prefix + ".id"), f"duplicate of {seen[run['run_id']]}")
        return
    seen[run["run_id"]] = f"{src}:{line}"
    yield Accepted("run", run, src, line, gold)
