"""Settings of a teacher collection: decoding (sent with every request, part of the cache key) and the
retry policy (how long to insist before a call is recorded as a provider error).

Loaded from YAML with defaults; an unknown key or a bad value raises ``SettingsError`` naming the file
and the field, so a typo never silently changes what the teacher is asked.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_prep.yaml_config import ConfigError, check_keys, read_mapping

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DECODING = REPO_ROOT / "configs" / "teacher" / "decoding.yaml"
DEFAULT_PRICES = REPO_ROOT / "configs" / "teacher" / "prices.yaml"
TEACHER_TASKS = ("writer_action", "reader_verdict", "writer_memory")


class SettingsError(ConfigError):
    """A bad setting: ``source: field: problem``."""


def _number(value: Any, where: str, *, minimum: float = 0.0, integer: bool = False) -> float | int:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value < minimum:
        kind = "an integer" if integer else "a number"
        raise SettingsError(f"{where}: expected {kind} >= {minimum:g}, got {value!r}")
    return value


TOKEN_LIMIT_FIELDS = ("max_tokens", "max_completion_tokens")
_COMPLETION_TOKENS_MODELS = re.compile(r"^(?:[\w.-]+/)?(?:o\d|gpt-5|gpt-4\.1|codex-)", re.IGNORECASE)


def token_limit_field(model: str | None) -> str:
    """The request field that caps the answer length for ``model``: newer OpenAI families (o1, o3,
    o4-mini, gpt-4.1, gpt-5, ...) reject ``max_tokens`` and need ``max_completion_tokens``; every
    other OpenAI-compatible server (vLLM, TGI, older models) takes ``max_tokens``. The endpoint
    answers a 400 that names the other field by resending once with it."""
    if model and _COMPLETION_TOKENS_MODELS.match(model.strip()):
        return "max_completion_tokens"
    return "max_tokens"


@dataclass(frozen=True)
class TeacherDecoding:
    """What every request asks for besides the messages (``configs/teacher/decoding.yaml``)."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = 0
    max_tokens: dict[str, int] = field(
        default_factory=lambda: {"writer_action": 256, "reader_verdict": 512, "writer_memory": 2048}
    )

    def request_params(self, task: str, model: str | None = None) -> dict:
        """The decoding fields of a request body for ``task`` (stable key order is not needed: the
        cache key is a canonical digest). The token limit is ``max_completion_tokens`` for model
        families that refuse ``max_tokens`` (OpenAI o-series, gpt-5), else ``max_tokens``."""
        params: dict[str, Any] = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            token_limit_field(model): self.max_tokens[task],
        }
        if self.seed is not None:
            params["seed"] = self.seed
        return params

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def load_decoding(path: str | Path | None = None) -> TeacherDecoding:
    """Defaults < YAML at ``path``; errors name the file and field."""
    src = str(path) if path is not None else "defaults"
    values: dict[str, Any] = {}
    if path is not None:
        values = read_mapping(path, SettingsError, "decoding settings")
    base = TeacherDecoding()
    check_keys(values, {f.name for f in dataclasses.fields(TeacherDecoding)}, src, SettingsError)
    temperature = _number(values.get("temperature", base.temperature), f"{src}: temperature")
    top_p = _number(values.get("top_p", base.top_p), f"{src}: top_p")
    if top_p > 1:
        raise SettingsError(f"{src}: top_p: expected a number in 0-1, got {top_p!r}")
    seed = values.get("seed", base.seed)
    if seed is not None:
        seed = _number(seed, f"{src}: seed", integer=True)
    max_tokens = dict(base.max_tokens)
    given = values.get("max_tokens", {})
    if not isinstance(given, dict):
        raise SettingsError(f"{src}: max_tokens: expected a mapping of task -> positive integer")
    for task, n in given.items():
        if task not in TEACHER_TASKS:
            raise SettingsError(f"{src}: max_tokens.{task}: unknown task (known: {', '.join(TEACHER_TASKS)})")
        max_tokens[task] = int(_number(n, f"{src}: max_tokens.{task}", minimum=1, integer=True))
    return TeacherDecoding(temperature=temperature, top_p=top_p, seed=seed, max_tokens=max_tokens)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries of transient failures with exponential backoff.

    The wait before attempt ``n + 1`` is ``backoff_base_s * 2 ** (n - 1)`` capped at ``backoff_max_s``,
    or the server's Retry-After (capped at ``retry_after_max_s``) when it sent one.
    """

    max_attempts: int = 5
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    retry_after_max_s: float = 300.0
    timeout_s: float = 120.0  # the whole attempt: connect, send, and the last byte of the answer
    connect_timeout_s: float = 10.0
    max_response_bytes: int = 4 * 1024 * 1024  # a longer answer is "truncated", never held in full

    def __post_init__(self) -> None:
        _number(self.max_attempts, "max_attempts", minimum=1, integer=True)
        _number(self.max_response_bytes, "max_response_bytes", minimum=1024, integer=True)
        for name in ("backoff_base_s", "backoff_max_s", "retry_after_max_s"):
            _number(getattr(self, name), name)
        for name in ("timeout_s", "connect_timeout_s"):
            if _number(getattr(self, name), name) <= 0:
                raise SettingsError(f"{name}: must be positive")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
