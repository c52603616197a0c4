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


def test_a_cache_from_another_synthetic_config_is_regenerated(tmp_path, monkeypatch):
    """A corpus generated before a change of the default synthetic world (here: the teacher's natural
    description style) is stale: the corpus and the SFT build made from it are rebuilt, not trained on."""
    from data_prep.synthetic import SynthConfig

    monkeypatch.setattr(embedded, "DEFAULT_RUNS", 24)
    monkeypatch.setattr(embedded, "DEFAULT_POLICY_CASES", 4)
    fresh = _tree(embedded.ensure_default_sft(tmp_path / "fresh", progress=False))
    natural = SynthConfig(runs=24, policy_cases=4, seed=0, description_style="natural")
    monkeypatch.setattr(embedded, "default_synth_config", lambda: natural)
    old = embedded.ensure_default_sft(tmp_path / "old", progress=False)
    stale = _tree(old)
    assert stale != fresh
    monkeypatch.undo()
    monkeypatch.setattr(embedded, "DEFAULT_RUNS", 24)
    monkeypatch.setattr(embedded, "DEFAULT_POLICY_CASES", 4)
    assert _tree(embedded.ensure_default_sft(tmp_path / "old", progress=False)) == fresh
    corpus = json.loads((tmp_path / "old" / "corpus" / "manifest.json").read_text())
    assert corpus["config"]["description_style"] == "keyed"
