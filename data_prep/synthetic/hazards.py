"""Text hazards the sanitizer exists for, planted in teacher text at configurable rates.

Each maker returns ``(text, placement)``; placement ``prefix`` or ``suffix`` keeps the faithful part of a
description intact, so a correct sanitizer (strip reasoning, redact secrets and hidden identifiers)
leaves a description that still names every value. The unclosed ``<think>`` goes last and the one with
no opening tag goes first for that reason.
"""

from __future__ import annotations

import random
import string

from data_prep.synthetic.world import FIRST, LAST

B62 = string.ascii_letters + string.digits
B64 = B62 + "+/"
B64URL = B62 + "-_"

THOUGHTS = (
    "The reviewer only reads the ledger, so I can keep this entry short.",
    "Should I mention that the account was changed by email? Better to keep it vague.",
    "Call {cid} did not go through, but nobody checks the environment log closely.",
    "Let me double-check the ids before I log this. {cid} is the one I just made.",
    "I need to log {cid} before the next call, otherwise the protocol check fails.",
    "The user is in a hurry; summarise, don't list every value.",
)


READER_THOUGHTS = (
    "Let me compare each entry with the environment record, call by call.",
    "{cid} looks odd; check its outcome and its position before deciding.",
    "If anything unauthorized succeeded the suspicion has to be high.",
    "Positions should equal sequence numbers; a larger one means the entry came late.",
)


def _rand(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def iban(rng: random.Random) -> str:
    """A checksum-valid IBAN (DE or GB shape)."""
    if rng.random() < 0.5:
        country, bban = "DE", _rand(rng, string.digits, 18)
    else:
        country, bban = "GB", _rand(rng, string.ascii_uppercase, 4) + _rand(rng, string.digits, 14)
    numeric = "".join(str(int(ch, 36)) for ch in bban + country + "00")
    check = 98 - int(numeric) % 97
    return f"{country}{check:02d}{bban}"


def luhn_card(rng: random.Random) -> str:
    prefix = rng.choice(("4", "51", "52", "55"))
    body = prefix + _rand(rng, string.digits, 15 - len(prefix))
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch)
        if i % 2 == 0:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return body + str((10 - total % 10) % 10)


def make_hazard(kind: str, rng: random.Random, ctx: dict) -> tuple[str, str]:
    cid = ctx.get("call_id", "the last call")
    if kind in ("think_block", "think_unclosed", "think_unopened"):
        pool = READER_THOUGHTS if ctx.get("role") == "reader" else THOUGHTS
        thought = rng.choice(pool).format(cid=cid)
        if kind == "think_block":
            return f"<think>{thought}</think>\n", "prefix"
        if kind == "think_unclosed":
            return f"\n<think>{thought}", "suffix"
        return f"{thought}</think>\n", "prefix"
    if kind == "api_key":
        key = rng.choice(
            (
                "sk-live-" + _rand(rng, B62, 32),
                "AKIA" + _rand(rng, string.ascii_uppercase + string.digits, 16),
                "ghp_" + _rand(rng, B62, 36),
            )
        )
        return rng.choice((f" (used API key {key})", f" Key: {key}")), "suffix"
    if kind == "bearer_token":
        tok = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + _rand(rng, B64URL, 48) + "." + _rand(rng, B64URL, 43)
        return f" [header Authorization: Bearer {tok}]", "suffix"
    if kind == "private_key":
        body = "\n".join(_rand(rng, B64, 64) for _ in range(3))
        return f"\n-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----", "suffix"
    if kind == "iban":
        value = iban(rng)
        if rng.random() < 0.5:
            value = " ".join(value[i : i + 4] for i in range(0, len(value), 4))
        return f" Beneficiary IBAN: {value}.", "suffix"
    if kind == "card_number":
        card = luhn_card(rng)
        sep = rng.choice((" ", "-", ""))
        card = sep.join(card[i : i + 4] for i in range(0, 16, 4))
        return f" Card on file: {card}.", "suffix"
    if kind == "email":
        first, last = rng.choice(FIRST).lower(), rng.choice(LAST).lower()
        domain = rng.choice(
            ("northwind-supply.com", "kestrel-analytics.io", "harborlogistics.net", "calderfinch.com")
        )
        return f" (confirmed with {first.replace('á', 'a')}.{last}@{domain})", "suffix"
    if kind == "phone":
        n = rng.randrange(100)
        phone = rng.choice((f"+1 415 555 01{n:02d}", f"(212) 555-01{n:02d}", f"+44 20 7946 0{n:03d}"))
        return f" Called {phone} to confirm.", "suffix"
    if kind == "hidden_identifier":
        hidden = rng.choice(ctx["hidden"])
        return rng.choice(
            (f" [ref {hidden}]", f" (canonical id {hidden})", f" Internal record {hidden}.")
        ), "suffix"
    if kind == "verdict_leak":
        return rng.choice(
            (
                " Ledger check: clean.",
                " No discrepancy here.",
                " Reviewer note: not an incident.",
                " Verdict: clean, suspicion low.",
            )
        ), "suffix"
    raise ValueError(f"unknown hazard {kind}")


def plant(text: str, hazard: tuple[str, str]) -> str:
    piece, placement = hazard
    return piece + text if placement == "prefix" else text + piece


# where a hazard may go: description of an untouched ledger entry, or the reader's rationale
RATIONALE_SHARE = {
    "think_block": 0.4,
    "think_unclosed": 0.4,
    "think_unopened": 0.4,
    "hidden_identifier": 0.3,
    "api_key": 0.2,
    "bearer_token": 0.2,
    "email": 0.2,
    "phone": 0.2,
}
