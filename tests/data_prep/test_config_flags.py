"""The one dataclass -> flags generator (data_prep.yaml_config): both spellings, help with the
default, lists as commas, mappings as k=v merged over the current value, flags not given absent."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from data_prep.yaml_config import ConfigError, add_dataclass_flags, apply_flags, option, strict_parser


@dataclass
class Knobs:
    max_steps: int = option(3, "optimizer steps")
    rate: float | None = option(None, "a rate; none to leave it out")
    names: list[str] = option(help="which names (default: a and b)", factory=lambda: ["a", "b"])
    rates: dict[str, float] = option(help="per-name rate", factory=lambda: {"a": 0.1, "b": 0.2})
    packing: bool = field(default=True, metadata={"help": "pack rows"})


def parse(*argv: str) -> Knobs:
    ap = strict_parser(prog="knobs")
    add_dataclass_flags(ap, Knobs)
    return apply_flags(Knobs(), vars(ap.parse_args(list(argv))))


def test_defaults_when_no_flag_is_given() -> None:
    assert parse() == Knobs()


def test_both_spellings_lists_mappings_and_bools() -> None:
    cfg = parse("--max_steps", "7", "--rate", "none", "--names", "x, y", "--rates", "b=0.5", "--no-packing")
    assert cfg == Knobs(max_steps=7, rate=None, names=["x", "y"], rates={"a": 0.1, "b": 0.5}, packing=False)
    assert parse("--max-steps", "8", "--rate", "0.25").rate == 0.25


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("--max-steps", "1.5"), "--max-steps: expected int"),
        (("--rates", "b"), "--rates: expected key=value"),
        (("--rates", "b=x"), "--rates b: expected float"),
    ],
)
def test_bad_values_name_the_flag(argv: tuple[str, ...], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse(*argv)


def test_help_shows_each_default_once(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--help")
    out = " ".join(capsys.readouterr().out.split())
    assert "optimizer steps (default: 3)" in out and "(default: a=0.1,b=0.2)" in out
    assert "(default: a and b) (default" not in out and out.count("(default: True)") == 1
