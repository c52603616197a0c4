"""The console logger of the entry scripts: one handler, a prefix that says which stage speaks."""

from __future__ import annotations

import logging


def console_logger(name: str, prefix: str) -> logging.Logger:
    """``name``'s logger at INFO on stderr as ``[prefix] LEVEL message``; idempotent, not propagated
    (the libraries' own loggers keep their settings)."""
    logger = logging.getLogger(name)
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(f"[{prefix}] %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger
