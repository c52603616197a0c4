"""Generation backends behind one interface: transformers (base + LoRA adapter, CPU or GPU), vLLM with
LoRA (GPU clusters, optional), and a scripted backend for tests.

``Backend.generate(prompts, task=..., adapter=True) -> list[str]`` takes chat-format prompts (lists of
``{role, content}``) and returns one answer per prompt; ``complete`` wraps it so that a failure becomes a
per-item ``provider_error`` instead of an exception. ``adapter=False`` asks for the base model without
the adapter (the baseline measured in the same run).

Decoding settings (greedy by default) come from ``configs/eval/decoding.yaml``; the per-task
``max_new_tokens`` bound every answer.

On a CPU the transformers backend loads the base as it was trained (4-bit when it was) and then
replaces every 4-bit linear layer by a plain one holding the dequantized weights: the function is the
same (bitsandbytes dequantizes to the compute dtype before each matmul on a CPU), several times faster.
The adapter is then merged into those weights (``merge_adapter: auto``, about a third faster); the
base-model baseline loads a second, unmerged copy on first use. On a GPU the adapter stays separate and
the baseline runs with it disabled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_prep.yaml_config import ConfigError, check_keys, read_mapping
from train.answer_guard import AnswerGuard, stopping_criteria
from train.checkpoint import (
    STOP_TOKENS,
    CheckpointError,
    base_model_path,
    checkpoint_digest,
    load_base_as_trained,
    read_checkpoint,
    stop_token_ids,
)

logger = logging.getLogger("ledgerwright.eval")

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DECODING = REPO_ROOT / "configs" / "eval" / "decoding.yaml"
TASKS = ("writer_action", "reader_verdict", "writer_memory", "reader_policy")
BACKENDS = ("transformers", "vllm", "openai")  # openai: a running server (eval/openai_backend.py)


# One error for a backend, or the checkpoint under it, that cannot be created or used (a missing package
# or checkpoint file); checkpoints are read by train/checkpoint.py, which export shares.
BackendError = CheckpointError


class DecodingConfigError(ConfigError):
    pass


@dataclass
class DecodingConfig:
    """How answers are generated (``configs/eval/decoding.yaml``)."""

    backend: str = "transformers"
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    batch_size: int = 16
    max_new_tokens: dict[str, int] = field(
        default_factory=lambda: {
            "writer_action": 128,
            "reader_verdict": 192,
            "writer_memory": 600,
            "reader_policy": 16,
        }
    )
    max_input_tokens: int | None = None
    attn_implementation: str = "sdpa"
    merge_adapter: str = "auto"  # auto | true | false
    dequantize_on_cpu: bool = True
    threads: int | None = 1
    workers: int | None = None  # CPU processes evaluating chunks side by side; None: cores / threads
    guard: bool = True  # end looping answers (train/answer_guard.py): json_end, repetition, field_length
    max_field_chars: int = 400
    reuse_kv_cache: bool = True  # CPU, Gemma 3: keep keys/values across a conversation's turns
    vllm_gpu_memory_utilization: float = 0.85
    vllm_max_model_len: int | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def digest(self) -> str:
        """Digest of the settings that change answers (not threads, workers or batch plumbing of vLLM)."""
        d = self.to_dict()
        for k in ("threads", "workers", "vllm_gpu_memory_utilization", "reuse_kv_cache"):
            d.pop(k)
        return "sha256:" + hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()

    def tokens_for(self, task: str) -> int:
        if task not in self.max_new_tokens:
            raise DecodingConfigError(f"max_new_tokens: no value for task {task!r}")
        return int(self.max_new_tokens[task])


def load_decoding(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> DecodingConfig:
    """Defaults < YAML < overrides; unknown keys and bad values raise DecodingConfigError naming the file."""
    cfg = DecodingConfig()
    names = {f.name for f in dataclasses.fields(DecodingConfig)}
    src = str(path) if path else "defaults"
    values: dict[str, Any] = {}
    if path is not None:
        values.update(read_mapping(path, DecodingConfigError, "decoding config"))
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    check_keys(values, names, src, DecodingConfigError)
    for key, value in values.items():
        if key == "max_new_tokens":
            if not isinstance(value, dict) or not all(isinstance(v, int) and v > 0 for v in value.values()):
                raise DecodingConfigError(
                    f"{src}: max_new_tokens: expected a mapping of task -> positive integer"
                )
            value = {**cfg.max_new_tokens, **value}
        setattr(cfg, key, value)
    if cfg.backend not in BACKENDS:
        raise DecodingConfigError(
            f"{src}: backend: expected one of {', '.join(BACKENDS)}, got {cfg.backend!r}"
        )
    if not isinstance(cfg.temperature, int | float) or cfg.temperature < 0:
        raise DecodingConfigError(f"{src}: temperature: expected a number >= 0")
    if not isinstance(cfg.batch_size, int) or cfg.batch_size < 1:
        raise DecodingConfigError(f"{src}: batch_size: expected a positive integer")
    if cfg.workers is not None and (not isinstance(cfg.workers, int) or cfg.workers < 1):
        raise DecodingConfigError(f"{src}: workers: expected a positive integer or null")
    if str(cfg.merge_adapter).lower() not in ("auto", "true", "false"):
        raise DecodingConfigError(f"{src}: merge_adapter: expected auto, true or false")
    cfg.merge_adapter = str(cfg.merge_adapter).lower()
    return cfg


@dataclass
class Completion:
    """One answer, or the error that prevented it (``text`` None)."""

    text: str | None
    error: str | None = None
    stop: str | None = None  # why generation ended: stop_token, max_new_tokens or a guard reason (field_cut:
    # under a grammar the guard closed a looping or overlong field and the answer went on to its end)

    @property
    def ok(self) -> bool:
        return self.error is None


class Backend:
    """The interface every backend implements. ``constrained=True`` asks for grammar-constrained
    decoding (eval/grammar.py) from backends that offer it (``supports_grammar``)."""

    name = "backend"
    supports_grammar = False

    def generate(
        self, prompts: Sequence[list[dict]], *, task: str, adapter: bool = True, constrained: bool = False
    ) -> list[str]:
        raise NotImplementedError

    def fingerprint(self, adapter: bool = True) -> str:
        """What identifies the model that answers (checkpoint digest, or 'base of' it) and decoding."""
        raise NotImplementedError

    def describe(self) -> dict:
        return {"backend": self.name}

    def complete(
        self, prompts: Sequence[list[dict]], *, task: str, adapter: bool = True, constrained: bool = False
    ) -> list[Completion]:
        """``generate`` with failures turned into per-item errors: a failing batch is retried item by
        item, and an item that still fails gets ``error`` set (a provider error, counted, never dropped)."""
        if not prompts:
            return []
        kw = {"task": task, "adapter": adapter}
        if constrained:
            if not self.supports_grammar:
                raise BackendError(f"backend {self.name} offers no grammar-constrained decoding")
            kw["constrained"] = True
        try:
            return [Completion(t) for t in self.generate(prompts, **kw)]
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001 - any generation failure is a provider error per item
            if len(prompts) == 1:
                return [Completion(None, f"{type(exc).__name__}: {exc}")]
            logger.warning("generation failed for a batch of %d (%s); retrying one by one", len(prompts), exc)
        out = []
        for p in prompts:
            try:
                out.append(Completion(self.generate([p], **kw)[0]))
            except BackendError:
                raise
            except Exception as exc:  # noqa: BLE001
                out.append(Completion(None, f"{type(exc).__name__}: {exc}"))
        return out

    def close(self) -> None:  # noqa: B027 - optional hook
        pass


# ---- loading -----------------------------------------------------------------------------------------
def _set_threads(n: int | None) -> None:
    import torch

    if n:
        torch.set_num_threads(n)
    elif "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))


def load_base_for_inference(base_path: str, train_cfg: dict, decoding: DecodingConfig, *, gpu: bool):
    """The base model as it was trained (``train.checkpoint.load_base_as_trained``) with the decoding
    config's attention and CPU dequantization settings."""
    return load_base_as_trained(
        base_path,
        train_cfg,
        attn_implementation=decoding.attn_implementation,
        dequantize=decoding.dequantize_on_cpu,
        gpu=gpu,
    )


class TransformersBackend(Backend):
    """Batched generation with transformers: the checkpoint's tokenizer and chat template, left padding,
    greedy unless the decoding config says otherwise."""

    name = "transformers"
    supports_grammar = True

    def __init__(self, ckpt: str | Path, decoding: DecodingConfig, *, base: str | None = None):
        import torch

        _set_threads(decoding.threads)
        self.ckpt = Path(ckpt)
        self.decoding = decoding
        self.manifest = read_checkpoint(self.ckpt)
        self.base_path = base_model_path(self.ckpt, self.manifest, base)
        self.gpu = torch.cuda.is_available()
        self.digest = checkpoint_digest(self.ckpt)
        self._model = None
        self._base = None
        self._merged = False
        self._decoders: dict[bool, Any] = {}
        self._grammars = None
        self.tokenizer = self._load_tokenizer()
        self._token_text: dict[int, str] = {}

    # -- loading -------------------------------------------------------------------------------------
    def _load_tokenizer(self):
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(self.ckpt), trust_remote_code=False)
        if not tok.chat_template:
            raise BackendError(f"{self.ckpt}: the checkpoint's tokenizer has no chat template")
        tok.padding_side = "left"
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        return tok

    def _merge(self) -> bool:
        if self.decoding.merge_adapter == "auto":
            return not self.gpu
        return self.decoding.merge_adapter == "true"

    @property
    def model(self):
        if self._model is None:
            from peft import PeftModel

            base, dtype = load_base_for_inference(
                self.base_path, self.manifest["config"], self.decoding, gpu=self.gpu
            )
            model = PeftModel.from_pretrained(base, str(self.ckpt), is_trainable=False)
            adapter_dtype = dtype
            for name, p in model.named_parameters():
                if "lora_" in name:
                    p.data = p.data.to(adapter_dtype)
            if self._merge():
                model = model.merge_and_unload()
                self._merged = True
            model.eval()
            self._model = model
        return self._model

    @property
    def base_model(self):
        """The base without the adapter: a separate copy when the adapter was merged."""
        model = self.model
        if not self._merged:
            return model
        if self._base is None:
            self._base, _ = load_base_for_inference(
                self.base_path, self.manifest["config"], self.decoding, gpu=self.gpu
            )
        return self._base

    def fingerprint(self, adapter: bool = True) -> str:
        who = self.digest["digest"] if adapter else "base-of:" + self.digest["digest"]
        return f"{self.name}|{who}|{self.decoding.digest()}"

    def describe(self) -> dict:
        return {
            "backend": self.name,
            "checkpoint": self.digest,
            "base_model_path": self.base_path,
            "device": "cuda" if self.gpu else "cpu",
            "adapter_merged": self._merge(),
            "dequantized_on_cpu": (not self.gpu) and self.decoding.dequantize_on_cpu,
        }

    def _stop_ids(self, model) -> list[int]:
        return stop_token_ids(self.tokenizer, model)

    def _max_input(self, model, max_new: int) -> int:
        if self.decoding.max_input_tokens:
            return int(self.decoding.max_input_tokens)
        mpe = getattr(model.config, "max_position_embeddings", None) or 1 << 20
        return max(1, int(mpe) - max_new)

    # -- generation ----------------------------------------------------------------------------------
    def generate(
        self, prompts: Sequence[list[dict]], *, task: str, adapter: bool = True, constrained: bool = False
    ) -> list[str]:
        return [c.text or "" for c in self._run(prompts, task, adapter, strict=True, constrained=constrained)]

    def complete(
        self, prompts: Sequence[list[dict]], *, task: str, adapter: bool = True, constrained: bool = False
    ) -> list[Completion]:
        return self._run(prompts, task, adapter, strict=False, constrained=constrained)

    def grammars(self, model):
        """The answer grammars for this checkpoint's tokenizer (eval/grammar.py), compiled on first use."""
        if self._grammars is None:
            from eval.grammar import Grammars

            self._grammars = Grammars(self.tokenizer, int(model.config.vocab_size), self._stop_ids(model))
        return self._grammars

    def _run(
        self, prompts: Sequence[list[dict]], task: str, adapter: bool, strict: bool, constrained: bool = False
    ) -> list[Completion]:
        import torch

        if not prompts:
            return []
        model = self.model if adapter else self.base_model
        max_new = self.decoding.tokens_for(task)
        limit = self._max_input(model, max_new)
        tok = self.tokenizer
        encoded: list[list[int] | None] = []
        out: list[Completion | None] = [None] * len(prompts)
        for i, p in enumerate(prompts):
            text = tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
            ids = tok(text, add_special_tokens=False)["input_ids"]
            if len(ids) > limit:
                msg = f"prompt of {len(ids)} tokens exceeds the input limit of {limit}"
                if strict:
                    raise ValueError(msg)
                out[i] = Completion(None, msg)
                encoded.append(None)
            else:
                encoded.append(ids)
        order = sorted(
            (i for i, e in enumerate(encoded) if e is not None), key=lambda i: (-len(encoded[i]), i)
        )
        stop = self._stop_ids(model)
        decoder = self._cached_decoder(model, adapter)
        grammars = self.grammars(model) if constrained else None
        if decoder is not None:
            self._run_cached(decoder, encoded, order, out, max_new, stop, strict, task, grammars)
            return [c if c is not None else Completion(None, "no output") for c in out]
        device = next(model.parameters()).device
        bs = self.decoding.batch_size
        sample = self.decoding.temperature > 0
        for start in range(0, len(order), bs):
            idx = order[start : start + bs]
            width = max(len(encoded[i]) for i in idx)
            pad = tok.pad_token_id
            input_ids = torch.full((len(idx), width), pad, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for r, i in enumerate(idx):
                e = encoded[i]
                input_ids[r, width - len(e) :] = torch.tensor(e, dtype=torch.long)
                mask[r, width - len(e) :] = 1
            kwargs: dict[str, Any] = dict(
                max_new_tokens=max_new,
                eos_token_id=stop,
                pad_token_id=pad,
                use_cache=True,
                do_sample=sample,
            )
            if sample:
                kwargs.update(temperature=float(self.decoding.temperature), top_p=float(self.decoding.top_p))
                torch.manual_seed(self.decoding.seed)
            else:
                kwargs.update(temperature=None, top_p=None, top_k=None)
            guards = self._guards(len(idx), max_new if grammars is not None else None)
            if guards is not None:
                kwargs["stopping_criteria"] = stopping_criteria(guards, self._text_of, width)
            if grammars is not None:
                from xgrammar.contrib.hf import LogitsProcessor

                from eval.grammar import field_closer

                kwargs["logits_processor"] = [LogitsProcessor([grammars.compiled(task)] * len(idx))]
                if guards is not None:
                    kwargs["logits_processor"].append(field_closer(guards, grammars.closers))
            # the base model: a separate copy when the adapter was merged, else the adapter switched off
            off = model.disable_adapter() if (not adapter and not self._merged) else contextlib.nullcontext()
            try:
                with torch.inference_mode(), off:
                    gen = model.generate(
                        input_ids=input_ids.to(device), attention_mask=mask.to(device), **kwargs
                    )
            except Exception as exc:  # noqa: BLE001
                if strict:
                    raise
                _fail(out, idx, exc)
                continue
            for r, i in enumerate(idx):
                row = gen[r, width:].tolist()
                cut, why = len(row), "max_new_tokens"
                for k, t in enumerate(row):
                    if t in stop:
                        cut, why = k, "stop_token"
                        break
                if guards is not None and guards[r].reason:
                    cut, why = min(cut, guards[r].cut), guards[r].reason
                out[i] = Completion(tok.decode(row[:cut], skip_special_tokens=True).strip(), stop=why)
        return [c if c is not None else Completion(None, "no output") for c in out]

    # -- the cached decoder (CPU, Gemma 3) -----------------------------------------------------------
    def _cached_decoder(self, model, adapter: bool):
        """The KV-reusing greedy decoder for this model, or None where the generic path applies."""
        from eval import cached_decoding

        if self.gpu or not self.decoding.reuse_kv_cache or self.decoding.temperature > 0:
            return None
        if not cached_decoding.supports(model):  # also an unmerged PeftModel: the generic path
            return None
        if adapter not in self._decoders:
            self._decoders[adapter] = cached_decoding.CachedDecoder(model)
        return self._decoders[adapter]

    def _text_of(self, token_id: int) -> str:
        text = self._token_text.get(token_id)
        if text is None:
            text = self._token_text[token_id] = self.tokenizer.decode([token_id], skip_special_tokens=True)
        return text

    def _guards(self, n: int, budget: int | None = None):
        """One answer guard per row; ``budget`` (under a grammar): the guard cuts looping fields instead."""
        if not self.decoding.guard:
            return None
        return [self._guard(budget) for _ in range(n)]

    def _guard(self, budget: int | None) -> AnswerGuard:
        limit = self.decoding.max_field_chars
        return AnswerGuard(max_field_chars=limit, cut_fields=budget is not None, budget=budget)

    def _run_cached(
        self, decoder, encoded, order, out, max_new: int, stop: list[int], strict: bool, task: str, grammars
    ) -> None:
        budget = max_new if grammars is not None else None
        guard = (lambda: self._guard(budget)) if self.decoding.guard else None
        bs = self.decoding.batch_size
        for start in range(0, len(order), bs):
            idx = order[start : start + bs]
            try:
                results = decoder.generate(
                    [encoded[i] for i in idx],
                    max_new_tokens=max_new,
                    stop_ids=stop,
                    guard=guard,
                    decode_token=self._text_of,
                    constraints=grammars.constraints(task, len(idx)) if grammars is not None else None,
                )
            except Exception as exc:  # noqa: BLE001
                if strict:
                    raise
                _fail(out, idx, exc)
                continue
            for i, (ids, why) in zip(idx, results):
                text = self.tokenizer.decode(ids, skip_special_tokens=True).strip()
                out[i] = Completion(text, stop=why)


def _fail(out: list, idx: Sequence[int], exc: Exception) -> None:
    """Every prompt of a failed batch gets the error as its provider error."""
    for i in idx:
        out[i] = Completion(None, f"{type(exc).__name__}: {exc}")


class VLLMBackend(Backend):
    """vLLM with the checkpoint's LoRA adapter on its base (bf16: vLLM serves the unquantized base, so
    numbers can differ slightly from the 4-bit base the adapter was trained on). GPU only."""

    name = "vllm"

    def __init__(self, ckpt: str | Path, decoding: DecodingConfig, *, base: str | None = None):
        try:
            import vllm  # noqa: F401
        except ImportError:
            raise BackendError(
                "the vllm backend needs the vllm package, which is not installed here (pip install vllm on a "
                "GPU machine), or use backend: transformers"
            ) from None
        from transformers import AutoTokenizer
        from vllm import LLM
        from vllm.lora.request import LoRARequest

        self.ckpt = Path(ckpt)
        self.decoding = decoding
        self.manifest = read_checkpoint(self.ckpt)
        self.base_path = base_model_path(self.ckpt, self.manifest, base)
        self.digest = checkpoint_digest(self.ckpt)
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.ckpt), trust_remote_code=False)
        rank = int(json.loads((self.ckpt / "adapter_config.json").read_text())["r"])
        kwargs: dict[str, Any] = dict(
            model=self.base_path,
            enable_lora=True,
            max_lora_rank=max(8, rank),
            dtype="bfloat16",
            seed=decoding.seed,
            gpu_memory_utilization=decoding.vllm_gpu_memory_utilization,
            trust_remote_code=False,
        )
        if decoding.vllm_max_model_len:
            kwargs["max_model_len"] = decoding.vllm_max_model_len
        self.llm = LLM(**kwargs)
        self.lora = LoRARequest("adapter", 1, str(self.ckpt))

    def fingerprint(self, adapter: bool = True) -> str:
        who = self.digest["digest"] if adapter else "base-of:" + self.digest["digest"]
        return f"{self.name}|{who}|{self.decoding.digest()}"

    def describe(self) -> dict:
        return {"backend": self.name, "checkpoint": self.digest, "base_model_path": self.base_path}

    def generate(self, prompts: Sequence[list[dict]], *, task: str, adapter: bool = True) -> list[str]:
        from vllm import SamplingParams

        tok = self.tokenizer
        stop = [
            tid
            for t in STOP_TOKENS
            if isinstance(tid := tok.convert_tokens_to_ids(t), int) and tid != tok.unk_token_id
        ]
        params = SamplingParams(
            temperature=float(self.decoding.temperature),
            top_p=float(self.decoding.top_p),
            max_tokens=self.decoding.tokens_for(task),
            seed=self.decoding.seed,
            stop_token_ids=stop or None,
        )
        # the chat template already writes <bos>; token ids avoid a second one from the engine
        inputs = [
            {
                "prompt_token_ids": tok(
                    tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True),
                    add_special_tokens=False,
                )["input_ids"]
            }
            for p in prompts
        ]
        outs = self.llm.generate(inputs, params, lora_request=self.lora if adapter else None, use_tqdm=False)
        return [o.outputs[0].text.strip() for o in outs]


class ScriptedBackend(Backend):
    """Canned answers for tests: ``responder(messages, task, adapter) -> str``; raising inside it
    simulates a provider error. Counts calls, so resume tests can check that nothing was regenerated."""

    name = "scripted"
    supports_grammar = True  # canned answers are what they are; constrained calls are only counted

    def __init__(self, responder: Callable[[list[dict], str, bool], str], label: str = "scripted"):
        self.responder = responder
        self.label = label
        self.calls = 0
        self.prompts_seen = 0
        self.constrained_prompts = 0

    def fingerprint(self, adapter: bool = True) -> str:
        return f"{self.name}|{self.label}|{'adapter' if adapter else 'base'}"

    def describe(self) -> dict:
        return {"backend": self.name, "label": self.label}

    def generate(
        self, prompts: Sequence[list[dict]], *, task: str, adapter: bool = True, constrained: bool = False
    ) -> list[str]:
        self.calls += 1
        self.prompts_seen += len(prompts)
        self.constrained_prompts += len(prompts) if constrained else 0
        return [self.responder(p, task, adapter) for p in prompts]


def make_backend(ckpt: str | Path, decoding: DecodingConfig, *, base: str | None = None) -> Backend:
    if decoding.backend == "openai":
        raise BackendError(
            "backend openai serves no checkpoint directory: name the served models with --endpoint URL "
            "(or --writer-endpoint / --reader-endpoint) and --writer-model / --reader-model"
        )
    if decoding.backend == "vllm":
        return VLLMBackend(ckpt, decoding, base=base)
    return TransformersBackend(ckpt, decoding, base=base)
