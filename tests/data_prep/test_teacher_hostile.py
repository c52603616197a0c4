"""The teacher client against a hostile endpoint on loopback: a server that drips, one that sends 100 MB,
one that echoes the API key ``\\u``-escaped, one that sends invalid UTF-8, and one that refuses
``max_tokens``. Bounded time and memory, the right classification, the key in no output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from data_prep.teacher_client.endpoint import ChatEndpoint
from data_prep.teacher_client.settings import RetryPolicy, TeacherDecoding, token_limit_field

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-test-0123456789abcdefSECRET"
ESCAPED_KEY = "".join(f"\\u{ord(c):04x}" for c in KEY)  # how a JSON server may echo it


def _completion(content: str, extra: str = "") -> bytes:
    body = {
        "id": "x",
        "object": "chat.completion",
        "model": "m",
        "system_fingerprint": extra,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    return json.dumps(body).encode()


class Hostile:
    """``mode``: drip | oversize | echo | bad_utf8 | needs_completion_tokens | ok."""

    def __init__(self, mode: str):
        self.mode = mode
        self.bodies: list[dict] = []
        host = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _head(self, status: int, length: int) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(length))
                self.end_headers()

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                host.bodies.append(body)
                mode = host.mode
                try:
                    if mode == "drip":  # a byte every 0.1 s: each read is quick, the answer never ends
                        self._head(200, 10**6)
                        for _ in range(10**6):
                            self.wfile.write(b" ")
                            self.wfile.flush()
                            time.sleep(0.1)
                    elif mode == "oversize":  # 100 MB of one JSON string
                        self._head(200, 100 * 2**20 + 40)
                        self.wfile.write(b'{"choices":[{"message":{"content":"')
                        chunk = b"a" * 2**20
                        for _ in range(100):
                            self.wfile.write(chunk)
                        self.wfile.write(b'"}}]}')
                    elif mode == "echo":  # the key back, escaped, in content and metadata
                        verdict = {"label": "clean", "suspicion": 1, "cited_call_ids": [], "findings": f"key {KEY}"}
                        data = _completion(json.dumps(verdict), KEY)
                        data = data.replace(KEY.encode(), ESCAPED_KEY.encode())
                        self._head(200, len(data))
                        self.wfile.write(data)
                    elif mode == "echo_error":
                        data = json.dumps({"error": {"message": f"bad key {KEY}"}}).encode()
                        data = data.replace(KEY.encode(), ESCAPED_KEY.encode())
                        self._head(401, len(data))
                        self.wfile.write(data)
                    elif mode == "bad_utf8":
                        data = _completion("caf\u00e9").replace("\u00e9".encode(), b"\xff\xfe")
                        data = data.replace(b"\\u00e9", b"\xff\xfe")
                        self._head(200, len(data))
                        self.wfile.write(data)
                    elif mode == "needs_completion_tokens" and "max_tokens" in body:
                        data = (
                            b'{"error":{"message":"Unsupported parameter: \'max_tokens\' is not supported '
                            b"with this model. Use 'max_completion_tokens' instead.\",\"type\":"
                            b'"invalid_request_error","param":"max_tokens"}}'
                        )
                        self._head(400, len(data))
                        self.wfile.write(data)
                    else:
                        data = _completion('{"label": "clean", "suspicion": 1, "cited_call_ids": [], "findings": "ok"}')
                        self._head(200, len(data))
                        self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda *a: None
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _endpoint(url: str, timeout: float = 1.0, attempts: int = 1) -> ChatEndpoint:
    policy = RetryPolicy(max_attempts=attempts, backoff_base_s=0.01, timeout_s=timeout, connect_timeout_s=1.0)
    return ChatEndpoint(url, api_key=KEY, policy=policy)


BODY = {"model": "teacher-x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


def test_drip_is_cut_at_the_whole_request_deadline():
    with Hostile("drip") as srv:
        ep = _endpoint(srv.url, timeout=1.0, attempts=2)
        t0 = time.monotonic()
        reply = ep.post(BODY, key="k", tag="t")
        elapsed = time.monotonic() - t0
        ep.close()
    assert not reply.ok and reply.error["kind"] == "timeout" and reply.attempts == 2
    assert elapsed < 2 * 1.0 + 1.5, elapsed  # two attempts of 1 s each (+ backoff), not per read


def test_oversize_answer_is_truncated_in_bounded_memory(tmp_path):
    script = f"""
import resource, sys, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_teacher_hostile import Hostile, _endpoint, BODY
with Hostile("oversize") as srv:
    ep = _endpoint(srv.url, timeout=10.0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    reply = ep.post(BODY, key="k", tag="t")
    took = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(reply.error["kind"], (after - before) // 1024, round(took, 2))
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    kind, grew_mb, took = out.stdout.split()
    assert kind == "response_too_large"
    assert int(grew_mb) < 40, f"RSS grew {grew_mb} MB for a 100 MB answer"
    assert float(took) < 10


def test_echoed_key_is_redacted_after_decoding_and_invalid_utf8_is_malformed():
    with Hostile("echo") as srv:
        ep = _endpoint(srv.url)
        reply = ep.post(BODY, key="k", tag="t")
        srv.mode = "echo_error"
        err = ep.post(BODY, key="k", tag="t")
        srv.mode = "bad_utf8"
        bad = ep.post(BODY, key="k", tag="t")
        ep.close()
    text = json.dumps(reply.body)
    assert reply.ok and KEY not in text and "SECRET" not in text and "[REDACTED]" in text
    assert err.error["kind"] == "http_401" and "SECRET" not in json.dumps(err.error)
    assert not bad.ok and bad.error["kind"] == "malformed_response" and "UTF-8" in bad.error["detail"]


def test_token_limit_field_by_family_and_a_400_naming_the_other_is_answered_once():
    assert token_limit_field("gpt-5-mini") == "max_completion_tokens"
    assert token_limit_field("o4-mini") == "max_completion_tokens"
    assert token_limit_field("openai/o3") == "max_completion_tokens"
    assert token_limit_field("gpt-4o-mini") == "max_tokens"
    assert token_limit_field("Qwen/Qwen3-32B") == "max_tokens"
    assert "max_completion_tokens" in TeacherDecoding().request_params("reader_verdict", "gpt-5")
    with Hostile("needs_completion_tokens") as srv:
        ep = _endpoint(srv.url, attempts=1)
        reply = ep.post(BODY, key="k", tag="t")
        ep.close()
    assert reply.ok and reply.attempts == 2
    assert [("max_tokens" in b, "max_completion_tokens" in b) for b in srv.bodies] == [(True, False), (False, True)]


@pytest.mark.parametrize(
    "mode,status,kind",
    [("echo", "ok", None), ("bad_utf8", "provider_error", "malformed_response"), ("oversize", "truncated", None)],
)
def test_collection_classifies_and_writes_no_key(tmp_path, mode, status, kind):
    from data_prep.synthetic import SynthConfig, generate_corpus
    from data_prep.teacher import main

    corpus = tmp_path / "corpus"
    generate_corpus(SynthConfig(runs=1, policy_cases=0, seed=0), corpus)
    out = tmp_path / "out"
    os.environ["LW_HOSTILE_KEY"] = KEY
    try:
        with Hostile(mode) as srv:
            argv = ["--corpus", str(corpus), "--out", str(out), "--endpoint", srv.url, "--model", "teacher-x",
                    "--role", "reader", "--api-key-env", "LW_HOSTILE_KEY", "--max-attempts", "1",
                    "--timeout", "5", "--quiet"]  # fmt: skip
            assert main(argv) == 0
    finally:
        del os.environ["LW_HOSTILE_KEY"]
    (call,) = [json.loads(x) for x in (out / "teacher_calls.jsonl").read_text().splitlines()]
    assert call["status"] == status, call
    if kind:
        assert call["error"]["kind"] == kind
    for p in out.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            assert KEY.encode() not in data and b"SECRET" not in data, p
            assert ESCAPED_KEY.encode() not in data, p
    assert max(p.stat().st_size for p in out.rglob("*") if p.is_file()) < 1 << 20
