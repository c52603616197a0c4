"""Field selectors: dotted paths with ``[]`` for "every list item".

``model_ledger[].description`` selects the description of every ledger entry; a selector also covers
everything below it (``teacher`` selects every string under ``teacher``; ``messages[]`` every string in
every message). Concrete locations in findings keep the index: ``model_ledger[3].description``.
"""

from __future__ import annotations

from collections.abc import Iterable


def normalize_selector(sel: str) -> str:
    """Canonical form of a selector: no ``$.`` prefix, no blanks, indices written as ``[]``."""
    s = sel.strip()
    if s.startswith("$"):
        s = s[1:].lstrip(".")
    if not s:
        raise ValueError("empty field selector")
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "[":
            j = s.find("]", i)
            if j < 0:
                raise ValueError(f"unclosed [ in field selector {sel!r}")
            inner = s[i + 1 : j].strip()
            if inner not in ("", "*") and not inner.isdigit():
                raise ValueError(f"bad index [{inner}] in field selector {sel!r}")
            out.append("[]")
            i = j + 1
        elif c == "]":
            raise ValueError(f"stray ] in field selector {sel!r}")
        else:
            out.append(c)
            i += 1
    norm = "".join(out)
    if norm.startswith(".") or norm.endswith(".") or ".." in norm:
        raise ValueError(f"bad field selector {sel!r}")
    return norm


def covers(selector: str, npath: str) -> bool:
    """True if a normalized selector selects the normalized path ``npath`` (or an ancestor of it)."""
    if npath == selector:
        return True
    if npath.startswith(selector):
        nxt = npath[len(selector)]
        return nxt == "." or nxt == "["
    return False


def covered_by_any(selectors: Iterable[str] | None, npath: str) -> bool:
    if selectors is None:
        return True
    return any(covers(s, npath) for s in selectors)


def format_path(keys: tuple) -> str:
    """``("model_ledger", 3, "description")`` -> ``model_ledger[3].description``."""
    parts: list[str] = []
    for k in keys:
        if isinstance(k, int):
            parts.append(f"[{k}]")
        elif parts:
            parts.append(f".{k}")
        else:
            parts.append(str(k))
    return "".join(parts)
