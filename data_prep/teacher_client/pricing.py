"""Estimated cost of a collection from a price table (``configs/teacher/prices.yaml``): USD (or the
table's currency) per 1M prompt and completion tokens, per model name. A model the table does not list
gets cost null and a note, never a guessed price."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from data_prep.inputs import read_text
from data_prep.teacher_client.settings import SettingsError


@dataclass(frozen=True)
class PriceTable:
    currency: str
    models: dict[str, dict[str, float]]
    source: str

    def estimate(
        self, model: str, prompt_tokens: int, completion_tokens: int, *, missing_usage: int = 0
    ) -> dict:
        """``{currency, prompt, completion, total, note}``; amounts null when the model has no price."""
        price = self.models.get(model)
        if price is None:
            return {
                "currency": self.currency,
                "prompt": None,
                "completion": None,
                "total": None,
                "note": f"model {model!r} has no price in {self.source}; add it to estimate the cost",
            }
        prompt = round(prompt_tokens * price["prompt"] / 1e6, 6)
        completion = round(completion_tokens * price["completion"] / 1e6, 6)
        note = ""
        if missing_usage:
            note = f"{missing_usage} responses reported no token usage: the estimate is a lower bound"
        return {
            "currency": self.currency,
            "prompt": prompt,
            "completion": completion,
            "total": round(prompt + completion, 6),
            "note": note,
        }


def load_prices(path: str | Path, *, label: str | None = None) -> PriceTable:
    """Read and check a price table; errors name the file and field. ``label`` is how the manifest
    and notes refer to the file (a repo-relative path, never a machine path)."""
    src = str(path)
    try:
        data = yaml.safe_load(read_text(path)) or {}
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise SettingsError(f"{src}: cannot read price table: {exc}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{src}: top level must be a mapping with currency and models")
    for key in data:
        if key not in ("currency", "models"):
            raise SettingsError(f"{src}: {key}: unknown field (known: currency, models)")
    currency = data.get("currency", "USD")
    if not isinstance(currency, str) or not currency:
        raise SettingsError(f"{src}: currency: expected a non-empty string")
    models = data.get("models") or {}
    if not isinstance(models, dict):
        raise SettingsError(f"{src}: models: expected a mapping of model name -> {{prompt, completion}}")
    table: dict[str, dict[str, float]] = {}
    for name, price in models.items():
        where = f"{src}: models.{name}"
        if not isinstance(price, dict) or set(price) != {"prompt", "completion"}:
            raise SettingsError(f"{where}: expected exactly prompt and completion (price per 1M tokens)")
        for kind in ("prompt", "completion"):
            v = price[kind]
            if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
                raise SettingsError(f"{where}.{kind}: expected a number >= 0, got {v!r}")
        table[str(name)] = {"prompt": float(price["prompt"]), "completion": float(price["completion"])}
    return PriceTable(currency=currency, models=table, source=label or Path(path).name)
