"""Adversarial inputs: a 1 MB line per pattern shape, built to make a backtracking engine explode
(near misses of nested and overlapping quantifiers) or to flood the engine with matches. Every one
must finish in under a second of CPU time (CPU rather than wall time: the test machines are shared);
a flood of more than 10,000 real findings gets two."""

from __future__ import annotations

import time

import pytest

from sanitizer import Sanitizer

SAN = Sanitizer.from_packs()
MB = 1 << 20


def _fill(unit: str, prefix: str = "", suffix: str = "") -> str:
    body = unit * ((MB - len(prefix) - len(suffix)) // len(unit) + 1)
    return (prefix + body)[: MB - len(suffix)] + suffix


# (case id, rule ids whose pattern shape it attacks, the 1 MB line)
CASES = [
    ("email_local_run", ["secrets.email"], _fill("a")),
    ("email_at_run", ["secrets.email"], _fill("a@")),
    ("email_nested_domain", ["secrets.email"], _fill("a.", "x@", "!")),
    ("email_bad_tld", ["secrets.email"], _fill(".b1", "x@b")),
    ("email_flood", ["secrets.email"], _fill("a@b.cd ")),
    ("aws_prefix_run", ["secrets.aws_access_key", "secrets.aws_secret_key"], _fill("AKIA")),
    (
        "aws_secret_near",
        ["secrets.aws_secret_key", "secrets.credential_assignment"],
        _fill("aws_secret_key="),
    ),
    ("gcp_near", ["secrets.gcp_api_key"], _fill("AIza-")),
    ("github_near", ["secrets.github_token"], _fill("ghp_a")),
    ("slack_run", ["secrets.slack_token"], _fill("xoxb-")),
    ("stripe_near", ["secrets.stripe_key"], _fill("sk_live_")),
    ("sk_run", ["secrets.sk_api_key"], _fill("sk-")),
    ("vendor_near", ["secrets.vendor_token"], _fill("SG.abcdefghijklmnop")),
    ("bearer_run", ["secrets.bearer_token"], _fill("Bearer ")),
    ("authorization_run", ["secrets.bearer_token"], _fill("authorization: basic ")),
    ("private_key_opens", ["secrets.private_key_block"], _fill("-----BEGIN RSA PRIVATE KEY-----")),
    ("private_key_closes", ["secrets.private_key_block"], _fill("-----END RSA PRIVATE KEY-----")),
    ("jwt_headers", ["secrets.jwt"], _fill("eyJ")),
    ("jwt_flood", ["secrets.jwt"], _fill("eyJaaaa.")),
    ("url_creds_near", ["secrets.url_credentials"], _fill("a://b:")),
    ("credential_near", ["secrets.credential_assignment"], _fill("password=")),
    ("credential_flood", ["secrets.credential_assignment"], _fill("password=aaaaaaa1 ")),
    ("iban_groups", ["secrets.iban"], _fill("DE89 ")),
    ("iban_digits", ["secrets.iban"], _fill("0", "DE89")),
    ("iban_checks", ["secrets.iban"], _fill("DE89 0000 0000 0000 0000 00 ")),
    ("iban_flood", ["secrets.iban"], _fill("DE89 3704 0044 0532 0130 00 ")),
    ("card_groups", ["secrets.card_number"], _fill("4111 ")),
    ("card_flood", ["secrets.card_number"], _fill("4111 1111 1111 1111 ")),
    ("card_dashes", ["secrets.card_number"], _fill("4111-")),
    ("digits", ["secrets.card_number", "secrets.phone_number"], _fill("1")),
    ("phone_plus", ["secrets.phone_number"], _fill("+1 ")),
    ("phone_paren", ["secrets.phone_number"], _fill("(555) ")),
    ("think_opens", ["reasoning.think_block"], _fill("<think>")),
    ("think_closes", ["reasoning.think_block"], _fill("</think>")),
    ("think_unfinished", ["reasoning.think_block", "reasoning.reasoning_tag_block"], _fill("<think ")),
    ("reasoning_tags", ["reasoning.reasoning_tag_block"], _fill("<reasoning></thought>")),
    ("bracket_tags", ["reasoning.bracket_thinking_block"], _fill("[thinking][/thought]")),
    ("marker_lines", ["reasoning.reasoning_marker_line"], _fill("\nThought: x")),
    ("marker_no_colon", ["reasoning.reasoning_marker_line"], _fill("\nreasoning ")),
    ("label_words", ["leakage.label_word"], _fill("sabotage ")),
    ("incident_claims", ["leakage.incident_claim"], _fill("a security incident an ")),
    ("label_echo", ["leakage.label_echo", "leakage.verdict_object_echo"], _fill("label:")),
    ("verdict_near", ["leakage.verdict_object_echo"], _fill('"verdict": "')),
    ("hidden_ids", ["dynamic.hidden_id", "leakage.oracle_quote"], _fill("V-118 ")),
    ("high_entropy_run", ["secrets.high_entropy_key", "secrets.base64_secret"], _fill("Ab1/x9Q+")),
    ("base64_flood", ["secrets.base64_secret"], _fill("QUtJQVo3UTJNVjRYSzNQTFc5UkQ= ")),
    ("base64_text_run", ["secrets.base64_secret"], _fill("cGFzc3dvcmQ9")),
    ("google_oauth_near", ["secrets.google_oauth"], _fill("ya29.")),
    ("gcp_key_id_near", ["secrets.gcp_service_account_key_id"], _fill('private_key_id": "')),
    ("azure_near", ["secrets.azure_key"], _fill("AccountKey=")),
    ("sas_near", ["secrets.azure_sas_signature"], _fill("&sig=")),
    ("azure_secret_near", ["secrets.azure_client_secret"], _fill("abc8Q~")),
    ("gitlab_near", ["secrets.gitlab_token"], _fill("glpat-")),
    ("telegram_near", ["secrets.telegram_bot_token"], _fill("123456789:AA")),
    ("short_prefix_near", ["secrets.vendor_token_short_prefix"], _fill("SK0123456789abcdef")),
    ("credential_phrase_near", ["secrets.credential_phrase"], _fill("the password is ")),
    ("verdict_phrase_near", ["leakage.verdict_phrase"], _fill("Ledger check\u00a0: ")),
    ("invisible_chars", ["normalize.invisible_chars"], _fill("AKIA\u200b")),
    ("name_words", ["secrets.person_name"], _fill("Ab ", "Dear ")),
    ("name_salutations", ["secrets.person_name"], _fill("Dear Dr. ")),
    ("name_flood", ["secrets.person_name"], _fill('"traveler": "Dana Whitfield", ')),
    ("given_names_alone", ["secrets.person_name_given"], _fill("Dana said ")),
    ("given_names_stopwords", ["secrets.person_name_given"], _fill("Grace Period Bank ")),
    ("given_name_flood", ["secrets.person_name_given"], _fill("Dr. Priya van der Raman ")),
    ("iban_glued_run", ["secrets.iban"], _fill("A1", "", "DE89 3704 0044 0532 0130 00")),
    ("card_glued_flood", ["secrets.card_number"], _fill("74111111111111111 ")),
    ("card_glued_groups", ["secrets.card_number"], _fill("94111 1111 1111 1111 ")),
]


def test_every_rule_has_an_adversarial_case():
    covered = {rid for _, rids, _ in CASES for rid in rids}
    assert {r.id for r in SAN.rules} | {"normalize.invisible_chars"} <= covered


@pytest.mark.parametrize("name, rules, line", CASES, ids=[c[0] for c in CASES])
def test_one_megabyte_line_under_a_second(name, rules, line):
    assert len(line) == MB
    wall, cpu = time.perf_counter(), time.process_time()
    out, findings, _ = SAN.sanitize_text(
        line,
        ["V-118"],
        path="model_ledger[0].description",
        quote_literals=["V-118 V-118 V-118 V-118"],
    )
    cpu = time.process_time() - cpu
    wall = time.perf_counter() - wall
    print(f"\n{name}: {cpu:.3f} s cpu, {wall:.3f} s wall, {len(findings)} findings")
    # A bound against super-linear blow-ups (catastrophic backtracking takes minutes on 1 MB), not a
    # speed target: speed is measured by bench/sanitizer.py. Near misses take about 0.01-0.4 s of CPU
    # here; floods of tens of thousands of real matches pay per-finding bookkeeping (hidden ids about
    # 1.3 s idle, over 2 s in a loaded CI run), pseudonymized floods twice per finding.
    limit = 8.0 if len(findings) > 10_000 else 4.0
    assert cpu < limit, f"{name}: {cpu:.2f} s for {len(findings)} findings"
    again = SAN.sanitize_text(out[:4096], ["V-118"], path="model_ledger[0].description")[0]
    assert isinstance(again, str)
