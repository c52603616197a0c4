"""Export a checkpoint as a standalone model, optionally uploaded to the Hugging Face Hub.

    python train/export.py --adapter ckpt/ --out DIR [--base-model PATH] [--overwrite]
                           [--push-to-hub ORG/NAME [--private]]

Offline unless --push-to-hub is given; the upload uses the token of ``hf auth login`` or HF_TOKEN and
sends only the files the export wrote. The adapter is merged into its base as trained (nf4 round
trip when it was 4-bit). Exit 0 on success, 2 on bad input, 1 when the upload failed
(the export folder is kept). See ``train/standalone.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from data_prep.yaml_config import strict_parser

OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = strict_parser(prog="train/export.py", description=__doc__.split("\n")[0])
    ap.add_argument(
        "--adapter", required=True, type=Path, help="checkpoint directory (train/writer.py, reader.py)"
    )
    ap.add_argument("--out", required=True, type=Path, help="output model directory")
    ap.add_argument("--base-model", help="override the base model path recorded in the checkpoint")
    ap.add_argument(
        "--overwrite", action="store_true", help="replace a non-empty --out once the new one is complete"
    )
    ap.add_argument("--push-to-hub", metavar="REPO_ID", help="upload the export to this hub model repository")
    ap.add_argument(
        "--private", action="store_true", help="with --push-to-hub: create the repository private"
    )
    ns = ap.parse_args(argv)
    if ns.private and not ns.push_to_hub:
        ap.error("--private needs --push-to-hub")
    return ns


def setup(online: bool) -> None:
    """Offline unless uploading; quiet libraries. Call before transformers is imported."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not online:
        for k in OFFLINE_ENV:
            os.environ.setdefault(k, "1")
    try:
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except ImportError:
        pass


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    setup(online=bool(ns.push_to_hub))
    from data_prep.manifest import ManifestError
    from train.checkpoint import CheckpointError
    from train.standalone import PushError, export, hub_login, push_to_hub

    if ns.push_to_hub:
        try:
            hub_login()  # before the merge, which may take a while
        except PushError as exc:
            print(f"train/export.py: error: {exc}", file=sys.stderr)
            return 2
    try:
        out = export(ns.adapter, ns.out, base=ns.base_model, overwrite=ns.overwrite, repo_id=ns.push_to_hub)
    except (CheckpointError, ManifestError, OSError, ValueError) as exc:
        print(f"train/export.py: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"export: wrote {out} (model.safetensors, config.json, tokenizer, chat template, README.md, manifest.json)"
    )
    if ns.push_to_hub:
        try:
            url = push_to_hub(out, ns.push_to_hub, private=ns.private)
        except PushError as exc:
            print(f"train/export.py: error: {exc}", file=sys.stderr)
            return 1
        print(f"export: uploaded {out} to {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
