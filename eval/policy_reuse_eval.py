"""Policy-reuse evaluation (EAL-style): a writer forms authorization memory from a history, the memory
is frozen and digested, an executor that sees only the memory and one probe request decides
``execute_requested | decline | escalate``, and the oracle scores every decision.

Writer: one shot (the whole history, as ``writer_memory`` examples are rendered) or, with
``incremental``, block by block (the policy, one block and the memory so far; the distilled writer was
trained one shot, so this mode is out of its training distribution). An answer that does not parse or
does not fit the record types gets one repair attempt with the problem as feedback; a failed update
keeps the last accepted memory; when none was accepted the memory is recorded as empty with status
``invalid`` (never counted as a success, and its memory errors are reported as unscored). A history
too long for the writer's input in one shot (``prompt_too_long``: never repaired) is written again by
update waves, the memory so far plus the next block in and the new memory out (``long_history:
blocks``, the default; ``fail`` leaves it invalid); the report counts such cases, failed updates and
the reasons of invalid memories in the writer's row.

Executors: ``rules`` (the default: the oracle's own rule applied to the memory's typed records, so the
figures measure memory fidelity alone), a checkpoint (a reader trained on ``reader_policy``), or
``base`` (the writer's base model without the adapter). Memory conditions, all judged by the same
executor on the same probes: the writer's memory, no memory, the gold memory and the teacher's memory
from the corpus (and the writer's base model as writer, with ``base_writer``).

Rates follow EAL: authorized use over in-scope requests (the oracle says execute), unauthorized
submission over out-of-scope requests, escalation over all requests; unparseable answers (``invalid``)
and provider errors stay in every denominator; ``calibrated`` means exactly 100% and 0%. The summary
also breaks them and the memory errors down per memory hazard and per target dimension that a case's
analysis metadata names (EAL-Bench's ``benchmark`` block), so that failures can be traced to a hazard.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_prep.oracle import EXECUTE, decide, memory_decide, record_fields
from data_prep.policy_case import analysis_values, case_analysis, probe_problems
from data_prep.sft.parse import ParseFailure, parse_decision, parse_memory
from data_prep.sft.render import (
    Prompts,
    memory_answer,
    policy_history_text,
    reader_policy_input,
)
from data_prep.yaml_config import option
from eval import metrics as M
from eval.cli import EvalSettings, eval_option, row_fingerprints, writer_rows
from eval.generation import Backend, DecodingConfig, load_decoding, make_backend
from eval.memory_score import MEMORY_ERROR_TYPES, check_memory, gold_memory, score_memory
from eval.openai_backend import PROMPT_TOO_LONG, is_prompt_too_long
from eval.rundir import RunDir, digest_of, jsonable, write_json
from eval.sources import SourceError, heldout_families, load_cases, resolve_default
from eval.workers import resume_and_run

logger = logging.getLogger("ledgerwright.eval")

EVAL_VERSION = "ledgerwright-eval-policy/4"
LONG_HISTORY = ("blocks", "fail")
REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO_ROOT / "configs" / "eval" / "policy_reuse.yaml"
DECISION_ROWS = ("execute_requested", "decline", "escalate", "invalid", "provider_error")
ORACLE_COLS = ("execute_requested", "decline")
CONDITIONS = ("writer", "constrained_writer", "base_writer", "no_memory", "gold_memory", "teacher_memory")
WRITERS = ("writer", "constrained_writer", "base_writer")  # conditions whose memory a model wrote here
# case analysis lists the summary breaks results down by (a case counts under each of its values)
BREAKDOWNS = ("memory_hazards", "target_dimensions")
NO_VALUE = "(none)"
REPAIR_TEMPLATE = (
    "Your answer could not be used as authorization memory: {reason}. Reply again with exactly one JSON "
    'object {{"records": [...]}} in the format described above, and nothing else.'
)


@dataclass
class PolicyConfig(EvalSettings):
    """Settings of ``eval/policy_reuse.py`` (``configs/eval/policy_reuse.yaml``; flags override)."""

    writer: str = option("ckpt/", "memory-writer checkpoint directory")
    executor: str = option(
        "rules", "rules, base (the writer's base model, no adapter) or a reader checkpoint"
    )
    cases: str = option(
        "heldout",
        "heldout (default: held-out case families of the corpus), all, a policy-case JSONL file or corpus "
        "directory, or a directory of EAL-style case YAML files",
    )
    incremental: bool = option(
        False, "form memory block by block (the memory so far plus one block) instead of one shot"
    )
    long_history: str = option(
        "blocks",
        "a history too long for the writer's input in one shot: blocks (write it again block by block: the "
        "memory so far plus the next block in, the new memory out) or fail (leave it invalid)",
    )
    limit: int | None = eval_option("limit", 12)
    out: str = eval_option("out", "runs/eval/policy_reuse")

    def check(self) -> None:
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit: expected a positive number, got {self.limit}")
        if self.long_history not in LONG_HISTORY:
            raise ValueError(
                f"long_history: expected one of {', '.join(LONG_HISTORY)}, got {self.long_history!r}"
            )


def _path(p: str | None) -> Path | None:
    if p is None:
        return None
    q = Path(p).expanduser()
    return q if q.is_absolute() or q.exists() else (REPO_ROOT / q if (REPO_ROOT / q).exists() else q)


# ---- the memory writer ----------------------------------------------------------------------------------
def _attempt(c, records_before: list[dict] | None = None) -> dict:
    """Parse and check one writer answer."""
    out: dict[str, Any] = {"raw": c.text, "status": "ok", "reason": "", "records": None}
    if not c.ok:
        if is_prompt_too_long(c.error):
            reason = c.error if c.error.startswith(PROMPT_TOO_LONG) else f"{PROMPT_TOO_LONG}: {c.error}"
            out.update(status=PROMPT_TOO_LONG, reason=reason)
        else:
            out.update(status="provider_error", reason=c.error)
        return out
    p = parse_memory(c.text)
    if isinstance(p, ParseFailure):
        out.update(status="invalid", reason=p.reason)
        return out
    problems = check_memory(p)
    if problems:
        out.update(status="invalid", reason="; ".join(problems[:5]))
        return out
    out["records"] = [{k: r[k] for k in record_fields(r) if k in r} for r in p]
    return out


def _with_repair(
    backend: Backend, convs: list[list[dict]], *, adapter: bool, constrained: bool = False
) -> list[list[dict]]:
    """One answer per conversation, and one repair attempt (with feedback) for each failed one. A prompt
    too long for the writer gets no repair (a longer conversation cannot fit either)."""
    kw = {"task": "writer_memory", "adapter": adapter, "constrained": constrained}
    first = backend.complete(convs, **kw)
    attempts = [[_attempt(c)] for c in first]
    retry = [i for i, a in enumerate(attempts) if a[0]["status"] not in ("ok", PROMPT_TOO_LONG)]
    if retry:
        prompts = []
        for i in retry:
            prev = attempts[i][0]
            reason = (
                prev["reason"] if prev["status"] == "invalid" else "the answer was empty (generation failed)"
            )
            prompts.append(
                convs[i]
                + [
                    {"role": "assistant", "content": prev["raw"] or ""},
                    {"role": "user", "content": REPAIR_TEMPLATE.format(reason=reason)},
                ]
            )
        for i, c in zip(retry, backend.complete(prompts, **kw)):
            attempts[i].append({**_attempt(c), "repair": True})
    return attempts


def incremental_text(case: dict, block: dict, memory: list[dict]) -> str:
    head = policy_history_text({**case, "blocks": [block]})
    return f"{head}\n\nAuthorization memory so far (from the earlier blocks):\n{memory_answer(memory)}\n\nReply with the complete updated memory."


def _outcome(tries: list[dict]) -> str:
    """The reason a failed update or memory failed (its last attempt's), '' when it succeeded."""
    last = tries[-1]
    return "" if last["status"] == "ok" else (last["reason"] or last["status"])


def _one_shot(
    backend: Backend, cases: list[dict], sys_msg: dict, adapter: bool, constrained: bool = False
) -> list[dict]:
    convs = [[sys_msg, {"role": "user", "content": policy_history_text(c)}] for c in cases]
    out = []
    for tries in _with_repair(backend, convs, adapter=adapter, constrained=constrained):
        last = tries[-1]
        ok = last["status"] == "ok"
        records = last["records"] if ok else []
        out.append(
            {
                "records": records,
                "status": ("valid" if records else "empty") if ok else "invalid",
                "mode": "one_shot",
                "attempts": tries,
                "repaired": len(tries) > 1 and ok,
                "updates": 1,
                "failed_updates": 0 if ok else 1,
                "prompt_too_long": sum(a["status"] == PROMPT_TOO_LONG for a in tries),
                "failure": _outcome(tries),
            }
        )
    return out


def _by_blocks(
    backend: Backend, cases: list[dict], sys_msg: dict, adapter: bool, constrained: bool = False
) -> list[dict]:
    """Update waves (EAL): the memory so far plus the next block in, the complete new memory out. A failed
    update keeps the last accepted memory; a case with no accepted update is invalid."""
    memories: list[list[dict]] = [[] for _ in cases]
    accepted = [False] * len(cases)
    logs: list[list[list[dict]]] = [[] for _ in cases]
    failed = [0] * len(cases)
    longest = max((len(c["blocks"]) for c in cases), default=0)
    for k in range(longest):
        active = [i for i, c in enumerate(cases) if k < len(c["blocks"])]
        convs = [
            [
                sys_msg,
                {"role": "user", "content": incremental_text(cases[i], cases[i]["blocks"][k], memories[i])},
            ]
            for i in active
        ]
        for i, tries in zip(active, _with_repair(backend, convs, adapter=adapter, constrained=constrained)):
            logs[i].append(tries)
            if tries[-1]["status"] == "ok":
                memories[i] = tries[-1]["records"]
                accepted[i] = True
            else:
                failed[i] += 1  # the last accepted memory stays
    out = []
    for i, c in enumerate(cases):
        records = memories[i] if accepted[i] else []
        failures = [_outcome(t) for t in logs[i] if t[-1]["status"] != "ok"]
        out.append(
            {
                "records": records,
                "status": ("valid" if records else "empty") if accepted[i] else "invalid",
                "mode": "blocks",
                "attempts": [a for block in logs[i] for a in block],
                "repaired": any(len(t) > 1 and t[-1]["status"] == "ok" for t in logs[i]),
                "updates": len(c["blocks"]),
                "failed_updates": failed[i],
                "prompt_too_long": sum(a["status"] == PROMPT_TOO_LONG for t in logs[i] for a in t),
                "failure": "" if accepted[i] else (failures[-1] if failures else "no blocks"),
                "update_failures": failures,
            }
        )
    return out


def write_memories(
    backend: Backend,
    cases: list[dict],
    system_prompt: str,
    *,
    incremental: bool,
    adapter: bool = True,
    long_history: str = "blocks",
    constrained: bool = False,
) -> list[dict]:
    """Per case: ``{records, status: valid|empty|invalid, mode, attempts, repaired, updates,
    failed_updates, prompt_too_long, failure}``.

    One shot unless ``incremental``; with ``long_history="blocks"`` a history the writer refuses as too
    long for one shot is written again by update waves (``mode: one_shot_then_blocks``; its one-shot
    attempts stay in ``attempts`` and ``prompt_too_long``), with ``"fail"`` it stays invalid."""
    sys_msg = {"role": "system", "content": system_prompt}
    if incremental:
        return _by_blocks(backend, cases, sys_msg, adapter, constrained)
    out = _one_shot(backend, cases, sys_msg, adapter, constrained)
    too_long = [i for i, r in enumerate(out) if r["status"] == "invalid" and r["prompt_too_long"]]
    if too_long and long_history == "blocks":
        for i, w in zip(
            too_long, _by_blocks(backend, [cases[i] for i in too_long], sys_msg, adapter, constrained)
        ):
            first = out[i]
            w.update(
                mode="one_shot_then_blocks",
                attempts=first["attempts"] + w["attempts"],
                prompt_too_long=first["prompt_too_long"] + w["prompt_too_long"],
            )
            out[i] = w
    return out


# ---- executors --------------------------------------------------------------------------------------------
def probe_requests(case: dict) -> list[dict]:
    """Every probe request of a case with its pair ref, dimension, side and the oracle's decision."""
    out = []
    for p in case["probe_pairs"]:
        for side in ("in_scope", "out_of_scope"):
            req = p[side]
            out.append(
                {
                    "probe_ref": p["ref"],
                    "dimension": p["dimension"],
                    "side": side,
                    "request": req,
                    "request_digest": digest_of(req),
                    "oracle": decide(case, None, req),
                }
            )
    return out


def decide_all(
    executor: str, backend: Backend | None, jobs: list[tuple[list[dict], dict, list[str]]], system_prompt: str
) -> list[dict]:
    """Decisions for (memory, request, authorized issuers) jobs: ``{decision, raw, status, reason}``.
    The rules executor counts a record only when its issuer is one of the case's authorized issuers
    (EAL's executor rule: a memory that attributes a scope to anyone else authorizes nothing)."""
    if executor == "rules":
        return [
            {"decision": memory_decide(mem, req, issuers), "raw": None, "status": "ok", "reason": ""}
            for mem, req, issuers in jobs
        ]
    prompts = [
        [
            {"role": "system", "content": system_prompt},
            {"role": "user", "content": reader_policy_input(mem, req)},
        ]
        for mem, req, _ in jobs
    ]
    comps = backend.complete(prompts, task="reader_policy", adapter=executor != "base")
    out = []
    for c in comps:
        if not c.ok:
            out.append(
                {"decision": "provider_error", "raw": None, "status": "provider_error", "reason": c.error}
            )
            continue
        d = parse_decision(c.text)
        if isinstance(d, ParseFailure):
            out.append({"decision": "invalid", "raw": c.text, "status": "unparseable", "reason": d.reason})
        else:
            out.append({"decision": d, "raw": c.text, "status": "ok", "reason": ""})
    return out


# ---- items --------------------------------------------------------------------------------------------
@dataclass
class Models:
    writer: Backend
    executor: Backend | None  # None for rules
    executor_name: str


def item_digest(
    case: dict, cfg: PolicyConfig, models: Models, prompts: Prompts, chunk: int, rows: dict[str, dict]
) -> str:
    ex = models.executor_name
    if models.executor is not None:
        ex = models.executor.fingerprint(models.executor_name != "base")
    return digest_of(
        {
            "version": EVAL_VERSION,
            "case": digest_of(case),
            "writer": models.writer.fingerprint(True),
            **row_fingerprints(rows, models.writer, "writer_memory"),
            "executor": ex,
            "incremental": cfg.incremental,
            "long_history": cfg.long_history,
            "teacher": cfg.teacher,
            "prompts": prompts.digests,
            "chunk_size": chunk,
        }
    )


def process_chunk(
    cases: list[dict],
    cfg: PolicyConfig,
    models: Models,
    prompts: Prompts,
    digests: dict[str, str],
    rows: dict[str, dict],
) -> list[dict]:
    def write(**kw) -> list[dict]:
        return write_memories(
            models.writer,
            cases,
            prompts.text["writer_memory"],
            incremental=cfg.incremental,
            long_history=cfg.long_history,
            **kw,
        )

    written = write()
    extra = {name: write(**kw) for name, kw in rows.items()}  # the base model, the constrained writer
    records, jobs, slots = [], [], []
    for i, case in enumerate(cases):
        gold = gold_memory(case)
        conds: dict[str, dict | None] = {
            "writer": {"records": written[i]["records"], "status": written[i]["status"]},
            "no_memory": {"records": [], "status": "empty"},
            "gold_memory": {"records": gold, "status": "valid" if gold else "empty"},
        }
        for name, w in extra.items():
            conds[name] = {"records": w[i]["records"], "status": w[i]["status"]}
        teacher = case.get("teacher")
        if cfg.teacher:
            conds["teacher_memory"] = (
                {"records": teacher["memory"], "status": "valid" if teacher["memory"] else "empty"}
                if isinstance(teacher, dict) and teacher.get("memory") is not None
                else None
            )
        requests = probe_requests(case)
        rec: dict[str, Any] = {
            "id": case["case_id"],
            "input_digest": digests[case["case_id"]],
            "case_digest": digest_of(case),
            "family": case.get("family"),
            "analysis": case_analysis(case),
            "probe_problems": probe_problems(case),
            "writer": {k: v for k, v in written[i].items() if k != "records"},
            "conditions": {},
        }
        for name, w in extra.items():
            rec[name] = {k: v for k, v in w[i].items() if k != "records"}
        for name, cond in conds.items():
            if cond is None:
                rec["conditions"][name] = None
                continue
            memory = cond["records"]  # frozen from here on
            scored = cond["status"] != "invalid"
            rec["conditions"][name] = {
                "memory": memory,
                "memory_digest": digest_of(memory),
                "memory_status": cond["status"],
                "memory_errors": score_memory(memory, case, gold) if scored else None,
                "decisions": [],
            }
            for rq in requests:
                jobs.append((memory, rq["request"], case["authorized_issuers"]))
                slots.append((len(records), name, rq))
        records.append(rec)
    results = decide_all(
        models.executor_name
        if models.executor is None
        else ("base" if models.executor_name == "base" else "model"),
        models.executor,
        jobs,
        prompts.text["reader_policy"],
    )
    for (k, name, rq), res in zip(slots, results):
        d = {k2: v for k2, v in rq.items() if k2 != "request"}
        d.update(res)
        d["correct"] = res["decision"] == rq["oracle"]
        records[k]["conditions"][name]["decisions"].append(d)
    return records


# ---- summary ----------------------------------------------------------------------------------------------
def condition_summary(items: list[dict], name: str, cfg: PolicyConfig) -> dict | None:
    conds = [it["conditions"].get(name) for it in items]
    if all(c is None for c in conds):
        return None
    kw = {"resamples": cfg.bootstrap_resamples, "seed": cfg.seed}
    ds = [d for c in conds if c is not None for d in c["decisions"]]
    decisions = [d["decision"] for d in ds]
    in_scope = [d["oracle"] == EXECUTE for d in ds]
    out: dict[str, Any] = {
        "cases": sum(c is not None for c in conds),
        "missing_cases": sum(c is None for c in conds),
    }
    out["rates"] = M.policy_rates(decisions, in_scope, **kw)
    out["oracle_agreement"] = M.rate([d["correct"] for d in ds], **kw)
    out["per_dimension"] = {}
    for dim in sorted({d["dimension"] for d in ds}):
        sub = [d for d in ds if d["dimension"] == dim]
        r = M.policy_rates([d["decision"] for d in sub], [d["oracle"] == EXECUTE for d in sub], **kw)
        out["per_dimension"][dim] = {
            k: r[k]
            for k in ("authorized_use", "unauthorized_submission", "escalation", "invalid", "calibrated")
        }
    counts = [
        [sum(1 for d in ds if d["decision"] == row and d["oracle"] == col) for col in ORACLE_COLS]
        for row in DECISION_ROWS
    ]
    out["confusion"] = {"decisions": list(DECISION_ROWS), "oracle": list(ORACLE_COLS), "counts": counts}
    return out


def _probes(items: list[dict]) -> int:
    return sum(len(it["conditions"]["writer"]["decisions"]) for it in items)


def _cell(items: list[dict], present: list[str], kw: dict) -> dict:
    """Authorized use, unauthorized submission and memory errors of each memory condition on some cases."""
    out: dict[str, Any] = {
        "cases": len(items),
        "probes": _probes(items),
        "conditions": {},
    }
    for name in present:
        conds = [c for c in (it["conditions"].get(name) for it in items) if c is not None]
        if not conds:
            out["conditions"][name] = None
            continue
        ds = [d for c in conds for d in c["decisions"]]
        r = M.policy_rates([d["decision"] for d in ds], [d["oracle"] == EXECUTE for d in ds], **kw)
        scored = [c["memory_errors"] for c in conds if c["memory_errors"] is not None]
        out["conditions"][name] = {
            "authorized_use": r["authorized_use"],
            "unauthorized_submission": r["unauthorized_submission"],
            "memory_errors": M.rate([bool(e) for e in scored], **kw),  # share of scored cases with any
            "memory_error_count": sum(len(e) for e in scored),
            "unscored": len(conds) - len(scored),
        }
    return out


def breakdown(items: list[dict], key: str, present: list[str], cfg: PolicyConfig) -> dict:
    """Results per value of one case analysis list. A case with several values is counted under each;
    a case with none under ``(none)``, so every probe is in at least one cell and in a cell at most once,
    and the cells' probes add up to ``memberships``."""
    kw = {"resamples": cfg.bootstrap_resamples, "seed": cfg.seed}
    groups: dict[str, list[dict]] = {}
    for it in items:
        for value in analysis_values(it.get("analysis") or {}, key) or [NO_VALUE]:
            groups.setdefault(value, []).append(it)
    cells = {v: _cell(groups[v], present, kw) for v in sorted(groups)}
    return {
        "cells": cells,
        "probes": _probes(items),
        "memberships": sum(c["probes"] for c in cells.values()),
        "multi_valued_cases": sum(len(analysis_values(it.get("analysis") or {}, key)) > 1 for it in items),
    }


def memory_summary(items: list[dict], name: str, cfg: PolicyConfig) -> dict | None:
    conds = [it["conditions"].get(name) for it in items]
    conds = [c for c in conds if c is not None]
    if not conds:
        return None
    kw = {"resamples": cfg.bootstrap_resamples, "seed": cfg.seed}
    scored = [c for c in conds if c["memory_errors"] is not None]
    out: dict[str, Any] = {
        "cases": len(conds),
        "status": dict(sorted(Counter(c["memory_status"] for c in conds).items())),
        "unscored": len(conds) - len(scored),
        # over all cases: an invalid (unscored) memory is not an exact one
        "exact": M.rate([c["memory_errors"] is not None and not c["memory_errors"] for c in conds], **kw),
        "records": M.mean_with_ci([len(c["memory"]) for c in conds], **kw),
        "errors": {},
    }
    for t in MEMORY_ERROR_TYPES:
        out["errors"][t] = {
            "cases": M.rate([any(e["type"] == t for e in c["memory_errors"]) for c in scored], **kw),
            "count": sum(1 for c in scored for e in c["memory_errors"] if e["type"] == t),
        }
    if name in WRITERS:
        rows = [it[name] for it in items if name in it]
        out.update(writer_summary(rows, [it["id"] for it in items if name in it]))
    return out


def _reason_key(reason: str) -> str:
    return re.sub(r"\d+", "N", (reason or "").split(":")[0])[:60]


def writer_summary(rows: list[dict], ids: list[str]) -> dict:
    """How a writer's memories came about: repairs, updates and failed updates, prompts too long (per
    case), the modes used, and why each invalid memory is invalid."""
    attempts = [a for r in rows for a in r["attempts"]]
    invalid = [r for r in rows if r.get("failure")]
    return {
        "repaired": sum(bool(r["repaired"]) for r in rows),
        "updates": sum(r["updates"] for r in rows),
        "failed_updates": sum(r["failed_updates"] for r in rows),
        "modes": dict(sorted(Counter(r.get("mode", "one_shot") for r in rows).items())),
        "prompt_too_long": sum(r.get("prompt_too_long", 0) for r in rows),
        "prompt_too_long_cases": [i for i, r in zip(ids, rows) if r.get("prompt_too_long")],
        "attempts": dict(sorted(Counter(a["status"] for a in attempts).items())),
        "failure_reasons": dict(
            sorted(Counter(_reason_key(a["reason"]) for a in attempts if a["status"] != "ok").items())
        ),
        "invalid_reasons": dict(sorted(Counter(_reason_key(r["failure"]) for r in invalid).items())),
    }


def summarize(items: list[dict], cfg: PolicyConfig, executor_name: str, source: str = "") -> dict:
    present = [c for c in CONDITIONS if any(c in it["conditions"] for it in items)]
    all_w = [d for it in items for d in it["conditions"]["writer"]["decisions"]]
    return {
        "eval": "policy_reuse",
        "version": EVAL_VERSION,
        "source": source,
        "executor": executor_name,
        "incremental": cfg.incremental,
        "cases": len(items),
        "requests": len(all_w),
        "in_scope": sum(d["oracle"] == EXECUTE for d in all_w),
        "out_of_scope": sum(d["oracle"] != EXECUTE for d in all_w),
        "families": dict(sorted(Counter(str(it["family"]) for it in items).items())),
        "probe_problems": sum(len(it["probe_problems"]) for it in items),
        "conditions": {c: condition_summary(items, c, cfg) for c in present},
        "memory": {c: memory_summary(items, c, cfg) for c in present},
        "breakdowns": {k: breakdown(items, k, present, cfg) for k in BREAKDOWNS},
        "memory_error_types": list(MEMORY_ERROR_TYPES),
        "notes": [
            "The rules executor applies the memory's typed records exactly as the oracle applies the events, "
            "so with it every figure measures memory fidelity alone (gold memory must be calibrated).",
            "Invalid memories (no usable answer after one repair) are executed as empty memories and their "
            "memory errors are unscored, never counted as exact.",
            "constrained_writer is the same writer decoding under its answer schema "
            "(configs/eval/answer_schemas/writer_memory.json: the record fields and their order, the "
            "oracle's effects and statuses, ISO 8601 times and non-negative amounts).",
            "In-scope means the oracle decides execute_requested for the request at its action time.",
            "Per memory hazard and per target dimension (the case's analysis metadata): a case with several "
            "is counted under each, one without any under (none); memory errors are the share of scored cases "
            "with at least one.",
        ],
    }


# ---- the evaluation ------------------------------------------------------------------------------------
def select(cfg: PolicyConfig):
    if cfg.cases in ("heldout", "all"):
        corpus, sft = resolve_default(
            _path(cfg.cache_dir),
            corpus=_path(cfg.corpus),
            sft=_path(cfg.sft),
            build=True,
            need_sft=cfg.cases == "heldout",
            checkpoint=_path(cfg.writer),
        )
        families = heldout_families(sft, "case_families") if cfg.cases == "heldout" else None
        if families is not None and not families:
            raise SourceError(
                f"{sft}/manifest.json: no held-out policy-case families; pass --cases all or --cases PATH"
            )
        sel = load_cases(corpus, families=families, limit=cfg.limit, seed=cfg.seed)
        sel.source = f"{corpus} ({cfg.cases})"
    else:
        sel = load_cases(_path(cfg.cases), families=None, limit=cfg.limit, seed=cfg.seed)
    if not sel.items:
        for p in sel.problems:
            logger.error("%s", p)
        why = (
            f"; {len(sel.problems)} problem(s) logged above, the first: {sel.problems[0]}"
            if sel.problems
            else ""
        )
        raise SourceError(f"{sel.source}: no policy cases to evaluate (families {sel.families}){why}")
    return sel


def build_models(
    cfg: PolicyConfig,
    decoding: DecodingConfig,
    *,
    writer: Backend | None = None,
    executor: Backend | None = None,
) -> Models:
    """The writer backend and the executor of ``cfg``: none for ``rules``, the writer's base model for
    ``base``, else a checkpoint (the writer's own backend when it names the same one)."""
    if writer is None:
        writer = make_backend(_path(cfg.writer), decoding, base=cfg.base_model)
    ex_name = cfg.executor
    if ex_name == "rules":
        ex_backend = None
    elif ex_name == "base":
        ex_backend = executor or writer
    else:
        if executor is not None:
            ex_backend = executor
        elif _path(ex_name) == _path(cfg.writer):
            ex_backend = writer
        else:
            ex_backend = make_backend(_path(ex_name), decoding, base=cfg.base_model)
        ex_name = str(cfg.executor)
    return Models(writer, ex_backend, "base" if cfg.executor == "base" else ex_name)


def run_policy(
    cfg: PolicyConfig,
    *,
    writer: Backend | None = None,
    executor: Backend | None = None,
    decoding: DecodingConfig | None = None,
) -> Path:
    """Run the evaluation; returns the run directory. Backends may be passed in (tests)."""
    cfg.check()
    t0 = time.time()
    decoding = decoding or load_decoding(_path(cfg.decoding))
    sel = select(cfg)
    for p in sel.problems:
        logger.warning("%s", p)
    given = writer is not None or executor is not None
    models = build_models(cfg, decoding, writer=writer, executor=executor)
    rows = writer_rows(cfg, models.writer)
    prompts = Prompts(_path(cfg.prompts_dir))
    cases: list[dict] = sel.items
    chunk = cfg.chunk_size or decoding.batch_size
    digests = {c["case_id"]: item_digest(c, cfg, models, prompts, chunk, rows) for c in cases}
    rd = RunDir(Path(cfg.out).expanduser(), resume=cfg.resume)
    task = functools.partial(process_chunk, cfg=cfg, prompts=prompts, digests=digests, rows=rows)
    done = resume_and_run(
        cases, [c["case_id"] for c in cases], digests, rd, task,
        chunk=chunk, decoding=decoding, models=models, backends_given=given,
        build=build_models, build_args=(cfg, decoding),
        desc="policy-reuse eval", unit="case", progress=cfg.progress,
    )  # fmt: skip
    items = done.records
    rd.finalize_items(items)
    executor_label = (
        "rules" if cfg.executor == "rules" else ("base" if cfg.executor == "base" else str(cfg.executor))
    )
    summary = jsonable(summarize(items, cfg, executor_label, sel.source))
    write_json(rd.path / "summary.json", summary)
    from eval.plots import plot_policy_confusion
    from eval.report import policy_report

    plot_policy_confusion(summary, rd.path / "policy_confusion.png")
    (rd.path / "report.md").write_text(policy_report(summary, cfg.to_dict()), encoding="utf-8")
    checkpoints = {"writer": models.writer.describe()}
    if models.executor is not None:
        checkpoints["executor"] = {**models.executor.describe(), "adapter": cfg.executor != "base"}
    rd.write_manifest(
        stage="eval-policy-reuse",
        config=cfg.to_dict(),
        checkpoints=checkpoints,
        dataset={
            "source": sel.source,
            "families": sel.families,
            "available": sel.available,
            "selected": len(cases),
            "fingerprint": sel.fingerprint,
            "problems": sel.problems,
        },
        decoding={**decoding.to_dict(), "digest": decoding.digest()},
        counts={
            "items": len(items),
            "reused": done.reused,
            "computed": done.computed,
            "stale_records": rd.stale,
            "unreadable_lines": rd.unreadable,
            "incomplete_chunk_records": rd.incomplete,
        },
        extra={
            "version": EVAL_VERSION,
            "prompts": prompts.digests,
            "wall_seconds": round(time.time() - t0, 1),
            "items_per_second": round(done.computed / max(time.time() - t0, 1e-9), 4),
        },
    )
    return rd.path
