"""eval/serve.py: the OpenAI-compatible surface (with a stub model: fast), and end to end on the tiny
default: serve it on loopback, collect teacher outputs with data_prep/teacher.py, build them, and rerun
the collection without a single new request."""

from __future__ import annotations

import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

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
        ({"model": "stub", "messages": [{"role": "user", "content": "boom"}]}, 500, "device lost"),
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
def _train_fixtures():
    """The train tests' SFT fixture and tiny settings (tests/train/conftest.py), loaded by path."""
    spec = importlib.util.spec_from_file_location(
        "lw_train_fixtures", REPO / "tests" / "train" / "conftest.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _start_server(base: Path, log: Path) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "eval/serve.py", "--model", str(base), "--port", "0", "--threads", "1"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=open(log, "w"), text=True,
    )  # fmt: skip
    deadline = time.time() + 120
    while time.time() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if line.startswith("serving "):
                return proc, line.split(" at ", 1)[1].strip()
        if proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"eval/serve.py did not start:\n{log.read_text()[-3000:]}")


def _posts(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if line.startswith("POST /v1/chat/completions"))


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory) -> Path:
    from train.config import TinyBaseConfig
    from train.tiny import ensure_tiny_base

    fx = _train_fixtures()
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
    from data_prep.synth import SynthConfig, generate_corpus
    from data_prep.teacher import main as teacher_main

    base = tiny_base
    corpus = tmp_path / "corpus"
    generate_corpus(SynthConfig(runs=6, policy_cases=2, seed=0), corpus, progress=False)
    decoding = tmp_path / "decoding.yaml"
    decoding.write_text("max_tokens: {writer_action: 8, reader_verdict: 8, writer_memory: 12}\n")

    log = tmp_path / "serve.log"
    proc, url = _start_server(base, log)
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
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert "stopped after" in log.read_text()
