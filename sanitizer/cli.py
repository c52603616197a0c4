"""``python -m sanitizer``: scan, apply and rules.

  scan IN.jsonl [--fail-on-findings]           report only (exit 1 on findings with the flag)
  apply IN.jsonl OUT.jsonl [--packs ...] [--fields ...]
  rules [--packs ...]                          list the rules and run every rule's own examples

Input is streamed line by line (memory stays flat on any file size; ``-`` reads stdin / writes stdout).
A malformed line (bad UTF-8, bad JSON, not an object) is reported with its line number, counted and
skipped; ``--strict`` stops at the first one (exit 2). Output lines are canonical JSON (sorted keys,
no blanks, UTF-8). The JSON report goes beside the output (``OUT.report.json``) or to ``--report``;
a summary goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from sanitizer.core import DEFAULT_SALT, Sanitizer, check_rule
from sanitizer.engine import HIDDEN_ID_RULE
from sanitizer.pseudonym import Pseudonymizer, derive_key
from sanitizer.report import Report
from sanitizer.rules import DEFAULT_PACKS, RuleError, load_packs

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
DEFAULT_HIDDEN_IDS_FIELD = "metadata.hidden_identifiers"
_MAX_WARNINGS = 20


class StrictError(Exception):
    """A malformed line under ``--strict``."""


def dumps(record: Any) -> bytes:
    """One canonical output line (without the newline)."""
    try:
        return json.dumps(
            record, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
        ).encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from a \\ud800 escape: keep them escaped
        return json.dumps(
            record, sort_keys=True, ensure_ascii=True, separators=(",", ":"), allow_nan=False
        ).encode()


def process_stream(
    lines: Iterable[bytes],
    san: Sanitizer,
    report: Report,
    *,
    out: IO[bytes] | None = None,
    fields: list[str] | None = None,
    hidden_ids_field: str | None = DEFAULT_HIDDEN_IDS_FIELD,
    strict: bool = False,
    source: str = "-",
    progress: Any = None,
    warn: Any = None,
) -> None:
    """Sanitize a stream of JSONL lines into ``out`` (``None``: scan only), filling ``report``."""
    t0 = time.perf_counter()
    sanitize = san.sanitize_json_line
    warned = 0
    try:
        for line_no, raw in enumerate(lines, 1):
            report.lines += 1
            report.bytes_in += len(raw)
            if progress is not None:
                progress.update(len(raw))
            if not raw.strip():
                report.blank += 1
                continue
            try:
                res = sanitize(raw, fields, hidden_ids_field, f"{source}:{line_no}")
            except (
                ValueError,
                RecursionError,
            ) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
                msg = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
                report.add_malformed(line_no, msg)
                if warn is not None and (strict or warned < _MAX_WARNINGS):
                    warned += 1
                    warn(f"{source}:{line_no}: malformed line: {msg}")
                if strict:
                    raise StrictError(f"{source}:{line_no}: malformed line: {msg}") from None
                continue
            report.add_result(line_no, res)
            if out is not None and not res.dropped:
                out.write(dumps(res.record) + b"\n")
                report.written += 1
    finally:
        report.seconds += time.perf_counter() - t0


def _csv(value: str | None) -> list[str] | None:
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    return items or None


def _open_in(path: str) -> IO[bytes]:
    return sys.stdin.buffer if path == "-" else open(path, "rb", buffering=1 << 20)


def _progress(path: str, quiet: bool):
    if quiet or path == "-" or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=os.path.getsize(path), unit="B", unit_scale=True, desc="sanitize", file=sys.stderr)


def _eprint(msg: str) -> None:
    print(msg, file=sys.stderr)


def _pii_modes(text: str | None) -> dict[str, str]:
    out = {}
    for item in _csv(text) or []:
        cls, sep, mode = item.partition("=")
        if not sep:
            raise RuleError("pii_modes", f"expected class=mode, got {item!r}")
        out[cls.strip()] = mode.strip()
    return out


def _build(args: argparse.Namespace) -> Sanitizer:
    key = None
    key_file = getattr(args, "key_file", None)
    if key_file:
        try:
            key = derive_key(Path(key_file).read_bytes())
        except OSError as exc:
            raise RuleError("key_file", f"{key_file}: cannot read ({exc.strerror})") from None
    pseudo = Pseudonymizer(key, _pii_modes(getattr(args, "pii_modes", None)))
    return Sanitizer.from_packs(
        _csv(args.packs) or list(DEFAULT_PACKS), args.packs_dir, salt=args.salt, pseudonymizer=pseudo
    )


def _run(args: argparse.Namespace, mode: str) -> int:
    try:
        san = _build(args)
    except RuleError as exc:
        _eprint(f"error: {exc}")
        return EXIT_ERROR
    fields = _csv(args.fields)
    packs = _csv(args.packs) or list(DEFAULT_PACKS)
    actions = {r.id: r.action for r in san.rules}
    actions[HIDDEN_ID_RULE] = "redact"
    out_path = getattr(args, "output", None)
    report = Report(mode, actions, packs=packs, fields=fields, input=args.input, output=out_path)
    report_path = args.report
    if report_path is None and out_path not in (None, "-"):
        report_path = str(Path(out_path).with_suffix(".report.json"))
    if args.input != "-" and not Path(args.input).is_file():
        _eprint(f"error: no such input file {args.input}")
        return EXIT_ERROR
    progress = _progress(args.input, args.quiet)
    status = EXIT_OK
    inp = _open_in(args.input)
    out: IO[bytes] | None = None
    tmp_out: Path | None = None
    try:
        if out_path == "-":
            out = sys.stdout.buffer
        elif out_path is not None:
            tmp_out = Path(out_path + ".partial")
            out = open(tmp_out, "wb", buffering=1 << 20)
        process_stream(
            inp,
            san,
            report,
            out=out,
            fields=fields,
            hidden_ids_field=args.hidden_ids_field or None,
            strict=args.strict,
            source=args.input,
            progress=progress,
            warn=_eprint,
        )
    except StrictError:
        status = EXIT_ERROR
    finally:
        if progress is not None:
            progress.close()
        if inp is not sys.stdin.buffer:
            inp.close()
        if out is not None and out is not sys.stdout.buffer:
            out.close()
        elif out is not None:
            out.flush()
    if tmp_out is not None:
        if status == EXIT_OK:
            tmp_out.replace(out_path)
        else:
            tmp_out.unlink(missing_ok=True)
    if report_path:
        report.write(report_path)
    if not args.quiet:
        for line in report.summary():
            _eprint(line)
        if report_path:
            _eprint(f"report: {report_path}")
    if status == EXIT_OK and args.fail_on_findings and report.findings:
        status = EXIT_FINDINGS
    return status


def _rules(args: argparse.Namespace) -> int:
    try:
        packs = load_packs(_csv(args.packs) or list(DEFAULT_PACKS), args.packs_dir)
    except RuleError as exc:
        _eprint(f"error: {exc}")
        return EXIT_ERROR
    failed = 0
    rules = []
    all_rules = [r for pack in packs if pack.name == "secrets" for r in pack.rules]
    for pack in packs:
        print(f"{pack.name}  ({pack.path})  {pack.description}")
        for r in pack.rules:
            rules.append(r)
            problems = check_rule(r, args.salt or DEFAULT_SALT, companions=all_rules)
            failed += bool(problems)
            fields = "*" if r.fields is None else ",".join(r.fields)
            what = r.placeholder or r.action
            status = "ok" if not problems else "FAIL: " + "; ".join(problems)
            print(
                f"  {r.id:<36} {r.action:<6} {r.kind:<5} {what:<26} fields={fields}  "
                f"examples +{len(r.positive)}/-{len(r.negative)}  {status}"
            )
    if not failed:
        try:
            san = Sanitizer(rules, salt=args.salt, self_test=False)
            for p in san.placeholder_problems():
                failed += 1
                print(f"  {p.rule_id}: FAIL: {p.reason}")
        except RuleError as exc:
            failed += 1
            print(f"  {exc}")
    print(f"{len(rules)} rules, {failed} failing")
    return EXIT_FINDINGS if failed else EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--packs", default=",".join(DEFAULT_PACKS), help="comma-separated pack names or YAML paths"
    )
    common.add_argument(
        "--packs-dir", default=None, help="directory of pack YAML files (default configs/sanitizer)"
    )
    common.add_argument(
        "--salt",
        default=None,
        help="private salt for the hashes of matched text in reports (default: random per run)",
    )
    common.add_argument(
        "--key-file",
        default=None,
        help="secret key file for pseudonymizing personal data (default: a random key per run)",
    )
    common.add_argument(
        "--pii-modes",
        default=None,
        help="per personal-data class: email=keep,iban=redact,... (default: pseudonymize all)",
    )

    stream = argparse.ArgumentParser(add_help=False)
    stream.add_argument(
        "--fields", default=None, help="comma-separated field selectors (default: every string)"
    )
    stream.add_argument(
        "--hidden-ids-field",
        default=DEFAULT_HIDDEN_IDS_FIELD,
        help="dotted path of the record's hidden identifiers ('' to disable)",
    )
    stream.add_argument("--report", default=None, help="where to write the JSON report")
    stream.add_argument("--strict", action="store_true", help="stop at the first malformed line (exit 2)")
    stream.add_argument("--fail-on-findings", action="store_true", help="exit 1 if anything matched")
    stream.add_argument("--quiet", action="store_true", help="no progress bar or summary")

    # the project's strict_parser lives in data_prep, which imports sanitizer: spelled out here instead
    parser = argparse.ArgumentParser(
        prog="python -m sanitizer", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    sub = parser.add_subparsers(dest="command", required=True)
    exact = {"allow_abbrev": False}  # --pack is never --packs
    p = sub.add_parser(
        "scan", parents=[common, stream], help="report findings without writing output", **exact
    )
    p.add_argument("input", help="input JSONL ('-' for stdin)")
    p = sub.add_parser("apply", parents=[common, stream], help="write sanitized JSONL and a report", **exact)
    p.add_argument("input", help="input JSONL ('-' for stdin)")
    p.add_argument("output", help="output JSONL ('-' for stdout)")
    sub.add_parser("rules", parents=[common], help="list the rules and self-test every pack", **exact)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "rules":
        return _rules(args)
    if args.command == "apply" and args.output != "-" and args.input != "-":
        if Path(args.output).resolve() == Path(args.input).resolve():
            _eprint("error: output must differ from input")
            return EXIT_ERROR
    return _run(args, args.command)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
