"""Where evaluation items come from: held-out runs and policy cases of a corpus, or files a user names.

The embedded default lives in the cache (``$LEDGERWRIGHT_CACHE`` or ``<repo>/.cache/ledgerwright``):
``corpus/`` (``runs/*.jsonl``, ``policy_cases/*.jsonl``) and ``sft/`` (whose manifest's
``split_assignment`` names the held-out families). Items are taken in a seeded hash order, so a smaller
``--limit`` is a prefix of a larger one and no family or label is favoured by file order.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from data_prep.embedded import default_cache_dir
from data_prep.integrity import verify_run
from data_prep.manifest import sha256_file
from data_prep.records import LineError, Run, iter_runs
from data_prep.synthetic.output import CASE_DIR, RUN_DIR, shard_files

logger = logging.getLogger("ledgerwright.eval")


class SourceError(ValueError):
    """Unusable evaluation input; the message names the file (and line and field when there is one)."""


@dataclass
class Selection:
    """Items chosen for an evaluation and what they were chosen from."""

    items: list
    source: str
    families: list[str]
    available: int
    problems: list[str] = field(default_factory=list)
    fingerprint: str = ""


def resolve_default(
    cache_dir: Path | None,
    *,
    corpus: Path | None,
    sft: Path | None,
    build: bool,
    need_sft: bool = True,
    checkpoint: Path | None = None,
) -> tuple[Path, Path | None]:
    """(corpus dir, sft dir). Without ``sft``: the build ``checkpoint`` was trained on (its
    manifest's ``dataset.sft_dir``) and, unless ``corpus`` names one, that build's corpus, so a writer
    trained with ``--data-dir X`` is scored on X's held-out families. Without a checkpoint, ``corpus``
    or ``sft``: the embedded default in the cache, built when absent and ``build`` is true. A corpus
    named by the user needs its own ``sft`` build when the held-out families are wanted
    (``need_sft``): the default build's split would not describe it."""
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    if sft is None and checkpoint is not None:
        corpus, sft = _checkpoint_data(Path(checkpoint), cache, corpus)
    if corpus is not None and sft is None and need_sft:
        raise SourceError(
            f"--corpus {corpus}: pass --sft with the build of this corpus (its manifest names the held-out families)"
        )
    if corpus is None and sft is None:
        sft = cache / "sft"
        if not (sft / "manifest.json").is_file():
            if not build:
                raise SourceError(
                    f"{sft}: no SFT build (its manifest names the held-out families); run the README's main job first"
                )
            from data_prep.embedded import ensure_default_sft

            sft = Path(ensure_default_sft(cache))
    if corpus is None:
        corpus = cache / "corpus"
    if not Path(corpus).is_dir():
        raise SourceError(f"{corpus}: corpus directory does not exist")
    return Path(corpus), (Path(sft) if sft is not None else None)


def _checkpoint_data(checkpoint: Path, cache: Path, corpus: Path | None) -> tuple[Path | None, Path | None]:
    """(corpus, sft) of the build a checkpoint records; (corpus, None) when it records none or the
    embedded default (which resolves as usual, built if absent). The build names its corpus only by
    the digest of the corpus manifest, so the corpus is the first of ``corpus``, the build's sibling
    ``corpus/`` and the cache's whose manifest has that digest."""
    from train.checkpoint import trained_on

    sft = trained_on(checkpoint)
    if sft is None or sft.resolve() == (cache / "sft").resolve():
        return corpus, None
    man = sft / "manifest.json"
    try:
        want = json.loads(man.read_text(encoding="utf-8")).get("corpus_manifest", {}).get("sha256")
    except (OSError, ValueError) as exc:
        raise SourceError(
            f"{checkpoint}/manifest.json: dataset.sft_dir {sft}: cannot read its manifest ({exc}); "
            "pass --sft and --corpus"
        ) from None
    candidates = [c for c in (corpus, sft.parent / "corpus", cache / "corpus") if c is not None]
    for cand in candidates:
        path = Path(cand) / "manifest.json"
        if path.is_file() and sha256_file(path) == want:
            logger.info("held-out split from %s's training data: %s (corpus %s)", checkpoint, sft, cand)
            return Path(cand), sft
    raise SourceError(
        f"{man}: corpus_manifest.sha256 {want}: no corpus with this manifest among "
        f"{', '.join(map(str, candidates))}; pass --corpus (or --sft to use another build's split)"
    )


def heldout_families(sft_dir: Path, kind: str = "workflow_families") -> list[str]:
    """Families the build held out (``split_assignment.<kind>`` entries equal to ``heldout``)."""
    path = Path(sft_dir) / "manifest.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SourceError(f"{path}: cannot read the SFT manifest: {exc}") from None
    assignment = manifest.get("split_assignment", {}).get(kind)
    if not isinstance(assignment, dict):
        cfg = manifest.get("config", {})
        key = {"workflow_families": "heldout_families", "case_families": "heldout_case_families"}[kind]
        fams = cfg.get(key)
        if isinstance(fams, list):
            return sorted(fams)
        raise SourceError(
            f"{path}: split_assignment.{kind}: missing (cannot tell which families are held out)"
        )
    return sorted(f for f, split in assignment.items() if split == "heldout")


def order_key(seed: int, item_id: str) -> tuple[int, str]:
    h = hashlib.sha256(f"order:{seed}:{item_id}".encode()).digest()
    return (int.from_bytes(h[:8], "big"), item_id)


def _jsonl_files(path: Path, sub: str) -> list[Path]:
    return [path] if path.is_file() else shard_files(path, sub, loose=True)


def load_runs(path: Path, *, families: list[str] | None, limit: int | None, seed: int) -> Selection:
    """Runs from a JSONL file or a corpus directory, restricted to ``families`` (None: all), in seeded
    hash order, the first ``limit``. Lines that do not load are listed in ``problems``."""
    files = _jsonl_files(Path(path), RUN_DIR)
    if not files:
        raise SourceError(f"{path}: no run JSONL files (expected runs/*.jsonl or *.jsonl)")
    runs: list[Run] = []
    problems: list[str] = []
    seen: set[str] = set()
    fams = set(families) if families is not None else None
    for f in files:
        for lineno, value in iter_runs(f):
            if isinstance(value, LineError):
                problems.append(str(value))
                continue
            broken = verify_run(value)
            if broken is not None:
                problems.append(f"{f}:{lineno}: {broken} (environment ledger not intact; run left out)")
                continue
            if fams is not None and value.family not in fams:
                continue
            if value.run_id in seen:
                problems.append(f"{f}: run_id {value.run_id!r} repeats; later copy ignored")
                continue
            seen.add(value.run_id)
            runs.append(value)
    available = len(runs)
    runs.sort(key=lambda r: order_key(seed, r.run_id))
    if limit is not None:
        runs = runs[:limit]
    h = hashlib.sha256()
    from data_prep.canonical import dumps_canonical

    for r in runs:
        h.update(dumps_canonical(r.to_dict()).encode("utf-8"))
        h.update(b"\n")
    return Selection(
        runs,
        str(path),
        sorted(families) if families is not None else sorted({r.family for r in runs}),
        available,
        problems,
        "sha256:" + h.hexdigest(),
    )


def load_cases(path: Path, *, families: list[str] | None, limit: int | None, seed: int) -> Selection:
    """Policy cases from ``policy-case/v1`` JSONL (a file or a corpus directory) or from a directory of
    EAL-style case YAML files, restricted to ``families`` (None: all), in seeded hash order."""
    from data_prep.canonical import dumps_canonical

    path = Path(path)
    problems: list[str] = []
    cases: list[dict] = []
    yaml_files = (
        sorted([*path.glob("*.yaml"), *path.glob("*.yml")])
        if path.is_dir()
        else ([path] if path.suffix in (".yaml", ".yml") else [])
    )
    if yaml_files:
        cases, problems = _load_yaml_cases(yaml_files)
    else:
        from data_prep.policy_case import iter_policy_case_file

        files = _jsonl_files(path, CASE_DIR)
        if not files:
            raise SourceError(
                f"{path}: no policy-case JSONL (policy_cases/*.jsonl, *.jsonl) or case YAML files"
            )
        for f in files:
            for _, value in iter_policy_case_file(f):
                if isinstance(value, LineError):
                    problems.append(str(value))
                else:
                    cases.append(value)
    if families is not None:
        cases = [c for c in cases if c.get("family") in set(families)]
    ids = [c["case_id"] for c in cases]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise SourceError(f"{path}: case_id {dup!r} repeats")
    available = len(cases)
    cases.sort(key=lambda c: order_key(seed, c["case_id"]))
    if limit is not None:
        cases = cases[:limit]
    h = hashlib.sha256()
    for c in cases:
        h.update(dumps_canonical(c).encode("utf-8"))
        h.update(b"\n")
    fams = sorted(families) if families is not None else sorted({str(c.get("family", "")) for c in cases})
    return Selection(cases, str(path), fams, available, problems, "sha256:" + h.hexdigest())


def _load_yaml_cases(files: list[Path]) -> tuple[list[dict], list[str]]:
    """EAL-style case YAML through the project's importer (``data_prep.importers.eal_case``): each file
    becomes a ``policy-case/v1`` with the oracle's gold memory and no teacher memory; a file it rejects
    is listed as a problem with its line and field."""
    from data_prep.importers.common import Accepted
    from data_prep.importers.eal_case import iter_items

    cases: list[dict] = []
    problems: list[str] = []
    for item in iter_items(files):
        if isinstance(item, Accepted):
            cases.append(item.record)
        else:
            problems.append(str(item))
    return cases, problems
