"""``dsh mcp PROFILE.toml`` (also installed as ``dsh-mcp``): serve a profile to MCP clients.

stdio by default: the MCP client starts this command and speaks JSON-RPC on its stdin
and stdout; ``--http`` serves streamable HTTP on ``127.0.0.1`` instead. stdout carries
only the protocol; this command's own lines go to stderr, which MCP clients keep in
their logs.

Lifetime: the server stops when the client closes stdin (or dies, which closes it) and on
SIGTERM or SIGINT. Stopping cancels every running delegation and background Job and
returns only after every product process tree has exited.

Exit status: ``0`` after a clean stop, ``2`` for a bad profile or command line (one line
on stderr, nothing started), ``1`` for anything else.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from typing import Final, TextIO

import anyio
from dsh_profiles.confinement import add_confinement_flag, announce_confinement
from dsh_profiles.errors import DshProfilesError, UsageError
from dsh_profiles.loader import Composition, compose
from dsh_profiles.logs import cli_logging
from dsh_profiles.profile import read_profile
from dsh_profiles.warm import SERVER_WARM, add_warm_flag, warm_from_flag
from dsh_subprocess.protect import protect_command_process

from dsh_mcp.server import ToolServer, open_tool_server
from dsh_mcp.settings import ServerSettings, resolve_settings
from dsh_mcp.stdio import stdio_transport

__all__ = ["build_parser", "console_main", "main"]

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130

_STOPPING: Final = "the dsh mcp server is stopping"


def build_parser(prog: str = "dsh-mcp") -> argparse.ArgumentParser:
    """The command's argument parser."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Serve a profile's subagent and job tools to MCP clients (stdio by "
        "default). Every delegation's whole process tree is gone when its call returns, "
        "is cancelled, or the server stops.",
        epilog="exit status: 0 clean stop, 1 failure, 2 bad profile or command line",
    )
    parser.add_argument("profile", help="TOML profile path")
    parser.add_argument(
        "--workspace",
        metavar="DIR",
        help="the parent session's workspace (overrides the profile's [mcp] workspace; "
        "default: the client's first declared root)",
    )
    parser.add_argument(
        "--max-concurrent-delegations",
        type=int,
        metavar="N",
        help="server-wide bound on running delegations, background jobs included "
        "(default: [mcp] max_concurrent_delegations, else 4)",
    )
    parser.add_argument(
        "--slot-wait-seconds",
        type=float,
        metavar="S",
        help="how long a delegation beyond the bound waits for a slot before it fails "
        "(default: [mcp] slot_wait_seconds, else 30)",
    )
    parser.add_argument(
        "--foreground-seconds",
        type=float,
        metavar="S",
        help="how long a foreground delegation call waits; a run still going then "
        "continues as a background job whose id the call returns (default: [mcp] "
        "foreground_seconds, else 45)",
    )
    parser.add_argument(
        "--session-idle-seconds",
        type=float,
        metavar="S",
        help="with --http: a session with no request in flight and no open GET stream "
        "this long ends as if its client had sent DELETE, its background jobs killed "
        "(default: [mcp] session_idle_seconds, else 1800)",
    )
    parser.add_argument(
        "--http",
        action="store_true",
        help="serve streamable HTTP on 127.0.0.1 (bearer token: $DSH_MCP_TOKEN, else generated "
        "and shown once on stderr)",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="HTTP port on 127.0.0.1 (default: any free port)"
    )
    add_confinement_flag(parser)
    add_warm_flag(parser, str(SERVER_WARM))
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also log the products' own stderr lines and the libraries' warnings",
    )
    return parser


def _load(profile_path: str, args: argparse.Namespace) -> tuple[Composition, ServerSettings]:
    profile = read_profile(profile_path)
    composition = compose(
        profile,
        source=profile_path,
        confinement=args.confinement,
        warm=warm_from_flag(args.warm, SERVER_WARM),
    )
    settings = resolve_settings(
        profile.mcp,
        profile_path,
        workspace=args.workspace,
        max_concurrent_delegations=args.max_concurrent_delegations,
        slot_wait_seconds=args.slot_wait_seconds,
        foreground_seconds=args.foreground_seconds,
        session_idle_seconds=args.session_idle_seconds,
    )
    return composition, settings


async def _watch_signals(stop: anyio.Event, err: TextIO) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            if stop.is_set():
                print("dsh mcp: still stopping; waiting for the products to exit", file=err)
                continue
            print(f"dsh mcp: {signal.Signals(signum).name}: stopping", file=err)
            stop.set()


async def _serve_stdio(tool_server: ToolServer, stop: anyio.Event) -> None:
    server = tool_server.server
    async with stdio_transport() as (read, write), anyio.create_task_group() as group:

        async def stop_when_asked() -> None:
            await stop.wait()
            # Every handler is interrupted in the same tick: each waits until its run is
            # gone, then the SDK answers its request "Connection closed".
            tool_server.cancel_calls(_STOPPING)
            group.cancel_scope.cancel()

        group.start_soon(stop_when_asked)
        await server.run(read, write, server.create_initialization_options())
        group.cancel_scope.cancel()


def _describe(composition: Composition, settings: ServerSettings) -> str:
    tools = ", ".join(composition.tool_names) or "none"
    workspace = settings.workspace or "the client's first root"
    return (
        f"dsh mcp: {composition.source}: tools {tools}; workspace {workspace}; at most "
        f"{settings.max_concurrent_delegations} delegations at once"
    )


async def _serve(
    composition: Composition,
    settings: ServerSettings,
    args: argparse.Namespace,
    token: str | None,
    err: TextIO,
) -> None:
    stop = anyio.Event()
    async with anyio.create_task_group() as signals:
        # The receiver stays open through the teardown: a second signal cannot cut it short.
        signals.start_soon(_watch_signals, stop, err)
        try:
            async with open_tool_server(composition, settings) as tool_server:
                print(_describe(composition, settings), file=err)
                if token is None:
                    await _serve_stdio(tool_server, stop)
                else:
                    from dsh_mcp.http import serve_http

                    def ready(url: str) -> None:
                        print(f"dsh mcp: listening on {url}", file=err, flush=True)

                    await serve_http(
                        tool_server,
                        port=args.port,
                        token=token,
                        stop=stop,
                        on_ready=ready,
                        session_idle_seconds=settings.session_idle_seconds,
                    )
        finally:
            signals.cancel_scope.cancel()


def _http_token(err: TextIO) -> str:
    from dsh_mcp.http import TOKEN_ENV, new_token

    token = os.environ.get(TOKEN_ENV, "")
    if token.strip():
        return token.strip()
    token = new_token()
    print(f"dsh mcp: bearer token (generated; set {TOKEN_ENV} to choose one): {token}", file=err)
    return token


def main(argv: Sequence[str] | None = None, *, prog: str = "dsh-mcp") -> int:
    """Run the server until the client leaves or a signal stops it; return the exit status.

    Args:
        argv: Arguments without the program name; defaults to ``sys.argv[1:]``.
        prog: The program name shown in usage and errors (``dsh mcp`` when delegated).
    """
    args = build_parser(prog).parse_args(argv)
    err = sys.stderr
    with cli_logging(verbose=args.verbose, stream=err):
        try:
            composition, settings = _load(args.profile, args)
            announce_confinement((loaded.provider for loaded in composition.providers), err)
            if not args.http and args.port:
                raise UsageError("--port needs --http")
            if not 0 <= args.port <= 65535:
                raise UsageError("--port must be between 0 and 65535")
            token = _http_token(err) if args.http else None
        except DshProfilesError as exc:
            print(f"{prog}: error: {exc}", file=err)
            return EXIT_USAGE
        try:
            anyio.run(_serve, composition, settings, args, token, err, backend="asyncio")
        except Exception as raised:
            leaf = _leaf(raised)
            if isinstance(leaf, OSError) and args.http:
                reason = leaf.strerror or type(leaf).__name__
                print(f"{prog}: error: cannot listen on 127.0.0.1:{args.port}: {reason}", file=err)
            else:
                print(f"{prog}: error: internal error ({type(leaf).__name__})", file=err)
                if args.verbose:
                    traceback.print_exception(raised, file=err)
            return EXIT_FAILED
    return EXIT_OK


def _leaf(exc: Exception) -> Exception:
    """The one exception a task group wrapped (or ``exc`` itself)."""
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _interrupted(exc: BaseException) -> bool:
    if isinstance(exc, KeyboardInterrupt):
        return True
    return isinstance(exc, BaseExceptionGroup) and exc.subgroup(KeyboardInterrupt) is not None


def console_main() -> int:
    """The ``dsh-mcp`` console script: Ctrl-C before serving starts exits 130 quietly.

    The process is not dumpable unless ``DSH_KEEP_DUMPABLE=1`` (:mod:`dsh_subprocess.protect`).
    """
    protect_command_process()
    try:
        return main()
    except BaseException as exc:
        if not _interrupted(exc):
            raise
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("dsh-mcp: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    protect_command_process()
    sys.exit(main())
