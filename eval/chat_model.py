"""A local model answering one chat at a time, with the token counts and finish reason an
OpenAI-compatible server reports (what ``eval/serve.py`` puts behind HTTP).

Loading reuses the evaluations' code: with an adapter, ``TransformersBackend`` (the base as it was
trained, the adapter merged on CPU, the checkpoint's tokenizer and chat template); without one,
``load_base_for_inference`` and the base's own tokenizer, which must carry a chat template.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eval.generation import (
    BackendError,
    DecodingConfig,
    TransformersBackend,
    load_base_for_inference,
)
from train.checkpoint import stop_token_ids


class PromptTooLong(ValueError):
    """The prompt plus the answer budget does not fit the model's positions."""


@dataclass(frozen=True)
class Generation:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # stop | length


class LocalChatModel:
    """A base model plus an optional PEFT adapter, in eval mode. Not thread-safe: callers serialize."""

    def __init__(
        self,
        model_path: str | Path,
        adapter: str | Path | None = None,
        *,
        threads: int | None = 1,
        load_in_4bit: bool = False,
        attn_implementation: str = "sdpa",
        max_input_tokens: int | None = None,
    ):
        import torch

        decoding = DecodingConfig(threads=threads, attn_implementation=attn_implementation)
        if threads:
            torch.set_num_threads(threads)
        self.max_input_tokens = max_input_tokens
        if adapter is not None:
            backend = TransformersBackend(adapter, decoding, base=str(model_path))
            self.model = backend.model
            self.tokenizer = backend.tokenizer
        else:
            from transformers import AutoTokenizer

            if not Path(model_path).exists() and not _looks_like_hub_id(str(model_path)):
                raise BackendError(f"{model_path}: no such model directory")
            self.model, _ = load_base_for_inference(
                str(model_path),
                {"load_in_4bit": load_in_4bit, "attn_implementation": attn_implementation},
                decoding,
                gpu=torch.cuda.is_available(),
            )
            tok = AutoTokenizer.from_pretrained(str(model_path), trust_remote_code=False)
            if not tok.chat_template:
                raise BackendError(f"{model_path}: the tokenizer has no chat template")
            if tok.pad_token is None:
                tok.pad_token = tok.eos_token
            self.tokenizer = tok
        self.stop_ids = stop_token_ids(self.tokenizer, self.model)
        self.device = next(self.model.parameters()).device

    def positions(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", None) or 1 << 20)

    def generate(
        self,
        messages: list[dict],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> Generation:
        """One answer; greedy when ``temperature`` is 0, else seeded sampling."""
        import torch

        tok = self.tokenizer
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        limit = self.max_input_tokens or max(1, self.positions() - max_tokens)
        if len(ids) > limit:
            raise PromptTooLong(
                f"the prompt has {len(ids)} tokens; at most {limit} fit with max_tokens {max_tokens}"
            )
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        kwargs: dict = dict(
            max_new_tokens=max_tokens,
            eos_token_id=self.stop_ids,
            pad_token_id=tok.pad_token_id,
            use_cache=True,
            do_sample=temperature > 0,
        )
        if temperature > 0:
            kwargs.update(temperature=float(temperature), top_p=float(top_p))
            torch.manual_seed(0 if seed is None else int(seed))
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **kwargs
            )
        row = out[0, len(ids) :].tolist()
        stop_at = next((k for k, t in enumerate(row) if t in self.stop_ids), None)
        if stop_at is None:
            answer_ids, finish, n = row, ("length" if len(row) >= max_tokens else "stop"), len(row)
        else:
            answer_ids, finish, n = row[:stop_at], "stop", stop_at + 1
        return Generation(tok.decode(answer_ids, skip_special_tokens=True).strip(), len(ids), n, finish)


def _looks_like_hub_id(name: str) -> bool:
    return "/" in name and not name.startswith((".", "/")) and name.count("/") == 1
