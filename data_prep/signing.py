"""Ed25519 signatures of run seals (optional; the ``cryptography`` package).

An unsigned run seal is tamper evidence against accidents and partial edits: change one field and the
seal no longer matches. It is no defence against someone who can rewrite the whole record, because the
seal is a plain digest anyone can recompute. A signature by a key the writer of the corpus holds is:
``verify.py --public-key`` refuses a run whose seal was recomputed by anyone without the private key.

Keys are PEM files (``openssl genpkey -algorithm ed25519 -out key.pem``; ``openssl pkey -in key.pem
-pubout -out key.pub.pem``) or the raw 32 bytes as 64 hex characters. The private key comes from
``--signing-key FILE`` or the environment variable ``LEDGERWRIGHT_SIGNING_KEY`` (PEM text or hex);
it is never written to any output or message.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

from data_prep.inputs import InputError, read_bytes

SIGNATURE_ALG = "ed25519"
SIGNING_KEY_ENV = "LEDGERWRIGHT_SIGNING_KEY"
_SIG_CONTEXT = b"ledgerwright/run-seal-signature/v1\x00"


class SigningKeyError(ValueError):
    """A key that cannot be loaded: ``source: problem`` (never the key material)."""


def _raw_or_pem(data: bytes, source: str, private: bool):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    text = data.strip()
    try:
        if len(text) == 64 and all(c in b"0123456789abcdefABCDEF" for c in text):
            raw = bytes.fromhex(text.decode("ascii"))
            cls = ed25519.Ed25519PrivateKey if private else ed25519.Ed25519PublicKey
            return cls.from_private_bytes(raw) if private else cls.from_public_bytes(raw)
        if private:
            key = serialization.load_pem_private_key(text, password=None)
        else:
            key = serialization.load_pem_public_key(text)
    except (ValueError, TypeError, UnicodeDecodeError) as exc:
        kind = "private" if private else "public"
        raise SigningKeyError(f"{source}: not an Ed25519 {kind} key ({type(exc).__name__})") from None
    want = ed25519.Ed25519PrivateKey if private else ed25519.Ed25519PublicKey
    if not isinstance(key, want):
        raise SigningKeyError(f"{source}: not an Ed25519 key ({type(key).__name__})")
    return key


def _public_raw(public_key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(public_key) -> str:
    """A short public name of a key: the first 16 hex digits of the sha256 of its raw bytes."""
    return hashlib.sha256(_public_raw(public_key)).hexdigest()[:16]


class Signer:
    """Signs run-seal digests with one private key."""

    def __init__(self, private_key):
        self._key = private_key
        self.public_key = private_key.public_key()
        self.key_id = key_id(self.public_key)

    def __repr__(self) -> str:  # never the key
        return f"Signer(key_id={self.key_id})"

    def sign(self, seal_digest: str) -> dict:
        sig = self._key.sign(_SIG_CONTEXT + seal_digest.encode("ascii"))
        return {"alg": SIGNATURE_ALG, "key_id": self.key_id, "value": base64.b64encode(sig).decode("ascii")}


def load_signer(path: str | Path | None = None, environ: dict | None = None) -> Signer | None:
    """The signer from ``path``, else from ``$LEDGERWRIGHT_SIGNING_KEY``, else None (unsigned)."""
    env = os.environ if environ is None else environ
    if path is not None:
        try:
            data = read_bytes(path, 1 << 16)
        except InputError as exc:
            raise SigningKeyError(str(exc)) from None
        return Signer(_raw_or_pem(data, str(path), private=True))
    text = env.get(SIGNING_KEY_ENV)
    if text:
        return Signer(_raw_or_pem(text.encode("utf-8", "replace"), f"${SIGNING_KEY_ENV}", private=True))
    return None


def load_public_key(path: str | Path):
    try:
        data = read_bytes(path, 1 << 16)
    except InputError as exc:
        raise SigningKeyError(str(exc)) from None
    return _raw_or_pem(data, str(path), private=False)


def verify_signature(public_key, seal_digest: str, signature) -> str | None:
    """None when ``signature`` is a valid signature of ``seal_digest`` by ``public_key``, else why not."""
    from cryptography.exceptions import InvalidSignature

    if not isinstance(signature, dict):
        return "unsigned (no seal.signature)"
    if signature.get("alg") != SIGNATURE_ALG:
        return f"signature alg must be {SIGNATURE_ALG}"
    if signature.get("key_id") != key_id(public_key):
        return "signed by another key (key_id differs)"
    value = signature.get("value")
    try:
        raw = base64.b64decode(value, validate=True) if isinstance(value, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != 64:
        return "signature value is not 64 base64-encoded bytes"
    try:
        public_key.verify(raw, _SIG_CONTEXT + seal_digest.encode("ascii", "replace"))
    except InvalidSignature:
        return "signature does not match the seal (re-sealed or edited without the key)"
    return None
