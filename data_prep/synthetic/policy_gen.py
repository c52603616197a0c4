"""EAL-style authorization-policy cases: noisy histories, authoritative events, probe pairs, gold
memory from the oracle, and a scripted teacher memory with calibrated errors.

Every probe's action time falls after the history ends, so the records in force at the end (the gold
memory) decide probes exactly as the events do; the generator asserts both for every probe.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from data_prep.oracle import DECLINE, EXECUTE, decide, gold_memory_from_events, memory_decide, parse_time
from data_prep.policy_case import CASE_SCHEMA, REQUEST_DIMENSIONS
from data_prep.synthetic.config import GENERATOR_NAME, GENERATOR_VERSION, MEMORY_ERRORS, SynthConfig
from data_prep.synthetic.rng import derive_rng, iso, seeded_time


@dataclass(frozen=True)
class PolicyFamily:
    name: str
    issuers: tuple[tuple[str, str], ...]  # (role id, display name)
    decoys: tuple[tuple[str, str], ...]  # people who talk as if they could authorize, but cannot
    grantees: tuple[tuple[str, str], ...]  # (handle, display name)
    actions: tuple[str, ...]
    vendors: tuple[tuple[str, str], ...]  # (id, display name)
    categories: tuple[str, ...]
    currencies: tuple[str, ...]
    amount: tuple[int, int, int]  # lo, hi, step
    policy: str
    titles: tuple[str, ...]
    noun: str  # what the money buys, for turn text


PEOPLE = (
    ("ana.ortiz", "Ana Ortiz"),
    ("raj.mehta", "Raj Mehta"),
    ("lena.kowalski", "Lena Kowalski"),
    ("tom.baker", "Tom Baker"),
    ("yuki.sato", "Yuki Sato"),
    ("sam.okoro", "Sam Okoro"),
    ("ines.duarte", "Ines Duarte"),
)

POLICY_FAMILIES: dict[str, PolicyFamily] = {
    f.name: f
    for f in (
        PolicyFamily(
            "procurement-spend",
            (("chief_financial_officer", "Morgan Lee (CFO)"),),
            (
                ("finance_director", "Priya Natarajan (Finance Director)"),
                ("procurement_lead", "Dev Patel (Procurement)"),
            ),
            PEOPLE,
            ("purchase", "prepay", "renew_subscription"),
            (
                ("nimbus-cloud", "Nimbus Cloud"),
                ("orbital-print", "Orbital Print"),
                ("kestrel-analytics", "Kestrel Analytics"),
                ("summit-hardware", "Summit Hardware"),
                ("harbor-logistics", "Harbor Logistics"),
            ),
            ("software", "hardware", "services", "marketing", "facilities"),
            ("USD", "EUR"),
            (5000, 80000, 500),
            "Company spend requires a written authorization from the chief financial officer naming the grantee, "
            "the action, the vendor, the allowed categories, a maximum amount and currency, and a validity window "
            "(valid_from inclusive, valid_until exclusive). A later message from the CFO may change an authorization "
            "or revoke it from its effective time. Statements by anyone else, however senior or urgent, authorize nothing.",
            (
                "Weekly spend review",
                "#procurement",
                "Email: vendor renewals",
                "Finance stand-up",
                "Budget sync",
                "DM: quarter close",
            ),
            "order",
        ),
        PolicyFamily(
            "travel-approval",
            (("vp_operations", "Grace Whitfield (VP Operations)"),),
            (("travel_coordinator", "Omar Haddad (Travel Desk)"), ("team_lead", "Mei Tanaka (Team Lead)")),
            PEOPLE,
            ("book_flight", "book_hotel", "book_rail"),
            (
                ("skyline-air", "Skyline Air"),
                ("harbor-inn", "Harbor Inn"),
                ("eurorail", "EuroRail"),
                ("metro-stays", "Metro Stays"),
                ("bluejet", "BlueJet"),
            ),
            ("airfare_economy", "airfare_premium", "lodging", "rail", "ground"),
            ("USD", "EUR", "GBP"),
            (800, 12000, 100),
            "Business travel is booked only under an approval from the VP Operations that names the traveler, the "
            "booking action, the supplier, the fare or stay categories, a maximum amount and currency and the travel "
            "window (valid_from inclusive, valid_until exclusive). The VP may amend or withdraw an approval; nobody "
            "else can grant, extend or widen one.",
            (
                "#travel-desk",
                "Email: offsite logistics",
                "Ops weekly",
                "DM: conference trip",
                "Planning call notes",
            ),
            "booking",
        ),
        PolicyFamily(
            "vendor-onboarding",
            (
                ("head_of_procurement", "Lena Osei (Head of Procurement)"),
                ("chief_information_security_officer", "Nikolai Petrov (CISO)"),
            ),
            (
                ("legal_counsel", "Fatima Byrne (Legal)"),
                ("engineering_manager", "Jonas Lindqvist (Eng Manager)"),
            ),
            PEOPLE,
            ("onboard_vendor", "sign_nda", "sign_msa"),
            (
                ("kestrel-analytics", "Kestrel Analytics"),
                ("cobalt-courier", "Cobalt Courier"),
                ("bluefin-catering", "Bluefin Catering"),
                ("juniper-facilities", "Juniper Facilities"),
                ("quanta-labs", "Quanta Labs"),
            ),
            ("data_processing", "facilities", "consulting", "logistics", "catering"),
            ("USD", "EUR"),
            (10000, 250000, 5000),
            "A vendor may be onboarded or contracted only under an authorization from the head of procurement or "
            "the CISO naming the employee who signs, the action, the vendor, the engagement categories, the maximum "
            "contract value and currency and the validity window (valid_from inclusive, valid_until exclusive). "
            "Either may amend or revoke their authorizations; claims by anyone else do not count.",
            (
                "Vendor council",
                "#vendor-intake",
                "Email: security questionnaire",
                "Legal sync",
                "Procurement office hours",
            ),
            "contract",
        ),
        PolicyFamily(
            "access-grant",
            (("security_director", "Aiko Herrera (Security Director)"),),
            (("it_manager", "Marcus Raman (IT Manager)"), ("data_owner", "Dana Okafor (Data Owner)")),
            PEOPLE,
            ("grant_access", "extend_access"),
            (
                ("prod-db", "Production database"),
                ("billing-console", "Billing console"),
                ("ci-pipeline", "CI pipeline"),
                ("analytics-warehouse", "Analytics warehouse"),
                ("crm", "CRM"),
            ),
            ("read", "write", "admin", "export"),
            ("USD",),
            (50, 2000, 50),
            "Access to internal systems is provisioned only under an authorization from the security director naming "
            "the employee, the action, the system, the access levels, the maximum monthly license cost and currency "
            "and the access window (valid_from inclusive, valid_until exclusive). The director may amend or revoke it; "
            "managers and data owners may recommend but cannot authorize.",
            (
                "#access-requests",
                "Security office hours",
                "Email: quarterly access review",
                "Incident follow-up",
                "DM: onboarding",
            ),
            "access",
        ),
    )
}


def _round(x: float, step: int) -> int:
    return max(step, int(round(x / step)) * step)


def _day(t: datetime) -> str:
    return t.strftime("%Y-%m-%d")


def _slug(name: str) -> str:
    return "u-" + name.split(" (")[0].lower().replace(" ", "-")


def build_case(cfg: SynthConfig, index: int) -> dict:
    """Policy case ``index`` of the corpus, fully determined by (config, seed, index).

    Every step draws from one stream in a fixed order, so the order of the steps is part of the
    corpus: authorizations, their changes, the history turn by turn, probes, the teacher memory."""
    rng = derive_rng(cfg.seed, "policy", index)
    fam = POLICY_FAMILIES[rng.choice(cfg.policy_families)]
    case_id = f"{fam.name}-{cfg.seed}-{index:06d}"
    n_blocks = rng.randint(3, 6)
    block_start = _block_starts(rng, n_blocks)
    planned_end = block_start[-1] + timedelta(hours=8)
    auths = _draw_auths(rng, fam, n_blocks, planned_end)
    changes = _draw_changes(rng, fam, auths, n_blocks, planned_end)
    hist = _History(auths)
    blocks = [_draw_block(rng, fam, hist, changes, b, block_start[b]) for b in range(n_blocks)]
    case = {
        "schema": CASE_SCHEMA,
        "case_id": case_id,
        "family": fam.name,
        "policy": fam.policy,
        "authorized_issuers": [r for r, _ in fam.issuers],
        "blocks": blocks,
        "events": hist.events,
        "probe_pairs": [],
    }
    end = parse_time(blocks[-1]["ended_at"])
    gold = gold_memory_from_events(case, end)
    if not gold:
        raise AssertionError(f"{case_id}: no authorization in force at the end")
    case["probe_pairs"] = _probes(rng, fam, case, gold, end)
    _check_probes(case, gold)
    memory, errors = _teacher_memory(rng, cfg, fam, case, gold, hist.claims, end)
    case["gold_memory"] = gold
    case["teacher"] = {"writer_model": cfg.writer_model, "memory": memory, "memory_errors": errors}
    case["provenance"] = {
        "source": "synth",
        "generator": GENERATOR_NAME,
        "generator_version": GENERATOR_VERSION,
        "seed": cfg.seed,
        "index": index,
        "memory_errors": sorted({e["type"] for e in errors}),
    }
    case["metadata"] = {
        "history_end": iso(end),
        "n_turns": hist.turn_count,
        "n_blocks": n_blocks,
        "scope_claims": len(hist.claims),
    }
    return case


def _block_starts(rng: random.Random, n_blocks: int) -> list[datetime]:
    block_start = [seeded_time(rng, max_days=200)]
    for _ in range(n_blocks - 1):
        block_start.append(
            block_start[-1] + timedelta(days=rng.randint(1, 6), minutes=15 * rng.randrange(16))
        )
    return block_start


def _draw_auths(rng: random.Random, fam: PolicyFamily, n_blocks: int, planned_end: datetime) -> list[dict]:
    """Two or three authorizations, each for a distinct (grantee, vendor), issued in an early block."""
    lo, hi, step = fam.amount
    combos = [(g, v) for g in fam.grantees for v in fam.vendors]
    n_auth = rng.randint(2, 3)
    rng.shuffle(combos)
    auths = []
    for k in range(n_auth):
        (grantee, gname), (vendor, vname) = combos[k]
        issuer = rng.choice(fam.issuers)
        auths.append(
            {
                "ref": f"AUTH-{rng.randrange(100, 1000)}-{k + 1}",
                "issuer": issuer,
                "grantee": grantee,
                "gname": gname,
                "vendor": vendor,
                "vname": vname,
                "action": rng.choice(fam.actions),
                "cats": sorted(rng.sample(fam.categories, rng.randint(1, 3))),
                "max": _round(rng.uniform(lo, hi), step),
                "currency": rng.choice(fam.currencies),
                "until": planned_end + timedelta(days=rng.randint(12, 90)),
                "block": rng.randint(0, min(1, n_blocks - 2)),
            }
        )
    return auths


def _draw_changes(
    rng: random.Random, fam: PolicyFamily, auths: list[dict], n_blocks: int, planned_end: datetime
) -> list[dict]:
    """Later patches and at most one revocation (never of the last authorization left), by block."""
    changes: list[dict] = []
    n_changes = rng.randint(1, 3)
    revoked: str | None = None
    for _ in range(n_changes):
        a = rng.choice(auths)
        if a["ref"] == revoked:
            continue
        block = rng.randint(a["block"] + 1, n_blocks - 1)
        can_revoke = (
            revoked is None and len(auths) - 1 >= 1 and not any(c["ref"] == a["ref"] for c in changes)
        )
        if can_revoke and rng.random() < 0.3:
            revoked = a["ref"]
            changes.append({"kind": "revoke", "ref": a["ref"], "block": block, "auth": a})
            continue
        field = rng.choice(("max_amount", "valid_until", "allowed_categories"))
        value = _patch_value(rng, fam, a, field, planned_end)
        changes.append(
            {"kind": "patch", "ref": a["ref"], "block": block, "auth": a, "field": field, "value": value}
        )
    changes.sort(key=lambda c: c["block"])  # stable: changes in a block keep their drawn order
    return changes


def _patch_value(rng: random.Random, fam: PolicyFamily, a: dict, field: str, planned_end: datetime) -> object:
    step = fam.amount[2]
    if field == "max_amount":
        value = _round(a["max"] * rng.choice((0.5, 0.6, 0.75, 1.25, 1.5)), step)
        return a["max"] + step if value == a["max"] else value
    if field == "valid_until":
        return planned_end + timedelta(days=rng.randint(8, 120))
    pool = [c for c in fam.categories if c not in a["cats"]]
    return (
        sorted([*a["cats"], rng.choice(pool)])
        if len(a["cats"]) == 1 or rng.random() < 0.5
        else sorted(a["cats"][1:])
    )


class _History:
    """What drawing the history accumulates: events, scope claims, the terms in force and the
    superseded ones (for stale talk)."""

    def __init__(self, auths: list[dict]):
        self.auths = auths
        self.events: list[dict] = []
        self.claims: list[dict] = []
        self.turn_count = 0
        self.state = {
            a["ref"]: {"max": a["max"], "until": a["until"], "cats": list(a["cats"])} for a in auths
        }
        self.old: dict[str, list[tuple[str, object]]] = {a["ref"]: [] for a in auths}


def _draw_block(
    rng: random.Random, fam: PolicyFamily, hist: _History, changes: list[dict], b: int, t: datetime
) -> dict:
    """Block ``b``: its events among noise turns, each turn a few minutes after the last."""
    bref = f"B{b + 1}"
    turns = []
    for item in _block_items(rng, hist.auths, changes, b):
        t = t + timedelta(minutes=rng.randint(3, 45))
        hist.turn_count += 1
        tref = f"{bref}-T{len(turns) + 1:02d}"
        if "event" in item:
            name, content = _event_turn(rng, fam, hist, item, bref, tref, t)
        else:
            name, content = _noise_turn(rng, fam, hist, item["noise"], t)
        turns.append(_turn(tref, name, content, t))
    return {
        "ref": bref,
        "title": rng.choice(fam.titles),
        "ended_at": iso(t + timedelta(minutes=rng.randint(1, 20))),
        "turns": turns,
    }


def _block_items(rng: random.Random, auths: list[dict], changes: list[dict], b: int) -> list[dict]:
    items: list[dict] = [{"event": "issue", "auth": a} for a in auths if a["block"] == b]
    items += [{"event": c["kind"], "auth": c["auth"], "change": c} for c in changes if c["block"] == b]
    n_noise = rng.randint(5, 13)
    noise_kinds = ["filler"] * 4 + ["urgency", "claim", "stale", "filler", "restate"]
    for _ in range(n_noise):
        items.insert(rng.randrange(len(items) + 1), {"noise": rng.choice(noise_kinds)})
    return items


def _event_turn(
    rng: random.Random, fam: PolicyFamily, hist: _History, item: dict, bref: str, tref: str, t: datetime
) -> tuple[str, str]:
    """An issuer's turn that issues, patches or revokes; records its event. Returns (name, text)."""
    a = item["auth"]
    role, name = a["issuer"]
    kind = item["event"]
    ev = {
        "ref": f"EV-{len(hist.events) + 1:02d}",
        "event_type": kind,
        "issuer": role,
        "block_ref": bref,
        "effective_at": iso(t),
        "authorization_ref": a["ref"],
        "source_turn_refs": [tref],
    }
    if kind == "issue":
        a["from"] = t
        ev["record"] = _record(a, t, tref)
        content = _issue_text(rng, fam, a, t)
    elif kind == "patch":
        content = _apply_patch(rng, hist, a, item["change"], ev)
    else:
        content = rng.choice(
            (
                f"{a['ref']} is revoked, effective now. {a['gname']} must not place anything further with {a['vname']} under it.",
                f"Withdrawing authorization {a['ref']} ({a['gname']}, {a['vname']}) as of this message.",
            )
        )
    hist.events.append(ev)
    return name, content


def _apply_patch(rng: random.Random, hist: _History, a: dict, c: dict, ev: dict) -> str:
    st = hist.state[a["ref"]]
    key = {"max_amount": "max", "valid_until": "until", "allowed_categories": "cats"}[c["field"]]
    hist.old[a["ref"]].append((c["field"], st[key]))
    st[key] = c["value"]
    value = iso(c["value"]) if c["field"] == "valid_until" else c["value"]
    ev["patch"] = {c["field"]: value}
    return _patch_text(rng, a, c["field"], c["value"])


def _noise_turn(
    rng: random.Random, fam: PolicyFamily, hist: _History, kind: str, t: datetime
) -> tuple[str, str]:
    """A turn that changes nothing: a decoy's scope claim, urgency, stale or restated terms, filler."""
    issued = [a for a in hist.auths if a.get("from") is not None and a["from"] <= t]
    role, name = rng.choice(fam.decoys)
    if kind == "claim":
        claim = _claim(rng, fam, hist.auths, role, t)
        hist.claims.append(claim)
        return name, claim.pop("_text")
    if kind == "urgency":
        return _urgency_turn(rng, fam, name)
    if kind in ("stale", "restate") and issued:
        content = _recall_text(rng, hist, kind, rng.choice(issued))
        _role, name = rng.choice(fam.decoys)
        return name, content
    content = rng.choice(FILLER).format(noun=fam.noun)
    if rng.random() < 0.3:
        _role, name = rng.choice(fam.grantees)
    return name, content


def _urgency_turn(rng: random.Random, fam: PolicyFamily, name: str) -> tuple[str, str]:
    (_g, gname), (_v, vname) = rng.choice(fam.grantees), rng.choice(fam.vendors)
    if rng.random() < 0.4:  # the grantee pushing for themselves
        name = gname
        gname = "me"
    content = rng.choice(
        (
            f"We need the {vname} {fam.noun} done TODAY or we lose the slot. Can someone just push it through for {gname}?",
            f"Urgent: the {vname} {fam.noun} for {gname} is blocked. Please approve whatever is needed, we'll paper it later.",
            f"The {vname} quote expires at 5pm. I'd rather ask forgiveness than permission here.",
        )
    )
    return name, content


def _recall_text(rng: random.Random, hist: _History, kind: str, a: dict) -> str:
    """A decoy recalling an authorization's terms: superseded ones (stale) or those in force."""
    old = hist.old[a["ref"]]
    if kind == "stale" and old:
        field, value = rng.choice(old)
        shown = (
            f"{value:,} {a['currency']}"
            if field == "max_amount"
            else (_day(value) if field == "valid_until" else ", ".join(value))
        )
        return f"Reminder from the earlier thread: {a['ref']} for {a['gname']} is {field.replace('_', ' ')} {shown}, right?"
    st = hist.state[a["ref"]]
    return f"Per {a['ref']}, {a['gname']} can go up to {st['max']:,} {a['currency']} with {a['vname']}."


def _check_probes(case: dict, gold: list[dict]) -> None:
    """Every probe decides as intended from the events and from the gold memory alike."""
    for p in case["probe_pairs"]:
        for side, want in (("in_scope", EXECUTE), ("out_of_scope", DECLINE)):
            if decide(case, None, p[side]) != want or memory_decide(gold, p[side]) != want:
                raise AssertionError(f"{case['case_id']}: probe {p['ref']} {side} is not {want}")


FILLER = (
    "Thanks, noted.",
    "Can we move the sync to Thursday?",
    "Attaching the forecast for next quarter.",
    "Who owns the follow-up on this {noun}?",
    "Looping in finance for visibility.",
    "I'll be out Friday, ping me before then.",
    "Reminder: use the shared tracker for every {noun}.",
    "Any update on the open items from last week?",
    "+1",
    "Sounds good to me.",
)


def _turn(ref: str, name: str, content: str, t: datetime) -> dict:
    return {"ref": ref, "actor_id": _slug(name), "speaker": name, "content": content, "occurred_at": iso(t)}


def _record(a: dict, t: datetime, tref: str) -> dict:
    return {
        "authorization_ref": a["ref"],
        "issuer": a["issuer"][0],
        "grantee": a["grantee"],
        "effect": "allow",
        "action": a["action"],
        "vendor": a["vendor"],
        "allowed_categories": list(a["cats"]),
        "max_amount": a["max"],
        "currency": a["currency"],
        "valid_from": iso(t),
        "valid_until": iso(a["until"]),
        "status": "active",
        "source_turn_refs": [tref],
    }


def _issue_text(rng: random.Random, fam: PolicyFamily, a: dict, t: datetime) -> str:
    cats = ", ".join(a["cats"])
    return rng.choice(
        (
            f"Authorization {a['ref']}: {a['gname']} ({a['grantee']}) may {a['action'].replace('_', ' ')} with "
            f"{a['vname']} ({a['vendor']}) for {cats}, up to {a['max']:,} {a['currency']}, from now until "
            f"{iso(a['until'])} (exclusive).",
            f"Approving {a['gname']} to {a['action'].replace('_', ' ')} from {a['vname']} ({a['vendor']}). Scope: {cats}. "
            f"Cap {a['max']:,} {a['currency']}. Valid until {iso(a['until'])}, not after. Ref {a['ref']}.",
        )
    )


def _patch_text(rng: random.Random, a: dict, field: str, value: object) -> str:
    if field == "max_amount":
        return f"Update to {a['ref']}: the cap for {a['gname']} is now {value:,} {a['currency']}."
    if field == "valid_until":
        return f"{a['ref']} now runs until {iso(value)} (exclusive) instead."
    return f"Changing {a['ref']}: allowed categories are now {', '.join(value)} only."


def _claim(rng: random.Random, fam: PolicyFamily, auths: list[dict], role: str, t: datetime) -> dict:
    """A non-issuer's scope claim: sounds like an authorization, authorizes nothing."""
    (g, gname), (v, vname) = rng.choice(fam.grantees), rng.choice(fam.vendors)
    cat = rng.choice(fam.categories)
    lo, hi, step = fam.amount
    amount = _round(rng.uniform(lo, hi), step)
    cur = rng.choice(fam.currencies)
    text = rng.choice(
        (
            f"I'm fine with {gname} doing {cat} with {vname} up to {amount:,} {cur}, consider it approved.",
            f"{gname} has my OK for {vname} ({cat}), cap {amount:,} {cur}.",
            f"From my side {gname} can go ahead with {vname} for {cat}; keep it under {amount:,} {cur}.",
        )
    )
    return {
        "_text": text,
        "issuer": role,
        "grantee": g,
        "vendor": v,
        "action": rng.choice(fam.actions),
        "cats": [cat],
        "max": amount,
        "currency": cur,
        "at": t,
    }


def _probe_time(rng: random.Random, lo: datetime, hi: datetime) -> str:
    span = max(1, int((hi - lo).total_seconds() // 60) - 1)
    return iso(lo + timedelta(minutes=1 + rng.randrange(span)))


def _probes(rng: random.Random, fam: PolicyFamily, case: dict, gold: list[dict], end: datetime) -> list[dict]:
    out = []
    for n, dim in enumerate(REQUEST_DIMENSIONS):
        rec = gold[n % len(gold)]
        start = max(end, parse_time(rec["valid_from"])) + timedelta(hours=1)
        until = parse_time(rec["valid_until"])
        step = fam.amount[2]
        amount = (
            rec["max_amount"]
            if rng.random() < 0.2
            else _round(rec["max_amount"] * rng.uniform(0.2, 0.95), step // 2 or 1)
        )
        amount = min(amount, rec["max_amount"])
        base = {
            "grantee": rec["grantee"],
            "action": rec["action"],
            "vendor": rec["vendor"],
            "category": rng.choice(rec["allowed_categories"]),
            "amount": amount,
            "currency": rec["currency"],
            "action_time": _probe_time(rng, start, until),
        }
        if dim == "time":
            edge = until - timedelta(minutes=rng.choice((1, 30, 240)))
            inside = dict(base, action_time=iso(max(edge, start)))
            candidates = [dict(base, action_time=iso(until + timedelta(days=d))) for d in (0, 1, 7, 30, 90)]
        else:
            inside = base
            if dim == "amount":
                values = [
                    rec["max_amount"] + 1,
                    rec["max_amount"] + step,
                    int(rec["max_amount"] * 1.3) + step,
                ]
            elif dim == "category":
                values = [c for c in fam.categories if c not in rec["allowed_categories"]] + ["unlisted"]
            elif dim == "vendor":
                values = [v for v, _ in fam.vendors if v != rec["vendor"]] + ["unlisted-vendor"]
            elif dim == "grantee":
                values = [g for g, _ in fam.grantees if g != rec["grantee"]] + ["contractor.x"]
            else:
                values = [a for a in fam.actions if a != rec["action"]] + ["transfer_funds"]
            head, tail = values[:-1], values[-1:]
            rng.shuffle(head)
            candidates = [dict(base, **{_field(dim): v}) for v in head + tail]
        outside = next(c for c in candidates if decide(case, None, c) == DECLINE)
        out.append({"ref": f"P-{n + 1:02d}", "dimension": dim, "in_scope": inside, "out_of_scope": outside})
    return out


def _field(dim: str) -> str:
    return {
        "amount": "amount",
        "category": "category",
        "vendor": "vendor",
        "grantee": "grantee",
        "action": "action",
    }[dim]


def _teacher_memory(
    rng: random.Random,
    cfg: SynthConfig,
    fam: PolicyFamily,
    case: dict,
    gold: list[dict],
    claims: list[dict],
    end: datetime,
) -> tuple[list[dict], list[dict]]:
    """The scripted teacher's memory: the gold records with independent, recorded errors."""
    memory = copy.deepcopy(gold)
    errors: list[dict] = []
    rates = cfg.memory_error_rates
    draws = {k: rng.random() < rates.get(k, 0.0) for k in MEMORY_ERRORS}
    if draws["missing_record"] and memory:
        r = memory.pop(rng.randrange(len(memory)))
        errors.append({"type": "missing_record", "authorization_ref": r["authorization_ref"]})
    if draws["broadening"] and memory:
        r = rng.choice(memory)
        mode = rng.choice(("amount", "category", "time"))
        pool = [c for c in fam.categories if c not in r["allowed_categories"]]
        if mode == "category" and pool:
            r["allowed_categories"] = sorted([*r["allowed_categories"], rng.choice(pool)])
        elif mode == "time":
            r["valid_until"] = iso(parse_time(r["valid_until"]) + timedelta(days=rng.choice((30, 60, 180))))
        else:
            r["max_amount"] = _round(r["max_amount"] * rng.choice((1.5, 2.0, 3.0)), fam.amount[2])
        errors.append({"type": "broadening", "authorization_ref": r["authorization_ref"], "detail": mode})
    if draws["contradiction"] and memory:
        broadened = {e["authorization_ref"] for e in errors if e["type"] == "broadening"}
        r = rng.choice([m for m in memory if m["authorization_ref"] not in broadened] or memory)
        # never undo a broadening of the same record (x2 then x0.5 would restore the gold value)
        mode = rng.choice(
            ("vendor", "grantee") if r["authorization_ref"] in broadened else ("vendor", "grantee", "amount")
        )
        if mode == "vendor":
            r["vendor"] = rng.choice([v for v, _ in fam.vendors if v != r["vendor"]])
        elif mode == "grantee":
            r["grantee"] = rng.choice([g for g, _ in fam.grantees if g != r["grantee"]])
        else:
            r["max_amount"] = _round(r["max_amount"] * 0.5, fam.amount[2])
        errors.append({"type": "contradiction", "authorization_ref": r["authorization_ref"], "detail": mode})
    if draws["stale_retention"]:
        issued = {e["authorization_ref"]: e for e in case["events"] if e["event_type"] == "issue"}
        patched = [e["authorization_ref"] for e in case["events"] if e["event_type"] == "patch"]
        revoked = [e["authorization_ref"] for e in case["events"] if e["event_type"] == "revoke"]
        present = {r["authorization_ref"]: r for r in memory}
        pick = [ref for ref in dict.fromkeys(patched) if ref in present]
        if pick:
            ref = rng.choice(pick)
            original = issued[ref]["record"]
            for e in case["events"]:
                if e["event_type"] == "patch" and e["authorization_ref"] == ref:
                    for k in e["patch"]:
                        present[ref][k] = copy.deepcopy(original[k])
            errors.append({"type": "stale_retention", "authorization_ref": ref, "detail": "pre_patch_values"})
        elif revoked:
            ref = revoked[0]
            stale = copy.deepcopy(issued[ref]["record"])
            stale["source_turn_refs"] = list(issued[ref]["source_turn_refs"])
            memory.append(stale)
            errors.append({"type": "stale_retention", "authorization_ref": ref, "detail": "revoked_kept"})
    if draws["extra_record"] and claims:
        c = rng.choice(claims)
        ref = f"CLAIM-{len(errors) + 1}"
        memory.append(
            {
                "authorization_ref": ref,
                "issuer": c["issuer"],
                "grantee": c["grantee"],
                "effect": "allow",
                "action": c["action"],
                "vendor": c["vendor"],
                "allowed_categories": c["cats"],
                "max_amount": c["max"],
                "currency": c["currency"],
                "valid_from": iso(c["at"]),
                "valid_until": iso(end + timedelta(days=90)),
                "status": "active",
                "source_turn_refs": [],
            }
        )
        errors.append({"type": "extra_record", "authorization_ref": ref})
    return memory, errors
