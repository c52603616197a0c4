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
