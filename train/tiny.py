"""The embedded tiny base model: a small Gemma 3 built and pretrained offline on the SFT corpus.

``ensure_tiny_base`` returns ``<cache>/tiny-gemma3-<hash>/`` holding ``config.json``,
``model.safetensors``, ``generation_config.json``, the tokenizer (``tokenizer.json``,
``tokenizer_config.json``, ``chat_template.jinja``) and ``pretrain.json`` (losses before/after, time).
The hash covers the tiny config, the corpus digest, the chat template and the recipe version, so
any change builds a new base. Built in a temporary folder and renamed into place when complete.

Steps: a byte-level BPE (``tokenizers``) trained on the message texts of every task's train split;
a ``Gemma3TextConfig`` with explicit alternating sliding/full ``layer_types``, GQA and
``query_pre_attn_scalar = head_dim``; the copy circuit of ``train/copy_circuit.py`` set at
initialisation (``copy_circuit``); full-parameter causal-LM pretraining for a fixed number of steps
with a fixed seed, on the corpus text mixed with synthetic copy sequences (``copy_fraction``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import shutil
import time
from dataclasses import asdict
from pathlib import Path

from train.config import REPO_ROOT, TinyBaseConfig

logger = logging.getLogger("ledgerwright.train")

RECIPE_VERSION = 6
TOKENIZER_MAX_CHARS = 20_000_000  # BPE training text, a seeded sample of the messages beyond this
TEMPLATE = REPO_ROOT / "configs" / "chat_templates" / "gemma3-train.jinja"
SFT_TASKS = ("writer_action", "writer_memory", "reader_verdict", "reader_policy")
PAD, EOS, BOS, UNK, SOT, EOT = "<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"
SPECIAL_TOKENS = [PAD, EOS, BOS, UNK, SOT, EOT]  # ids 0..5 (Gemma order for pad/eos/bos/unk)
EVAL_BLOCKS = 16
# Pre-tokenization that makes an id copy a token-by-token copy: every digit is a token of its own (as
# Llama 3 and Gemma split digits), and so is every hex letter standing between digits or next to one
# (up to four letters on from a digit), so ``call_80e76f8c7143`` becomes ``call _ 8 0 e 7 6 f 8 c 7 1 4 3``
# wherever it appears. Words of plain text are untouched (a letter is only isolated next to a digit).
ID_CHARS = (
    r"[0-9]"
    r"|[a-f](?=[a-f]*[0-9])"
    r"|(?<=[0-9])[a-f]|(?<=[0-9][a-f])[a-f]|(?<=[0-9][a-f]{2})[a-f]|(?<=[0-9][a-f]{3})[a-f]"
)
# A space before an identifier (a word joined by ``_`` or ``-``: a tool name, ``AR-33923``, ``call_...``)
# is a token of its own, so the identifier is the same tokens after a space (the call shown to the writer,
# a description) as after a quote (the entry's JSON): a copy is then token for token. Plain words keep
# their leading space.
SPACE_BEFORE_ID = r" (?=[A-Za-z][A-Za-z0-9]*[_-][A-Za-z0-9])"
# JSON's separators between a key and its value and between fields, one token each (byte-level
# pre-tokenization would cut ``": "`` in two): a field's value then follows the two tokens ``key": "``,
# which the copy circuit's window match finds (train/copy_circuit.py).
JSON_SEPARATORS = ('": "', '", "')


def _sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def corpus_rows(sft_dir: Path) -> tuple[list[dict], list[dict]]:
    """(train rows, validation rows) of every task present in ``sft_dir``, sorted by (task, id)."""
    from train.data import DataError, load_tasks

    tasks = [t for t in SFT_TASKS if (sft_dir / t).is_dir()]
    if not tasks:
        raise DataError(f"{sft_dir}: no SFT task datasets ({', '.join(SFT_TASKS)}) to build a tokenizer from")
    data = load_tasks(sft_dir, tasks)
    return data.splits["train"], data.splits["validation"]


def corpus_digest(rows: list[dict]) -> str:
    h = hashlib.sha256()
    for r in rows:
        h.update(json.dumps([r["task"], r["id"], r["messages"]], sort_keys=True, ensure_ascii=False).encode())
    return h.hexdigest()


def base_dir_name(cfg: TinyBaseConfig, digest: str) -> str:
    tiny = asdict(cfg)
    if not tiny["rename_values"]:  # added later: bases built without it keep their cache key
        del tiny["rename_values"]
    if tiny["copy_match_tokens"] == 2:  # likewise
        del tiny["copy_match_tokens"]
    if not tiny["copy_global_phrase"]:  # likewise
        del tiny["copy_global_phrase"]
    key = json.dumps(
        {
            "tiny": tiny,
            "corpus": digest,
            "template": _sha(TEMPLATE.read_bytes()),
            "recipe": RECIPE_VERSION,
        },
        sort_keys=True,
    )
    return f"tiny-gemma3-{_sha(key)[:12]}"


def ensure_tiny_base(sft_dir: Path, cache_dir: Path, cfg: TinyBaseConfig) -> Path:
    """The cached tiny base for this corpus and config; built (a few minutes on 2 cores) if absent."""
    train_rows, val_rows = corpus_rows(Path(sft_dir))
    digest = corpus_digest(train_rows)
    final = Path(cache_dir) / base_dir_name(cfg, digest)
    if (final / "pretrain.json").is_file():
        logger.info("tiny base: using cached %s", final)
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        build_tiny_base(tmp, train_rows, val_rows, cfg, digest)
        if final.exists():  # built concurrently by another process
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def train_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE with the Gemma-style special tokens, digits and id characters split one per
    token (``ID_CHARS``), identifiers without their leading space (``SPACE_BEFORE_ID``), JSON's
    separators one token each (``JSON_SEPARATORS``), and the training chat template."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPACE_BEFORE_ID), behavior="isolated"),
            pre_tokenizers.Split(Regex(ID_CHARS), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(JSON_SEPARATORS),  # they are added after training
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens([AddedToken(sep, normalized=False) for sep in JSON_SEPARATORS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        additional_special_tokens=[SOT, EOT],
        model_max_length=1 << 20,
    )
    fast.chat_template = TEMPLATE.read_text(encoding="utf-8")
    return fast


def model_config(cfg: TinyBaseConfig, tokenizer):
    from transformers import Gemma3TextConfig

    # two sliding layers first (the copy circuit's positional heads and window match), then global
    # and sliding alternating, the last one global
    n = cfg.num_hidden_layers
    layer_types = ["sliding_attention"] * min(n, 2) + [
        "full_attention" if i % 2 == 0 or i == n - 1 else "sliding_attention" for i in range(2, n)
    ]
    if "full_attention" not in layer_types:
        layer_types[-1] = "full_attention"
    return Gemma3TextConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        query_pre_attn_scalar=cfg.head_dim,
        sliding_window=cfg.sliding_window,
        layer_types=layer_types,
        max_position_embeddings=cfg.max_position_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
        use_cache=True,
    )


def _documents(
    rows: list[dict], tokenizer, fmt: str, budget: int | None = None, seed: int = 0
) -> list[list[int]]:
    """Token ids of the rows as pretraining documents, in a seeded order, until ``budget`` tokens."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    docs, total = [], 0
    for i in order:
        if budget is not None and total >= budget:
            break
        r = rows[i]
        if fmt == "conversation":
            ids = tokenizer.apply_chat_template(r["messages"], tokenize=True, return_dict=True)["input_ids"]
            ids = list(ids) + [tokenizer.eos_token_id]
        else:
            text = "\n\n".join(m["content"] for m in r["messages"])
            ids = [tokenizer.bos_token_id] + tokenizer(text, add_special_tokens=False)["input_ids"]
            ids.append(tokenizer.eos_token_id)
        docs.append(ids)
        total += len(ids)
    return docs


def _blocks(docs: list[list[int]], seq_len: int):
    import torch

    stream = [t for d in docs for t in d]
    n = max(1, len(stream) // seq_len)
    if len(stream) < seq_len:
        stream = (stream * (seq_len // max(1, len(stream)) + 1))[:seq_len]
    return torch.tensor(stream[: n * seq_len], dtype=torch.long).view(n, seq_len)


def copy_accuracy(model, gen, cfg: TinyBaseConfig, bos: int, count: int = 16) -> float:
    """The base's accuracy on the repeats of ``count`` fresh synthetic copy sequences."""
    from train import copy_circuit

    ids, labels = copy_circuit.repeat_sequences(
        gen, count, cfg.pretrain_seq_len, (len(SPECIAL_TOKENS), model.config.vocab_size), bos
    )
    return copy_circuit.copy_accuracy(model, ids, labels)


def pretrain(model, train_blocks, eval_blocks, cfg: TinyBaseConfig) -> dict:
    """Full-parameter causal-LM training for ``cfg.pretrain_steps`` steps, a ``copy_fraction`` of
    every batch synthetic copy sequences; returns the loss log."""
    import torch

    from train.copy_circuit import repeat_sequences

    gen = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.pretrain_lr, betas=(0.9, 0.95), weight_decay=0.01)
    warmup = max(1, cfg.pretrain_steps // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, cfg.pretrain_steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)

    @torch.no_grad()
    def eval_loss() -> float:
        model.eval()
        losses = [model(input_ids=b[None], labels=b[None], use_cache=False).loss.item() for b in eval_blocks]
        model.train()
        return sum(losses) / len(losses)

    bos = model.config.bos_token_id
    probe_gen = torch.Generator().manual_seed(cfg.seed + 2)
    log = {
        "eval_loss_before": eval_loss(),
        "copy_accuracy_before": copy_accuracy(model, probe_gen, cfg, bos),
        "train_loss": [],
    }
    n_copy = round(cfg.pretrain_batch_size * cfg.copy_fraction)
    logger.info(
        "tiny base: pretraining %d steps; eval loss before %.3f", cfg.pretrain_steps, log["eval_loss_before"]
    )
    model.train()
    perm = torch.randperm(len(train_blocks), generator=gen)
    pos = 0
    t0 = time.time()
    from tqdm.auto import tqdm

    bar = tqdm(range(cfg.pretrain_steps), desc="pretrain tiny base", unit="step", mininterval=2.0)
    for step in bar:
        if pos + cfg.pretrain_batch_size > len(perm):
            perm = torch.randperm(len(train_blocks), generator=gen)
            pos = 0
        idx = perm[pos : pos + cfg.pretrain_batch_size - n_copy]
        pos += cfg.pretrain_batch_size - n_copy
        batch = labels = train_blocks[idx]
        if n_copy:
            ids, copy_labels = repeat_sequences(
                gen, n_copy, cfg.pretrain_seq_len, (len(SPECIAL_TOKENS), model.config.vocab_size), bos
            )
            batch, labels = torch.cat([batch, ids]), torch.cat([labels, copy_labels])
        loss = model(input_ids=batch, labels=labels, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        log["train_loss"].append(round(loss.item(), 4))
        if step % 10 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    log["seconds"] = round(time.time() - t0, 1)
    log["eval_loss_after"] = eval_loss()
    log["copy_accuracy_after"] = copy_accuracy(model, probe_gen, cfg, bos)
    logger.info(
        "tiny base: eval loss %.3f -> %.3f, copy accuracy %.3f -> %.3f after %d steps (%.0f s)",
        log["eval_loss_before"],
        log["eval_loss_after"],
        log["copy_accuracy_before"],
        log["copy_accuracy_after"],
        cfg.pretrain_steps,
        log["seconds"],
    )
    model.eval()
    return log


def build_tiny_base(
    out: Path, train_rows: list[dict], val_rows: list[dict], cfg: TinyBaseConfig, digest: str
):
    import torch
    from transformers import Gemma3ForCausalLM, GenerationConfig

    from train.augment import rename_tools, rename_values

    t0 = time.time()
    texts = [m["content"] for r in train_rows for m in r["messages"]]
    if sum(map(len, texts)) > TOKENIZER_MAX_CHARS:
        random.Random(cfg.seed).shuffle(texts)
        keep, n = [], 0
        for t in texts:
            if n >= TOKENIZER_MAX_CHARS:
                break
            keep.append(t)
            n += len(t)
        texts = keep
    tokenizer = train_tokenizer(texts, cfg.vocab_size)
    logger.info("tiny base: tokenizer of %d tokens trained on %d messages", len(tokenizer), len(texts))
    torch.manual_seed(cfg.seed)
    mcfg = model_config(cfg, tokenizer)
    model = Gemma3ForCausalLM(mcfg)
    model.config._attn_implementation = "sdpa"
    hooks = []
    if cfg.copy_circuit:
        from train.copy_circuit import init_copy_circuit

        hooks = init_copy_circuit(
            model, seed=cfg.seed, match_tokens=cfg.copy_match_tokens, global_phrase=cfg.copy_global_phrase
        )
    # one pass worth of tokens: every pretraining step sees new text while the corpus lasts
    budget = cfg.pretrain_steps * cfg.pretrain_batch_size * cfg.pretrain_seq_len
    train_blocks = _blocks(
        _documents(
            rename_values(rename_tools(train_rows, cfg.seed, cfg.rename_tools, varied=False), cfg.seed, cfg.rename_values),
            tokenizer,
            cfg.pretrain_format,
            budget,
            cfg.seed,
        ),
        cfg.pretrain_seq_len,
    )
    eval_src = val_rows or train_rows
    eval_blocks = _blocks(
        _documents(
            eval_src, tokenizer, cfg.pretrain_format, EVAL_BLOCKS * cfg.pretrain_seq_len, cfg.seed + 1
        ),
        cfg.pretrain_seq_len,
    )[:EVAL_BLOCKS]
    log = pretrain(model, train_blocks, eval_blocks, cfg)
    for hook in hooks:
        hook.remove()
    eot = tokenizer.convert_tokens_to_ids(EOT)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=[tokenizer.eos_token_id, eot],
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    info = {
        "recipe_version": RECIPE_VERSION,
        "tiny_config": asdict(cfg),
        "parameters": sum(p.numel() for p in model.parameters()),
        "corpus_digest": "sha256:" + digest,
        "corpus_examples": len(train_rows),
        "train_tokens": int(train_blocks.numel()),
        "eval_source": "validation" if val_rows else "train",
        "chat_template_sha256": "sha256:" + _sha(TEMPLATE.read_bytes()),
        "eval_loss_before": round(log["eval_loss_before"], 4),
        "eval_loss_after": round(log["eval_loss_after"], 4),
        "copy_accuracy_before": log["copy_accuracy_before"],
        "copy_accuracy_after": log["copy_accuracy_after"],
        "pretrain_seconds": log["seconds"],
        "build_seconds": round(time.time() - t0, 1),
        "train_loss": log["train_loss"],
    }
    (out / "pretrain.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return info
