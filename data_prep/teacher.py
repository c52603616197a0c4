"""Collect teacher outputs for a corpus from an OpenAI-compatible Chat Completions endpoint.

    python data_prep/teacher.py --corpus DIR --out DIR --endpoint URL --model NAME
                                [--role writer|reader|policy-writer ...] [--concurrency K]
                                [--decoding configs/teacher/decoding.yaml] [--prices configs/teacher/prices.yaml]
                                [--api-key-env OPENAI_API_KEY] [--max-attempts N] [--backoff-base S]
                                [--timeout S] [--max-response-bytes N] [--shard-size N] [--quiet]
                                [--signing-key FILE] [--allow-unsealed]

URL is the endpoint's base (``http://127.0.0.1:8000/v1``) or its full ``/chat/completions`` URL: vLLM,
TGI, a hosted provider, or ``python eval/serve.py``. The API key is read from the environment variable
named by --api-key-env (sent only as a Bearer header, redacted from everything written). Roles default to
all three (writer, then reader on the teacher's ledger, and policy-writer); repeat --role to choose.

The output directory is a corpus that ``python data_prep/build.py --corpus OUT`` reads like the synthetic
teachers' (see data_prep/teacher_client/collect.py for what each role replaces), plus
``teacher_calls.jsonl`` (every call with raw response, usage, finish reason) and ``teacher_cache/``.
Rerun the same command to resume: cached responses are reused, failed calls asked again, and the result
is byte-identical to an uninterrupted run. Exit 0 when the collection finished (provider errors are
counted, not fatal), 1 on unusable input, 2 on a bad option, 130 when interrupted.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from data_prep.inputs import InputError, os_problem
from data_prep.signing import SigningKeyError, load_signer
from data_prep.teacher_client.collect import ROLES, CollectConfig, CollectError, collect
from data_prep.teacher_client.settings import (
    DEFAULT_DECODING,
    DEFAULT_PRICES,
    RetryPolicy,
    SettingsError,
    load_decoding,
)
from data_prep.yaml_config import strict_parser


def main(argv: list[str] | None = None) -> int:
    ap = strict_parser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--corpus", required=True, type=Path, help="input corpus (runs/, policy_cases/, manifest.json)"
    )
    ap.add_argument(
        "--out", required=True, type=Path, help="output corpus directory (its teacher_cache/ is reused)"
    )
    ap.add_argument(
        "--endpoint", required=True, help="base URL of the endpoint, e.g. http://127.0.0.1:8000/v1"
    )
    ap.add_argument(
        "--model", required=True, help="model name the endpoint serves (the request's model field)"
    )
    ap.add_argument(
        "--role", action="append", choices=ROLES, help="role to collect (repeatable; default: all)"
    )
    ap.add_argument("--concurrency", type=int, default=4, help="requests in flight (default 4)")
    ap.add_argument("--decoding", type=Path, default=DEFAULT_DECODING, help="decoding settings YAML")
    ap.add_argument("--prices", type=Path, default=DEFAULT_PRICES, help="price table YAML (per 1M tokens)")
    ap.add_argument(
        "--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key"
    )
    ap.add_argument(
        "--max-attempts", type=int, default=5, help="attempts per request before a provider error"
    )
    ap.add_argument("--backoff-base", type=float, default=1.0, help="first retry wait in seconds (doubles)")
    ap.add_argument("--backoff-max", type=float, default=60.0, help="longest wait between attempts")
    ap.add_argument(
        "--timeout", type=float, default=120.0, help="seconds per attempt, whole (not per read)"
    )
    ap.add_argument(
        "--max-response-bytes",
        type=int,
        default=4 * 1024 * 1024,
        help="longest answer read (a longer one is recorded as truncated, never held)",
    )
    ap.add_argument("--shard-size", type=int, default=1000, help="records per output JSONL shard")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("--signing-key", type=Path, help="Ed25519 private key (PEM or hex) to sign run seals")
    ap.add_argument(
        "--allow-unsealed", action="store_true", help="read a corpus without a complete, matching manifest"
    )
    args = ap.parse_args(argv)
    try:
        cfg = CollectConfig(
            endpoint=args.endpoint,
            model=args.model,
            roles=tuple(args.role) if args.role else ROLES,
            concurrency=args.concurrency,
            decoding=load_decoding(args.decoding),
            retry=RetryPolicy(
                max_attempts=args.max_attempts,
                backoff_base_s=args.backoff_base,
                backoff_max_s=args.backoff_max,
                timeout_s=args.timeout,
                max_response_bytes=args.max_response_bytes,
            ),
            api_key_env=args.api_key_env,
            prices=args.prices,
            shard_size=args.shard_size,
            signer=load_signer(args.signing_key),
            allow_unsealed=args.allow_unsealed,
        )
        cfg.validate()
    except (SettingsError, SigningKeyError) as exc:
        print(f"teacher: error: {exc}", file=sys.stderr)
        return 2
    if not os.environ.get(args.api_key_env):
        print(f"teacher: note: {args.api_key_env} is not set; requests carry no API key", file=sys.stderr)
    try:
        manifest, session = collect(args.corpus, args.out, cfg, progress=not args.quiet)
    except (CollectError, SettingsError, FileNotFoundError, InputError) as exc:
        print(f"teacher: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"teacher: error: {exc.filename or args.out}: {os_problem(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("teacher: interrupted; rerun the same command to resume from the cache", file=sys.stderr)
        return 130
    for line in summary_lines(manifest, session):
        print(line)
    print(f"teacher: wrote {args.out} (manifest.json lists every file)")
    return 0


def summary_lines(manifest: dict, session: dict) -> list[str]:
    c = manifest["counts"]
    lines = []
    for kind in ("runs", "policy_cases"):
        k = c[kind]
        lines.append(f"{kind}: {k['input']} in = {k['written']} written + {k['quarantined']} quarantined")
    for role, r in c["roles"].items():
        detail = ", ".join(f"{s}={n}" for s, n in r.items() if s != "items" and n)
        lines.append(f"{role}: {r['items']} items: {detail or 'none'}")
    calls = c["calls"]
    lines.append(
        f"teacher calls: {calls['total']} ("
        + ", ".join(f"{s}={n}" for s, n in calls.items() if s != "total" and n)
        + ")"
    )
    t, cost = manifest["tokens"], manifest["cost"]
    price = f"{cost['total']:.4f} {cost['currency']}" if cost["total"] is not None else "unknown"
    lines.append(f"tokens: {t['prompt']} prompt + {t['completion']} completion; estimated cost {price}")
    if cost["note"]:
        lines.append(f"  note: {cost['note']}")
    a = session["attempts"]
    lines.append(
        f"this session: {session['requests_sent']} requests sent, {session['cache_hits']} answered from the cache, "
        f"{a.get('retry', 0)} retries"
    )
    if calls["provider_error"]:
        lines.append(f"{calls['provider_error']} provider errors: rerun the same command to ask again")
    return lines


if __name__ == "__main__":
    sys.exit(main())
