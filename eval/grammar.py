"""Grammar-constrained decoding: an answer that can only be its task's JSON object.

Free decoding lets a small model loop inside an id or leave a string open, and the answer does not
parse. Constrained decoding masks, at every step, the tokens that cannot continue a valid answer:
xgrammar compiles the task's JSON schema (``configs/eval/answer_schemas/<task>.json``, the fields in the
prompt's order) against the checkpoint's tokenizer. The evaluations report it as its own row beside free
decoding (``constrained_writer``): what the model knows once a format error is impossible, never in
place of what it writes by itself. The schemas fix the layout only (fields, their order, the enums the
prompt names) and, for a memory, the record types the oracle applies (its effects and statuses, ISO
8601 times, a non-negative amount, procurement or scope records), so that a constrained memory is one
``check_memory`` accepts; no value of an answer is constrained beyond its type and length. Under a grammar the
answer guard ends a looping or overlong string *field* (``field_closer``, ``Constraint.mask(wants=)``:
the next token must close it) instead of the whole answer, which free decoding could only leave open,
and near the token budget finishes the object so that it closes within it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from train.checkpoint import CheckpointError

REPO_ROOT = Path(__file__).resolve().parents[1]
SCHEMA_DIR = REPO_ROOT / "configs" / "eval" / "answer_schemas"
SEPARATORS = (", ", ": ")  # the layout the answers are trained in (data_prep.sft.render.laid_out)
# how the answer guard treats a constrained answer (train/answer_guard.py: cut_fields), in the items'
# digests so that a resumed evaluation recomputes answers decoded under an earlier rule
FIELD_CUTS = "guard:field-cuts/2"


class GrammarError(CheckpointError):
    """A schema that is missing or invalid, or xgrammar not installed."""


def schema_path(task: str) -> Path:
    return SCHEMA_DIR / f"{task}.json"


def load_schema(task: str) -> dict:
    path = schema_path(task)
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GrammarError(f"{path}: no answer schema for task {task!r}") from None
    except ValueError as exc:
        raise GrammarError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise GrammarError(f"{path}: type: expected a JSON schema of an object")
    return schema


def schema_digest(task: str) -> str:
    """Digest of the task's schema file: part of the fingerprint of a constrained answer."""
    return "sha256:" + hashlib.sha256(schema_path(task).read_bytes()).hexdigest()


class Grammars:
    """The answer grammars of one tokenizer, compiled on first use; ``constraints(task, n)`` gives one
    fresh ``Constraint`` per answer of a batch."""

    def __init__(self, tokenizer, vocab_size: int, stop_ids: list[int]):
        try:
            import xgrammar as xgr
        except ImportError:
            raise GrammarError(
                "constrained decoding needs the xgrammar package (pip install xgrammar), or set "
                "constrained_writer: false"
            ) from None
        self._xgr = xgr
        self.vocab_size = vocab_size
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stop_ids)
        self._compiler = xgr.GrammarCompiler(info, max_threads=1)
        self._compiled: dict[str, object] = {}
        self.closers = closing_tokens(tokenizer, vocab_size)

    def compiled(self, task: str):
        if task not in self._compiled:
            schema = load_schema(task)
            try:
                self._compiled[task] = self._compiler.compile_json_schema(
                    json.dumps(schema), any_whitespace=False, separators=SEPARATORS
                )
            except Exception as exc:  # noqa: BLE001 - xgrammar raises its own error types
                raise GrammarError(f"{schema_path(task)}: xgrammar cannot compile it ({exc})") from None
        return self._compiled[task]

    def constraints(self, task: str, n: int) -> list[Constraint]:
        grammar = self.compiled(task)
        return [
            Constraint(self._xgr, self._xgr.GrammarMatcher(grammar), self.vocab_size, self.closers)
            for _ in range(n)
        ]


def closing_tokens(tokenizer, vocab_size: int) -> dict:
    """Token ids by what they can close, for the answer guard's requests (``AnswerGuard.wants``):
    ``quote`` (text starting with a double quote: closes a string), ``quote_end`` (a quote followed
    only by ``]``/``}``: closes a string and containers), ``end`` (starting with ``]`` or ``}``)."""
    import torch

    out: dict[str, list[int]] = {"quote": [], "quote_end": [], "end": []}
    for i in range(min(vocab_size, len(tokenizer))):
        text = tokenizer.decode([i], skip_special_tokens=True)
        if text.startswith('"'):
            out["quote"].append(i)
            if set(text[1:]) <= set("]} "):
                out["quote_end"].append(i)
        elif text[:1] in ("]", "}"):
            out["end"].append(i)
    return {k: torch.tensor(v, dtype=torch.long) for k, v in out.items()}


# what each request of the answer guard allows, most specific first; where the grammar allows none of a
# set the next one is tried, and after the last the grammar's own mask stands
PREFERENCES = {
    "close_string": ("quote",),
    "finish_string": ("quote_end", "quote"),
    "finish": ("end",),
}


def restrict(logits, closers: dict, wants: str | None) -> bool:
    """Mask (in place) every token of ``logits`` [vocab] outside the first set of ``PREFERENCES[wants]``
    that the grammar allows anything of; False when none (the grammar's mask then stands)."""
    import torch

    for name in PREFERENCES.get(wants, ()):
        ids = closers[name].to(logits.device)
        keep = logits[ids]
        if bool(torch.isfinite(keep).any()):
            logits.fill_(float("-inf"))
            logits[ids] = keep
            return True
    return False


class Constraint:
    """One answer's grammar state: ``mask`` sets the logits of tokens it cannot take to -inf, ``accept``
    advances it by the token chosen."""

    def __init__(self, xgr, matcher, vocab_size: int, closers: dict | None = None):
        self._xgr = xgr
        self.matcher = matcher
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self.closers = closers

    def mask(self, logits, wants: str | None = None) -> None:
        """``logits``: one row [vocab] (or [1, vocab]), masked in place; ``wants``: the answer guard's
        request (a cut field to close, an object to finish), applied within what the grammar allows."""
        self.matcher.fill_next_token_bitmask(self._bitmask, 0)
        row = logits.view(1, -1)
        self._xgr.apply_token_bitmask_inplace(row, self._bitmask.to(row.device))
        if wants and self.closers is not None:
            restrict(row[0], self.closers, wants)

    def accept(self, token_id: int) -> None:
        if not self.matcher.is_terminated():
            self.matcher.accept_token(int(token_id))


def field_closer(guards: list, closers: dict):
    """A transformers LogitsProcessor for the generic generate path: each row's answer-guard request
    (``wants``: close a cut field, finish the object) applied as in the cached decoder."""
    from transformers import LogitsProcessor

    class _FieldCloser(LogitsProcessor):
        def __call__(self, input_ids, scores):
            for r, g in enumerate(guards):
                if g.reason is None and g.wants:
                    restrict(scores[r], closers, g.wants)
            return scores

    return _FieldCloser()
