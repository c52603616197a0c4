"""Run-level integrity: the environment ledger's chain, and its bijection with the trajectory.

The environment ledger is authoritative only if it is intact *and* accounts for exactly the calls
the harness executed: same call ids in the same order, same tools, same argument digests, same
statuses. A truncated ledger whose head was re-sealed still fails here.
"""

from __future__ import annotations

from dataclasses import dataclass

from data_prep.canonical import StrictJSONError
from data_prep.chain import args_digest, verify_ledger
from data_prep.records import Run


@dataclass(frozen=True, slots=True)
class IntegrityProblem:
    field: str
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.field}: {self.kind}: {self.detail}"


def verify_run(run: Run) -> IntegrityProblem | None:
    """None when the run's environment ledger is intact and matches its trajectory."""
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
