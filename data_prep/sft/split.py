"""Which split an example goes to: held-out by workflow or case family, the rest train or validation
by a seeded hash of its group id (so one run's or case's examples never straddle splits)."""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata

from data_prep.sft.config import BuildConfig

_VERSION_SUFFIX = re.compile(r"(?:-(?:v|ver|version)?-?\d+(?:-\d+)*|-copy|-new|-old)+$")
_SEPARATORS = re.compile(r"[\s_\-./:\u2010-\u2015\u2212]+")
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad\u180e"))


@functools.lru_cache(maxsize=4096)
def family_key(name: str) -> str:
    """The name a family is held out by: Unicode NFKC, invisible characters removed, case folded,
    every run of whitespace and separators one dash, version and copy suffixes dropped
    (``Travel_Rebooking v2 `` and ``travel-rebooking`` are one family)."""
    s = unicodedata.normalize("NFKC", name).translate(_INVISIBLE).casefold()
    s = _SEPARATORS.sub("-", s).strip("-")
    return _VERSION_SUFFIX.sub("", s) or s


def split_of(family: str, group_id: str, heldout: set[str], cfg: BuildConfig) -> str:
    if family_key(family) in {family_key(h) for h in heldout}:
        return "heldout"
    h = hashlib.sha256(f"{cfg.seed}:{group_id}".encode()).digest()
    return "validation" if int.from_bytes(h[:8], "big") / 2**64 < cfg.validation_fraction else "train"
