"""Run-level integrity: the environment ledger's chain, its bijection with the trajectory, and the
run seal over everything else.

The environment ledger is authoritative only if it is intact *and* accounts for exactly the calls
the harness executed: same call ids in the same order, same tools, same argument digests, same
statuses. A truncated ledger whose head was re-sealed still fails here.

The chain binds only what the environment recorded; the **run seal** (``seal.digest``) binds the rest:
a domain-separated digest of everything in the record but the seal itself: the task (messages and
tools), the trajectory with its results, the environment ledger head (which binds every ledger record
through the chain), the model ledger, labels, teacher outputs, provenance and metadata. Every stage
that changes a run re-seals it (synth, importer, teacher). An unsigned seal
shows accidents and partial edits; only a signature (``seal.signature``, Ed25519, see
``data_prep.signing``) resists someone who rewrites and re-seals the whole record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from data_prep.canonical import DIGEST_PREFIX, StrictJSONError, canonical_bytes, domain_hash
from data_prep.chain import args_digest, verify_ledger
from data_prep.records import Run

RUN_SEAL_DOMAIN = "run-seal/v1"
_SEAL_HASH = domain_hash(RUN_SEAL_DOMAIN)


@dataclass(frozen=True, slots=True)
class IntegrityProblem:
    field: str
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.field}: {self.kind}: {self.detail}"


def run_seal_digest(run: Run) -> str:
    """The run seal of a run (StrictJSONError when a sealed value is not I-JSON). Computed from the
    typed record, so defaults (an absent ``result``, ``rationale``...) seal the same as explicit ones."""
    h = _SEAL_HASH.copy()
    h.update(canonical_bytes(_seal_dict(run)))
    return DIGEST_PREFIX + h.hexdigest()


def seal_run(run: dict, signer: Any = None) -> dict:
    """``run`` (a ``ledger-run/v1`` dict) with a fresh ``seal``: its digest, and a signature when
    ``signer`` is given. The last step of every stage that writes or changes a run (synth, import,
    teacher)."""
    out = {k: v for k, v in run.items() if k != "seal"}
    sealed = run_seal_digest(Run.from_dict(out))
    seal: dict = {"digest": sealed}
    if signer is not None:
        seal["signature"] = signer.sign(sealed)
    out["seal"] = seal
    return out


def _seal_dict(run: Run) -> dict:
    return {
        "schema": run.schema,
        "run_id": run.run_id,
        "workflow_id": run.workflow_id,
        "family": run.family,
        "domain": run.domain,
        "task": run.task,
        "trajectory": [
            {"call_id": c.call_id, "tool": c.tool, "arguments": c.arguments, "status": c.status, "result": c.result}
            for c in run.trajectory
        ],
        "env_ledger_head": run.env_ledger.get("head"),
        "model_ledger": run.model_ledger,
        "labels": {
            "sabotage": run.labels.sabotage,
            "type": run.labels.type,
            "target_call_ids": run.labels.target_call_ids,
            "writer_errors": run.labels.writer_errors,
        },
        "teacher": None
        if run.teacher is None
        else {
            "writer_model": run.teacher.writer_model,
            "reader_model": run.teacher.reader_model,
            "verdict": None
            if run.teacher.verdict is None
            else {
                "label": run.teacher.verdict.label,
                "suspicion": run.teacher.verdict.suspicion,
                "cited_call_ids": run.teacher.verdict.cited_call_ids,
                "rationale": run.teacher.verdict.rationale,
            },
        },
        "metadata": run.metadata,
        "provenance": run.provenance,
    }


def check_seal(run: Run, *, required: bool = False, public_key: Any = None) -> IntegrityProblem | None:
    """None when the run's seal matches its content (and, with ``public_key``, carries a valid
    signature by that key). Without a seal: a problem only when ``required`` or a key is given."""
    seal = run.seal
    if seal is None:
        if required or public_key is not None:
            return IntegrityProblem("seal", "unsealed", "the run has no seal (pass --allow-unsealed for legacy runs)")
        return None
    try:
        want = run_seal_digest(run)
    except StrictJSONError as exc:
        return IntegrityProblem(f"{exc.path}", "malformed", exc.problem)
    if seal.get("digest") != want:
        return IntegrityProblem(
            "seal.digest", "edited", "the run seal does not match the run's content (a sealed field changed)"
        )
    if public_key is not None:
        from data_prep.signing import verify_signature

        why = verify_signature(public_key, want, seal.get("signature"))
        if why is not None:
            return IntegrityProblem("seal.signature", "forged", why)
    return None


def verify_run(
    run: Run, *, require_seal: bool = False, public_key: Any = None, check_seal_digest: bool = True
) -> IntegrityProblem | None:
    """None when the run's environment ledger is intact, matches its trajectory, and its seal (when
    present, or when ``require_seal``/``public_key`` ask for one) matches its content.
    ``check_seal_digest=False``: the chain only (a consumer whose input's sealed manifest already
    proves the files are what the sealing stage wrote)."""
    problem = _verify_chain(run)
    if problem is not None or not check_seal_digest:
        return problem
    return check_seal(run, required=require_seal, public_key=public_key)


def _verify_chain(run: Run) -> IntegrityProblem | None:
    brk = verify_ledger(run.run_id, run.env_ledger)
    if brk is not None:
        return IntegrityProblem(brk.field, brk.kind, brk.detail)
    records = run.env_ledger["records"]
    ids = [c.call_id for c in run.trajectory]
    if len(set(ids)) != len(ids):
        dup = next(i for i, c in enumerate(ids) if c in ids[:i])
        return IntegrityProblem(f"trajectory[{dup}].call_id", "duplicated", f"call id {ids[dup]!r} repeats")
    if len(records) != len(run.trajectory):
        kind = "truncated" if len(records) < len(run.trajectory) else "inserted"
        return IntegrityProblem(
            "env_ledger.records",
            kind,
            f"{len(records)} ledger records for {len(run.trajectory)} executed calls",
        )
    for i, (call, rec) in enumerate(zip(run.trajectory, records)):
        if rec["call_id"] == call.call_id and rec["tool"] == call.tool and rec["status"] == call.status:
            try:
                if rec["args_digest"] == args_digest(call.arguments):
                    continue
            except StrictJSONError as exc:
                return IntegrityProblem(f"trajectory[{i}].arguments{exc.path[1:]}", "malformed", exc.problem)
        where = f"env_ledger.records[{i}]"
        if rec["call_id"] != call.call_id:
            return IntegrityProblem(
                where, "reordered", f"call id {rec['call_id']!r}, trajectory has {call.call_id!r}"
            )
        if rec["tool"] != call.tool:
            return IntegrityProblem(
                where + ".tool", "edited", f"{rec['tool']!r}, trajectory has {call.tool!r}"
            )
        if rec["status"] != call.status:
            return IntegrityProblem(
                where + ".status", "edited", f"{rec['status']!r}, trajectory has {call.status!r}"
            )
        return IntegrityProblem(where + ".args_digest", "edited", "does not match the call's arguments")
    return None
