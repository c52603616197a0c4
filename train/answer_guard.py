"""Ends an answer that can no longer become a good one, token by token while it is generated.

Every task answers with one JSON object. A small model that loses its place loops (``"call_e6e6e6...``)
until ``max_new_tokens``, which costs the whole token budget per answer and says nothing more. The guard
stops generation when:

- ``json_end``: the top-level object has closed (what follows would be ignored by the parser anyway);
- ``repetition``: the last ``window`` tokens repeat a cycle of at most ``max_period`` tokens;
- ``field_length``: one JSON string value has grown beyond ``max_field_chars`` characters.

The answer generated so far is kept as it is (a cut loop stays unparseable and is counted so); the
reason is recorded beside it.

Under a grammar (``cut_fields``, the evaluations' constrained rows) a loop or an overlong value inside a
string ends that *field* instead of the answer: the guard asks for the string to be closed (``wants``:
the decoder then allows only tokens that start with a quote, and the grammar only those that continue a
valid answer) and decoding goes on with the next field. When only ``reserve`` tokens of the answer's
``budget`` are left, the guard finishes the object: an open value is closed, then arrays and objects
wherever the grammar lets them close (required fields still come, their values cut short). The looping
text stays in its field (a looping id stays a wrong id); the answer's stop reason is then ``field_cut``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

REASONS = ("json_end", "repetition", "field_length", "field_cut")
CUTTABLE = ("repetition", "field_length")  # what ends a field instead of the answer under a grammar


@dataclass
class AnswerGuard:
    max_field_chars: int = 400
    window: int = 24
    max_period: int = 8
    reason: str | None = None  # set by callers that keep the guard after it fired
    cut: int = 0  # tokens kept when it fired (callers that generate past it)
    cut_fields: bool = False  # under a grammar: end a looping or overlong string field, not the answer
    budget: int | None = None  # the answer's max_new_tokens (cut_fields: finish the object near it)
    reserve: int | None = None  # tokens kept to finish the object (None: an eighth of the budget, >= 32)
    closing: bool = False  # a field was cut: the next token must close the string
    cuts: int = 0  # fields cut (and objects finished early) in this answer
    _n: int = 0
    _ids: list[int] = field(default_factory=list)
    _depth: int = 0
    _started: bool = False
    _in_string: bool = False
    _escape: bool = False
    _field_chars: int = 0
    _objects: list[bool] = field(default_factory=list)  # open containers: True for an object
    _expect_key: bool = False
    _in_key: bool = False  # the open string is an object key (never cut: the grammar spells keys)
    _finished: bool = False  # finishing the object has been counted

    def feed(self, token_id: int, text: str) -> str | None:
        """Take the next token (id and its text); the reason to stop now, or None."""
        self._ids.append(token_id)
        self._n += 1
        why = None
        for ch in text:
            why = self._char(ch)
            if why:
                break
        if why is None and self._repeating():
            why = "repetition"
        if not self.cut_fields:
            return why
        if why == "json_end" and self.cuts:
            return "field_cut"
        in_value = self._in_string and not self._in_key
        if why in CUTTABLE and in_value:
            return self._cut_field()
        if why is None and self.finishing and self._depth > 0:
            if in_value and not self.closing:
                return self._cut_field()  # a value open near the budget (or opened after it) is closed
            if not self._finished:
                self.cuts += 1  # the object is finished early from here on
            self._finished = True
        return why

    def _reserve(self) -> int:
        if self.reserve is not None:
            return self.reserve
        return max(self.budget // 8, min(32, self.budget // 2))

    @property
    def finishing(self) -> bool:
        """Past ``budget - reserve``: every open value and container is to be closed."""
        return self.cut_fields and self.budget is not None and self._n >= self.budget - self._reserve()

    @property
    def wants(self) -> str | None:
        """What the next token must do under a grammar: ``close_string`` (a cut field), ``finish_string``
        (a cut field near the budget: close it and the containers), ``finish`` (close containers),
        or None (anything the grammar allows)."""
        if self.closing:
            return "finish_string" if self.finishing else "close_string"
        if self.finishing and not self._in_string:
            return "finish"
        return None

    def _cut_field(self) -> None:
        """Close the open string value next (the caller masks every token that does not start with a quote)."""
        self.closing, self.cuts, self._finished = True, self.cuts + 1, self.finishing
        self._ids.clear()
        self._field_chars = 0
        return None

    def _char(self, ch: str) -> str | None:
        if self._in_string:
            if self._escape:
                self._escape = False
            elif ch == "\\":
                self._escape = True
            elif ch == '"':
                self._in_string = self.closing = False
                return None
            self._field_chars += 1
            return "field_length" if self._field_chars > self.max_field_chars else None
        if ch == '"':
            self._in_string, self._field_chars = True, 0
            self._in_key = self._objects[-1:] == [True] and self._expect_key
        elif ch in "{[":
            self._depth += 1
            self._started = True
            self._objects.append(ch == "{")
            self._expect_key = ch == "{"
        elif ch in "}]":
            self._depth -= 1
            if self._objects:
                self._objects.pop()
            if self._started and self._depth <= 0:
                return "json_end"
        elif ch == ",":
            self._expect_key = self._objects[-1:] == [True]
        elif ch == ":":
            self._expect_key = False
        return None

    def _repeating(self) -> bool:
        ids, w = self._ids, self.window
        if len(ids) < w:
            return False
        tail = ids[-w:]
        return any(all(tail[k] == tail[k - p] for k in range(p, w)) for p in range(1, self.max_period + 1))


def stopping_criteria(guards: list, text_of: Callable[[int], str], prompt_width: int):
    """A transformers StoppingCriteria feeding each row's new token to its AnswerGuard; a row whose
    guard fires is finished (its ``cut`` is where the answer ends)."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class _Guards(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            done = []
            for r, g in enumerate(guards):
                if g.reason is None:
                    t = int(input_ids[r, -1])
                    why = g.feed(t, text_of(t))
                    if why:
                        g.reason, g.cut = why, input_ids.shape[1] - prompt_width
                done.append(g.reason is not None)
            return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([_Guards()])
