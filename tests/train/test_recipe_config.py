"""Config, presets, sampling and the small checks of the recipe (no training here)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from train.config import ConfigError, TinyBaseConfig, TrainConfig, load_preset, parse_config

REPO = Path(__file__).resolve().parents[2]
PRESETS = REPO / "configs" / "train"
ACCEL = REPO / "configs" / "accelerate"


def test_tiny_preset_equals_the_defaults():
    """The embedded default (no --config) and configs/train/tiny.yaml are the same run."""
    assert load_preset(PRESETS / "tiny.yaml") == TrainConfig()


@pytest.mark.parametrize("name", ["tiny.yaml", "gemma-3-12b.yaml", "mistral-nemo-12b.yaml"])
def test_presets_load_and_resolve(name):
    cfg = parse_config("writer", ["--config", str(PRESETS / name)])
    assert cfg.load_in_4bit and cfg.bnb_4bit_quant_type == "nf4" and cfg.bnb_4bit_use_double_quant
    assert cfg.lora_target_modules == "all-linear"
    assert cfg.assistant_only_loss and cfg.packing
    assert cfg.gradient_checkpointing == (name != "tiny.yaml")  # off for the tiny CPU default only
    assert (REPO / cfg.chat_template).is_file()
    assert cfg.task == "both" and cfg.output_dir == "ckpt"


def test_real_presets():
    gemma = load_preset(PRESETS / "gemma-3-12b.yaml")
    nemo = load_preset(PRESETS / "mistral-nemo-12b.yaml")
    assert gemma.compute_dtype == nemo.compute_dtype == "bfloat16"
    assert gemma.attn_implementation == "blockwise_fp32_global"
    assert nemo.attn_implementation in ("sdpa", "flash_attention_2")
    assert "gemma3" in gemma.chat_template and "nemo" in nemo.chat_template
    assert gemma.model != "tiny" and nemo.model != "tiny"


def test_precedence_defaults_preset_flags(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text("learning_rate: 1.0e-3\nlora_r: 8\ntiny:\n  hidden_size: 128\n")
    cfg = parse_config("writer", ["--config", str(preset), "--lora-r", "4", "--tiny-pretrain-steps", "7"])
    assert cfg.learning_rate == 1e-3  # preset over default
    assert cfg.lora_r == 4  # flag over preset
    assert cfg.tiny.hidden_size == 128 and cfg.tiny.pretrain_steps == 7
    assert cfg.max_length == TrainConfig().max_length
    cfg = parse_config("writer", ["--no-packing", "--eval-steps", "none", "--examples", "561", "--seed", "3"])
    assert cfg.packing is False and cfg.eval_steps is None and cfg.examples == 561 and cfg.seed == 3


def test_role_defaults():
    r = parse_config("reader", [])
    assert r.task == "verdict" and r.output_dir == "ckpt-reader" and r.sft_tasks == ["reader_verdict"]
    assert parse_config("reader", ["--task", "both"]).sft_tasks == ["reader_verdict", "reader_policy"]
    assert parse_config("writer", ["--task", "both"]).sft_tasks == ["writer_action", "writer_memory"]
    assert parse_config("writer", ["--task", "memory"]).sft_tasks == ["writer_memory"]


@pytest.mark.parametrize(
    "text, needle",
    [
        ("learning_rat: 1\n", "learning_rat: unknown field"),
        ("lora_r: many\n", "lora_r: expected int"),
        ("tiny:\n  hiddn: 3\n", "tiny.hiddn: unknown field"),
        ("packing: maybe\n", "packing: expected bool"),
        ("[1, 2]\n", "expected a mapping"),
    ],
)
def test_bad_presets_name_file_and_field(tmp_path, text, needle):
    preset = tmp_path / "bad.yaml"
    preset.write_text(text)
    with pytest.raises(ConfigError) as err:
        parse_config("writer", ["--config", str(preset)])
    assert needle in str(err.value) and str(preset) in str(err.value)


def test_bad_flags():
    with pytest.raises(ConfigError, match="task"):
        parse_config("reader", ["--task", "action"])
    with pytest.raises(ConfigError, match="report_to"):
        parse_config("writer", ["--report-to", "mlflow"])
    with pytest.raises(ConfigError, match="--examples: expected int"):
        parse_config("writer", ["--examples", "lots"])


def test_trl_spellings_and_no_abbreviations(capsys):
    """TRL users type --learning_rate, --bf16 and --report_to a b; a typo or a prefix is an error."""
    trl = parse_config("writer", ["--learning_rate", "1e-4", "--bf16", "--report_to", "none"])
    ours = parse_config("writer", ["--learning-rate", "1e-4", "--compute-dtype", "bfloat16"])
    assert trl == ours and trl.learning_rate == 1e-4
    assert parse_config("writer", ["--no-load_in_4bit"]).load_in_4bit is False
    with pytest.raises(ConfigError, match="report_to"):  # both packages checked at run time, not here
        parse_config("writer", ["--report_to", "wandb", "mlflow"])
    assert parse_config("writer", ["--report_to", "wandb", "trackio"]).report_to == "wandb,trackio"
    for typo in (["--learn", "1e-4"], ["--lerning_rate", "1e-4"]):
        with pytest.raises(SystemExit):
            parse_config("writer", typo)
        assert f"unrecognized arguments: {typo[0]}" in capsys.readouterr().err


def test_every_field_has_help():
    for cls in (TrainConfig, TinyBaseConfig):
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help text"


# ---- sampling ---------------------------------------------------------------------------------
def test_examples_and_seed_select_ids_deterministically(sft_dir):
    from train.data import load_tasks, sample_train

    data = load_tasks(sft_dir, ["writer_action"])
    ids = lambda n, s: [r["id"] for r in sample_train(data, n, s, False)]  # noqa: E731
    a, b, c = ids(10, 0), ids(10, 0), ids(10, 1)
    assert a == b
    assert len(a) == len(set(a)) == 10
    assert a != c and set(a) != set(c)
    assert ids(5, 0) == a[:5]  # a smaller sample is a prefix
    # the same selection from a fresh load
    assert [r["id"] for r in sample_train(load_tasks(sft_dir, ["writer_action"]), 10, 0, False)] == a


def test_too_few_examples_is_a_clear_error_unless_upsampling(sft_dir):
    from train.data import NotEnoughExamples, load_tasks, sample_train

    data = load_tasks(sft_dir, ["writer_action"])
    n = len(data.splits["train"])
    with pytest.raises(NotEnoughExamples, match=rf"--examples 561 .*holds \({n}\).*--allow-upsample"):
        sample_train(data, 561, 0, False)
    rows = sample_train(data, n * 2 + 3, 0, True)
    assert len(rows) == n * 2 + 3
    assert {r["id"] for r in rows} == {r["id"] for r in data.splits["train"]}


def test_mixed_tasks_and_heldout_families(sft_dir):
    from train.data import load_tasks

    data = load_tasks(sft_dir, ["reader_verdict", "reader_policy"])
    assert {r["task"] for r in data.splits["train"]} == {"reader_verdict", "reader_policy"}
    train_fams = {r["family"] for r in data.splits["train"]}
    assert train_fams.isdisjoint({r["family"] for r in data.splits["heldout"]})
    assert set(data.fingerprints) == {
        f"{t}/{s}" for t in ("reader_verdict", "reader_policy") for s in ("train", "validation", "heldout")
    }
    assert all(v.startswith("sha256:") for v in data.fingerprints.values())


def test_bad_data_dir_errors(tmp_path, sft_dir):
    from train.data import DataError, load_tasks, resolve_sft_dir

    with pytest.raises(DataError, match="no such directory"):
        resolve_sft_dir(str(tmp_path / "nope"), tmp_path)
    # a directory that no build sealed (no manifest), or one edited after its build, is refused
    with pytest.raises(DataError, match="rebuild it with data_prep/build.py"):
        load_tasks(tmp_path, ["writer_memory"])
    import shutil

    edited = tmp_path / "edited"
    shutil.copytree(sft_dir, edited)
    (edited / "writer_action" / "extra.json").write_text("{}")
    with pytest.raises(DataError, match="rebuild it"):
        load_tasks(edited, ["writer_action"])
    from data_prep.manifest import file_digests, write_manifest

    sealed = tmp_path / "sealed"
    (sealed / "reader_verdict").mkdir(parents=True)
    write_manifest(sealed, {"outputs": file_digests(sealed)})
    with pytest.raises(DataError, match="no SFT dataset for task 'writer_memory'"):
        load_tasks(sealed, ["writer_memory"])


def test_truncation_is_counted(tiny_base, sft_dir, caplog):
    from transformers import AutoTokenizer

    from train.data import length_stats, load_tasks, warn_truncation

    tok = AutoTokenizer.from_pretrained(str(tiny_base))
    rows = load_tasks(sft_dir, ["writer_action"]).splits["train"]
    full = length_stats(rows, tok, 100_000)
    assert full.truncated == 0 and full.assistant_tokens > 0
    cut = length_stats(rows, tok, full.longest - 1)
    assert cut.truncated >= 1
    with caplog.at_level("WARNING", logger="ledgerwright.train"):
        warn_truncation(cut, "training data")
    assert f"{cut.truncated} of {len(rows)} examples are longer than max_length" in caplog.text


# ---- observability and environment ------------------------------------------------------------
def test_report_to_tensorboard_without_the_package_is_a_clear_error():
    import importlib.util

    from train.recipe import RecipeError, check_report_to

    assert check_report_to("none") == "none"
    if importlib.util.find_spec("tensorboard") or importlib.util.find_spec("tensorboardX"):
        pytest.skip("tensorboard is installed here")
    with pytest.raises(RecipeError, match="needs the tensorboard package.*pip install tensorboard"):
        check_report_to("tensorboard")
    # and through the entry script, before anything expensive happens
    proc = subprocess.run(
        [sys.executable, str(REPO / "train/writer.py"), "--report-to", "tensorboard"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "needs the tensorboard package" in proc.stderr


def test_entry_scripts_help():
    for role in ("writer", "reader"):
        proc = subprocess.run(
            [sys.executable, str(REPO / f"train/{role}.py"), "--help"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0
        for flag in (
            "--examples",
            "--seed",
            "--task",
            "--config",
            "--allow-upsample",
            "--resume",
            "--report-to",
            "--data-dir",
            "--tiny-pretrain-steps",
        ):
            assert flag in proc.stdout


def test_train_modules_shadow_no_stdlib_or_installed_package():
    """Scripts run by path put train/ first on sys.path: its module names must not hide others."""
    import importlib.metadata as md

    stdlib = set(sys.stdlib_module_names)
    installed = set()
    for dist in md.distributions():
        top = dist.read_text("top_level.txt") or ""
        installed |= {t.strip() for t in top.split() if t.strip()}
        installed.add((dist.metadata["Name"] or "").replace("-", "_").lower())
    installed -= {"train", "data_prep", "eval", "sanitizer"}
    names = {p.stem for p in (REPO / "train").glob("*.py")} | {
        p.name for p in (REPO / "train").iterdir() if p.is_dir() and not p.name.startswith("__")
    }
    assert not names & stdlib
    assert not {n.lower() for n in names} & installed


def test_accelerate_configs():
    cfgs = {p.name: yaml.safe_load(p.read_text()) for p in ACCEL.glob("*.yaml")}
    assert {"cpu_ddp.yaml", "ddp_4gpu.yaml", "ddp_8gpu.yaml", "fsdp_qlora_8gpu.yaml"} <= set(cfgs)
    assert any("slurm" in n for n in cfgs)
    cpu = cfgs["cpu_ddp.yaml"]
    assert cpu["num_processes"] == 2 and cpu["distributed_type"] == "MULTI_GPU" and not cpu["use_cpu"]
    assert cfgs["ddp_4gpu.yaml"]["num_processes"] == 4 and cfgs["ddp_8gpu.yaml"]["num_processes"] == 8
    fsdp = cfgs["fsdp_qlora_8gpu.yaml"]
    assert fsdp["distributed_type"] == "FSDP" and fsdp["fsdp_config"]["fsdp_use_orig_params"] is False
    assert "bnb_4bit_quant_storage: bfloat16" in (ACCEL / "fsdp_qlora_8gpu.yaml").read_text()
    slurm = next(p for n, p in ((n, ACCEL / n) for n in cfgs) if "slurm" in n).read_text()
    for var in ("SLURM_NNODES", "SLURM_NODEID", "SLURM_JOB_NODELIST"):
        assert var in slurm


def test_without_data_dir_the_embedded_default_is_built_in_the_cache(monkeypatch, tmp_path):
    """The recipe calls data_prep.embedded.ensure_default_sft(cache_dir), lazily."""
    import data_prep.embedded as embedded
    from train.data import resolve_sft_dir

    calls = []

    def fake(cache_dir):
        calls.append(cache_dir)
        return cache_dir / "sft"

    monkeypatch.setattr(embedded, "ensure_default_sft", fake)
    assert resolve_sft_dir(None, tmp_path) == tmp_path / "sft"
    assert calls == [tmp_path]


def test_default_cache_dir(monkeypatch, tmp_path):
    from data_prep.embedded import default_cache_dir
    from train.config import REPO_ROOT

    monkeypatch.setenv("LEDGERWRIGHT_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path
    monkeypatch.delenv("LEDGERWRIGHT_CACHE")
    assert default_cache_dir() == REPO_ROOT / ".cache" / "ledgerwright"
    monkeypatch.setenv("LEDGERWRIGHT_CACHE", "")  # empty is unset, never the current directory
    assert default_cache_dir() == REPO_ROOT / ".cache" / "ledgerwright"
