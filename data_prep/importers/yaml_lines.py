"""Safe YAML loading that remembers the line of every field, for ``file:line: field: problem`` errors
(and ``json_line_index``, the same for JSON agent logs).

Duplicate keys are errors (as in strict JSON); time stamps stay ISO strings (``2026-03-14T09:30:00Z``)
instead of becoming datetime objects.
"""

from __future__ import annotations

import bisect
import datetime as dt
import json
import re
from typing import Any

import yaml


class YamlError(ValueError):
    def __init__(self, line: int, field: str, problem: str):
        super().__init__(f"{line}: {field}: {problem}")
        self.line = line
        self.field = field
        self.problem = problem


def _join(path: str, key: str | int) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}"


def load_with_lines(text: str) -> tuple[Any, dict[str, int]]:
    """Parse one YAML document; return ``(value, {field path: 1-based line})`` (root path ``$``)."""
    try:
        docs = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise YamlError((mark.line + 1) if mark else 0, "$", f"invalid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise YamlError(0, "$", f"invalid YAML: {exc}") from None
    docs = [d for d in docs if d is not None]
    if not docs:
        raise YamlError(1, "$", "empty document")
    if len(docs) > 1:
        raise YamlError(docs[1].start_mark.line + 1, "$", "more than one YAML document (one case per file)")
    lines: dict[str, int] = {}
    constructor = yaml.SafeLoader("")
    try:
        return _build(docs[0], "$", lines, constructor), lines
    except RecursionError:
        raise YamlError(1, "$", "nesting too deep") from None


MAX_NODES = 200_000  # aliases can make a small file expand without bound ("billion laughs")


def _build(node: yaml.Node, path: str, lines: dict[str, int], c: yaml.SafeLoader) -> Any:
    if len(lines) >= MAX_NODES:
        raise YamlError(node.start_mark.line + 1, path, f"document expands to more than {MAX_NODES} values")
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise YamlError(key_node.start_mark.line + 1, path, "mapping keys must be plain strings")
            key = str(c.construct_object(key_node))
            if key in out:
                raise YamlError(key_node.start_mark.line + 1, _join(path, key), "duplicate key")
            sub = _join(path, key)
            out[key] = _build(value_node, sub, lines, c)
            lines[sub] = key_node.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(v, _join(path, i), lines, c) for i, v in enumerate(node.value)]
    try:
        value = c.construct_object(node)
    except yaml.YAMLError as exc:
        raise YamlError(node.start_mark.line + 1, path, f"bad value: {exc}") from None
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if value.microsecond else "%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        raise YamlError(node.start_mark.line + 1, path, "non-finite number")
    if isinstance(value, bytes | set):
        raise YamlError(node.start_mark.line + 1, path, f"unsupported YAML type {type(value).__name__}")
    return value


def line_of(lines: dict[str, int], field: str) -> int:
    """The line of ``field`` or of its closest recorded ancestor."""
    path = field
    while path:
        if path in lines:
            return lines[path]
        cut = max(path.rfind("."), path.rfind("["))
        if cut <= 0:
            break
        path = path[:cut]
    return lines.get("$", 0)


# --- the same for JSON documents (agent logs), built only when a line is asked for -------------------
_JSON_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|[{}\[\],:]|[^\s{}\[\],:"]+')


def json_line_index(text: str) -> dict[str, int]:
    """``{field path: 1-based line}`` for every value of a JSON text (keys' lines for mapping members).

    A one-pass token scan, not a parser: it assumes the text already parsed (``json.loads``) and only
    recovers where each field is, for ``file:line: field: problem`` messages.
    """
    newlines = [m.start() for m in re.finditer("\n", text)]
    lines: dict[str, int] = {}
    stack: list[list] = []  # [kind, path, index or key, expecting_key]

    def here() -> str:
        if not stack:
            return "$"
        kind, path, slot, _ = stack[-1]
        return f"{path}[{slot}]" if kind == "arr" else f"{path}.{slot}"

    for m in _JSON_TOKEN.finditer(text):
        tok, line = m.group(), bisect.bisect_right(newlines, m.start()) + 1
        top = stack[-1] if stack else None
        if tok in ",:":
            if tok == "," and top is not None:
                if top[0] == "arr":
                    top[2] += 1
                else:
                    top[3] = True
            continue
        if tok in "}]":
            if stack:
                stack.pop()
            continue
        if top is not None and top[0] == "obj" and top[3]:
            try:
                top[2] = json.loads(tok)
            except ValueError:
                top[2] = tok
            top[3] = False
            lines.setdefault(here(), line)
            continue
        path = here()
        lines.setdefault(path, line)
        if tok == "{":
            stack.append(["obj", path, None, True])
        elif tok == "[":
            stack.append(["arr", path, 0, False])
    return lines


class LazyLines:
    """Lines of a JSON text's fields, indexed on first use (most records never need one)."""

    def __init__(self, text: str, base: int = 0):
        self._text = text
        self._base = base  # lines before this text in its file (a JSONL record's line - 1)
        self._index: dict[str, int] | None = None

    def line(self, field: str) -> int:
        if self._index is None:
            self._index = json_line_index(self._text)
        return self._base + (line_of(self._index, field) or 1)


def json_error_line(text: str, exc: Exception, lines: LazyLines) -> int:
    """The line of a strict-JSON error: a syntax error's own line, else its field's."""
    if getattr(exc, "path", "$") == "$":
        try:
            json.loads(text)
        except json.JSONDecodeError as err:
            return lines._base + err.lineno
        except ValueError:
            pass
        return lines._base + 1
    return lines.line(exc.path)
