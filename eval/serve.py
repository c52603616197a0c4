"""Serve a base model plus an optional PEFT adapter as a minimal OpenAI-compatible endpoint.

    python eval/serve.py --model PATH [--adapter CKPT] [--host 127.0.0.1] [--port 8000]
                         [--served-model-name NAME] [--threads 1] [--load-in-4bit]
                         [--max-tokens-default 256] [--max-tokens-limit 4096]
                         [--lora-modules NAME=CKPT [NAME=CKPT ...]]

``--lora-modules writer=ckpt/ reader=ckpt-reader/`` serves each checkpoint (on the base, loaded as the
evaluations load it) under its name beside the base, as ``vllm serve BASE --enable-lora --lora-modules``
does, so ``eval/policy_reuse.py`` and ``eval/sabotage.py --backend openai`` talk to either the same way
(each module holds its own copy of the base: for small models).

POST /v1/chat/completions and GET /v1/models, loopback only unless --host says otherwise (there is no
authentication). Generation is greedy at temperature 0 and serialized: one answer at a time, so this is
for tests, small teachers and trying a checkpoint with any OpenAI client, not for throughput (use vLLM).
``--port 0`` picks a free port; the first line on stdout is ``serving NAME at URL`` (URL ends in /v1,
ready for ``data_prep/teacher.py --endpoint``). Responses carry usage token counts and finish_reason
(stop or length). Exit 2 on a bad option or a model that cannot be loaded.
"""

from __future__ import annotations

import ipaddress
import signal
import sys
from pathlib import Path

from data_prep.yaml_config import strict_parser


def main(argv: list[str] | None = None) -> int:
    ap = strict_parser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="base model directory (or a hub id, used only when given)")
    ap.add_argument("--adapter", type=Path, help="checkpoint directory of train/writer.py or train/reader.py")
    ap.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    ap.add_argument("--port", type=int, default=8000, help="port (0 picks a free one)")
    ap.add_argument("--served-model-name", help="the model name clients send (default: the folder name)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--load-in-4bit", action="store_true", help="load a base without adapter in 4 bits")
    ap.add_argument(
        "--max-tokens-default", type=int, default=256, help="answer budget when a request sets none"
    )
    ap.add_argument("--max-tokens-limit", type=int, default=4096, help="largest max_tokens accepted")
    ap.add_argument(
        "--lora-modules",
        nargs="+",
        default=[],
        metavar="NAME=CKPT",
        help="checkpoints served under their own names beside the base (as vLLM's --lora-modules)",
    )
    args = ap.parse_args(argv)
    modules: dict[str, Path] = {}
    for spec in args.lora_modules:
        mod_name, sep, path = spec.partition("=")
        if not sep or not mod_name or not path:
            print(f"serve: error: --lora-modules: expected NAME=CKPT, got {spec!r}", file=sys.stderr)
            return 2
        if mod_name in modules:
            print(f"serve: error: --lora-modules: {mod_name!r} given twice", file=sys.stderr)
            return 2
        modules[mod_name] = Path(path)

    from eval.cli import setup

    if Path(args.model).exists():
        setup()  # offline: a local model never touches the network (a hub id is fetched only when given)
    from eval.chat_model import LocalChatModel, PromptTooLong
    from eval.chat_server import ChatServer
    from eval.generation import BackendError

    name = args.served_model_name or Path(args.adapter or args.model).name
    if name in modules:
        print(f"serve: error: --lora-modules: {name!r} is the base's served name", file=sys.stderr)
        return 2
    try:
        model = LocalChatModel(args.model, args.adapter, threads=args.threads, load_in_4bit=args.load_in_4bit)
        extra = {
            mod_name: LocalChatModel(args.model, ckpt, threads=args.threads).generate
            for mod_name, ckpt in modules.items()
        }
    except (BackendError, OSError, ValueError) as exc:
        print(f"serve: error: cannot load the model: {exc}", file=sys.stderr)
        return 2
    try:
        server = ChatServer(
            (args.host, args.port),
            model_id=name,
            generate=model.generate,
            max_tokens_default=args.max_tokens_default,
            max_tokens_limit=args.max_tokens_limit,
            prompt_error=PromptTooLong,
            extra_models=extra,
        )
    except OSError as exc:
        print(f"serve: error: cannot bind {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    if not _is_loopback(args.host):
        print(f"serve: warning: listening on {args.host} without authentication", file=sys.stderr)
    signal.signal(signal.SIGTERM, _stop)
    if modules:
        print(f"serve: also serving {', '.join(modules)}", file=sys.stderr, flush=True)
    print(f"serving {name} at {server.url}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    print(f"serve: stopped after {server.served} completions", file=sys.stderr)
    return 0


def _stop(signum, frame) -> None:
    raise KeyboardInterrupt


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


if __name__ == "__main__":
    sys.exit(main())
