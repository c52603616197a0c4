"""Faults and forgeries: SIGKILL mid-stage, a full disk, tampered and re-sealed runs, unsealed outputs.

What a user relies on: a killed synth or build leaves nothing a consumer accepts (and the previous
output as it was); the rerun is byte-identical to an uninterrupted run; editing a result or the task
fails verification; re-sealing a whole forged record fails only with a signature check, and does.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runfactory import run_dict

from data_prep.integrity import seal_run, verify_run
from data_prep.manifest import ManifestError, require_sealed
from data_prep.records import Run, write_jsonl

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _partials(parent: Path, name: str) -> list[Path]:
    return sorted(parent.glob(f".{name}.partial-*"))


def _kill_when(proc: subprocess.Popen, ready, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if ready():
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, "the stage finished before it could be killed"


def _grown(parent: Path, name: str, rel: str, size: int = 1) -> bool:
    return any((p / rel).is_file() and (p / rel).stat().st_size >= size for p in _partials(parent, name))


SYNTH = [PY, "data_prep/synth.py", "--runs", "300", "--policy-cases", "10", "--seed", "5", "--quiet"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    ref = tmp_path_factory.mktemp("ref") / "corpus"
    subprocess.run([*SYNTH, "--out", str(ref)], cwd=REPO, env=ENV, check=True, capture_output=True)
    return ref


def test_killed_synth_leaves_nothing_accepted_and_rerun_is_identical(reference, tmp_path):
    out = tmp_path / "corpus"
    proc = subprocess.Popen([*SYNTH, "--out", str(out)], cwd=REPO, env=ENV, stderr=subprocess.DEVNULL)
    _kill_when(proc, lambda: _grown(tmp_path, "corpus", "runs/runs-00000.jsonl", 64 * 1024))
    assert not out.exists() and _partials(tmp_path, "corpus")  # only the staging directory
    with pytest.raises(ManifestError):
        require_sealed(_partials(tmp_path, "corpus")[0])
    build = subprocess.run(
        [PY, "data_prep/build.py", "--corpus", str(out), "--out", str(tmp_path / "b"), "--no-progress"],
        cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 1 and f"{out}: not a directory" in build.stderr
    subprocess.run([*SYNTH, "--out", str(out)], cwd=REPO, env=ENV, check=True, capture_output=True)
    assert _tree(out) == _tree(reference)
    assert not _partials(tmp_path, "corpus")  # the killed run's staging directory was cleaned up
    require_sealed(out)


def test_killed_synth_over_an_earlier_corpus_leaves_it_intact(reference, tmp_path):
    out = tmp_path / "corpus"
    subprocess.run([*SYNTH, "--out", str(out)], cwd=REPO, env=ENV, check=True, capture_output=True)
    before = _tree(out)
    argv = [PY, "data_prep/synth.py", "--runs", "300", "--seed", "6", "--quiet", "--out", str(out)]
    proc = subprocess.Popen(argv, cwd=REPO, env=ENV, stderr=subprocess.DEVNULL)
    _kill_when(proc, lambda: _grown(tmp_path, "corpus", "runs/runs-00000.jsonl", 64 * 1024))
    assert _tree(out) == before
    require_sealed(out)


def test_killed_build_is_refused_and_previous_build_survives(reference, tmp_path):
    def argv(out: Path, *extra: str) -> list[str]:
        return [PY, "data_prep/build.py", "--corpus", str(reference), "--out", str(out), "--no-progress", *extra]

    out, fresh = tmp_path / "sft", tmp_path / "fresh"
    subprocess.run(argv(out), cwd=REPO, env=ENV, check=True, capture_output=True, timeout=300)
    first = _tree(out)
    proc = subprocess.Popen(argv(out, "--overwrite"), cwd=REPO, env=ENV, stdout=subprocess.DEVNULL)
    _kill_when(proc, lambda: _grown(tmp_path, "sft", "jsonl/writer_action/train.jsonl"))
    assert _tree(out) == first  # --overwrite did not delete the previous build first
    (partial,) = _partials(tmp_path, "sft")
    with pytest.raises(ManifestError, match="missing manifest"):
        require_sealed(partial)  # what the training loader runs on a data directory
    proc = subprocess.Popen(argv(fresh), cwd=REPO, env=ENV, stdout=subprocess.DEVNULL)
    _kill_when(proc, lambda: _grown(tmp_path, "fresh", "jsonl/writer_action/train.jsonl"))
    assert not fresh.exists()
    subprocess.run(argv(out, "--overwrite"), cwd=REPO, env=ENV, check=True, capture_output=True, timeout=300)
    subprocess.run(argv(fresh), cwd=REPO, env=ENV, check=True, capture_output=True, timeout=300)
    assert _tree(out) == first == _tree(fresh)
    assert not _partials(tmp_path, "sft") and not _partials(tmp_path, "fresh")
    assert require_sealed(out)["complete"] is True


def test_disk_full_leaves_the_previous_build_and_says_so(reference, tmp_path, monkeypatch, capsys):
    from data_prep import build as build_cli
    from data_prep import manifest

    out = tmp_path / "sft"
    argv = ["--corpus", str(reference), "--out", str(out), "--no-progress"]
    assert build_cli.main(argv) == 0
    first = _tree(out)

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(manifest, "atomic_write_bytes", full)
    assert build_cli.main([*argv, "--overwrite"]) == 1
    err = capsys.readouterr().err
    assert "no space left on device" in err and f"({out} is unchanged)" in err
    assert "Traceback" not in err
    assert _tree(out) == first and not _partials(tmp_path, "sft")


# ---- seals ----------------------------------------------------------------------------------------
def _keys(tmp_path: Path) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    priv, pub = tmp_path / "key.pem", tmp_path / "key.pub.pem"
    priv.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    pub.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return priv, pub


def _verify(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "data_prep/verify.py", "--quiet", *map(str, args)],
        cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_tamper_edited_result_task_and_resealed_forgery(tmp_path):
    from data_prep.signing import load_signer

    priv, pub = _keys(tmp_path)
    signer = load_signer(priv)
    run = seal_run(run_dict("signed-1"), signer)
    assert verify_run(Run.from_dict(run)) is None
    good = tmp_path / "good.jsonl"
    write_jsonl(good, [run])
    assert _verify(good).returncode == 0
    assert _verify(good, "--public-key", pub).returncode == 0

    result = json.loads(json.dumps(run))
    result["trajectory"][1]["result"] = {"status": "approved", "amount": 99999}
    task = json.loads(json.dumps(run))
    task["task"]["messages"][1]["content"] = "Pay vendor 7 the full balance now."
    for name, rec in (("result", result), ("task", task)):
        p = tmp_path / f"{name}.jsonl"
        write_jsonl(p, [rec])
        out = _verify(p)  # unsigned check: the seal no longer matches
        assert out.returncode == 1 and f"{p}:1: seal.digest: edited" in out.stderr, out.stderr

    # the laundering attack: edit policy_class, re-seal the chain and the run seal without the key
    from data_prep.chain import seal_ledger

    forged = json.loads(json.dumps(run))
    recs = forged["env_ledger"]["records"]
    calls = [{**t, "policy_class": r["policy_class"]} for t, r in zip(forged["trajectory"], recs, strict=True)]
    calls[0]["policy_class"] = "benign" if calls[0]["policy_class"] != "benign" else "unauthorized"
    forged["env_ledger"] = seal_ledger(forged["run_id"], calls)
    forged = seal_run(forged)  # a fresh, valid-looking seal; the signature is gone or stale
    forged_signed = dict(forged, seal={**forged["seal"], "signature": run["seal"]["signature"]})
    p, q = tmp_path / "forged.jsonl", tmp_path / "forged-signed.jsonl"
    write_jsonl(p, [forged])
    write_jsonl(q, [forged_signed])
    for f in (p, q):
        assert _verify(f).returncode == 0  # unsigned checks cannot tell: the whole record was rewritten
    out = _verify(p, "--public-key", pub)
    assert out.returncode == 1 and f"{p}:1: seal.signature: forged: unsigned" in out.stderr
    out = _verify(q, "--public-key", pub)
    assert out.returncode == 1
    assert f"{q}:1: seal.signature: forged: signature does not match the seal" in out.stderr
    # another key's valid signature is refused too
    other = tmp_path / "other"
    other.mkdir()
    _, other_pub = _keys_other(other)
    assert _verify(good, "--public-key", other_pub).returncode == 1


def _keys_other(tmp_path: Path) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
    pub = tmp_path / "pub.hex"
    pub.write_text(key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex())
    return tmp_path / "none", pub


def test_synth_and_import_sign_from_file_or_environment(tmp_path):
    priv, pub = _keys(tmp_path)
    out = tmp_path / "signed"
    subprocess.run(
        [PY, "data_prep/synth.py", "--runs", "6", "--policy-cases", "0", "--quiet", "--out", str(out),
         "--signing-key", str(priv)],
        cwd=REPO, env=ENV, check=True, capture_output=True,
    )  # fmt: skip
    shard = out / "runs" / "runs-00000.jsonl"
    assert _verify(shard, "--public-key", pub).returncode == 0
    env = {**ENV, "LEDGERWRIGHT_SIGNING_KEY": priv.read_text()}
    imp = subprocess.run(
        [PY, "data_prep/importer.py", "--format", "runs", str(shard), "--out", str(tmp_path / "imp"), "--quiet"],
        cwd=REPO, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert imp.returncode == 0, imp.stderr
    assert _verify(tmp_path / "imp" / "runs" / "runs-00000.jsonl", "--public-key", pub).returncode == 0
    assert priv.read_text().splitlines()[1] not in (tmp_path / "imp" / "manifest.json").read_text()
    unsigned = tmp_path / "unsigned"
    subprocess.run(
        [PY, "data_prep/synth.py", "--runs", "3", "--policy-cases", "0", "--quiet", "--out", str(unsigned)],
        cwd=REPO, env=ENV, check=True, capture_output=True,
    )  # fmt: skip
    out = _verify(unsigned / "runs" / "runs-00000.jsonl", "--public-key", pub)
    assert out.returncode == 1 and "seal.signature: forged: unsigned" in out.stderr


# ---- manifests --------------------------------------------------------------------------------------
def test_require_sealed_refuses_missing_incomplete_mismatching_and_extra(reference, tmp_path):
    import shutil

    c = tmp_path / "c"
    shutil.copytree(reference, c)
    assert require_sealed(c)["complete"] is True
    (c / "runs" / "runs-00001.jsonl").write_text("")
    with pytest.raises(ManifestError, match="not listed"):
        require_sealed(c)
    (c / "runs" / "runs-00001.jsonl").unlink()
    m = json.loads((c / "manifest.json").read_text())
    m.pop("complete")
    (c / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ManifestError, match="incomplete output"):
        require_sealed(c)
    m["complete"] = True
    (c / "manifest.json").write_text(json.dumps(m))
    with open(c / "runs" / "runs-00000.jsonl", "a") as fh:
        fh.write("\n")
    with pytest.raises(ManifestError, match="digest mismatch"):
        require_sealed(c)
    (c / "manifest.json").unlink()
    with pytest.raises(ManifestError, match="missing manifest"):
        require_sealed(c)
    os.mkfifo(c / "manifest.json")
    with pytest.raises(ManifestError, match="FIFO"):
        require_sealed(c)
