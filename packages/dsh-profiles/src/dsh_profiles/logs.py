"""What the ``dsh`` command shows of the libraries' logging, and where.

The libraries never write to the host's stderr: a product's own stderr lines are logged
at INFO, one line per record, on ``dsh_subprocess.stderr`` and under ``dsh.product``
(``dsh.product.codex``, ...). ``dsh`` owns the host side:

* without ``-v`` product lines are dropped (a product's noise never mixes with dsh's own
  lines, the demo included) and other records are shown from ERROR up (dsh-worktree's
  from WARNING up: what isolation accepted on the user's behalf);
* with ``-v`` product lines are shown, and other records from WARNING up.

Shown records go to the command's stderr as ``<logger>: <message>``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final, TextIO

__all__ = ["PRODUCT_LOGGERS", "cli_logging"]

PRODUCT_LOGGERS: Final = ("dsh.product", "dsh_subprocess.stderr")
"""Loggers (with their children) that carry products' own stderr lines."""


_ALWAYS_WARNED: Final = ("dsh_worktree",)
"""Loggers whose warnings are shown without ``-v``: what worktree isolation accepted on
the user's behalf (submodules left uninitialised, an abandoned worktree recovered)."""


def _quiet(record: logging.LogRecord) -> bool:
    if record.levelno >= logging.ERROR:
        return True
    return record.name.split(".")[0] in _ALWAYS_WARNED


@contextmanager
def cli_logging(*, verbose: bool, stream: TextIO) -> Iterator[logging.StreamHandler[TextIO]]:
    """Route logging to ``stream`` for one command; everything is restored on exit.

    Yields the handler, so a live display on the same stream can route records above
    itself while it is up.
    """
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    handler.setLevel(logging.INFO if verbose else logging.WARNING)
    if not verbose:
        handler.addFilter(_quiet)
    root = logging.getLogger()
    products = [logging.getLogger(name) for name in PRODUCT_LOGGERS]
    saved = [(logger.level, logger.propagate) for logger in products]
    for logger in products:
        if verbose:
            logger.setLevel(logging.INFO)
        else:
            logger.propagate = False
    # Without -v a product logger reaches no handler at all; NullHandler keeps Python's
    # last-resort handler from printing its WARNING-and-up records anyway.
    silencers = [] if verbose else [logging.NullHandler() for _ in products]
    for logger, silencer in zip(products, silencers, strict=False):
        logger.addHandler(silencer)
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        for logger, silencer in zip(products, silencers, strict=False):
            logger.removeHandler(silencer)
        for logger, (level, propagate) in zip(products, saved, strict=True):
            logger.setLevel(level)
            logger.propagate = propagate
