"""The kit's rules, one module per requirement area of the manifest.

Each module holds the test functions of one area (``capability``, ``cwd``, ``env``,
``settlement``, ``diagnostic``, ``quiescence``, ``lifecycle``, ``concurrency``,
``continuation``, ``output``, ``ready``, ``confinement``,
``loader``, ``credentialed``), each tied to its requirement id with
:func:`~dsh_contract_tests.requirement`. They are not collected from here: the base
classes in :mod:`dsh_contract_tests.contract` bind them under their test names, and a
provider author subclasses those. Every rule is described in ``docs/rules.md``.
"""

from dsh_contract_tests.rules import (
    capability,
    concurrency,
    confinement,
    continuation,
    credentialed,
    cwd,
    diagnostic,
    env,
    lifecycle,
    loader,
    output,
    quiescence,
    ready,
    settlement,
)

__all__ = [
    "capability",
    "concurrency",
    "confinement",
    "continuation",
    "credentialed",
    "cwd",
    "diagnostic",
    "env",
    "lifecycle",
    "loader",
    "output",
    "quiescence",
    "ready",
    "settlement",
]
