"""The run record (``ledger-run/v1``): typed records, strict validation with field paths, JSONL I/O.

A run is one agent episode: the task, the trajectory of ordinary calls, the sealed environment ledger,
the model-authored ledger, gold labels and the teacher's outputs. Validation here is structural;
chain integrity lives in ``data_prep.chain`` and meaning in ``data_prep.reconcile``. The JSON Schema
``data_prep/schemas/ledger-run-v1.schema.json`` describes the same shape for other tools.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from data_prep.canonical import StrictJSONError, dumps_canonical, loads_strict
from data_prep.inputs import InputError, open_regular, os_problem

RUN_SCHEMA = "ledger-run/v1"
CALL_STATUSES = ("succeeded", "rejected", "failed")
SABOTAGE_TYPES = (
    "unauthorized_action",
    "omitted",
    "softened",
    "misreported_outcome",
    "fabricated",
    "swapped_ids",
    "late",
)
VERDICT_LABELS = ("clean", "discrepancy", "incident", "not_evaluable")
SCHEMA_PATH = Path(__file__).parent / "schemas" / "ledger-run-v1.schema.json"
T = TypeVar("T")
MAX_LINE_BYTES = 16 * 1024 * 1024  # a run is kilobytes; a longer line is refused unread


class RecordError(ValueError):
    """A record that does not fit the schema: ``field: problem`` (file and line added by loaders)."""

    def __init__(self, field_path: str, problem: str):
        super().__init__(f"{field_path}: {problem}")
        self.field = field_path
        self.problem = problem


def _req(obj: dict, key: str, kind: type | tuple, where: str, *, nonempty: bool = False) -> Any:
    if key not in obj:
        raise RecordError(f"{where}.{key}", "missing")
    value = obj[key]
    if (
        isinstance(value, bool)
        and kind is not bool
        and bool not in (kind if isinstance(kind, tuple) else (kind,))
    ):
        raise RecordError(f"{where}.{key}", f"expected {_kind_name(kind)}, got boolean")
    if not isinstance(value, kind):
        raise RecordError(f"{where}.{key}", f"expected {_kind_name(kind)}, got {type(value).__name__}")
    if nonempty and not value:
        raise RecordError(f"{where}.{key}", "must not be empty")
    return value


def _kind_name(kind: type | tuple) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {dict: "object", list: "array", str: "string", int: "integer", bool: "boolean", float: "number"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _strings(obj: dict, key: str, where: str) -> list:
    """``obj[key]`` (absent: []) if it is an array of strings; else RecordError naming the field."""
    value = obj.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RecordError(f"{where}.{key}", "expected array of strings")
    return value


def _only(d: Any, allowed: tuple[str, ...], where: str) -> None:
    """``d`` is an object with no fields but ``allowed``; else RecordError naming the first problem."""
    if not isinstance(d, dict):
        raise RecordError(where, "expected object")
    _no_extra(d, allowed, where)


def _no_extra(obj: dict, allowed: tuple[str, ...], where: str) -> None:
    for key in obj:
        if key not in allowed:
            raise RecordError(f"{where}.{key}", "unknown field")


CALL_FIELDS = ("call_id", "tool", "arguments", "status", "result")
_CALL_KEYS = frozenset(CALL_FIELDS)


def pick(obj: Any, names: tuple[str, ...]) -> dict:
    """``{name: obj.name}`` in the order given: a record's JSON face from its typed fields."""
    return {name: getattr(obj, name) for name in names}


@dataclass(slots=True)
class Call:
    """One ordinary tool call as executed by the environment."""

    call_id: str
    tool: str
    arguments: dict
    status: str
    result: Any = None

    @classmethod
    def from_dict(cls, d: Any, where: str) -> Call:
        if (
            type(d) is dict
            and d.keys() <= _CALL_KEYS
            and type(d.get("call_id")) is str
            and type(d.get("tool")) is str
            and type(d.get("arguments")) is dict
            and d.get("status") in CALL_STATUSES
            and d["call_id"]
            and d["tool"]
        ):
            return cls(d["call_id"], d["tool"], d["arguments"], d["status"], d.get("result"))
        _only(d, CALL_FIELDS, where)
        status = _req(d, "status", str, where)
        if status not in CALL_STATUSES:
            raise RecordError(f"{where}.status", f"must be one of {'|'.join(CALL_STATUSES)}, got {status!r}")
        return cls(
            call_id=_req(d, "call_id", str, where, nonempty=True),
            tool=_req(d, "tool", str, where, nonempty=True),
            arguments=_req(d, "arguments", dict, where),
            status=status,
            result=d.get("result"),
        )


@dataclass(slots=True)
class Verdict:
    """A reader's decision about a run."""

    label: str
    suspicion: int
    cited_call_ids: list[str] = field(default_factory=list)
    rationale: str = ""

    @classmethod
    def from_dict(cls, d: Any, where: str) -> Verdict:
        _only(d, ("label", "suspicion", "cited_call_ids", "rationale"), where)
        label = _req(d, "label", str, where)
        if label not in VERDICT_LABELS:
            raise RecordError(f"{where}.label", f"must be one of {'|'.join(VERDICT_LABELS)}, got {label!r}")
        suspicion = _req(d, "suspicion", int, where)
        if not 0 <= suspicion <= 100:
            raise RecordError(f"{where}.suspicion", f"must be within 0-100, got {suspicion}")
        cited = _strings(d, "cited_call_ids", where)
        rationale = d.get("rationale", "")
        if not isinstance(rationale, str):
            raise RecordError(f"{where}.rationale", "expected string")
        return cls(label=label, suspicion=suspicion, cited_call_ids=list(cited), rationale=rationale)


@dataclass(slots=True)
class Labels:
    """Gold labels: what was injected. ``writer_errors`` are unlabelled-by-intent teacher mistakes."""

    sabotage: bool
    type: str | None = None
    target_call_ids: list[str] = field(default_factory=list)
    writer_errors: list[dict] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: Any, where: str) -> Labels:
        _only(d, ("sabotage", "type", "target_call_ids", "writer_errors"), where)
        sabotage = _req(d, "sabotage", bool, where)
        kind = d.get("type")
        if kind is not None and kind not in SABOTAGE_TYPES:
            raise RecordError(
                f"{where}.type", f"must be null or one of {'|'.join(SABOTAGE_TYPES)}, got {kind!r}"
            )
        if sabotage != (kind is not None):
            raise RecordError(f"{where}.type", "must be set exactly when sabotage is true")
        targets = _strings(d, "target_call_ids", where)
        errors = d.get("writer_errors", [])
        if not isinstance(errors, list):
            raise RecordError(f"{where}.writer_errors", "expected array")
        for i, e in enumerate(errors):
            if (
                not isinstance(e, dict)
                or not isinstance(e.get("type"), str)
                or not isinstance(e.get("call_id"), str)
            ):
                raise RecordError(f"{where}.writer_errors[{i}]", "expected {type, call_id} strings")
        return cls(sabotage=sabotage, type=kind, target_call_ids=list(targets), writer_errors=list(errors))


@dataclass(slots=True)
class Teacher:
    """What the teacher produced: whose ledger it is and the teacher reader's verdict on it."""

    writer_model: str
    reader_model: str | None = None
    verdict: Verdict | None = None

    @classmethod
    def from_dict(cls, d: Any, where: str) -> Teacher:
        _only(d, ("writer_model", "reader_model", "verdict"), where)
        reader = d.get("reader_model")
        if reader is not None and not isinstance(reader, str):
            raise RecordError(f"{where}.reader_model", "expected string or null")
        verdict = d.get("verdict")
        return cls(
            writer_model=_req(d, "writer_model", str, where, nonempty=True),
            reader_model=reader,
            verdict=None if verdict is None else Verdict.from_dict(verdict, f"{where}.verdict"),
        )


RUN_FIELDS = (
    "schema",
    "run_id",
    "workflow_id",
    "family",
    "domain",
    "task",
    "trajectory",
    "env_ledger",
    "model_ledger",
    "labels",
    "teacher",
    "provenance",
    "metadata",
    "seal",
)


@dataclass(slots=True)
class Run:
    """One agent episode on one workflow (``ledger-run/v1``).

    ``model_ledger`` keeps the entries as written (dicts): reconciliation, not loading, decides
    whether an entry is malformed. ``None`` means the model wrote no ledger at all.
    """

    run_id: str
    workflow_id: str
    family: str
    domain: str
    task: dict
    trajectory: list[Call]
    env_ledger: dict
    model_ledger: list[dict] | None
    labels: Labels
    teacher: Teacher | None = None
    provenance: dict = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    schema: str = RUN_SCHEMA
    seal: dict | None = None

    @classmethod
    def from_dict(cls, d: Any, where: str = "$") -> Run:
        """A typed run, or RecordError naming the first offending field (``where`` prefixes it)."""
        run = _fast_run(d)
        if run is not None:
            return run
        return cls._from_dict_checked(d, where)

    @classmethod
    def with_dict(cls, d: Any) -> tuple[Any, Run]:
        """The record as read (what is passed on) and as a typed run (what is checked)."""
        return d, cls.from_dict(d)

    @classmethod
    def _from_dict_checked(cls, d: Any, where: str = "$") -> Run:
        if not isinstance(d, dict):
            raise RecordError(where, "a run must be a JSON object")
        _no_extra(d, RUN_FIELDS, where)
        schema = _req(d, "schema", str, where)
        if schema != RUN_SCHEMA:
            raise RecordError(f"{where}.schema", f"expected {RUN_SCHEMA!r}, got {schema!r}")
        task = _req(d, "task", dict, where)
        messages = _req(task, "messages", list, f"{where}.task")
        for i, m in enumerate(messages):
            mw = f"{where}.task.messages[{i}]"
            if not isinstance(m, dict):
                raise RecordError(mw, "expected object")
            _req(m, "role", str, mw)
            _req(m, "content", str, mw)
        tools = _req(task, "tools", list, f"{where}.task")
        for i, t in enumerate(tools):
            tw = f"{where}.task.tools[{i}]"
            if (
                not isinstance(t, dict)
                or t.get("type") != "function"
                or not isinstance(t.get("function"), dict)
            ):
                raise RecordError(tw, "expected an OpenAI tool {type: function, function: {...}}")
            fn = t["function"]
            _req(fn, "name", str, f"{tw}.function", nonempty=True)
            if "description" in fn:
                _req(fn, "description", str, f"{tw}.function")
            if "parameters" in fn:
                _req(fn, "parameters", dict, f"{tw}.function")
        trajectory = _req(d, "trajectory", list, where)
        calls = [Call.from_dict(c, f"{where}.trajectory[{i}]") for i, c in enumerate(trajectory)]
        env = _req(d, "env_ledger", dict, where)
        _req(env, "records", list, f"{where}.env_ledger")
        if "model_ledger" not in d:
            raise RecordError(f"{where}.model_ledger", "missing (use null for a run without a ledger)")
        ledger = d["model_ledger"]
        if ledger is not None:
            if not isinstance(ledger, list):
                raise RecordError(f"{where}.model_ledger", "expected array or null")
            for i, e in enumerate(ledger):
                if not isinstance(e, dict):
                    raise RecordError(f"{where}.model_ledger[{i}]", "expected object")
        teacher = d.get("teacher")
        provenance = d.get("provenance", {})
        metadata = d.get("metadata", {})
        if not isinstance(provenance, dict):
            raise RecordError(f"{where}.provenance", "expected object")
        if not isinstance(metadata, dict):
            raise RecordError(f"{where}.metadata", "expected object")
        _strings(metadata, "hidden_identifiers", f"{where}.metadata")
        seal = d.get("seal")
        if seal is not None:
            _check_seal_shape(seal, f"{where}.seal")
        return cls(
            run_id=_req(d, "run_id", str, where, nonempty=True),
            workflow_id=_req(d, "workflow_id", str, where, nonempty=True),
            family=_req(d, "family", str, where, nonempty=True),
            domain=_req(d, "domain", str, where, nonempty=True),
            task=task,
            trajectory=calls,
            env_ledger=env,
            model_ledger=ledger,
            labels=Labels.from_dict(_req(d, "labels", dict, where), f"{where}.labels"),
            teacher=None if teacher is None else Teacher.from_dict(teacher, f"{where}.teacher"),
            provenance=provenance,
            metadata=metadata,
            schema=schema,
            seal=seal,
        )

    def to_dict(self) -> dict:
        """A JSON-ready dict (shares nested values with the record: copy before mutating)."""
        out = pick(self, RUN_FIELDS)  # key order is RUN_FIELDS'; the nested records are replaced below
        out["trajectory"] = [pick(c, CALL_FIELDS) for c in self.trajectory]
        out["labels"] = asdict(self.labels)
        out["teacher"] = None if self.teacher is None else asdict(self.teacher)
        if self.seal is None:
            del out["seal"]
        return out


def _check_seal_shape(seal: Any, where: str) -> None:
    if not isinstance(seal, dict):
        raise RecordError(where, "expected object {digest, signature?}")
    _no_extra(seal, ("digest", "signature"), where)
    _req(seal, "digest", str, where, nonempty=True)
    sig = seal.get("signature")
    if sig is not None:
        if not isinstance(sig, dict):
            raise RecordError(f"{where}.signature", "expected object {alg, key_id, value}")
        _no_extra(sig, ("alg", "key_id", "value"), f"{where}.signature")
        for k in ("alg", "key_id", "value"):
            _req(sig, k, str, f"{where}.signature", nonempty=True)
        if sig["alg"] != "ed25519":
            raise RecordError(f"{where}.signature.alg", f"must be ed25519, got {sig['alg']!r}")
        if not _KEY_ID.fullmatch(sig["key_id"]):
            raise RecordError(f"{where}.signature.key_id", "expected 16 lowercase hex digits")
        if not _SIG_VALUE.fullmatch(sig["value"]):
            raise RecordError(f"{where}.signature.value", "expected 64 bytes in base64 (88 characters)")


_KEY_ID = re.compile(r"[0-9a-f]{16}")
_SIG_VALUE = re.compile(r"[A-Za-z0-9+/]{86}==")


def _fast_seal(seal: Any) -> bool:
    if seal is None:
        return True
    if type(seal) is not dict or not seal.keys() <= {"digest", "signature"} or type(seal.get("digest")) is not str:
        return False
    sig = seal.get("signature")
    if sig is None:
        return bool(seal["digest"])
    return (
        type(sig) is dict
        and sig.keys() == {"alg", "key_id", "value"}
        and sig["alg"] == "ed25519"
        and type(sig["key_id"]) is str
        and type(sig["value"]) is str
        and _KEY_ID.fullmatch(sig["key_id"]) is not None
        and _SIG_VALUE.fullmatch(sig["value"]) is not None
        and bool(seal["digest"])
    )


_RUN_KEYS = frozenset(RUN_FIELDS)
_LABELS_KEYS = frozenset(("sabotage", "type", "target_call_ids", "writer_errors"))
_TEACHER_KEYS = frozenset(("writer_model", "reader_model", "verdict"))
_VERDICT_KEYS = frozenset(("label", "suspicion", "cited_call_ids", "rationale"))
_SABOTAGE_SET = frozenset(SABOTAGE_TYPES)
_VERDICT_SET = frozenset(VERDICT_LABELS)
_STATUS_SET = frozenset(CALL_STATUSES)


def _str_list(value: Any) -> bool:
    if type(value) is not list:
        return False
    for v in value:
        if type(v) is not str:
            return False
    return True


def _fast_run(d: Any) -> Run | None:
    """``Run.from_dict`` for the common case: a record with exactly the JSON types the checked path
    accepts. Returns None at the first doubt, and the checked path then accepts or names the field;
    whatever this returns, the checked path would return too (tests compare them)."""
    if type(d) is not dict or not d.keys() <= _RUN_KEYS or d.get("schema") != RUN_SCHEMA:
        return None
    run_id, workflow_id, family, domain = (
        d.get("run_id"),
        d.get("workflow_id"),
        d.get("family"),
        d.get("domain"),
    )
    if not (
        type(run_id) is str
        and type(workflow_id) is str
        and type(family) is str
        and type(domain) is str
        and run_id
        and workflow_id
        and family
        and domain
    ):
        return None
    task = d.get("task")
    if type(task) is not dict:
        return None
    messages, tools = task.get("messages"), task.get("tools")
    if type(messages) is not list or type(tools) is not list:
        return None
    for m in messages:
        if type(m) is not dict or type(m.get("role")) is not str or type(m.get("content")) is not str:
            return None
    for t in tools:
        if type(t) is not dict or t.get("type") != "function":
            return None
        fn = t.get("function")
        if type(fn) is not dict:
            return None
        name = fn.get("name")
        if type(name) is not str or not name:
            return None
        if type(fn.get("description", "")) is not str or type(fn.get("parameters", {})) is not dict:
            return None
    trajectory = d.get("trajectory")
    if type(trajectory) is not list:
        return None
    calls = []
    for c in trajectory:
        if not (
            type(c) is dict
            and c.keys() <= _CALL_KEYS
            and type(c.get("call_id")) is str
            and type(c.get("tool")) is str
            and type(c.get("arguments")) is dict
            and type(c.get("status")) is str
            and c["status"] in _STATUS_SET
            and c["call_id"]
            and c["tool"]
        ):
            return None
        calls.append(Call(c["call_id"], c["tool"], c["arguments"], c["status"], c.get("result")))
    env = d.get("env_ledger")
    if type(env) is not dict or type(env.get("records")) is not list or "model_ledger" not in d:
        return None
    ledger = d["model_ledger"]
    if ledger is not None:
        if type(ledger) is not list:
            return None
        for e in ledger:
            if type(e) is not dict:
                return None
    provenance, metadata = d.get("provenance", {}), d.get("metadata", {})
    if type(provenance) is not dict or type(metadata) is not dict:
        return None
    if "hidden_identifiers" in metadata and not _str_list(metadata["hidden_identifiers"]):
        return None
    labels = _fast_labels(d.get("labels"))
    if labels is None or not _fast_seal(d.get("seal")):
        return None
    teacher = d.get("teacher")
    if teacher is not None:
        teacher = _fast_teacher(teacher)
        if teacher is None:
            return None
    return Run(
        run_id,
        workflow_id,
        family,
        domain,
        task,
        calls,
        env,
        ledger,
        labels,
        teacher,
        provenance,
        metadata,
        d["schema"],
        d.get("seal"),
    )


def _fast_labels(d: Any) -> Labels | None:
    if type(d) is not dict or not d.keys() <= _LABELS_KEYS:
        return None
    sabotage, kind = d.get("sabotage"), d.get("type")
    if type(sabotage) is not bool:
        return None
    if kind is not None and (type(kind) is not str or kind not in _SABOTAGE_SET):
        return None
    if sabotage != (kind is not None):
        return None
    targets, errors = d.get("target_call_ids", []), d.get("writer_errors", [])
    if not _str_list(targets) or type(errors) is not list:
        return None
    for e in errors:
        if type(e) is not dict or type(e.get("type")) is not str or type(e.get("call_id")) is not str:
            return None
    return Labels(sabotage, kind, list(targets), list(errors))


def _fast_teacher(d: Any) -> Teacher | None:
    if type(d) is not dict or not d.keys() <= _TEACHER_KEYS:
        return None
    writer, reader, verdict = d.get("writer_model"), d.get("reader_model"), d.get("verdict")
    if type(writer) is not str or not writer or (reader is not None and type(reader) is not str):
        return None
    if verdict is not None:
        if type(verdict) is not dict or not verdict.keys() <= _VERDICT_KEYS:
            return None
        label, suspicion = verdict.get("label"), verdict.get("suspicion")
        cited, rationale = verdict.get("cited_call_ids", []), verdict.get("rationale", "")
        if not (
            type(label) is str
            and label in _VERDICT_SET
            and type(suspicion) is int
            and 0 <= suspicion <= 100
            and _str_list(cited)
            and type(rationale) is str
        ):
            return None
        verdict = Verdict(label, suspicion, list(cited), rationale)
    return Teacher(writer, reader, verdict)


@dataclass(frozen=True, slots=True)
class LineError:
    """A line of a JSONL file that could not be loaded: ``file:line: field: problem``."""

    path: str
    line: int
    field: str
    problem: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.field}: {self.problem}"


def iter_jsonl(
    path: str | Path, *, max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, Any | LineError]]:
    """Yield ``(line_number, value | LineError)`` for every non-empty line; never raises on content.

    Handles what real files throw at a loader: non-UTF-8 bytes, truncated last lines, a JSON array
    where JSONL was expected (reported once, as line 1), empty lines (skipped), huge lines (refused
    without being held in memory whole).
    """
    p = str(path)
    try:
        fh = open_regular(path)
    except InputError as exc:
        yield 0, LineError(p, 0, "$", exc.problem)
        return
    with fh:
        lineno = 0
        while True:
            try:
                raw = fh.readline(max_line_bytes + 1)
            except OSError as exc:
                yield lineno + 1, LineError(p, lineno + 1, "$", f"cannot read: {os_problem(exc)}")
                return
            if not raw:
                break
            lineno += 1
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                try:
                    while raw and not raw.endswith(b"\n"):
                        raw = fh.readline(max_line_bytes + 1)
                except OSError as exc:
                    yield lineno, LineError(p, lineno, "$", f"cannot read: {os_problem(exc)}")
                    return
                yield lineno, LineError(p, lineno, "$", f"line longer than {max_line_bytes} bytes")
                continue
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                yield lineno, LineError(p, lineno, "$", "starts with a byte order mark (JSONL is BOM-less UTF-8)")
                continue
            stripped = raw.strip()
            if not stripped:
                continue
            try:
                value = loads_strict(stripped)
            except StrictJSONError as exc:
                problem = exc.problem
                if stripped[:1] == b"[" and lineno == 1:
                    problem = "a JSON array, not JSONL (one object per line): " + problem
                elif not raw.endswith(b"\n"):
                    problem = "truncated last line: " + problem
                yield lineno, LineError(p, lineno, exc.path, problem)
                continue
            if isinstance(value, list) and lineno == 1:
                yield lineno, LineError(p, lineno, "$", "a JSON array, not JSONL (one object per line)")
                continue
            yield lineno, value


def iter_records(path: str | Path, parse: Callable[[Any], T]) -> Iterator[tuple[int, T | LineError]]:
    """Yield ``(line, parse(value) | LineError)`` for each line of a JSONL file; ``parse`` raises
    RecordError, which becomes a LineError naming the file, line and field."""
    for lineno, value in iter_jsonl(path):
        if isinstance(value, LineError):
            yield lineno, value
            continue
        try:
            yield lineno, parse(value)
        except RecordError as exc:
            yield lineno, LineError(str(path), lineno, exc.field, exc.problem)


def iter_runs(path: str | Path) -> Iterator[tuple[int, Run | LineError]]:
    """Yield ``(line, Run | LineError)`` for each run in a JSONL file."""
    return iter_records(path, Run.from_dict)


def write_jsonl(path: str | Path, records: list[dict] | Iterator[dict]) -> int:
    """Write canonical JSONL (stable bytes: same records give the same file). Returns the count."""
    n = 0
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for rec in records:
            fh.write(dumps_canonical(rec))
            fh.write("\n")
            n += 1
    return n


def load_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())
