"""The evaluation scripts' flags come from their config dataclasses: every documented spelling,
and defaults < preset YAML < flags."""

from __future__ import annotations

import pytest

from data_prep.yaml_config import ConfigError, strict_parser
from eval.cli import add_common, load_config
from eval.policy_reuse_eval import DEFAULT_CONFIG as POLICY_PRESET
from eval.policy_reuse_eval import PolicyConfig
from eval.sabotage_eval import DEFAULT_CONFIG as SABOTAGE_PRESET
from eval.sabotage_eval import SabotageConfig


def sabotage(*argv: str) -> SabotageConfig:
    ap = strict_parser(prog="eval/sabotage.py")
    add_common(ap, SabotageConfig, SABOTAGE_PRESET)
    return load_config(SabotageConfig, ap.parse_args(list(argv)))


def policy(*argv: str) -> PolicyConfig:
    ap = strict_parser(prog="eval/policy_reuse.py")
    add_common(ap, PolicyConfig, POLICY_PRESET)
    return load_config(PolicyConfig, ap.parse_args(list(argv)))


def test_no_flags_is_the_default_preset() -> None:
    assert policy().limit == 12 and policy().chunk_size == 6  # the preset, not the dataclass
    assert sabotage() == SabotageConfig()


def test_documented_flags_override_the_preset() -> None:
    cfg = sabotage(
        "--writer",
        "w/",
        "--reader",
        "r/",
        "--runs",
        "all",
        "--limit",
        "all",
        "--inject-share",
        "0.25",
        "--inject-types",
        "omitted,late",
        "--fprs",
        "0.1,0.2",
        "--no-base-reader",
        "--seed",
        "3",
    )
    assert (cfg.writer, cfg.reader, cfg.runs, cfg.limit, cfg.inject_share) == ("w/", "r/", "all", None, 0.25)
    assert cfg.inject_types == ["omitted", "late"] and cfg.fprs == [0.1, 0.2]
    assert cfg.base_reader is False and cfg.seed == 3 and cfg.teacher is True
    cfg = policy(
        "--writer", "w/", "--executor", "base", "--incremental", "--long-history", "fail", "--limit", "5"
    )
    assert (cfg.writer, cfg.executor, cfg.incremental, cfg.long_history, cfg.limit) == (
        "w/",
        "base",
        True,
        "fail",
        5,
    )


def test_flags_override_a_given_preset(tmp_path) -> None:
    preset = tmp_path / "p.yaml"
    preset.write_text("limit: 7\nseed: 9\n")
    cfg = sabotage("--config", str(preset), "--seed", "4")
    assert (cfg.limit, cfg.seed, cfg.writer) == (7, 4, "ckpt/")


def test_bad_values_name_the_flag() -> None:
    with pytest.raises(ConfigError, match="--fprs: expected float"):
        sabotage("--fprs", "0.1,x")
    with pytest.raises(SystemExit):
        sabotage("--writ", "ckpt/")
