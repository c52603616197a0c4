"""Where items come from: held-out families named by the SFT manifest, seeded order, clear errors."""

import json

import pytest
from evalkit import make_runs

from data_prep.records import write_jsonl
from eval.sources import SourceError, heldout_families, load_runs, resolve_default


@pytest.fixture
def world(tmp_path):
    (tmp_path / "corpus" / "runs").mkdir(parents=True)
    write_jsonl(tmp_path / "corpus" / "runs" / "runs-00000.jsonl", make_runs(10))
    (tmp_path / "sft").mkdir()
    manifest = {
        "split_assignment": {"workflow_families": {"fam-alpha": "train+validation", "fam-beta": "heldout"}}
    }
    (tmp_path / "sft" / "manifest.json").write_text(json.dumps(manifest))
    return tmp_path


def test_heldout_families_and_selection(world):
    corpus, sft = resolve_default(world, corpus=None, sft=None, build=False)
    assert heldout_families(sft) == ["fam-beta"]
    sel = load_runs(corpus, families=heldout_families(sft), limit=None, seed=0)
    assert len(sel.items) == 5 and {r.family for r in sel.items} == {"fam-beta"}
    again = load_runs(corpus, families=["fam-beta"], limit=3, seed=0)
    assert [r.run_id for r in again.items] == [r.run_id for r in sel.items][:3]
    assert again.fingerprint != sel.fingerprint and again.available == 5
    other = load_runs(corpus, families=["fam-beta"], limit=None, seed=1)
    assert [r.run_id for r in other.items] != [r.run_id for r in sel.items]


def test_errors_name_what_is_missing(world, tmp_path):
    with pytest.raises(SourceError, match="pass --sft"):
        resolve_default(world, corpus=world / "corpus", sft=None, build=False)
    assert resolve_default(world, corpus=world / "corpus", sft=None, build=False, need_sft=False)[1] is None
    with pytest.raises(SourceError, match="no SFT build"):
        resolve_default(tmp_path / "empty-cache", corpus=None, sft=None, build=False)
    (world / "sft" / "manifest.json").write_text("{}")
    with pytest.raises(SourceError, match="split_assignment.workflow_families: missing"):
        heldout_families(world / "sft")
    bad = world / "bad.jsonl"
    bad.write_text('{"schema": "ledger-run/v1"}\nnot json\n')
    sel = load_runs(bad, families=None, limit=None, seed=0)
    assert sel.items == [] and len(sel.problems) == 2 and "bad.jsonl:1" in sel.problems[0]


def test_runs_with_a_broken_environment_ledger_are_left_out(tmp_path):
    runs = make_runs(3)
    runs[1]["env_ledger"]["records"][0]["status"] = "failed"  # edited after sealing
    path = tmp_path / "runs.jsonl"
    write_jsonl(path, runs)
    sel = load_runs(path, families=None, limit=None, seed=0)
    assert len(sel.items) == 2 and len(sel.problems) == 1 and "runs.jsonl:2" in sel.problems[0]


def _checkpoint(path, sft_dir):
    path.mkdir()
    (path / "adapter_config.json").write_text("{}")
    manifest = {"base_model": {"path": "base"}, "config": {}, "dataset": {"sft_dir": str(sft_dir)}}
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def test_a_checkpoint_is_scored_on_the_held_out_families_of_its_own_training_data(world, tmp_path):
    """A writer trained with ``--data-dir X`` is evaluated on X's held-out families, not the cache's."""
    from data_prep.manifest import sha256_file

    (world / "corpus" / "manifest.json").write_text('{"stage": "synth"}')
    other = tmp_path / "other"
    (other / "sft").mkdir(parents=True)
    split = {"workflow_families": {"fam-alpha": "heldout", "fam-beta": "train+validation"}}
    digest = sha256_file(world / "corpus" / "manifest.json")
    (other / "sft" / "manifest.json").write_text(
        json.dumps({"split_assignment": split, "corpus_manifest": {"path": "manifest.json", "sha256": digest}})
    )
    ckpt = _checkpoint(tmp_path / "ckpt", other / "sft")
    corpus, sft = resolve_default(world, corpus=None, sft=None, build=False, checkpoint=ckpt)
    assert sft == other / "sft" and corpus == world / "corpus"
    assert heldout_families(sft) == ["fam-alpha"]
    # told otherwise, the user's build wins; a checkpoint of the default build resolves as before
    assert resolve_default(world, corpus=None, sft=world / "sft", build=False, checkpoint=ckpt)[1] == world / "sft"
    default = _checkpoint(tmp_path / "ckpt-default", world / "sft")
    assert resolve_default(world, corpus=None, sft=None, build=False, checkpoint=default)[1] == world / "sft"
    # a corpus whose manifest is not the one the build was made from is refused, by digest
    (world / "corpus" / "manifest.json").write_text('{"stage": "synth", "edited": true}')
    with pytest.raises(SourceError, match="corpus_manifest.sha256 sha256:.*pass --corpus"):
        resolve_default(world, corpus=None, sft=None, build=False, checkpoint=ckpt)
