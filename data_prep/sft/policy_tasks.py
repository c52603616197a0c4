"""Policy-case tasks of the build: authorization-memory writer and policy-execution reader.

Writer (memory): a teacher memory is kept when an executor that applies it decides every probe of
the case exactly as the oracle does from the events (the policy analogue of verdict match).
Reader (policy execution): one example per probe request, with the memory the executor would see
(the gold memory: the records in force at the end of the history) and the oracle's decision.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from data_prep.oracle import decide, gold_memory_from_events, memory_decide
from data_prep.policy_case import iter_policy_case_file
from data_prep.records import LineError
from data_prep.sft import POLICY_TASKS
from data_prep.sft.render import render_reader_policy, render_writer_memory
from data_prep.sft.split import split_of

if TYPE_CHECKING:
    from data_prep.sft.pipeline import Builder


def probe_requests(case: dict) -> list[tuple[str, dict]]:
    """``(probe id, request)`` for every in-scope and out-of-scope request of the case."""
    out = []
    for pair in case["probe_pairs"]:
        out.append((f"{pair['ref']}:in", pair["in_scope"]))
        out.append((f"{pair['ref']}:out", pair["out_of_scope"]))
    return out


def memory_mismatches(memory: list[dict], case: dict, probes: list[tuple[str, dict]]) -> list[str]:
    return [pid for pid, req in probes if memory_decide(memory, req) != decide(case, None, req)]


def add_policy_cases(b: Builder, files: list[Path]) -> None:
    seen: dict[str, str] = {}
    heldout = set(b.cfg.heldout_case_families)
    bar = tqdm(total=None, desc="policy cases", unit="case", disable=not b.progress, file=sys.stderr)
    for path in files:
        for lineno, value in iter_policy_case_file(path):
            bar.update(1)
            if isinstance(value, LineError):
                b.reject(
                    POLICY_TASKS,
                    {
                        "file": value.path,
                        "line": value.line,
                        "field": value.field,
                        "problem": value.problem,
                        "reason": "invalid_record",
                    },
                )
                continue
            case = value
            cid = case["case_id"]
            if cid in seen:
                b.reject(
                    POLICY_TASKS,
                    {
                        "file": str(path),
                        "line": lineno,
                        "field": "case_id",
                        "problem": f"duplicate case id (first at {seen[cid]})",
                        "reason": "duplicate_case_id",
                    },
                )
                continue
            seen[cid] = f"{path}:{lineno}"
            _add_case(b, case, heldout)
    bar.close()


def _add_case(b: Builder, case: dict, heldout: set[str]) -> None:
    cid, family = case["case_id"], case["family"]
    split = split_of(family, cid, heldout, b.cfg)
    b.family_split["case_families"].setdefault(
        family, "heldout" if split == "heldout" else "train+validation"
    )
    probes = probe_requests(case)
    hidden = list(case.get("metadata", {}).get("hidden_identifiers", []))
    gold = {pid: decide(case, None, req) for pid, req in probes}
    gold_memory = case.get("gold_memory") or gold_memory_from_events(case)

    # writer: authorization memory
    b.counts.add_input("writer_memory")
    wid = f"writer_memory:{cid}"
    teacher = (case.get("teacher") or {}).get("memory")
    if teacher is None:
        b.filter("writer_memory", wid, cid, "no_teacher_memory")
    elif b.cfg.writer_memory_require_decision_match and (bad := memory_mismatches(teacher, case, probes)):
        b.filter("writer_memory", wid, cid, "memory_decision_mismatch", ",".join(bad))
    else:  # sanitized with every other example, after rendering (Builder.emit)
        b.emit(
            "writer_memory",
            wid,
            cid,
            family,
            split,
            render_writer_memory(case, teacher, b.prompts.text["writer_memory"]),
            hidden,
        )

    # reader: policy execution, one example per probe request
    b.counts.add_input("reader_policy", len(probes))
    for pid, req in probes:
        eid = f"reader_policy:{cid}:{pid}"
        if memory_decide(gold_memory, req) != gold[pid]:
            # the gold memory (records in force at the end) must decide like the events; if not, the
            # probe depends on history the memory cannot hold, and the example would teach a guess.
            b.filter("reader_policy", eid, cid, "gold_memory_disagrees_with_oracle", pid)
            continue
        messages = render_reader_policy(gold_memory, req, gold[pid], b.prompts.text["reader_policy"])
        b.emit("reader_policy", eid, cid, family, split, messages, hidden)
