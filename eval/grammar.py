"""Grammar-constrained decoding: an answer that can only be its task's JSON object.

Free decoding lets a small model loop inside an id or leave a string open, and the answer does not
parse. Constrained decoding masks, at every step, the tokens that cannot continue a valid answer:
xgrammar compiles the task's JSON schema (``configs/eval/answer_schemas/<task>.json``, the fields in the
prompt's order) against the checkpoint's tokenizer. The evaluations report it as its own row beside free
decoding (``constrained_writer``): what the model knows once a format error is impossible, never in
place of what it writes by itself. The schemas fix the layout only (fields, their order, the enums the
prompt names); no value of an answer is constrained beyond its type and length. Under a grammar the
answer guard ends a looping or overlong string *field* (``field_closer``, ``Constraint.mask(closing=)``:
the next token must close it) instead of the whole answer, which free decoding could only leave open.
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
FIELD_CUTS = "guard:field-cuts/1"


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
        self.quote_ids = quote_tokens(tokenizer, vocab_size)

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
            Constraint(self._xgr, self._xgr.GrammarMatcher(grammar), self.vocab_size, self.quote_ids)
            for _ in range(n)
        ]


def quote_tokens(tokenizer, vocab_size: int):
    """Ids of the tokens whose text starts with a double quote: what may follow a field the answer guard
    cut (train/answer_guard.py, ``closing``); the grammar keeps those that close the string validly."""
    import torch

    size = min(vocab_size, len(tokenizer))
    ids = [i for i in range(size) if tokenizer.decode([i], skip_special_tokens=True).startswith('"')]
    return torch.tensor(ids, dtype=torch.long)


def close_field(logits, quote_ids) -> bool:
    """Mask (in place) every token of ``logits`` [vocab] that does not start with a quote, unless that
    leaves nothing the grammar allows (then the row is left as the grammar masked it); True if applied."""
    import torch

    keep = logits[quote_ids]
    if not bool(torch.isfinite(keep).any()):
        return False
    logits.fill_(float("-inf"))
    logits[quote_ids] = keep
    return True


class Constraint:
    """One answer's grammar state: ``mask`` sets the logits of tokens it cannot take to -inf, ``accept``
    advances it by the token chosen."""

    def __init__(self, xgr, matcher, vocab_size: int, quote_ids=None):
        self._xgr = xgr
        self.matcher = matcher
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self.quote_ids = quote_ids

    def mask(self, logits, closing: bool = False) -> None:
        """``logits``: one row [vocab] (or [1, vocab]), masked in place; ``closing``: the answer guard cut
        the open string field, so only a token that closes it may come next."""
        self.matcher.fill_next_token_bitmask(self._bitmask, 0)
        row = logits.view(1, -1)
        self._xgr.apply_token_bitmask_inplace(row, self._bitmask.to(row.device))
        if closing and self.quote_ids is not None:
            close_field(row[0], self.quote_ids.to(row.device))

    def accept(self, token_id: int) -> None:
        if not self.matcher.is_terminated():
            self.matcher.accept_token(int(token_id))


def field_closer(guards: list, quote_ids):
    """A transformers LogitsProcessor for the generic generate path: a row whose answer guard cut its
    open field (``closing``) may only take a token that closes the string, as in the cached decoder."""
    from transformers import LogitsProcessor

    class _FieldCloser(LogitsProcessor):
        def __call__(self, input_ids, scores):
            for r, g in enumerate(guards):
                if g.closing and g.reason is None:
                    close_field(scores[r], quote_ids.to(scores.device))
            return scores

    return _FieldCloser()
