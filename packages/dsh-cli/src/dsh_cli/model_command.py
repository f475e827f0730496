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
import os
import threading
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

import anyio
from dsh_profiles.errors import UsageError

if TYPE_CHECKING:  # the kit is the demo extra, imported only when the command runs
    from dsh_contract_tests.fixtures.keyless_profile import ServedProfile
    from dsh_contract_tests.fixtures.scripted import ModelScript, Served

__all__ = ["add_model_parser", "cmd_model"]

# The help text names the tools without importing the kit (an extra); a test pins them
# to the kit's keyless_profile.CODEX_TOOL, CLAUDE_TOOL and CODEX_ACP_TOOL.
CODEX_TOOL: Final = "subagent_codex"
CLAUDE_TOOL: Final = "subagent_claude_code"
CODEX_ACP_TOOL: Final = "subagent_codex_acp"
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


def _serve(script: ModelScript, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from dsh_contract_tests.fixtures import keyless_profile  # present: the script loaded

    lock = threading.Lock()

    def served(event: Served) -> None:
        where = "no rule" if event.rule is None else f"rule {event.rule + 1}"
        steps = f"step {event.step}" + (f"/{event.steps}" if event.steps else "")
        with lock, suppress(OSError, ValueError):  # a closed stderr must not end the server
            print(f"dsh model: {_WIRE_NAMES[event.wire]}: {where}, {steps}: {event.kind}", file=err)
            err.flush()

    def ready(running: ServedProfile) -> None:
        profile, pid = running.profile, os.getpid()
        lines = [
            f"dsh model: serving {args.script} ({len(script.rules)} rule(s)) on loopback",
            f"  Codex, codex-acp (OpenAI Responses): {running.models.responses.base_url}",
            f"  Claude Code (Anthropic Messages):    {running.models.messages.base_url}",
            f"profile: {profile}",
            f"  try: dsh run {profile} {CODEX_TOOL} 'your task'",
            f"stop with Ctrl-C (or kill -TERM {pid}); kill -USR1 {pid} releases held requests",
        ]
        print("\n".join(lines), file=out, flush=True)
        ambient = [name for name in keyless_profile.AMBIENT_MODEL_VARIABLES if name in os.environ]
        if ambient:
            print(
                f"dsh model: note: unset {', '.join(ambient)} where you run dsh: Claude Code "
                "would take them over the profile",
                file=err,
            )

    def released() -> None:
        print("dsh model: SIGUSR1: held requests released", file=err, flush=True)

    # Until SIGINT or SIGTERM (taken before anything listens); the kit then removes the
    # profile, and a temporary root with it.
    serving = keyless_profile.serve_keyless_profile_until_stopped
    try:
        anyio.run(
            partial(
                serving,
                script,
                None if args.dir is None else Path(args.dir),
                ready=ready,
                released=released,
                codex_acp=args.codex_acp,
                on_served=served,
                temp_prefix="dsh-model-",
            )
        )
    except keyless_profile.SetupRefused as exc:  # the kit's rule, in the flags' words
        flag, given = (
            ("--dir", args.dir) if exc.argument == "root" else ("--codex-acp", args.codex_acp)
        )
        raise UsageError(f"{flag} {given}: {exc.reason}; nothing started") from None
    print("dsh model: stopped", file=out)
    return 0
