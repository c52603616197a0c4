"""Keyed, consistent pseudonymization of personal data: a value maps to a same-shaped surrogate.

In a ledger, personal data is content: a payment redirected to another IBAN *is* the sabotage. Deleting
it would break faithfulness; keeping it teaches a model real customers' data. A surrogate keeps the
shape (a checksum-valid IBAN of the same country and length, a Luhn-valid card number of the same
network and length, a phone number with the same layout, ``user.<12 digits>@example.invalid``) and is a
function of the value under an HMAC key, so the same value becomes the same surrogate wherever it
appears (trajectory, environment ledger, model ledger, answers) and different values stay different:
equality, the only thing reconciliation asks of these values, survives.

The key is per corpus and is never written anywhere; without it a surrogate cannot be traced back.
Modes per class (``redact | pseudonymize | keep``) are applied by :class:`sanitizer.Sanitizer`.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping

from sanitizer.checks import luhn_ok
from sanitizer.rules import PII_CLASSES, PII_MODES, RuleError

KEY_BYTES = 32
_MEMO_MAX = 1_000_000
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_DIGITS = "0123456789"


def derive_key(material: bytes, purpose: str = "pseudonym") -> bytes:
    """A key from secret material (corpus bytes, a key file) for one purpose; domain-separated so the
    pseudonym key, the report salt and any published digest of the same material are unrelated."""
    return hashlib.sha256(b"ledgerwright-" + purpose.encode() + b"/v1\x00" + material).digest()


def check_modes(modes: Mapping[str, str] | None, where: str = "pii_modes") -> dict[str, str]:
    out = dict.fromkeys(PII_CLASSES, "pseudonymize")
    for cls, mode in (modes or {}).items():
        if cls not in PII_CLASSES:
            raise RuleError(where, f"unknown personal-data class {cls!r} (known: {', '.join(PII_CLASSES)})")
        if mode not in PII_MODES:
            raise RuleError(where, f"{cls}: mode must be one of {'|'.join(PII_MODES)}, got {mode!r}")
        out[cls] = mode
    return out


class Pseudonymizer:
    """``surrogate(cls, text)``: the surrogate of one matched value. Remembers the surrogates it made
    so that a second pass of the same sanitizer leaves them alone (idempotence); a surrogate that
    would equal another value's surrogate is re-derived (distinct values stay distinct)."""

    def __init__(self, key: bytes | None = None, modes: Mapping[str, str] | None = None):
        if key is None:
            key = os.urandom(KEY_BYTES)
        if not isinstance(key, bytes) or len(key) < 16:
            raise ValueError("a pseudonymization key needs at least 16 bytes")
        self._key = key
        self.modes = check_modes(modes)
        self._forward: dict[tuple[str, str], str] = {}
        self._backward: dict[str, tuple[str, str]] = {}
        self.made: set[bytes] = set()  # UTF-8 surrogates, for the engine to skip
        self.made_lengths: list[int] = []  # their distinct byte lengths, longest first (shared)

    def __repr__(self) -> str:  # never show the key
        return f"Pseudonymizer(modes={self.modes})"

    def mode(self, cls: str) -> str:
        return self.modes.get(cls, "pseudonymize")

    def _stream(self, cls: str, norm: str, attempt: int) -> bytes:
        msg = f"{cls}\x00{norm}\x00{attempt}".encode("utf-8", "surrogatepass")
        out = b""
        block = 0
        while len(out) < 96:
            out += hmac.new(self._key, msg + bytes([block]), hashlib.sha256).digest()
            block += 1
        return out

    def surrogate(self, cls: str, text: str) -> str:
        norm = _normal_form(cls, text)
        key = (cls, norm)
        hit = self._forward.get(key)
        if hit is not None:
            return self._remember(_layout(cls, text, hit))
        attempt = 0
        while True:
            core = _MAKERS[cls](self._stream(cls, norm, attempt), norm)
            owner = self._backward.get(core)
            if (owner is None or owner == key) and core != norm:
                break
            attempt += 1
        self._forward[key] = core
        self._backward[core] = key
        return self._remember(_layout(cls, text, core))

    def _remember(self, out: str) -> str:
        """Each layout of a surrogate (with and without spaces...) is remembered as made."""
        if len(self.made) < _MEMO_MAX:
            enc = out.encode("utf-8", "surrogatepass")
            self.made.add(enc)
            if len(enc) not in self.made_lengths:
                self.made_lengths.append(len(enc))
                self.made_lengths.sort(reverse=True)
        return out


def _normal_form(cls: str, text: str) -> str:
    if cls == "email":
        return text.strip().lower()
    if cls in ("iban", "card"):
        return "".join(c for c in text if c.isalnum()).upper()
    if cls == "phone":
        lead = "+" if text.lstrip().startswith("+") else ""
        return lead + "".join(c for c in text if c.isdigit())
    if cls == "person_name":
        return drop_title(text)
    return " ".join(text.split())


TITLES = frozenset({"Mr", "Mrs", "Ms", "Mx", "Dr", "Prof"})


def drop_title(name: str) -> str:
    """A person name with spaces normalized and a leading title dropped: Dr. Aiko Tanaka and Aiko
    Tanaka are one person."""
    words = name.split()
    if len(words) > 1 and words[0].rstrip(".") in TITLES:
        words = words[1:]
    return " ".join(words)


def _pick(stream: bytes, i: int, alphabet: str) -> str:
    return alphabet[stream[i] % len(alphabet)]


def _email(stream: bytes, norm: str) -> str:
    # digits after the dot: glued to text before it, no part of the surrogate can pass for a TLD
    return f"user.{int.from_bytes(stream[:8], 'big') % 10**12:012d}@example.invalid"


def _iban(stream: bytes, norm: str) -> str:
    country, bban = norm[:2], norm[4:]
    body = "".join(_pick(stream, i, _DIGITS if c.isdigit() else _LETTERS) for i, c in enumerate(bban))
    numeric = "".join(str(int(ch, 36)) for ch in body + country + "00")
    return f"{country}{98 - int(numeric) % 97:02d}{body}"


def _card(stream: bytes, norm: str) -> str:
    keep = 4 if norm[:1] == "2" else 2  # the network prefix (2221-2720 for the 2-series)
    body = norm[:keep] + "".join(_pick(stream, i, _DIGITS) for i in range(len(norm) - keep - 1))
    for d in _DIGITS:
        if luhn_ok(body + d):
            return body + d
    raise AssertionError("unreachable: one check digit always fits")  # pragma: no cover


def _phone(stream: bytes, norm: str) -> str:
    lead = "+" if norm.startswith("+") else ""
    digits = norm[len(lead) :]
    keep = 1 if lead else 0  # the first digit of the country code
    out = digits[:keep]
    for i in range(keep, len(digits)):
        d = _pick(stream, i, _DIGITS)
        if i == 0 and d in "01":  # a North American area code starts with 2-9
            d = str(2 + stream[i] % 8)
        out += d
    return lead + out


def _person(stream: bytes, norm: str) -> str:
    return f"Person-{stream[:3].hex().upper()}"  # no rule takes it for a name again


_MAKERS = {"email": _email, "iban": _iban, "card": _card, "phone": _phone, "person_name": _person}


def _layout(cls: str, original: str, core: str) -> str:
    """Put the surrogate's characters into the original's layout (spaces, dashes, brackets, case)."""
    if cls in ("email", "person_name"):
        return core
    chars = iter(core.lstrip("+") if cls == "phone" else core)
    out = []
    for c in original:
        if c.isalnum():
            n = next(chars, "")
            out.append(n.lower() if c.islower() else n)
        else:
            out.append(c)
    return "".join(out)
