"""The pack's one logger (ComfyUI shows it in its console and log file) and `log_once` for fallbacks that would
otherwise repeat on every step. Every layer above checks/ logs through here."""

from __future__ import annotations

import logging

LOG = logging.getLogger("H3Kit")
_LOGGED_ONCE: set[str] = set()


def log_once(key: str, message: str, level: int = logging.WARNING) -> bool:
    """Log `message` the first time `key` is seen in this process; return True when it was logged."""
    if key in _LOGGED_ONCE:
        return False
    _LOGGED_ONCE.add(key)
    LOG.log(level, message)
    return True
