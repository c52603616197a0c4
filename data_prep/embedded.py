"""The embedded default: the synthetic corpus and its SFT datasets, built once into a cache.

Everything offline and deterministic: the same cache directory always holds the same bytes. Both
stages write into staging directories that move into place only when sealed, so an interrupted build
leaves no half-built cache; anything not sealed (``require_sealed``) is rebuilt.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from data_prep.manifest import REPO_ROOT, ManifestError, require_sealed, staged_output
from data_prep.yaml_config import strict_parser

DEFAULT_RUNS = 8000
DEFAULT_POLICY_CASES = 400
DEFAULT_SEED = 0
DEFAULT_BUILD_CONFIG = REPO_ROOT / "configs" / "data" / "default.yaml"


def default_cache_dir() -> Path:
    """``$LEDGERWRIGHT_CACHE``, or ``.cache/ledgerwright`` in the repository when unset or empty: the
    one definition every stage (build, training, evaluation) resolves the embedded default with."""
    env = os.environ.get("LEDGERWRIGHT_CACHE")
    return Path(env) if env else REPO_ROOT / ".cache" / "ledgerwright"


@contextlib.contextmanager
def cache_lock(cache: Path) -> Iterator[None]:
    """An exclusive lock on the cache, so parallel jobs (array tasks, DDP ranks) build it once."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _intact(directory: Path, key: str) -> bool:
    try:
        require_sealed(directory, key=key)
        return True
    except ManifestError:
        return False


def default_synth_config():
    from data_prep.synthetic import SynthConfig

    return SynthConfig(runs=DEFAULT_RUNS, policy_cases=DEFAULT_POLICY_CASES, seed=DEFAULT_SEED)


def _current_corpus(corpus: Path) -> bool:
    """False only for a corpus that older code generated as the embedded default: its recorded config
    lacks a field today's config has (e.g. the teacher's description style) and agrees with today's
    default on every field it has, or it is today's default config written by another generator
    version (the teacher's descriptions list the values in the call view's order). A corpus generated
    with another config (a user's, a test's) is kept as it is: the cache never overwrites data it did
    not make."""
    import json

    from data_prep.synthetic.config import GENERATOR_VERSION

    try:
        manifest = json.loads((corpus / "manifest.json").read_text(encoding="utf-8"))
        built = manifest["config"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if not isinstance(built, dict):
        return False
    today = default_synth_config().resolved()
    older_default = set(built) < set(today) and all(built[k] == today[k] for k in built)
    generator = manifest.get("generator")
    version = generator.get("version") if isinstance(generator, dict) else None
    return not older_default and not (built == today and version != GENERATOR_VERSION)


def _built_from(sft: Path, corpus: Path) -> bool:
    """The cached SFT build names this corpus manifest as its input."""
    import json

    from data_prep.manifest import sha256_file

    try:
        named = json.loads((sft / "manifest.json").read_text(encoding="utf-8"))["corpus_manifest"]["sha256"]
        return named == sha256_file(corpus / "manifest.json")
    except (OSError, ValueError, KeyError, TypeError):
        return False


def ensure_default_corpus(cache_dir: Path | None = None, *, progress: bool = True) -> Path:
    from data_prep.synthetic import generate_corpus

    corpus = Path(cache_dir or default_cache_dir()) / "corpus"
    if _intact(corpus, "files") and _current_corpus(corpus):
        return corpus
    cfg = default_synth_config()
    print(
        f"embedded default: generating the synthetic corpus ({DEFAULT_RUNS} runs) into {corpus}", flush=True
    )
    with staged_output(corpus, replace=True) as staged:
        generate_corpus(cfg, staged, progress=progress)
    return corpus


def _current_layout(sft: Path) -> bool:
    """The cached build renders examples as this code does (prompt files and render version)."""
    import json

    from data_prep.sft.config import load_build_config
    from data_prep.sft.render import Prompts

    try:
        built = json.loads((sft / "manifest.json").read_text(encoding="utf-8")).get("prompts")
        cfg = load_build_config(DEFAULT_BUILD_CONFIG)
    except (OSError, ValueError):
        return False
    return built == Prompts(REPO_ROOT / cfg.prompts_dir).digests


def _sft_current(sft: Path, corpus: Path) -> bool:
    return (
        _intact(sft, "outputs")
        and _current_layout(sft)
        and _intact(corpus, "files")
        and _current_corpus(corpus)
        and _built_from(sft, corpus)
    )


def ensure_default_sft(cache_dir: Path | None = None, *, progress: bool = True) -> Path:
    """Return the SFT directory of the embedded default, building corpus and datasets if absent."""
    from data_prep.sft.config import load_build_config
    from data_prep.sft.pipeline import build

    cache = Path(cache_dir or default_cache_dir())
    sft = cache / "sft"
    if _sft_current(sft, cache / "corpus"):
        return sft
    with cache_lock(cache):
        if _sft_current(sft, cache / "corpus"):
            return sft
        corpus = ensure_default_corpus(cache, progress=progress)
        print(f"embedded default: building SFT datasets into {sft}", flush=True)
        build(corpus, sft, load_build_config(DEFAULT_BUILD_CONFIG), progress=progress, overwrite=True)
    return sft


def preset_sft_dir(preset: str, cache_dir: Path | None = None) -> Path:
    """Where the embedded default's build under ``configs/data/<preset>.yaml`` lives: ``<cache>/sft``
    for ``default``, ``<cache>/sft-<preset>`` for the others (the sweeps' ``data`` grid values)."""
    cache = Path(cache_dir or default_cache_dir())
    return cache / "sft" if preset == "default" else cache / f"sft-{preset}"


def ensure_preset_sft(preset: str, cache_dir: Path | None = None, *, progress: bool = True) -> Path:
    """The embedded default corpus built with another data preset (e.g. ``unfiltered``), once."""
    from data_prep.sft.config import load_build_config
    from data_prep.sft.pipeline import build

    if preset == "default":
        return ensure_default_sft(cache_dir, progress=progress)
    config = REPO_ROOT / "configs" / "data" / f"{preset}.yaml"
    if not config.is_file():
        raise FileNotFoundError(f"data preset {preset!r}: {config} not found")
    cache = Path(cache_dir or default_cache_dir())
    sft = preset_sft_dir(preset, cache)
    if _sft_current(sft, cache / "corpus"):
        return sft
    with cache_lock(cache):
        if _sft_current(sft, cache / "corpus"):
            return sft
        corpus = ensure_default_corpus(cache, progress=progress)
        print(f"embedded default: building SFT datasets ({config.name}) into {sft}", flush=True)
        build(corpus, sft, load_build_config(config), progress=progress, overwrite=True)
    return sft


def main(argv: list[str] | None = None) -> int:
    """Build the embedded default alone (what the training command does on first use), so a user
    can see and time that step: ``python data_prep/embedded.py [--cache-dir DIR]``."""
    ap = strict_parser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--cache-dir", type=Path, help="cache directory (default $LEDGERWRIGHT_CACHE or .cache/ledgerwright)"
    )
    ap.add_argument(
        "--preset", default="default", help="data preset under configs/data/ (e.g. unfiltered) [default]"
    )
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    args = ap.parse_args(argv)
    try:
        corpus = ensure_default_corpus(args.cache_dir, progress=not args.quiet)
        sft = ensure_preset_sft(args.preset, args.cache_dir, progress=not args.quiet)
    except (ManifestError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"embedded default: corpus {corpus}, SFT datasets {sft}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
