"""Policy reuse with a served writer (the ``openai`` backend through eval/chat_server.py on loopback),
long histories written by update waves, the report's invalid-memory and failed-update columns, the
issuer check of the rules executor, and select() naming its problems."""

from __future__ import annotations

import json
import logging
import threading

import pytest

from data_prep.oracle import gold_memory_from_events
from data_prep.sft.render import Prompts, memory_answer, policy_history_text
from eval.chat_model import Generation, PromptTooLong
from eval.chat_server import ChatServer
from eval.generation import BackendError, DecodingConfig, ScriptedBackend
from eval.openai_backend import EndpointSettings, OpenAIBackend, guard_text, is_prompt_too_long
from eval.policy_reuse_eval import REPO_ROOT, PolicyConfig, run_policy
from eval.sources import SourceError


def _cfg(cases, out, **kw):
    base = dict(
        cases=str(cases), limit=None, out=str(out), progress=False, bootstrap_resamples=200, chunk_size=4,
        base_writer=False, constrained_writer=False,  # a served model offers no grammar here
    )  # fmt: skip
    base.update(kw)
    return PolicyConfig(**base)


def _memory_row(out) -> str:
    """The writer's row of the report's memory table."""
    text = (out / "report.md").read_text().split("## Memory", 1)[1]
    return next(line for line in text.splitlines() if line.startswith("| writer memory"))


def _items(out):
    return [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]


class Writer:
    """A faithful memory writer that cannot read more than ``max_blocks`` blocks at once: one shot, it
    answers with the gold memory; by blocks, with the memory so far, and the gold memory after the last
    block. What it gets as a prompt it cannot take raises PromptTooLong (a server answers 400)."""

    def __init__(self, cases: list[dict], max_blocks: int = 99):
        self.max_blocks = max_blocks
        self.memory_prompt = Prompts(REPO_ROOT / "configs" / "prompts").text["writer_memory"]
        self.whole = {policy_history_text(c): c for c in cases}
        self.block = {}
        for c in cases:
            for k, b in enumerate(c["blocks"]):
                self.block[policy_history_text({**c, "blocks": [b]})] = (c, k == len(c["blocks"]) - 1)
        self.calls = 0
        self.lock = threading.Lock()

    def text(self, messages: list[dict]) -> str:
        with self.lock:
            self.calls += 1
        if messages[0]["content"] != self.memory_prompt:
            return '{"decision": "escalate"}'
        user = messages[1]["content"]
        if user.count("\n== Block ") > self.max_blocks:
            raise PromptTooLong(f"the prompt has {len(user)} tokens; at most 100 fit with max_tokens 600")
        if user in self.whole:
            return memory_answer(gold_memory_from_events(self.whole[user]))
        head, _, rest = user.partition("\n\nAuthorization memory so far (from the earlier blocks):\n")
        case, last = self.block[head]
        if last:
            return memory_answer(gold_memory_from_events(case))
        return rest.split("\n\n")[0]  # the memory so far, unchanged

    def generate(self, messages, *, max_tokens, temperature, top_p, seed):
        return Generation(self.text(messages), 10, 5, "stop")

    def responder(self, msgs, task, adapter):
        return self.text(msgs)


@pytest.fixture
def served():
    """Start a ChatServer for a Writer: ``served(writer) -> url``."""
    servers = []

    def start(writer: Writer, **extra) -> str:
        server = ChatServer(
            ("127.0.0.1", 0), model_id="base", generate=writer.generate, prompt_error=PromptTooLong,
            log=lambda line: None, max_tokens_limit=4096, extra_models={"writer": writer.generate, **extra},
        )  # fmt: skip
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server.url

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def _backend(url: str, **kw) -> OpenAIBackend:
    return OpenAIBackend(EndpointSettings(endpoint=url, model="writer", **kw), DecodingConfig())


def test_served_writer_reproduces_the_in_process_figures(served, cases_file, cases_list, tmp_path):
    url = served(Writer(cases_list))
    backend = _backend(url, concurrency=3)
    out = run_policy(_cfg(cases_file, tmp_path / "served"), writer=backend, decoding=DecodingConfig())
    ref = run_policy(
        _cfg(cases_file, tmp_path / "local"),
        writer=ScriptedBackend(Writer(cases_list).responder),
        decoding=DecodingConfig(),
    )
    assert (out / "summary.json").read_bytes() == (ref / "summary.json").read_bytes()
    s = json.loads((out / "summary.json").read_text())
    assert s["conditions"]["writer"]["rates"]["calibrated"]
    assert s["memory"]["writer"]["status"].get("invalid", 0) == 0
    assert backend.requests == len(cases_list)  # one request per case: nothing failed, nothing repeated
    man = json.loads((out / "manifest.json").read_text())
    assert man["checkpoints"]["writer"]["backend"] == "openai"
    assert man["checkpoints"]["writer"]["endpoint"] == url + "/chat/completions"


def test_long_histories_are_written_by_update_waves(served, cases_file, cases_list, tmp_path):
    multi = [c for c in cases_list if len(c["blocks"]) > 1]
    assert multi, "the fixture needs cases with more than one block"
    url = served(Writer(cases_list, max_blocks=1))
    out = run_policy(_cfg(cases_file, tmp_path / "o"), writer=_backend(url), decoding=DecodingConfig())
    s = json.loads((out / "summary.json").read_text())
    w = s["memory"]["writer"]
    assert s["conditions"]["writer"]["rates"]["calibrated"]  # gold memory in the end, by blocks
    assert w["status"].get("invalid", 0) == 0
    assert sorted(w["prompt_too_long_cases"]) == sorted(c["case_id"] for c in multi)
    assert w["modes"] == {
        k: v
        for k, v in {"one_shot": len(cases_list) - len(multi), "one_shot_then_blocks": len(multi)}.items()
        if v
    }
    for it in _items(out):
        if it["id"] in w["prompt_too_long_cases"]:
            assert it["writer"]["attempts"][0]["status"] == "prompt_too_long"
            assert (
                len(it["writer"]["attempts"]) == 1 + it["writer"]["updates"]
            )  # no repair of a too-long prompt
    report = (out / "report.md").read_text()
    assert "prompt too long" in report and "Prompt too long for one shot (cases): " in report

    # without the fallback the same cases stay invalid, and the report and the summary line say why
    out2 = run_policy(
        _cfg(cases_file, tmp_path / "fail", long_history="fail"),
        writer=_backend(url),
        decoding=DecodingConfig(),
    )
    s2 = json.loads((out2 / "summary.json").read_text())
    w2 = s2["memory"]["writer"]
    assert w2["status"]["invalid"] == len(multi) and w2["invalid_reasons"] == {"prompt_too_long": len(multi)}
    assert w2["failed_updates"] == len(multi) and w2["updates"] == len(cases_list)
    row = _memory_row(out2)
    assert f"| {len(multi)} | prompt_too_long ({len(multi)}) |" in row
    assert f"| {len(multi)}/{len(cases_list)} |" in row  # updates failed
    from eval.report import summary_lines

    line = next(x for x in summary_lines(out2) if "writer memory" in x)
    assert f"invalid {len(multi)} (prompt_too_long {len(multi)})" in line


def test_failed_incremental_updates_are_reported(cases_file, cases_list, tmp_path):
    def responder(msgs, task, adapter):
        if task != "writer_memory":
            return '{"decision": "decline"}'
        return "not json"

    out = run_policy(
        _cfg(cases_file, tmp_path / "o", incremental=True),
        writer=ScriptedBackend(responder),
        decoding=DecodingConfig(),
    )
    s = json.loads((out / "summary.json").read_text())
    blocks = sum(len(c["blocks"]) for c in cases_list)
    w = s["memory"]["writer"]
    assert w["updates"] == blocks and w["failed_updates"] == blocks
    assert w["status"] == {"invalid": len(cases_list)} and w["modes"] == {"blocks": len(cases_list)}
    row = _memory_row(out)
    assert f"| {blocks}/{blocks} |" in row


def test_rules_executor_refuses_records_of_unauthorized_issuers(cases_file, cases_list, tmp_path):
    by_history = {policy_history_text(c): c for c in cases_list}

    def forged(msgs, task, adapter):
        gold = gold_memory_from_events(by_history[msgs[1]["content"]])
        return memory_answer([{**r, "issuer": "someone-else"} for r in gold])

    out = run_policy(
        _cfg(cases_file, tmp_path / "o"), writer=ScriptedBackend(forged), decoding=DecodingConfig()
    )
    s = json.loads((out / "summary.json").read_text())
    r = s["conditions"]["writer"]["rates"]
    assert r["authorized_use"]["value"] == 0.0 and r["unauthorized_submission"]["value"] == 0.0
    assert s["conditions"]["gold_memory"]["rates"]["calibrated"]


def test_select_names_its_problems_before_giving_up(tmp_path, caplog):
    d = tmp_path / "eal"
    d.mkdir()
    (d / "a.yaml").write_text("case_id: [unclosed\n")
    (d / "b.yaml").write_text("case_id: x\n")
    with caplog.at_level(logging.ERROR, logger="ledgerwright.eval"), pytest.raises(SourceError) as err:
        run_policy(
            _cfg(d, tmp_path / "o"), writer=ScriptedBackend(lambda m, t, a: ""), decoding=DecodingConfig()
        )
    assert "a.yaml" in str(err.value) and "2 problem(s)" in str(err.value)
    logged = [r.getMessage() for r in caplog.records]
    assert any("a.yaml" in m for m in logged) and any("b.yaml" in m for m in logged)


def test_backend_errors_and_retries(served, cases_list):
    state = {"n": 0}

    def flaky(messages, *, max_tokens, temperature, top_p, seed):
        state["n"] += 1
        if state["n"] == 1:
            raise RuntimeError("device busy")  # a 500: retried
        return Generation('{"records": [] } trailing', 3, 2, "stop")

    url = served(Writer(cases_list), flaky=flaky)
    b = OpenAIBackend(
        EndpointSettings(endpoint=url, model="flaky", max_attempts=2, timeout_s=10), DecodingConfig()
    )
    [c] = b.complete([[{"role": "user", "content": "hi"}]], task="writer_memory")
    assert c.ok and c.text == '{"records": [] }' and c.stop == "json_end" and state["n"] == 2
    with pytest.raises(BackendError, match="base model's served name"):
        b.complete([[{"role": "user", "content": "hi"}]], task="writer_memory", adapter=False)
    missing = OpenAIBackend(EndpointSettings(endpoint=url, model="nope", max_attempts=1), DecodingConfig())
    [c] = missing.complete([[{"role": "user", "content": "hi"}]], task="writer_memory")
    assert not c.ok and c.error.startswith("http_404")
    with pytest.raises(BackendError, match="endpoint"):
        OpenAIBackend(EndpointSettings(endpoint="ftp://x", model="w"), DecodingConfig())
    assert guard_text('{"a": "b"}\n\n{"c": 1}', 400) == ('{"a": "b"}', "json_end")
    assert is_prompt_too_long("prompt of 9 tokens exceeds the input limit of 4")
    assert is_prompt_too_long("This model's maximum context length is 8192 tokens.")
    assert not is_prompt_too_long("device lost")


def test_policy_reuse_command_with_a_served_writer(served, cases_file, cases_list, tmp_path, capsys):
    from eval.policy_reuse import main

    url = served(Writer(cases_list, max_blocks=1))
    argv = ["--cases", str(cases_file), "--limit", "all", "--out", str(tmp_path / "o"), "--no-progress",
            "--no-base-writer", "--bootstrap-resamples", "100", "--backend", "openai", "--endpoint", url,
            "--writer-model", "writer", "--long-history", "fail"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "writer memory (adapter)" in out and "memories valid" in out and "prompt_too_long" in out
    man = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert man["config"]["writer"] == f"writer @ {url}/chat/completions"
    # a reader executor needs a served reader with --backend openai; a missing endpoint is a clear error
    assert main([*argv[:-6], "--backend", "openai", "--out", str(tmp_path / "p")]) == 2
    assert "--endpoint URL" in capsys.readouterr().err
    # the base-writer baseline needs the base's served name, said before any request
    no_base = [a for a in argv if a != "--no-base-writer"]
    no_base[no_base.index("--out") + 1] = str(tmp_path / "q")
    assert main(no_base) == 2
    assert "--writer-base-model" in capsys.readouterr().err
    assert main([*no_base, "--writer-base-model", "base"]) == 0


def test_sabotage_eval_with_a_served_writer_and_reader(runs_file, tmp_path):
    """eval/sabotage_eval.py through two served names (and the reader's base) equals the in-process run."""
    from evalkit import default_responder

    from eval.sabotage_eval import SabotageConfig, run_sabotage

    texts = Prompts(REPO_ROOT / "configs" / "prompts").text
    task_of = {texts[t]: t for t in ("writer_action", "reader_verdict")}

    def role(adapter: bool):
        def generate(messages, *, max_tokens, temperature, top_p, seed):
            text = default_responder(messages, task_of[messages[0]["content"]], adapter)
            return Generation(text, 10, 5, "stop")

        return generate

    server = ChatServer(
        ("127.0.0.1", 0), model_id="base", generate=role(False), log=lambda line: None,
        extra_models={"writer": role(True), "reader": role(True)},
    )  # fmt: skip
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:

        def cfg(out):
            return SabotageConfig(
                runs=str(runs_file), limit=None, out=str(tmp_path / out), progress=False,
                bootstrap_resamples=100, chunk_size=4, base_writer=False, constrained_writer=False,
            )  # fmt: skip

        decoding = DecodingConfig()
        writer = OpenAIBackend(EndpointSettings(endpoint=server.url, model="writer"), decoding)
        reader = OpenAIBackend(
            EndpointSettings(endpoint=server.url, model="reader", base_model="base"), decoding
        )
        remote = run_sabotage(cfg("served"), writer=writer, reader=reader, decoding=decoding)
        local_b = ScriptedBackend(default_responder)
        local = run_sabotage(cfg("local"), writer=local_b, reader=local_b, decoding=decoding)
        a, b = (json.loads((o / "summary.json").read_text()) for o in (remote, local))
        # the one difference: served answers report the guard's json_end (as the transformers backend
        # does for an answer whose object closed), the scripted backend reports no stop reason
        assert a["writer"]["adapter"]["guard_stops"] > 0 and b["writer"]["adapter"]["guard_stops"] == 0
        for s in (a, b):
            for w in s["writer"].values():
                if w:
                    w.pop("guard_stops", None)
        assert a == b
        assert writer.requests > 0 and reader.requests > 0
    finally:
        server.shutdown()
        server.server_close()
