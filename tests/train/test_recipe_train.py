"""The recipe end to end on the tiny default (a few steps each): writer and reader train and save, a
reloaded adapter reproduces the trained logits, the 4-bit path runs through bitsandbytes, 2-process DDP
keeps ranks identical, and a killed-then-resumed run equals an uninterrupted one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

SMALL = [
    "--max-steps",
    "6",
    "--save-steps",
    "3",
    "--eval-steps",
    "3",
    "--logging-steps",
    "1",
    "--eval-examples",
    "8",
    "--parse-check-examples",
    "2",
    "--max-length",
    "512",
]


TINY_ARGS: list[str] = []


@pytest.fixture(autouse=True, scope="module")
def _tiny_args(tiny_args):
    TINY_ARGS[:] = tiny_args


def run_dirs(sft_dir, cache_dir, out) -> list[str]:
    """The data, cache and output flags every training command here takes."""
    return ["--data-dir", str(sft_dir), "--cache-dir", str(cache_dir), "--output-dir", str(out)]


def _cfg(role, sft_dir, cache_dir, out, *extra):
    from train.config import parse_config

    return parse_config(
        role,
        [
            *run_dirs(sft_dir, cache_dir, out),
            *TINY_ARGS,
            *SMALL,
            *extra,
        ],
    )


def _env(**extra):
    env = dict(os.environ)
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop("LEDGERWRIGHT_TEST_EXIT_AFTER_SAVE", None)
    env.update(extra)
    return env


def _accelerate(*args, env=None, cwd=None, timeout=600):
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=env or _env(), cwd=cwd or REPO
    )


def _adapter(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path / "adapter_model.safetensors"))


class KeepModel:
    """Trainer callback that keeps the trained model for the test."""

    def __init__(self):
        from transformers import TrainerCallback

        outer = self

        class _CB(TrainerCallback):
            def on_train_end(self, args, state, control, model=None, **kwargs):
                outer.model = model

        self.callback = _CB()
        self.model = None


@pytest.fixture(scope="module")
def writer_run(sft_dir, cache_dir, tiny_base, tmp_path_factory):
    from train.recipe import run

    keep = KeepModel()
    out = tmp_path_factory.mktemp("writer") / "ckpt"
    cfg = _cfg("writer", sft_dir, cache_dir, out, "--examples", "16", "--seed", "0")
    run(cfg, command="test", callbacks=[keep.callback])
    return out, keep.model, cfg


def test_writer_trains_and_saves(writer_run, sft_dir):
    out, _, cfg = writer_run
    names = {p.name for p in out.iterdir()}
    for f in (
        "adapter_model.safetensors",
        "adapter_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "config.yaml",
        "manifest.json",
        "README.md",
        "loss_curves.png",
        "train_ids.json",
        "log_history.json",
        "base-model",
    ):
        assert f in names, f
    assert (out / "checkpoint-3").is_dir() and (out / "checkpoint-6").is_dir()
    m = json.loads((out / "manifest.json").read_text())
    assert m["role"] == "writer" and m["tasks"] == ["writer_action", "writer_memory"]
    assert m["examples"] == 16 and m["seed"] == 0 and m["world_size"] == 1
    assert m["code"].keys() == {"revision", "dirty"}
    for pkg in ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "bitsandbytes"):
        assert m["versions"][pkg]
    assert m["dataset"]["fingerprints"]["writer_action/train"].startswith("sha256:")
    assert m["tokens_seen"] > 0 and m["wall_seconds"] > 0
    assert m["results"]["global_step"] == 6
    assert m["results"]["eval_loss_initial"] is not None and m["results"]["eval_loss_final"] is not None
    assert m["results"]["train_loss_final"] is not None
    assert m["results"]["parse_check"]["answers"] > 0
    assert m["quantization"]["load_in_4bit"] and m["quantization"]["double_quant"]
    assert m["distributed"]["ranks_agree"]
    # every output file is hashed, and the hashes hold
    from train.manifest import sha256_file

    assert "adapter_model.safetensors" in m["outputs"] and "README.md" in m["outputs"]
    assert not any(k.startswith("checkpoint-") for k in m["outputs"])
    for rel, digest in m["outputs"].items():
        assert sha256_file(out / rel) == digest
    # no host or user names
    text = (out / "manifest.json").read_text()
    for secret in {os.uname().nodename, os.environ.get("USER", "")} - {"", "root"}:
        assert secret not in text
    # the model card is HF style and shows the curve
    card = (out / "README.md").read_text()
    assert card.startswith("---\nbase_model: ") and "library_name: peft" in card and "loss_curves.png" in card
    assert (out / "loss_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the sampled ids are the recipe's deterministic sample
    from train.data import load_tasks, sample_train

    ids = json.loads((out / "train_ids.json").read_text())["ids"]
    assert ids == [r["id"] for r in sample_train(load_tasks(sft_dir, cfg.sft_tasks), 16, 0, False)]
    # resolved config round-trips
    from train.config import load_preset

    assert load_preset(out / "config.yaml").to_dict() == cfg.to_dict()


def test_reloaded_adapter_reproduces_the_trained_logits(writer_run, sft_dir):
    import torch

    from train.modeling import load_trained

    out, trained, _ = writer_run
    reloaded, tok = load_trained(out)
    from train.data import load_tasks

    msgs = load_tasks(sft_dir, ["writer_action"]).splits["heldout"][0]["messages"]
    ids = tok.apply_chat_template(msgs, tokenize=True, return_tensors="pt", return_dict=True)["input_ids"]
    trained.eval()
    with torch.no_grad():
        a = trained(input_ids=ids).logits
        b = reloaded(input_ids=ids).logits
        with reloaded.disable_adapter():
            base = reloaded(input_ids=ids).logits
    assert torch.allclose(a, b, atol=1e-5, rtol=0), (a - b).abs().max()
    assert not torch.allclose(a, base, atol=1e-4)  # the adapter does change the model
    # the copy of the tiny base saved with the checkpoint gives the same model
    copy, _ = load_trained(out, base=str(out / "base-model"))
    with torch.no_grad():
        assert torch.equal(copy(input_ids=ids).logits, b)


def test_4bit_path_goes_through_bitsandbytes(writer_run):
    import bitsandbytes as bnb
    import torch

    _, model, _ = writer_run
    layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert layers, "no 4-bit linear layers"
    for m in layers:
        assert m.weight.dtype == torch.uint8
        qs = m.weight.quant_state
        assert qs.quant_type == "nf4" and qs.nested  # double quantization
        assert not getattr(qs, "packing_format_for_cpu", False)  # not repacked for CPU inference
    lora = {n: p for n, p in model.named_parameters() if "lora_" in n}
    assert lora and all(p.requires_grad for p in lora.values())
    assert all(not p.requires_grad for n, p in model.named_parameters() if "lora_" not in n)
    # every projection of every layer carries an adapter (all-linear)
    targets = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in lora}
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"} <= targets


def test_an_evaluation_does_not_change_the_training_gradients(sft_dir, cache_dir, tiny_base, tmp_path):
    """bitsandbytes repacks 4-bit weights for a CPU inference kernel without autograd on the first
    eval-mode forward; the recipe turns that off, so gradients after an evaluation are the same."""
    import torch

    from train.data import load_tasks
    from train.modeling import load_tokenizer
    from train.recipe import make_trainer

    cfg = _cfg("writer", sft_dir, cache_dir, tmp_path / "o", "--lora-dropout", "0")
    rows = load_tasks(sft_dir, ["writer_action"]).splits["train"][:4]
    tok = load_tokenizer(str(tiny_base), cfg)

    def grads(evaluate_first: bool) -> dict:
        trainer = make_trainer(cfg, str(tiny_base), tok, rows, rows, tmp_path / f"o{evaluate_first}")
        if evaluate_first:
            trainer.evaluate()
        model = trainer.model
        model.train()
        batch = trainer.data_collator([trainer.train_dataset[0]])  # the same batch both times
        trainer.compute_loss(model, batch).backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if "lora_B" in n}

    plain, after_eval = grads(False), grads(True)
    assert plain.keys() == after_eval.keys() and plain
    assert all(torch.count_nonzero(g) > 0 for g in plain.values())
    for name in plain:
        assert torch.allclose(plain[name], after_eval[name], atol=1e-6, rtol=1e-5), name


def test_reader_trains_and_saves_both_tasks_with_checkpointing(sft_dir, cache_dir, tiny_base, tmp_path):
    from train.recipe import run

    out = run(
        _cfg(
            "reader",
            sft_dir,
            cache_dir,
            tmp_path / "r",
            "--task",
            "both",
            "--examples",
            "20",
            "--max-steps",
            "3",
            "--parse-check-examples",
            "0",
            "--gradient-checkpointing",  # the 12B presets' setting (off in the tiny default)
            "--lora-dropout",
            "0.05",
        )
    )
    m = json.loads((out / "manifest.json").read_text())
    assert m["role"] == "reader" and m["tasks"] == ["reader_verdict", "reader_policy"]
    assert m["config"]["gradient_checkpointing"] is True
    assert (out / "adapter_model.safetensors").is_file() and m["results"]["global_step"] == 3
    ids = json.loads((out / "train_ids.json").read_text())["ids"]
    assert any(i.startswith("reader_verdict") for i in ids) and any(
        i.startswith("reader_policy") for i in ids
    )


def test_ddp_two_processes_keep_identical_parameters(sft_dir, cache_dir, tiny_base, tmp_path):
    out = tmp_path / "ddp"
    proc = _accelerate(
        "--config_file",
        str(REPO / "configs/accelerate/cpu_ddp.yaml"),
        "--main_process_port",
        "29617",
        str(REPO / "train/writer.py"),
        *run_dirs(sft_dir, cache_dir, out),
        *TINY_ARGS,
        *SMALL,
        "--max-steps",
        "4",
        "--parse-check-examples",
        "0",
        env=_env(OMP_NUM_THREADS="1"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads((out / "manifest.json").read_text())
    assert m["world_size"] == 2 and m["hardware"]["world_size"] == 2
    assert len(m["distributed"]["param_digests"]) == 2
    assert m["distributed"]["ranks_agree"], m["distributed"]


def test_killed_after_first_checkpoint_then_resumed_equals_uninterrupted(
    sft_dir, cache_dir, tiny_base, tmp_path
):
    common = [
        str(REPO / "train/writer.py"),
        "--data-dir",
        str(sft_dir),
        "--cache-dir",
        str(cache_dir),
        *TINY_ARGS,
        *SMALL,
        "--parse-check-examples",
        "0",
        "--examples",
        "16",
        "--lora-dropout",  # dropout draws random numbers: the resumed run must restore the RNG state
        "0.1",
    ]
    # plain `accelerate launch` without a config: one process on this machine
    full = _accelerate(*common, "--output-dir", str(tmp_path / "full"))
    assert full.returncode == 0, full.stderr[-3000:]
    killed = _accelerate(
        *common, "--output-dir", str(tmp_path / "part"), env=_env(LEDGERWRIGHT_TEST_EXIT_AFTER_SAVE="1")
    )
    assert killed.returncode != 0
    assert (tmp_path / "part/checkpoint-3").is_dir() and not (tmp_path / "part/manifest.json").exists()
    resumed = _accelerate(*common, "--output-dir", str(tmp_path / "part"), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    a, b = _adapter(tmp_path / "full"), _adapter(tmp_path / "part")
    assert a.keys() == b.keys()
    import torch

    assert all(torch.equal(a[k], b[k]) for k in a)
    ma = json.loads((tmp_path / "full/manifest.json").read_text())
    mb = json.loads((tmp_path / "part/manifest.json").read_text())
    assert mb["resumed_from"] == "checkpoint-3" and ma["resumed_from"] is None
    for key in ("train_loss_final", "eval_loss_final", "eval_loss_initial", "global_step"):
        assert ma["results"][key] == mb["results"][key], key
    losses = lambda m: [(h["step"], h["loss"]) for h in m if "loss" in h]  # noqa: E731
    la = json.loads((tmp_path / "full/log_history.json").read_text())["log_history"]
    lb = json.loads((tmp_path / "part/log_history.json").read_text())["log_history"]
    assert losses(la) == losses(lb)
    assert ma["tokens_seen"] == mb["tokens_seen"]
