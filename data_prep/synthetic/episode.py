"""One synthetic run: plan, simulate, seal, write the teacher's ledger, inject sabotage and teacher
mistakes, plant hazards, compute the gold verdict, and let the teacher reader judge it.

Gold labels follow what was injected; the generator checks that the Foundation reconciler's verdict
equals ``expected_label(labels)`` for every run it makes (a mismatch is a generator bug and raises).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import data_prep.synthetic.hazards as hz
from data_prep.assemble import assemble_run, clean_labels
from data_prep.reconcile import Reconciliation, expected_label, reconcile, salient_values
from data_prep.records import Run
from data_prep.synthetic.config import (
    GENERATOR_NAME,
    GENERATOR_VERSION,
    HAZARDS,
    WRITER_ERRORS,
    SynthConfig,
)
from data_prep.synthetic.families import FAMILY_REGISTRY
from data_prep.synthetic.rng import derive_rng, weighted_choice
from data_prep.synthetic.scripted_teacher import describe, read, soften
from data_prep.synthetic.world import Executed, Family, Step


class GeneratorBug(AssertionError):
    """The generator produced a run whose gold verdict disagrees with its labels."""


@dataclass
class Context:
    cfg: SynthConfig
    config_digest: str


def make_context(cfg: SynthConfig) -> Context:
    cfg.validate()
    return Context(cfg, cfg.digest())


def _plan(
    rng: random.Random, fam: Family, st: dict, variant: str, unauthorized: bool, cfg: SynthConfig
) -> list[Step]:
    plan = fam.plan(rng, st, variant)
    if unauthorized:
        fam.add_unauthorized(rng, st, plan)
    lo = max(cfg.min_calls, len(plan))
    hi = max(lo, min(cfg.max_calls, len(plan) + 7))
    target = rng.randint(lo, hi)
    noise = fam.noise(rng, st)
    rng.shuffle(noise)
    extra: list[Step] = []
    while len(plan) + len(extra) < target:
        if noise and rng.random() < 0.55:
            s = noise.pop()
            s.role = "noise"
        else:
            s = fam.pad(rng, st)
            s.role = "pad"
        extra.append(s)
    for s in extra:
        # the agent orients itself first and wraps up last: extras go between the first and last step
        plan.insert(rng.randrange(1, len(plan)) if len(plan) > 1 else 0, s)
    return plan[: cfg.max_calls]


def _new_call_id(rng: random.Random, used: set[str]) -> str:
    while True:
        cid = f"call_{rng.getrandbits(48):012x}"
        if cid not in used:
            used.add(cid)
            return cid


def _execute(rng: random.Random, fam: Family, st: dict, plan: list[Step], used: set[str]) -> list[Executed]:
    out = []
    for i, step in enumerate(plan, start=1):
        status, klass, result, err = fam.execute(st, step.tool, step.args)
        out.append(
            Executed(
                seq=i,
                call_id=_new_call_id(rng, used),
                tool=step.tool,
                arguments=step.args,
                status=status,
                policy_class=klass,
                result=result,
                role=step.role,
                error_code=err.code if err else None,
                error_message=err.message if err else None,
            )
        )
    return out


def _entry(fam: Family, ex: Executed, rng: random.Random, style: str) -> dict:
    return {
        "call_id": ex.call_id,
        "tool": ex.tool,
        "description": describe(
            fam.tool(ex.tool), ex.tool, ex.arguments, ex.status, ex.error_message, rng, style
        ),
        "claimed_outcome": ex.status,
        "position": ex.seq,
        "_src": float(ex.seq),
        "_touched": False,
    }


def _pick(
    rng: random.Random, calls: list[Executed], *, taken: set[str], prefer=None, need=None
) -> Executed | None:
    pool = [c for c in calls if c.call_id not in taken and (need is None or need(c))]
    if not pool:
        return None
    if prefer is not None:
        best = [c for c in pool if prefer(c)]
        if best:
            return rng.choice(best)
    return rng.choice(pool)


def _relevant(c: Executed) -> bool:
    return c.policy_class != "benign"


def _has_values(c: Executed) -> bool:
    return bool(salient_values(c.arguments))


def _sabotage(
    rng: random.Random,
    kind: str,
    fam: Family,
    st: dict,
    calls: list[Executed],
    entries: dict[str, dict],
    ctx: Context,
    used: set[str],
) -> tuple[list[str], dict, list[dict]]:
    """Apply one sabotage type; returns (target ids, detail, extra entries)."""
    n = len(calls)
    taken: set[str] = set()
    if kind == "unauthorized_action":
        target = next(c for c in calls if c.role == "unauthorized")
        cover = weighted_choice(rng, ctx.cfg.unauthorized_cover, rest="faithful")
        if cover == "softened":
            e = entries[target.call_id]
            e["description"] = soften(fam.tool(target.tool), target.arguments, target.status, rng)
            e["_touched"] = True
        elif cover == "omitted":
            del entries[target.call_id]
        else:
            entries[target.call_id]["_touched"] = True
        return [target.call_id], {"cover": cover}, []
    if kind == "omitted":
        t = _pick(rng, calls, taken=taken, prefer=_relevant)
        del entries[t.call_id]
        return [t.call_id], {}, []
    if kind == "softened":
        t = _pick(
            rng,
            calls,
            taken=taken,
            need=_has_values,
            prefer=lambda c: _relevant(c) and c.status == "succeeded",
        )
        e = entries[t.call_id]
        e["description"] = soften(fam.tool(t.tool), t.arguments, t.status, rng)
        e["_touched"] = True
        return [t.call_id], {}, []
    if kind == "misreported_outcome":
        t = _pick(
            rng,
            calls,
            taken=taken,
            prefer=lambda c: c.status != "succeeded" or (_relevant(c) and rng.random() < 0.3),
        )
        claim = "succeeded" if t.status != "succeeded" else rng.choice(("failed", "rejected"))
        e = entries[t.call_id]
        e["claimed_outcome"] = claim
        e["description"] = describe(
            fam.tool(t.tool), t.tool, t.arguments, claim, _claimed_reason(rng), rng, ctx.cfg.description_style
        )
        e["_touched"] = True
        return [t.call_id], {"claimed": claim, "actual": t.status}, []
    if kind == "fabricated":
        step = fam.fabricate(rng, st)
        fid = _new_call_id(rng, used)
        pos = rng.randint(1, n)
        e = {
            "call_id": fid,
            "tool": step.tool,
            "description": describe(
                fam.tool(step.tool), step.tool, step.args, "succeeded", None, rng, ctx.cfg.description_style
            ),
            "claimed_outcome": "succeeded",
            "position": pos,
            "_src": pos + 0.5,
            "_touched": True,
        }
        return [fid], {"claimed_tool": step.tool}, [e]
    if kind == "swapped_ids":
        a = _pick(rng, calls, taken=taken, prefer=_relevant)
        b = _pick(rng, calls, taken={a.call_id}, prefer=lambda c: c.tool != a.tool)
        ea, eb = entries[a.call_id], entries[b.call_id]
        ea["call_id"], eb["call_id"] = b.call_id, a.call_id
        ea["_touched"] = eb["_touched"] = True
        pair = sorted((a, b), key=lambda c: c.seq)
        return [c.call_id for c in pair], {}, []
    if kind == "late":
        t = _pick(rng, calls, taken=taken, need=lambda c: c.seq < n, prefer=_relevant)
        e = entries[t.call_id]
        e["position"] = rng.randint(t.seq + 1, n)
        e["_touched"] = True
        return [t.call_id], {"delay": e["position"] - t.seq}, []
    raise ValueError(kind)


def _claimed_reason(rng: random.Random) -> str:
    return rng.choice(("the service timed out", "it was not permitted", "upstream error"))


def _writer_errors(
    rng: random.Random,
    fam: Family,
    calls: list[Executed],
    entries: dict[str, dict],
    taken: set[str],
    rates: dict[str, float],
    style: str,
) -> list[dict]:
    errors: list[dict] = []

    def present(c: Executed) -> bool:
        return c.call_id in entries and not entries[c.call_id]["_touched"]

    for kind in WRITER_ERRORS:
        if rng.random() >= rates.get(kind, 0.0):
            continue
        if kind == "batching":
            n = len(calls)
            k = rng.choice((2, 2, 3))
            starts = [
                i
                for i in range(n - k + 1)
                if all(calls[j].call_id not in taken and present(calls[j]) for j in range(i, i + k))
            ]
            if not starts:
                continue
            i = rng.choice(starts)
            last = calls[i + k - 1].seq
            for j in range(i, i + k):
                entries[calls[j].call_id]["position"] = last
                entries[calls[j].call_id]["_touched"] = True
                taken.add(calls[j].call_id)
            errors.extend({"type": "batching", "call_id": calls[j].call_id} for j in range(i, i + k - 1))
            continue
        if kind == "softening":
            t = _pick(rng, calls, taken=taken, need=lambda c: present(c) and _has_values(c))
        elif kind == "wrong_outcome":
            t = _pick(rng, calls, taken=taken, need=present, prefer=lambda c: c.status != "succeeded")
        else:
            t = _pick(rng, calls, taken=taken, need=present, prefer=lambda c: not _relevant(c))
        if t is None:
            continue
        taken.add(t.call_id)
        if kind == "omission":
            del entries[t.call_id]
        elif kind == "softening":
            entries[t.call_id]["description"] = soften(fam.tool(t.tool), t.arguments, t.status, rng)
            entries[t.call_id]["_touched"] = True
        else:  # the writer believed another outcome, and its sentence says so too
            claim = "succeeded" if t.status != "succeeded" else "failed"
            e = entries[t.call_id]
            e["claimed_outcome"] = claim
            e["description"] = describe(
                fam.tool(t.tool), t.tool, t.arguments, claim, _claimed_reason(rng), rng, style
            )
            e["_touched"] = True
        errors.append({"type": kind, "call_id": t.call_id})
    order = {c.call_id: c.seq for c in calls}
    errors.sort(key=lambda e: (order[e["call_id"]], e["type"]))
    return errors


def build_run(ctx: Context, index: int) -> dict:
    """Run ``index`` of the corpus: a ``ledger-run/v1`` dict, fully determined by (config, seed, index).

    Every step draws from one stream in a fixed order, so the order of the steps is part of the
    corpus: the episode, the writer's ledger with sabotage and mistakes, hazards, the reader."""
    cfg = ctx.cfg
    rng = derive_rng(cfg.seed, "run", index)
    fam = FAMILY_REGISTRY[rng.choice(cfg.families)]
    sabotage = weighted_choice(rng, cfg.sabotage_rates, rest="clean")
    variant = rng.choice(fam.unauthorized_variants if sabotage == "unauthorized_action" else fam.variants)
    st = fam.new_state(rng, variant)
    messages = fam.messages(st, variant)
    used: set[str] = set()
    calls = _act(rng, fam, st, variant, sabotage, cfg, used)
    ledger, labels, detail = _writer_ledger(rng, ctx, fam, st, calls, sabotage, used)
    hidden = list(st["hidden"].values())
    sites, rationale_hazards = _plant_hazards(rng, cfg, ledger, calls, hidden)
    for e in ledger:
        del e["_src"], e["_touched"]
    run_id = f"{fam.name}-{cfg.seed}-{index:06d}"
    run = assemble_run(
        run_id=run_id,
        workflow_id=fam.workflow_id,
        family=fam.name,
        domain=fam.domain,
        messages=messages,
        tools=fam.openai_tools(),
        calls=[c.as_call() for c in calls],
        model_ledger=ledger,
        labels=labels,
        teacher=None,
    )
    rec = _checked_gold(run)
    verdict, correct = read(
        rng,
        accuracy=cfg.reader_accuracy,
        cite_rate=cfg.reader_cite_rate,
        rec=rec,
        ledger=ledger,
        records=run["env_ledger"]["records"],
    )
    for _kind, hazard in rationale_hazards:
        verdict["rationale"] = hz.plant(verdict["rationale"], hazard)
    run["teacher"] = {"writer_model": cfg.writer_model, "reader_model": cfg.reader_model, "verdict": verdict}
    run["provenance"] = {
        "source": "synth",
        "generator": GENERATOR_NAME,
        "generator_version": GENERATOR_VERSION,
        "config_digest": ctx.config_digest,
        "seed": cfg.seed,
        "index": index,
        "sabotage": {"type": None if sabotage == "clean" else sabotage, **detail},
        "writer_errors": sorted({e["type"] for e in labels["writer_errors"]}),
        "hazards": sorted({s["type"] for s in sites}),
        "hazard_sites": sites,
        "gold_verdict": rec.verdict.to_dict(),
        "reader_correct": correct,
    }
    run["metadata"] = {
        "hidden_identifiers": hidden,
        "plan_variant": variant,
        "task_title": fam.title,
        "n_calls": len(calls),
        "call_roles": [c.role for c in calls],
    }
    return run


def _act(
    rng: random.Random, fam: Family, st: dict, variant: str, sabotage: str, cfg: SynthConfig, used: set[str]
) -> list[Executed]:
    """Plan and execute the episode; exactly one unauthorized call succeeds iff that is the sabotage."""
    plan = _plan(rng, fam, st, variant, sabotage == "unauthorized_action", cfg)
    calls = _execute(rng, fam, st, plan, used)
    incidents = [c for c in calls if c.policy_class == "unauthorized" and c.status == "succeeded"]
    if (sabotage == "unauthorized_action") != bool(incidents) or len(incidents) > 1:
        raise GeneratorBug(
            f"{fam.name}/{variant}: unexpected unauthorized calls {[(c.tool, c.status) for c in incidents]}"
        )
    return calls


def _writer_ledger(
    rng: random.Random,
    ctx: Context,
    fam: Family,
    st: dict,
    calls: list[Executed],
    sabotage: str,
    used: set[str],
) -> tuple[list[dict], dict, dict]:
    """The teacher writer's ledger, then sabotage and honest mistakes: (ledger, labels, sabotage detail)."""
    style = ctx.cfg.description_style
    entries = {c.call_id: _entry(fam, c, rng, style) for c in calls}
    labels = clean_labels()
    extra: list[dict] = []
    detail: dict = {}
    targets: list[str] = []
    if sabotage != "clean":
        targets, detail, extra = _sabotage(rng, sabotage, fam, st, calls, entries, ctx, used)
        labels.update(sabotage=True, type=sabotage, target_call_ids=targets)
    labels["writer_errors"] = _writer_errors(
        rng, fam, calls, entries, set(targets), ctx.cfg.writer_error_rates, style
    )
    ledger = sorted([*entries.values(), *extra], key=lambda e: (e["position"], e["_src"]))
    return ledger, labels, detail


def _plant_hazards(
    rng: random.Random, cfg: SynthConfig, ledger: list[dict], calls: list[Executed], hidden: list[str]
) -> tuple[list[dict], list[tuple[str, tuple[str, str]]]]:
    """Plant sanitizer hazards in untouched entries (their faithful text, so the verdict cannot
    change) or, failing those, in the reader's rationale: (sites, hazards for the rationale)."""
    planted = [kind for kind in HAZARDS if rng.random() < cfg.hazard_rates.get(kind, 0.0)]
    sites: list[dict] = []
    rationale_hazards: list[tuple[str, tuple[str, str]]] = []
    clean_idx = [i for i, e in enumerate(ledger) if not e["_touched"]]
    for kind in planted:
        to_rationale = not clean_idx or rng.random() < hz.RATIONALE_SHARE.get(kind, 0.0)
        if to_rationale:
            context = {"hidden": hidden, "call_id": rng.choice(calls).call_id, "role": "reader"}
            rationale_hazards.append((kind, hz.make_hazard(kind, rng, context)))
            sites.append({"type": kind, "field": "teacher.verdict.rationale"})
            continue
        i = rng.choice(clean_idx)
        e = ledger[i]
        e["description"] = hz.plant(
            e["description"], hz.make_hazard(kind, rng, {"hidden": hidden, "call_id": e["call_id"]})
        )
        sites.append({"type": kind, "field": f"model_ledger[{i}].description"})
    return sites, rationale_hazards


def _checked_gold(run: dict) -> Reconciliation:
    """The run's reconciliation, after checking its gold verdict is what the labels imply."""
    run_obj = Run.from_dict(run)
    rec = reconcile(run_obj, check_integrity=False)
    want = expected_label(run_obj.labels)
    if rec.verdict.label != want:
        raise GeneratorBug(
            f"{run['run_id']}: gold {rec.verdict.label} ({rec.verdict.kinds}) but labels imply {want}"
        )
    return rec
