"""Bad configuration and input matrix: every field, clear error naming it, nothing started.

Each provider configuration is loaded through the real Loader (``dsh_profiles.compose`` with
the installed entry points), exactly as a profile would be, and the error must name the
row's field. Bad task inputs go through each provider's ``start()`` and must raise a
:class:`~dsh_subagent.SubagentError` before any product process starts.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from dsh_profiles import ProfileError, compose, parse_profile
from dsh_subagent import (
    CancelController,
    ParentContext,
    ResolvedSubagentStartRequest,
    SubagentDescriptor,
    SubagentError,
    TextBlock,
)
from dsh_subprocess.testing import ProcessWatch

from reliability.cells import ANSWER
from reliability.fakes import FakeSetup
from reliability.planted import Planted

__all__ = [
    "CaseReport",
    "ConfigCase",
    "config_cases",
    "run_config_case",
    "run_task_case",
    "task_cases",
]


@dataclass(frozen=True)
class ConfigCase:
    """One invalid value for one field of one provider row (or one bad profile)."""

    provider: str
    field: str
    label: str
    value: Any
    xfail: str | None = None

    @property
    def id(self) -> str:
        """``provider.field=label``."""
        return f"{self.provider}.{self.field}={self.label}"


@dataclass
class CaseReport:
    """Whether a case was refused clearly with nothing started."""

    case_id: str
    ok: bool
    detail: str
    started: int = 0


_COMMON: list[tuple[str, str, Any]] = [
    ("provider_name", "empty", ""),
    ("provider_name", "wrong-type", 5),
    ("model", "empty", ""),
    ("model", "wrong-type", 7),
    ("env", "wrong-type", "KEY=value"),
    ("env", "non-text-value", {"NAME": 5}),
    ("dispose_grace", "nan", math.nan),
    ("dispose_grace", "inf", math.inf),
    ("dispose_grace", "zero", 0),
    ("dispose_grace", "negative", -1.0),
    ("dispose_grace", "bool", True),
    ("dispose_grace", "text", "2"),
    ("dispose_grace", "too-large", 1e10),
    ("cwd", "empty", ""),
    ("cwd", "relative-missing", "no/such/reliability-dir"),
    ("cwd", "missing", "/nonexistent/reliability-dir"),
    ("cwd", "file", "$FILE"),
    ("cwd", "non-enterable", "$NOEXEC"),
    ("cwd", "wrong-type", 3),
    ("bogus_field", "unknown-field", 1),
]

_ENV_NAMES: list[tuple[str, str, Any]] = [
    ("env", "empty-name", {"": "value"}),
    ("env", "name-with-equals", {"A=B": "value"}),
]


def config_cases() -> list[ConfigCase]:
    """Every (provider, field, invalid value) case."""
    cases: list[ConfigCase] = []
    for provider in ("codex", "claude-code", "acp"):
        rows = list(_COMMON)
        if provider == "acp":
            rows = [r for r in rows if r[0] not in ("model",)]
            rows += [
                ("command", "empty", ""),
                ("command", "blank", "   "),
                ("command", "wrong-type", 5),
                ("args", "wrong-type", "not-a-list"),
                ("args", "non-text-item", [1]),
                ("permission", "unknown-mode", "ask-me"),
                ("dispose_eof_grace", "nan", math.nan),
                ("dispose_eof_grace", "negative", -2),
            ]
        else:
            rows += [
                ("permission_mode", "unknown-mode", "ask-me"),
                ("permission_mode", "empty", ""),
            ]
        for field, label, value in [*rows, *_ENV_NAMES]:
            cases.append(ConfigCase(provider, field, label, value))
    cases += [
        ConfigCase("loader", "provider_name", "duplicate-names", None),
        ConfigCase("loader", "type", "unknown-provider-type", None),
        ConfigCase("loader", "config.provider_name", "name-inside-config", None),
        ConfigCase("loader", "name", "duplicate-tool-names", None),
        ConfigCase("loader", "provider", "tool-unknown-provider", None),
        ConfigCase("loader", "name", "blank-tool-name", None),
        ConfigCase("loader", "background_mode", "unknown-mode", None),
    ]
    return cases


def _base(provider: str, root: Path) -> dict[str, Any]:
    if provider == "acp":
        return {"command": "/bin/true"}
    return {}


def _profile(case: ConfigCase, root: Path) -> dict[str, Any]:
    if case.provider == "loader":
        acp = {"type": "acp", "config": {"command": "/bin/true"}}
        tools: list[dict[str, Any]] = [
            {"name": "ask", "provider": "acp", "background_mode": "disabled"}
        ]
        providers: list[dict[str, Any]] = [acp]
        if case.label == "duplicate-names":
            providers = [acp, {"type": "codex", "provider_name": "acp"}]
        elif case.label == "unknown-provider-type":
            providers = [acp, {"type": "no-such-product"}]
        elif case.label == "name-inside-config":
            providers = [{"type": "acp", "config": {"command": "/bin/true", "provider_name": "x"}}]
        elif case.label == "duplicate-tool-names":
            tools = [tools[0], dict(tools[0])]
        elif case.label == "tool-unknown-provider":
            tools = [{"name": "ask", "provider": "nobody", "background_mode": "disabled"}]
        elif case.label == "blank-tool-name":
            tools = [{"name": " ", "provider": "acp", "background_mode": "disabled"}]
        elif case.label == "unknown-mode":
            tools = [{"name": "ask", "provider": "acp", "background_mode": "sometimes"}]
        return {"providers": providers, "tools": tools}
    value = case.value
    if value == "$FILE":
        target = root / "a-file"
        target.write_text("x")
        value = str(target)
    elif value == "$NOEXEC":
        target = root / "no-exec"
        target.mkdir(exist_ok=True)
        target.chmod(0o600)
        value = str(target)
    config = _base(case.provider, root)
    row: dict[str, Any] = {"type": case.provider}
    if case.field == "provider_name":
        row["provider_name"] = value
    else:
        config[case.field] = value
    row["config"] = config
    return {"providers": [row]}


def run_config_case(case: ConfigCase, root: Path) -> CaseReport:
    """Load the case's profile through the Loader; it must be refused naming the field."""
    watch = ProcessWatch()
    raw = _profile(case, root)
    try:
        compose(parse_profile(raw, "bad.toml"), source="bad.toml")
    except ProfileError as exc:
        message = str(exc)
        started = len(watch.alive())
        # The whole path may go deeper (``config.env.NAME``); it must start at the field.
        named = re.search(rf"field '(config\.)?{re.escape(case.field)}(\.[^']*)?'", message)
        ok = named is not None and started == 0
        return CaseReport(case.id, ok, message if ok else f"field not named: {message}", started)
    finally:
        for path in root.glob("no-exec"):
            path.chmod(0o700)
    return CaseReport(case.id, False, "the Loader accepted it")


TASK_LABELS = ("blank-task", "empty-task", "non-text-task", "no-working-directory")


def task_cases() -> list[tuple[str, str, str | None]]:
    """(product, label, xfail finding) for every bad task input (no open finding left)."""
    return [
        (product, label, None)
        for product in ("codex", "claude-code", "acp")
        for label in TASK_LABELS
    ]


def _bad_prompt(label: str) -> tuple[Any, ...]:
    if label == "blank-task":
        return (TextBlock(text="   \n\t"),)
    if label == "empty-task":
        return ()
    if label == "non-text-task":
        # Not constructible through the public model: built raw, as a foreign caller might.
        return (TextBlock.model_construct(type="image", text=""),)  # type: ignore[arg-type]
    return (TextBlock(text="task"),)


async def run_task_case(product: str, label: str, root: Path) -> CaseReport:
    """Start ``product`` with a bad task (or no cwd): refused, naming it, nothing started."""
    setup = FakeSetup(root=root / f"{product}-{label}", planted=Planted())
    setup.root.mkdir()
    if product == "codex":
        provider: Any = setup.codex([])
    elif product == "claude-code":
        provider = setup.claude([{"op": "result", "result": ANSWER}])
    else:
        provider = setup.acp({})
    watch = ProcessWatch()
    outcome = "accepted"
    no_cwd = label == "no-working-directory"
    async with anyio.create_task_group() as tg:
        request = ResolvedSubagentStartRequest.model_construct(
            prompt=_bad_prompt(label),
            parent=ParentContext(session_id="bad", cwd=None if no_cwd else str(setup.workspace)),
            cancel=CancelController().signal,
            descriptor=SubagentDescriptor(provider=provider.name),
            task_group=tg,
            label=None,
            agent_options=None,
            output_schema=None,
            max_depth=None,
            tool_filter=None,
            persona=None,
        )
        try:
            run = await provider.start(request)
        except SubagentError as exc:
            outcome = f"{exc.code}: {exc.message}"
        else:
            await run.dispose()
    started = len(watch.alive()) + setup.started_marker.exists()
    named = "working directory" in outcome if no_cwd else "task" in outcome
    ok = outcome != "accepted" and named and started == 0
    return CaseReport(f"{product}.start={label}", ok, outcome, started)
