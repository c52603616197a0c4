"""Strict JSON parsing and RFC 8785 canonical digests.

Digests bind a *domain* (what kind of object is hashed) to the canonical bytes, so a record digest can
never be replayed as an argument digest. Canonical bytes come from the ``rfc8785`` package; objects
without floats and with ASCII keys take an equivalent ``json.dumps`` fast path (tested against
``rfc8785`` on generated objects), because digests sit on the hot path of verification.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from json.encoder import c_make_encoder, encode_basestring
from typing import Any

import rfc8785

MAX_SAFE_INT = 2**53 - 1
DIGEST_PREFIX = "sha256:"


class StrictJSONError(ValueError):
    """A JSON text that is not I-JSON: duplicate keys, NaN/Infinity, unsafe integers, bad syntax."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class _DupKeys(dict):
    """A parsed object that had a repeated key; reported with its path after parsing."""

    dup_key: str = ""


def _pairs_hook(pairs: list[tuple[str, Any]]) -> dict:
    obj: dict = {}
    for key, value in pairs:
        if key in obj:
            bad = _DupKeys(obj)
            bad.dup_key = key
            return bad
        obj[key] = value
    return obj


def _reject_constant(name: str) -> Any:
    raise StrictJSONError("$", f"non-finite number {name} is not allowed")


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key)}]"


class _Invalid(Exception):
    pass


_REPR_FLOAT = 1  # holds floats whose JCS text is repr() (or int() for integral values)
_SLOW = 2  # holds a float outside that range or a non-ASCII key: only rfc8785 may canonicalize


def _scan(obj: Any) -> int:
    """Fast I-JSON check without paths; returns ``_REPR_FLOAT``/``_SLOW`` flags."""
    t = type(obj)
    if t is str or t is bool or obj is None:
        return 0
    if t is int:
        if -MAX_SAFE_INT <= obj <= MAX_SAFE_INT:
            return 0
        raise _Invalid
    if t is dict:
        flags = 0
        for k in obj:
            if type(k) is not str:
                raise _Invalid
            if not k.isascii():
                flags |= _SLOW
        return flags | _scan_values(obj.values())
    if t is list:
        return _scan_values(obj)
    if t is float:
        if not math.isfinite(obj):
            raise _Invalid
        # ECMAScript prints shortest round-trip digits in fixed notation for 1e-6 <= |x| < 1e21;
        # Python's repr does the same for 1e-4 <= |x| < 1e16 (integral values print as integers).
        a = abs(obj)
        if a == 0.0 or 1e-4 <= a < 1e16:
            return _REPR_FLOAT
        return _SLOW
    raise _Invalid  # subclasses (e.g. a dict that recorded a duplicate key) take the slow path


def _scan_values(values: Any) -> int:
    """``_scan`` over a container's values, with the scalar checks inlined (most values are scalars)."""
    flags = 0
    for v in values:
        tv = type(v)
        if tv is str or tv is bool or v is None:
            continue
        if tv is int:
            if -MAX_SAFE_INT <= v <= MAX_SAFE_INT:
                continue
            raise _Invalid
        flags |= _scan(v)
    return flags


def _integral_floats_to_int(obj: Any) -> Any:
    t = type(obj)
    if t is float:
        return int(obj) if obj.is_integer() else obj
    if t is dict:
        return {k: _integral_floats_to_int(v) for k, v in obj.items()}
    if t is list:
        return [_integral_floats_to_int(v) for v in obj]
    return obj


def _check_with_paths(value: Any, path: str) -> bool:
    slow = False
    stack = [(value, path)]
    while stack:
        obj, where = stack.pop()
        if isinstance(obj, dict):
            if isinstance(obj, _DupKeys):
                raise StrictJSONError(_join(where, obj.dup_key), "duplicate key")
            for k, v in obj.items():
                if not isinstance(k, str):
                    raise StrictJSONError(where, f"non-string key {k!r}")
                if not k.isascii():
                    slow = True
                stack.append((v, _join(where, k)))
        elif isinstance(obj, list):
            stack.extend((v, _join(where, i)) for i, v in enumerate(obj))
        elif isinstance(obj, bool) or obj is None or isinstance(obj, str):
            continue
        elif isinstance(obj, int):
            if not -MAX_SAFE_INT <= obj <= MAX_SAFE_INT:
                raise StrictJSONError(where, f"integer {obj} is outside +-(2^53-1)")
        elif isinstance(obj, float):
            if not math.isfinite(obj):
                raise StrictJSONError(where, "non-finite number is not allowed")
            slow = True
        else:
            raise StrictJSONError(where, f"unsupported type {type(obj).__name__}")
    return slow


def _fast_pairs(pairs: list[tuple[str, Any]]) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _Invalid
    return obj


def _fast_int(text: str) -> int:
    value = int(text)
    if -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
        return value
    raise _Invalid


def _fast_float(text: str) -> float:
    value = float(text)
    if math.isfinite(value):
        return value
    raise _Invalid


# Made once: ``json.loads`` with hooks builds a decoder and its C scanner on every call.
_FAST_DECODE = json.JSONDecoder(
    object_pairs_hook=_fast_pairs,
    parse_int=_fast_int,
    parse_float=_fast_float,
    parse_constant=_reject_constant,
).decode


def loads_strict(text: str | bytes) -> Any:
    """Parse one JSON text strictly (I-JSON): errors carry the JSON path of the offending field.

    The common case is one C-speed parse with checking hooks; only a violation triggers the slower
    second parse that locates the offending field.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StrictJSONError("$", f"not UTF-8 (byte {exc.start})") from None
    try:
        value = _FAST_DECODE(text)
    except _Invalid:
        pass
    except StrictJSONError:
        raise
    except json.JSONDecodeError as exc:
        raise StrictJSONError("$", f"invalid JSON at column {exc.colno}: {exc.msg}") from None
    except (RecursionError, ValueError, MemoryError):
        raise StrictJSONError("$", "nesting too deep or number out of range") from None
    else:
        if "\\u" in text and _SURROGATE_ESCAPE.search(text):
            _check_surrogates(value)
        return value
    try:
        value = json.loads(text, object_pairs_hook=_pairs_hook, parse_constant=_reject_constant)
    except StrictJSONError:
        raise
    except (RecursionError, ValueError, MemoryError):
        raise StrictJSONError("$", "nesting too deep or number out of range") from None
    _check_with_paths(value, "$")
    raise StrictJSONError("$", "not I-JSON")  # unreachable: the path check raises first


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_surrogates(value: Any) -> None:
    """Raise StrictJSONError at the first string (or key) holding a lone surrogate: JSON lets
    ``"\\ud800"`` through, but it is not Unicode text and cannot be written back as UTF-8."""
    stack = [(value, "$")]
    while stack:
        obj, where = stack.pop()
        if type(obj) is str:
            if _LONE_SURROGATE.search(obj):
                raise StrictJSONError(where, "lone surrogate in string (not valid Unicode)")
        elif type(obj) is dict:
            for k, v in obj.items():
                if _LONE_SURROGATE.search(k):
                    raise StrictJSONError(where, "lone surrogate in a key (not valid Unicode)")
                stack.append((v, _join(where, k)))
        elif type(obj) is list:
            stack.extend((v, _join(where, i)) for i, v in enumerate(obj))


def canonical_bytes(value: Any) -> bytes:
    """RFC 8785 (JCS) bytes of a JSON value; raises StrictJSONError for non-I-JSON values."""
    try:
        flags = _scan(value)
    except (_Invalid, RecursionError):
        flags = _SLOW if _check_with_paths(value, "$") else 0
    if flags == _REPR_FLOAT:
        return _encode_plain(_integral_floats_to_int(value))
    if flags:
        try:
            return rfc8785.dumps(value)
        except (rfc8785.CanonicalizationError, ValueError) as exc:
            raise StrictJSONError("$", f"cannot canonicalize: {exc}") from None
    return _encode_plain(value)


def canonical_chat(messages: Any) -> bytes:
    """``canonical_bytes`` of chat messages (a list of ``{"role": str, "content": str}``), without the
    general I-JSON scan when they have exactly that shape."""
    if type(messages) is not list:
        return canonical_bytes(messages)
    for m in messages:
        if (
            type(m) is not dict
            or len(m) != 2
            or type(m.get("role")) is not str
            or type(m.get("content")) is not str
        ):
            return canonical_bytes(messages)
    return _encode_plain(messages)


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
# The C encoder behind _ENCODER.encode, made once: ``JSONEncoder.encode`` rebuilds it on every call,
# which costs more than encoding a small object. No circular-reference markers: canonical values are
# trees (a cycle ends in RecursionError instead of ValueError).
_C_ENCODE = (
    c_make_encoder(None, _ENCODER.default, encode_basestring, None, ":", ",", True, False, True)
    if c_make_encoder is not None
    else None
)



def _encode_text(value: Any) -> str:
    if _C_ENCODE is None or type(value) is str:
        return _ENCODER.encode(value)
    return "".join(_C_ENCODE(value, 0))


def _encode_plain(value: Any) -> bytes:
    text = _encode_text(value)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise StrictJSONError("$", "lone surrogate in string") from None


_DOMAIN_HASHES: dict[str, Any] = {}


def domain_hash(domain: str) -> Any:
    """A SHA-256 object that has absorbed the domain prefix (``copy()`` it before use)."""
    h = _DOMAIN_HASHES.get(domain)
    if h is None:
        h = _DOMAIN_HASHES[domain] = hashlib.sha256(b"ledgerwright/" + domain.encode("ascii") + b"\x00")
    return h


def digest(domain: str, value: Any) -> str:
    """Domain-separated SHA-256 of the canonical bytes: ``sha256:<hex>``."""
    h = domain_hash(domain).copy()
    h.update(canonical_bytes(value))
    return DIGEST_PREFIX + h.hexdigest()


def dumps_canonical(value: Any) -> str:
    """Canonical JSON text, the form every JSONL writer of the project emits (stable bytes)."""
    return canonical_bytes(value).decode("utf-8")
