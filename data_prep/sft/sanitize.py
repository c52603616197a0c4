"""The one place where what a model sees is sanitized: every turn of a rendered chat example (system,
user and assistant, every task), the prompts sent to a teacher, and the build's diagnostics.

One rule set (the build config's packs) runs over each message's text with the field path
``<task>.<role>``, so a pack can say where its rules apply (the leakage pack skips system prompts and
the readers' answers, which state a verdict by design). Credentials are redacted wherever they sit in
the text: argument values and keys, results, task messages, tool descriptions, ledger entries, call ids,
rationales, policy text and history turns. Personal data is pseudonymized under a per-corpus key
(``sanitizer.pseudonym``): a value has one surrogate in the whole build, so the trajectory, the
environment ledger, the model ledger and the answers keep agreeing with each other.

A message whose text is a JSON value written the way the renderer writes answers (``render.laid_out``,
key order kept) and that needs a change is sanitized string by string and written again in that form,
so an answer stays valid JSON (a cut-off private key in a ledger entry cannot swallow the rest of the
entry) and keeps its field order.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from data_prep.sft.render import laid_out
from sanitizer import Finding, Sanitizer
from sanitizer.pseudonym import Pseudonymizer, derive_key

KEY_ENV = "LEDGERWRIGHT_PSEUDONYM_KEY_FILE"
DIAGNOSTIC_PATH = "diagnostics"


class PseudonymKeyError(ValueError):
    pass


def corpus_key(files: Iterable[Path]) -> bytes:
    """The per-corpus pseudonymization key when no key file is given: a domain-separated hash of the
    corpus files' bytes. Whoever holds the outputs cannot compute it (the manifest lists the files'
    SHA-256, which is a different function of the same bytes); whoever holds the corpus already
    holds the original values."""
    from data_prep.inputs import InputError, open_regular

    h = hashlib.sha256(b"ledgerwright-corpus-pseudonym-key/v1\x00")
    for path in sorted(Path(p) for p in files):
        try:  # only regular files (a FIFO or /dev/zero would never end); the build reports the others
            fh = open_regular(path)
        except (InputError, OSError):
            continue
        with fh:
            h.update(len(path.name).to_bytes(4, "big") + path.name.encode())
            try:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
            except OSError:
                continue
    return derive_key(h.digest())


def key_from_file(path: str | Path) -> bytes:
    p = Path(path)
    try:
        material = p.read_bytes()
    except OSError as exc:
        raise PseudonymKeyError(f"{p}: pseudonymization key file cannot be read ({exc.strerror})") from None
    if len(material.strip()) < 16:
        raise PseudonymKeyError(f"{p}: pseudonymization key file holds fewer than 16 bytes")
    return derive_key(material.strip())


def resolve_key(key_file: str | None, corpus_files: Iterable[Path]) -> tuple[bytes, str]:
    """``(key, origin)``: the key file (config, else ``$LEDGERWRIGHT_PSEUDONYM_KEY_FILE``), else the
    corpus-derived key. ``origin`` names where it came from (never the key) for the manifest."""
    path = key_file or os.environ.get(KEY_ENV) or ""
    if path:
        return key_from_file(path), "key file"
    return corpus_key(corpus_files), "derived from the corpus bytes"


class ExampleSanitizer:
    """Sanitizes rendered examples, teacher prompts and diagnostic text with one rule set."""

    def __init__(
        self,
        packs: Sequence[str],
        key: bytes,
        pii_modes: Mapping[str, str] | None = None,
        packs_dir: str | Path | None = None,
    ):
        self.pseudonymizer = Pseudonymizer(key, pii_modes)
        self.san = Sanitizer.from_packs(
            list(dict.fromkeys(packs)),
            packs_dir,
            salt=derive_key(key, "report-salt").hex(),  # secret, so the report's hashes cannot be guessed
            protected_keys=(),
            pseudonymizer=self.pseudonymizer,
        )
        self._system: dict[tuple[str, str], tuple[str, list[Finding], list[str]]] = {}
        # the personal-data rules alone, with the same surrogates: what pseudonymization does to a record
        self._pii = Sanitizer(
            [r for r in self.san.rules if r.pii is not None],
            salt=self.san.salt,
            protected_keys=(),
            pseudonymizer=self.pseudonymizer,
            self_test=False,
        )

    def messages(
        self, task: str, messages: list[dict], hidden: Sequence[str] = (), context: str = ""
    ) -> tuple[list[dict], list[Finding], list[str]]:
        """``(messages, findings, drop reasons)``; the messages are new dicts only where text changed."""
        out: list[dict] = []
        findings: list[Finding] = []
        drops: list[str] = []
        hidden = tuple(hidden)
        turns = [i for i, m in enumerate(messages) if m["role"] != "system"]
        texts = [messages[i]["content"] for i in turns]
        paths = [f"{task}.{messages[i]['role']}" for i in turns]
        # one scan of the turns joined: person names found anywhere in the example (pseudonymized in
        # every turn, prose too), and the turns nothing can touch (most of them), passed as they are
        names, touched, hits = self.san.scan_turns(texts, paths, hidden)
        need = {turns[k] for k in touched}
        for i, m in enumerate(messages):
            role, text = m["role"], m["content"]
            if role == "system":  # a prompt file: the same for every example of the task
                key = (task, text)
                done = self._system.get(key)
                if done is None:
                    done = self._system[key] = self._text(text, f"{task}.system", (), context)
                new, fnd, drp = done
            elif i in need:
                new, fnd, drp = self._text(text, f"{task}.{role}", hidden, context, names, hits)
            else:
                out.append(m)
                continue
            findings.extend(fnd)
            for d in drp:
                if d not in drops:
                    drops.append(d)
            out.append(m if new == text else {**m, "content": new})
        return out, findings, drops

    def _text(
        self,
        text: str,
        path: str,
        hidden: tuple[str, ...],
        context: str,
        names: tuple[str, ...] = (),
        hits: list[int] | None = None,
    ) -> tuple[str, list[Finding], list[str]]:
        """``hits``: the set's hits on the example's turns joined, given when that scan found that a
        rule may touch this turn (:meth:`Sanitizer.scan_turns`)."""
        if hits is None and not self.san.may_change(text, path, hidden + names):
            return text, [], []  # nothing can match: the common case, one set pass
        value = None
        if text[:1] in "{[" and text[-1:] in "}]":
            try:
                value = json.loads(text)
            except ValueError:
                value = None
            if value is not None and laid_out(value) != text:
                value = None
        if value is None:
            new, fnd, dropped = self.san.sanitize_text(
                text, hidden, path=path, context=context, names=names, may_hit=hits
            )
            return new, fnd, [f.rule_id for f in fnd if f.action == "drop"] if dropped else []
        strings: list[str] = []
        _strings(value, strings)
        done = self.san.sanitize_texts(strings, hidden, path=path, context=context, names=names)
        if done is None:
            return text, [], []
        findings = [f for _new, fnd, _d in done for f in fnd]
        drops = list(dict.fromkeys(f.rule_id for f in findings if f.action == "drop"))
        return laid_out(_replaced(value, iter(done))), findings, drops

    def prompt(self, task: str, messages: list[dict], hidden: Sequence[str] = ()) -> list[dict]:
        """A teacher prompt before it leaves the machine (drops do not apply: nothing is trained)."""
        return self.messages(task, messages, hidden)[0]

    def diagnostic(self, value: Any) -> Any:
        """A reject or filter record (or a problem line) with every string, keys too, sanitized:
        diagnostics name the field path and show a redacted preview, never a secret."""
        t = type(value)
        if t is str:
            return self.san.sanitize_text(value, path=DIAGNOSTIC_PATH)[0]
        if t is dict:
            return {self.diagnostic(k): self.diagnostic(x) for k, x in value.items()}
        if t is list:
            return [self.diagnostic(x) for x in value]
        return value

    def pseudonymize_record(self, value: Any) -> Any:
        """Every string of a record (keys too) with its personal data replaced by the surrogates the
        build uses (nothing else changes): reconciling the result gives the same gold verdicts."""
        t = type(value)
        if t is str:
            return self._pii.sanitize_text(value)[0]
        if t is dict:
            return {self.pseudonymize_record(k): self.pseudonymize_record(x) for k, x in value.items()}
        if t is list:
            return [self.pseudonymize_record(x) for x in value]
        return value


def _strings(v: Any, out: list[str]) -> None:
    """Every string of a JSON value, keys too, in document order."""
    t = type(v)
    if t is str:
        out.append(v)
    elif t is dict:
        for k, x in v.items():
            out.append(k)
            _strings(x, out)
    elif t is list:
        for x in v:
            _strings(x, out)


def _replaced(v: Any, done: Any) -> Any:
    """The value with its strings (in :func:`_strings` order) taken from ``done``."""
    t = type(v)
    if t is str:
        return next(done)[0]
    if t is dict:
        out = {}
        for _k, x in v.items():
            key = next(done)[0]
            out[key] = _replaced(x, done)
        return out
    if t is list:
        return [_replaced(x, done) for x in v]
    return v
