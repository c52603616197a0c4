"""Synthetic ledger text for the false-redaction test and the benchmark, and planted secrets.

``ordinary_description`` writes the kind of line a ledger writer produces: invoice and order ids,
dates, times, amounts, version numbers, ticket numbers, host names, percentages, hashes, UUIDs. None of
it should ever be changed by the sanitizer. ``plant`` makes one secret (or reasoning block, or label
word) of a given kind together with the substrings that must not survive ``apply``.
"""

from __future__ import annotations

import random
import string

TOOLS = (
    "pay_invoice",
    "create_order",
    "issue_refund",
    "book_room",
    "transfer_funds",
    "update_user_role",
    "deploy_service",
    "send_notification",
    "query_inventory",
    "schedule_job",
)
TEAMS = ("release team", "billing team", "platform team", "support desk", "finance ops", "on-call rotation")
CURRENCIES = ("USD", "EUR", "GBP", "JPY", "CHF")
OUTCOMES = ("succeeded", "rejected", "failed")
REASONS = (
    "missing permission",
    "insufficient funds",
    "timeout after 30 s",
    "vendor not found",
    "quota exceeded",
    "duplicate request",
    "stale version",
    "approval required",
)
HOSTS = (
    "api-gw-2.internal",
    "db-1.internal",
    "billing-svc.prod",
    "cache-03.eu-west-1",
    "queue.staging.local",
)
PROJECTS = ("OPS", "FIN", "REL", "SUP", "INFRA")
ROLES = ("viewer", "editor", "approver", "admin")
SERVICES = ("billing-svc", "ledger-api", "notifier", "scheduler", "inventory")


def _amount(r: random.Random) -> str:
    return f"{r.randint(1, 250000)}.{r.randint(0, 99):02d}"


def _date(r: random.Random) -> str:
    return f"{r.randint(2024, 2027)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"


def _time(r: random.Random) -> str:
    return f"{r.randint(0, 23):02d}:{r.choice((0, 15, 30, 45)):02d}"


def _ver(r: random.Random) -> str:
    return f"{r.randint(0, 9)}.{r.randint(0, 20)}.{r.randint(0, 30)}"


def _hex(r: random.Random, n: int) -> str:
    return "".join(r.choice("0123456789abcdef") for _ in range(n))


def _uuid(r: random.Random) -> str:
    h = _hex(r, 32)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _status(r: random.Random) -> str:
    o = r.choice(OUTCOMES)
    return o if o == "succeeded" else f"{o}: {r.choice(REASONS)}"


_TEMPLATES = (
    lambda r: (
        f"Called pay_invoice for invoice INV-{r.randint(1000, 9999)} (amount {_amount(r)} {r.choice(CURRENCIES)}, "
        f"vendor V-{r.randint(100, 999)}); outcome: {_status(r)}"
    ),
    lambda r: f"Requested calendar hold for {_date(r)} {_time(r)} with the {r.choice(TEAMS)}; {_status(r)}",
    lambda r: (
        f"Created order ORD-{r.randint(100000, 999999)} for {r.randint(1, 500)} units of SKU-{r.randint(10000, 99999)} "
        f"at {_amount(r)} {r.choice(CURRENCIES)}; outcome: {_status(r)}"
    ),
    lambda r: (
        f"Deployed {r.choice(SERVICES)} version {_ver(r)} to {r.choice(HOSTS)}; health check "
        f"{r.randint(80, 100)}% ok after {r.randint(1, 90)} s"
    ),
    lambda r: (
        f"Opened ticket {r.choice(PROJECTS)}-{r.randint(100, 9999)} about failed job {r.randint(1, 999)}; "
        f"assigned to the {r.choice(TEAMS)}"
    ),
    lambda r: (
        f"Refund R-{r.randint(1000, 9999)} of {_amount(r)} {r.choice(CURRENCIES)} issued to customer "
        f"C-{r.randint(10000, 99999)} on {_date(r)}; outcome: {_status(r)}"
    ),
    lambda r: (
        f"Queried {r.choice(HOSTS)}:{r.choice((443, 8443, 5432, 6379))}/v1/orders?page={r.randint(1, 40)} in "
        f"{r.randint(3, 900)} ms; {r.randint(0, 5000)} rows"
    ),
    lambda r: (
        f"Scheduled job nightly-{r.choice(SERVICES)} at {_time(r)} UTC every {r.randint(5, 120)} min; next run "
        f"{_date(r)}T{_time(r)}:00Z"
    ),
    lambda r: (
        f"Transferred {_amount(r)} {r.choice(CURRENCIES)} from account ACC-{r.randint(100000, 999999)} to "
        f"ACC-{r.randint(100000, 999999)}; reference TX-{r.randint(10**7, 10**8 - 1)}; outcome: {_status(r)}"
    ),
    lambda r: (
        f"Updated user U-{r.randint(1000, 9999)} role to {r.choice(ROLES)} (ticket {r.choice(PROJECTS)}-"
        f"{r.randint(100, 9999)}); {_status(r)}"
    ),
    lambda r: (
        f"Sent notification to the {r.choice(TEAMS)} about release {_ver(r)} ({r.randint(1, 100)}% rollout, "
        f"build {r.randint(1000, 99999)})"
    ),
    lambda r: (
        f"Read reports/{r.randint(2024, 2027)}/q{r.randint(1, 4)}/summary_{r.randint(1, 99)}.csv "
        f"({r.randint(1, 9000)} KB, sha256 {_hex(r, 12)}...); commit {_hex(r, 40)}"
    ),
    lambda r: (
        f"Approved expense E-{r.randint(10000, 99999)} for {_amount(r)} {r.choice(CURRENCIES)} "
        f"({r.randint(1, 100)}.{r.randint(0, 9)}% of budget), approver M-{r.randint(100, 999)}"
    ),
    lambda r: (
        f"Retried {r.choice(TOOLS)} {r.randint(2, 5)} times; last error HTTP {r.choice((429, 500, 502, 503, 504))} "
        f"from {r.choice(HOSTS)}; outcome: failed"
    ),
    lambda r: (
        f"Reserved room B{r.randint(1, 9)}-{r.randint(100, 499)} for {_date(r)} {_time(r)}-{_time(r)} "
        f"({r.randint(2, 40)} attendees)"
    ),
    lambda r: (
        f"Converted {_amount(r)} USD to {_amount(r)} EUR at rate {r.randint(0, 1)}.{r.randint(1000, 9999)} "
        f"(fee {r.randint(0, 3)}.{r.randint(0, 99):02d}%)"
    ),
    lambda r: (
        f"Shipment TRK{r.randint(10**9, 10**10 - 1)} left warehouse WH-{r.randint(10, 99)} on {_date(r)}; "
        f"ETA {_date(r)}"
    ),
    lambda r: (
        f"Patched CVE-{r.randint(2023, 2026)}-{r.randint(1000, 99999)} on {r.choice(HOSTS)} "
        f"(kernel 6.{r.randint(1, 12)}.{r.randint(0, 40)})"
    ),
    lambda r: (
        f"Invoice INV-{r.randint(1000, 9999)} due {_date(r)}; balance {_amount(r)} {r.choice(CURRENCIES)}; "
        f"late fee {r.randint(5, 90)}.00"
    ),
    lambda r: (
        f"Synced {r.randint(1, 90000)} records from crm to warehouse in {r.randint(0, 99)}.{r.randint(0, 999):03d} s"
    ),
    lambda r: (
        f"Logged event at {_date(r)}T{_time(r)}:{r.randint(0, 59):02d}Z (epoch {r.randint(1_700_000_000, 1_800_000_000)}, "
        f"request {_uuid(r)})"
    ),
    lambda r: (
        f"Opened connection to 10.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(0, 255)} port "
        f"{r.randint(1024, 65535)}; p95 latency {r.randint(5, 900)} ms"
    ),
    lambda r: (
        f"Rotated api key for service {r.choice(SERVICES)}; token refresh scheduled {_date(r)}; outcome: {_status(r)}"
    ),
    lambda r: (
        f"Booked {r.randint(1, 9)} seats on flight LH{r.randint(100, 9999)} for {_date(r)}, total {_amount(r)} EUR, "
        f"seat {r.randint(1, 40)}{r.choice('ABCDEF')}"
    ),
)


def ordinary_description(r: random.Random) -> str:
    """One line of ordinary ledger text (nothing in it should be redacted)."""
    return r.choice(_TEMPLATES)(r)


def ordinary_rationale(r: random.Random, label: str, call_ids: list[str]) -> str:
    if label == "clean":
        return f"All {len(call_ids)} entries match the trajectory; amounts, ids and outcomes agree."
    cid = r.choice(call_ids) if call_ids else "c0001"
    return (
        f"Entry {cid} reports success but the environment shows the call was rejected; "
        f"the ledger omits the refund of {_amount(r)} USD."
    )


def ledger_record(r: random.Random, i: int, entries: tuple[int, int] = (3, 10)) -> dict:
    """A ledger-run-shaped record with ordinary text only."""
    n = r.randint(*entries)
    ledger = []
    for pos in range(1, n + 1):
        ledger.append(
            {
                "call_id": f"c{pos:04d}",
                "tool": r.choice(TOOLS),
                "description": ordinary_description(r),
                "claimed_outcome": r.choice(OUTCOMES),
                "position": pos,
            }
        )
    label = r.choice(("clean", "clean", "discrepancy", "incident"))
    wf = r.randint(1, 400)
    wr = random.Random(wf)  # a workflow's hidden identifiers are fixed by the workflow
    cited = [] if label == "clean" else [r.choice(ledger)["call_id"]]
    return {
        "run_id": f"run-{i:07d}",
        "workflow_id": f"wf-{wf:04d}",
        "model_ledger": ledger,
        "teacher": {
            "writer_model": "teacher-writer-v3",
            "verdict": {
                "label": label,
                "suspicion": r.randint(0, 100),
                "cited_call_ids": cited,
                "rationale": ordinary_rationale(r, label, [e["call_id"] for e in ledger]),
            },
        },
        "metadata": {
            "hidden_identifiers": [f"acct_hidden_{_hex(wr, 6)}", f"VND-SECRET-{wr.randint(1000, 9999)}"],
            "domain": r.choice(("finance", "calendar", "ops")),
            "score": round(r.random(), 4),
            "flags": [True, None, r.randint(0, 10**12)],
        },
    }


# ---------------------------------------------------------------------------------------------- plants


def _rand(r: random.Random, alphabet: str, n: int) -> str:
    return "".join(r.choice(alphabet) for _ in range(n))


_UP = string.ascii_uppercase
_ALNUM = string.ascii_letters + string.digits
_B64 = _ALNUM + "/+"
_URLSAFE = _ALNUM + "_-"


def _luhn_complete(prefix: str, length: int, r: random.Random) -> str:
    body = prefix + "".join(r.choice(string.digits) for _ in range(length - len(prefix) - 1))
    for d in "0123456789":
        cand = body + d
        total = 0
        for i, ch in enumerate(reversed(cand)):
            x = int(ch)
            if i % 2:
                x *= 2
                if x > 9:
                    x -= 9
            total += x
        if total % 10 == 0:
            return cand
    raise AssertionError("unreachable")


def _iban(r: random.Random) -> str:
    country, length = r.choice(
        (("DE", 22), ("GB", 22), ("FR", 27), ("NL", 18), ("ES", 24), ("IT", 27), ("CH", 21))
    )
    bban = "".join(
        r.choice(string.digits + (_UP if country in ("GB", "NL", "IT") else "")) for _ in range(length - 4)
    )
    moved = bban + country + "00"
    check = 98 - int("".join(str(int(c, 36)) for c in moved)) % 97
    iban = f"{country}{check:02d}{bban}"
    if r.random() < 0.5:
        iban = " ".join(iban[i : i + 4] for i in range(0, len(iban), 4))
    return iban


def _card(r: random.Random) -> str:
    prefix, length = r.choice(
        (
            ("4", 16),
            ("4", 13),
            ("51", 16),
            ("55", 16),
            ("2221", 16),
            ("34", 15),
            ("37", 15),
            ("6011", 16),
            ("65", 16),
            ("35", 16),
            ("62", 19),
            ("36", 14),
        )
    )
    num = _luhn_complete(prefix, length, r)
    style = r.random()
    if length in (15, 14) and style < 0.5:
        sep = r.choice(" -")
        return f"{num[:4]}{sep}{num[4:10]}{sep}{num[10:]}"
    if style < 0.35:
        return " ".join(num[i : i + 4] for i in range(0, len(num), 4))
    if style < 0.6:
        return "-".join(num[i : i + 4] for i in range(0, len(num), 4))
    return num


def _phone(r: random.Random) -> str:
    k = r.randint(0, 4)
    a, b, c = r.randint(200, 999), r.randint(200, 999), r.randint(0, 9999)
    if k == 0:
        return f"({a}) {b}-{c:04d}"
    if k == 1:
        return f"{a}-{b}-{c:04d}"
    if k == 2:
        return f"{a}.{b}.{c:04d}"
    if k == 3:
        return f"+1 {a} {b} {c:04d}"
    return f"+{r.randint(30, 49)} {r.randint(10, 99)} {r.randint(1000, 9999)} {r.randint(1000, 9999)}"


def _email(r: random.Random) -> str:
    local = (
        _rand(r, string.ascii_lowercase, r.randint(1, 10))
        + r.choice(("", ".", "_", "+", "-"))
        + _rand(r, _ALNUM, r.randint(1, 8))
    )
    domain = _rand(r, string.ascii_lowercase, r.randint(2, 12)) + r.choice(("", "-corp", "-mail"))
    tld = r.choice(("com", "io", "co.uk", "de", "org", "dev", "fr"))
    return f"{local}@{domain}.{tld}"


def _password(r: random.Random) -> str:
    while True:
        p = _rand(r, _ALNUM + "!#$%&*+-=?@^_~", r.randint(8, 24))
        if any(c.isdigit() for c in p) and any(c.isalpha() for c in p):
            return p


def plant(kind: str, r: random.Random) -> tuple[str, list[str]]:
    """``(text to insert, substrings that must not survive apply)`` for one planted item."""
    if kind == "aws_access_key":
        k = r.choice(("AKIA", "ASIA", "AROA", "AIDA")) + _rand(r, _UP + string.digits, 16)
        return k, [k]
    if kind == "aws_secret_key":
        s = _rand(r, _B64, 40)
        name = r.choice(
            ("aws_secret_access_key", "AWS_SECRET_ACCESS_KEY", "aws_secret_key", "secret_access_key")
        )
        return f"{name}{r.choice(('=', ' = ', ': ', '='))}{s}", [s]
    if kind == "gcp_api_key":
        k = "AIza" + _rand(r, _URLSAFE, 35)
        return k, [k]
    if kind == "github_token":
        k = r.choice(("ghp_", "gho_", "ghs_", "ghu_", "ghr_")) + _rand(r, _ALNUM, 36)
        return k, [k]
    if kind == "slack_token":
        k = (
            r.choice(("xoxb-", "xoxp-", "xoxa-"))
            + "-".join(_rand(r, string.digits, 12) for _ in range(2))
            + "-"
            + _rand(r, _ALNUM, 24)
        )
        return k, [k]
    if kind == "stripe_key":
        k = r.choice(("sk_live_", "sk_test_", "rk_live_")) + _rand(r, _ALNUM, r.randint(16, 40))
        return k, [k]
    if kind == "sk_api_key":
        k = r.choice(("sk-", "sk-proj-", "sk-ant-api03-")) + _rand(r, _URLSAFE, r.randint(20, 60))
        return k, [k]
    if kind == "hf_token":
        k = "hf_" + _rand(r, _ALNUM, 34)
        return k, [k]
    if kind == "bearer_token":
        t = _rand(r, _ALNUM + "._-", r.randint(16, 60))
        return r.choice(("Authorization: Bearer ", "Bearer ", "authorization: bearer ")) + t, [t]
    if kind == "private_key":
        body = "\n".join(_rand(r, _B64, 64) for _ in range(r.randint(1, 4)))
        kt = r.choice(("RSA ", "EC ", "OPENSSH ", ""))
        end = f"\n-----END {kt}PRIVATE KEY-----" if r.random() < 0.8 else ""
        return f"-----BEGIN {kt}PRIVATE KEY-----\n{body}{end}", [line for line in body.split("\n")]
    if kind == "jwt":

        def seg(n: int) -> str:
            return _rand(r, _URLSAFE, n)

        t = f"eyJ{seg(r.randint(10, 30))}.eyJ{seg(r.randint(10, 60))}.{seg(r.randint(20, 43))}"
        return t, [t]
    if kind == "iban":
        i = _iban(r)
        return i, [i]
    if kind == "card_number":
        c = _card(r)
        return c, [c]
    if kind == "email":
        e = _email(r)
        return e, [e]
    if kind == "phone_number":
        p = _phone(r)
        return p, [p]
    if kind == "credential":
        p = _password(r)
        name = r.choice(
            ("password", "PASSWORD", "api_key", "client_secret", "db_password", "access_token", "apiKey")
        )
        return f"{name}{r.choice(('=', ': ', ' = ', '='))}{p}", [p]
    if kind == "url_password":
        p = _password(r).replace("@", "!").replace("/", "!")
        return f"postgres://svc_user:{p}@db-1.internal:5432/app", [p]
    if kind == "think_block":
        inner = "SECRETPLAN" + _rand(r, _ALNUM, 12)
        form = r.randint(0, 2)
        if form == 0:
            return f"<think>{inner}</think>", [inner]
        if form == 1:
            return f"<think>{inner}", [inner]
        return f"{inner}</think>", [inner]
    extra = _EXTRA.get(kind)
    if extra is not None:
        return extra(r)
    raise ValueError(f"unknown plant kind {kind!r}")


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


def _hexs(r: random.Random, n: int) -> str:
    return _rand(r, "0123456789abcdef", n)


def _keyed(value: str) -> tuple[str, list[str]]:
    return value, [value]


def _said(r: random.Random, names: tuple[str, ...], value: str) -> tuple[str, list[str]]:
    return f"the {r.choice(names)} is {value}", [value]


def _assigned(r: random.Random, names: tuple[str, ...], value: str) -> tuple[str, list[str]]:
    return f"{r.choice(names)}{r.choice((': ', '=', ' = '))}{value}", [value]


def _zero_width(r: random.Random) -> tuple[str, list[str]]:
    key = "AKIA" + _rand(r, _UP + string.digits, 16)
    cut = r.randint(5, 15)
    return key[:cut] + "\u200b" + key[cut:], [key, key[:cut] + "\u200b" + key[cut:]]


def _pem(kind: str, r: random.Random) -> tuple[str, list[str]]:
    body = [_rand(r, _B64, 64) for _ in range(2)]
    return f"-----BEGIN {kind}-----\n" + "\n".join(body) + f"\n-----END {kind}-----", body


# Credential shapes beyond the base kinds above (each maker: random value, the text that must vanish).
_EXTRA = {
    "aws_secret_bare": lambda r: _keyed(
        _rand(r, _ALNUM, 18) + "/" + _rand(r, _ALNUM, 10) + "+" + _rand(r, _ALNUM, 10)
    ),
    "aws_glued": lambda r: (lambda k: (k + "calendar", [k]))("AKIA" + _rand(r, _UP + string.digits, 16)),
    "gcp_glued": lambda r: (lambda k: (k + "calendar", [k]))("AIza" + _rand(r, _URLSAFE, 35)),
    "aws_zero_width": _zero_width,
    "base64_aws": lambda r: _keyed(_b64("AKIA" + _rand(r, _UP + string.digits, 16))),
    "base64_password": lambda r: _keyed(_b64("password=" + _password(r))),
    "azure_sas": lambda r: (
        lambda sig: (f"https://acct.blob.core.windows.net/c/f.csv?sv=2022-11-02&sp=r&sig={sig}", [sig])
    )(_rand(r, _ALNUM, 30) + "%2B" + _rand(r, _ALNUM, 8) + "%3D"),
    "azure_storage_key": lambda r: (
        lambda k: (f"AccountName=acct;AccountKey={k};EndpointSuffix=core.windows.net", [k])
    )(_rand(r, _B64, 86) + "=="),
    "azure_client_secret": lambda r: _keyed(
        _rand(r, _ALNUM, 3) + str(r.randint(0, 9)) + "Q~" + _rand(r, _ALNUM + "_-.", 34)
    ),
    "gcp_oauth_secret": lambda r: _keyed("GOCSPX-" + _rand(r, _URLSAFE, 28)),
    "google_access_token": lambda r: _keyed("ya29." + _rand(r, _URLSAFE, 60)),
    "gcp_service_account_key_id": lambda r: (lambda k: (f'"private_key_id": "{k}"', [k]))(_hexs(r, 40)),
    "gitlab_pat": lambda r: _keyed("glpat-" + _rand(r, _URLSAFE, 20)),
    "gitlab_runner": lambda r: _keyed("glrt-" + _rand(r, _URLSAFE, 24)),
    "github_fine_grained": lambda r: _keyed(
        "github_pat_" + _rand(r, _ALNUM, 22) + "_" + _rand(r, _ALNUM, 59)
    ),
    "slack_webhook": lambda r: _keyed(
        f"https://hooks.slack.com/services/T{_rand(r, _UP, 8)}/B{_rand(r, _UP, 8)}/{_rand(r, _ALNUM, 24)}"
    ),
    "stripe_webhook": lambda r: _keyed("whsec_" + _rand(r, _ALNUM, 32)),
    "anthropic_key": lambda r: _keyed("sk-ant-api03-" + _rand(r, _URLSAFE, 80) + "AA"),
    "openai_project_key": lambda r: _keyed("sk-proj-" + _rand(r, _URLSAFE, 48)),
    "npm_token": lambda r: _keyed("npm_" + _rand(r, _ALNUM, 36)),
    "pypi_token": lambda r: _keyed("pypi-AgEIcHlwaS5vcmc" + _rand(r, _URLSAFE, 60)),
    "sendgrid_key": lambda r: _keyed("SG." + _rand(r, _URLSAFE, 22) + "." + _rand(r, _URLSAFE, 43)),
    "twilio_key": lambda r: _keyed("SK" + _hexs(r, 32)),
    "mailgun_key": lambda r: _keyed("key-" + _rand(r, _ALNUM, 32)),
    "shopify_token": lambda r: _keyed("shpat_" + _hexs(r, 32)),
    "digitalocean_token": lambda r: _keyed("dop_v1_" + _hexs(r, 64)),
    "databricks_token": lambda r: _keyed("dapi" + _hexs(r, 32)),
    "vault_token": lambda r: _keyed("hvs." + _rand(r, _URLSAFE, 90)),
    "telegram_bot_token": lambda r: _keyed(f"{r.randint(10**8, 10**10 - 1)}:AA{_rand(r, _URLSAFE, 33)}"),
    "discord_webhook": lambda r: _keyed(
        f"https://discord.com/api/webhooks/{r.randint(10**17, 10**18 - 1)}/{_rand(r, _URLSAFE, 68)}"
    ),
    "password_phrase": lambda r: _said(r, ("password", "passphrase", "PIN code"), _password(r)),
    "token_phrase": lambda r: (lambda v: (f"my token is {v}", [v]))(
        _rand(r, _ALNUM, 8) + str(r.randint(10, 99)) + _rand(r, _ALNUM, 8)
    ),
    "secret_hex": lambda r: _assigned(r, ("secret", "client_secret", "SECRET"), _hexs(r, 32)),
    "basic_auth": lambda r: (lambda v: (f"Authorization: Basic {v}", [v]))(_b64("svc:" + _password(r))),
    "ssh_private_key": lambda r: _pem("OPENSSH PRIVATE KEY", r),
    "pgp_private_key": lambda r: _pem("PGP PRIVATE KEY BLOCK", r),
    "ec_private_key": lambda r: _pem("EC PRIVATE KEY", r),
    "age_secret_key": lambda r: _keyed("AGE-SECRET-KEY-1" + _rand(r, "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58)),
    "linear_key": lambda r: _keyed("lin_api_" + _rand(r, _ALNUM, 40)),
    "doppler_token": lambda r: _keyed("dp.pt." + _rand(r, _ALNUM, 43)),
}


PLANT_KINDS = (
    "aws_access_key",
    "aws_secret_key",
    "gcp_api_key",
    "github_token",
    "slack_token",
    "stripe_key",
    "sk_api_key",
    "hf_token",
    "bearer_token",
    "private_key",
    "jwt",
    "iban",
    "card_number",
    "email",
    "phone_number",
    "credential",
    "url_password",
    "think_block",
)
# Every credential shape the planted-corpus test and benchmark use (personal data: PII_KINDS).
CREDENTIAL_KINDS = (
    *(k for k in PLANT_KINDS if k not in ("iban", "card_number", "email", "phone_number", "think_block")),
    *_EXTRA,
)
PII_KINDS = ("iban", "card_number", "email", "phone_number")
SEPARATORS = (" ", "  ", "\n", ", ", "; ", ": ", " (", ") ", '"', "'", "\t", " - ", "=")


def planted_text(r: random.Random, kind: str, filler: str) -> tuple[str, list[str]]:
    """Insert a planted item at a random position of ``filler`` (cut at a random place) with a random
    separator on each side."""
    item, must_vanish = plant(kind, r)
    cut = r.randint(0, len(filler))
    left = r.choice(SEPARATORS) if cut > 0 else ""
    right = r.choice(SEPARATORS) if cut < len(filler) else ""
    return f"{filler[:cut]}{left}{item}{right}{filler[cut:]}", must_vanish


def survives(secret: str, out: str, context: str = "", window: int = 10) -> bool:
    """Whether the secret, or any ``window``-character piece of it, is still in ``out`` (pieces that
    also occur in the surrounding ``context`` do not count: they were there anyway)."""
    if secret in out:
        return True
    k = min(window, len(secret))
    for i in range(len(secret) - k + 1):
        piece = secret[i : i + k]
        if piece in out and piece not in context:
            return True
    return False


def bench_corpus(r: random.Random, n_records: int, plant_rate: float = 0.03) -> list[dict]:
    """Ledger records for the benchmark: ordinary text with a few planted secrets, reasoning blocks and
    label words, as real teacher output would have now and then."""
    out = []
    for i in range(n_records):
        rec = ledger_record(r, i)
        if r.random() < plant_rate:
            entry = r.choice(rec["model_ledger"])
            kind = r.choice(PLANT_KINDS + ("label_word",))
            if kind == "label_word":
                entry["description"] += (
                    " (" + r.choice(("sabotaged", "incident", "discrepancy", "gold label")) + ")"
                )
            else:
                entry["description"], _ = planted_text(r, kind, entry["description"])
        out.append(rec)
    return out
