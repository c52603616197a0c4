"""The one way a YAML preset becomes a config dataclass: read a mapping, refuse unknown keys, check
each value against the field's type, overlay CLI overrides. Every stage's config (build, training,
evaluation, teacher collection) loads through here, so a typo fails the same way everywhere: with
the file and the field named.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from data_prep.inputs import read_text

REPO_ROOT = Path(__file__).resolve().parents[1]


def option(default: Any = dataclasses.MISSING, help: str = "", *, factory: Any = None) -> Any:
    """A config dataclass field with its help text (what ``--help`` and the docs print); ``factory``
    makes a fresh mutable default per instance."""
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})


class ConfigError(ValueError):
    """A config file or flag that cannot be used; the message names the file (or flag) and field."""


class StrictParser(argparse.ArgumentParser):
    """An argument parser that takes a long flag only as spelled: ``--writ`` is never ``--writer``,
    and an unknown flag is named even when a required flag is missing too (argparse would report
    only the missing one, hiding the typo)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        argv = sys.argv[1:] if args is None else list(args)
        if self.unknown_flags(argv):
            self.refuse_extras(argv)
        return super().parse_args(argv, namespace)

    def refuse_extras(self, argv: list[str]) -> None:
        """Exit 2 naming what argparse leaves over (the unknown flag and its values), judged with
        every argument optional so that a missing required flag cannot hide the typo."""
        required = [a for a in self._actions if a.required]
        for action in required:
            action.required = False
        try:
            _, extras = super().parse_known_args(argv)
        finally:
            for action in required:
                action.required = True
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")

    def unknown_flags(self, argv: list[str]) -> list[str]:
        """Long flags in ``argv`` (before a bare ``--``) that no option spells; none when the parser
        has subcommands, whose own parsers judge their flags."""
        if any(isinstance(a, argparse._SubParsersAction) for a in self._actions):
            return []
        known = self._option_string_actions
        out = []
        for token in argv:
            if token == "--":
                break
            name = token.split("=", 1)[0]
            if token.startswith("--") and " " not in token and name not in known:
                out.append(name)
        return out


def strict_parser(prog: str | None = None, description: str | None = None, **kwargs: Any) -> StrictParser:
    """The parser every entry script builds its flags on: no prefix abbreviations, unknown flags
    named (exit 2), so a typo never silently becomes another setting."""
    return StrictParser(prog=prog, description=description, **kwargs)


def read_mapping(path: str | Path, error: type[ConfigError] = ConfigError, what: str = "config") -> dict:
    """The top-level mapping of a YAML file (empty file: {}); unreadable or invalid YAML and a
    non-mapping top level raise ``error`` naming the file (and the line, when YAML knows it)."""
    p = Path(path)
    try:
        loaded = yaml.safe_load(read_text(p)) or {}  # regular files only: a FIFO never hangs a load
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise error(f"{p}:{line}: invalid YAML in {what}: {exc}") from None
    except (OSError, ValueError) as exc:
        raise error(f"{p}: cannot read {what}: {exc}") from None
    if not isinstance(loaded, dict):
        raise error(f"{p}: top level: expected a mapping of fields, got {type(loaded).__name__}")
    return loaded


def check_keys(values: dict, known, where: str, error: type[ConfigError] = ConfigError) -> None:
    for key in values:
        if key not in known:
            raise error(f"{where}: {key}: unknown field (known: {sorted(known)})")


def check_value(value: Any, tp: Any, where: str, error: type[ConfigError] = ConfigError) -> Any:
    """``value`` if it fits the annotation ``tp`` (bool, int, float, str, list, dict, optional of
    those); ints are taken for floats; anything else raises ``error`` naming ``where``."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if value is None:
        if type(None) in typing.get_args(tp):
            return None
        raise error(f"{where}: may not be null")
    union = typing.get_origin(tp) in (typing.Union, types.UnionType)
    base = typing.get_origin(args[0] if union else tp) or (args[0] if union else tp)
    expected = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if base is bool and not isinstance(value, bool):
        raise error(f"{where}: expected {expected[bool]}, got {value!r}")
    if base in (int, float) and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise error(f"{where}: expected {expected[base]}, got {value!r}")
    if base is int and not isinstance(value, int):
        raise error(f"{where}: expected {expected[int]}, got {value!r}")
    if base is str and not isinstance(value, str):
        raise error(f"{where}: expected {expected[str]}, got {value!r}")
    if base in (list, dict) and not isinstance(value, base):
        raise error(f"{where}: expected a {'list' if base is list else 'mapping'}, got {value!r}")
    return float(value) if base is float else value


def load_dataclass(
    cls: type,
    path: str | Path | None,
    overrides: dict[str, Any] | None = None,
    *,
    error: type[ConfigError] = ConfigError,
):
    """``cls()`` < YAML file < overrides (None values in overrides mean 'not given'). A relative
    path that does not exist from the current directory is taken from the repository root."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    cfg = cls()
    values: dict[str, Any] = {}
    src = str(path) if path else "--"
    if path is not None:
        p = Path(path)
        if not p.is_absolute() and not p.exists():
            p = REPO_ROOT / p
        loaded = read_mapping(p, error)
        check_keys(loaded, names, str(p), error)
        values.update(loaded)
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in names:
            raise error(f"--{key.replace('_', '-')}: unknown setting")
        values[key] = value
    for key, value in values.items():
        setattr(cfg, key, check_value(value, hints[key], f"{src}: {key}", error))
    return cfg


# ---- dataclass fields as flags --------------------------------------------------------------------
_TRUE = ("true", "yes", "1", "on")
_FALSE = ("false", "no", "0", "off")


def base_type(tp: Any) -> tuple[Any, bool]:
    """(the annotation without None, whether None is allowed): ``int | None`` -> (int, True)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], True
    return tp, False


def coerce_value(value: Any, tp: Any, where: str, error: type[ConfigError] = ConfigError) -> Any:
    """``value`` (a flag's text or a YAML scalar) as the annotation ``tp`` wants it: 'none'/'null'
    for an optional field, yes/no words for a bool; raises ``error`` naming ``where``."""
    base, optional = base_type(tp)
    if value is None or (isinstance(value, str) and value.lower() in ("none", "null") and optional):
        if optional:
            return None
        raise error(f"{where}: may not be null")
    try:
        if base is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in _TRUE + _FALSE:
                return value.lower() in _TRUE
            raise ValueError(value)
        if base is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(value)
        if base is float:
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        if base is str:
            if not isinstance(value, str | int | float):
                raise ValueError(value)
            return str(value)
    except (TypeError, ValueError):
        raise error(f"{where}: expected {base.__name__}, got {value!r}") from None
    return value


def joined(value: Any) -> Any:
    """A list given for a comma-list string field (YAML list, ``nargs`` flag) as its comma form."""
    return ",".join(map(str, value)) if isinstance(value, list) else value


def parse_pairs(text: str, where: str, error: type[ConfigError] = ConfigError) -> dict[str, str]:
    """``a=1,b=2`` -> {'a': '1', 'b': '2'}: how a mapping field is spelled on the command line."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if "=" not in part:
            raise error(f"{where}: expected key=value, got {part!r}")
        key, value = part.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def flag_value(value: Any, tp: Any, current: Any, where: str, error: type[ConfigError] = ConfigError) -> Any:
    """A flag's text as its field's value: a comma list for a list field, ``k=v`` pairs merged over
    the current mapping for a dict field (so one rate can change alone), else ``coerce_value``."""
    base = typing.get_origin(base_type(tp)[0])
    item_tp = (typing.get_args(base_type(tp)[0]) or (str, str))[-1]
    if base is list and isinstance(value, str):
        return [coerce_value(v.strip(), item_tp, where, error) for v in value.split(",") if v.strip()]
    if base is dict and isinstance(value, str):
        pairs = parse_pairs(value, where, error)
        return {
            **(current or {}),
            **{k: coerce_value(v, item_tp, f"{where} {k}", error) for k, v in pairs.items()},
        }
    return coerce_value(joined(value), tp, where, error)


def _shown(default: Any) -> str:
    """A default as its flag would spell it."""
    if isinstance(default, dict):
        return ",".join(f"{k}={v}" for k, v in default.items())
    return ",".join(map(str, default)) if isinstance(default, list) else str(default)


def add_field_flag(parser: Any, f: dataclasses.Field, tp: Any, default: Any, prefix: str = "") -> None:
    """``--max-steps`` and TRL's ``--max_steps`` for field ``max_steps`` (dest ``prefix + name``),
    help from the field's metadata plus its default; a flag not given leaves no attribute."""
    dest = prefix + f.name
    flags = ["--" + dest.replace("_", "-")] + (["--" + dest] if "_" in dest else [])
    help_text = f.metadata.get("help", "")
    if "default" not in help_text:
        help_text += f" (default: {_shown(default)})"
    kwargs: dict[str, Any] = {
        "dest": dest,
        "default": argparse.SUPPRESS,
        "help": help_text.replace("%", "%%"),
    }
    base = base_type(tp)[0]
    origin = typing.get_origin(base)
    if base is bool:
        parser.add_argument(*flags, action=argparse.BooleanOptionalAction, **kwargs)
    elif origin in (list, dict):
        parser.add_argument(*flags, metavar="A,B" if origin is list else "K=V,...", **kwargs)
    else:
        nargs = "+" if f.metadata.get("list") else None  # --report_to wandb tensorboard
        parser.add_argument(*flags, metavar=base.__name__.upper(), nargs=nargs, **kwargs)


def add_dataclass_flags(
    parser: Any, cls: type, *, prefix: str = "", skip: tuple[str, ...] = (), defaults: Any = None
) -> None:
    """One flag per field of ``cls`` (but ``skip``): the one way a config dataclass reaches a CLI.
    ``defaults`` (e.g. the default preset loaded) are the values help shows; ``cls()`` when None."""
    hints = typing.get_type_hints(cls)
    defaults = cls() if defaults is None else defaults
    for f in dataclasses.fields(cls):
        if f.name not in skip:
            add_field_flag(parser, f, hints[f.name], getattr(defaults, f.name), prefix)


def apply_flags(
    cfg: Any, values: dict[str, Any], *, prefix: str = "", error: type[ConfigError] = ConfigError
) -> Any:
    """Overlay parsed flags (dest -> value; a flag not given is absent) on the dataclass ``cfg``."""
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        dest = prefix + f.name
        if dest in values:
            where = "--" + dest.replace("_", "-")
            setattr(cfg, f.name, flag_value(values[dest], hints[f.name], getattr(cfg, f.name), where, error))
    return cfg
