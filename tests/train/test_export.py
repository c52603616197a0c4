"""``train/export.py`` writes a standalone model whose logits equal the adapter-on-base model's (the base
as trained, nf4 included) and that loads with plain ``from_pretrained``; ``--push-to-hub`` uploads only
that folder (the hub is mocked: no network here) and fails with a clear message, not a traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

HUB_BASE = "mistralai/Mistral-Nemo-Base-2407"
TOKEN = "hf_test_token_never_uploaded"


@pytest.mark.slow
@pytest.mark.parametrize("load_in_4bit", [False, True], ids=["bf16-base", "nf4-base"])
def test_export_reproduces_the_adapter_model(tiny_base, lora_checkpoint, tmp_path, load_in_4bit):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from train.checkpoint import load_base_as_trained
    from train.export import main

    if load_in_4bit:
        pytest.importorskip("bitsandbytes")
    ckpt = lora_checkpoint(tiny_base, tmp_path / "ckpt", load_in_4bit=load_in_4bit)
    out = tmp_path / "exported"
    assert main(["--adapter", str(ckpt), "--out", str(out)]) == 0
    for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "README.md"):
        assert (out / name).is_file(), name
    man = json.loads((out / "manifest.json").read_text())
    assert man["complete"] and man["export"]["base_model"]["nf4_round_trip"] is load_in_4bit
    assert set(man["outputs"]) >= {"model.safetensors", "config.json", "README.md"}
    assert "quantization_config" not in json.loads((out / "config.json").read_text())
    assert "base_model:" not in (out / "README.md").read_text()  # a local base has no hub id
    _assert_no_machine_paths(out, tmp_path)

    # the adapter on the base as it was trained (real 4-bit layers when it was) against the export
    base, _ = load_base_as_trained(str(tiny_base), {"load_in_4bit": load_in_4bit}, dequantize=False)
    plain = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    tok = AutoTokenizer.from_pretrained(str(out))
    assert tok.chat_template
    text = tok.apply_chat_template(
        [{"role": "user", "content": 'Call 1 (id c1): lookup_vendor {"vendor": "V-7"}'}],
        tokenize=False,
        add_generation_prompt=True,
    )
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        base_only = base(input_ids=ids).logits.float()  # before the adapter is injected into it
        ref = PeftModel.from_pretrained(base, str(ckpt)).eval()
        want = ref(input_ids=ids).logits.float()
        got = plain(input_ids=ids).logits.float()
    assert (got - want).abs().max().item() < 1e-3
    assert (base_only - want).abs().max().item() > 1e-2  # the adapter changed something to reproduce
    # a second export into the same folder needs --overwrite
    assert main(["--adapter", str(ckpt), "--out", str(out)]) == 2


def _assert_no_machine_paths(folder: Path, tmp_path: Path) -> None:
    """Relative paths only: no machine path in any text file of the export."""
    for p in folder.iterdir():
        if p.suffix in (".json", ".md", ".jinja"):
            text = p.read_text()
            assert str(tmp_path) not in text and str(Path.home()) not in text, p.name


class FakeHub:
    """Stands in for ``huggingface_hub.HfApi``: records the calls and what an upload would send."""

    calls: list = []
    sent: dict[str, bytes] = {}

    def __init__(self, token=None):
        FakeHub.calls.append(("init", {"token": token}))

    def create_repo(self, repo_id, **kw):
        FakeHub.calls.append(("create_repo", {"repo_id": repo_id, **kw}))
        return f"https://huggingface.co/{repo_id}"

    def upload_folder(self, *, repo_id, folder_path, allow_patterns=None, **kw):
        import fnmatch

        FakeHub.calls.append(("upload_folder", {"repo_id": repo_id, "folder_path": folder_path, **kw}))
        root = Path(folder_path)
        for p in sorted(root.rglob("*")):
            rel = p.relative_to(root).as_posix()
            if p.is_file() and (
                allow_patterns is None or any(fnmatch.fnmatch(rel, a) for a in allow_patterns)
            ):
                FakeHub.sent[rel] = p.read_bytes()


@pytest.fixture
def fake_hub(monkeypatch):
    import huggingface_hub

    FakeHub.calls, FakeHub.sent = [], {}
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHub)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: TOKEN)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    return FakeHub


@pytest.mark.slow
def test_push_to_hub_uploads_only_the_export(tiny_base, lora_checkpoint, tmp_path, fake_hub, capsys):
    from train.export import main

    # a checkpoint trained from a hub base; the weights come from the local tiny copy (--base-model)
    ckpt = lora_checkpoint(tiny_base, tmp_path / "ckpt", base_name=HUB_BASE)
    (ckpt / "stray-notes.txt").write_text("not part of the export")
    out = tmp_path / "exported"
    argv = ["--adapter", str(ckpt), "--out", str(out), "--base-model", str(tiny_base)]
    assert main([*argv, "--push-to-hub", "org/ledger-writer", "--private"]) == 0
    assert "uploaded" in capsys.readouterr().out

    kinds = [c[0] for c in fake_hub.calls]
    assert kinds == ["init", "create_repo", "upload_folder"]
    assert fake_hub.calls[0][1] == {"token": TOKEN}  # the login's token, given to the client only
    create, upload = fake_hub.calls[1][1], fake_hub.calls[2][1]
    assert create == {"repo_id": "org/ledger-writer", "private": True, "repo_type": "model", "exist_ok": True}
    assert Path(upload["folder_path"]) == out and upload["repo_type"] == "model"
    man = json.loads((out / "manifest.json").read_text())
    assert set(fake_hub.sent) == {*man["outputs"], "manifest.json"}  # what the export wrote, nothing else
    assert all(not Path(name).is_absolute() and ".." not in name for name in fake_hub.sent)
    for name, data in fake_hub.sent.items():
        assert TOKEN.encode() not in data, name
        assert str(tmp_path).encode() not in data, name
    card = fake_hub.sent["README.md"].decode()
    assert f"base_model: {HUB_BASE}" in card and 'from_pretrained("org/ledger-writer")' in card
    assert man["export"]["base_model"]["hub_id"] == HUB_BASE


def _export_folder(root: Path, files: dict[str, str]) -> Path:
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    man = {"stage": "export", "complete": True, "outputs": {n: "sha256:x" for n in files}}
    (root / "manifest.json").write_text(json.dumps(man))
    return root


def test_push_refuses_a_folder_holding_the_token(tmp_path, fake_hub):
    from train.standalone import PushError, push_to_hub

    folder = _export_folder(tmp_path / "x", {"README.md": f"token {TOKEN}"})
    with pytest.raises(PushError, match="holds the hub token"):
        push_to_hub(folder, "org/m")
    assert not [c for c in fake_hub.calls if c[0] != "init"]  # nothing created or sent


def test_push_failure_is_a_clear_error(tmp_path, fake_hub, monkeypatch):
    from train.standalone import PushError, push_to_hub

    def refuse(self, repo_id, **kw):
        raise OSError("403 Forbidden")

    monkeypatch.setattr(FakeHub, "create_repo", refuse)
    folder = _export_folder(tmp_path / "x", {"README.md": "card"})
    with pytest.raises(PushError, match="org/m: upload failed: OSError: 403 Forbidden"):
        push_to_hub(folder, "org/m")


@pytest.mark.parametrize("problem", ["missing-package", "not-logged-in", "offline"])
def test_push_without_the_hub_exits_2_before_exporting(tmp_path, monkeypatch, capsys, problem):
    """Checked before the merge: a missing package or login costs nothing and prints no traceback."""
    import huggingface_hub

    from train.export import main

    if problem == "missing-package":
        monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import raises ImportError
    else:
        monkeypatch.setattr(
            huggingface_hub, "get_token", lambda: None if problem == "not-logged-in" else TOKEN
        )
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", problem == "offline")
    out = tmp_path / "out"
    assert main(["--adapter", str(tmp_path / "no-ckpt"), "--out", str(out), "--push-to-hub", "org/m"]) == 2
    err = capsys.readouterr().err
    want = {
        "missing-package": "pip install huggingface_hub",
        "not-logged-in": "hf auth login",
        "offline": "HF_HUB_OFFLINE",
    }
    assert want[problem] in err and "Traceback" not in err
    assert not out.exists()


def test_private_needs_push_to_hub(tmp_path):
    from train.export import main

    with pytest.raises(SystemExit) as exc:
        main(["--adapter", str(tmp_path), "--out", str(tmp_path / "o"), "--private"])
    assert exc.value.code == 2
