"""Fixed names this provider uses in messages and diagnostics."""

from __future__ import annotations

from typing import Final

__all__ = ["PREFIX", "PRODUCT"]

PREFIX: Final = "subagent-acp"
"""Prefix of every error message this distribution writes."""

PRODUCT: Final = "ACP"
"""Product name in the shared failure line."""
