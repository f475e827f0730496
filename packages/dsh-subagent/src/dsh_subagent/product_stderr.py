"""Where a product's stderr lines go: one logger per product, each line as it came."""

from __future__ import annotations

import logging

from dsh_subprocess import StderrObserver

__all__ = ["stderr_logger"]


def stderr_logger(product_slug: str, provider: str, run_id: str) -> StderrObserver:
    """An observer logging each stderr line on ``dsh.product.<product_slug>`` at INFO.

    The record carries ``provider`` and ``run_id`` as extras, so a handler can tell runs
    apart without parsing the line.
    """
    logger = logging.getLogger(f"dsh.product.{product_slug}")
    extra = {"provider": provider, "run_id": run_id}

    def observe(line: str) -> None:
        # The line is the message, unchanged and never parsed (no %-formatting: no args).
        logger.info(line, extra=extra)

    return observe
