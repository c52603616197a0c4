"""Copy-forcing augmentation of writer examples: a training example's tools, or the values its calls
pass, get fresh spellings in every turn.

A small student learns a training family's tool names by heart and then writes them for a held-out
family's calls (measured: `get_vendor` for `get_incident`, 0/45 tools right while 45/45 call ids were
copied). Renamed consistently in every turn of an example (the tool list, the calls, the entries and
their descriptions), a tool's name can only be copied from the call, never recalled. Only training rows
are renamed; validation and held-out rows stay as built.

Argument values fail the same way: the student copies the digits of a held-out ``INC-7767`` and recalls
a training family's prefix (``CR-7767``), so no held-out description names its values. ``rename_values``
respells the letters of every short argument value (the ones a description must name, see
``data_prep.reconcile.salient_values``) consistently in every turn; digits and punctuation stay, so the
value keeps its shape and only a copy from the call gets it right.
"""

from __future__ import annotations

import json
import random
import re
import string
from functools import partial

from data_prep.reconcile import salient_values
from data_prep.sft.render import key_in_words

AUGMENTED_TASKS = ("writer_action",)
KEEP = frozenset({"log_action"})  # the logging tool is part of the protocol, not of a family
_TOOL_LINE = re.compile(r"^- ([A-Za-z][A-Za-z0-9_]*): ", re.MULTILINE)
_VERBS = (
    "fetch", "sync", "mark", "route", "scan", "post", "pull", "push", "tag", "file", "load", "set",
    "open", "close", "flag", "send", "check", "list", "get", "update", "query", "attach", "assign",
    "review", "submit", "cancel", "archive", "notify", "record", "approve",
)  # fmt: skip
_NOUNS = (
    "ticket", "asset", "order", "batch", "record", "queue", "node", "item", "folder", "report", "shift",
    "claim", "quote", "badge", "lease", "panel", "crate", "permit", "invoice", "contract", "device",
    "account", "window", "incident", "booking", "payment", "vendor", "member", "policy", "channel",
)  # fmt: skip


def tool_names(row: dict) -> list[str]:
    """The tools an example's first user turn lists (``- name: description`` lines), in order."""
    first = next((m["content"] for m in row["messages"] if m["role"] == "user"), "")
    return [t for t in _TOOL_LINE.findall(first) if t not in KEEP]


def rename_tools(rows: list[dict], seed: int, share: float, varied: bool = True) -> list[dict]:
    """``rows`` with the tools of a ``share`` of the writer examples renamed (a deterministic choice
    per example and seed; ``varied``: names of varying shape, see ``_fresh_name``); other rows are
    returned as they are."""
    return _augment(rows, seed, share, "rename-tools", tool_names, partial(_renamed, varied=varied))


def _augment(
    rows: list[dict], seed: int, share: float, kind: str, find, change, tasks=AUGMENTED_TASKS
) -> list[dict]:
    """``change(row, found, rng)`` on a ``share`` of the examples of ``tasks`` in which ``find(row)``
    finds something, chosen per example and seed; the other rows are returned as they are."""
    if share <= 0:
        return rows
    out = []
    for row in rows:
        rng = random.Random(f"ledgerwright/{kind}/{seed}/{row['task']}/{row['id']}")
        found = find(row) if row["task"] in tasks else []
        out.append(change(row, found, rng) if found and rng.random() < share else row)
    return out


def _fresh_name(tool: str, rng: random.Random, varied: bool, shared: dict[str, str] | None = None) -> str:
    """A new name for ``tool``. Varied: one part fewer or more than ``tool`` has (at least one), each
    part a word of the lists or a run of 2-8 random letters; a student trained on fixed ``verb_noun``
    names learns their length (three tokens) and ends ``list_alerts`` after ``list_al`` instead of copying
    up to the quote. A part that ``shared`` maps (a word the example's argument keys also use) takes
    that spelling. Not varied: ``verb_noun``, what the tiny base's pretraining text keeps (measured:
    a base pretrained on varied names recalls the values' prefixes in descriptions, 2% named every value
    against 32%, ``bench/results/learning-2026-12-03d-cpu.md``)."""
    if not varied:
        return f"{rng.choice(_VERBS)}_{rng.choice(_NOUNS)}"
    parts = [_shared_spelling(p, shared or {}) or _fresh_part(rng) for p in tool.split("_")]
    change = rng.choice((-1, 0, 0, 1))
    if change < 0 and len(parts) > 1:
        parts.pop(rng.randrange(len(parts)))
    elif change > 0:
        parts.insert(rng.randrange(len(parts) + 1), _fresh_part(rng))
    return "_".join(parts)


def _fresh_part(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice(_VERBS + _NOUNS)
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 8)))


def _shared_spelling(part: str, shared: dict[str, str]) -> str | None:
    """The spelling ``shared`` gives ``part`` (a key's word), or its plural (``alerts`` beside ``alert_id``)."""
    if part in shared:
        return shared[part]
    if part.endswith("s") and part[:-1] in shared:
        return shared[part[:-1]] + "s"
    return None


def _key_words(row: dict, tools: list[str]) -> dict[str, None]:
    """The words of the example's renameable argument keys (``_keys_renamed``'s rule) that a tool name
    also has as a part, itself or as a plural: ``alert`` of ``alert_id`` beside ``silence_alert`` and
    ``list_alerts``, ``user`` of ``user_id`` beside ``get_user``."""
    system = "\n".join(m["content"] for m in row["messages"] if m["role"] == "system")
    tool_parts = {p for t in tools for p in t.split("_")}
    words: dict[str, None] = {}
    for key in call_keys(row):
        if not _renameable(key, _PROTOCOL_WORDS, system):
            continue
        for p in key.split("_"):
            if p not in KEY_PARTS_KEPT and (p in tool_parts or p + "s" in tool_parts):
                words.setdefault(p, None)
    return words


def _renamed(row: dict, tools: list[str], rng: random.Random, varied: bool) -> dict:
    """``row`` with fresh tool names. Varied names keep the ties real APIs have between a tool and its
    keys: a word that a tool name and a key share gets one fresh spelling in both (``silence_alert``
    with ``alert_id`` -> ``sync_qvde`` with ``qvde_id``). Renamed apart, no training tool ever shared a
    word with a key, and the student continued a held-out tool from the key
    (``acknowledge_alert_id``, ``list_alert_id``: tools 76% right, bench/results/learning-2026-12-07e-cpu.md)."""
    text = "\n".join(m["content"] for m in row["messages"])
    shared = {w: _fresh_part(rng) for w in _key_words(row, tools)} if varied else {}
    fresh: dict[str, str] = {}
    for tool in tools:
        for attempt in range(1000):
            name = _fresh_name(tool, rng, varied, shared) + (f"_{attempt}" if attempt >= 100 else "")
            if name not in fresh.values() and name not in tools and name not in text:
                break
        fresh[tool] = name
    system = "\n".join(m["content"] for m in row["messages"] if m["role"] == "system")
    for key in call_keys(row) if shared else ():
        if not _renameable(key, _PROTOCOL_WORDS, system):
            continue  # a protocol word (`status`) or a word of the system prompt keeps its spelling
        new = "_".join(shared.get(p, p) for p in key.split("_"))
        if new != key and new not in text and new not in fresh.values():
            _add_key(fresh, key, new)
    alt = "|".join(map(re.escape, sorted(fresh, key=lambda k: (-len(k), k))))
    pattern = re.compile(rf"(?<![A-Za-z0-9_])({alt})(?![A-Za-z0-9_])")
    messages = [{**m, "content": pattern.sub(lambda x: fresh[x.group(1)], m["content"])} for m in row["messages"]]
    return {**row, "messages": messages}


_ARGUMENTS_LINE = re.compile(r"^Arguments of call \d+: (\{.*\})$", re.MULTILINE)
_LETTERS = re.compile(r"[A-Za-z]+")
_PROTECTED = frozenset({"succeeded", "rejected", "failed", "true", "false", "null"})


def _call_arguments(row: dict):
    """The arguments of every call an example's user turns show (their ``Arguments of call N:`` lines),
    in order; unparseable lines skipped."""
    for m in row["messages"]:
        if m["role"] != "user":
            continue
        for line in _ARGUMENTS_LINE.findall(m["content"]):
            try:
                arguments = json.loads(line)
            except ValueError:
                continue
            if isinstance(arguments, dict):
                yield arguments


def call_values(row: dict) -> list[str]:
    """The short string values (with a letter) of the calls an example shows, in order of appearance."""
    seen: dict[str, None] = {}
    for arguments in _call_arguments(row):
        for forms in salient_values(arguments):
            if _LETTERS.search(forms[0]):
                seen.setdefault(forms[0], None)
    return list(seen)


def _respell(value: str, runs: dict[str, str], rng: random.Random) -> str:
    """``value`` with every run of letters replaced by a random run of the same length and case; a run
    met again (the ``U`` of ``U-7310`` and ``U-6438``) gets the same replacement, so ids of one kind keep
    one prefix."""

    def fresh(m: re.Match) -> str:
        run = m.group()
        if run not in runs:
            pool = string.ascii_uppercase if run.isupper() else string.ascii_lowercase
            taken = set(runs.values())
            for _ in range(100):
                new = "".join(rng.choice(pool) for _ in run)
                if new != run and new not in taken:
                    break
            runs[run] = new
        return runs[run]

    return _LETTERS.sub(fresh, value)


def rename_values(rows: list[dict], seed: int, share: float) -> list[dict]:
    """``rows`` with the call values of a ``share`` of the writer examples respelled in every user and
    assistant turn (a deterministic choice per example and seed). Values that are JSON keys, tool names,
    outcomes or words of the system prompt are kept, so the layout and the protocol never change."""
    return _augment(rows, seed, share, "rename-values", call_values, _respelled)


def _respelled(row: dict, values: list[str], rng: random.Random) -> dict:
    text = "\n".join(m["content"] for m in row["messages"])
    system = "\n".join(m["content"] for m in row["messages"] if m["role"] == "system")
    keep = _PROTECTED | set(tool_names(row)) | KEEP
    fresh: dict[str, str] = {}
    runs: dict[str, str] = {}
    for v in values:
        if v in keep or f'"{v}":' in text or _word(re.escape(v)).search(system):
            continue
        new = _respell(v, runs, rng)
        if new not in text and new not in fresh.values():
            fresh[v] = new
    if not fresh:
        return row
    # one pass over each turn: whole values (longest first, so a value inside a longer one is not
    # respelled on its own), and every other id with a respelled prefix (a manager's U-3150 in a
    # result, beside the U-7310 the call passed)
    values_alt = "|".join(map(re.escape, sorted(fresh, key=lambda v: (-len(v), v))))
    prefix_alt = "|".join(sorted((r for r in runs if r.isupper()), key=lambda r: (-len(r), r))) or "(?!)"
    pattern = _word(rf"(?:({values_alt})|({prefix_alt})(?=-\d))")

    def swap(m: re.Match) -> str:
        return fresh[m.group(1)] if m.group(1) is not None else runs[m.group(2)]

    return _substituted(row, pattern, swap)


def _substituted(row: dict, pattern: re.Pattern, swap) -> dict:
    """``row`` with ``pattern`` replaced by ``swap`` in every turn but the system prompt, whose words
    (the protocol, the layout) never change."""
    messages = [
        m if m["role"] == "system" else {**m, "content": pattern.sub(swap, m["content"])} for m in row["messages"]
    ]
    return {**row, "messages": messages}


def _word(pattern: str) -> re.Pattern:
    """``pattern`` (an escaped value, or an alternation of them) as a whole word: no letter or digit
    right before or after it."""
    return re.compile(rf"(?<![A-Za-z0-9]){pattern}(?![A-Za-z0-9])")


_PROTOCOL_WORDS = frozenset({"call_id", "tool", "arguments", "description", "claimed_outcome", "status"})
# a key's `id` stays (`incident_id` -> `qrmvlxtd_id`): renamed away, the student never meets a key that
# ends like `call_id` and copies a held-out call's id from its `incident_id` (one seed: call ids 97.7% -> 87.0%,
# bench/results/learning-2026-12-07c-cpu.md)
KEY_PARTS_KEPT = frozenset({"id"})
_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def _renameable(key: str, keep: frozenset[str] | set[str], system: str) -> bool:
    """An argument key the augmentation may respell: an identifier, not kept, not a word of the
    system prompt (whose words, the protocol and the layout, never change)."""
    return key not in keep and bool(_KEY.fullmatch(key)) and not _word(re.escape(key)).search(system)


def _add_key(fresh: dict[str, str], key: str, new: str) -> None:
    """Rename ``key`` to ``new``, and the key as the words line and the descriptions spell it
    (``account id``, ``key_in_words``) alike."""
    fresh[key] = new
    if "_" in key:
        fresh[key_in_words(key)] = key_in_words(new)


def call_keys(row: dict) -> list[str]:
    """The argument keys of the calls an example shows, in order of appearance."""
    seen: dict[str, None] = {}
    for arguments in _call_arguments(row):
        for key in arguments if isinstance(arguments, dict) else ():
            seen.setdefault(str(key), None)
    return list(seen)


def rename_keys(rows: list[dict], seed: int, share: float) -> list[dict]:
    """``rows`` with the argument keys of a ``share`` of the writer examples renamed in every user and
    assistant turn (a deterministic choice per example and seed): every word of a key but ``id`` gets
    fresh letters of its length and case (``_respell``), one spelling per word in an example. Trained
    on the built keys, the student recalls a training family's key in a held-out description
    (``fare_class`` -> ``fare_id``, ``incident_id`` -> ``report_id``) and loses the values after it.
    The protocol's own words, tool names and words of the system prompt are kept."""
    return _augment(rows, seed, share, "rename-keys", call_keys, _keys_renamed)


def _keys_renamed(row: dict, keys: list[str], rng: random.Random) -> dict:
    text = "\n".join(m["content"] for m in row["messages"])
    system = "\n".join(m["content"] for m in row["messages"] if m["role"] == "system")
    tools = tool_names(row)
    keep = _PROTOCOL_WORDS | set(tools) | KEEP
    # a word a tool name has (itself or as a plural) stays as the tool spells it: the tie between
    # ``silence_alert`` and ``alert_id``, respelled alike by ``rename_tools`` (see ``_renamed``)
    kept_parts = KEY_PARTS_KEPT | set(_key_words(row, tools))
    fresh: dict[str, str] = {}
    runs: dict[str, str] = {}
    for key in keys:
        if not _renameable(key, keep, system):
            continue
        name = "_".join(p if p in kept_parts else _respell(p, runs, rng) for p in key.split("_"))
        if name != key and name not in fresh.values() and name not in keys and name not in text:
            _add_key(fresh, key, name)
    if not fresh:
        return row
    alt = "|".join(map(re.escape, sorted(fresh, key=lambda k: (-len(k), k))))
    pattern = re.compile(rf"(?<![A-Za-z0-9_])({alt})(?![A-Za-z0-9_])")
    return _substituted(row, pattern, lambda x: fresh[x.group(1)])


# ---- authorization memory ------------------------------------------------------------------------------
MEMORY_TASKS = ("writer_memory",)
_MEMORY_VALUE_FIELDS = ("issuer", "grantee", "action", "vendor", "allowed_categories", "scope")


def _letter_runs(text: str) -> set[str]:
    return {w.lower() for w in _LETTERS.findall(text)}


def _answer_records(row: dict) -> list[dict]:
    answer = next((m["content"] for m in reversed(row["messages"]) if m["role"] == "assistant"), "")
    try:
        records = json.loads(answer).get("records", [])
    except (ValueError, AttributeError):
        return []
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []


def _strings_in(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings_in(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings_in(v)]
    return []


def shared_words(rows: list[dict]) -> frozenset[str]:
    """Words (letter runs, lower case) that the histories of at least two families use: the templates'
    words (``Authorization``, ``until``, ``revoked``) and what families share (people's names), which
    a respelling must leave alone so that every cue keeps its meaning."""
    by_word: dict[str, set[str]] = {}
    for row in rows:
        if row["task"] in MEMORY_TASKS:
            text = "\n".join(m["content"] for m in row["messages"] if m["role"] == "user")
            for w in _letter_runs(text):
                by_word.setdefault(w, set()).add(str(row.get("family")))
    return frozenset(w for w, fams in by_word.items() if len(fams) >= 2)


def memory_words(row: dict, keep: frozenset[str]) -> list[str]:
    """The words of a memory answer's values (issuer, grantee, action, vendor, categories, scope) that
    only this family uses, in order of appearance: the ones a student could recall instead of copying."""
    system = _letter_runs("\n".join(m["content"] for m in row["messages"] if m["role"] == "system"))
    seen: dict[str, None] = {}
    for record in _answer_records(row):
        for key in _MEMORY_VALUE_FIELDS:
            for s in _strings_in(record.get(key)):
                for w in _LETTERS.findall(s):
                    if len(w) > 1 and w.lower() not in keep and w.lower() not in system:
                        seen.setdefault(w.lower(), None)
    return list(seen)


def rename_memory(rows: list[dict], seed: int, share: float) -> list[dict]:
    """``rows`` with the family words of a ``share`` of the memory examples respelled in the history and
    the answer alike (``vendor-onboarding`` -> ``qirsam-onboarding`` wherever the word stands, whatever
    its case), a deterministic choice per example and seed. A student trained on the built spellings
    writes a training family's issuer, action and vendor for a held-out history (measured: records of
    ``security_director``, ``grant_access``, ``ci-pipeline`` for vendor-onboarding cases); respelled,
    they can only be copied from the history. Template words and names that families share are kept
    (``shared_words``), and so are the system prompt's words, so the layout and the cues never change."""
    if share <= 0:
        return rows
    find = partial(memory_words, keep=shared_words(rows))
    return _augment(rows, seed, share, "rename-memory", find, _respelled_words, tasks=MEMORY_TASKS)


def _respelled_words(row: dict, words: list[str], rng: random.Random) -> dict:
    """``row`` with each of ``words`` (lower case) replaced wherever it stands as a word, in any case,
    by a fresh run of letters (``_respell``) that the example does not already hold as a word."""
    text = _letter_runs("\n".join(m["content"] for m in row["messages"]))
    fresh: dict[str, str] = {}
    for w in words:
        new = _respell(w, fresh, rng)
        if new in text:
            del fresh[w]  # a rare collision: the word keeps its spelling
    if not fresh:
        return row
    alt = "|".join(map(re.escape, sorted(fresh, key=lambda w: (-len(w), w))))
    pattern = re.compile(rf"(?<![A-Za-z])({alt})(?![A-Za-z])", re.IGNORECASE)

    def swap(m: re.Match) -> str:
        old, new = m.group(1), fresh[m.group(1).lower()]
        if old.isupper() and len(old) > 1:
            return new.upper()
        return new.capitalize() if old[0].isupper() else new

    return _substituted(row, pattern, swap)
