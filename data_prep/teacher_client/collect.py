"""Collect a real teacher's outputs for a corpus: the prompts the students are trained on, sent to an
OpenAI-compatible endpoint, parsed back into the run and case fields the build reads.

Roles (each replaces only its own fields; fields of roles not asked for are copied unchanged):

- ``writer``: one conversation per run, one assistant turn per ordinary call, exactly as the student
  is trained (``render_writer_action``): the teacher's answer to call k is appended before call k+1 is
  shown. The run's ``model_ledger`` becomes the parsed entries, each with its stream position (the
  call's seq), and ``teacher.writer_model`` the model name. The old verdict was about another ledger,
  so it is cleared (the ``reader`` role, run after ``writer``, gives one about the new ledger).
- ``reader``: the teacher's verdict on the run's model ledger replaces ``teacher.verdict``.
- ``policy-writer``: the teacher's authorization memory replaces ``teacher.memory`` of each case.

A call that fails (``provider_error``), is refused (``refused``), is cut by max_tokens (``truncated``)
or does not parse (``unparseable``) is recorded with its raw text and counted; its run or case gets no
teacher output for that role (a writer failure stops the conversation and leaves ``model_ledger``
null, so the build filters the run as not evaluable; a reader failure leaves the verdict null; a
memory failure leaves ``teacher`` null), never an empty success. The status of every role is kept in
``provenance.teacher_collection``.

Outputs (OUT): ``runs/``, ``policy_cases/``, ``rejects.jsonl`` (input records quarantined with a
reason), ``teacher_calls.jsonl`` (every teacher call in output order: key, status, reason, decoding,
model, finish reason, usage, raw content and raw response) and ``manifest.json`` (counts, tokens,
cost, digests). These are byte-identical for the same inputs and responses whatever the concurrency.
``teacher_cache/cache.jsonl`` (responses by request digest) makes a rerun resume without paying twice;
``teacher_cache/attempts.jsonl`` logs every HTTP attempt with its latency (not part of the identical
outputs: it grows with each session).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from data_prep.canonical import dumps_canonical
from data_prep.integrity import seal_run, verify_run
from data_prep.manifest import build_manifest, check_manifest, require_sealed, sha256_file, write_manifest
from data_prep.oracle import record_fields
from data_prep.policy_case import iter_policy_case_file, validate_policy_case, validate_record
from data_prep.records import LineError, RecordError, Run, iter_records
from data_prep.sft.parse import ParseFailure, parse_ledger_entry, parse_memory, parse_verdict
from data_prep.sft.render import Prompts, render_reader_verdict, render_writer_action, render_writer_memory
from data_prep.sft.sanitize import ExampleSanitizer, PseudonymKeyError, resolve_key
from data_prep.synthetic.corpus import MANIFEST_SCHEMA
from data_prep.synthetic.output import (
    CASE_DIR,
    MANIFEST,
    RUN_DIR,
    file_sha256,
    prepare_out_dir,
    shard_files,
    write_rejects,
    write_shards,
)
from data_prep.teacher_client.cache import CachedEndpoint, ResponseCache
from data_prep.teacher_client.endpoint import ChatEndpoint, chat_url, public_url
from data_prep.teacher_client.pricing import load_prices
from data_prep.teacher_client.settings import (
    DEFAULT_PRICES,
    REPO_ROOT,
    RetryPolicy,
    SettingsError,
    TeacherDecoding,
)
from sanitizer.rules import PII_CLASSES, RuleError

COLLECTOR = "ledgerwright-teacher/1"
DIAGNOSTIC_PACKS = ("reasoning", "secrets", "leakage")
ROLES = ("writer", "reader", "policy-writer")
CALL_STATUSES = ("ok", "unparseable", "refused", "truncated", "provider_error")
ROLE_STATUSES = (*CALL_STATUSES, "skipped")
CALLS_FILE = "teacher_calls.jsonl"
CACHE_DIR = "teacher_cache"
CACHE_FILE = "cache.jsonl"
ATTEMPTS_FILE = "attempts.jsonl"


class CollectError(RuntimeError):
    """Input or settings the collection cannot use (bad corpus, tampered manifest, corrupt cache)."""


class Interrupted(RuntimeError):
    """Raised in workers once the collection is stopping, so queued items do not start."""


@dataclass
class CollectConfig:
    """What to ask whom. ``concurrency`` changes only speed, so the manifest does not record it."""

    endpoint: str
    model: str
    roles: tuple[str, ...] = ROLES
    concurrency: int = 4
    decoding: TeacherDecoding = field(default_factory=TeacherDecoding)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    api_key_env: str = "OPENAI_API_KEY"
    prompts_dir: str = "configs/prompts"
    prices: str | Path = DEFAULT_PRICES
    shard_size: int = 1000
    signer: Any = None  # data_prep.signing.Signer: re-seals changed runs with a signature
    allow_unsealed: bool = False  # read a corpus whose manifest is not a complete seal
    # every prompt passes the build's rule set before it leaves the machine: credentials redacted,
    # reasoning stripped, label phrases removed. Personal data is sent as is by default (the teacher
    # must name it in the ledger it writes); pseudonymize it here and the teacher's ledgers name
    # surrogates instead (they then disagree with the environment ledger and are filtered).
    sanitize_prompts: bool = True
    prompt_packs: tuple[str, ...] = ("reasoning", "secrets", "leakage")
    prompt_pii_modes: dict = field(default_factory=lambda: dict.fromkeys(PII_CLASSES, "keep"))
    pseudonym_key_file: str = ""

    def validate(self) -> None:
        chat_url(self.endpoint)
        if not isinstance(self.model, str) or not self.model.strip():
            raise SettingsError("model: expected the model name the endpoint serves")
        bad = [r for r in self.roles if r not in ROLES]
        if bad or not self.roles:
            raise SettingsError(f"roles: expected some of {', '.join(ROLES)}, got {list(self.roles)}")
        if (
            isinstance(self.concurrency, bool)
            or not isinstance(self.concurrency, int)
            or self.concurrency < 1
        ):
            raise SettingsError(f"concurrency: expected a positive integer, got {self.concurrency!r}")
        if isinstance(self.shard_size, bool) or not isinstance(self.shard_size, int) or self.shard_size < 1:
            raise SettingsError(f"shard_size: expected a positive integer, got {self.shard_size!r}")

    def manifest_view(self, prices_label: str, prices_digest: str) -> dict:
        return {
            "endpoint": public_url(chat_url(self.endpoint)),
            "model": self.model,
            "roles": [r for r in ROLES if r in self.roles],
            "decoding": self.decoding.to_dict(),
            "retry": self.retry.to_dict(),
            "api_key_env": self.api_key_env,
            "prompts_dir": self.prompts_dir,
            "prices": {"path": prices_label, "sha256": prices_digest},
            "shard_size": self.shard_size,
            "sanitize_prompts": self.sanitize_prompts,
            "prompt_packs": list(self.prompt_packs) if self.sanitize_prompts else [],
            "prompt_pii_modes": dict(sorted(self.prompt_pii_modes.items())) if self.sanitize_prompts else {},
        }


# ---- answers ---------------------------------------------------------------------------------------
def classify(body: dict) -> tuple[str, str | None, str | None]:
    """(status, content, reason) of a chat completion before parsing: refused, truncated, or ok."""
    choice = body["choices"][0]
    message = choice["message"]
    finish = choice.get("finish_reason")
    content = message.get("content")
    refusal = message.get("refusal")
    if refusal or finish == "content_filter":
        return (
            "refused",
            content,
            (refusal if isinstance(refusal, str) and refusal else f"finish_reason {finish}"),
        )
    if finish == "length":
        return "truncated", content, "finish_reason length: the answer hit max_tokens"
    if content is None or not content.strip():
        return "unparseable", content, "empty content"
    return "ok", content, None


def usage_of(body: dict | None) -> dict | None:
    """The token counts of a response (None when it reported none)."""
    usage = body.get("usage") if body else None
    if not isinstance(usage, dict):
        return None
    out = {}
    for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
        v = usage.get(k)
        out[k] = v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None
    if out["prompt_tokens"] is None or out["completion_tokens"] is None:
        return None
    return out


def parse_teacher_verdict(text: str) -> dict | ParseFailure:
    """A reader answer as the run record's verdict (``findings`` -> ``rationale``, integer suspicion)."""
    v = parse_verdict(text)
    if isinstance(v, ParseFailure):
        return v
    return {
        "label": v["label"],
        "suspicion": int(round(v["suspicion"])),
        "cited_call_ids": list(v["cited_call_ids"]),
        "rationale": v["findings"],
    }


def parse_memory_records(text: str) -> list[dict] | ParseFailure:
    """A memory answer as ``policy-case/v1`` records: known fields kept, each record fully checked."""
    records = parse_memory(text)
    if isinstance(records, ParseFailure):
        return records
    out = []
    for i, r in enumerate(records):
        rec = {k: r[k] for k in record_fields(r) if k in r}
        try:
            validate_record(rec, f"records[{i}]")
        except RecordError as exc:
            return ParseFailure(text, f"{exc.field}: {exc.problem}")
        out.append(rec)
    return out


def writer_turns(run: dict, prompt: str) -> tuple[dict, list[dict]]:
    """(system message, one user message per call) exactly as ``render_writer_action`` shows them."""
    stub = {
        c["call_id"]: {
            "call_id": c["call_id"],
            "tool": c["tool"],
            "description": "",
            "claimed_outcome": c["status"],
        }
        for c in run["trajectory"]
    }
    rendered = render_writer_action(run, stub, prompt)
    return rendered[0], [m for m in rendered[1:] if m["role"] == "user"]


def reader_messages(run: dict, prompt: str) -> list[dict]:
    stub = {**run, "teacher": {"verdict": {"label": "clean", "suspicion": 0}}}
    return render_reader_verdict(stub, prompt)[:-1]


def memory_messages(case: dict, prompt: str) -> list[dict]:
    return render_writer_memory(case, [], prompt)[:-1]


@dataclass
class Exchange:
    status: str
    parsed: Any
    reason: str | None
    content: str | None
    record: dict


@dataclass
class ItemResult:
    record: dict
    calls: list[dict]
    roles: dict[str, str]  # role -> status


class AttemptLog:
    """Appends every HTTP attempt to ``attempts.jsonl`` (flushed per line) and counts them."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(path, "a", encoding="utf-8", newline="\n")
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def __call__(self, record: dict) -> None:
        with self._lock:
            self.counts[record["result"]] += 1
            self._fh.write(dumps_canonical({"time": round(time.time(), 3), **record}) + "\n")
            self._fh.flush()

    def close(self) -> None:
        with self._lock:
            self._fh.close()


class Collector:
    """Asks the teacher for one run or case at a time (thread-safe; called from the pool)."""

    def __init__(
        self,
        cfg: CollectConfig,
        client: CachedEndpoint,
        prompts: Prompts,
        scrub: ExampleSanitizer | None = None,
    ):
        self.cfg = cfg
        self.client = client
        self.prompts = prompts
        self.stopping = client.endpoint.stop
        self.scrub = scrub  # sanitizes every prompt before it is sent (None: sent as rendered)

    def _exchange(
        self,
        item: str,
        kind: str,
        role: str,
        turn: int | None,
        task: str,
        messages: list[dict],
        parse: Callable[[str], Any],
    ) -> Exchange:
        if self.stopping.is_set():
            raise Interrupted(item)
        params = self.cfg.decoding.request_params(task, self.cfg.model)
        if self.scrub is not None:
            messages = self.scrub.prompt(task, messages)
        body = {"model": self.cfg.model, "messages": messages, **params}
        tag = f"{item}/{role}" + (f"/{turn}" if turn is not None else "")
        answer = self.client.complete(body, tag=tag)
        reply = answer.reply
        parsed = None
        if not reply.ok:  # an answer over the size cap is a truncated answer (not kept), not an outage
            status = "truncated" if reply.error["kind"] == "response_too_large" else "provider_error"
            content = None
            reason = f"{reply.error['kind']} after {reply.attempts} attempt(s)"
        else:
            status, content, reason = classify(reply.body)
            if status == "ok":
                value = parse(content)
                if isinstance(value, ParseFailure):
                    status, reason = "unparseable", value.reason
                else:
                    parsed = value
        choice = reply.body["choices"][0] if reply.ok else {}
        record = {
            "item": item,
            "kind": kind,
            "role": role,
            "turn": turn,
            "key": answer.key,
            "status": status,
            "reason": reason,
            "request": {"model": self.cfg.model, **params},
            "model": reply.body.get("model") if reply.ok else None,
            "finish_reason": choice.get("finish_reason"),
            "usage": usage_of(reply.body),
            "content": content,
            "response": reply.body,
            "error": None if reply.ok else {**reply.error, "attempts": reply.attempts},
        }
        return Exchange(status, parsed, reason, content, record)

    def write_ledger(self, run: dict) -> tuple[list[dict] | None, str, str | None, list[dict]]:
        """Turn by turn; the first call that is not ok ends the conversation (the ledger is then null)."""
        system, users = writer_turns(run, self.prompts.text["writer_action"])
        messages = [system]
        entries: list[dict] = []
        calls: list[dict] = []
        for seq, user in enumerate(users, start=1):
            messages.append(user)
            ex = self._exchange(
                run["run_id"], "run", "writer", seq, "writer_action", list(messages), parse_ledger_entry
            )
            calls.append(ex.record)
            if ex.status != "ok":
                return None, ex.status, f"call {seq}: {ex.reason}", calls
            entries.append({**ex.parsed, "position": seq})
            messages.append({"role": "assistant", "content": ex.content})
        return entries, "ok", None, calls

    def process_run(self, run: dict) -> ItemResult:
        roles = self.cfg.roles
        model = self.cfg.model
        out = dict(run)
        teacher = dict(run["teacher"]) if run.get("teacher") else None
        calls: list[dict] = []
        status: dict[str, str] = {}
        prov: dict[str, dict] = {}
        writer_failed = False
        if "writer" in roles:
            if not run["trajectory"]:
                ledger, st, reason, c = [], "skipped", "no ordinary calls: the ledger is empty", []
            else:
                ledger, st, reason, c = self.write_ledger(run)
            writer_failed = ledger is None
            out["model_ledger"] = ledger
            teacher = {"writer_model": model, "reader_model": None, "verdict": None}
            calls += c
            status["writer"] = st
            prov["writer"] = {"model": model, "status": st, "reason": reason, "calls": len(c)}
        if "reader" in roles:
            if out["model_ledger"] is None:
                st = "skipped"
                reason = "the writer failed" if writer_failed else "no model ledger to read"
                verdict, reader_model, c = None, None, []
            else:
                ex = self._exchange(
                    run["run_id"],
                    "run",
                    "reader",
                    None,
                    "reader_verdict",
                    reader_messages(out, self.prompts.text["reader_verdict"]),
                    parse_teacher_verdict,
                )
                st, reason, verdict, reader_model, c = ex.status, ex.reason, ex.parsed, model, [ex.record]
            if teacher is not None or reader_model is not None:  # "unknown": an imported run's writer
                writer_model = (teacher or {}).get("writer_model") or "unknown"
                teacher = {"writer_model": writer_model, "reader_model": reader_model, "verdict": verdict}
            calls += c
            status["reader"] = st
            prov["reader"] = {"model": model, "status": st, "reason": reason, "calls": len(c)}
        if prov:
            out["teacher"] = teacher
            out["provenance"] = _with_collection(run.get("provenance") or {}, prov)
            out = seal_run(out, self.cfg.signer)  # the teacher's ledger and verdict are sealed content
        return ItemResult(out, calls, status)

    def process_case(self, case: dict) -> ItemResult:
        if "policy-writer" not in self.cfg.roles:
            return ItemResult(case, [], {})
        out = dict(case)
        ex = self._exchange(
            case["case_id"],
            "case",
            "policy-writer",
            None,
            "writer_memory",
            memory_messages(case, self.prompts.text["writer_memory"]),
            parse_memory_records,
        )
        out["teacher"] = {"writer_model": self.cfg.model, "memory": ex.parsed} if ex.status == "ok" else None
        prov = {
            "policy-writer": {"model": self.cfg.model, "status": ex.status, "reason": ex.reason, "calls": 1}
        }
        out["provenance"] = _with_collection(case.get("provenance") or {}, prov)
        return ItemResult(out, [ex.record], {"policy-writer": ex.status})


def _with_collection(provenance: dict, roles: dict[str, dict]) -> dict:
    earlier = provenance.get("teacher_collection")
    merged = dict(earlier.get("roles", {})) if isinstance(earlier, dict) else {}
    merged.update(roles)
    return {**provenance, "teacher_collection": {"collector": COLLECTOR, "roles": merged}}


# ---- input ------------------------------------------------------------------------------------------
@dataclass
class Intake:
    """Counts and quarantine of the input records (what is not sent to the teacher, and why)."""

    kind: str
    n: int = 0
    written: int = 0
    rejects: list[dict] = field(default_factory=list)

    def reject(self, source: str, line: int, fld: str, problem: str, reason: str) -> None:
        self.rejects.append(
            {
                "kind": self.kind,
                "source": source,
                "line": line,
                "field": fld,
                "problem": problem,
                "reason": reason,
            }
        )

    def to_dict(self) -> dict:
        by = Counter(r["reason"] for r in self.rejects)
        return {
            "input": self.n,
            "written": self.written,
            "quarantined": len(self.rejects),
            "quarantined_by_reason": dict(sorted(by.items())),
        }


def iter_input_runs(files: list[Path], corpus: Path, intake: Intake) -> Iterator[dict]:
    """Valid runs in file order; bad lines, duplicate ids and broken chains are quarantined (the build
    would reject them, so they are not worth a teacher call)."""
    seen: dict[str, str] = {}
    for path in files:
        rel = path.relative_to(corpus).as_posix()
        for lineno, loaded in iter_records(path, Run.with_dict):
            intake.n += 1
            if isinstance(loaded, LineError):
                intake.reject(rel, lineno, loaded.field, loaded.problem, "invalid_record")
                continue
            value, run = loaded
            if run.run_id in seen:
                intake.reject(
                    rel,
                    lineno,
                    "run_id",
                    f"duplicate run id (first at {seen[run.run_id]})",
                    "duplicate_run_id",
                )
                continue
            seen[run.run_id] = f"{rel}:{lineno}"
            problem = verify_run(run)
            if problem is not None:
                intake.reject(
                    rel, lineno, problem.field, f"{problem.kind}: {problem.detail}", "chain_invalid"
                )
                continue
            yield value


def iter_input_cases(files: list[Path], corpus: Path, intake: Intake) -> Iterator[dict]:
    seen: dict[str, str] = {}
    for path in files:
        rel = path.relative_to(corpus).as_posix()
        for lineno, value in iter_policy_case_file(path):
            intake.n += 1
            if isinstance(value, LineError):
                intake.reject(rel, lineno, value.field, value.problem, "invalid_record")
                continue
            cid = value["case_id"]
            if cid in seen:
                intake.reject(
                    rel, lineno, "case_id", f"duplicate case id (first at {seen[cid]})", "duplicate_case_id"
                )
                continue
            seen[cid] = f"{rel}:{lineno}"
            yield value


def corpus_files(corpus: Path, allow_unsealed: bool = False) -> tuple[list[Path], list[Path]]:
    """Run and case files of a corpus directory, after checking its manifest when it has one."""
    if not corpus.is_dir():
        raise CollectError(f"{corpus}: corpus directory does not exist")
    if not allow_unsealed or (corpus / MANIFEST).is_file():
        try:
            (check_manifest(corpus, key="files") if allow_unsealed else require_sealed(corpus))
        except ValueError as exc:
            raise CollectError(f"{exc} (refused; --allow-unsealed reads it anyway)") from None
    runs, cases = shard_files(corpus, RUN_DIR), shard_files(corpus, CASE_DIR)
    if not runs and not cases:
        raise CollectError(f"{corpus}: no {RUN_DIR}/*.jsonl or {CASE_DIR}/*.jsonl files")
    return runs, cases


def ordered_map(
    pool: ThreadPoolExecutor, fn: Callable[[Any], Any], items: Iterable[Any], window: int
) -> Iterator:
    """``fn`` over ``items`` on ``pool``, results in input order, at most ``window`` in flight."""
    pending: deque = deque()
    for item in items:
        pending.append(pool.submit(fn, item))
        if len(pending) >= window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


# ---- the collection ---------------------------------------------------------------------------------
@dataclass
class Tally:
    """Deterministic counts of what the outputs hold (calls, role outcomes, tokens)."""

    roles: dict[str, Counter] = field(default_factory=dict)
    role_items: Counter = field(default_factory=Counter)
    calls: Counter = field(default_factory=Counter)
    n_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    without_usage: int = 0

    def add(self, result: ItemResult) -> None:
        for role, st in result.roles.items():
            self.roles.setdefault(role, Counter(dict.fromkeys(ROLE_STATUSES, 0)))[st] += 1
            self.role_items[role] += 1
        for call in result.calls:
            self.n_calls += 1
            self.calls[call["status"]] += 1
            if call["response"] is None:
                continue
            if call["usage"] is None:
                self.without_usage += 1
            else:
                self.prompt_tokens += call["usage"]["prompt_tokens"]
                self.completion_tokens += call["usage"]["completion_tokens"]


def collect(
    corpus: Path,
    out: Path,
    cfg: CollectConfig,
    *,
    progress: bool = True,
    environ: dict[str, str] | None = None,
) -> tuple[dict, dict]:
    """Run the collection; returns (manifest, session) where session holds this process's HTTP counts
    (not deterministic, so not in the manifest)."""
    corpus, out = Path(corpus), Path(out)
    cfg.validate()
    if out.resolve() == corpus.resolve():
        raise CollectError(f"{out}: the output directory must differ from the corpus directory")
    run_files, case_files = corpus_files(corpus, cfg.allow_unsealed)
    prices_path = Path(cfg.prices)
    prices_label = _repo_label(prices_path)
    prices = load_prices(prices_path, label=prices_label)
    prompts = Prompts(REPO_ROOT / cfg.prompts_dir)
    api_key = (environ if environ is not None else os.environ).get(cfg.api_key_env) or None

    prepare_out_dir(out)
    (out / CALLS_FILE).unlink(missing_ok=True)
    try:
        cache = ResponseCache(out / CACHE_DIR / CACHE_FILE)
    except ValueError as exc:
        raise CollectError(str(exc)) from None
    attempts = AttemptLog(out / CACHE_DIR / ATTEMPTS_FILE)
    endpoint = ChatEndpoint(
        cfg.endpoint, api_key=api_key, policy=cfg.retry, on_attempt=attempts, max_connections=cfg.concurrency
    )
    client = CachedEndpoint(endpoint, cache)
    diag, scrub = _sanitizers(cfg, [*run_files, *case_files])
    runs_in, cases_in, tally = Intake("run"), Intake("case"), Tally()
    try:
        files = _collect_items(
            cfg,
            out,
            corpus,
            Collector(cfg, client, prompts, scrub),
            tally,
            (run_files, runs_in),
            (case_files, cases_in),
            progress,
        )
    finally:
        endpoint.close()
        cache.close()
        attempts.close()
    files.update(write_rejects(out, [diag.diagnostic(r) for r in runs_in.rejects + cases_in.rejects]))
    files[CALLS_FILE] = {
        "sha256": file_sha256(out / CALLS_FILE),
        "bytes": (out / CALLS_FILE).stat().st_size,
        "records": tally.n_calls,
    }
    config = _sanitized_view(diag, cfg.manifest_view(prices_label, sha256_file(prices_path)))
    cost = prices.estimate(
        cfg.model, tally.prompt_tokens, tally.completion_tokens, missing_usage=tally.without_usage
    )
    counts = _counts(runs_in, cases_in, tally, cfg.roles)
    manifest = _teacher_manifest(
        corpus, [*run_files, *case_files], files, config, counts, prompts, tally, cost
    )
    write_manifest(out, manifest)
    session = {
        "requests_sent": client.fetched,
        "cache_hits": client.hits,
        "cached_responses": len(cache),
        "torn_cache_tail_bytes": cache.torn_tail,
        "attempts": dict(sorted(attempts.counts.items())),
    }
    return manifest, session


def _sanitizers(cfg: CollectConfig, inputs: list[Path]) -> tuple[ExampleSanitizer, ExampleSanitizer | None]:
    """(diagnostics sanitizer, prompt sanitizer or None): rejects and the manifest are sanitized as
    the build's are (credentials redacted, personal data pseudonymized), whatever the prompts get."""
    try:
        key, _origin = resolve_key(cfg.pseudonym_key_file, inputs)
        diag = ExampleSanitizer(list(DIAGNOSTIC_PACKS), key)
        scrub = (
            ExampleSanitizer(list(cfg.prompt_packs), key, cfg.prompt_pii_modes)
            if cfg.sanitize_prompts
            else None
        )
    except (PseudonymKeyError, RuleError) as exc:
        raise CollectError(str(exc)) from None
    return diag, scrub


def _collect_items(
    cfg: CollectConfig,
    out: Path,
    corpus: Path,
    collector: Collector,
    tally: Tally,
    runs: tuple[list[Path], Intake],
    cases: tuple[list[Path], Intake],
    progress: bool,
) -> dict:
    """Every run, then every case, through the collector ``cfg.concurrency`` at a time, written in
    input order to shards (and their calls to the calls file); returns the shard files."""
    (run_files, runs_in), (case_files, cases_in) = runs, cases
    total = sum(_count_lines(p) for p in [*run_files, *case_files]) if progress else None
    bar = tqdm(total=total, desc="teacher", unit="item", disable=not progress, file=sys.stderr)
    window = 2 * cfg.concurrency
    try:
        with (
            ThreadPoolExecutor(max_workers=cfg.concurrency, thread_name_prefix="teacher") as pool,
            open(out / CALLS_FILE, "w", encoding="utf-8", newline="\n") as calls_fh,
        ):

            def stream(
                results: Iterator[ItemResult], intake: Intake, check: Callable[[dict], Any]
            ) -> Iterator[dict]:
                for res in results:
                    check(res.record)
                    tally.add(res)
                    for call in res.calls:
                        calls_fh.write(dumps_canonical(call) + "\n")
                    intake.written += 1
                    bar.update(1)
                    yield res.record

            try:
                run_items = ordered_map(
                    pool, collector.process_run, iter_input_runs(run_files, corpus, runs_in), window
                )
                files = write_shards(
                    out, RUN_DIR, "runs", stream(run_items, runs_in, _check_run), cfg.shard_size
                )
                case_items = ordered_map(
                    pool, collector.process_case, iter_input_cases(case_files, corpus, cases_in), window
                )
                files.update(
                    write_shards(
                        out, CASE_DIR, "cases", stream(case_items, cases_in, _check_case), cfg.shard_size
                    )
                )
            except BaseException:
                collector.stopping.set()  # workers finish the request in flight and start nothing new
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    finally:
        bar.close()
    return files


def _teacher_manifest(
    corpus: Path,
    input_files: list[Path],
    files: dict,
    config: dict,
    counts: dict,
    prompts: Prompts,
    tally: Tally,
    cost: Any,
) -> dict:
    files = dict(sorted(files.items()))
    corpus_manifest = (
        {"path": MANIFEST, "sha256": sha256_file(corpus / MANIFEST)}
        if (corpus / MANIFEST).is_file()
        else None
    )
    return build_manifest(
        stage="teacher",
        config=config,
        inputs={p.relative_to(corpus).as_posix(): sha256_file(p) for p in input_files},
        outputs=files,
        counts=counts,
        extra={
            "schema": MANIFEST_SCHEMA,
            "collector": COLLECTOR,
            "files": files,
            "corpus_manifest": corpus_manifest,
            "prompts": prompts.digests,
            "tokens": {
                "prompt": tally.prompt_tokens,
                "completion": tally.completion_tokens,
                "total": tally.prompt_tokens + tally.completion_tokens,
                "responses_without_usage": tally.without_usage,
            },
            "cost": cost,
            "sidecars": {
                f"{CACHE_DIR}/{CACHE_FILE}": "responses by request digest (append-only; reused by reruns)",
                f"{CACHE_DIR}/{ATTEMPTS_FILE}": "every HTTP attempt with latency (append-only; not digested)",
            },
        },
    )


def _sanitized_view(diag: ExampleSanitizer, view: dict) -> dict:
    """The config view with every string that came from the user sanitized (digests kept as they are)."""
    prices = view["prices"]
    out = diag.diagnostic({k: v for k, v in view.items() if k != "prices"})
    out["prices"] = {"path": diag.diagnostic(prices["path"]), "sha256": prices["sha256"]}
    return out


def _count_lines(path: Path) -> int:
    with open(path, "rb") as fh:
        return sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 20), b""))


def _repo_label(path: Path) -> str:
    """A repo-relative path when the file is in the repository, else its name (no machine paths)."""
    try:
        return path.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return path.name


def _check_run(record: dict) -> None:
    try:
        Run.from_dict(record)
    except RecordError as exc:  # a collector bug, never bad input
        raise CollectError(f"run {record.get('run_id')}: output does not validate: {exc}") from None


def _check_case(record: dict) -> None:
    try:
        validate_policy_case(record)
    except RecordError as exc:
        raise CollectError(f"case {record.get('case_id')}: output does not validate: {exc}") from None


def _counts(runs_in: Intake, cases_in: Intake, tally: Tally, roles: tuple[str, ...]) -> dict:
    """Counts that add up, checked: input = written + quarantined; per role the statuses sum to the
    items it saw; call statuses sum to the lines of teacher_calls.jsonl."""
    for intake in (runs_in, cases_in):
        if intake.n != intake.written + len(intake.rejects):
            raise CollectError(
                f"{intake.kind}s: {intake.n} in, {intake.written} written + {len(intake.rejects)} quarantined"
            )
    role_counts = {}
    for role in ROLES:
        if role not in roles:
            continue
        c = tally.roles.get(role, Counter(dict.fromkeys(ROLE_STATUSES, 0)))
        items = runs_in.written if role in ("writer", "reader") else cases_in.written
        if sum(c.values()) != items or tally.role_items[role] != items:
            raise CollectError(f"{role}: {items} items, {sum(c.values())} outcomes")
        role_counts[role] = {"items": items, **{s: c[s] for s in ROLE_STATUSES}}
    calls = {"total": tally.n_calls, **{s: tally.calls[s] for s in CALL_STATUSES}}
    if sum(tally.calls.values()) != tally.n_calls:
        raise CollectError(f"calls: {tally.n_calls} recorded, {sum(tally.calls.values())} by status")
    return {
        "runs": runs_in.to_dict(),
        "policy_cases": cases_in.to_dict(),
        "roles": role_counts,
        "calls": calls,
    }
