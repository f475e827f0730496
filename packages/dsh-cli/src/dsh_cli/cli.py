"""The ``dsh`` command: ``check``, ``tools``, ``run``, ``batch``, ``agents``, ``worktrees``,
``model``, ``demo`` and ``mcp``.

``dsh mcp ...`` hands everything after ``mcp`` to the dsh-mcp distribution's own command,
found through the ``dsh.commands`` entry-point group and imported only then; without
dsh-mcp installed it fails with one line and exit 2.

``dsh run`` and its exit status live in :mod:`dsh_cli.run_command`. Every failure is one
line on stderr, never a traceback. Products' own stderr lines are shown only with ``-v``
(see :mod:`dsh_profiles.logs`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Final, TextIO

from dsh_profiles.check import ProfileCheck, check_profile, describe_config
from dsh_profiles.confinement import policy_lines
from dsh_profiles.discovery import ProviderDiscovery
from dsh_profiles.errors import DshProfilesError
from dsh_profiles.logs import cli_logging
from dsh_profiles.run import EXIT_START_FAILED, one_line
from dsh_profiles.telemetry import exporting

from dsh_cli.agents_command import add_agents_parser, cmd_agents
from dsh_cli.batch import cmd_batch
from dsh_cli.batch_options import add_batch_parser
from dsh_cli.model_command import add_model_parser, cmd_model
from dsh_cli.run_command import add_run_arguments, cmd_run
from dsh_cli.worktrees_command import add_worktrees_parser, cmd_worktrees

__all__ = ["main"]

EXIT_USAGE: Final = 2


def render_check(check: ProfileCheck, out: TextIO) -> None:
    """Human-readable composition summary for ``dsh check``."""
    composition = check.composition
    print(f"profile: {composition.source}", file=out)
    print(f"instances ({len(composition.providers)}):", file=out)
    for loaded in composition.providers:
        caps = loaded.provider.capabilities
        flags = [name for name in caps.__dataclass_fields__ if getattr(caps, name)]
        where = f"type {loaded.type}, row {loaded.row}"
        if loaded.tool is not None:
            where += f", for tool {loaded.tool!r}"
        print(f"  {loaded.name}  [{where}] {loaded.origin}", file=out)
        print(f"    config: {describe_config(loaded.config)}", file=out)
        print(
            f"    capabilities: {', '.join(flags) or 'none'}; inherits parent context: "
            f"{'yes' if loaded.provider.inherits_parent_context else 'no'}",
            file=out,
        )
        for line in policy_lines(loaded.provider):
            print(f"    {line}", file=out)
        if loaded.worktree is not None:
            settings = loaded.worktree.model_dump(mode="json")
            print(
                "    isolation: a git worktree per run ("
                + ", ".join(f"{key}={value!r}" for key, value in settings.items())
                + ")",
                file=out,
            )
        elif loaded.tool is not None:
            print("    isolation: none (the tool row sets worktree = false)", file=out)
    print(f"tools ({len(composition.tool_names)}):", file=out)
    for tool in composition.tools:
        bound = composition.instance_for(tool.name)
        print(f"  {tool.name} -> {bound} (background: {tool.background_mode})", file=out)
    if composition.job_tools:
        print("  job_output, job_list, job_kill (job controls)", file=out)
    print("model-visible schemas:", file=out)
    print(json.dumps(check.schemas, indent=2), file=out)
    print(f"product processes started: {check.spawned}", file=out)


def _cmd_check(args: argparse.Namespace, out: TextIO, discovery: ProviderDiscovery | None) -> int:
    render_check(check_profile(args.profile, discovery=discovery), out)
    return 0


def _cmd_demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from dsh_cli.demo import run_demo

    return run_demo(out, err, deepseek=args.deepseek)


def build_parser() -> argparse.ArgumentParser:
    """The ``dsh`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="dsh",
        description="Delegate self-contained tasks to real coding products through a profile.",
    )
    verbose_help = (
        "also show the products' own stderr lines and the libraries' info and warnings "
        "(logged on dsh.product.* and dsh_subprocess.stderr; hidden by default)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help=verbose_help)
    # Accepted after the command too (`dsh run -v ...`); SUPPRESS keeps a top-level -v.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=verbose_help
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = sub.add_parser(
        "check",
        parents=[common],
        help="load a profile and show instances, tools and schemas; starts nothing",
    )
    check.add_argument("profile", help="TOML profile path")

    tools = sub.add_parser(
        "tools", parents=[common], help="print the model-visible tool schemas as JSON"
    )
    tools.add_argument("profile", help="TOML profile path")

    run = sub.add_parser(
        "run",
        parents=[common],
        help="delegate one task in the foreground",
        description="Delegate one task and print the final answer on stdout. While it "
        "runs, stderr shows its progress: a live status line on a terminal, one line per "
        "progress event otherwise.",
        epilog="exit status: 0 completed, 1 error (a --timeout/--idle-timeout that ran out "
        "included) or start failure, 2 usage/profile error, 3 max-tokens, 4 refusal, "
        "130 cancelled (Ctrl-C), 141 stdout closed by its reader; every failure is one "
        "line on stderr; -v also shows the product's own stderr",
    )
    add_run_arguments(run)

    add_batch_parser(sub, common)
    add_agents_parser(sub, common)
    add_worktrees_parser(sub, common)
    add_model_parser(sub, common)

    demo = sub.add_parser(
        "demo",
        parents=[common],
        help="the Quickstart: a real keyless delegation to Codex and Claude Code",
        description="Run the REAL Codex app-server and the REAL Claude Code CLI against an "
        "embedded loopback model (no credentials, no internet) and show that no process "
        "is left behind.",
    )
    sub.add_parser(
        "mcp",
        add_help=False,
        help="serve a profile's tools to MCP clients (needs dsh-mcp; see dsh mcp --help)",
    )
    demo.add_argument(
        "--deepseek",
        action="store_true",
        help="Claude Code talks to DeepSeek's Anthropic-compatible API (needs DEEPSEEK_API_KEY)",
    )
    return parser


def main(argv: Sequence[str] | None = None, *, discovery: ProviderDiscovery | None = None) -> int:
    """Entry point of the ``dsh`` console script.

    Every failure is one line on stderr: usage and profile errors exit 2, a run that
    could not start (or failed outside its result) and any unexpected error exit 1,
    never with a traceback (``-v`` adds it for unexpected errors). A closed stdout ends
    the command quietly with status 141, as it ends a Unix tool.

    Args:
        argv: Arguments without the program name; defaults to ``sys.argv[1:]``.
        discovery: Where provider classes come from; defaults to installed entry points.
    """
    rest = _mcp_arguments(sys.argv[1:] if argv is None else argv)
    if rest is not None:
        return _cmd_mcp(rest, sys.stderr)
    args = build_parser().parse_args(argv)
    out, err = sys.stdout, sys.stderr
    verbose = bool(getattr(args, "verbose", False))
    with cli_logging(verbose=verbose, stream=err) as log_handler:
        try:
            if args.command == "check":
                code = _cmd_check(args, out, discovery)
            elif args.command == "tools":
                code = _cmd_tools(args, out, discovery)
            elif args.command == "run":
                with exporting(err):
                    code = cmd_run(args, out, err, discovery, log_handler)
            elif args.command == "batch":
                with exporting(err):
                    code = cmd_batch(args, out, err, discovery)
            elif args.command == "agents":
                code = cmd_agents(args, out)
            elif args.command == "worktrees":
                code = cmd_worktrees(args, out, err)
            elif args.command == "model":
                code = cmd_model(args, out, err)
            else:
                code = _cmd_demo(args, out, err)
            out.flush()  # a reader that went away shows here at the latest
            return code
        except BrokenPipeError:
            return _output_closed()
        except DshProfilesError as exc:
            print(f"dsh: error: {exc}", file=err)
            return EXIT_USAGE
        except Exception as exc:
            print(f"dsh: error: {one_line(exc)}", file=err)
            if verbose:
                traceback.print_exception(exc, file=err)
            return EXIT_START_FAILED


EXIT_OUTPUT_CLOSED: Final = 141
"""128 + SIGPIPE: the status a shell shows for a Unix tool whose reader went away."""


def _output_closed() -> int:
    """The reader of stdout went away (``dsh run … | head -c 0``): end quietly, status 141.

    Deliberate: like ``cat`` or ``grep`` killed by SIGPIPE (a shell shows 141 for them
    too), with no message, since nobody reads the output any more; the status is not 0
    because the answer was not delivered. Whatever is still buffered goes to the null
    device, so the interpreter's last flush cannot fail again.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError):  # stdout is not a file descriptor (tests capture it)
        pass
    return EXIT_OUTPUT_CLOSED


_VERBOSE_FLAGS: Final = ("-v", "--verbose")
_MCP_MISSING: Final = (
    "dsh: error: `dsh mcp` needs the dsh-mcp distribution, which is not installed "
    "(pip install dsh-mcp)"
)


def _mcp_arguments(argv: Sequence[str]) -> list[str] | None:
    """The arguments for dsh-mcp when the command is ``mcp``, else ``None``.

    ``dsh [-v] mcp ARGS``: everything after ``mcp`` belongs to dsh-mcp's own parser
    (a leading ``-v`` is passed on).
    """
    rest = list(argv)
    verbose = [flag for flag in rest[:1] if flag in _VERBOSE_FLAGS]
    rest = rest[len(verbose) :]
    if not rest or rest[0] != "mcp":
        return None
    return verbose + rest[1:]


COMMAND_GROUP: Final = "dsh.commands"
"""The entry-point group where another distribution adds a ``dsh`` command: dsh-mcp
advertises ``mcp`` there, so ``dsh`` finds it without importing it (nothing imports
dsh-cli, and dsh-cli imports no distribution above it)."""


def _find_command(name: str) -> EntryPoint | None:
    found = entry_points(group=COMMAND_GROUP, name=name)
    return next(iter(found), None)


def _cmd_mcp(rest: list[str], err: TextIO) -> int:
    entry = _find_command("mcp")
    if entry is None:
        print(_MCP_MISSING, file=err)
        return EXIT_USAGE
    try:
        mcp_main = entry.load()
    except ImportError as exc:
        print(f"dsh: error: dsh-mcp cannot be imported: {exc}", file=err)
        return EXIT_START_FAILED
    with exporting(err):
        return int(mcp_main(rest, prog="dsh mcp"))


def _cmd_tools(args: argparse.Namespace, out: TextIO, discovery: ProviderDiscovery | None) -> int:
    json.dump(check_profile(args.profile, discovery=discovery).schemas, out, indent=2)
    out.write("\n")
    return 0


if __name__ == "__main__":
    from dsh_subprocess.protect import protect_command_process

    protect_command_process()
    sys.exit(main())
