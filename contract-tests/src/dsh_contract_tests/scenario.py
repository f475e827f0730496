"""What the kit asks of the child, and what it hands the provider author's factory.

Per-run behaviour travels inside the task text as one directive line, so one provider
instance can serve runs that behave differently (the concurrency rule needs that) and
so a loopback model fixture can read it straight out of the request body it receives::

    dsh-contract/1 hold T-3f9a0c

The author's scripted child (or model fixture) finds it with :func:`find_directive`
and then: ``complete`` answers exactly the token; ``fail`` fails the product with the
planted raw error text and stderr line; ``hold`` keeps working until cancelled (and,
where it can, first signals :meth:`ChildSetup.ready_path`). ``recall`` (the
``continuation:*`` rules, only for a provider declaring continuation) answers the token
of the first ``complete`` directive earlier in the same session, which the child sees
only if the run continued that session; when there are several directives, the last one
is the run's own (:func:`find_directive`).

The ``output:*`` rules (only for a provider declaring ``output_schema``) start runs with
:data:`OUTPUT_SCHEMA`. A child that was handed that schema answers ``complete`` as
:func:`structured_answer` (``{"token": "<token>"}``) and ``misshapen`` as
:func:`misshapen_answer` (``{"token": 7}``: the wrong type); a child that was not handed
a schema answers both with the bare token.

The ``confinement:*`` rules send ``reach``: the task also carries a command line
(:mod:`dsh_contract_tests.reach`) that the product runs with its shell tool; the run
then answers the token followed by what the command printed.
"""

from __future__ import annotations

import re
import secrets as _secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from dsh_subagent import SubagentProvider

__all__ = [
    "DIRECTIVE_PREFIX",
    "ENV_ERROR_TEXT",
    "ENV_READY_DIR",
    "ENV_STDERR_TEXT",
    "OUTPUT_SCHEMA",
    "Behaviour",
    "ChildSetup",
    "Directive",
    "PlantedSecrets",
    "ProductHome",
    "ProviderFactory",
    "find_directive",
    "find_directives",
    "misshapen_answer",
    "new_token",
    "recalled_token",
    "structured_answer",
]

Behaviour = Literal["complete", "fail", "hold", "recall", "misshapen", "reach"]

DIRECTIVE_PREFIX = "dsh-contract/1"
_DIRECTIVE = re.compile(
    r"dsh-contract/1 (complete|fail|hold|recall|misshapen|reach) (T-[0-9a-f]{6,32})"
)

ENV_READY_DIR = "DSH_CONTRACT_READY_DIR"
"""Overlay variable: directory where a holding child creates a file named by its token."""
ENV_STDERR_TEXT = "DSH_CONTRACT_STDERR_TEXT"
"""Overlay variable: the line a failing child writes to stderr (a planted secret)."""
ENV_ERROR_TEXT = "DSH_CONTRACT_ERROR_TEXT"
"""Overlay variable: the raw error text a failing child reports (a planted secret)."""


OUTPUT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"token": {"type": "string"}},
    "required": ["token"],
    "additionalProperties": False,
}
"""The output schema of the ``output:*`` rules (strict-mode compatible)."""


def structured_answer(token: str) -> dict[str, Any]:
    """The conforming answer to :data:`OUTPUT_SCHEMA` of a ``complete`` run."""
    return {"token": token}


def misshapen_answer() -> dict[str, Any]:
    """The non-conforming answer of a ``misshapen`` run: ``token`` of the wrong type."""
    return {"token": 7}


def new_token() -> str:
    """A fresh run token: the exact answer of a ``complete`` run and the ready-file name."""
    return f"T-{_secrets.token_hex(6)}"


@dataclass(frozen=True, slots=True)
class Directive:
    """One run's requested behaviour."""

    behaviour: Behaviour
    token: str

    @property
    def line(self) -> str:
        """The directive as it appears in the task text."""
        return f"{DIRECTIVE_PREFIX} {self.behaviour} {self.token}"


def find_directive(text: str) -> Directive | None:
    """Find the kit's directive in ``text`` (task text or a raw request body).

    A continued session's request also carries the earlier turns' directives before the
    run's own, so the last one wins.
    """
    found = find_directives(text)
    return found[-1] if found else None


def find_directives(text: str) -> list[Directive]:
    """Every kit directive in ``text``, in order."""
    return [
        Directive(match.group(1), match.group(2))  # type: ignore[arg-type]
        for match in _DIRECTIVE.finditer(text)
    ]


def recalled_token(text: str) -> str:
    """What a ``recall`` run answers: the token of the first ``complete`` directive in
    ``text`` (an earlier turn of the session), else ``no-earlier-turn``."""
    for directive in find_directives(text):
        if directive.behaviour == "complete":
            return directive.token
    return "no-earlier-turn"


@dataclass(frozen=True, slots=True)
class PlantedSecrets:
    """Values that must never reach a diagnostic, an output or a lifecycle event."""

    task: str
    path: str
    env_value: str
    stderr: str
    raw_error: str

    def all(self) -> dict[str, str]:
        """The secrets by channel name."""
        return {
            "task text": self.task,
            "path": self.path,
            "env value": self.env_value,
            "stderr line": self.stderr,
            "raw error": self.raw_error,
        }


@dataclass(frozen=True, slots=True)
class ProductHome:
    """Temporary per-test product homes; the kit layers them into :attr:`ChildSetup.env`."""

    home: Path
    codex_home: Path
    claude_config_dir: Path
    tmpdir: Path

    def env(self) -> dict[str, str]:
        """``HOME``, ``CODEX_HOME``, ``CLAUDE_CONFIG_DIR`` and ``TMPDIR``."""
        return {
            "HOME": str(self.home),
            "CODEX_HOME": str(self.codex_home),
            "CLAUDE_CONFIG_DIR": str(self.claude_config_dir),
            "TMPDIR": str(self.tmpdir),
        }


@dataclass(frozen=True, slots=True)
class ChildSetup:
    """Everything the author's factory needs to build one provider instance.

    Attributes:
        env: The overlay to configure *explicitly* on the provider (its ``env``
            configuration): temporary homes, the ready directory, the failure texts and
            the credential-shaped overlay variable the env rule looks for.
        cwd_override: The provider's configured cwd override, or ``None`` for none.
        home: The temporary product homes (also present in ``env``).
        ready_dir: Where a holding child signals it reached its hold point.
        scratch: A private directory the factory may use (product config files, ...).
        secrets: Planted secrets of the secret rule; ``None`` in the other rules.
        error_text: What a ``fail`` child reports as its raw error.
        stderr_text: What a ``fail`` child writes to stderr.
    """

    env: Mapping[str, str]
    cwd_override: str | None
    home: ProductHome
    ready_dir: Path
    scratch: Path
    error_text: str
    stderr_text: str
    secrets: PlantedSecrets | None = None
    extra: Mapping[str, object] = field(default_factory=dict)

    def ready_path(self, token: str) -> Path:
        """The file a holding run with ``token`` creates when it reached its hold point."""
        return self.ready_dir / token


ProviderFactory = Callable[[ChildSetup], SubagentProvider]
"""What the author's ``provider_factory`` fixture returns."""
