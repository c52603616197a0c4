"""Generation through a running OpenAI-compatible Chat Completions server (vLLM, ``eval/serve.py``, any
provider), behind the same ``Backend`` interface as the local checkpoints.

The HTTP side is the teacher client's (``data_prep/teacher_client``): ``ChatEndpoint`` with its bounded
retries, whole-attempt deadline, response-size cap and key redaction, and optionally its response cache.
Requests of one ``generate`` call go out concurrently (``concurrency`` at most) and come back in order.

A served writer or reader is a model *name* on an endpoint: with vLLM,
``vllm serve BASE --enable-lora --lora-modules writer=ckpt/ reader=ckpt-reader/`` serves the adapters as
``writer`` and ``reader`` and the base under its own name, which is what ``adapter=False`` (the baseline
without the adapter) asks for when ``base_model`` is given.

Decoding follows ``configs/eval/decoding.yaml``: temperature, top_p, seed and the per-task
``max_new_tokens`` go into every request. The answer guard's ``json_end`` and ``field_length`` cuts are
applied to the returned text (a server cannot stop on them), so a greedy answer reads as the
transformers backend writes it; the token-level ``repetition`` cut is not (a looping answer runs to
``max_tokens`` and stays unparseable either way). A prompt the server refuses as too long becomes a
per-item ``prompt_too_long`` error.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval.generation import Backend, BackendError, Completion, DecodingConfig
from train.answer_guard import AnswerGuard

PROMPT_TOO_LONG = "prompt_too_long"
# how servers say a prompt does not fit: ours and OpenAI's error code, vLLM's and OpenAI's messages,
# and the local transformers backend's own message
_TOO_LONG = re.compile(
    r"context_length_exceeded|maximum context length|prompt_?too_?long|exceeds the input limit|"
    r"prompt \(length \d+\) is longer|is too long",
    re.IGNORECASE,
)


def is_prompt_too_long(reason: str | None) -> bool:
    """Whether a provider error says the prompt did not fit the model's input (any backend)."""
    return bool(reason) and bool(_TOO_LONG.search(reason))


@dataclass
class EndpointSettings:
    """How to reach one served model (a writer or a reader)."""

    endpoint: str  # base URL such as http://127.0.0.1:8000/v1, or the full chat/completions URL
    model: str  # served name of the adapter (vLLM --lora-modules NAME=ckpt/)
    base_model: str | None = None  # served name of the base without the adapter (adapter=False)
    concurrency: int = 4
    timeout_s: float = 600.0
    max_attempts: int = 3
    api_key_env: str | None = None  # environment variable holding the key (never the key itself)
    cache: str | None = None  # response cache JSONL (the teacher client's); None: no cache

    def check(self, where: str = "endpoint") -> None:
        from data_prep.teacher_client.endpoint import chat_url
        from data_prep.teacher_client.settings import SettingsError

        try:
            chat_url(self.endpoint)
        except SettingsError as exc:
            raise BackendError(f"{where}: {exc}") from None
        if not self.model:
            raise BackendError(f"{where}: model: the served model name is empty")
        if self.concurrency < 1:
            raise BackendError(f"{where}: concurrency: expected a positive integer, got {self.concurrency}")
        if self.max_attempts < 1:
            raise BackendError(f"{where}: max_attempts: expected a positive integer, got {self.max_attempts}")
        if self.timeout_s <= 0:
            raise BackendError(f"{where}: timeout_s: expected a positive number, got {self.timeout_s}")


def guard_text(text: str, max_field_chars: int) -> tuple[str, str | None]:
    """``text`` cut where the answer guard's character rules end it (``json_end``, ``field_length``)."""
    guard = AnswerGuard(max_field_chars=max_field_chars, window=1 << 30)  # no token-level repetition
    for k, ch in enumerate(text):
        why = guard.feed(0, ch)
        if why:
            return text[: k + 1].strip(), why
    return text, None


class OpenAIBackend(Backend):
    """One served model (and optionally its base) on an OpenAI-compatible endpoint."""

    name = "openai"

    def __init__(self, settings: EndpointSettings, decoding: DecodingConfig):
        from data_prep.teacher_client.cache import CachedEndpoint, ResponseCache
        from data_prep.teacher_client.endpoint import ChatEndpoint, public_url
        from data_prep.teacher_client.settings import RetryPolicy

        settings.check()
        self.settings = settings
        self.decoding = decoding
        key = os.environ.get(settings.api_key_env) if settings.api_key_env else None
        if settings.api_key_env and not key:
            raise BackendError(f"api_key_env: the environment variable {settings.api_key_env} is not set")
        policy = RetryPolicy(
            max_attempts=settings.max_attempts,
            timeout_s=settings.timeout_s,
            backoff_base_s=0.5,
            backoff_max_s=10.0,
        )
        self.endpoint = ChatEndpoint(
            settings.endpoint, api_key=key, policy=policy, max_connections=settings.concurrency
        )
        self.url = public_url(self.endpoint.url)
        self.cache = None
        if settings.cache:
            self.cache = ResponseCache(Path(settings.cache))
            self.client: Any = CachedEndpoint(self.endpoint, self.cache)
        else:
            self.client = None
        self.requests = 0

    # -- identity ----------------------------------------------------------------------------------
    def served_name(self, adapter: bool) -> str:
        if adapter:
            return self.settings.model
        if not self.settings.base_model:
            raise BackendError(
                f"{self.url}: the baseline without the adapter needs the base model's served name "
                "(--writer-base-model / --reader-base-model; with vLLM the name given to `vllm serve`), "
                "or turn the base rows off (--no-base-writer / --no-base-reader)"
            )
        return self.settings.base_model

    def fingerprint(self, adapter: bool = True) -> str:
        who = self.settings.model if adapter else f"base:{self.settings.base_model}"
        return f"{self.name}|{self.url}|{who}|{self.decoding.digest()}"

    def describe(self) -> dict:
        s = self.settings
        return {
            "backend": self.name,
            "endpoint": self.url,
            "model": s.model,
            "base_model": s.base_model,
            "concurrency": s.concurrency,
            "timeout_s": s.timeout_s,
            "max_attempts": s.max_attempts,
            "cache": bool(s.cache),
        }

    # -- generation --------------------------------------------------------------------------------
    def body(self, messages: list[dict], task: str, adapter: bool) -> dict:
        d = self.decoding
        body: dict[str, Any] = {
            "model": self.served_name(adapter),
            "messages": messages,
            "temperature": float(d.temperature),
            "top_p": float(d.top_p),
            "max_tokens": d.tokens_for(task),
            "seed": int(d.seed),
        }
        return body

    def _one(self, body: dict, tag: str) -> Completion:
        if self.client is not None:
            reply = self.client.complete(body, tag=tag).reply
        else:
            from data_prep.teacher_client.cache import request_key

            reply = self.endpoint.post(body, key=request_key(body), tag=tag)
        self.requests += 1
        if not reply.ok:
            err = reply.error or {}
            detail = str(err.get("detail") or "")
            if err.get("http_status") == 400 and is_prompt_too_long(detail):
                return Completion(None, f"{PROMPT_TOO_LONG}: {detail}"[:500])
            return Completion(None, f"{err.get('kind')} after {reply.attempts} attempt(s): {detail}"[:500])
        choice = reply.body["choices"][0]
        text = choice["message"].get("content") or ""
        finish = choice.get("finish_reason")
        stop = "max_new_tokens" if finish == "length" else "stop_token"
        if self.decoding.guard:
            text, why = guard_text(text, self.decoding.max_field_chars)
            stop = why or stop
        return Completion(text.strip(), stop=stop)

    def complete(
        self, prompts: Sequence[list[dict]], *, task: str, adapter: bool = True, constrained: bool = False
    ) -> list[Completion]:
        if constrained:
            raise BackendError(f"backend {self.name} offers no grammar-constrained decoding")
        if not prompts:
            return []
        bodies = [self.body(list(p), task, adapter) for p in prompts]
        workers = min(self.settings.concurrency, len(bodies))
        if workers == 1:
            return [self._one(b, f"{task}/{i}") for i, b in enumerate(bodies)]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(lambda ib: self._one(ib[1], f"{task}/{ib[0]}"), enumerate(bodies)))

    def generate(self, prompts: Sequence[list[dict]], *, task: str, adapter: bool = True) -> list[str]:
        out = []
        for c in self.complete(prompts, task=task, adapter=adapter):
            if not c.ok:
                raise RuntimeError(c.error)
            out.append(c.text or "")
        return out

    def close(self) -> None:
        self.endpoint.close()
        if self.cache is not None:
            self.cache.close()


# ---- command line -----------------------------------------------------------------------------------------
def add_endpoint_args(ap, roles: Sequence[str]) -> None:
    """``--endpoint URL`` (every role) and ``--ROLE-endpoint``, ``--ROLE-model``, ``--ROLE-base-model``."""
    g = ap.add_argument_group(
        "served models (OpenAI-compatible endpoint, e.g. vLLM: "
        "vllm serve BASE --enable-lora --lora-modules writer=ckpt/ reader=ckpt-reader/)"
    )
    g.add_argument(
        "--endpoint",
        help="endpoint of every served role (with --backend openai), e.g. http://127.0.0.1:8000/v1",
    )
    for role in roles:
        g.add_argument(f"--{role}-endpoint", help=f"endpoint serving the {role} (default --endpoint)")
        g.add_argument(f"--{role}-model", help=f"served name of the {role} adapter (default {role})")
        g.add_argument(
            f"--{role}-base-model",
            help=f"served name of the {role}'s base model (the no-adapter baseline)",
        )
    g.add_argument(
        "--concurrency", type=int, default=4, help="requests in flight per served model (default 4)"
    )
    g.add_argument("--request-timeout", type=float, default=600.0, help="seconds per attempt (default 600)")
    g.add_argument("--max-attempts", type=int, default=3, help="attempts per request (default 3)")
    g.add_argument("--api-key-env", help="environment variable holding the endpoint's API key")
    g.add_argument("--response-cache", help="JSONL response cache (the teacher client's); default none")


def endpoint_settings(ns, role: str) -> EndpointSettings | None:
    """The settings of ``role`` from parsed flags; None when the role is not served."""
    url = getattr(ns, f"{role}_endpoint", None) or (
        ns.endpoint if (getattr(ns, "backend", None) == "openai" or ns.endpoint) else None
    )
    if not url:
        if getattr(ns, "backend", None) == "openai":
            raise BackendError(f"--backend openai: pass --endpoint URL or --{role}-endpoint URL")
        return None
    return EndpointSettings(
        endpoint=url,
        model=getattr(ns, f"{role}_model", None) or role,
        base_model=getattr(ns, f"{role}_base_model", None),
        concurrency=ns.concurrency,
        timeout_s=ns.request_timeout,
        max_attempts=ns.max_attempts,
        api_key_env=ns.api_key_env,
        cache=ns.response_cache,
    )


def require_base(s: EndpointSettings, role: str, wanted: bool) -> None:
    """Fail before any request when a no-adapter baseline of ``role`` is wanted but not served."""
    if wanted and not s.base_model:
        raise BackendError(
            f"--{role}-base-model: the {role}'s baseline without the adapter needs the base model's served "
            f"name (with vLLM the model given to `vllm serve`), or turn it off with --no-base-{role}"
        )


def served_label(s: EndpointSettings) -> str:
    from data_prep.teacher_client.endpoint import chat_url, public_url

    return f"{s.model} @ {public_url(chat_url(s.endpoint))}"
