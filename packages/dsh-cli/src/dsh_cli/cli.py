"""The ``dsh`` command: ``check``, ``tools``, ``run``, ``demo`` and ``mcp``.

``dsh mcp ...`` hands everything after ``mcp`` to the dsh-mcp distribution's own command
(imported only then); without dsh-mcp installed it fails with one line and exit 2.

Exit status of ``dsh run`` (derived from the run's stop reason):

====  ==================================================
0     ``completed``
1     ``error`` or any unknown stop reason; the run could not start
      or failed outside its result; an unexpected error
2     usage or profile error (nothing was started)
3     ``max-tokens``
4     ``refusal``
130   ``aborted`` (Ctrl-C / SIGTERM cancelled the run), or Ctrl-C
      before the run started
====  ==================================================

Every failure is one line on stderr, never a traceback. Products' own stderr lines are
shown only with ``-v`` (see :mod:`dsh_cli.logs`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TextIO, TypeVar

import anyio
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    ERROR,
    MAX_TOKENS,
    REFUSAL,
    CancelController,
    ParentContext,
    SubagentError,
    SubagentResult,
    SubagentStartRequest,
    TextBlock,
)
from dsh_subagent.tool import ToolCallContext, run_tool_call
from dsh_tool_jobs import JobSnapshot
from pydantic import JsonValue

from dsh_cli.discovery import ProviderDiscovery
from dsh_cli.errors import DshCliError, UsageError
from dsh_cli.loader import Composition, load_profile
from dsh_cli.logs import cli_logging
from dsh_cli.runtime import open_runtime, validate_task
from dsh_cli.spawnguard import SpawnCounter

__all__ = ["EXIT_CODES", "exit_code_for", "main"]

EXIT_CODES: Final = {COMPLETED: 0, ERROR: 1, MAX_TOKENS: 3, REFUSAL: 4, ABORTED: 130}
EXIT_USAGE: Final = 2
EXIT_START_FAILED: Final = 1

_T = TypeVar("_T")

_HEADLINES: Final = {
    ABORTED: "subagent run was cancelled",
    ERROR: "subagent run failed",
    MAX_TOKENS: "subagent run hit its token limit before finishing",
    REFUSAL: "subagent declined the task",
}


def exit_code_for(stop_reason: str) -> int:
    """The process exit status for a stop reason (unknown reasons are failures)."""
    return EXIT_CODES.get(stop_reason, 1)


def _describe_config(config: Any) -> str:
    data = config.model_dump(mode="json")
    parts = []
    for key, value in data.items():
        if key == "provider_name":
            continue
        if key == "env" and isinstance(value, dict):
            # Values may be credentials: show names only.
            value = sorted(value)
        parts.append(f"{key}={value!r}")
    return " ".join(parts)


def render_check(
    composition: Composition,
    schemas: list[dict[str, JsonValue]],
    spawned: int,
    out: TextIO,
) -> None:
    """Human-readable composition summary for ``dsh check``."""
    print(f"profile: {composition.source}", file=out)
    print(f"instances ({len(composition.providers)}):", file=out)
    for loaded in composition.providers:
        caps = loaded.provider.capabilities
        flags = [name for name in caps.__dataclass_fields__ if getattr(caps, name)]
        print(f"  {loaded.name}  [type {loaded.type}, row {loaded.row}] {loaded.origin}", file=out)
        print(f"    config: {_describe_config(loaded.config)}", file=out)
        print(
            f"    capabilities: {', '.join(flags) or 'none'}; inherits parent context: "
            f"{'yes' if loaded.provider.inherits_parent_context else 'no'}",
            file=out,
        )
    print(f"tools ({len(composition.tool_names)}):", file=out)
    for tool in composition.tools:
        print(f"  {tool.name} -> {tool.provider} (background: {tool.background_mode})", file=out)
    if composition.job_tools:
        print("  job_output, job_list, job_kill (job controls)", file=out)
    print("model-visible schemas:", file=out)
    print(json.dumps(schemas, indent=2), file=out)
    print(f"product processes started: {spawned}", file=out)


def _load(profile: str, discovery: ProviderDiscovery | None) -> tuple[Composition, int]:
    with SpawnCounter(forbid=True) as counter:
        composition = load_profile(profile, discovery=discovery)
    return composition, counter.count


async def _schemas(composition: Composition) -> list[dict[str, JsonValue]]:
    async with open_runtime(composition) as runtime:
        return runtime.schemas()


def _compose_and_bind(
    profile: str, discovery: ProviderDiscovery | None
) -> tuple[Composition, list[dict[str, JsonValue]], int]:
    """Load, register and bind under a forbidding spawn counter: nothing may start."""
    with SpawnCounter(forbid=True) as counter:
        composition = load_profile(profile, discovery=discovery)
        schemas = anyio.run(_schemas, composition)
    return composition, schemas, counter.count


def _cmd_check(args: argparse.Namespace, out: TextIO, discovery: ProviderDiscovery | None) -> int:
    composition, schemas, spawned = _compose_and_bind(args.profile, discovery)
    render_check(composition, schemas, spawned, out)
    return 0


def _resolve_target(composition: Composition, target: str, instance: bool) -> str:
    if not instance:
        for tool in composition.tools:
            if tool.name == target:
                return tool.provider
    names = [p.name for p in composition.providers]
    if target in names:
        return target
    tools = ", ".join(t.name for t in composition.tools) or "none"
    raise UsageError(
        f"unknown {'instance' if instance else 'tool or instance'} {target!r} "
        f"(tools: {tools}; instances: {', '.join(names) or 'none'})"
    )


async def _watch_signals(controller: CancelController, err: TextIO) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            if controller.signal.aborted:
                print("dsh: still cancelling; waiting for the product to exit", file=err)
                continue
            name = signal.Signals(signum).name
            print(f"dsh: {name}: cancelling the run", file=err)
            controller.cancel(f"interrupted ({name})")


@dataclass(frozen=True)
class _Failed:
    """A run that could not start, or failed outside its result: one line on stderr.

    A value, not an exception: nothing is raised through the command's task group, so
    no ``ExceptionGroup`` (and no traceback with what a provider keeps off its message)
    can reach the user.
    """

    what: str
    message: str


def _one_line(exc: BaseException) -> str:
    """A failure as one safe line: a SubagentError's message, else only the type name."""
    if isinstance(exc, SubagentError):
        return exc.message
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_one_line(inner) for inner in exc.exceptions)
    return f"internal error ({type(exc).__name__})"


async def _under_signals(
    controller: CancelController, err: TextIO, body: Callable[[], Awaitable[_T]]
) -> _T | _Failed:
    """Run ``body`` with Ctrl-C / SIGTERM cancelling ``controller`` for its whole length.

    The receiver is open while the runtime is entered and left too, so a signal during
    teardown never interrupts it; any failure comes back as a :class:`_Failed` value.
    """
    outcome: _T | _Failed = _Failed("failed", "internal error (no outcome)")
    async with anyio.create_task_group() as tg:
        tg.start_soon(_watch_signals, controller, err)
        try:
            outcome = await body()
        except Exception as exc:
            outcome = _Failed("failed", _one_line(exc))
        finally:
            tg.cancel_scope.cancel()
    return outcome


async def _run_foreground(
    composition: Composition, provider: str, task: str, cwd: str, err: TextIO
) -> SubagentResult | _Failed | None:
    """The run's result; ``None`` when Ctrl-C came before the product started."""
    controller = CancelController()
    request = SubagentStartRequest(
        prompt=(TextBlock(text=task),),
        parent=ParentContext(session_id="dsh-cli", cwd=cwd),
        cancel=controller.signal,
        label="dsh run",
    )

    async def body() -> SubagentResult | _Failed | None:
        async with open_runtime(composition) as runtime:
            try:
                run = await runtime.service.start(provider, request)
            except SubagentError as exc:
                return (
                    None if controller.signal.aborted else _Failed("could not start", exc.message)
                )
            try:
                return await run.result()
            finally:
                await run.dispose()

    return await _under_signals(controller, err, body)


async def _run_background(
    composition: Composition, tool_name: str, task: str, cwd: str, err: TextIO
) -> tuple[JobSnapshot, str] | _Failed:
    """Start through the subagent tool with ``run_in_background``, then collect the Job."""
    controller = CancelController()
    parent = ParentContext(session_id="dsh-cli", cwd=cwd)

    async def body() -> tuple[JobSnapshot, str] | _Failed:
        async with open_runtime(composition) as runtime:
            started = await run_tool_call(
                runtime.tools[tool_name],
                {"description": "dsh run", "prompt": task, "run_in_background": True},
                ToolCallContext(parent=parent, cancel=CancelController().signal),
            )
            if started.is_error:
                return _Failed("could not start", started.text)
            job_id = started.text.rsplit(" ", 1)[-1]
            print(f"dsh: {started.text}", file=err)

            def kill(reason: str) -> None:
                runtime.jobs.kill(job_id, parent, reason)

            remove = controller.signal.add_listener(kill)
            try:
                if controller.signal.aborted:  # Ctrl-C while the job was starting
                    kill(controller.signal.reason or "interrupted")
                snapshot = runtime.jobs.get(job_id, parent)
                while not snapshot.terminal:
                    snapshot = await runtime.jobs.wait(job_id, _WAIT_MS, parent)
            finally:
                remove()
            return snapshot, runtime.jobs.read(job_id, parent)

    return await _under_signals(controller, err, body)


_WAIT_MS: Final = 600_000.0


def _report_job(snapshot: JobSnapshot, text: str, tool: str, out: TextIO, err: TextIO) -> int:
    detail = f" ({snapshot.detail})" if snapshot.detail else ""
    print(f"dsh: job {snapshot.id} via {tool}: {snapshot.status}{detail}", file=err)
    if text:
        out.write(text if text.endswith("\n") else text + "\n")
    if snapshot.status == "completed":
        return 0
    if snapshot.status == "killed":
        return EXIT_CODES[ABORTED]
    # A failed subagent Job's detail starts with the run's stop reason.
    return exit_code_for((snapshot.detail or "").split(";", 1)[0].strip())


def _report(result: SubagentResult, provider: str, out: TextIO, err: TextIO) -> int:
    if result.stop_reason == COMPLETED:
        text = result.text
        out.write(text if text.endswith("\n") else text + "\n")
        print(f"dsh: {provider}: completed", file=err)
        return 0
    headline = _HEADLINES.get(
        result.stop_reason, f"subagent run ended abnormally ({result.stop_reason})"
    )
    print(f"dsh: {provider}: {headline} (stop reason: {result.stop_reason})", file=err)
    if result.diagnostic:
        print(f"Diagnostic: {result.diagnostic}", file=err)
    if result.text:
        print("Partial output before the run ended:", file=err)
        out.write(result.text if result.text.endswith("\n") else result.text + "\n")
    return exit_code_for(result.stop_reason)


def _cmd_run(
    args: argparse.Namespace, out: TextIO, err: TextIO, discovery: ProviderDiscovery | None
) -> int:
    task = sys.stdin.read() if args.task == "-" else args.task
    validate_task(task)
    composition, _ = _load(args.profile, discovery)
    provider = _resolve_target(composition, args.target, args.instance)
    cwd = os.path.abspath(args.cwd)
    if args.background:
        row = next((t for t in composition.tools if t.name == args.target), None)
        if args.instance or row is None or row.background_mode != "one-shot":
            raise UsageError("--background needs a tool whose background_mode is 'one-shot'")
        collected = anyio.run(_run_background, composition, row.name, task, cwd, err)
        if isinstance(collected, _Failed):
            return _report_failed(collected, row.name, err)
        snapshot, text = collected
        return _report_job(snapshot, text, row.name, out, err)
    result = anyio.run(_run_foreground, composition, provider, task, cwd, err)
    if isinstance(result, _Failed):
        return _report_failed(result, provider, err)
    if result is None:
        print(f"dsh: {provider}: cancelled before the product started", file=err)
        return EXIT_CODES[ABORTED]
    return _report(result, provider, out, err)


def _report_failed(failed: _Failed, target: str, err: TextIO) -> int:
    print(f"dsh: {target}: {failed.what}: {failed.message}", file=err)
    return EXIT_START_FAILED


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
        description="Delegate one task and print the final answer on stdout.",
        epilog="exit status: 0 completed, 1 error or start failure, 2 usage/profile error, "
        "3 max-tokens, 4 refusal, 130 cancelled (Ctrl-C); every failure is one line on "
        "stderr; -v also shows the product's own stderr",
    )
    run.add_argument("profile", help="TOML profile path")
    run.add_argument("target", help="a tool name from the profile, or an instance name")
    run.add_argument("task", help="the complete, self-contained task text ('-' reads stdin)")
    run.add_argument(
        "--instance", action="store_true", help="treat TARGET as an instance name only"
    )
    run.add_argument(
        "--cwd", default=".", help="the parent session's workspace (default: current directory)"
    )
    run.add_argument(
        "--background",
        action="store_true",
        help="run as a background Job through the tool (run_in_background) and collect it",
    )

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
    never with a traceback (``-v`` adds it for unexpected errors).

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
    with cli_logging(verbose=verbose, stream=err):
        try:
            if args.command == "check":
                return _cmd_check(args, out, discovery)
            if args.command == "tools":
                return _cmd_tools(args, out, discovery)
            if args.command == "run":
                return _cmd_run(args, out, err, discovery)
            return _cmd_demo(args, out, err)
        except DshCliError as exc:
            print(f"dsh: error: {exc}", file=err)
            return EXIT_USAGE
        except Exception as exc:
            print(f"dsh: error: {_one_line(exc)}", file=err)
            if verbose:
                traceback.print_exception(exc, file=err)
            return EXIT_START_FAILED


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


def _cmd_mcp(rest: list[str], err: TextIO) -> int:
    try:
        from dsh_mcp.cli import main as mcp_main
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "dsh_mcp":
            print(f"dsh: error: dsh-mcp cannot be imported: {exc}", file=err)
            return EXIT_START_FAILED
        print(_MCP_MISSING, file=err)
        return EXIT_USAGE
    return mcp_main(rest, prog="dsh mcp")


def _cmd_tools(args: argparse.Namespace, out: TextIO, discovery: ProviderDiscovery | None) -> int:
    _, schemas, _ = _compose_and_bind(args.profile, discovery)
    json.dump(schemas, out, indent=2)
    out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
