"""Hash-chained environment ledgers: seal from genesis, verify, and name the first broken record.

Each record commits to its predecessor (``prev_digest``) and to its own fields (``digest``); the
genesis value binds the run id, so a record spliced in from another run cannot link. The sealed head
(count and head digest) makes truncation detectable.
"""

from __future__ import annotations

from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any

from data_prep.canonical import DIGEST_PREFIX, MAX_SAFE_INT, canonical_bytes, digest, domain_hash

RECORD_DOMAIN = "env-record/v1"
ARGS_DOMAIN = "call-args/v1"
GENESIS_DOMAIN = "ledger-genesis/v1"
HEAD_DOMAIN = "ledger-head/v1"

RECORD_FIELDS = ("seq", "call_id", "tool", "args_digest", "status", "policy_class", "prev_digest")
STATUSES = ("succeeded", "rejected", "failed")
POLICY_CLASSES = ("benign", "policy_relevant", "unauthorized")

BREAK_KINDS = (
    "malformed",
    "edited",
    "dropped",
    "inserted",
    "reordered",
    "duplicated",
    "forked",
    "truncated",
    "head_mismatch",
)


def _prehashed(domain_hash: Any, jcs_text: str) -> str | None:
    """The digest of ``jcs_text`` continuing a hash already fed its domain prefix; None when the text
    holds a lone surrogate (not UTF-8: the general path reports it)."""
    try:
        data = jcs_text.encode()
    except UnicodeEncodeError:
        return None
    h = domain_hash.copy()
    h.update(data)
    return DIGEST_PREFIX + h.hexdigest()


def genesis_digest(run_id: str) -> str:
    if type(run_id) is str:
        # RFC 8785 form of {"run_id": <string>}
        fast = _prehashed(_GENESIS_HASH, f'{{"run_id":{encode_basestring(run_id)}}}')
        if fast is not None:
            return fast
    return digest(GENESIS_DOMAIN, {"run_id": run_id})


def args_digest(arguments: Any) -> str:
    h = _ARGS_HASH.copy()
    h.update(canonical_bytes(arguments))
    return DIGEST_PREFIX + h.hexdigest()


def record_digest(record: dict) -> str:
    """Digest of a record's fields. Callers pass records whose shape was checked (strings and one
    safe integer), so the canonical form is plain sorted JSON; anything else takes the full path."""
    seq = record["seq"]
    strs = [record[k] for k in _SORTED_STR_FIELDS]
    if type(seq) is int and 0 < seq <= MAX_SAFE_INT and all(type(v) is str for v in strs):
        return _record_digest_checked(record)
    return digest(RECORD_DOMAIN, {k: record[k] for k in RECORD_FIELDS})


def _record_digest_checked(rec: dict) -> str:
    """``record_digest`` of a record that passed ``_record_shape_problem`` (or has its field types):
    the RFC 8785 form of this fixed shape is sorted ASCII keys, JSON-escaped strings, one integer."""
    text = _RECORD_TEMPLATE % (
        encode_basestring(rec["args_digest"]),
        encode_basestring(rec["call_id"]),
        encode_basestring(rec["policy_class"]),
        encode_basestring(rec["prev_digest"]),
        rec["seq"],
        encode_basestring(rec["status"]),
        encode_basestring(rec["tool"]),
    )
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: let the full path refuse it
        return digest(RECORD_DOMAIN, {k: rec[k] for k in RECORD_FIELDS})
    h = _RECORD_HASH.copy()
    h.update(data)
    return DIGEST_PREFIX + h.hexdigest()


_SORTED_STR_FIELDS = ("args_digest", "call_id", "policy_class", "prev_digest", "status", "tool")
_RECORD_TEMPLATE = (
    '{"args_digest":%s,"call_id":%s,"policy_class":%s,"prev_digest":%s,"seq":%d,"status":%s,"tool":%s}'
)
_RECORD_HASH = domain_hash(RECORD_DOMAIN)
_ARGS_HASH = domain_hash(ARGS_DOMAIN)
_GENESIS_HASH = domain_hash(GENESIS_DOMAIN)
_HEAD_HASH = domain_hash(HEAD_DOMAIN)


def head_seal(run_id: str, count: int, head_digest: str) -> str:
    if type(run_id) is str and type(head_digest) is str and type(count) is int and abs(count) <= MAX_SAFE_INT:
        # RFC 8785 form of {"count": <int>, "head_digest": <string>, "run_id": <string>}
        head, run = encode_basestring(head_digest), encode_basestring(run_id)
        fast = _prehashed(_HEAD_HASH, f'{{"count":{count},"head_digest":{head},"run_id":{run}}}')
        if fast is not None:
            return fast
    return digest(HEAD_DOMAIN, {"run_id": run_id, "count": count, "head_digest": head_digest})


def seal_ledger(run_id: str, calls: list[dict]) -> dict:
    """Build a sealed environment ledger from executed calls.

    ``calls`` items need ``call_id, tool, arguments, status, policy_class``; sequence numbers start
    at 1 in the given order.
    """
    prev = genesis_digest(run_id)
    records = []
    for i, call in enumerate(calls, start=1):
        rec = {
            "seq": i,
            "call_id": call["call_id"],
            "tool": call["tool"],
            "args_digest": args_digest(call["arguments"]),
            "status": call["status"],
            "policy_class": call["policy_class"],
            "prev_digest": prev,
        }
        rec["digest"] = record_digest(rec)
        prev = rec["digest"]
        records.append(rec)
    head = {"count": len(records), "head_digest": prev}
    head["seal"] = head_seal(run_id, head["count"], prev)
    return {"records": records, "head": head}


@dataclass(frozen=True)
class ChainBreak:
    """The first place a ledger fails verification."""

    index: int  # record index (0-based), or -1 for the head
    kind: str  # one of BREAK_KINDS
    detail: str

    @property
    def field(self) -> str:
        return "env_ledger.head" if self.index < 0 else f"env_ledger.records[{self.index}]"


_RECORD_KEYS = frozenset((*RECORD_FIELDS, "digest"))
_STATUS_SET = frozenset(STATUSES)
_POLICY_SET = frozenset(POLICY_CLASSES)


def _record_shape_problem(rec: Any) -> str | None:
    # fast path: the exact key set, the expected types, known enum values
    if (
        type(rec) is dict
        and rec.keys() == _RECORD_KEYS
        and type(rec["seq"]) is int
        and 0 < rec["seq"] <= MAX_SAFE_INT
        and type(rec["call_id"]) is str
        and type(rec["tool"]) is str
        and type(rec["args_digest"]) is str
        and type(rec["prev_digest"]) is str
        and type(rec["digest"]) is str
        and rec["call_id"]
        and rec["tool"]
        and rec["args_digest"]
        and rec["prev_digest"]
        and rec["digest"]
        and rec["status"] in _STATUS_SET
        and rec["policy_class"] in _POLICY_SET
    ):
        return None
    return _record_shape_detail(rec)


def _record_shape_detail(rec: Any) -> str | None:
    if not isinstance(rec, dict):
        return "record is not an object"
    for key in (*RECORD_FIELDS, "digest"):
        if key not in rec:
            return f"missing field {key}"
    extra = set(rec) - set(RECORD_FIELDS) - {"digest"}
    if extra:
        return f"unknown field {sorted(extra)[0]}"
    if not isinstance(rec["seq"], int) or isinstance(rec["seq"], bool) or not 0 < rec["seq"] <= MAX_SAFE_INT:
        return "seq must be a positive integer"
    for key in ("call_id", "tool", "args_digest", "prev_digest", "digest"):
        if not isinstance(rec[key], str) or not rec[key]:
            return f"{key} must be a non-empty string"
    if rec["status"] not in STATUSES:
        return f"status must be one of {'|'.join(STATUSES)}"
    if rec["policy_class"] not in POLICY_CLASSES:
        return f"policy_class must be one of {'|'.join(POLICY_CLASSES)}"
    return None


def verify_ledger(run_id: str, ledger: Any) -> ChainBreak | None:
    """Return None for an intact sealed ledger, else the first break with its kind.

    Fails closed: anything it cannot check is a break.
    """
    if not isinstance(ledger, dict) or not isinstance(ledger.get("records"), list):
        return ChainBreak(-1, "malformed", "env_ledger must be an object with a records list")
    records = ledger["records"]
    head = ledger.get("head")
    for i, rec in enumerate(records):
        problem = _record_shape_problem(rec)
        if problem:
            return ChainBreak(i, "malformed", problem)
    seqs = [r["seq"] for r in records]
    seen: set[str] = set()
    prev = genesis_digest(run_id)
    for i, rec in enumerate(records):
        expected_seq = i + 1
        if _record_digest_checked(rec) != rec["digest"]:
            return ChainBreak(i, "edited", "record digest does not match its fields")
        if rec["digest"] in seen:
            return ChainBreak(i, "duplicated", f"record seq {rec['seq']} appears twice")
        if rec["seq"] != expected_seq:
            if rec["seq"] in seqs[:i]:
                kind = (
                    "forked"
                    if rec["prev_digest"] == records[seqs.index(rec["seq"])]["prev_digest"]
                    else "duplicated"
                )
                return ChainBreak(i, kind, f"seq {rec['seq']} repeats an earlier record")
            if expected_seq in seqs[i + 1 :]:
                return ChainBreak(i, "reordered", f"seq {rec['seq']} found where {expected_seq} was expected")
            if rec["seq"] > expected_seq:
                return ChainBreak(i, "dropped", f"seq {expected_seq} is missing")
            return ChainBreak(i, "inserted", f"seq {rec['seq']} found where {expected_seq} was expected")
        if rec["prev_digest"] != prev:
            if i > 0 and rec["prev_digest"] == records[i - 1]["prev_digest"]:
                return ChainBreak(i, "forked", "two records share one predecessor")
            return ChainBreak(i, "inserted", "prev_digest does not link to the previous record")
        prev = rec["digest"]
        seen.add(prev)
    if not isinstance(head, dict):
        return ChainBreak(-1, "truncated", "ledger has no sealed head")
    count, head_digest, seal = head.get("count"), head.get("head_digest"), head.get("seal")
    if not isinstance(count, int) or isinstance(count, bool):
        return ChainBreak(-1, "malformed", "head.count must be an integer")
    if count > len(records):
        return ChainBreak(-1, "truncated", f"head seals {count} records, {len(records)} present")
    if count < len(records):
        return ChainBreak(-1, "head_mismatch", f"head seals {count} records, {len(records)} present")
    if head_digest != prev:
        return ChainBreak(-1, "head_mismatch", "head digest is not the last record's digest")
    if seal != head_seal(run_id, count, prev):
        return ChainBreak(-1, "head_mismatch", "head seal does not match run id, count and head digest")
    return None
