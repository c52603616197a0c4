"""Confirmers a rule can name in ``validate:``: a regex finds a candidate, the confirmer decides.

Each takes the matched bytes and returns the span (relative to the match) of the item it confirms, or
None when the candidate is a look-alike.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

# Issuer prefixes (IIN ranges) of the card networks: Visa, Mastercard (51-55, 2221-2720), Amex (34, 37),
# Discover (6011, 644-649, 65), Diners (300-305, 36, 38, 39), JCB (3528-3589), UnionPay (62), Maestro (50, 56-58, 6).
_CARD_PREFIXES = (b"4", b"34", b"37", b"36", b"38", b"39", b"30", b"35", b"5", b"2", b"6")


_DIGIT_VALUE = bytes.maketrans(b"0123456789", bytes(range(10)))
_DOUBLED = bytes([0, 2, 4, 6, 8, 1, 3, 5, 7, 9]) + bytes(246)


def luhn_ok(digits: str | bytes) -> bool:
    """Luhn (mod 10) check over ASCII digits."""
    d = (digits.encode("ascii") if isinstance(digits, str) else digits).translate(_DIGIT_VALUE)
    return (sum(d[-1::-2]) + sum(d[-2::-2].translate(_DOUBLED))) % 10 == 0


def _groups(matched: bytes) -> list[tuple[int, int]]:
    """Offsets of the groups of a card or IBAN match (runs split on spaces and dashes)."""
    out = []
    pos = 0
    for part in matched.replace(b"-", b" ").split(b" "):
        if part:
            out.append((pos, pos + len(part)))
        pos += len(part) + 1
    return out


def _windows(matched: bytes, lo: int, hi: int) -> list[tuple[int, int]]:
    """Runs of whole groups with lo..hi alphanumerics, longest first, then leftmost.

    A candidate can swallow a neighbouring number (``4111 1111 1111 1111 874``): the confirmer then
    looks for the real item among the group-aligned windows of the match."""
    groups = _groups(matched)
    wins = []
    for i in range(len(groups)):
        n = 0
        for j in range(i, len(groups)):
            n += groups[j][1] - groups[j][0]
            if n > hi:
                break
            if n >= lo:
                wins.append((n, groups[i][0], groups[j][1]))
    wins.sort(key=lambda w: (-w[0], w[1]))
    return [(s, e) for _n, s, e in wins]


def _card_ok(digits: bytes) -> bool:
    if not 13 <= len(digits) <= 19 or not digits.isdigit():
        return False
    if digits[:1] == b"2" and not 2221 <= int(digits[:4]) <= 2720:
        return False
    if digits[:2] == b"59" or not digits.startswith(_CARD_PREFIXES):
        return False
    return luhn_ok(digits)


def _usual_length(digits: bytes) -> int | None:
    """The length a card of this network nearly always has (Visa, Mastercard, Discover 16, Amex 15),
    None for a prefix without one: what a card must have to be taken out of a longer digit run."""
    if digits[:1] == b"4" or b"51" <= digits[:2] <= b"55" or digits[:4] == b"6011" or digits[:2] == b"65":
        return 16
    if digits[:2] in (b"34", b"37"):
        return 15
    if digits[:1] == b"2" and digits[:4].isdigit() and 2221 <= int(digits[:4]) <= 2720:
        return 16
    return None


def _glued(digits: bytes) -> int | None:
    """How many digits (one or two) are glued before a card in a run that is not a card itself: the
    rest must have its network's usual length and pass Luhn, so a long id is rarely taken apart
    (and a run of 19 digits never)."""
    for k in (1, 2):
        rest = digits[k:]
        if _usual_length(rest) == len(rest) and _card_ok(rest):
            return k
    return None


def card(matched: bytes) -> tuple[int, int] | None:
    """13-19 digits (spaces/dashes ignored), a card-network prefix, and a valid Luhn check digit; or
    such a card with one or two digits glued before it (see :func:`_glued`)."""
    if b" " not in matched and b"-" not in matched:
        if _card_ok(matched):
            return 0, len(matched)
        k = _glued(matched)
        return None if k is None else (k, len(matched))
    for s, e in _windows(matched, 13, 19):
        if _card_ok(matched[s:e].translate(None, b" -")):
            return s, e
    groups = _groups(matched)
    k = groups[0][1] - 4  # a first group of 5 or 6 digits: 4 of the card, the rest glued before
    if k in (1, 2):
        for _s, e in groups[2:]:
            digits = matched[k:e].translate(None, b" -")
            if _usual_length(digits) == len(digits) and _card_ok(digits):
                return k, e
    return None


# ISO 13616 registry: IBAN length by country (a country not listed here is not an IBAN).
IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29,
    "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20, "EG": 29,
    "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28,
    "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22,
    "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25,
    "QA": 29, "RO": 24, "RS": 22, "SA": 24, "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25,
    "SV": 28, "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip


_IBAN_DIGITS = {ord(c): str(10 + k) for k, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZ")}


def _iban_ok(s: bytes) -> bool:
    if not 15 <= len(s) <= 34 or not s.isalnum():
        return False
    moved = (s[4:] + s[:4]).decode("ascii").upper()
    return int(moved.translate(_IBAN_DIGITS)) % 97 == 1


def _iban_starts(groups: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``(offset, group index)`` where an IBAN may start: inside the first group (letters or digits
    glued before it: ``ACCTDE89...``; within its last 34 characters, the longest IBAN) and at the
    start of every later group."""
    gs, ge = groups[0]
    first = range(max(gs, ge - 34), max(gs, ge - 3))
    return (
        [(gs, 0)] * (gs < ge - 34) + [(s, 0) for s in first] + [(g[0], i) for i, g in enumerate(groups) if i]
    )


def iban(matched: bytes) -> tuple[int, int] | None:
    """ISO 13616: country letters, check digits, the country's length, mod-97 remainder 1. Groups glued
    on either side (``LH64 DE89 ... 00 4711``) are cut off, and so is a run glued before the IBAN in
    its first group: the IBAN may start at any offset of the first group and at any later group that
    opens with two letters and two digits."""
    groups = _groups(matched)
    for start, i in _iban_starts(groups):
        head = matched[start : start + 4]
        if len(head) < 4 or not head[:2].isalpha() or not head[2:].isdigit():
            continue
        want = IBAN_LENGTHS.get(head[:2].decode("ascii").upper())
        if want is None:
            continue
        n = -(start - groups[i][0])
        for s, e in groups[i:]:
            n += e - s
            if n > want:
                break
            if n != want:
                continue
            if _iban_ok(matched[start:e].translate(None, b" -")):
                return start, e
    return None


def credential(matched: bytes) -> tuple[int, int] | None:
    """A credential value, not a word: at least 8 characters from at least two classes (lower, upper,
    digit, symbol other than ``_ - .``), so ``password: reset_required`` stays while
    ``password: hunter2!x`` is redacted."""
    if len(matched) < 8:
        return None
    classes = 0
    if any(97 <= c <= 122 for c in matched):
        classes += 1
    if any(65 <= c <= 90 for c in matched):
        classes += 1
    if any(48 <= c <= 57 for c in matched):
        classes += 1
    if any(not (48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122 or c in b"_-.") for c in matched):
        classes += 1
    return (0, len(matched)) if classes >= 2 else None


_DIGIT_BYTES = b"0123456789"
ENTROPY_WINDOW = 4096


def high_entropy(matched: bytes) -> tuple[int, int] | None:
    """A random key, not a word or a digest: upper-case, lower-case letters and digits all present and
    at least 4.2 bits of Shannon entropy per character (random base64 of 40 characters has about 4.7,
    an English CamelCase identifier about 4.0, a hex digest lacks upper case). The entropy of a long
    run is taken over its first ``ENTROPY_WINDOW`` bytes."""
    n = len(matched)
    if n < 20 or matched.lower() == matched or matched.upper() == matched:
        return None
    if len(matched.translate(None, _DIGIT_BYTES)) == n:
        return None
    window = matched[:ENTROPY_WINDOW]
    k = len(window)
    bits = -sum(c / k * math.log2(c / k) for c in Counter(window).values())
    return (0, n) if bits >= 4.2 else None


# Capitalized words that follow a given name in ledger text without making it a person's name
# (Grace Period, Dana Point Hotel): the name ends before the first of them.
NOT_SURNAMES = frozenset(
    b"""Account Accounts Admin Agent Airlines Airport Alert Analytics API App Approval Approved Avenue
    Bank Batch Billing Board Cafe Calendar Card Catering Center Centre City Client Cloud Company Corp
    Corporation Council Courier County Credit Customer Dashboard Data Debit Department Desk Due Entry
    Express Facilities Fee Finance Fund Group Hall Hardware Holdings Hospital Hotel House Inc Invoice
    Lab Labs Lake Ledger Limited LLC Logistics Ltd Manager Market Media Network Notes Office Order Park
    Partners Pay Payment Payments Period Plan Plaza Point Policy Portal Print Project Refund Report
    Request Road School Service Services Shop Square Station Status Street Studio Summary Supply
    Support System Systems Team Tech Ticket Tool Tower Transfer Travel Trust University Update Vendor
    Wallet Way""".split()
)


def person_name(matched: bytes) -> tuple[int, int] | None:
    """A given name and a surname, not a given name before an organisation or a common word: the
    first capitalized word after the given name (and particles) must not be one of
    :data:`NOT_SURNAMES`; a later one cuts the name short before it."""
    words = matched.split(b" ")
    i = 2 if words[0].rstrip(b".") in (b"Mr", b"Mrs", b"Ms", b"Mx", b"Dr", b"Prof") else 1
    while i < len(words) and not words[i][:1].isupper():
        i += 1  # empty pieces between spaces, particles (van, der, al ...)
    if i >= len(words) or words[i] in NOT_SURNAMES:
        return None
    end = sum(len(w) + 1 for w in words[: i + 1]) - 1
    for j in range(i + 1, len(words)):
        if words[j] in NOT_SURNAMES:
            break
        end += len(words[j]) + 1
    return 0, len(matched[:end].rstrip(b" "))


def _never(matched: bytes) -> tuple[int, int] | None:
    return None  # replaced by the Sanitizer, which knows the other rules (see core.Sanitizer)


VALIDATORS: dict[str, Callable[[bytes], tuple[int, int] | None]] = {
    "card": card,
    "iban": iban,
    "credential": credential,
    "high_entropy": high_entropy,
    "base64_secret": _never,
    "person_name": person_name,
}
