"""The build: corpus -> validated runs and cases -> gold -> verdict-match filter -> sanitizer ->
render -> dedup -> family split -> DatasetDicts, with every unit counted and a manifest.

Streaming: runs are read one at a time; kept examples go to per-split JSONL spools and, in record
batches of bounded size, to the Arrow files of the DatasetDicts as they are kept. What grows with
the corpus is small per unit: the dedup index (a message digest, an id and a spool offset per kept
example; MinHash signatures only for examples whose answers another kept example shares, the others
being read back from the spool when needed) and the run ids seen (duplicate detection).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

import data_prep.synthetic.output as output
from data_prep.canonical import canonical_bytes, canonical_chat, dumps_canonical
from data_prep.integrity import verify_run
from data_prep.manifest import (
    ManifestError,
    build_manifest,
    check_manifest,
    file_digests,
    sha256_file,
    staged_build,
    write_manifest,
)
from data_prep.reconcile import reconcile
from data_prep.records import LineError, Run, iter_jsonl
from data_prep.sft import POLICY_TASKS, RUN_TASKS, SPLITS, TASKS
from data_prep.sft.config import REPO_ROOT, BuildConfig
from data_prep.sft.conservation import StageCounts
from data_prep.sft.dedup import Deduplicator
from data_prep.sft.filters import reader_verdict_reason, writer_action_reason
from data_prep.sft.policy_tasks import add_policy_cases
from data_prep.sft.render import Prompts, render_reader_verdict, render_writer_action
from data_prep.sft.sanitize import ExampleSanitizer, PseudonymKeyError, resolve_key
from data_prep.sft.split import split_of

BUILD_VERSION = "ledgerwright-build/1"
FINDING_SAMPLE = 25


class BuildError(RuntimeError):
    pass


@dataclass
class Problems:
    """Input problems (bad files, bad lines, tampered manifests), each with file and line."""

    items: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.items.append(text)


class SanitizerStats:
    """Aggregates sanitizer findings into the report: per rule counts and a hashed sample."""

    def __init__(self) -> None:
        self.matches: Counter[str] = Counter()
        self.examples: dict[str, Counter[str]] = {}
        self.sample: list[dict] = []

    def add(self, source_id: str, findings: list, dropped: bool) -> None:
        seen: set[tuple[str, str]] = set()
        for f in findings:
            self.matches[f.rule_id] += 1
            seen.add((f.rule_id, f.action))
            if len(self.sample) < FINDING_SAMPLE:
                d = f.to_dict()
                d.pop("text", None)
                self.sample.append({"source": source_id, **d})
        for rule_id, action in seen:
            self.examples.setdefault(rule_id, Counter())[action] += 1

    def to_dict(self) -> dict:
        return {
            "rules": {
                r: {"matches": self.matches[r], "examples": dict(sorted(self.examples.get(r, {}).items()))}
                for r in sorted(self.matches)
            },
            "sample": self.sample,
        }


class SplitWriter:
    """Per task and split JSONL spools (canonical JSON, one example per line).

    An example is addressed by a ``ref`` (its byte offset and split) so the deduplicator can read a
    kept example back instead of holding it in memory."""

    def __init__(self, root: Path, tasks: tuple[str, ...]):
        self.root = root
        self.handles = {}
        self.sizes: dict[tuple[str, str], int] = {}
        self.readers: dict[tuple[str, str], Any] = {}
        for task in tasks:
            (root / task).mkdir(parents=True, exist_ok=True)
            for split in SPLITS:
                self.handles[(task, split)] = open(root / task / f"{split}.jsonl", "wb")
                self.sizes[(task, split)] = 0

    def ref(self, task: str, split: str) -> int:
        """Where the next example of (task, split) goes."""
        return self.sizes[(task, split)] * len(SPLITS) + SPLITS.index(split)

    def write(
        self,
        task: str,
        split: str,
        example: dict,
        messages_canonical: bytes | None = None,
    ) -> int:
        """Write one example (id, task, family, source_id, messages); ``messages_canonical`` is
        ``canonical_bytes(example["messages"])`` when the caller has it. The line is the example's
        canonical JSON either way. Returns the line's length in bytes."""
        if messages_canonical is None:
            messages_canonical = canonical_bytes(example["messages"])
        return self.write_line(task, split, example_line(example, messages_canonical))

    def write_line(self, task: str, split: str, line: bytes) -> int:
        """Write one example line as :func:`example_line` made it; returns its length in bytes."""
        self.handles[(task, split)].write(line)
        self.sizes[(task, split)] += len(line)
        return len(line)

    def read(self, task: str, ref: int) -> dict:
        """The example written at ``ref``."""
        offset, which = divmod(ref, len(SPLITS))
        key = (task, SPLITS[which])
        self.handles[key].flush()
        fh = self.readers.get(key)
        if fh is None:
            fh = self.readers[key] = open(self.root / task / f"{key[1]}.jsonl", "rb")
        fh.seek(offset)
        return json.loads(fh.readline())

    def close(self) -> None:
        for h in (*self.handles.values(), *self.readers.values()):
            h.close()


_EXAMPLE_KEYS = frozenset(("id", "task", "family", "source_id", "messages"))
CANDIDATES_DIR = ".candidates"  # examples before dedup and decontamination; removed by finish


def example_line(example: dict, messages_canonical: bytes) -> bytes:
    """An example's canonical JSON line (``canonical_bytes(example)`` + newline), built from the
    canonical form of its messages that the caller already has."""
    if example.keys() != _EXAMPLE_KEYS:
        return canonical_bytes(example) + b"\n"
    return b"".join(
        (
            b'{"family":',
            canonical_bytes(example["family"]),
            b',"id":',
            canonical_bytes(example["id"]),
            b',"messages":',
            messages_canonical,
            b',"source_id":',
            canonical_bytes(example["source_id"]),
            b',"task":',
            canonical_bytes(example["task"]),
            b"}\n",
        )
    )


def corpus_files(corpus: Path, problems: Problems, strict: bool) -> tuple[list[Path], list[Path], dict]:
    """Run and policy-case files, after checking the corpus manifest when there is one."""
    if not corpus.is_dir():
        raise BuildError(f"{corpus}: corpus directory does not exist")
    listed: dict = {}
    if (corpus / "manifest.json").is_file():
        try:
            check_manifest(corpus, key="files")
        except ManifestError as exc:
            if strict:
                raise BuildError(str(exc)) from None
            problems.add(f"{exc} (continuing: --strict refuses this)")
        try:
            listed = json.loads((corpus / "manifest.json").read_text(encoding="utf-8")).get("files", {})
        except (OSError, ValueError):
            listed = {}
        for rel in sorted(listed):
            if not (corpus / rel).is_file() and not any(rel in p for p in problems.items):
                problems.add(f"{corpus / rel}: listed in the corpus manifest but missing")
    runs, cases = output.shard_files(corpus, output.RUN_DIR), output.shard_files(corpus, output.CASE_DIR)
    if not runs and not cases:
        runs = sorted(corpus.glob("*.jsonl"))  # a bare set of run files
    if not runs and not cases:
        raise BuildError(f"{corpus}: no runs/*.jsonl, policy_cases/*.jsonl or *.jsonl files")
    return runs, cases, listed


class Builder:
    def __init__(
        self,
        cfg: BuildConfig,
        out_dir: Path,
        *,
        progress: bool = True,
        key: bytes | None = None,
        problems: Problems | None = None,
    ):
        import os

        self.cfg = cfg
        self.out = out_dir
        self.progress = progress
        self.prompts = Prompts(REPO_ROOT / cfg.prompts_dir)
        # one rule set for every turn of every example (packs carry their own field selectors)
        self.scrub = ExampleSanitizer(
            [*cfg.sanitizer_packs, *cfg.writer_text_packs],
            key if key is not None else os.urandom(32),
            cfg.pii_modes,
        )
        self.counts = StageCounts(TASKS)
        self.stats = SanitizerStats()
        self.problems = problems if problems is not None else Problems()
        self.family_split: dict[str, dict[str, str]] = {"workflow_families": {}, "case_families": {}}
        self.check_run_seals = True
        # candidates per task: (split, id, offset, length, example digest, answers digest, source id);
        # dedup and decontamination are decided at the end, in an order that does not depend on the
        # order of the corpus (held-out first, then by id)
        self.pending: dict[str, list[tuple]] = {t: [] for t in TASKS}

    def _new_dedup(self, task: str) -> Deduplicator:
        cfg = self.cfg
        return Deduplicator(
            cfg.near_dup_threshold,
            cfg.minhash_perm,
            cfg.minhash_bands,
            cfg.shingle_bytes,
            cfg.seed,
            loader=lambda i: json.loads(self._candidate_line(task, i))["messages"],
        )

    # -- shared steps ----------------------------------------------------------------------------
    def _candidate_line(self, task: str, i: int) -> bytes:
        _split, _id, offset, length = self.pending[task][i][:4]
        fh = self.cand_read[task]
        fh.seek(offset)
        return fh.read(length)

    def _open_outputs(self) -> None:
        import datasets

        datasets.disable_progress_bars()
        self.spool = SplitWriter(self.out / "jsonl", TASKS)
        self.datasets = {t: DatasetDictWriter(self.out / t) for t in TASKS}
        self.cand_dir = self.out / CANDIDATES_DIR
        self.cand_dir.mkdir()
        self.cand_write = {t: open(self.cand_dir / f"{t}.jsonl", "wb") for t in TASKS}
        self.cand_size = dict.fromkeys(TASKS, 0)
        self.cand_read: dict[str, Any] = {}
        self.rejects = open(self.out / "rejects.jsonl", "w", encoding="utf-8", newline="\n")
        self.filtered = open(self.out / "filtered.jsonl", "w", encoding="utf-8", newline="\n")

    def reject(self, tasks: tuple[str, ...], item: dict) -> None:
        item = self.scrub.diagnostic(item)  # field paths and redacted previews, never a secret
        self.rejects.write(dumps_canonical(item) + "\n")
        self.problems.add(f"{item['file']}:{item['line']}: {item['field']}: {item['problem']}")
        for t in tasks:
            self.counts.add_input(t)
            self.counts.record(t, "rejected", item["reason"])

    def filter(
        self,
        task: str,
        example_id: str,
        source_id: str,
        reason: str,
        detail: str = "",
        outcome: str = "filtered",
        count_as: str | None = None,
    ) -> None:
        record = {"task": task, "id": example_id, "source": source_id, "reason": reason, "detail": detail}
        self.filtered.write(dumps_canonical(self.scrub.diagnostic(record)) + "\n")
        self.counts.record(task, outcome, count_as or reason.split(":")[0])

    def emit(
        self,
        task: str,
        example_id: str,
        source_id: str,
        family: str,
        split: str,
        messages: list[dict],
        hidden: list[str] | tuple[str, ...] = (),
    ) -> None:
        """Sanitize the rendered example (every turn: the one place), then hold it as a candidate."""
        messages, findings, drops = self.scrub.messages(task, messages, hidden, context=example_id)
        if findings:
            self.stats.add(source_id, findings, bool(drops))
        if drops:
            self.filter(task, example_id, source_id, "sanitizer_drop", ",".join(sorted(set(drops))))
            return
        canonical = canonical_chat(messages)
        key, answers = Deduplicator.digests(messages, canonical)
        example = {
            "id": example_id,
            "task": task,
            "family": family,
            "source_id": source_id,
            "messages": messages,
        }
        line = example_line(example, canonical)
        self.cand_write[task].write(line)
        self.pending[task].append(
            (split, example_id, self.cand_size[task], len(line), key, answers, source_id)
        )
        self.cand_size[task] += len(line)

    def _resolve(self, task: str) -> None:
        """Dedup and held-out decontamination of one task's candidates, then its outputs.

        Held-out candidates are checked first (by id): one is only ever dropped as a duplicate of
        another held-out one. Train and validation candidates follow (by id): one whose exact or near
        duplicate is held out is ``decontaminated`` (dropped from train, never from held-out), one whose
        duplicate is in train or validation ``deduplicated``. Kept examples are written per split in id
        order, so a shuffled corpus gives the same bytes."""
        pend = self.pending[task]
        self.cand_write[task].close()
        self.cand_read[task] = open(self.cand_dir / f"{task}.jsonl", "rb")
        order = sorted(range(len(pend)), key=lambda i: (pend[i][0] != "heldout", pend[i][1]))
        dedup = self._new_dedup(task)
        heldout_ids: set[str] = set()
        kept: dict[str, list[int]] = {split: [] for split in SPLITS}
        for i in order:
            split, eid, _off, _len, key, answers, source_id = pend[i]
            dup = dedup.check_digests(eid, key, answers, ref=i)
            if dup is None:
                kept[split].append(i)
                if split == "heldout":
                    heldout_ids.add(eid)
                continue
            kind, first = dup
            if split != "heldout" and first in heldout_ids:
                self.filter(
                    task, eid, source_id, "decontaminated", f"{kind}:{first}", "decontaminated", kind
                )
            else:
                self.filter(task, eid, source_id, f"duplicate_{kind}", first, "deduplicated", kind)
        for split in SPLITS:
            for i in kept[split]:  # already in id order
                line = self._candidate_line(task, i)
                self.counts.kept(task, split)
                nbytes = self.spool.write_line(task, split, line)
                self.datasets[task].add(split, json.loads(line), nbytes)
        self.cand_read[task].close()
        self.pending[task] = []

    # -- runs --------------------------------------------------------------------------------------
    def add_runs(self, files: list[Path]) -> None:
        seen: dict[str, int] = {}  # run id -> file index << 32 | line (compact: one entry per run)
        heldout = set(self.cfg.heldout_families)
        bar = tqdm(total=None, desc="runs", unit="run", disable=not self.progress, file=sys.stderr)
        for file_index, path in enumerate(files):
            for lineno, value in iter_jsonl(path):
                bar.update(1)
                item = value if isinstance(value, LineError) else None
                run = None
                if item is None:
                    try:
                        run = Run.from_dict(value)
                    except ValueError as exc:
                        item = LineError(
                            str(path), lineno, getattr(exc, "field", "$"), getattr(exc, "problem", str(exc))
                        )
                if item is not None:
                    self.reject(
                        RUN_TASKS,
                        {
                            "file": item.path,
                            "line": item.line,
                            "field": item.field,
                            "problem": item.problem,
                            "reason": "invalid_record",
                        },
                    )
                    continue
                first = seen.get(run.run_id)
                if first is not None:
                    self.reject(
                        RUN_TASKS,
                        {
                            "file": str(path),
                            "line": lineno,
                            "field": "run_id",
                            "problem": f"duplicate run id (first at {files[first >> 32]}:{first & 0xFFFFFFFF})",
                            "reason": "duplicate_run_id",
                            "run_id": run.run_id,
                        },
                    )
                    continue
                seen[run.run_id] = file_index << 32 | lineno
                integrity = verify_run(run, check_seal_digest=self.check_run_seals)
                if integrity is not None:
                    self.reject(
                        RUN_TASKS,
                        {
                            "file": str(path),
                            "line": lineno,
                            "field": integrity.field,
                            "problem": f"{integrity.kind}: {integrity.detail}",
                            "reason": "chain_invalid",
                            "run_id": run.run_id,
                        },
                    )
                    continue
                self._add_run(run, value, heldout)
        bar.close()

    def _add_run(self, run: Run, raw: dict, heldout: set[str]) -> None:
        for t in RUN_TASKS:
            self.counts.add_input(t)
        rec = reconcile(run, check_integrity=False)
        split = split_of(run.family, run.run_id, heldout, self.cfg)
        self.family_split["workflow_families"].setdefault(
            run.family, "heldout" if split == "heldout" else "train+validation"
        )
        ids = {t: f"{t}:{run.run_id}" for t in RUN_TASKS}
        reasons = {
            "writer_action": writer_action_reason(run, rec, self.cfg),
            "reader_verdict": reader_verdict_reason(run, rec, self.cfg),
        }
        for t, reason in reasons.items():
            if reason is not None:
                self.filter(t, ids[t], run.run_id, reason, rec.verdict.label)
        live = [t for t in RUN_TASKS if reasons[t] is None]
        if not live:
            return
        hidden = list(run.metadata.get("hidden_identifiers", []))
        for t in live:
            if t == "writer_action":
                entries = {e["call_id"]: e for e in raw["model_ledger"]}
                messages = render_writer_action(raw, entries, self.prompts.text[t])
            else:
                messages = render_reader_verdict(raw, self.prompts.text[t])
            self.emit(t, ids[t], run.run_id, run.family, split, messages, hidden)

    # -- policy cases ----------------------------------------------------------------------------
    def add_policy_cases(self, files: list[Path]) -> None:
        add_policy_cases(self, files)

    # -- outputs ---------------------------------------------------------------------------------
    def finish(
        self, inputs: dict[str, str], corpus_manifest: dict | None, key_origin: str = "random"
    ) -> dict:
        for task in TASKS:
            self._resolve(task)
        shutil.rmtree(self.cand_dir)
        self.spool.close()
        self.rejects.close()
        self.filtered.close()
        self.counts.check()
        fingerprints = {}
        for task in TASKS:
            fingerprints[task] = {s: sha256_file(self.out / "jsonl" / task / f"{s}.jsonl") for s in SPLITS}
            self.datasets[task].close(fingerprints[task])
            self._write_preview(task)
        (self.out / "sanitizer_report.json").write_text(
            json.dumps(self.stats.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        manifest = build_manifest(
            stage="build",
            config=self.cfg.to_dict(),
            inputs=inputs,
            outputs=file_digests(self.out),  # every output but the manifest itself, hashed once
            counts=self.counts.to_dict(),
            extra={
                "build_version": BUILD_VERSION,
                "filters": self.cfg.filters(),
                "corpus_manifest": corpus_manifest or {},
                "prompts": self.prompts.digests,
                "fingerprint": fingerprints,
                "split_assignment": {k: dict(sorted(v.items())) for k, v in self.family_split.items()},
                "sanitizer": {
                    **self.stats.to_dict(),
                    "pseudonymization": {
                        "key": key_origin,  # where the key came from; the key is never written
                        "modes": self.scrub.pseudonymizer.modes,
                    },
                },
                "problems": self.problems.items,
            },
        )
        write_manifest(self.out, manifest)
        return manifest

    def _write_preview(self, task: str) -> None:
        src = self.out / "jsonl" / task / "train.jsonl"
        dst = self.out / "preview" / f"{task}.jsonl"
        dst.parent.mkdir(parents=True, exist_ok=True)
        with open(src, encoding="utf-8") as fin, open(dst, "w", encoding="utf-8", newline="\n") as fout:
            for i, line in enumerate(fin):
                if i >= self.cfg.preview_rows:
                    break
                fout.write(line)


FEATURES_SPEC = {
    "id": "string",
    "task": "string",
    "family": "string",
    "source_id": "string",
}


def _features():
    from datasets import Features, Value

    return Features(
        {
            **{k: Value(v) for k, v in FEATURES_SPEC.items()},
            "messages": [{"role": Value("string"), "content": Value("string")}],
        }
    )


ARROW_BATCH_ROWS = 256
ARROW_BATCH_BYTES = 1 << 20
DATA_FILE = "data-00000-of-00001.arrow"


class DatasetDictWriter:
    """One DatasetDict on disk, in the layout of ``DatasetDict.save_to_disk`` (``datasets.load_from_disk``
    reads it), written as examples come: per split an Arrow file fed in record batches of at most
    ``ARROW_BATCH_ROWS`` rows or ``ARROW_BATCH_BYTES`` bytes of JSONL, so memory does not grow with
    the split. An empty split is a data file with the schema and no rows: it loads as an empty Dataset
    with the same columns."""

    def __init__(self, target: Path):
        from datasets.arrow_writer import ArrowWriter

        self.target = target
        self.features = _features()
        self.columns = list(self.features)
        if target.exists():
            shutil.rmtree(target)
        self.writers = {}
        for split in SPLITS:
            (target / split).mkdir(parents=True)
            self.writers[split] = ArrowWriter(features=self.features, path=str(target / split / DATA_FILE))
        self.rows: dict[str, list[dict]] = {split: [] for split in SPLITS}
        self.size = dict.fromkeys(SPLITS, 0)

    def add(self, split: str, example: dict, nbytes: int) -> None:
        """``example`` as written to the split's JSONL, in a line of ``nbytes`` bytes."""
        rows = self.rows[split]
        rows.append(example)
        self.size[split] += nbytes
        if len(rows) >= ARROW_BATCH_ROWS or self.size[split] >= ARROW_BATCH_BYTES:
            self._flush(split)

    def _flush(self, split: str) -> None:
        rows = self.rows[split]
        if rows:
            self.writers[split].write_batch({c: [r[c] for r in rows] for c in self.columns})
            self.rows[split] = []
        self.size[split] = 0

    def close(self, spool_digests: dict[str, str]) -> None:
        """Finish every split; ``spool_digests``: the sha256 of each split's JSONL (the fingerprint)."""
        import datasets
        from datasets.splits import SplitDict, SplitInfo
        from datasets.utils.py_utils import asdict

        for split in SPLITS:
            self._flush(split)
            writer = self.writers[split]
            try:
                num_examples, num_bytes = writer.finalize()
            finally:
                writer.close()
            state = {
                "_data_files": [{"filename": DATA_FILE}],
                # pinned to the content (datasets would record a random-looking fingerprint)
                "_fingerprint": spool_digests[split][7:23],
                "_format_columns": None,
                "_format_kwargs": {},
                "_format_type": None,
                "_output_all_columns": False,
                "_split": split,
            }
            (self.target / split / "state.json").write_text(
                json.dumps(state, indent=2, sort_keys=True) + "\n"
            )
            splits = SplitDict()
            splits.add(SplitInfo(name=split, num_bytes=num_bytes, num_examples=num_examples))
            info = asdict(datasets.DatasetInfo(features=self.features, splits=splits, dataset_size=num_bytes))
            (self.target / split / "dataset_info.json").write_text(
                json.dumps({k: info[k] for k in sorted(info)}, indent=2) + "\n"
            )
        (self.target / "dataset_dict.json").write_text(json.dumps({"splits": list(SPLITS)}))


def save_dataset_dict(spool_dir: Path, target: Path) -> None:
    """Spools (``train.jsonl``, ``validation.jsonl``, ``heldout.jsonl``) -> a DatasetDict on disk, the
    same bytes the build writes while it runs (see ``DatasetDictWriter``)."""
    out = DatasetDictWriter(target)
    for split in SPLITS:
        with open(spool_dir / f"{split}.jsonl", "rb") as fh:
            for line in fh:
                if line.strip():
                    out.add(split, json.loads(line), len(line))
    out.close({split: sha256_file(spool_dir / f"{split}.jsonl") for split in SPLITS})


def build(
    corpus: Path,
    out: Path,
    cfg: BuildConfig,
    *,
    strict: bool = False,
    progress: bool = True,
    overwrite: bool = False,
    allow_unsealed: bool = False,
) -> dict:
    """Run the whole build; returns the manifest. Raises BuildError on unusable input, an unsealed
    corpus (unless ``allow_unsealed``) or, with ``strict``, on any problem."""
    corpus, out = Path(corpus), Path(out)
    # staged: written into a sibling directory, moved over ``out`` only when complete and sealed;
    # the corpus must be a sealed stage output unless ``allow_unsealed`` (data_prep.manifest)
    with staged_build(corpus, out, overwrite=overwrite, allow_unsealed=allow_unsealed, error=BuildError) as staged:
        return _build(corpus, staged, cfg, strict=strict, progress=progress, sealed=not allow_unsealed)


def _build(corpus: Path, out: Path, cfg: BuildConfig, *, strict: bool, progress: bool, sealed: bool) -> dict:
    problems = Problems()
    run_files, case_files, _ = corpus_files(corpus, problems, strict)
    try:
        key, key_origin = resolve_key(cfg.pseudonym_key_file, [*run_files, *case_files])
    except PseudonymKeyError as exc:
        raise BuildError(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)
    b = Builder(cfg, out, progress=progress, key=key, problems=problems)
    b.check_run_seals = not sealed  # a sealed corpus's manifest already proves its runs as written
    corpus_manifest = None
    if (corpus / "manifest.json").is_file():
        try:
            corpus_manifest = {"path": "manifest.json", "sha256": sha256_file(corpus / "manifest.json")}
        except OSError:
            corpus_manifest = None
    b._open_outputs()
    b.add_runs(run_files)
    if case_files:
        b.add_policy_cases(case_files)
    else:
        for t in POLICY_TASKS:
            b.counts.add_input(t, 0)
    inputs = {p.relative_to(corpus).as_posix(): sha256_file(p) for p in [*run_files, *case_files]}
    manifest = b.finish(inputs, corpus_manifest, key_origin)
    if strict and b.problems.items:
        raise BuildError(f"{len(b.problems.items)} input problems (--strict): first: {b.problems.items[0]}")
    return manifest


def summary_lines(manifest: dict) -> list[str]:
    counts = manifest["counts"]
    lines = []
    for task, c in counts.items():
        lines.append(
            f"{task}: {c['input']} in = {c['kept']['total']} kept + {c['filtered']['total']} filtered "
            f"+ {c['rejected']['total']} rejected + {c['deduplicated']['total']} deduplicated "
            f"+ {c['decontaminated']['total']} decontaminated"
        )
        reasons = {
            **c["filtered"]["by_reason"],
            **{f"rejected:{k}": v for k, v in c["rejected"]["by_reason"].items()},
        }
        if reasons:
            lines.append("    " + ", ".join(f"{k}={v}" for k, v in sorted(reasons.items())))
    return lines
