"""Evaluation configs: dataclasses loaded from YAML presets (configs/eval/) with CLI overrides."""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]


class SettingsError(ValueError):
    pass


def _check(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    optional = type(None) in typing.get_args(tp)
    if value is None:
        if optional:
            return None
        raise SettingsError(f"{where}: may not be null")
    base = args[0] if origin in (typing.Union, types.UnionType) else tp
    b_origin = typing.get_origin(base) or base
    if b_origin is bool:
        if not isinstance(value, bool):
            raise SettingsError(f"{where}: expected true or false, got {value!r}")
    elif b_origin is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SettingsError(f"{where}: expected an integer, got {value!r}")
    elif b_origin is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SettingsError(f"{where}: expected a number, got {value!r}")
        value = float(value)
    elif b_origin is str:
        if not isinstance(value, str):
            raise SettingsError(f"{where}: expected a string, got {value!r}")
    elif b_origin is list:
        if not isinstance(value, list):
            raise SettingsError(f"{where}: expected a list, got {value!r}")
    return value


def load_settings(cls: type, path: str | Path | None, overrides: dict[str, Any] | None = None):
    """``cls()`` < YAML file < overrides (None values in overrides mean 'not given')."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    cfg = cls()
    values: dict[str, Any] = {}
    src = str(path) if path else "--"
    if path is not None:
        p = Path(path)
        if not p.is_absolute() and not p.exists():
            p = REPO_ROOT / p
        try:
            loaded = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise SettingsError(f"{path}: cannot read config: {exc}") from None
        if not isinstance(loaded, dict):
            raise SettingsError(f"{p}: top level must be a mapping")
        for key in loaded:
            if key not in names:
                raise SettingsError(f"{p}: {key}: unknown field (known: {sorted(names)})")
        values.update(loaded)
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in names:
            raise SettingsError(f"--{key.replace('_', '-')}: unknown setting")
        values[key] = value
    for key, value in values.items():
        setattr(cfg, key, _check(value, hints[key], f"{src}: {key}"))
    return cfg
