"""The embedded default cache: built staged and sealed, deterministic, and an unsealed or tampered
cache (an interrupted build, a manifest from before seals) is rebuilt rather than trained on."""

from __future__ import annotations

import json

import data_prep.embedded as embedded
from data_prep.manifest import require_sealed


def _tree(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_cache_is_sealed_deterministic_and_rebuilt_when_unsealed(tmp_path, monkeypatch):
    monkeypatch.setattr(embedded, "DEFAULT_RUNS", 24)
    monkeypatch.setattr(embedded, "DEFAULT_POLICY_CASES", 4)
    a = embedded.ensure_default_sft(tmp_path / "a", progress=False)
    b = embedded.ensure_default_sft(tmp_path / "b", progress=False)
    assert require_sealed(a)["complete"] is True and require_sealed(tmp_path / "a" / "corpus")["complete"]
    assert _tree(a) == _tree(b)
    assert not list((tmp_path / "a").glob(".*partial*"))
    # a manifest without the completion seal (what an interrupted or pre-seal build leaves): rebuilt
    m = json.loads((a / "manifest.json").read_text())
    m.pop("complete")
    (a / "manifest.json").write_text(json.dumps(m))
    again = embedded.ensure_default_sft(tmp_path / "a", progress=False)
    assert _tree(again) == _tree(b)


def _older_code_default(tmp_path, monkeypatch, name):
    """A cache as the code before the description style made it: natural descriptions, and a corpus
    manifest whose config has no ``description_style`` field."""
    from data_prep.synthetic import SynthConfig

    natural = SynthConfig(runs=24, policy_cases=4, seed=0, description_style="natural")
    with monkeypatch.context() as m:
        m.setattr(embedded, "default_synth_config", lambda: natural)
        embedded.ensure_default_sft(tmp_path / name, progress=False)
    path = tmp_path / name / "corpus" / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["config"]["description_style"]
    path.write_text(json.dumps(manifest))
    return tmp_path / name


def test_a_default_cache_from_older_code_is_regenerated(tmp_path, monkeypatch):
    """A corpus that older code generated as the embedded default (before the keyed description style)
    is stale: the corpus and the SFT build made from it are rebuilt, not trained on."""
    monkeypatch.setattr(embedded, "DEFAULT_RUNS", 24)
    monkeypatch.setattr(embedded, "DEFAULT_POLICY_CASES", 4)
    fresh = _tree(embedded.ensure_default_sft(tmp_path / "fresh", progress=False))
    old = _older_code_default(tmp_path, monkeypatch, "old")
    assert _tree(old / "sft") != fresh
    assert _tree(embedded.ensure_default_sft(old, progress=False)) == fresh
    corpus = json.loads((old / "corpus" / "manifest.json").read_text())
    assert corpus["config"]["description_style"] == "keyed"


def test_a_default_corpus_from_another_generator_version_is_regenerated(tmp_path, monkeypatch):
    """Today's default config written by an older generator (descriptions listing the values in
    another order) is stale too; the rebuilt cache is today's bytes."""
    monkeypatch.setattr(embedded, "DEFAULT_RUNS", 24)
    monkeypatch.setattr(embedded, "DEFAULT_POLICY_CASES", 4)
    fresh = _tree(embedded.ensure_default_sft(tmp_path / "fresh", progress=False))
    old = tmp_path / "old"
    embedded.ensure_default_sft(old, progress=False)
    path = old / "corpus" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["generator"]["version"] = "1.0.0"
    path.write_text(json.dumps(manifest))
    assert not embedded._current_corpus(old / "corpus")
    assert _tree(embedded.ensure_default_sft(old, progress=False)) == fresh
    assert json.loads(path.read_text())["generator"]["version"] != "1.0.0"


def test_a_corpus_generated_with_another_config_is_kept(tmp_path, monkeypatch):
    """A corpus the user (or a test) generated into the cache with its own config is theirs: the
    embedded default trains on it as it is instead of overwriting it with the default world."""
    from data_prep.synthetic import SynthConfig, generate_corpus

    monkeypatch.setattr(embedded, "DEFAULT_RUNS", 24)
    monkeypatch.setattr(embedded, "DEFAULT_POLICY_CASES", 4)
    corpus = tmp_path / "own" / "corpus"
    generate_corpus(SynthConfig(runs=12, policy_cases=4, seed=3), corpus, progress=False)
    before = _tree(corpus)
    embedded.ensure_default_sft(tmp_path / "own", progress=False)
    assert _tree(corpus) == before
    sft = json.loads((tmp_path / "own" / "sft" / "manifest.json").read_text())
    action = sft["counts"]["writer_action"]
    assert action["kept"]["total"] + action["filtered"]["total"] > 0
