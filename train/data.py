"""SFT data for training: locate the prepared datasets, sample examples, measure token lengths.

The build (data_prep) writes one ``DatasetDict`` per task at ``<sft_dir>/<task>/`` with splits
``train``, ``validation`` and ``heldout`` and columns ``id, task, family, messages``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger("ledgerwright.train")

REQUIRED_COLUMNS = ("id", "task", "family", "messages")
SPLITS = ("train", "validation", "heldout")
EVAL_SAMPLE_SEED = 0  # the validation sample is the same whatever the training seed


class DataError(ValueError):
    """Missing or malformed SFT data; the message names the path and the field."""


def resolve_sft_dir(data_dir: str | None, cache_dir: Path) -> Path:
    """``data_dir`` if given; else the embedded default, built by data_prep in ``cache_dir`` if absent."""
    if data_dir is not None:
        path = Path(data_dir).expanduser()
        if not path.is_dir():
            raise DataError(f"--data-dir {data_dir}: no such directory")
        return path
    try:
        from data_prep.embedded import ensure_default_sft  # lazy: only the embedded default needs it
    except ImportError as exc:
        raise DataError(
            "no --data-dir given and the embedded default builder (data_prep.embedded.ensure_default_sft) "
            f"is not available: {exc}. Pass --data-dir with prepared SFT datasets."
        ) from exc
    return Path(ensure_default_sft(Path(cache_dir)))


def _load_task(sft_dir: Path, task: str):
    from datasets import DatasetDict, load_from_disk

    path = sft_dir / task
    if not path.is_dir():
        have = sorted(p.name for p in sft_dir.iterdir() if p.is_dir()) if sft_dir.is_dir() else []
        raise DataError(f"{path}: no SFT dataset for task {task!r} (found: {have})")
    try:
        dd = load_from_disk(str(path))
    except Exception as exc:  # datasets raises several types for a bad directory
        raise DataError(f"{path}: not a saved DatasetDict: {exc}") from exc
    if not isinstance(dd, DatasetDict):
        raise DataError(f"{path}: expected a DatasetDict with splits {list(SPLITS)}, got {type(dd).__name__}")
    for split, ds in dd.items():
        missing = [c for c in REQUIRED_COLUMNS if c not in ds.column_names]
        if missing:
            raise DataError(f"{path} [{split}]: missing column(s) {missing} (have {ds.column_names})")
    if "train" not in dd:
        raise DataError(f"{path}: no 'train' split (have {list(dd)})")
    return dd


def _check_messages(rows: list[dict], where: str) -> None:
    for row in rows:
        msgs = row["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise DataError(f"{where}: id {row['id']}: field messages: expected a non-empty list")
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
                raise DataError(
                    f"{where}: id {row['id']}: field messages[{i}].role: expected system|user|assistant"
                )
            if not isinstance(m.get("content"), str):
                raise DataError(f"{where}: id {row['id']}: field messages[{i}].content: expected a string")
        if not any(m["role"] == "assistant" for m in msgs):
            raise DataError(f"{where}: id {row['id']}: field messages: no assistant turn to learn")


@dataclass
class TaskData:
    """The rows of the chosen tasks, per split, each sorted by (task, id)."""

    sft_dir: Path
    tasks: list[str]
    splits: dict[str, list[dict]] = field(default_factory=dict)
    fingerprints: dict[str, Any] = field(default_factory=dict)


def load_tasks(sft_dir: Path, tasks: list[str]) -> TaskData:
    data = TaskData(sft_dir=sft_dir, tasks=list(tasks), splits={s: [] for s in SPLITS})
    manifest = _read_build_manifest(sft_dir)
    for task in tasks:
        dd = _load_task(sft_dir, task)
        for split in SPLITS:
            if split not in dd:
                logger.warning("%s: no %r split", sft_dir / task, split)
                continue
            rows = [{c: r[c] for c in REQUIRED_COLUMNS} for r in dd[split]]
            _check_messages(rows, f"{sft_dir / task} [{split}]")
            data.splits[split].extend(rows)
            data.fingerprints[f"{task}/{split}"] = _manifest_fingerprint(
                manifest, task, split
            ) or content_digest(rows)
    for split in SPLITS:
        data.splits[split].sort(key=lambda r: (r["task"], r["id"]))
        ids = [(r["task"], r["id"]) for r in data.splits[split]]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise DataError(f"{sft_dir} [{split}]: duplicate id {dup[1]!r} in task {dup[0]}")
    return data


def _read_build_manifest(sft_dir: Path) -> dict:
    """The build's manifest, only when it seals the directory (complete, every file listed and
    unchanged): a killed or hand-edited build is refused, never trained on."""
    from data_prep.manifest import ManifestError, require_sealed

    try:
        return require_sealed(sft_dir)
    except ManifestError as exc:
        raise DataError(f"{exc}; rebuild it with data_prep/build.py") from None


def _manifest_fingerprint(manifest: dict, task: str, split: str) -> str | None:
    """The build's fingerprint of (task, split), in the shapes a manifest may use."""
    for key in ("fingerprint", "fingerprints"):
        node = manifest.get(key)
        if isinstance(node, dict):
            node = node.get(task)
            if isinstance(node, dict) and isinstance(node.get(split), str | dict):
                val = node[split]
                return val if isinstance(val, str) else val.get("fingerprint")
            if isinstance(node, dict) and isinstance(node.get(f"{task}/{split}"), str):
                return node[f"{task}/{split}"]
    tasks = manifest.get("tasks")
    if isinstance(tasks, dict) and isinstance(tasks.get(task), dict):
        node = tasks[task].get(split) or tasks[task].get("splits", {}).get(split)
        if isinstance(node, dict) and isinstance(node.get("fingerprint"), str):
            return node["fingerprint"]
    return None


def content_digest(rows: list[dict]) -> str:
    """sha256 over the rows (ids and messages) in order."""
    h = hashlib.sha256()
    for r in rows:
        h.update(json.dumps([r["task"], r["id"], r["messages"]], sort_keys=True, ensure_ascii=False).encode())
        h.update(b"\n")
    return "sha256:" + h.hexdigest()


class NotEnoughExamples(DataError):
    pass


def sample_indices(
    n_available: int, n: int | None, seed: int, *, allow_upsample: bool, what: str
) -> list[int]:
    """Deterministic sample of ``n`` indices of rows already sorted by id.

    The same (rows, n, seed) always gives the same indices; a smaller ``n`` gives a prefix of a
    larger one's sample. Past ``n_available`` the rows repeat (each full pass reshuffled) only with
    ``allow_upsample``.
    """
    if n_available == 0:
        raise NotEnoughExamples(f"{what}: the train split is empty")
    rng = random.Random(f"ledgerwright/sample/{seed}")
    order = list(range(n_available))
    rng.shuffle(order)
    if n is None:
        return order
    if n <= n_available:
        return order[:n]
    if not allow_upsample:
        raise NotEnoughExamples(
            f"{what}: --examples {n} asked for more examples than the train split holds ({n_available}); "
            "pass --allow-upsample to repeat examples, or ask for fewer"
        )
    out = list(order)
    while len(out) < n:
        again = list(range(n_available))
        rng.shuffle(again)
        out.extend(again[: n - len(out)])
    return out


def sample_train(data: TaskData, n: int | None, seed: int, allow_upsample: bool) -> list[dict]:
    rows = data.splits["train"]
    idx = sample_indices(
        len(rows), n, seed, allow_upsample=allow_upsample, what=f"{data.sft_dir} {'+'.join(data.tasks)}"
    )
    return [rows[i] for i in idx]


def sample_eval(data: TaskData, n: int | None) -> list[dict]:
    rows = data.splits["validation"]
    if not rows:
        return []
    idx = sample_indices(
        len(rows), min(n, len(rows)) if n else None, EVAL_SAMPLE_SEED, allow_upsample=False, what="validation"
    )
    return [rows[i] for i in sorted(idx)]


def to_dataset(rows: list[dict]):
    """An in-memory Dataset with only ``messages`` (nothing is cached next to the source files)."""
    from datasets import Dataset

    return Dataset.from_dict({"messages": [r["messages"] for r in rows]})


@dataclass
class LengthStats:
    examples: int
    tokens: int
    assistant_tokens: int
    longest: int
    truncated: int
    fully_masked: int
    max_length: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def length_stats(rows: list[dict], tokenizer, max_length: int) -> LengthStats:
    """Token counts under the training template; ``truncated`` examples exceed ``max_length``."""
    tokens = assistant = longest = truncated = masked = 0
    for r in rows:
        enc = tokenizer.apply_chat_template(
            r["messages"], tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        ids, mask = enc["input_ids"], enc["assistant_masks"]
        n = len(ids)
        tokens += min(n, max_length)
        assistant += sum(mask[:max_length])
        longest = max(longest, n)
        if sum(mask) == 0:
            raise DataError(
                f"example {r['id']}: the chat template marks no assistant token; it needs "
                "{% generation %} ... {% endgeneration %} around assistant content"
            )
        if n > max_length:
            truncated += 1
            if sum(mask[:max_length]) == 0:
                masked += 1
    return LengthStats(len(rows), tokens, assistant, longest, truncated, masked, max_length)


def warn_truncation(stats: LengthStats, what: str) -> None:
    if stats.truncated:
        logger.warning(
            "%s: %d of %d examples are longer than max_length=%d tokens and are truncated (longest %d)%s",
            what,
            stats.truncated,
            stats.examples,
            stats.max_length,
            stats.longest,
            f"; {stats.fully_masked} of them keep no assistant token and teach nothing"
            if stats.fully_masked
            else "",
        )
