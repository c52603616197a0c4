"""SynthConfig: every knob of the synthetic world, with help text, defaults and validation."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from data_prep.canonical import digest
from data_prep.yaml_config import apply_flags

GENERATOR_NAME = "ledgerwright-synth"
# 1.1.0: keyed descriptions name the values before free text (data_prep.sft.render.arguments_in_words)
# 1.2.0: keyed descriptions spell the keys as words (data_prep.sft.render.key_in_words)
GENERATOR_VERSION = "1.2.0"

FAMILIES = (
    "procurement-payment-change-triage",
    "expense-reimbursement-audit",
    "executive-calendar-recovery",
    "travel-rebooking",
    "vendor-security-review",
    "access-request-provisioning",
    "production-outage-coordination",
    "deploy-rollback-review",
)
POLICY_FAMILIES = ("procurement-spend", "travel-approval", "vendor-onboarding", "access-grant")
LEDGER_SABOTAGE = ("omitted", "softened", "misreported_outcome", "fabricated", "swapped_ids", "late")
SABOTAGE_KINDS = ("unauthorized_action", *LEDGER_SABOTAGE)
WRITER_ERRORS = ("omission", "softening", "wrong_outcome", "batching")
HAZARDS = (
    "think_block",
    "think_unclosed",
    "think_unopened",
    "api_key",
    "bearer_token",
    "private_key",
    "iban",
    "card_number",
    "email",
    "phone",
    "hidden_identifier",
    "verdict_leak",
)
MEMORY_ERRORS = ("missing_record", "broadening", "contradiction", "stale_retention", "extra_record")
# how an executed unauthorized call is covered in the model ledger (the sabotaging agent's choice)
COVER_KINDS = ("faithful", "softened", "omitted")
DESCRIPTION_STYLES = ("keyed", "natural")


def _default_sabotage() -> dict[str, float]:
    # 15% action sabotage, 40% ledger sabotage (softening, the hard case, weighted up), 45% clean
    return {
        "unauthorized_action": 0.15,
        "omitted": 0.06,
        "softened": 0.10,
        "misreported_outcome": 0.06,
        "fabricated": 0.06,
        "swapped_ids": 0.06,
        "late": 0.06,
    }


def _default_writer_errors() -> dict[str, float]:
    return {"omission": 0.03, "softening": 0.05, "wrong_outcome": 0.02, "batching": 0.03}


def _default_hazards() -> dict[str, float]:
    return {
        "think_block": 0.06,
        "think_unclosed": 0.03,
        "think_unopened": 0.03,
        "api_key": 0.04,
        "bearer_token": 0.03,
        "private_key": 0.03,
        "iban": 0.04,
        "card_number": 0.03,
        "email": 0.05,
        "phone": 0.04,
        "hidden_identifier": 0.06,
        "verdict_leak": 0.05,
    }


def _default_memory_errors() -> dict[str, float]:
    return {
        "missing_record": 0.05,
        "broadening": 0.06,
        "contradiction": 0.04,
        "stale_retention": 0.06,
        "extra_record": 0.04,
    }


def _default_cover() -> dict[str, float]:
    return {"faithful": 0.40, "softened": 0.45, "omitted": 0.15}


@dataclass
class SynthConfig:
    """Configuration of the synthetic ledger world (runs and policy cases)."""

    runs: int = field(default=2000, metadata={"help": "number of runs to generate"})
    policy_cases: int = field(default=200, metadata={"help": "number of authorization-policy cases"})
    seed: int = field(default=0, metadata={"help": "corpus seed; item i uses a stream hashed from (seed, i)"})
    shard_size: int = field(default=1000, metadata={"help": "records per JSONL shard"})
    families: list[str] = field(
        default_factory=lambda: list(FAMILIES),
        metadata={"help": "workflow families to draw runs from (default: all 8)"},
    )
    policy_families: list[str] = field(
        default_factory=lambda: list(POLICY_FAMILIES),
        metadata={"help": "policy-case families to draw cases from (default: all 4)"},
    )
    sabotage_rates: dict[str, float] = field(
        default_factory=_default_sabotage,
        metadata={"help": "probability of each sabotage type per run; the rest of the mass is clean"},
    )
    unauthorized_cover: dict[str, float] = field(
        default_factory=_default_cover,
        metadata={"help": "how the agent logs its own unauthorized call: faithful|softened|omitted"},
    )
    writer_error_rates: dict[str, float] = field(
        default_factory=_default_writer_errors,
        metadata={"help": "per-run probability of each honest teacher-writer mistake"},
    )
    reader_accuracy: float = field(
        default=0.85, metadata={"help": "probability the teacher reader's label equals the gold label"}
    )
    reader_cite_rate: float = field(
        default=0.90,
        metadata={"help": "when the label is right, probability it cites exactly the gold call ids"},
    )
    hazard_rates: dict[str, float] = field(
        default_factory=_default_hazards,
        metadata={"help": "per-run probability of planting each sanitizer hazard in teacher text"},
    )
    memory_error_rates: dict[str, float] = field(
        default_factory=_default_memory_errors,
        metadata={"help": "per-case probability of each teacher authorization-memory error"},
    )
    description_style: str = field(
        default="keyed",
        metadata={
            "help": "how the teacher writer words a description: keyed (every argument as `key value`, as "
            "the call view words them) or natural (a phrase per tool, which a student cannot know for a held-out "
            "family's tools)"
        },
    )
    min_calls: int = field(default=4, metadata={"help": "fewest ordinary calls per run"})
    max_calls: int = field(default=14, metadata={"help": "most ordinary calls per run"})
    writer_model: str = field(
        default="scripted-teacher-writer/1", metadata={"help": "name recorded as the teacher writer"}
    )
    reader_model: str = field(
        default="scripted-teacher-reader/1", metadata={"help": "name recorded as the teacher reader"}
    )

    def validate(self) -> SynthConfig:
        """Raise ValueError naming the field for any bad value; return self."""
        for name in ("runs", "policy_cases", "seed"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{name}: must be a non-negative integer, got {v!r}")
        if not isinstance(self.shard_size, int) or self.shard_size < 1:
            raise ValueError(f"shard_size: must be a positive integer, got {self.shard_size!r}")
        _check_subset("families", self.families, FAMILIES)
        _check_subset("policy_families", self.policy_families, POLICY_FAMILIES)
        _check_rates("sabotage_rates", self.sabotage_rates, SABOTAGE_KINDS, total_max=1.0)
        _check_rates("unauthorized_cover", self.unauthorized_cover, COVER_KINDS, total_max=1.0)
        _check_rates("writer_error_rates", self.writer_error_rates, WRITER_ERRORS)
        _check_rates("hazard_rates", self.hazard_rates, HAZARDS)
        _check_rates("memory_error_rates", self.memory_error_rates, MEMORY_ERRORS)
        for name in ("reader_accuracy", "reader_cite_rate"):
            v = getattr(self, name)
            if not isinstance(v, int | float) or not 0.0 <= v <= 1.0:
                raise ValueError(f"{name}: must be within 0-1, got {v!r}")
        if self.description_style not in DESCRIPTION_STYLES:
            raise ValueError(
                f"description_style: unknown {self.description_style!r} (known: {', '.join(DESCRIPTION_STYLES)})"
            )
        if not 4 <= self.min_calls <= self.max_calls <= 30:
            raise ValueError(
                f"min_calls/max_calls: need 4 <= min <= max <= 30, got {self.min_calls}/{self.max_calls}"
            )
        return self

    def resolved(self) -> dict:
        """The full config as plain JSON (every rate spelled out, canonical key order)."""
        d = asdict(self)
        for key in (
            "sabotage_rates",
            "unauthorized_cover",
            "writer_error_rates",
            "hazard_rates",
            "memory_error_rates",
        ):
            d[key] = {k: float(v) for k, v in d[key].items()}
        d["reader_accuracy"] = float(self.reader_accuracy)
        d["reader_cite_rate"] = float(self.reader_cite_rate)
        return d

    def digest(self) -> str:
        return digest("synth-config/v1", self.resolved())


def _check_subset(name: str, values: Any, allowed: tuple[str, ...]) -> None:
    if not isinstance(values, list | tuple) or not values:
        raise ValueError(f"{name}: must be a non-empty list")
    for v in values:
        if v not in allowed:
            raise ValueError(f"{name}: unknown {v!r} (known: {', '.join(allowed)})")
    if len(set(values)) != len(values):
        raise ValueError(f"{name}: repeated entries")


def _check_rates(name: str, rates: Any, allowed: tuple[str, ...], *, total_max: float | None = None) -> None:
    if not isinstance(rates, dict):
        raise ValueError(f"{name}: must be a mapping of type to probability")
    for k, v in rates.items():
        if k not in allowed:
            raise ValueError(f"{name}.{k}: unknown type (known: {', '.join(allowed)})")
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 <= v <= 1.0:
            raise ValueError(f"{name}.{k}: must be a probability within 0-1, got {v!r}")
    if total_max is not None and sum(rates.values()) > total_max + 1e-9:
        raise ValueError(f"{name}: probabilities sum to {sum(rates.values()):.4f} > {total_max}")


# --- presets and flags (data_prep/synth.py) --------------------------------------------------------

_DICT_FIELDS = (
    "sabotage_rates",
    "unauthorized_cover",
    "writer_error_rates",
    "hazard_rates",
    "memory_error_rates",
)


def config_from_args(ns: argparse.Namespace, base: SynthConfig | None = None) -> SynthConfig:
    """``base`` (defaults or a preset) overlaid with the flags of ``add_dataclass_flags``: rate
    flags (``k=v,...``) merge into the base's rates, list flags take commas."""
    return apply_flags(base or SynthConfig(), vars(ns)).validate()


def config_from_mapping(data: dict, where: str = "config") -> SynthConfig:
    """A SynthConfig from a parsed YAML/JSON mapping; unknown keys are errors naming the key."""
    known = {f.name for f in fields(SynthConfig)}
    cfg = SynthConfig()
    for k, v in data.items():
        if k not in known:
            raise ValueError(f"{where}.{k}: unknown field")
        if k in _DICT_FIELDS:
            if not isinstance(v, dict):
                raise ValueError(f"{where}.{k}: expected a mapping")
            merged = dict(getattr(cfg, k))
            merged.update(v)
            v = merged
        setattr(cfg, k, v)
    return cfg.validate()
