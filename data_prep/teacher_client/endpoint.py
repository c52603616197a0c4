"""One Chat Completions request with bounded retries, every attempt reported.

Transient failures (HTTP 408, 409, 425, 429 and 5xx, timeouts, dropped connections, a body that is not
a chat completion) are retried with exponential backoff, honouring Retry-After; what still fails after
``max_attempts``, and any other HTTP error at once, comes back as a provider error (a value, never an
exception), so the caller records and counts it.

The API key only ever goes into the Authorization header. Every text handed back (response bodies,
error details) has the key replaced by ``[REDACTED]`` before it is parsed, so no log, cache or output
can carry it even when a server echoes it.
"""

from __future__ import annotations

import email.utils
import json
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
        return text.replace(self._key, REDACTED) if self._key else text

    def close(self) -> None:
        self._client.close()

    def _report(self, record: dict) -> None:
        if self.on_attempt is not None:
            self.on_attempt(record)

    def _attempt(self, payload: bytes) -> tuple[dict | None, dict | None, float | None]:
        """One HTTP exchange: (completion body, None, None) or (None, error, retry_after seconds)."""
        try:
            resp = self._client.post(self.url, content=payload)
        except httpx.TimeoutException as exc:
            return None, {"kind": "timeout", "http_status": None, "detail": type(exc).__name__}, None
        except httpx.HTTPError as exc:
            detail = self.redact(f"{type(exc).__name__}: {exc}")[:DETAIL_CHARS]
            return None, {"kind": "connection_error", "http_status": None, "detail": detail}, None
        text = self.redact(resp.text)
        if resp.status_code != 200:
            retry_after = parse_retry_after(resp.headers.get("retry-after"))
            error = {
                "kind": f"http_{resp.status_code}",
                "http_status": resp.status_code,
                "detail": text[:DETAIL_CHARS],
            }
            return None, error, retry_after
        try:
            body = loads_strict(text)
        except StrictJSONError as exc:
            return (
                None,
                {"kind": "malformed_response", "http_status": 200, "detail": str(exc)[:DETAIL_CHARS]},
                None,
            )
        problem = completion_problem(body)
        if problem is not None:
            return None, {"kind": "malformed_response", "http_status": 200, "detail": problem}, None
        return body, None, None

    def post(self, body: dict, *, key: str, tag: str) -> Reply:
        """Send ``body``; retry transient failures; report each attempt as ``{key, tag, attempt, ...}``."""
        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        error: dict | None = None
        attempt = 0
        for attempt in range(1, self.policy.max_attempts + 1):
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
            transient = error["kind"] in ("timeout", "connection_error", "malformed_response") or (
                error["http_status"] is not None and is_transient_status(error["http_status"])
            )
            last = attempt == self.policy.max_attempts
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
