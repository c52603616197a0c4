"""Teacher collection against a fake OpenAI endpoint on loopback: retried and recorded failures, counts
that add up, an API key that never reaches a file, a run killed midway and resumed to identical bytes
without repeated requests, and the build reading the result."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from interrupt import kill_after_lines
from shown_calls import shown_calls

from data_prep.assemble import describe_call
from data_prep.policy_case import validate_policy_case
from data_prep.records import Run
from data_prep.teacher import main
from data_prep.teacher_client.cache import CacheError, ResponseCache, request_key
from data_prep.teacher_client.collect import classify, parse_memory_records, parse_teacher_verdict
from data_prep.teacher_client.endpoint import backoff_s, chat_url, parse_retry_after, public_url
from data_prep.teacher_client.pricing import load_prices
from data_prep.teacher_client.settings import RetryPolicy, SettingsError, load_decoding

REPO = Path(__file__).resolve().parents[2]
MODEL = "teacher-x"
FAST = ["--max-attempts", "3", "--backoff-base", "0.01", "--timeout", "0.5", "--quiet"]
OUTPUTS = ("runs", "policy_cases", "rejects.jsonl", "teacher_calls.jsonl", "manifest.json")


# ---- a fake OpenAI-compatible endpoint ------------------------------------------------------------------
def _task(body: dict) -> str:
    system = body["messages"][0]["content"]
    if system.startswith("You are a ledger writer"):
        return "writer"
    if system.startswith("You are a ledger reader"):
        return "reader"
    return "memory"


def _answer(body: dict) -> str:
    task = _task(body)
    last = body["messages"][-1]["content"]
    if task == "writer":
        call = shown_calls(last)[-1]
        cid, tool, status = call["call_id"], call["tool"], call["status"]
        entry = {"call_id": cid, "tool": tool, "description": describe_call(call), "claimed_outcome": status}
        return "Entry:\n" + json.dumps(entry)
    if task == "reader":
        return json.dumps(
            {"label": "clean", "suspicion": 7, "cited_call_ids": [], "findings": "entries match"}
        )
    return json.dumps({"records": []})


class FakeOpenAI:
    """Answers deterministically; ``fault(body, nth)`` picks what happens to the nth identical request
    (0-based): ok, 429, 500, 400, malformed, timeout, length, refuse."""

    def __init__(self, fault=None, *, answer=_answer, delay: float = 0.0, hang: float = 1.5):
        self.fault = fault or (lambda body, nth: "ok")
        self.answer = answer
        self.delay = delay
        self.hang = hang
        self.seen: Counter[str] = Counter()
        self.auth: set[str] = set()
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status: int, data: bytes, headers: dict | None = None):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                body = json.loads(raw)
                key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
                auth = self.headers.get("Authorization", "")
                with fake.lock:
                    nth = fake.seen[key]
                    fake.seen[key] += 1
                    fake.auth.add(auth)
                action = fake.fault(body, nth)
                if fake.delay:
                    time.sleep(fake.delay)
                if action == "timeout":
                    time.sleep(fake.hang)
                if action in ("429", "500", "400", "echo"):
                    status = 500 if action == "echo" else int(action)
                    err = {"error": {"message": f"scripted {action}; you sent {auth}", "type": "x"}}
                    self._send(
                        status, json.dumps(err).encode(), {"Retry-After": "0"} if action == "429" else None
                    )
                    return
                if action == "malformed":
                    self._send(200, b'{"choices": [ {"message": ')
                    return
                content = fake.answer(body)
                message = {"role": "assistant", "content": content}
                finish = "stop"
                if action == "length":
                    message["content"], finish = content[:12], "length"
                elif action == "refuse":
                    message = {"role": "assistant", "content": None, "refusal": "I cannot help with that."}
                resp = {
                    "id": f"chatcmpl-{key[:16]}",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"] + "-2025",
                    "system_fingerprint": f"echo {auth}",
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": {
                        "prompt_tokens": len(raw) // 4,
                        "completion_tokens": len(content) // 4,
                        "total_tokens": len(raw) // 4 + len(content) // 4,
                    },
                }
                self._send(200, json.dumps(resp).encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda *a: None
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def snapshot(self) -> Counter[str]:
        with self.lock:
            return Counter(self.seen)


# ---- fixtures and helpers ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    from data_prep.synthetic import SynthConfig, generate_corpus

    root = tmp_path_factory.mktemp("teacher-corpus") / "corpus"
    generate_corpus(SynthConfig(runs=6, policy_cases=2, seed=0), root, progress=False)
    return root


def _runs(corpus: Path) -> list[dict]:
    return [json.loads(x) for x in (corpus / "runs" / "runs-00000.jsonl").read_text().splitlines()]


def _cases(corpus: Path) -> list[dict]:
    return [json.loads(x) for x in (corpus / "policy_cases" / "cases-00000.jsonl").read_text().splitlines()]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _argv(corpus: Path, out: Path, url: str, *extra: str) -> list[str]:
    return ["--corpus", str(corpus), "--out", str(out), "--endpoint", url, "--model", MODEL, *FAST, *extra]


def _output_bytes(out: Path) -> dict[str, bytes]:
    files = {}
    for name in OUTPUTS:
        p = out / name
        for f in sorted(p.rglob("*")) if p.is_dir() else [p]:
            files[f.relative_to(out).as_posix()] = f.read_bytes()
    return files


def _writer_user(body: dict) -> str | None:
    return body["messages"][-1]["content"] if _task(body) == "writer" else None


# ---- failures: retried or recorded, and counted ---------------------------------------------------------
def test_transient_failures_retry_and_final_failures_are_recorded(corpus, tmp_path, capsys):
    runs, cases = _runs(corpus), _cases(corpus)
    cid = [[c["call_id"] for c in r["trajectory"]] for r in runs]
    plan = {  # writer turn (by the call it shows) -> what the server does on attempt 1, 2, ...
        cid[0][1]: ["429", "ok"],
        cid[1][0]: ["500", "500", "ok"],
        cid[2][0]: ["malformed", "ok"],
        cid[3][0]: ["timeout", "ok"],
        cid[4][1]: ["length"],
        cid[5][0]: ["500"],  # every attempt: a provider error after --max-attempts 3
    }
    reader_refuses = cid[0][0]
    other = json.dumps(cases[1])
    memory_rejected = next(  # a turn of case 0 that case 1 does not have
        t["content"] for b in cases[0]["blocks"] for t in b["turns"] if json.dumps(t["content"]) not in other
    )

    def fault(body, nth):
        text = body["messages"][-1]["content"]
        kind = _task(body)
        if kind == "writer":
            steps = plan.get(shown_calls(text)[-1]["call_id"], ["ok"])
            return steps[min(nth, len(steps) - 1)]
        if kind == "reader" and f'"call_id": "{reader_refuses}"' in text:
            return "refuse"
        if kind == "memory" and memory_rejected in text:
            return "400"
        return "ok"

    out = tmp_path / "out"
    with FakeOpenAI(fault) as srv:
        assert main(_argv(corpus, out, srv.url, "--concurrency", "3")) == 0
    man = json.loads((out / "manifest.json").read_text())
    c = man["counts"]
    assert c["runs"] == {"input": 6, "written": 6, "quarantined": 0, "quarantined_by_reason": {}}
    assert c["policy_cases"]["written"] == 2
    w, r, p = c["roles"]["writer"], c["roles"]["reader"], c["roles"]["policy-writer"]
    assert (w["ok"], w["truncated"], w["provider_error"], w["items"]) == (4, 1, 1, 6)
    assert (r["ok"], r["refused"], r["skipped"], r["items"]) == (3, 1, 2, 6)
    assert (p["ok"], p["provider_error"], p["items"]) == (1, 1, 2)
    for role in (w, r, p):
        assert sum(v for k, v in role.items() if k != "items") == role["items"]

    calls = _check_calls(out, c, man, cid)
    _check_attempts(out, srv, calls, runs)
    _check_records(out, runs, cid)
    printed = capsys.readouterr().out
    assert "provider errors: rerun" in printed and "teacher calls:" in printed

    _check_build(out, tmp_path)


def _check_calls(out, c, man, cid) -> list[dict]:
    """teacher_calls.jsonl: one line per call, statuses and usage as the faults planned."""
    calls = _jsonl(out / "teacher_calls.jsonl")
    writer_calls = sum(len(x) for x in cid[:4]) + 2 + 1  # full ledgers, run 4 cut at call 2, run 5 at call 1
    assert len(calls) == c["calls"]["total"] == writer_calls + 4 + 2
    assert sum(v for k, v in c["calls"].items() if k != "total") == len(calls)
    assert Counter(x["status"] for x in calls) == Counter(
        {"ok": writer_calls - 2 + 3 + 1, "truncated": 1, "provider_error": 2, "refused": 1}
    )
    trunc = next(x for x in calls if x["status"] == "truncated")
    assert trunc["finish_reason"] == "length" and trunc["content"] and trunc["response"] is not None
    refused = next(x for x in calls if x["status"] == "refused")
    assert refused["reason"] == "I cannot help with that." and refused["role"] == "reader"
    errs = [x for x in calls if x["status"] == "provider_error"]
    assert sorted((x["error"]["kind"], x["error"]["attempts"]) for x in errs) == [
        ("http_400", 1),
        ("http_500", 3),
    ]
    assert all(x["usage"] and x["model"] == MODEL + "-2025" for x in calls if x["response"] is not None)
    assert man["tokens"]["prompt"] == sum(x["usage"]["prompt_tokens"] for x in calls if x["usage"])
    assert man["cost"]["total"] is None and MODEL in man["cost"]["note"]

    return calls


def _check_attempts(out, srv, calls, runs) -> None:
    """Every HTTP attempt is in the attempt log, and matches what the server saw."""
    attempts = _jsonl(out / "teacher_cache" / "attempts.jsonl")
    assert len(attempts) == sum(srv.seen.values())
    by_turn = Counter(a["tag"] for a in attempts)
    tags = {x["key"]: f"{x['item']}/{x['role']}" + (f"/{x['turn']}" if x["turn"] else "") for x in calls}
    assert by_turn[f"{runs[0]['run_id']}/writer/2"] == 2
    assert by_turn[f"{runs[1]['run_id']}/writer/1"] == 3
    assert by_turn[f"{runs[2]['run_id']}/writer/1"] == 2
    assert by_turn[f"{runs[3]['run_id']}/writer/1"] == 2
    assert by_turn[f"{runs[5]['run_id']}/writer/1"] == 3
    kinds = Counter(a.get("kind") for a in attempts if a["result"] != "ok")
    assert kinds == Counter(
        {"http_500": 5, "http_429": 1, "malformed_response": 1, "timeout": 1, "http_400": 1}
    )
    assert all(a["latency_s"] >= 0 for a in attempts) and set(tags.values()) <= set(by_turn)


def _check_records(out, runs, cid) -> None:
    """The records: failures carry no teacher output the build could mistake for a success."""
    out_runs = _jsonl(out / "runs" / "runs-00000.jsonl")
    for rec in out_runs:
        Run.from_dict(rec)
    state = {rec["run_id"]: rec["provenance"]["teacher_collection"]["roles"] for rec in out_runs}
    assert state[runs[4]["run_id"]]["writer"]["status"] == "truncated"
    assert out_runs[4]["model_ledger"] is None and out_runs[5]["model_ledger"] is None
    assert out_runs[4]["teacher"] == {"writer_model": MODEL, "reader_model": None, "verdict": None}
    assert out_runs[0]["teacher"]["verdict"] is None and out_runs[0]["teacher"]["reader_model"] == MODEL
    assert out_runs[1]["teacher"]["verdict"]["label"] == "clean"
    ledger = out_runs[1]["model_ledger"]
    assert [e["position"] for e in ledger] == list(range(1, len(cid[1]) + 1))
    assert [e["call_id"] for e in ledger] == cid[1]
    out_cases = _jsonl(out / "policy_cases" / "cases-00000.jsonl")
    for case in out_cases:
        validate_policy_case(case)
    assert out_cases[0]["teacher"] is None and out_cases[1]["teacher"] == {
        "writer_model": MODEL,
        "memory": [],
    }


def _check_build(out, tmp_path) -> None:
    """The build reads the collection as a corpus: writer failures are not evaluable, counts conserve."""
    from data_prep.sft.config import DEFAULT_CONFIG, load_build_config
    from data_prep.sft.pipeline import build

    bm = build(out, tmp_path / "sft", load_build_config(DEFAULT_CONFIG), progress=False, strict=True)
    wa = bm["counts"]["writer_action"]
    assert wa["input"] == 6 and wa["filtered"]["by_reason"].get("not_evaluable") == 2
    assert bm["counts"]["writer_memory"]["filtered"]["by_reason"].get("no_teacher_memory") == 1
    for task, t in bm["counts"].items():
        total = sum(t[o]["total"] for o in ("kept", "filtered", "rejected", "deduplicated"))
        assert total == t["input"], task


def test_malformed_bodies_exhaust_into_a_provider_error_and_a_rerun_asks_again(corpus, tmp_path):
    state = {"broken": True}

    def fault(body, nth):
        return "malformed" if state["broken"] and _task(body) == "memory" else "ok"

    out = tmp_path / "out"
    with FakeOpenAI(fault) as srv:
        assert main(_argv(corpus, out, srv.url, "--role", "policy-writer")) == 0
        man = json.loads((out / "manifest.json").read_text())
        assert man["counts"]["roles"] == {
            "policy-writer": {"items": 2, "ok": 0, "unparseable": 0, "refused": 0, "truncated": 0,
                              "provider_error": 2, "skipped": 0},
        }  # fmt: skip
        assert sum(srv.seen.values()) == 6  # 2 cases x 3 attempts
        # runs were copied unchanged: only the role asked for is replaced
        assert (out / "runs" / "runs-00000.jsonl").read_bytes() == (
            corpus / "runs" / "runs-00000.jsonl"
        ).read_bytes()
        state["broken"] = False
        assert main(_argv(corpus, out, srv.url, "--role", "policy-writer")) == 0
        man = json.loads((out / "manifest.json").read_text())
        assert man["counts"]["roles"]["policy-writer"]["ok"] == 2
        assert sum(srv.seen.values()) == 8
        # a third run is answered from the cache alone
        assert main(_argv(corpus, out, srv.url, "--role", "policy-writer")) == 0
        assert sum(srv.seen.values()) == 8


def test_unparseable_answers_keep_the_raw_text(corpus, tmp_path):
    def garbled(body):  # the reader answers prose
        return "I think it is fine." if _task(body) == "reader" else _answer(body)

    out = tmp_path / "out"
    with FakeOpenAI(answer=garbled) as srv:
        assert main(_argv(corpus, out, srv.url, "--role", "reader")) == 0
    man = json.loads((out / "manifest.json").read_text())
    assert man["counts"]["roles"]["reader"]["unparseable"] == 6
    calls = _jsonl(out / "teacher_calls.jsonl")
    assert {(x["status"], x["reason"], x["content"]) for x in calls} == {
        ("unparseable", "no JSON object", "I think it is fine.")
    }
    for rec, src in zip(_jsonl(out / "runs" / "runs-00000.jsonl"), _runs(corpus)):
        assert rec["teacher"]["verdict"] is None and rec["teacher"]["reader_model"] == MODEL
        assert rec["model_ledger"] == src["model_ledger"]  # the reader role leaves the ledger alone
        assert rec["teacher"]["writer_model"] == src["teacher"]["writer_model"]


# ---- secrets --------------------------------------------------------------------------------------------
def test_api_key_never_reaches_a_file_or_the_console(corpus, tmp_path, monkeypatch, capsys):
    key = "sk-test-9f8e7d6c5b4a39281706"
    monkeypatch.setenv("LW_TEACHER_KEY", key)

    def fault(body, nth):
        return "echo" if nth == 0 and _task(body) == "reader" else "ok"

    out = tmp_path / "out"
    with FakeOpenAI(fault) as srv:
        assert main(_argv(corpus, out, srv.url, "--api-key-env", "LW_TEACHER_KEY", "--concurrency", "2")) == 0
    assert srv.auth == {f"Bearer {key}"}  # the key was sent ...
    printed = capsys.readouterr()
    assert key not in printed.out and key not in printed.err
    found = [p for p in out.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    assert found == []  # ... and is nowhere under the output, although the server echoed it
    attempts = _jsonl(out / "teacher_cache" / "attempts.jsonl")
    echoed = [a for a in attempts if a["result"] == "retry"]
    assert len(echoed) == 6 and all("[REDACTED]" in a["detail"] for a in echoed)
    assert "[REDACTED]" in (out / "teacher_calls.jsonl").read_text()
    assert json.loads((out / "manifest.json").read_text())["config"]["api_key_env"] == "LW_TEACHER_KEY"


# ---- resume ---------------------------------------------------------------------------------------------
def test_killed_collection_resumes_to_identical_bytes_without_repeating_requests(corpus, tmp_path):
    with FakeOpenAI(delay=0.02) as srv:
        ref = tmp_path / "ref"
        assert main(_argv(corpus, ref, srv.url, "--concurrency", "1")) == 0
        unique = len(srv.seen)
        assert all(n == 1 for n in srv.seen.values())

        res = tmp_path / "res"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(
            [sys.executable, "data_prep/teacher.py", *_argv(corpus, res, srv.url, "--concurrency", "2")],
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        cache = res / "teacher_cache" / "cache.jsonl"
        kill_after_lines(proc, cache, 12, timeout=60, poll=0.01)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL, "the collection finished before it could be killed"
        assert not (res / "manifest.json").exists()
        from data_prep.manifest import ManifestError, require_sealed
        from data_prep.sft.config import load_build_config
        from data_prep.sft.pipeline import BuildError, build

        with pytest.raises(ManifestError, match="missing manifest"):
            require_sealed(res)  # the partial collection is refused by the next consumer
        with pytest.raises(BuildError, match="missing manifest"):
            build(
                res, tmp_path / "sft", load_build_config(REPO / "configs/data/default.yaml"), progress=False
            )
        cached = {json.loads(x)["key"] for x in cache.read_text().split("\n")[:-1]}  # complete lines
        assert 12 <= len(cached) < unique
        before = srv.snapshot()

        assert main(_argv(corpus, res, srv.url, "--concurrency", "3")) == 0
        after = srv.snapshot()
    new = after - before
    assert sum(new.values()) == unique - len(cached)  # each missing response asked once, none twice
    assert all(n == 1 for n in new.values())
    # no cached request was sent again: the server keys of the new requests are exactly the uncached ones
    keys = {x["key"] for x in _jsonl(res / "teacher_calls.jsonl")}
    assert len(keys) == unique and cached < keys
    assert _output_bytes(res) == _output_bytes(ref)
    assert len(_jsonl(res / "teacher_cache" / "cache.jsonl")) == unique
    assert require_sealed(res)["complete"] is True  # the resumed collection is sealed (cache: a sidecar)


# ---- input handling -------------------------------------------------------------------------------------
def test_bad_input_lines_are_quarantined_and_counted(corpus, tmp_path):
    src = tmp_path / "corpus"
    (src / "runs").mkdir(parents=True)
    lines = (corpus / "runs" / "runs-00000.jsonl").read_text().splitlines()
    broken = json.loads(lines[1])
    broken["trajectory"][0]["status"] = "done"
    (src / "runs" / "runs-00000.jsonl").write_text(
        "\n".join([lines[0], json.dumps(broken), lines[0], "{not json"]) + "\n"
    )
    out = tmp_path / "out"
    with FakeOpenAI() as srv:
        assert main(_argv(src, out, srv.url)) == 1  # a hand-made corpus has no seal: refused
        assert main(_argv(src, out, srv.url, "--allow-unsealed")) == 0
    man = json.loads((out / "manifest.json").read_text())
    assert man["counts"]["runs"] == {
        "input": 4,
        "written": 1,
        "quarantined": 3,
        "quarantined_by_reason": {"duplicate_run_id": 1, "invalid_record": 2},
    }
    rejects = _jsonl(out / "rejects.jsonl")
    assert [(r["source"], r["line"], r["reason"]) for r in rejects] == [
        ("runs/runs-00000.jsonl", 2, "invalid_record"),
        ("runs/runs-00000.jsonl", 3, "duplicate_run_id"),
        ("runs/runs-00000.jsonl", 4, "invalid_record"),
    ]
    assert rejects[0]["field"] == "$.trajectory[0].status"
    assert man["files"]["rejects.jsonl"]["records"] == 3


def test_tampered_corpus_and_bad_options_exit_with_clear_errors(corpus, tmp_path, capsys):
    import shutil

    copy = tmp_path / "corpus"
    shutil.copytree(corpus, copy)
    with open(copy / "runs" / "runs-00000.jsonl", "a") as fh:
        fh.write("\n")
    assert main(_argv(copy, tmp_path / "out", "http://127.0.0.1:9/v1")) == 1
    assert "digest mismatch" in capsys.readouterr().err
    assert main(_argv(corpus, tmp_path / "out", "ftp://example")) == 2
    assert "endpoint" in capsys.readouterr().err
    bad = tmp_path / "decoding.yaml"
    bad.write_text("temprature: 0.5\n")
    assert main([*_argv(corpus, tmp_path / "out", "http://127.0.0.1:9/v1"), "--decoding", str(bad)]) == 2
    assert f"{bad}: temprature: unknown field" in capsys.readouterr().err
    assert main(_argv(corpus, corpus, "http://127.0.0.1:9/v1")) == 1
    assert "must differ" in capsys.readouterr().err


# ---- units ----------------------------------------------------------------------------------------------
def test_retry_after_and_backoff():
    policy = RetryPolicy(backoff_base_s=0.5, backoff_max_s=3.0, retry_after_max_s=10.0)
    assert [backoff_s(policy, n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]
    assert backoff_s(policy, 1, retry_after=7.0) == 7.0 and backoff_s(policy, 1, retry_after=99.0) == 10.0
    assert parse_retry_after("2") == 2.0 and parse_retry_after("-3") == 0.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None
    with pytest.raises(SettingsError, match="max_attempts"):
        RetryPolicy(max_attempts=0)


def test_a_stopping_endpoint_starts_no_attempt():
    import threading

    from data_prep.teacher_client.endpoint import ChatEndpoint

    stop = threading.Event()
    stop.set()
    seen = []
    ep = ChatEndpoint(
        "http://127.0.0.1:9/v1", api_key="k", policy=RetryPolicy(), on_attempt=seen.append, stop=stop
    )
    reply = ep.post({"model": "m", "messages": []}, key="k", tag="t")
    ep.close()
    assert not reply.ok and reply.error["kind"] == "interrupted" and reply.attempts == 0 and seen == []


def test_urls():
    assert chat_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1/chat/completions"
    assert chat_url("https://h/v1/chat/completions/") == "https://h/v1/chat/completions"
    assert (
        public_url("https://user:pw@h:8443/v1/chat/completions?key=abc")
        == "https://h:8443/v1/chat/completions"
    )
    with pytest.raises(SettingsError, match="endpoint"):
        chat_url("localhost:8000")


def test_cache_drops_a_torn_tail_and_names_a_corrupt_line(tmp_path):
    path = tmp_path / "cache.jsonl"
    cache = ResponseCache(path)
    cache.put("k1", {"choices": []})
    cache.put("k1", {"choices": ["ignored"]})
    cache.close()
    with open(path, "a") as fh:
        fh.write('{"key": "k2", "resp')  # killed mid-write
    cache = ResponseCache(path)
    assert cache.torn_tail > 0 and cache.get("k1") == {"choices": []} and cache.get("k2") is None
    cache.put("k2", {"choices": [1]})
    cache.close()
    assert len(path.read_text().splitlines()) == 2
    path.write_text('{"key": "k1", "response": {}}\n[1, 2\n{"key": "k3", "response": {}}\n')
    with pytest.raises(CacheError, match=r"cache.jsonl:2: "):
        ResponseCache(path)
    assert request_key({"a": 1.5, "b": [1]}) == request_key({"b": [1], "a": 1.5})


def test_prices_and_decoding_settings(tmp_path):
    table = load_prices(REPO / "configs" / "teacher" / "prices.yaml")
    est = table.estimate("gpt-4o-mini", 2_000_000, 1_000_000)
    assert est["total"] == pytest.approx(0.3 + 0.6) and est["currency"] == "USD" and est["note"] == ""
    assert table.estimate("mystery", 10, 10)["total"] is None
    bad = tmp_path / "prices.yaml"
    bad.write_text("models:\n  m: {prompt: -1, completion: 2}\n")
    with pytest.raises(SettingsError, match=r"models\.m\.prompt"):
        load_prices(bad)
    dec = load_decoding(REPO / "configs" / "teacher" / "decoding.yaml")
    assert dec.request_params("writer_action") == {
        "temperature": 0.0,
        "top_p": 1.0,
        "max_tokens": 256,
        "seed": 0,
    }
    bad.write_text("max_tokens: {writer_action: 0}\n")
    with pytest.raises(SettingsError, match=r"max_tokens\.writer_action"):
        load_decoding(bad)


def test_classify_and_parse():
    def body(content, finish="stop", **msg):
        return {"choices": [{"message": {"content": content, **msg}, "finish_reason": finish}]}

    assert classify(body("x"))[0] == "ok"
    assert classify(body("x", "length"))[0] == "truncated"
    assert classify(body("x", "content_filter"))[0] == "refused"
    assert classify(body(None, refusal="no"))[:3:2] == ("refused", "no")
    assert classify(body("  "))[0] == "unparseable"
    v = parse_teacher_verdict(
        '{"label": "incident", "suspicion": 87.6, "cited_call_ids": ["c1"], "findings": "f"}'
    )
    assert v == {"label": "incident", "suspicion": 88, "cited_call_ids": ["c1"], "rationale": "f"}
    assert not parse_memory_records('{"records": [{"authorization_ref": "a"}]}')
    assert "records[0].issuer" in parse_memory_records('{"records": [{"authorization_ref": "a"}]}').reason
