"""``dsh model serve SCRIPT``: a scripted loopback model, and a profile that uses it, keyless.

The real products run against it as they would against a provider: ``dsh run``,
``dsh batch`` and ``dsh mcp`` take the profile it writes. The model answers from a
script file (``dsh model check SCRIPT`` validates one and starts nothing); the format
and the walk-through are in docs/keyless.md.

The servers are the contract kit's loopback fixtures (``dsh_contract_tests.fixtures``,
the ``demo`` extra, as for ``dsh demo``): one wire speaks OpenAI Responses (Codex,
codex-acp), the other Anthropic Messages (Claude Code). Both bind ``127.0.0.1`` only.
The command runs in the foreground until SIGINT or SIGTERM; SIGUSR1 releases held
requests. ``profile.toml`` exists exactly while the model serves, so a script can wait
for it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

import anyio
from dsh_profiles.errors import UsageError

if TYPE_CHECKING:  # the kit is the demo extra, imported only when the command runs
    from dsh_contract_tests.fixtures.scripted import ModelScript, ScriptedModels, Served

__all__ = ["add_model_parser", "cmd_model"]

PROFILE_NAME: Final = "profile.toml"
CODEX_TOOL: Final = "subagent_codex"
CLAUDE_TOOL: Final = "subagent_claude_code"
CODEX_ACP_TOOL: Final = "subagent_codex_acp"
# codex-acp streams a metadata warning into the answer for a model slug it does not know.
_CODEX_ACP_MODEL: Final = "gpt-5.4-mini"
# A held request sends nothing; Codex would give up on the silent stream after its idle
# timeout, so the profile's Codex waits as long as anyone plausibly holds (one hour).
_CODEX_IDLE_MS: Final = 3_600_000
_WIRE_NAMES: Final = {"responses": "Responses", "messages": "Messages"}


def add_model_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``dsh model serve`` and ``dsh model check`` on the sub-command parsers."""
    model = sub.add_parser(
        "model",
        parents=[common],
        help="a scripted loopback model to try the real products without keys",
        description="Serve a scripted model on 127.0.0.1 for the real Codex and Claude Code, "
        "and write a profile that points them at it (see docs/keyless.md).",
    )
    actions = model.add_subparsers(dest="model_command", required=True, metavar="ACTION")
    serve = actions.add_parser(
        "serve",
        parents=[common],
        help="serve SCRIPT in the foreground and write a ready profile",
        description="Serve SCRIPT on 127.0.0.1 (OpenAI Responses for Codex, Anthropic "
        "Messages for Claude Code) and write DIR/profile.toml, which binds the tools "
        f"{CODEX_TOOL} and {CLAUDE_TOOL} to keyless products pointed at it. Runs until "
        "Ctrl-C or SIGTERM (exit 0; profile.toml is removed); SIGUSR1 releases held requests.",
    )
    serve.add_argument("script", metavar="SCRIPT", help="the model script (TOML, or .json)")
    serve.add_argument(
        "--dir",
        metavar="DIR",
        help="where the profile and the products' homes go: a new or empty directory, "
        "kept afterwards (default: a temporary directory, removed afterwards)",
    )
    serve.add_argument(
        "--codex-acp",
        metavar="COMMAND",
        help=f"also bind the tool {CODEX_ACP_TOOL} to this codex-acp executable "
        "(e.g. as scripts/install-acp-agent installs it), on the same Responses wire",
    )
    check = actions.add_parser(
        "check",
        parents=[common],
        help="validate SCRIPT and show its rules; starts nothing",
    )
    check.add_argument("script", metavar="SCRIPT", help="the model script (TOML, or .json)")


def _scripted() -> Any:
    try:
        from dsh_contract_tests.fixtures import scripted
    except ImportError as exc:  # pragma: no cover - depends on the installed extra
        raise UsageError(
            "dsh model needs the loopback fixtures of the demo extra: pip install 'dsh-cli[demo]'"
        ) from exc
    return scripted


def _load(path: str) -> ModelScript:
    scripted = _scripted()
    try:
        script: ModelScript = scripted.load_script(path)
        return script
    except scripted.ScriptError as exc:
        raise UsageError(f"{exc}; nothing started") from None


def cmd_model(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run ``dsh model ACTION``; the exit status."""
    script = _load(args.script)
    if args.model_command == "check":
        _describe(script, args.script, out)
        return 0
    return _serve(script, args, out, err)


def _describe(script: ModelScript, source: str, out: TextIO) -> None:
    print(f"{source}: {len(script.rules)} rule(s)", file=out)
    for index, rule in enumerate(script.rules, start=1):
        which = (
            "any task" if rule.task_contains is None else f"tasks containing {rule.task_contains!r}"
        )
        kinds = ", ".join(_scripted().step_kind(step) for step in rule.steps)
        print(f"  rule {index}: {which}: {kinds}", file=out)


def _directory(requested: str | None) -> tuple[Path, bool]:
    """The working directory and whether it is ours to remove; refused when not empty."""
    if requested is None:
        return Path(tempfile.mkdtemp(prefix="dsh-model-")), True
    root = Path(requested).absolute()
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise UsageError(f"--dir {requested}: not a new or empty directory; nothing started")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--dir {requested}: {exc.strerror or exc}; nothing started") from None
    return root, False


def _table(name: str, values: Mapping[str, Any]) -> str:
    # A JSON string or number literal is a valid TOML value for everything written here.
    lines = [f"[{name}]"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in values.items() if value is not None]
    return "\n".join(lines)


def _codex_acp_rows(root: Path, models: ScriptedModels, command: str) -> list[str]:
    from dsh_contract_tests.fixtures import responses

    env = responses.codex_keyless_env(root / "codex-acp")
    responses.write_codex_config(
        env["CODEX_HOME"],
        models.responses.base_url,
        model=_CODEX_ACP_MODEL,
        sandbox_mode="danger-full-access",
        stream_idle_timeout_ms=_CODEX_IDLE_MS,
    )
    env["RUST_LOG"] = "warn"
    config = {
        "command": command,
        # Its shell snapshots would keep the agent's environment, fake key included.
        "args": ["-c", "features.shell_snapshot=false"],
        "permission": "allow",
        "dispose_eof_grace": 0.2,  # codex-acp never exits on stdin EOF
    }
    return [
        '[[providers]]\ntype = "acp"\nprovider_name = "codex-acp"',
        _table("providers.config", config),
        _table("providers.config.env", env),
        f'[[tools]]\nname = "{CODEX_ACP_TOOL}"\nprovider = "codex-acp"',
    ]


def _write_profile(root: Path, models: ScriptedModels, codex_acp: str | None = None) -> Path:
    from dsh_contract_tests.fixtures import messages, responses

    codex_env = responses.codex_keyless_env(root / "codex")
    responses.write_codex_config(
        codex_env["CODEX_HOME"],
        models.responses.base_url,
        sandbox_mode="danger-full-access",
        stream_idle_timeout_ms=_CODEX_IDLE_MS,
    )
    claude_env = dict(messages.keyless_claude_home(root / "claude", models.messages.base_url).env)
    if os.geteuid() == 0:  # Claude Code refuses to bypass permissions as root outside a sandbox
        claude_env["IS_SANDBOX"] = "1"
    sections = [
        "# Written by `dsh model serve`: both products keyless, against its loopback model.\n"
        "# The scripted commands are yours, so both products run them without asking.",
        '[[providers]]\ntype = "codex"\nprovider_name = "codex"',
        _table(
            "providers.config",
            {"permission_mode": "dangerously-bypass-approvals-and-sandbox", "continuation": True},
        ),
        _table("providers.config.env", codex_env),
        '[[providers]]\ntype = "claude-code"\nprovider_name = "claude-code"',
        _table("providers.config", {"permission_mode": "bypassPermissions", "continuation": True}),
        _table("providers.config.env", claude_env),
        f'[[tools]]\nname = "{CODEX_TOOL}"\nprovider = "codex"',
        f'[[tools]]\nname = "{CLAUDE_TOOL}"\nprovider = "claude-code"',
    ]
    if codex_acp is not None:
        sections += _codex_acp_rows(root, models, codex_acp)
    sections.append("[jobs]")
    profile = root / PROFILE_NAME
    partial = root / f".{PROFILE_NAME}.partial"
    partial.write_text("\n\n".join(sections) + "\n", encoding="utf-8")
    partial.replace(profile)  # appears whole: a waiting script never reads half of it
    return profile


def _serve(script: ModelScript, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.codex_acp is not None:
        found = shutil.which(args.codex_acp)
        if found is None:
            raise UsageError(f"--codex-acp {args.codex_acp}: not an executable; nothing started")
        args.codex_acp = str(Path(found).absolute())  # the profile is used from anywhere
    root, temporary = _directory(args.dir)
    try:
        anyio.run(_serve_until_stopped, script, args, root, out, err)
    finally:
        (root / PROFILE_NAME).unlink(missing_ok=True)
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
    print("dsh model: stopped", file=out)
    return 0


async def _serve_until_stopped(
    script: ModelScript, args: argparse.Namespace, root: Path, out: TextIO, err: TextIO
) -> None:
    scripted = _scripted()
    from dsh_contract_tests.fixtures.keyless_profile import AMBIENT_MODEL_VARIABLES

    lock = threading.Lock()

    def served(event: Served) -> None:
        where = "no rule" if event.rule is None else f"rule {event.rule + 1}"
        steps = f"step {event.step}" + (f"/{event.steps}" if event.steps else "")
        with lock, suppress(OSError, ValueError):  # a closed stderr must not end the server
            print(f"dsh model: {_WIRE_NAMES[event.wire]}: {where}, {steps}: {event.kind}", file=err)
            err.flush()

    # The signals are ours before anything listens: a Ctrl-C at any moment stops cleanly.
    wanted = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
    with (
        anyio.open_signal_receiver(*wanted) as signals,
        scripted.ScriptedModels(script, on_served=served) as models,
    ):
        profile = _write_profile(root, models, args.codex_acp)
        pid = os.getpid()
        lines = [
            f"dsh model: serving {args.script} ({len(script.rules)} rule(s)) on loopback",
            f"  Codex, codex-acp (OpenAI Responses): {models.responses.base_url}",
            f"  Claude Code (Anthropic Messages):    {models.messages.base_url}",
            f"profile: {profile}",
            f"  try: dsh run {profile} {CODEX_TOOL} 'your task'",
            f"stop with Ctrl-C (or kill -TERM {pid}); kill -USR1 {pid} releases held requests",
        ]
        print("\n".join(lines), file=out, flush=True)
        ambient = [name for name in AMBIENT_MODEL_VARIABLES if name in os.environ]
        if ambient:
            print(
                f"dsh model: note: unset {', '.join(ambient)} where you run dsh: Claude Code "
                "would take them over the profile",
                file=err,
            )
        async for signum in signals:
            if signum != signal.SIGUSR1:
                return
            models.release()
            print("dsh model: SIGUSR1: held requests released", file=err, flush=True)
