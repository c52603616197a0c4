"""On the tiny model a test builds: the ``openai`` backend through ``eval/serve.py`` (a subprocess on
loopback, the adapter served beside its base as vLLM serves LoRA modules) gives the transformers
backend's answers token for token under greedy decoding. (The export of such a checkpoint is tested in
tests/train/test_export.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from evalkit import start_serve, stop_serve, train_fixtures

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_openai_backend_through_serve_equals_transformers(tiny_base, tmp_path, cases_file):
    from eval.generation import DecodingConfig, TransformersBackend
    from eval.openai_backend import EndpointSettings, OpenAIBackend
    from eval.policy_reuse_eval import PolicyConfig, run_policy

    ckpt = train_fixtures().make_lora_checkpoint(tiny_base, tmp_path / "ckpt")
    decoding = DecodingConfig(
        guard=False, threads=1, max_new_tokens={"writer_memory": 24, "reader_policy": 6}, batch_size=4
    )

    def cfg(out):
        return PolicyConfig(
            cases=str(cases_file), limit=3, out=str(tmp_path / out), progress=False, bootstrap_resamples=50,
            chunk_size=4, executor="base", base_writer=True, teacher=False,
            constrained_writer=False,  # the served model offers no grammar here
        )  # fmt: skip

    local = run_policy(cfg("local"), writer=TransformersBackend(ckpt, decoding), decoding=decoding)
    proc, url = start_serve(
        tiny_base,
        tmp_path / "serve.log",
        *("--served-model-name", "base", "--lora-modules", f"writer={ckpt}"),
        timeout=180,
        env={"PYTHONPATH": str(REPO)},
    )
    try:
        served = OpenAIBackend(
            EndpointSettings(endpoint=url, model="writer", base_model="base", concurrency=2), decoding
        )
        remote = run_policy(cfg("served"), writer=served, decoding=decoding)
        served.close()  # its keep-alive connections end, so the server's workers let go at once
    finally:
        stop_serve(proc, timeout=30)

    def answers(out):
        items = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
        return [
            (
                it["id"],
                [a["raw"] for a in it["writer"]["attempts"]],
                [a["raw"] for a in it["base_writer"]["attempts"]],
                {k: [d["raw"] for d in c["decisions"]] for k, c in it["conditions"].items() if c},
            )
            for it in items
        ]

    a, b = answers(local), answers(remote)
    assert a == b  # greedy: the same text for every writer answer, base answer and executor decision
    assert any(raw for _, w, _, _ in a for raw in w)  # the model did answer something
    assert (local / "summary.json").read_bytes() == (remote / "summary.json").read_bytes()
