"""``dsh run``: one delegation in the foreground (or collected from the background).

Exit status (derived from the run's stop reason):

====  ==================================================
0     ``completed``
1     ``error`` (a run budget that ran out included) or any unknown stop reason; the
      run could not start or failed outside its result; an unexpected error
2     usage or profile error (nothing was started)
3     ``max-tokens``
4     ``refusal``
130   ``aborted`` (Ctrl-C / SIGTERM cancelled the run), or Ctrl-C
      before the run started
141   stdout was closed by its reader (``dsh run … | head -c 0``): ended quietly, as
      a Unix tool ends on SIGPIPE (see :mod:`dsh_cli.cli`)
====  ==================================================

stdout carries only the answer (or, with ``--json``, one JSON record); everything else,
live progress included (:mod:`dsh_cli.progress_view`), goes to stderr.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TextIO, TypeVar

import anyio
import anyio.abc
from dsh_batch.schema import typed_row_schema
from dsh_profiles.confinement import add_confinement_flag, announce_confinement
from dsh_profiles.discovery import ProviderDiscovery
from dsh_profiles.errors import UsageError
from dsh_profiles.isolation import check_isolation, isolate_from_flags
from dsh_profiles.loader import Composition, load_profile
from dsh_profiles.options import budget_from, resolve_target
from dsh_profiles.output_schema import load_output_schema
from dsh_profiles.runtime import open_runtime, validate_task, validate_utf8
from dsh_profiles.spawnguard import SpawnCounter
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    ERROR,
    MAX_TOKENS,
    REFUSAL,
    CancelController,
    ContinuationHandle,
    ParentContext,
    SubagentError,
    SubagentResult,
    SubagentStartRequest,
    TextBlock,
    render_changes,
)
from dsh_subagent.tool import ToolCallContext, run_tool_call
from dsh_tool_jobs import JobSnapshot
from pydantic import JsonValue

from dsh_cli.isolation import add_worktree_flags
from dsh_cli.options import add_budget_flags
from dsh_cli.progress_view import LiveView, PlainView, RunView

__all__ = [
    "EXIT_CODES",
    "add_run_arguments",
    "cmd_run",
    "exit_code_for",
    "json_record",
    "one_line",
]

EXIT_CODES: Final = {COMPLETED: 0, ERROR: 1, MAX_TOKENS: 3, REFUSAL: 4, ABORTED: 130}
EXIT_START_FAILED: Final = 1

_T = TypeVar("_T")
Say = Callable[[str], None]

_HEADLINES: Final = {
    ABORTED: "subagent run was cancelled",
    ERROR: "subagent run failed",
    MAX_TOKENS: "subagent run hit its token limit before finishing",
    REFUSAL: "subagent declined the task",
}


def exit_code_for(stop_reason: str) -> int:
    """The process exit status for a stop reason (unknown reasons are failures)."""
    return EXIT_CODES.get(stop_reason, 1)


def one_line(exc: BaseException) -> str:
    """A failure as one safe line: a SubagentError's message, else only the type name."""
    if isinstance(exc, SubagentError):
        return exc.message
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(one_line(inner) for inner in exc.exceptions)
    return f"internal error ({type(exc).__name__})"


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    """The arguments of ``dsh run``."""
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
    run.add_argument(
        "--json",
        action="store_true",
        help="print one JSON record on stdout (answer, stop_reason, diagnostic, usage, "
        "changes, elapsed_seconds, continuation) instead of the answer",
    )
    run.add_argument(
        "--resume",
        metavar="HANDLE",
        help="continue the product session of an earlier run: the continuation handle "
        "(dshc1.…) that run printed; a follow-up delegation of its own",
    )
    run.add_argument(
        "--output-schema",
        metavar="FILE",
        help="a JSON Schema (object root) the answer must match: stdout then carries the "
        "validated JSON object (--json: its 'structured' field); an answer that does not "
        "match fails with category output-invalid",
    )
    add_budget_flags(run, scope="of the run")
    add_worktree_flags(run, scope="the task")
    add_confinement_flag(run)


async def _watch_signals(
    controller: CancelController,
    say: Say,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            if controller.signal.aborted:
                say("dsh: still cancelling; waiting for the product to exit")
                continue
            name = signal.Signals(signum).name
            say(f"dsh: {name}: cancelling the run")
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


async def _under_signals(
    controller: CancelController, say: Say, body: Callable[[], Awaitable[_T]]
) -> _T | _Failed:
    """Run ``body`` with Ctrl-C / SIGTERM cancelling ``controller`` for its whole length.

    The receiver is open while the runtime is entered and left too, so a signal during
    teardown never interrupts it; any failure comes back as a :class:`_Failed` value.
    """
    outcome: _T | _Failed = _Failed("failed", "internal error (no outcome)")
    async with anyio.create_task_group() as tg:
        # Installed before the body runs: a signal right after the product started (before
        # the body first yields) must cancel the run like any other.
        await tg.start(functools.partial(_watch_signals, controller, say))
        try:
            outcome = await body()
        except Exception as exc:
            outcome = _Failed("failed", one_line(exc))
        finally:
            tg.cancel_scope.cancel()
    return outcome


async def _run_foreground(
    composition: Composition, provider: str, request: SubagentStartRequest, view: RunView
) -> SubagentResult | _Failed | None:
    """The run's result; ``None`` when Ctrl-C came before the product started."""
    controller = CancelController()
    request = request.model_copy(update={"cancel": controller.signal})

    async def body() -> SubagentResult | _Failed | None:
        async with open_runtime(composition) as runtime:
            view.begin()
            try:
                run = await runtime.service.start(provider, request)
            except SubagentError as exc:
                view.settled("could not start")
                return (
                    None if controller.signal.aborted else _Failed("could not start", exc.message)
                )
            view.published()
            try:
                async with anyio.create_task_group() as group:
                    # Ends by itself once the run settled and every kept event was shown.
                    group.start_soon(view.follow, run.progress)
                    result = await run.result()
                view.settled(result.stop_reason)
                return result
            finally:
                await run.dispose()

    return await _under_signals(controller, view.say, body)


async def _run_background(
    composition: Composition, tool_name: str, task: str, cwd: str, say: Say
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
            say(f"dsh: {started.text}")

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

    return await _under_signals(controller, say, body)


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


def _status(result: SubagentResult, provider: str, err: TextIO) -> None:
    """The status line on stderr, the changes line of an isolated run, the continuation
    hint, and the diagnostic of a run that did not complete."""
    if result.changes is not None:
        print(f"dsh: {provider}: {render_changes(result.changes)}", file=err)
    if result.continuation is not None:
        print(f"dsh: continue this session with --resume {result.continuation.dumps()}", file=err)
    if result.stop_reason == COMPLETED:
        print(f"dsh: {provider}: completed", file=err)
        return
    headline = _HEADLINES.get(
        result.stop_reason, f"subagent run ended abnormally ({result.stop_reason})"
    )
    print(f"dsh: {provider}: {headline} (stop reason: {result.stop_reason})", file=err)
    if result.diagnostic:
        print(f"Diagnostic: {result.diagnostic}", file=err)


def _report(result: SubagentResult, provider: str, out: TextIO, err: TextIO) -> int:
    text = result.text
    if result.stop_reason == COMPLETED and result.structured is not None:
        out.write(json.dumps(result.structured, ensure_ascii=False) + "\n")  # the object
    elif result.stop_reason == COMPLETED:
        out.write(text if text.endswith("\n") else text + "\n")
    _status(result, provider, err)
    if result.stop_reason != COMPLETED and text:
        print("Partial output before the run ended:", file=err)
        out.write(text if text.endswith("\n") else text + "\n")
    return exit_code_for(result.stop_reason)


def json_record(result: SubagentResult, elapsed: float) -> dict[str, JsonValue]:
    """The ``--json`` record of a settled run.

    ``answer`` is the final text, or the partial output of a run that did not complete;
    ``usage`` is what the product reported (``null`` fields: not reported), or ``null``;
    ``changes`` is where an isolated run's changes went (branch, commit, base,
    files_changed, insertions, deletions, worktree), or ``null`` without isolation.
    ``continuation`` is the handle ``--resume`` takes, or ``null``.
    """
    usage = None if result.usage is None else result.usage.model_dump(mode="json")
    changes = None if result.changes is None else result.changes.model_dump(mode="json")
    continuation = None if result.continuation is None else result.continuation.dumps()
    return {
        "answer": result.text,
        "stop_reason": result.stop_reason,
        "diagnostic": result.diagnostic,
        "usage": usage,
        "changes": changes,
        "elapsed_seconds": round(elapsed, 3),
        "continuation": continuation,
    }


def _resume_from(token: str | None) -> ContinuationHandle | None:
    if token is None:
        return None
    try:
        return ContinuationHandle.loads(token)
    except SubagentError as exc:
        raise UsageError(f"--resume: {exc.message}") from None


def _report_failed(failed: _Failed, target: str, err: TextIO) -> int:
    print(f"dsh: {target}: {failed.what}: {failed.message}", file=err)
    return EXIT_START_FAILED


def _read_stdin_text() -> str:
    """All of stdin as text; an undecodable byte becomes a lone surrogate, never an error.

    The task check then refuses it with one line (exit 2) whatever the locale's stdin
    error handler is.
    """
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text-only stream (a test's StringIO)
        return sys.stdin.read()
    data: bytes = buffer.read()
    return data.decode("utf-8", "surrogateescape")


def _is_terminal(err: TextIO) -> bool:
    try:
        return err.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def cmd_run(
    args: argparse.Namespace,
    out: TextIO,
    err: TextIO,
    discovery: ProviderDiscovery | None,
    log_handler: logging.StreamHandler[TextIO] | None = None,
) -> int:
    """``dsh run``; every failure is one line on stderr (see the exit status table)."""
    budget = budget_from(args)
    if args.background and (budget is not None or args.json):
        raise UsageError("--timeout, --idle-timeout and --json apply to foreground runs only")
    if args.background and args.resume is not None:
        raise UsageError("--resume applies to foreground runs only")
    if args.background and args.output_schema is not None:
        raise UsageError("--output-schema applies to foreground runs only")
    output_schema = load_output_schema(args.output_schema)
    resume = _resume_from(args.resume)
    task = _read_stdin_text() if args.task == "-" else args.task
    validate_task(task)
    validate_utf8("--cwd", args.cwd)
    with SpawnCounter(forbid=True):
        composition = load_profile(args.profile, discovery=discovery, confinement=args.confinement)
    provider = resolve_target(composition, args.target, args.instance)
    if output_schema is None:  # a typed tool row's own schema
        output_schema = typed_row_schema(composition, args.target, args.instance)
    announce_confinement([composition.provider(provider).provider], err)
    composition = isolate_from_flags(composition, provider, args)
    cwd = os.path.abspath(args.cwd)
    check_isolation(composition, provider, [cwd])
    isolated = composition.provider(provider).worktree is not None
    if resume is not None and resume.workspace is not None and not isolated:
        on = f" on branch {resume.branch}" if resume.branch else ""
        raise UsageError(
            f"--resume: the handle continues an isolated run (its work is{on} in a "
            "worktree); add --worktree"
        )
    if args.background:
        row = next((t for t in composition.tools if t.name == args.target), None)
        if args.instance or row is None or row.background_mode != "one-shot":
            raise UsageError("--background needs a tool whose background_mode is 'one-shot'")

        def say(line: str) -> None:
            print(line, file=err)

        collected = anyio.run(_run_background, composition, row.name, task, cwd, say)
        if isinstance(collected, _Failed):
            return _report_failed(collected, row.name, err)
        snapshot, text = collected
        return _report_job(snapshot, text, row.name, out, err)
    request = SubagentStartRequest(
        prompt=(TextBlock(text=task),),
        parent=ParentContext(session_id="dsh-cli", cwd=cwd),
        label="dsh run",
        budget=budget,
        resume=resume,
        output_schema=output_schema,
    )
    view = LiveView(provider, err, log_handler) if _is_terminal(err) else PlainView(provider, err)
    with view:
        result = anyio.run(_run_foreground, composition, provider, request, view)
    if isinstance(result, _Failed):
        return _report_failed(result, provider, err)
    if result is None:
        print(f"dsh: {provider}: cancelled before the product started", file=err)
        return EXIT_CODES[ABORTED]
    if args.json:
        record = json_record(result, view.elapsed)
        if output_schema is not None:
            record["structured"] = result.structured  # validated JSON, or null on failure
        out.write(json.dumps(record) + "\n")
        _status(result, provider, err)
        return exit_code_for(result.stop_reason)
    return _report(result, provider, out, err)
