"""A minimal OpenAI-compatible Chat Completions server (the HTTP side of ``eval/serve.py``).

``POST /v1/chat/completions`` (non-streaming, n=1; model, messages, max_tokens or
max_completion_tokens, temperature, top_p, seed, stop) and ``GET /v1/models``. Requests are served on
a bounded pool of threads (``max_workers``; a connection beyond it gets a 503 at once) but generation
is serialized with a lock: one model, one answer at a time. Errors use the OpenAI shape
``{"error": {"message", "type", "param", "code"}}``; a failing generation is a 500, so clients retry
it. Each request is logged as one line on stderr (never headers, never bodies).

Robust to what clients send: every request's body is read (or the connection closed) before any
answer, so keep-alive connections stay in step after a 404; each read of a connection times out
(``read_timeout_s``), so idle and half-open sockets let go of their worker; a body that is not JSON,
nests too deep, holds lone surrogates or anything else unusable gets a 400 that names no internals.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from data_prep.canonical import StrictJSONError, loads_strict

MAX_BODY_BYTES = 32 * 1024 * 1024
READ_TIMEOUT_S = 15.0
MAX_WORKERS = 16
ROLES = ("system", "user", "assistant", "developer")
_BUSY_BODY = (
    b'{"error": {"message": "server busy, retry", "type": "server_error", "param": null, "code": null}}'
)
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Retry-After: 1\r\nContent-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)


class RequestError(ValueError):
    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.param = param
        self.code = code


def _error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: only text parts are understood
        parts = []
        for i, part in enumerate(content):
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise RequestError(400, f"{where}[{i}]: only text content parts are supported", param=where)
            parts.append(part["text"])
        return "".join(parts)
    raise RequestError(400, f"{where}: expected a string", param=where)


def parse_request(
    body: Any,
    *,
    model_id: str,
    max_tokens_default: int,
    max_tokens_limit: int,
    also_served: tuple[str, ...] = (),
) -> dict:
    """Checked generation settings from a request body; RequestError(400/404) names the field.
    ``model`` must be ``model_id`` or one of ``also_served`` (adapters served beside the base)."""
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    served = (model_id, *also_served)
    if body.get("model") not in served:
        names = ", ".join(repr(m) for m in served)
        raise RequestError(
            404, f"model {body.get('model')!r} is not served here (this server serves {names})", param="model",
            code="model_not_found",
        )  # fmt: skip
    if body.get("stream"):
        raise RequestError(400, "streaming is not supported", param="stream")
    if body.get("n", 1) != 1:
        raise RequestError(400, "only n=1 is supported", param="n")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "messages: expected a non-empty array", param="messages")
    clean = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise RequestError(
                400, f"{where}.role: expected one of {', '.join(ROLES)}", param=f"{where}.role"
            )
        role = "system" if m["role"] == "developer" else m["role"]
        clean.append({"role": role, "content": _text(m.get("content"), f"{where}.content")})
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is None:
        max_tokens = max_tokens_default
    if (
        isinstance(max_tokens, bool)
        or not isinstance(max_tokens, int)
        or not 1 <= max_tokens <= max_tokens_limit
    ):
        raise RequestError(
            400, f"max_tokens: expected an integer in 1-{max_tokens_limit}", param="max_tokens"
        )
    temperature = body.get("temperature", 0.0)
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0 <= temperature <= 2:
        raise RequestError(400, "temperature: expected a number in 0-2", param="temperature")
    top_p = body.get("top_p", 1.0)
    if isinstance(top_p, bool) or not isinstance(top_p, int | float) or not 0 < top_p <= 1:
        raise RequestError(400, "top_p: expected a number in (0, 1]", param="top_p")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise RequestError(400, "seed: expected an integer", param="seed")
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise RequestError(400, "stop: expected a string or an array of strings", param="stop")
    return {
        "model": body["model"],
        "messages": clean,
        "max_tokens": max_tokens,
        "temperature": float(temperature),
        "top_p": float(top_p),
        "seed": seed,
        "stop": stop,
    }


class ChatServer(ThreadingHTTPServer):
    """Serves ``generate(messages, max_tokens=, temperature=, top_p=, seed=)`` -> object with ``text``,
    ``prompt_tokens``, ``completion_tokens`` and ``finish_reason``, as ``model_id``; ``extra_models``
    (name -> generate) are served beside it, as vLLM serves LoRA modules beside the base."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        *,
        model_id: str,
        generate: Callable[..., Any],
        max_tokens_default: int = 256,
        max_tokens_limit: int = 4096,
        prompt_error: type[Exception] | tuple[type[Exception], ...] = (),
        log: Callable[[str], None] | None = None,
        max_workers: int = MAX_WORKERS,
        read_timeout_s: float = READ_TIMEOUT_S,
        extra_models: dict[str, Callable[..., Any]] | None = None,
    ):
        super().__init__(address, ChatHandler)
        self.read_timeout_s = read_timeout_s
        self.slots = threading.BoundedSemaphore(max_workers)
        self.model_id = model_id
        self.generate = generate
        self.models = {model_id: generate, **(extra_models or {})}
        self.max_tokens_default = max_tokens_default
        self.max_tokens_limit = max_tokens_limit
        self.prompt_error = prompt_error
        self.lock = threading.Lock()
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.served = 0

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}/v1"

    def process_request(self, request, client_address) -> None:
        """A worker per connection, at most ``max_workers``; beyond that a 503 and close, at once."""
        if not self.slots.acquire(blocking=False):
            try:
                request.settimeout(1.0)
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request, client_address) -> None:  # never a traceback, never a body
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError | socket.timeout):
            return
        self.log(f"connection error: {type(exc).__name__}")

    def completion(self, params: dict) -> dict:
        generate = self.models[params.get("model", self.model_id)]
        with self.lock:
            gen = generate(
                params["messages"],
                max_tokens=params["max_tokens"],
                temperature=params["temperature"],
                top_p=params["top_p"],
                seed=params["seed"],
            )
            self.served += 1
        text, finish = gen.text, gen.finish_reason
        for s in params["stop"]:
            cut = text.find(s)
            if cut != -1:
                text, finish = text[:cut], "stop"
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": params.get("model", self.model_id),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish,
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": gen.prompt_tokens,
                "completion_tokens": gen.completion_tokens,
                "total_tokens": gen.prompt_tokens + gen.completion_tokens,
            },
        }


class ChatHandler(BaseHTTPRequestHandler):
    server: ChatServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.timeout = self.server.read_timeout_s  # every read of this connection, idle keep-alive too
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # one line per request is written by _send instead

    def _send(self, status: int, body: dict, t0: float, note: str = "") -> None:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8", "replace")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        path = self.path.split("?", 1)[0]
        self.server.log(f"{self.command} {path} {status} {time.monotonic() - t0:.3f}s{note}")

    def _read_body(self, t0: float) -> bytes | None:
        """The whole request body, read before any answer so the next request on this connection
        starts where it should. None when an answer (and a close) was already sent."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self.close_connection = True
            self._send(411, _error_body(411, "chunked bodies are not supported: send Content-Length"), t0)
            return None
        raw_length = self.headers.get("Content-Length")
        try:
            length = int(raw_length) if raw_length is not None else 0
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self.close_connection = True  # the body cannot be skipped safely: the connection ends
            self._send(
                413 if length > 0 else 400, _error_body(400, f"Content-Length must be 0-{MAX_BODY_BYTES}"), t0
            )
            return None
        data = self.rfile.read(length) if length else b""
        if len(data) != length:
            self.close_connection = True
            return None
        return data

    def do_GET(self) -> None:
        t0 = time.monotonic()
        if self._read_body(t0) is None:
            return
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            models = [
                {"id": name, "object": "model", "created": 0, "owned_by": "ledgerwright"}
                for name in self.server.models
            ]
            self._send(200, {"object": "list", "data": models}, t0)
        elif path in ("/health", "/v1/health"):
            self._send(200, {"status": "ok"}, t0)
        else:
            self._send(404, _error_body(404, f"no route {path}"), t0)

    def do_POST(self) -> None:
        t0 = time.monotonic()
        raw = self._read_body(t0)
        if raw is None:
            return
        try:
            self._post(raw, t0)
        except (ConnectionError, TimeoutError):
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001 - never a traceback and never internals to the client
            self.server.log(f"POST error: {type(exc).__name__}")
            self.close_connection = True
            self._send(500, _error_body(500, "internal error"), t0)

    def _post(self, raw: bytes, t0: float) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._send(404, _error_body(404, f"no route {path}"), t0)
            return
        if not raw:
            self._send(400, _error_body(400, "the request needs a JSON body"), t0)
            return
        try:
            body = loads_strict(raw)
        except StrictJSONError as exc:
            self._send(400, _error_body(400, f"the body is not JSON the server accepts: {exc}"), t0)
            return
        try:
            params = parse_request(
                body,
                model_id=self.server.model_id,
                max_tokens_default=self.server.max_tokens_default,
                max_tokens_limit=self.server.max_tokens_limit,
                also_served=tuple(m for m in self.server.models if m != self.server.model_id),
            )
        except RequestError as exc:
            self._send(exc.status, _error_body(exc.status, str(exc), exc.param, exc.code), t0)
            return
        try:
            result = self.server.completion(params)
        except self.server.prompt_error as exc:
            self._send(400, _error_body(400, str(exc), "messages", "context_length_exceeded"), t0)
            return
        except Exception as exc:  # noqa: BLE001 - a generation failure is the server's error, retryable
            self.server.log(f"generation failed: {type(exc).__name__}: {exc}")
            self._send(500, _error_body(500, "generation failed (the server log has the reason)"), t0)
            return
        u = result["usage"]
        note = f" prompt_tokens={u['prompt_tokens']} completion_tokens={u['completion_tokens']}"
        self._send(200, result, t0, note + f" finish={result['choices'][0]['finish_reason']}")
