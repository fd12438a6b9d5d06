"""No hidden interference: the law ``"none"`` makes no law, so co-located jobs never slow each
other beyond what the physics says."""

from __future__ import annotations


def no_interference() -> None:
    """No hidden interference."""
    return None
