"""A planted corpus: secrets of every credential shape and personal data put into every field of a
synthetic corpus that reaches a rendered example, for the sanitizer test and benchmark.

Places: tool-call argument values and keys, results, task messages, tool descriptions, model-ledger
entries, call ids, the teacher's rationale, policy text and history turns. Personal data (IBAN, card,
email, phone) is planted as ledger content: an argument value the writer's entry names, so the value
counts for the gold verdict and must be pseudonymized consistently. A few broken records carry
secrets into the rejects. Runs whose calls change are sealed again, so they stay valid input.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from data_prep.chain import seal_ledger
from data_prep.integrity import seal_run
from sanitizer.corpus import CREDENTIAL_KINDS, plant

RUN_PLACES = (
    "argument_value",
    "argument_key",
    "result",
    "task_message",
    "tool_description",
    "ledger_entry",
    "call_id",
    "rationale",
)
CASE_PLACES = ("policy_text", "history_turn")
PII_ARGS = {"iban": "beneficiary_iban", "card": "card_on_file", "email": "contact_email", "phone": "callback"}


@dataclass(frozen=True)
class Plant:
    kind: str  # a credential kind of sanitizer.corpus, or pii:<class>
    place: str
    source: str  # run or case id
    vanish: tuple[str, ...]  # texts that must not appear in any output


def _token_kind(rng: random.Random) -> tuple[str, str, list[str]]:
    """A credential that is one token (no whitespace): fits in a key or a call id."""
    while True:
        kind = rng.choice(CREDENTIAL_KINDS)
        text, vanish = plant(kind, rng)
        if not any(c.isspace() for c in text) and "/" not in text and '"' not in text:
            return kind, text, vanish


def _pii(rng: random.Random, cls: str) -> str:
    from sanitizer.corpus import _card, _email, _iban

    if cls == "iban":
        return _iban(rng).replace(" ", "")
    if cls == "card":
        return "".join(c for c in _card(rng) if c.isdigit())
    if cls == "email":
        return _email(rng)
    return f"+1{rng.randint(200, 999)}{rng.randint(200, 999)}{rng.randint(0, 9999):04d}"


def plant_run(run: dict, rng: random.Random, kinds: list[str], places: list[str]) -> list[Plant]:
    """Plant one credential per (kind, place) and one value of each personal-data class; in place."""
    rid = run["run_id"]
    out: list[Plant] = []
    calls = run["trajectory"]
    ledger = {e["call_id"]: e for e in run.get("model_ledger") or []}
    for kind, place in zip(kinds, places):
        text, vanish = plant(kind, rng)
        call = rng.choice(calls) if calls else None
        if place == "argument_key" or place == "call_id":
            kind, text, vanish = _token_kind(rng)
        if place == "argument_value" and call is not None:
            call["arguments"]["note"] = f"see {text} attached"
        elif place == "argument_key" and call is not None:
            call["arguments"][text] = "set by ops"
        elif place == "result" and call is not None:
            call["result"] = {"detail": f"issued {text} for the request", "raw": call.get("result")}
        elif place == "task_message":
            msg = rng.choice(run["task"]["messages"])
            msg["content"] += f"\nUse the credential {text} if asked."
        elif place == "tool_description":
            fn = rng.choice(run["task"]["tools"])["function"]
            fn["description"] = (fn.get("description") or "") + f" Auth: {text}"
        elif place == "ledger_entry" and ledger:
            e = ledger[rng.choice(sorted(ledger))]
            e["description"] += f" (used {text})"
        elif place == "call_id" and call is not None:
            old = call["call_id"]
            new = f"{old}-{text}"
            call["call_id"] = new
            if old in ledger:
                ledger[old]["call_id"] = new
            teacher = run.get("teacher") or {}
            verdict = teacher.get("verdict") or {}
            verdict["cited_call_ids"] = [new if c == old else c for c in verdict.get("cited_call_ids", [])]
            labels = run.get("labels") or {}
            labels["target_call_ids"] = [new if c == old else c for c in labels.get("target_call_ids", [])]
        elif place == "rationale" and (run.get("teacher") or {}).get("verdict"):
            run["teacher"]["verdict"]["rationale"] += f" The agent pasted {text}."
        else:
            continue
        out.append(Plant(kind, place, rid, tuple(vanish)))
    # personal data as ledger content: an argument the entry for that call names
    if calls:
        call = rng.choice(calls)
        entry = ledger.get(call["call_id"])
        for cls, arg in PII_ARGS.items():
            value = _pii(rng, cls)
            call["arguments"][arg] = value
            if entry is not None:
                entry["description"] += f" ({arg}={value})"
            out.append(Plant(f"pii:{cls}", "argument_value", rid, (value,)))
    records = run["env_ledger"]["records"]
    by_old = [r["policy_class"] for r in records]
    run["env_ledger"] = seal_ledger(
        rid, [{**c, "policy_class": pc} for c, pc in zip(calls, by_old, strict=True)]
    )
    return out


def plant_case(case: dict, rng: random.Random) -> list[Plant]:
    out = []
    for place in CASE_PLACES:
        kind = rng.choice(CREDENTIAL_KINDS)
        text, vanish = plant(kind, rng)
        if place == "policy_text":
            case["policy"] += f"\nEscalations use the shared credential {text}."
        else:
            blocks = [b for b in case["blocks"] if b["turns"]]
            if not blocks:
                continue
            turn = rng.choice(rng.choice(blocks)["turns"])
            turn["content"] += f" (my key is {text})"
        out.append(Plant(kind, place, case["case_id"], tuple(vanish)))
    email = _pii(rng, "email")
    case["policy"] += f"\nQuestions: {email}"
    out.append(Plant("pii:email", "policy_text", case["case_id"], (email,)))
    return out


def plant_corpus(src: Path, dst: Path, seed: int = 0, per_run: int = 3) -> list[Plant]:
    """Copy ``src`` (runs/ and policy_cases/ of a synthetic corpus) to ``dst`` with plants; credential
    kinds and places are cycled, so every kind lands in several places. Appends broken records that
    carry secrets (into rejects). Returns every plant; ``dst`` has no manifest."""
    rng = random.Random(seed)
    plants: list[Plant] = []
    slots = [(k, p) for k in CREDENTIAL_KINDS for p in RUN_PLACES]
    rng.shuffle(slots)
    n = 0
    for sub in ("runs", "policy_cases"):
        (dst / sub).mkdir(parents=True, exist_ok=True)
        for path in sorted((src / sub).glob("*.jsonl")):
            lines = []
            for line in path.read_text(encoding="utf-8").splitlines():
                rec = json.loads(line)
                if sub == "runs":
                    chosen = [slots[(n + i) % len(slots)] for i in range(per_run)]
                    n += per_run
                    plants += plant_run(rec, rng, [k for k, _ in chosen], [p for _, p in chosen])
                    rec = seal_run(rec)  # a planted run is a changed run: sealed again, as a stage would
                else:
                    plants += plant_case(rec, rng)
                lines.append(json.dumps(rec, ensure_ascii=False))
            if sub == "runs" and path == sorted((src / sub).glob("*.jsonl"))[-1]:
                lines += _broken_runs(json.loads(lines[0]), rng, plants)
            (dst / sub / path.name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return plants


def _broken_runs(template: dict, rng: random.Random, plants: list[Plant]) -> list[str]:
    """Records a build rejects, each carrying a secret in the value or key that is wrong."""
    out = []
    kind, text, vanish = _token_kind(rng)
    bad = json.loads(json.dumps(template))
    bad["run_id"] = "broken-status"
    bad["trajectory"][0]["status"] = f"done {text}"
    out.append(json.dumps(bad))
    plants.append(Plant(kind, "reject:value", "broken-status", tuple(vanish)))
    kind, text, vanish = _token_kind(rng)
    bad = json.loads(json.dumps(template))
    bad["run_id"] = "broken-key"
    bad["trajectory"][0][text] = 1
    out.append(json.dumps(bad))
    plants.append(Plant(kind, "reject:key", "broken-key", tuple(vanish)))
    kind, text, vanish = _token_kind(rng)
    out.append('{"run_id": "broken-json", "token": "' + text + '", ')
    plants.append(Plant(kind, "reject:line", "broken-json", tuple(vanish)))
    return out


def survivors(plants: list[Plant], blobs: dict[str, str]) -> list[tuple[Plant, str]]:
    """``(plant, output name)`` for every planted text found in an output."""
    found = []
    for p in plants:
        for v in p.vanish:
            for name, text in blobs.items():
                if v in text:
                    found.append((p, name))
    return found
