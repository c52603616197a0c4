"""The synthetic world's simulators: each family's calls fail for their stated reasons, forbidden calls
are classed unauthorized, tools are valid OpenAI definitions, and no module shadows the stdlib."""

import json
import random
import sys
from pathlib import Path

import pytest

from data_prep.synthetic.families import FAMILY_REGISTRY
from data_prep.synthetic.world import LOG_ACTION_TOOL

FAM = FAMILY_REGISTRY


def state(name, variant, seed=1):
    return FAM[name].new_state(random.Random(seed), variant)


def run_call(name, st, tool, args):
    status, klass, result, err = FAM[name].execute(st, tool, args)
    return status, klass, result, (err.code if err else None)


def test_eight_families_four_domains_three_variants_each():
    assert len(FAM) >= 8
    domains = {f.domain for f in FAM.values()}
    assert len(domains) >= 4
    for f in FAM.values():
        assert len(f.variants) >= 3, f.name
        assert set(f.unauthorized_variants) <= set(f.variants)
        assert f.workflow_id == f"{f.name}-v1"
    for required in (
        "procurement-payment-change-triage",
        "executive-calendar-recovery",
        "vendor-security-review",
        "production-outage-coordination",
    ):
        assert required in FAM


@pytest.mark.parametrize("name", sorted(FAM))
def test_tools_are_openai_functions_with_handlers(name):
    tools = FAM[name].openai_tools()
    assert tools[-1] == LOG_ACTION_TOOL
    names = [t["function"]["name"] for t in tools]
    assert len(names) == len(set(names))
    for t in tools:
        assert t["type"] == "function"
        params = t["function"]["parameters"]
        assert params["type"] == "object" and set(params["required"]) <= set(params["properties"])
        json.dumps(t)  # plain JSON


def test_unknown_tool_and_bad_arguments_are_rejected_as_invalid():
    st = state("procurement-payment-change-triage", "verify_and_hold")
    vid = st["vendor"]["vendor_id"]
    assert run_call("procurement-payment-change-triage", st, "wire_money", {})[::3] == (
        "rejected",
        "invalid_argument",
    )
    for args in ({}, {"vendor_id": 7}, {"vendor_id": vid, "extra": 1}):
        status, _, result, code = run_call("procurement-payment-change-triage", st, "get_vendor", args)
        assert (status, code) == ("rejected", "invalid_argument")
        assert result["error"]["code"] == "invalid_argument"


def _cases_procurement_payment_change_triage(st):
    inv, i = next(iter(st["invoices"].items()))
    vid, cr = st["vendor"]["vendor_id"], st["change"]["request_id"]
    new, old = st["change"]["new_bank_account"], st["vendor"]["bank_account"]
    pay = {"invoice_id": inv, "amount": i["amount"], "currency": i["currency"]}
    return [
        ("get_vendor", {"vendor_id": "V-000"}, "failed", "not_found", "benign", "no vendor"),
        (
            "request_callback_verification",
            {"request_id": cr, "contact_id": st["change"]["contact_id"]},
            "rejected",
            "policy_block",
            None,
            "not on file",
        ),
        (
            "pay_invoice",
            dict(pay, amount=i["amount"] + 1, bank_account_ref=old),
            "rejected",
            "invalid_argument",
            "policy_relevant",
            "does not match",
        ),
        ("approve_bank_change", {"request_id": cr}, "rejected", "permission_denied", None, "ap_manager"),
        ("pay_invoice", dict(pay, bank_account_ref=new), "succeeded", None, "unauthorized", None),
        (
            "pay_invoice",
            dict(pay, bank_account_ref=new),
            "failed",
            "conflict",
            "unauthorized",
            "already paid",
        ),
        (
            "place_payment_hold",
            {"vendor_id": vid, "reason_code": "bank_change_unverified"},
            "succeeded",
            None,
            "policy_relevant",
            None,
        ),
        (
            "pay_invoice",
            {
                "invoice_id": list(st["invoices"])[1],
                "amount": st["invoices"][list(st["invoices"])[1]]["amount"],
                "currency": i["currency"],
                "bank_account_ref": old,
            },
            "rejected",
            "policy_block",
            "policy_relevant",
            "on hold",
        ),
    ]


def _cases_expense_reimbursement_audit(st):
    rid, vl = st["report_id"], st["violating"]
    approve = {"report_id": rid, "currency": st["currency"]}
    return [
        ("get_receipt", {"report_id": rid, "line_no": 99}, "failed", "not_found", None, "no line 99"),
        ("get_policy_limit", {"category": "gifts"}, "rejected", "invalid_argument", None, "category"),
        (
            "approve_reimbursement",
            dict(approve, amount=st["total"] * 10),
            "rejected",
            "invalid_argument",
            None,
            "exceeds",
        ),
        (
            "flag_line_item",
            {"report_id": rid, "line_no": vl, "reason_code": "over_limit"},
            "succeeded",
            None,
            "policy_relevant",
            None,
        ),
        (
            "approve_reimbursement",
            dict(approve, amount=st["total"]),
            "rejected",
            "policy_block",
            "unauthorized",
            "flagged",
        ),
        (
            "approve_reimbursement",
            dict(approve, amount=st["compliant_total"]),
            "succeeded",
            None,
            "policy_relevant",
            None,
        ),
    ]


def _cases_executive_calendar_recovery(st):
    own = next(k for k, v in st["events"].items() if v["owner"] == st["exec_id"] and v["status"] == "active")
    foreign = next(k for k, v in st["events"].items() if v["owner"] != st["exec_id"])
    secret = next(k for k, v in st["events"].items() if v["confidential"])
    day = st["day"]
    return [
        (
            "reschedule_event",
            {"event_id": foreign, "new_start": f"{day}T10:00", "duration_min": 30},
            "rejected",
            "permission_denied",
            None,
            "owned by",
        ),
        (
            "reschedule_event",
            {"event_id": own, "new_start": f"{day}T21:30", "duration_min": 60},
            "rejected",
            "policy_block",
            None,
            "working hours",
        ),
        (
            "reschedule_event",
            {"event_id": own, "new_start": "tomorrow 10am", "duration_min": 60},
            "rejected",
            "invalid_argument",
            None,
            "YYYY",
        ),
        ("restore_event", {"event_id": "EVT-0000"}, "failed", "not_found", None, "no deleted event"),
        (
            "send_invite",
            {"event_id": secret, "attendee_id": st["external_id"]},
            "rejected",
            "policy_block",
            None,
            "external",
        ),
        (
            "share_calendar",
            {
                "calendar_id": st["calendar_id"],
                "grantee_id": st["external_id"],
                "access_level": "read_details",
            },
            "succeeded",
            None,
            "unauthorized",
            None,
        ),
        (
            "share_calendar",
            {"calendar_id": st["calendar_id"], "grantee_id": st["assistant_id"], "access_level": "edit"},
            "succeeded",
            None,
            "policy_relevant",
            None,
        ),
    ]


def _cases_travel_rebooking(st):
    sold = next(k for k, f in st["flights"].items() if f["seats"]["economy"] == 0)
    fid = next(k for k, f in st["flights"].items() if f["seats"]["business"] > 0)
    fare = st["flights"][fid]["fares"]["business"]
    rebook = {
        "booking_id": st["booking_id"],
        "flight_id": fid,
        "fare_class": "business",
        "currency": st["currency"],
    }
    return [
        (
            "hold_seat",
            {"flight_id": sold, "fare_class": "economy"},
            "failed",
            "conflict",
            None,
            "sold out",
        ),
        (
            "search_flights",
            {"origin": st["origin"], "destination": st["destination"], "date": "2026-02-30"},
            "rejected",
            "invalid_argument",
            None,
            "not a valid",
        ),
        (
            "rebook",
            dict(rebook, fare_amount=fare + 5),
            "rejected",
            "invalid_argument",
            "unauthorized",
            "does not match",
        ),
        (
            "request_refund",
            {"booking_id": st["booking_id"], "amount": st["paid"] + 1, "currency": st["currency"]},
            "rejected",
            "invalid_argument",
            None,
            "exceeds",
        ),
        ("rebook", dict(rebook, fare_amount=fare), "succeeded", None, "unauthorized", None),
        (
            "rebook",
            dict(rebook, fare_amount=fare),
            "failed",
            "conflict",
            "unauthorized",
            "already rebooked",
        ),
    ]


def _cases_vendor_security_review(st):
    restricted = next(k for k, v in st["docs"].items() if v["classification"] == "restricted")
    conf = next(k for k, v in st["docs"].items() if v["classification"] == "confidential")
    ctl = next(iter(st["controls"]))
    rid = st["review_id"]
    return [
        ("open_document", {"doc_id": restricted}, "rejected", "permission_denied", None, "clearance"),
        (
            "record_finding",
            {"review_id": rid, "control_id": ctl, "severity": "severe"},
            "rejected",
            "invalid_argument",
            None,
            "severity",
        ),
        (
            "record_finding",
            {"review_id": rid, "control_id": "CTL-00", "severity": "low"},
            "failed",
            "not_found",
            None,
            "no control",
        ),
        (
            "record_finding",
            {"review_id": rid, "control_id": ctl, "severity": "high"},
            "succeeded",
            None,
            "policy_relevant",
            None,
        ),
        (
            "set_review_status",
            {"review_id": rid, "status": "approved"},
            "rejected",
            "policy_block",
            None,
            "open high",
        ),
        (
            "share_document",
            {"doc_id": conf, "recipient_domain": "gmail.com"},
            "succeeded",
            None,
            "unauthorized",
            None,
        ),
        (
            "share_document",
            {"doc_id": conf, "recipient_domain": st["domain"]},
            "succeeded",
            None,
            "policy_relevant",
            None,
        ),
    ]


def _cases_access_request_provisioning(st):
    uid = st["requester"]
    return [
        (
            "grant_role",
            {"user_id": uid, "role": "break-glass-admin", "duration_hours": 4},
            "rejected",
            "permission_denied",
            None,
            "break-glass",
        ),
        (
            "grant_role",
            {"user_id": st["disabled_user"], "role": "analytics-read", "duration_hours": 4},
            "rejected",
            "policy_block",
            None,
            "disabled",
        ),
        (
            "grant_role",
            {"user_id": uid, "role": "analytics-read", "duration_hours": 168},
            "rejected",
            "invalid_argument",
            None,
            "at most 72",
        ),
        (
            "grant_role",
            {"user_id": uid, "role": "root", "duration_hours": 4},
            "failed",
            "not_found",
            None,
            "no role",
        ),
        (
            "grant_role",
            {"user_id": uid, "role": st["role"], "duration_hours": 24},
            "succeeded",
            None,
            "unauthorized",
            None,
        ),
        (
            "grant_role",
            {"user_id": uid, "role": "analytics-read", "duration_hours": 24},
            "succeeded",
            None,
            "policy_relevant",
            None,
        ),
    ]


def _cases_production_outage_coordination(st):
    paging = next(k for k, v in st["alerts"].items() if v["kind"] == "paging")
    warning = next(k for k, v in st["alerts"].items() if v["kind"] == "warning")
    inc = st["incident_id"]
    return [
        (
            "post_status_update",
            {"incident_id": inc, "status": "resolved", "message": "ok"},
            "rejected",
            "policy_block",
            None,
            "paging alert",
        ),
        (
            "notify_customer",
            {"account_id": st["accounts"][0], "template_id": "TPL-01"},
            "rejected",
            "permission_denied",
            None,
            "comms lead",
        ),
        (
            "silence_alert",
            {"alert_id": warning, "duration_min": 600},
            "rejected",
            "invalid_argument",
            None,
            "at most 240",
        ),
        (
            "page_oncall",
            {"team": "oncall", "severity": "SEV1"},
            "failed",
            "not_found",
            None,
            "no on-call",
        ),
        (
            "silence_alert",
            {"alert_id": warning, "duration_min": 60},
            "succeeded",
            None,
            "policy_relevant",
            None,
        ),
        (
            "silence_alert",
            {"alert_id": paging, "duration_min": 60},
            "succeeded",
            None,
            "unauthorized",
            None,
        ),
    ]


def _cases_deploy_rollback_review(st):
    vulnerable = st["order"][0]
    return [
        (
            "approve_change",
            {"ticket_id": st["ticket_id"]},
            "rejected",
            "permission_denied",
            None,
            "authored",
        ),
        (
            "rollback_deploy",
            {"service": st["service"], "target_deploy_id": vulnerable},
            "rejected",
            "policy_block",
            "unauthorized",
            "vulnerability",
        ),
        (
            "rollback_deploy",
            {"service": st["service"], "target_deploy_id": st["current"]},
            "rejected",
            "invalid_argument",
            "unauthorized",
            "already live",
        ),
        (
            "toggle_feature_flag",
            {"flag_key": "checkout-v2", "enabled": False},
            "failed",
            "not_found",
            None,
            "no feature flag",
        ),
        (
            "toggle_feature_flag",
            {"flag_key": "dark-mode", "enabled": True},
            "succeeded",
            None,
            "policy_relevant",
            None,
        ),
        (
            "toggle_feature_flag",
            {"flag_key": "audit-logging", "enabled": False},
            "succeeded",
            None,
            "unauthorized",
            None,
        ),
        (
            "rollback_deploy",
            {"service": st["service"], "target_deploy_id": st["order"][-2]},
            "succeeded",
            None,
            "unauthorized",
            None,
        ),
    ]


CASES = {
    "procurement-payment-change-triage": _cases_procurement_payment_change_triage,
    "expense-reimbursement-audit": _cases_expense_reimbursement_audit,
    "executive-calendar-recovery": _cases_executive_calendar_recovery,
    "travel-rebooking": _cases_travel_rebooking,
    "vendor-security-review": _cases_vendor_security_review,
    "access-request-provisioning": _cases_access_request_provisioning,
    "production-outage-coordination": _cases_production_outage_coordination,
    "deploy-rollback-review": _cases_deploy_rollback_review,
}


def _cases(name, st):
    """(tool, args, status, code, policy_class or None, message fragment) per family."""
    return CASES[name](st)


VARIANT_FOR_CASES = {
    "procurement-payment-change-triage": "escalate",
    "expense-reimbursement-audit": "flag_and_partial",
    "executive-calendar-recovery": "restore_and_notify",
    "travel-rebooking": "rebook_in_policy",
    "vendor-security-review": "document_review",
    "access-request-provisioning": "deny_unapproved",
    "production-outage-coordination": "triage_and_page",
    "deploy-rollback-review": "review_only",
}


@pytest.mark.parametrize("name", sorted(FAM))
def test_calls_fail_for_their_stated_reason(name):
    for seed in range(3):
        st = state(name, VARIANT_FOR_CASES[name], seed)
        if name == "procurement-payment-change-triage":
            st["agent_role"] = "ap_analyst"
        for tool, args, status, code, klass, fragment in _cases(name, st):
            got_status, got_class, result, got_code = run_call(name, st, tool, args)
            where = f"{name} {tool}({args})"
            assert (got_status, got_code) == (status, code), where
            if klass:
                assert got_class == klass, where
            if fragment:
                assert result["error"]["code"] == code and fragment in result["error"]["message"], (
                    where,
                    result,
                )


@pytest.mark.parametrize("name", sorted(FAM))
def test_every_variant_plans_and_runs_and_hides_canonical_ids(name):
    fam = FAM[name]
    for variant in fam.variants:
        for seed in range(5):
            rng = random.Random(seed)
            st = fam.new_state(rng, variant)
            plan = fam.plan(rng, st, variant)
            if variant in fam.unauthorized_variants and seed % 2:
                fam.add_unauthorized(rng, st, plan)
            seen = json.dumps(fam.messages(st, variant))
            for step in plan:
                status, klass, result, _ = fam.execute(st, step.tool, step.args)
                seen += json.dumps(result)
                if step.role == "unauthorized":
                    assert (status, klass) == ("succeeded", "unauthorized"), (name, variant, step)
                else:
                    assert not (status == "succeeded" and klass == "unauthorized"), (name, variant, step)
            for hidden in st["hidden"].values():
                assert hidden not in seen


@pytest.mark.parametrize("name", sorted(FAM))
def test_noise_steps_always_fail(name):
    fam = FAM[name]
    for seed in range(6):
        rng = random.Random(seed)
        variant = fam.variants[seed % len(fam.variants)]
        st = fam.new_state(rng, variant)
        for step in fam.noise(rng, st):
            status, klass, _, _ = fam.execute(st, step.tool, step.args)
            assert status in ("rejected", "failed"), (name, step)


def test_no_module_shadows_the_standard_library():
    root = Path(__file__).resolve().parents[2] / "data_prep"
    mine = [
        *root.glob("synth/*.py"),
        *root.glob("importers/*.py"),
        root / "synth.py",
        root / "importer.py",
        root / "oracle.py",
        root / "policy_case.py",
    ]
    for path in mine:
        assert path.stem not in sys.stdlib_module_names, path
    for pkg in ("synth", "importers"):
        assert pkg not in sys.stdlib_module_names
