"""Corpus generation: runs and policy cases, sharded to disk with a manifest, or streamed in memory."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

from data_prep.integrity import seal_run
from data_prep.policy_case import REQUEST_DIMENSIONS
from data_prep.records import SABOTAGE_TYPES, VERDICT_LABELS
from data_prep.synthetic.config import (
    GENERATOR_NAME,
    GENERATOR_VERSION,
    HAZARDS,
    MEMORY_ERRORS,
    WRITER_ERRORS,
    SynthConfig,
)
from data_prep.synthetic.episode import build_run, make_context
from data_prep.synthetic.families import FAMILY_REGISTRY
from data_prep.synthetic.output import CASE_DIR, RUN_DIR, prepare_out_dir, write_manifest, write_shards
from data_prep.synthetic.policy_gen import build_case

MANIFEST_SCHEMA = "ledgerwright-manifest/v1"


def iter_runs_generated(
    cfg: SynthConfig, start: int = 0, stop: int | None = None, *, signer: Any = None
) -> Iterator[dict]:
    """Runs ``start..stop`` (default: all ``cfg.runs``) as sealed ``ledger-run/v1`` dicts (signed when
    ``signer`` is given); any slice of the corpus is the same whichever process makes it."""
    ctx = make_context(cfg)
    for i in range(start, cfg.runs if stop is None else stop):
        yield seal_run(build_run(ctx, i), signer)


def iter_policy_cases(cfg: SynthConfig, start: int = 0, stop: int | None = None) -> Iterator[dict]:
    """Policy cases ``start..stop`` (default: all ``cfg.policy_cases``) as ``policy-case/v1`` dicts."""
    cfg.validate()
    for i in range(start, cfg.policy_cases if stop is None else stop):
        yield build_case(cfg, i)


class RunStats:
    """Counts over generated (or imported) runs, every known category present even when zero."""

    def __init__(self, families: list[str] | None = None) -> None:
        self.n = 0
        self.calls = 0
        self.family: Counter[str] = Counter(dict.fromkeys(families or [], 0))
        self.domain: Counter[str] = Counter()
        self.sabotage: Counter[str] = Counter(dict.fromkeys(("clean", *SABOTAGE_TYPES), 0))
        self.gold: Counter[str] = Counter(dict.fromkeys(VERDICT_LABELS, 0))
        self.teacher: Counter[str] = Counter(dict.fromkeys(VERDICT_LABELS, 0))
        self.match = 0
        self.writer: Counter[str] = Counter(dict.fromkeys(WRITER_ERRORS, 0))
        self.hazard: Counter[str] = Counter(dict.fromkeys(HAZARDS, 0))
        self.variant: Counter[str] = Counter()
        self.status: Counter[str] = Counter(dict.fromkeys(("succeeded", "rejected", "failed"), 0))

    def add(self, run: dict, gold_label: str | None = None) -> dict:
        self.n += 1
        self.family[run["family"]] += 1
        self.domain[run["domain"]] += 1
        self.sabotage[run["labels"].get("type") or "clean"] += 1
        prov, meta = run.get("provenance") or {}, run.get("metadata") or {}
        gold = gold_label or (prov.get("gold_verdict") or {}).get("label")
        if gold:
            self.gold[gold] += 1
        verdict = (run.get("teacher") or {}).get("verdict")
        if verdict:
            self.teacher[verdict["label"]] += 1
            self.match += int(verdict["label"] == gold)
        for e in sorted({e["type"] for e in run["labels"].get("writer_errors", [])}):
            self.writer[e] += 1
        for h in prov.get("hazards", []):
            self.hazard[h] += 1
        if meta.get("plan_variant"):
            self.variant[f"{run['family']}/{meta['plan_variant']}"] += 1
        for c in run["trajectory"]:
            self.calls += 1
            self.status[c["status"]] += 1
        return run

    def to_dict(self) -> dict:
        return {
            "runs": self.n,
            "ordinary_calls": self.calls,
            "calls_by_status": dict(sorted(self.status.items())),
            "runs_by_family": dict(sorted(self.family.items())),
            "runs_by_domain": dict(sorted(self.domain.items())),
            "runs_by_sabotage": dict(sorted(self.sabotage.items())),
            "runs_by_gold_verdict": dict(sorted(self.gold.items())),
            "runs_by_teacher_verdict": dict(sorted(self.teacher.items())),
            "teacher_verdict_match": self.match,
            "runs_with_writer_error": dict(sorted(self.writer.items())),
            "runs_with_hazard": dict(sorted(self.hazard.items())),
            "runs_by_plan_variant": dict(sorted(self.variant.items())),
        }


class CaseStats:
    def __init__(self, families: list[str] | None = None) -> None:
        self.n = 0
        self.family: Counter[str] = Counter(dict.fromkeys(families or [], 0))
        self.errors: Counter[str] = Counter(dict.fromkeys(MEMORY_ERRORS, 0))
        self.probes = 0
        self.dims: Counter[str] = Counter(dict.fromkeys(REQUEST_DIMENSIONS, 0))
        self.turns = 0

    def add(self, case: dict) -> dict:
        self.n += 1
        self.family[case["family"]] += 1
        for e in sorted({e["type"] for e in (case.get("teacher") or {}).get("memory_errors", [])}):
            self.errors[e] += 1
        for p in case["probe_pairs"]:
            self.probes += 1
            self.dims[p["dimension"]] += 1
        self.turns += sum(len(b["turns"]) for b in case["blocks"])
        return case

    def to_dict(self) -> dict:
        return {
            "policy_cases": self.n,
            "policy_cases_by_family": dict(sorted(self.family.items())),
            "policy_cases_with_memory_error": dict(sorted(self.errors.items())),
            "probe_pairs": self.probes,
            "probe_pairs_by_dimension": dict(sorted(self.dims.items())),
            "turns": self.turns,
        }


def generate_corpus(cfg: SynthConfig, out_dir: Path, *, progress: bool = False, signer: Any = None) -> dict:
    """Write ``out_dir/runs/runs-NNNNN.jsonl``, ``out_dir/policy_cases/cases-NNNNN.jsonl`` and
    ``out_dir/manifest.json``; return the manifest. Same config and seed give byte-identical files."""
    cfg.validate()
    out_dir = Path(out_dir)
    prepare_out_dir(out_dir)
    runs = RunStats(list(cfg.families))
    cases = CaseStats(list(cfg.policy_families))
    with tqdm(total=cfg.runs, desc="runs", unit="run", disable=not progress, leave=False) as bar:

        def run_stream() -> Iterator[dict]:
            for run in iter_runs_generated(cfg, signer=signer):
                bar.update(1)
                yield runs.add(run)

        files = write_shards(out_dir, RUN_DIR, "runs", run_stream(), cfg.shard_size)
    with tqdm(
        total=cfg.policy_cases, desc="policy cases", unit="case", disable=not progress, leave=False
    ) as bar:

        def case_stream() -> Iterator[dict]:
            for case in iter_policy_cases(cfg):
                bar.update(1)
                yield cases.add(case)

        files.update(write_shards(out_dir, CASE_DIR, "cases", case_stream(), cfg.shard_size))
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "stage": "synth",
        "generator": {"name": GENERATOR_NAME, "version": GENERATOR_VERSION},
        "seed": cfg.seed,
        "config": cfg.resolved(),
        "config_digest": cfg.digest(),
        "workflow_families": {
            name: {"domain": f.domain, "workflow_id": f.workflow_id}
            for name, f in sorted(FAMILY_REGISTRY.items())
        },
        "counts": {**runs.to_dict(), **cases.to_dict()},
        "files": dict(sorted(files.items())),
        "signing": {"key_id": signer.key_id} if signer is not None else None,
    }
    write_manifest(out_dir, manifest)
    return manifest
