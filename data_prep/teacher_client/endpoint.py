"""One Chat Completions request with bounded retries, every attempt reported.

Transient failures (HTTP 408, 409, 425, 429 and 5xx, timeouts, dropped connections, a body that is not
a chat completion) are retried with exponential backoff, honouring Retry-After; what still fails after
``max_attempts``, and any other HTTP error at once, comes back as a provider error (a value, never an
exception), so the caller records and counts it.

The API key only ever goes into the Authorization header. Every text handed back (response bodies,
error details) has the key replaced by ``[REDACTED]`` *after* JSON decoding, in every decoded string
and key, so no log, cache or output can carry it even when a server echoes it ``\\u``-escaped; error
text that is not JSON and holds escapes is withheld.

Bounds: ``timeout_s`` is the deadline of a whole attempt, not of each read (a socket still receiving
bytes is shut down when it passes: a dripping server cannot hold an attempt longer); an answer is read
at most ``max_response_bytes`` far (a larger one is ``response_too_large``, recorded as a truncated
answer, never held in full); a body that is not UTF-8 is a ``malformed_response``.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from data_prep.canonical import StrictJSONError, loads_strict
from data_prep.teacher_client.settings import RetryPolicy, SettingsError

try:  # the maintained fork (what huggingface_hub installs) and the original expose the same API
    import httpx2 as httpx
except ImportError:  # pragma: no cover - depends on the environment
    import httpx

REDACTED = "[REDACTED]"
TRANSIENT_STATUS = frozenset({408, 409, 425, 429})
DETAIL_CHARS = 500
ERROR_BODY_BYTES = 64 * 1024  # of a non-200 answer, only the start is kept for the detail
TOKEN_FIELDS = ("max_tokens", "max_completion_tokens")


class _TooLarge(Exception):
    pass


class _Deadline(Exception):
    pass


def redact_value(value: Any, key: str | None) -> Any:
    """``value`` (decoded JSON) with ``key`` replaced in every string and object key."""
    if not key:
        return value
    if isinstance(value, str):
        return value.replace(key, REDACTED) if key in value else value
    if isinstance(value, dict):
        return {redact_value(k, key): redact_value(v, key) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_value(v, key) for v in value]
    return value


def chat_url(endpoint: str) -> str:
    """The chat completions URL of ``endpoint`` (a base such as ``http://host:8000/v1`` or the full URL)."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SettingsError(
            f"endpoint: expected an http(s) URL such as http://127.0.0.1:8000/v1, got {endpoint!r}"
        )
    path = parts.path.rstrip("/")
    if not path.endswith("/chat/completions"):
        path += "/chat/completions"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def public_url(url: str) -> str:
    """``url`` without user info, query or fragment: what a manifest may record."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta seconds or an HTTP date); None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        return None
    return max(0.0, seconds)


def backoff_s(policy: RetryPolicy, attempt: int, retry_after: float | None = None) -> float:
    """The wait after failed attempt ``attempt`` (1-based)."""
    if retry_after is not None:
        return min(retry_after, policy.retry_after_max_s)
    return min(policy.backoff_base_s * 2 ** (attempt - 1), policy.backoff_max_s)


def is_transient_status(status: int) -> bool:
    return status in TRANSIENT_STATUS or 500 <= status <= 599


def completion_problem(body: Any) -> str | None:
    """Why ``body`` is not a chat completion (None when it is one)."""
    if not isinstance(body, dict):
        return "body is not a JSON object"
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return "choices missing or empty"
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return "choices[0].message missing"
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        return "choices[0].message.content is not a string"
    return None


@dataclass
class Reply:
    """The outcome of one request after retries: a chat completion body, or a provider error."""

    body: dict | None
    error: dict | None  # {kind, http_status, detail}
    attempts: int

    @property
    def ok(self) -> bool:
        return self.body is not None


class ChatEndpoint:
    """A thread-safe client for one endpoint; ``post`` blocks through its retries. Setting ``stop``
    cuts a backoff wait short and starts no new attempt (the request in flight still completes)."""

    def __init__(
        self,
        endpoint: str,
        *,
        api_key: str | None,
        policy: RetryPolicy,
        on_attempt: Callable[[dict], None] | None = None,
        max_connections: int = 8,
        stop: threading.Event | None = None,
    ):
        self.url = chat_url(endpoint)
        self.stop = stop or threading.Event()
        self._key = api_key or None
        self.policy = policy
        self.on_attempt = on_attempt
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(policy.timeout_s, connect=policy.connect_timeout_s),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            follow_redirects=False,
        )

    def redact(self, text: str) -> str:
        """Error text with the key removed: JSON is decoded, redacted and re-encoded (so escaped forms
        of the key go too); other text with a backslash escape in it is withheld entirely."""
        if not self._key:
            return text
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            if "\\" in text or "%" in text:
                return "[detail withheld: not JSON and holds escapes]"
            return text.replace(self._key, REDACTED)
        return json.dumps(redact_value(value, self._key), ensure_ascii=False)

    def close(self) -> None:
        self._client.close()

    def _report(self, record: dict) -> None:
        if self.on_attempt is not None:
            self.on_attempt(record)

    def _read(self, resp: Any, limit: int, deadline: float) -> bytes:
        """The body, up to ``limit`` bytes (``_TooLarge`` past it), before ``deadline`` (``_Deadline``).
        A watchdog shuts the socket down at the deadline, so a read blocked on a dripping server ends."""
        sock = None
        stream = resp.extensions.get("network_stream") if hasattr(resp, "extensions") else None
        if stream is not None:
            with contextlib.suppress(Exception):
                sock = stream.get_extra_info("socket")
        timer = None
        if sock is not None:

            def cut() -> None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

            timer = threading.Timer(max(0.0, deadline - time.monotonic()), cut)
            timer.daemon = True
            timer.start()
        chunks, size = [], 0
        try:
            for chunk in resp.iter_bytes():
                size += len(chunk)
                if size > limit:
                    raise _TooLarge
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise _Deadline
        except httpx.HTTPError:
            if time.monotonic() >= deadline:
                raise _Deadline from None
            raise
        finally:
            if timer is not None:
                timer.cancel()
        return b"".join(chunks)

    def _attempt(self, payload: bytes) -> tuple[dict | None, dict | None, float | None]:
        """One HTTP exchange: (completion body, None, None) or (None, error, retry_after seconds)."""
        policy = self.policy
        deadline = time.monotonic() + policy.timeout_s
        timeout = httpx.Timeout(policy.timeout_s, connect=min(policy.connect_timeout_s, policy.timeout_s))
        deadline_error = {
            "kind": "timeout",
            "http_status": None,
            "detail": f"no complete answer within the {policy.timeout_s:g} s deadline",
        }
        try:
            with self._client.stream("POST", self.url, content=payload, timeout=timeout) as resp:
                status = resp.status_code
                limit = policy.max_response_bytes if status == 200 else ERROR_BODY_BYTES
                try:
                    raw = self._read(resp, limit, deadline)
                except _TooLarge:
                    if status != 200:
                        raw = b""
                    else:
                        detail = f"answer larger than {policy.max_response_bytes} bytes (not kept)"
                        return None, {"kind": "response_too_large", "http_status": 200, "detail": detail}, None
                retry_after = resp.headers.get("retry-after")
        except _Deadline:
            return None, deadline_error, None
        except httpx.TimeoutException as exc:
            return None, {"kind": "timeout", "http_status": None, "detail": type(exc).__name__}, None
        except httpx.HTTPError as exc:
            detail = self.redact(f"{type(exc).__name__}: {exc}")[:DETAIL_CHARS]
            return None, {"kind": "connection_error", "http_status": None, "detail": detail}, None
        if status != 200:
            error = {
                "kind": f"http_{status}",
                "http_status": status,
                "detail": self.redact(raw.decode("utf-8", "replace"))[:DETAIL_CHARS],
            }
            return None, error, parse_retry_after(retry_after)
        try:
            body = loads_strict(raw)  # strict UTF-8: invalid bytes are malformed, never "ok"
        except StrictJSONError as exc:
            return (
                None,
                {"kind": "malformed_response", "http_status": 200, "detail": str(exc)[:DETAIL_CHARS]},
                None,
            )
        body = redact_value(body, self._key)
        problem = completion_problem(body)
        if problem is not None:
            return None, {"kind": "malformed_response", "http_status": 200, "detail": problem}, None
        return body, None, None

    @staticmethod
    def _swap_token_field(body: dict, error: dict) -> dict | None:
        """The body with the other token-limit field, when a 400 names it (once per request)."""
        if error.get("http_status") != 400:
            return None
        detail = str(error.get("detail") or "")
        for have, other in (TOKEN_FIELDS, TOKEN_FIELDS[::-1]):
            if have in body and other in detail:
                swapped = {k: v for k, v in body.items() if k != have}
                swapped[other] = body[have]
                return swapped
        return None

    def post(self, body: dict, *, key: str, tag: str) -> Reply:
        """Send ``body``; retry transient failures; report each attempt as ``{key, tag, attempt, ...}``.
        A 400 that names the other token-limit field is answered once, at once, with that field."""
        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        error: dict | None = None
        attempt = 0
        swapped = False
        limit = self.policy.max_attempts
        while attempt < limit:
            attempt += 1
            if self.stop.is_set():  # the collection is being interrupted: no new attempt
                return Reply(None, {"kind": "interrupted", "http_status": None, "detail": ""}, attempt - 1)
            t0 = time.monotonic()
            result, error, retry_after = self._attempt(payload)
            latency = round(time.monotonic() - t0, 4)
            record = {"key": key, "tag": tag, "attempt": attempt, "latency_s": latency}
            if result is not None:
                self._report({**record, "result": "ok", "http_status": 200})
                return Reply(result, None, attempt)
            assert error is not None
            other = None if swapped else self._swap_token_field(body, error)
            if other is not None:
                swapped, limit = True, limit + 1
                payload = json.dumps(other, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
                self._report({**record, "result": "retry", **error, "retry_after_s": None, "wait_s": 0.0})
                continue
            transient = error["kind"] in ("timeout", "connection_error", "malformed_response") or (
                error["http_status"] is not None and is_transient_status(error["http_status"])
            )
            last = attempt == limit
            wait = backoff_s(self.policy, attempt, retry_after) if transient and not last else 0.0
            self._report(
                {
                    **record,
                    "result": "retry" if transient and not last else "provider_error",
                    **error,
                    "retry_after_s": retry_after,
                    "wait_s": round(wait, 4),
                }
            )
            if not transient or last:
                break
            self.stop.wait(wait)
        return Reply(None, error, attempt)
