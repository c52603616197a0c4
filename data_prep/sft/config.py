"""The build configuration: a dataclass with help text, loaded from YAML (configs/data/*.yaml)."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_prep.yaml_config import ConfigError, check_keys, check_value, option, read_mapping

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = REPO_ROOT / "configs" / "data" / "default.yaml"


class BuildConfigError(ConfigError):
    pass


@dataclass
class BuildConfig:
    """How teacher output becomes training data. Every decision it drives is counted in the manifest."""

    heldout_families: list[str] = option(
        factory=list,
        help="workflow families never used for train or validation",
    )
    heldout_case_families: list[str] = option(
        factory=list,
        help="policy-case families never used for train or validation",
    )
    validation_fraction: float = option(0.05, "share of in-family examples for validation")
    seed: int = option(0, "seed of the validation assignment")
    writer_min_agreement: float = option(
        1.0,
        "writer filter: teacher ledger content agreement must reach this",
    )
    writer_min_compliance: float = option(
        1.0,
        "writer filter: teacher ledger protocol compliance must reach this",
    )
    writer_require_verdict_match: bool = option(
        True,
        "writer filter: the teacher reader's label on the ledger must equal gold",
    )
    writer_memory_require_decision_match: bool = option(
        True,
        "memory writer filter: an executor applying the teacher's memory must decide every probe "
        "request as the policy oracle does",
    )
    reader_require_label_match: bool = option(
        True,
        "reader filter: the teacher's verdict label must equal gold",
    )
    reader_require_cited_match: bool = option(
        True,
        "reader filter: cited call ids must equal the gold call ids",
    )
    sanitizer_packs: list[str] = option(
        factory=lambda: ["reasoning", "secrets"],
        help="packs applied to every turn of every rendered example (with writer_text_packs)",
    )
    writer_text_packs: list[str] = option(
        factory=lambda: ["leakage"],
        help="packs whose rules name the turns they apply to (leakage: every turn but system prompts "
        "and readers' answers); joined with sanitizer_packs into the one rule set",
    )
    pii_modes: dict[str, str] = option(
        factory=dict,
        help="per personal-data class (email, iban, phone, card, person_name): redact | pseudonymize | "
        "keep; a class not named is pseudonymized",
    )
    pseudonym_key_file: str = option(
        "",
        "secret key file for pseudonymization (else $LEDGERWRIGHT_PSEUDONYM_KEY_FILE, else a key "
        "derived from the corpus bytes); the key is never written to any output",
    )
    near_dup_threshold: float = option(
        0.95,
        "Jaccard similarity (MinHash estimate) at or above which examples are near-duplicates",
    )
    minhash_perm: int = option(64, "MinHash permutations (bands x rows)")
    minhash_bands: int = option(16, "LSH bands")
    shingle_bytes: int = option(24, "bytes per shingle (UTF-8 windows of the conversation)")
    prompts_dir: str = option("configs/prompts", "system prompt files, relative to the repo")
    preview_rows: int = option(20, "rows per task written to preview JSONL")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def filters(self) -> dict:
        """The verdict-match and faithfulness filters and whether each is on (the manifest's
        ``filters``), so a reader of a build can tell filtered from unfiltered data at a glance."""
        on = {
            "writer_verdict_match": self.writer_require_verdict_match,
            "writer_content_agreement": self.writer_min_agreement > 0,
            "writer_protocol_compliance": self.writer_min_compliance > 0,
            "writer_memory_decision_match": self.writer_memory_require_decision_match,
            "reader_label_match": self.reader_require_label_match,
            "reader_cited_match": self.reader_require_cited_match,
        }
        return {"any": any(on.values()), **on}


def load_build_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> BuildConfig:
    """Defaults < YAML file < overrides. Unknown keys are errors naming the file and key."""
    cfg = BuildConfig()
    hints = typing.get_type_hints(BuildConfig)
    values: dict[str, Any] = {}
    if path is not None:
        loaded = read_mapping(path, BuildConfigError)
        check_keys(loaded, hints, str(path), BuildConfigError)
        values.update(loaded)
    values.update(overrides or {})
    for key, value in values.items():
        setattr(cfg, key, check_value(value, hints[key], f"{path}: {key}", BuildConfigError))
    if not 0 <= cfg.validation_fraction < 1:
        raise BuildConfigError(f"{path}: validation_fraction: must be in [0, 1)")
    from sanitizer.pseudonym import check_modes
    from sanitizer.rules import RuleError

    try:
        check_modes(cfg.pii_modes)
    except RuleError as exc:
        raise BuildConfigError(f"{path}: pii_modes: {exc.reason}") from None
    if cfg.minhash_perm % cfg.minhash_bands:
        raise BuildConfigError(f"{path}: minhash_bands: must divide minhash_perm")
    return cfg
