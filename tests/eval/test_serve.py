"""eval/serve.py: the OpenAI-compatible surface (with a stub model: fast), and end to end on the tiny
default: serve it on loopback, collect teacher outputs with data_prep/teacher.py, build them, and rerun
the collection without a single new request."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from evalkit import start_serve, stop_serve, train_fixtures

from eval.chat_model import Generation, PromptTooLong
from eval.chat_server import ChatServer

REPO = Path(__file__).resolve().parents[2]


def stub_generate(messages, *, max_tokens, temperature, top_p, seed):
    """Echoes the last message word by word; 'boom' fails, 'huge' is too long for the model."""
    last = messages[-1]["content"]
    if last == "boom":
        raise RuntimeError("device lost")
    if last == "huge":
        raise PromptTooLong("the prompt has 9999 tokens; at most 100 fit")
    words = f"echo {last} t={temperature} seed={seed}".split()
    prompt = sum(len(m["content"].split()) for m in messages)
    if len(words) > max_tokens:
        return Generation(" ".join(words[:max_tokens]), prompt, max_tokens, "length")
    return Generation(" ".join(words), prompt, len(words) + 1, "stop")


@pytest.fixture
def stub_server():
    server = ChatServer(
        ("127.0.0.1", 0),
        model_id="stub",
        generate=stub_generate,
        max_tokens_default=16,
        max_tokens_limit=64,
        prompt_error=PromptTooLong,
        log=lambda line: None,
    )
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _call(url: str, body: dict | bytes | None = None) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_models_and_completions(stub_server):
    url = stub_server.url
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
    status, models = _call(url + "/models")
    assert status == 200 and [m["id"] for m in models["data"]] == ["stub"]
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]
    status, r = _call(
        url + "/chat/completions", {"model": "stub", "messages": msgs, "temperature": 0, "seed": 3}
    )
    assert status == 200 and r["object"] == "chat.completion" and r["model"] == "stub"
    choice = r["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "echo hello there t=0.0 seed=3"}
    assert choice["finish_reason"] == "stop"
    assert r["usage"] == {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10}
    status, r = _call(url + "/chat/completions", {"model": "stub", "messages": msgs, "max_tokens": 2})
    assert status == 200 and r["choices"][0]["finish_reason"] == "length"
    assert r["choices"][0]["message"]["content"] == "echo hello" and r["usage"]["completion_tokens"] == 2
    parts = [{"role": "user", "content": [{"type": "text", "text": "a b"}]}]
    status, r = _call(url + "/chat/completions", {"model": "stub", "messages": parts, "stop": ["t="]})
    assert status == 200 and r["choices"][0]["message"]["content"] == "echo a b "
    assert stub_server.served == 3


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"model": "other", "messages": [{"role": "user", "content": "x"}]}, 404, "model_not_found"),
        ({"model": "stub", "messages": [{"role": "user", "content": "x"}], "stream": True}, 400, "stream"),
        (
            {"model": "stub", "messages": [{"role": "user", "content": "x"}], "max_tokens": 65},
            400,
            "max_tokens",
        ),
        ({"model": "stub", "messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role"),
        ({"model": "stub", "messages": []}, 400, "messages"),
        (
            {"model": "stub", "messages": [{"role": "user", "content": "huge"}]},
            400,
            "context_length_exceeded",
        ),
        ({"model": "stub", "messages": [{"role": "user", "content": "boom"}]}, 500, "generation failed"),
        (b"{not json", 400, "not JSON"),
    ],
)
def test_bad_requests_get_openai_errors(stub_server, body, status, needle):
    got, r = _call(stub_server.url + "/chat/completions", body)
    assert got == status
    assert set(r["error"]) == {"message", "type", "param", "code"}
    assert needle in json.dumps(r["error"])
    assert _call(stub_server.url + "/nowhere")[0] == 404


def test_the_teacher_client_talks_to_it(stub_server):
    from data_prep.teacher_client.endpoint import ChatEndpoint
    from data_prep.teacher_client.settings import RetryPolicy

    seen = []
    ep = ChatEndpoint(
        stub_server.url, api_key=None, policy=RetryPolicy(backoff_base_s=0.01), on_attempt=seen.append
    )
    try:
        reply = ep.post({"model": "stub", "messages": [{"role": "user", "content": "hi"}]}, key="k", tag="t")
        assert reply.ok and reply.body["choices"][0]["message"]["content"].startswith("echo hi")
        reply = ep.post(
            {"model": "stub", "messages": [{"role": "user", "content": "boom"}]}, key="k2", tag="t2"
        )
        assert not reply.ok and reply.error["kind"] == "http_500" and reply.attempts == 5
    finally:
        ep.close()
    assert [a["result"] for a in seen] == ["ok", "retry", "retry", "retry", "retry", "provider_error"]


# ---- end to end on the tiny default ---------------------------------------------------------------------
def _posts(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if line.startswith("POST /v1/chat/completions"))


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory) -> Path:
    from train.config import TinyBaseConfig
    from train.tiny import ensure_tiny_base

    fx = train_fixtures()
    root = tmp_path_factory.mktemp("serve-tiny")
    return ensure_tiny_base(fx.make_sft_fixture(root / "sft"), root / "cache", TinyBaseConfig(**fx.TEST_TINY))


@pytest.mark.slow
def test_an_adapter_loads_like_the_evaluations_load_it(tiny_base, tmp_path):
    """A fresh LoRA adapter (B = 0: the identity) served on the base answers exactly as the base does."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from eval.chat_model import LocalChatModel

    ckpt = tmp_path / "ckpt"
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(str(tiny_base)),
        LoraConfig(r=2, lora_alpha=4, target_modules="all-linear", task_type="CAUSAL_LM"),
    )
    model.save_pretrained(str(ckpt))
    AutoTokenizer.from_pretrained(str(tiny_base)).save_pretrained(str(ckpt))
    config = {"load_in_4bit": False, "attn_implementation": "sdpa"}
    (ckpt / "manifest.json").write_text(
        json.dumps({"base_model": {"path": str(tiny_base)}, "config": config})
    )
    msgs = [{"role": "user", "content": "Call 1 (id c1): lookup_vendor"}]
    plain = LocalChatModel(tiny_base).generate(msgs, max_tokens=6)
    adapted = LocalChatModel(tiny_base, ckpt).generate(msgs, max_tokens=6)
    assert adapted == plain and plain.prompt_tokens > 0 and plain.finish_reason in ("stop", "length")
    assert plain.completion_tokens <= 6


@pytest.mark.slow
def test_serve_tiny_then_collect_build_and_rerun_without_requests(tiny_base, tmp_path, capsys):
    from data_prep.sft.config import DEFAULT_CONFIG, load_build_config
    from data_prep.sft.pipeline import build
    from data_prep.synthetic import SynthConfig, generate_corpus
    from data_prep.teacher import main as teacher_main

    base = tiny_base
    corpus = tmp_path / "corpus"
    generate_corpus(SynthConfig(runs=6, policy_cases=2, seed=0), corpus, progress=False)
    decoding = tmp_path / "decoding.yaml"
    decoding.write_text("max_tokens: {writer_action: 8, reader_verdict: 8, writer_memory: 12}\n")

    log = tmp_path / "serve.log"
    proc, url = start_serve(base, log)
    try:
        status, models = _call(url + "/models")
        name = models["data"][0]["id"]
        assert status == 200 and name == base.name
        out = tmp_path / "teacher"
        argv = ["--corpus", str(corpus), "--out", str(out), "--endpoint", url, "--model", name,
                "--decoding", str(decoding), "--concurrency", "2", "--quiet"]  # fmt: skip
        assert teacher_main(argv) == 0
        man = json.loads((out / "manifest.json").read_text())
        c = man["counts"]
        calls = [json.loads(x) for x in (out / "teacher_calls.jsonl").read_text().splitlines()]
        assert c["runs"]["written"] == 6 and c["policy_cases"]["written"] == 2
        assert len(calls) == c["calls"]["total"] == sum(v for k, v in c["calls"].items() if k != "total")
        for role, r in c["roles"].items():
            assert sum(v for k, v in r.items() if k != "items") == r["items"], role
        assert c["calls"]["provider_error"] == 0
        assert _posts(log) == len(calls)  # one request per call: nothing failed, nothing repeated
        for x in calls:
            assert x["model"] == name and x["finish_reason"] in ("stop", "length")
            assert x["usage"]["prompt_tokens"] > 0 and x["content"] is not None
            assert x["status"] in ("ok", "unparseable", "truncated")
        assert man["tokens"]["prompt"] == sum(x["usage"]["prompt_tokens"] for x in calls)

        sft = tmp_path / "sft"
        bm = build(out, sft, load_build_config(DEFAULT_CONFIG), progress=False, strict=True)
        for task, t in bm["counts"].items():
            assert t["input"] == sum(
                t[o]["total"] for o in ("kept", "filtered", "rejected", "deduplicated")
            ), task
        assert bm["counts"]["writer_action"]["input"] == 6

        # the same command again: every answer comes from the cache, the outputs do not change
        before = {
            p: p.read_bytes()
            for p in sorted(out.rglob("*"))
            if p.is_file() and "teacher_cache" not in p.parts
        }
        posts = _posts(log)
        assert teacher_main(argv) == 0
        assert _posts(log) == posts
        after = {
            p: p.read_bytes()
            for p in sorted(out.rglob("*"))
            if p.is_file() and "teacher_cache" not in p.parts
        }
        assert after == before
        assert "0 requests sent" in capsys.readouterr().out

        # the reader role alone reads the corpus's own ledgers (the writer above failed on every run)
        reader_out = tmp_path / "teacher-reader"
        argv[argv.index("--out") + 1] = str(reader_out)
        assert teacher_main([*argv, "--role", "reader"]) == 0
        r = json.loads((reader_out / "manifest.json").read_text())["counts"]
        assert r["roles"]["reader"]["items"] == 6 and r["roles"]["reader"]["skipped"] == 0
        assert r["calls"]["total"] == 6 and _posts(log) == posts + 6
    finally:
        stop_serve(proc, timeout=20)
    assert "stopped after" in log.read_text()


# ---- hostile clients ------------------------------------------------------------------------------------
def _raw_exchange(server, payload: bytes, responses: int, timeout: float = 10) -> list[tuple[int, bytes]]:
    """Send ``payload`` on one connection; read ``responses`` HTTP responses back (status, body)."""
    import socket

    out = []
    with socket.create_connection(server.server_address[:2], timeout=timeout) as s:
        s.sendall(payload)
        buf = b""
        while len(out) < responses:
            while b"\r\n\r\n" not in buf:
                chunk = s.recv(65536)
                assert chunk, f"connection closed after {len(out)} responses"
                buf += chunk
            head, buf = buf.split(b"\r\n\r\n", 1)
            status = int(head.split(b" ", 2)[1])
            length = int(next(h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")))
            while len(buf) < length:
                buf += s.recv(65536)
            out.append((status, buf[:length]))
            buf = buf[length:]
    return out


def _post(path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def test_keep_alive_stays_in_step_after_errors(stub_server):
    good = json.dumps({"model": "stub", "messages": [{"role": "user", "content": "hi"}]}).encode()
    # a 404 route with a body that looks like a request, a bad model, then a good request: one connection
    smuggled = _post("/v1/chat/completions", good)
    got = _raw_exchange(
        stub_server, _post("/nowhere", smuggled) + _post("/v1/chat/completions", b'{"model": "x"}') + _post(
            "/v1/chat/completions", good
        ), 3,
    )  # fmt: skip
    assert [s for s, _ in got] == [404, 404, 200]
    assert json.loads(got[2][1])["choices"][0]["message"]["content"].startswith("echo hi")


@pytest.mark.parametrize(
    "body,needle",
    [
        (b"[" * 100_000 + b"]" * 100_000, "nesting too deep"),
        (b'{"model": "stub", "messages": [{"role": "user", "content": "\\ud800"}]}', "lone surrogate"),
        (b'{"model": "stub", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}', "non-finite"),
        (b"\xff\xfe", "not UTF-8"),
        (b'{"model": "stub", "model": "stub"}', "duplicate key"),
    ],
)
def test_hostile_bodies_get_a_400_without_internals(stub_server, body, needle):
    ((status, data),) = _raw_exchange(stub_server, _post("/v1/chat/completions", body), 1)
    err = json.loads(data)["error"]
    assert status == 400 and needle in err["message"]
    assert "Traceback" not in err["message"] and "Error:" not in err["message"]


def test_slow_sockets_do_not_take_every_worker():
    import socket

    server = ChatServer(
        ("127.0.0.1", 0), model_id="stub", generate=stub_generate, log=lambda line: None,
        max_workers=8, read_timeout_s=1.0,
    )  # fmt: skip
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        idle = [socket.create_connection(server.server_address[:2]) for _ in range(300)]
        for s in idle:
            s.sendall(b"POST /v1/chat/comp")  # half a request line, then nothing
        time.sleep(0.3)
        assert threading.active_count() < 8 + 10  # bounded: not one thread per socket
        t0 = time.monotonic()
        deadline = t0 + 10
        status = None
        while time.monotonic() < deadline:  # the half-open sockets time out and free their workers
            try:
                status, _ = _call(server.url + "/models")
                if status == 200:
                    break
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.1)
        assert status == 200 and time.monotonic() - t0 < 5
        for s in idle:
            s.close()
    finally:
        server.shutdown()
        server.server_close()


def test_the_official_openai_client_two_requests_on_one_connection(stub_server):
    openai = pytest.importorskip("openai")
    import httpx2 as httpx

    ports = []
    transport = httpx.HTTPTransport()

    class Spy(httpx.BaseTransport):
        def handle_request(self, request):
            resp = transport.handle_request(request)
            stream = resp.extensions.get("network_stream")
            if stream is not None:
                ports.append(stream.get_extra_info("socket").getsockname()[1])
            return resp

    client = openai.OpenAI(
        base_url=stub_server.url, api_key="sk-none", max_retries=0, http_client=httpx.Client(transport=Spy())
    )
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="other", messages=[{"role": "user", "content": "a"}])
    assert err.value.body["code"] == "model_not_found"
    first = client.chat.completions.create(model="stub", messages=[{"role": "user", "content": "a b"}], max_tokens=3)
    second = client.chat.completions.create(
        model="stub", messages=[{"role": "user", "content": "c"}], max_completion_tokens=8, seed=1
    )
    assert first.choices[0].message.content == "echo a b" and first.choices[0].finish_reason == "length"
    assert second.choices[0].message.content.startswith("echo c") and second.usage.total_tokens > 0
    assert [m.id for m in client.models.list().data] == ["stub"]
    assert len(ports) == 4 and len(set(ports)) == 1  # all on one keep-alive connection
