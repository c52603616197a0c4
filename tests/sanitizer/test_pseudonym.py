"""Keyed pseudonymization: same-shaped surrogates, one per value and key, modes per class."""

from __future__ import annotations

import random

import pytest

from sanitizer import RuleError, Sanitizer
from sanitizer.checks import _card_ok, _iban_ok
from sanitizer.corpus import _card, _email, _iban, _phone
from sanitizer.pseudonym import Pseudonymizer

KEY = b"k" * 32


def _san(key: bytes = KEY, modes=None) -> Sanitizer:
    return Sanitizer.from_packs(["secrets"], pseudonymizer=Pseudonymizer(key, modes))


@pytest.mark.parametrize("seed", range(20))
def test_surrogates_keep_the_shape_and_checksums(seed):
    r = random.Random(seed)
    p = Pseudonymizer(KEY)
    iban = _iban(r)
    s = p.surrogate("iban", iban)
    assert s != iban and len(s) == len(iban) and s[:2] == iban[:2]
    assert [i for i, c in enumerate(s) if c == " "] == [i for i, c in enumerate(iban) if c == " "]
    assert _iban_ok(s.replace(" ", "").encode())
    card = _card(r)
    s = p.surrogate("card", card)
    digits = s.replace(" ", "").replace("-", "")
    assert s != card and len(s) == len(card) and _card_ok(digits.encode())
    assert [c for c in s if not c.isdigit()] == [c for c in card if not c.isdigit()]
    phone = _phone(r)
    s = p.surrogate("phone", phone)
    assert s != phone and len(s) == len(phone)
    assert [c for c in s if not c.isdigit()] == [c for c in phone if not c.isdigit()]
    s = p.surrogate("email", _email(r))
    assert s.startswith("user.") and s.endswith("@example.invalid")


def test_one_surrogate_per_value_and_key():
    a, b = Pseudonymizer(KEY), Pseudonymizer(KEY)
    iban = "DE89370400440532013000"
    assert a.surrogate("iban", iban) == b.surrogate("iban", iban)
    assert a.surrogate("iban", "DE89 3704 0044 0532 0130 00").replace(" ", "") == a.surrogate("iban", iban)
    assert a.surrogate("email", "Jane.Doe@Acme.io") == a.surrogate("email", "jane.doe@acme.io")
    assert Pseudonymizer(b"j" * 32).surrogate("iban", iban) != a.surrogate("iban", iban)
    values = {_iban(random.Random(i)).replace(" ", "") for i in range(2000)}
    assert len({a.surrogate("iban", v) for v in values}) == len(values)  # distinct values stay distinct
    assert "k" * 8 not in repr(a)


def test_text_is_pseudonymized_consistently_and_idempotently():
    san = _san()
    text = "wire to DE89 3704 0044 0532 0130 00, card 4111 1111 1111 1111, mail jane.doe@acme.io, call +44 20 7946 0958"
    out, findings, _ = san.sanitize_text(text)
    assert {f.action for f in findings} == {"pseudonymize"}
    for original in (
        "DE89 3704 0044 0532 0130 00",
        "4111 1111 1111 1111",
        "jane.doe@acme.io",
        "+44 20 7946 0958",
    ):
        assert original not in out
    assert "@example.invalid" in out
    assert san.sanitize_text(out)[0] == out
    again, _, _ = _san().sanitize_text(text)
    assert again == out  # the same key, another instance: the same surrogates


def test_modes_per_class():
    text = "mail jane.doe@acme.io, iban DE89370400440532013000"
    out, _, _ = _san(modes={"email": "keep", "iban": "redact"}).sanitize_text(text)
    assert out == "mail jane.doe@acme.io, iban [SECRET:iban]"
    with pytest.raises(RuleError):
        _san(modes={"email": "hide"})
    with pytest.raises(RuleError):
        _san(modes={"passport": "redact"})


def test_credentials_beat_personal_data_they_overlap():
    out, _, _ = _san().sanitize_text("postgres://svc:Pa55word@db-1.acme.io:5432/app")
    assert "Pa55word" not in out and "[SECRET:password]" in out


def test_report_hashes_use_a_random_salt_by_default():
    a, b = Sanitizer.from_packs(["secrets"]), Sanitizer.from_packs(["secrets"])
    fa = a.sanitize_text("key AKIAZ7Q2MV4XK3PLW9RD")[1][0]
    fb = b.sanitize_text("key AKIAZ7Q2MV4XK3PLW9RD")[1][0]
    assert fa.digest != fb.digest


def test_labelled_person_names_get_one_surrogate_and_the_rest_stays():
    san = _san()
    text = (
        '{"traveler": "Dana Whitfield", "name": "Northwind Office Supply"} '
        "Dear Dr. Dana Whitfield, contact: Aiko van der Berg; employee: U-221"
    )
    out = san.sanitize_text(text)[0]
    assert "Dana Whitfield" not in out and "Aiko van der Berg" not in out
    assert "Northwind Office Supply" in out and "U-221" in out  # a bare name key is not a label
    surrogate = san.pseudonymizer.surrogate("person_name", "Dana Whitfield")
    assert out.count(surrogate) == 2  # the title does not make another person
    assert san.sanitize_text(out)[0] == out


def test_person_names_labelled_once_are_found_in_prose():
    san = _san()
    texts = ['arguments: {"exec_name":"Priya Raman"}', "Moved the 1:1 of Priya Raman to Friday."]
    names = san.person_names(texts)
    assert names == ("Priya Raman",)
    outs = [san.sanitize_text(t, names=names)[0] for t in texts]
    surrogate = san.pseudonymizer.surrogate("person_name", "Priya Raman")
    assert all(surrogate in o and "Priya" not in o for o in outs)
    keep = _san(modes={"person_name": "keep"})
    assert keep.person_names(texts) == () and keep.sanitize_text(texts[0])[0] == texts[0]
