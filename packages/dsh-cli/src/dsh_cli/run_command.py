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
live progress included (:mod:`dsh_cli.progress_view`), goes to stderr. The run itself is
the library's :func:`dsh_profiles.run.run_task` (with ``handle_signals=True``); this
module reads the arguments and stdin and renders the outcome.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import sys
from contextlib import ExitStack
from typing import Final, TextIO

import anyio
from dsh_batch.checks import check_base
from dsh_profiles.confinement import add_confinement_flag
from dsh_profiles.discovery import ProviderDiscovery
from dsh_profiles.errors import UsageError
from dsh_profiles.isolation import worktree_from_flags
from dsh_profiles.loader import load_profile
from dsh_profiles.options import budget_from, resolve_target
from dsh_profiles.output_schema import load_output_schema
from dsh_profiles.run import RunEvent, RunNotice, RunOutcome, json_record, parse_resume, run_task
from dsh_profiles.runtime import validate_task, validate_utf8
from dsh_profiles.spawnguard import SpawnCounter
from dsh_subagent import (
    COMPLETED,
    SubagentResult,
    render_changes,
)
from dsh_subagent.tool import stop_headline
from dsh_tool_jobs import JobSnapshot

from dsh_cli.isolation import add_worktree_flags
from dsh_cli.options import add_budget_flags
from dsh_cli.progress_view import LiveView, PlainView, RunView

__all__ = ["add_run_arguments", "cmd_run"]


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


class _Shown:
    """Hands the library's events to the view, which is up from the product's start
    (once every check passed) to the end of the command."""

    def __init__(self, view: RunView, stack: ExitStack) -> None:
        self._view = view
        self._stack = stack
        self._up = False

    def event(self, event: RunEvent) -> None:
        if not self._up and not isinstance(event, RunNotice):
            self._stack.enter_context(self._view)
            self._up = True
        self._view.event(event)


def _report_job(snapshot: JobSnapshot, text: str, tool: str, out: TextIO, err: TextIO) -> None:
    detail = f" ({snapshot.detail})" if snapshot.detail else ""
    print(f"dsh: job {snapshot.id} via {tool}: {snapshot.status}{detail}", file=err)
    if text:
        out.write(text if text.endswith("\n") else text + "\n")


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
    headline = stop_headline(result.stop_reason)
    print(f"dsh: {provider}: {headline} (stop reason: {result.stop_reason})", file=err)
    if result.diagnostic:
        print(f"Diagnostic: {result.diagnostic}", file=err)


MAX_STDIN_TASK_BYTES: Final = 64 << 20
"""A task read from stdin is refused past this (``yes | dsh run P T -`` never ends):
far above what any product accepts (Codex: 1 Mi characters), so only a runaway pipe
meets it."""


def _read_stdin_text(limit: int = MAX_STDIN_TASK_BYTES) -> str:
    """Stdin as text, at most ``limit`` bytes; an undecodable byte becomes a lone
    surrogate, never an error.

    The task check then refuses it with one line (exit 2) whatever the locale's stdin
    error handler is.

    Raises:
        UsageError: stdin holds more than ``limit`` bytes (nothing was started).
    """
    buffer = getattr(sys.stdin, "buffer", None)
    # A text-only stream (a test's StringIO) is bounded in characters instead.
    data = sys.stdin.read(limit + 1) if buffer is None else buffer.read(limit + 1)
    if len(data) > limit:
        raise UsageError(f"the task on stdin is longer than {limit} bytes; nothing was started")
    return data if isinstance(data, str) else data.decode("utf-8", "surrogateescape")


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
    resume = parse_resume(args.resume, "--resume")
    task = _read_stdin_text() if args.task == "-" else args.task
    validate_task(task)
    validate_utf8("--cwd", args.cwd)
    check_base(args.cwd)  # named as the flag before anything loads (--background announces)
    with SpawnCounter(forbid=True):
        composition = load_profile(args.profile, discovery=discovery, confinement=args.confinement)
    provider = resolve_target(composition, args.target, args.instance)
    worktree = worktree_from_flags(composition, provider, args)
    view: RunView
    if args.background:
        view = PlainView(args.target, err)  # only its lines: a Job shows no progress here
    elif _is_terminal(err):
        view = LiveView(provider, err, log_handler)
    else:
        view = PlainView(provider, err)
    with ExitStack() as stack:
        outcome = anyio.run(
            functools.partial(
                run_task,
                composition,
                target=args.target,
                task=task,
                instance=args.instance,
                cwd=args.cwd,
                background=args.background,
                budget=budget,
                resume=resume,
                output_schema=output_schema,
                worktree=worktree,
                handle_signals=True,
                on_event=_Shown(view, stack).event,
                session_id="dsh-cli",
            )
        )
    return _report(outcome, args.json, out, err)


def _report(outcome: RunOutcome, as_json: bool, out: TextIO, err: TextIO) -> int:
    """The outcome on stdout and stderr; the exit status."""
    target = outcome.target
    if outcome.failure is not None:
        print(f"dsh: {target}: {outcome.failure.stage}: {outcome.failure.message}", file=err)
    elif outcome.job is not None:
        _report_job(outcome.job, outcome.job_output, target, out, err)
    elif outcome.result is None:
        print(f"dsh: {target}: cancelled before the product started", file=err)
    elif as_json:
        record = json_record(outcome.result, outcome.elapsed, typed=outcome.typed)
        out.write(json.dumps(record) + "\n")
        _status(outcome.result, target, err)
    else:
        _report_result(outcome.result, target, out, err)
    return outcome.exit_code


def _report_result(result: SubagentResult, provider: str, out: TextIO, err: TextIO) -> None:
    text = result.text
    if result.stop_reason == COMPLETED and result.structured is not None:
        out.write(json.dumps(result.structured, ensure_ascii=False) + "\n")  # the object
    elif result.stop_reason == COMPLETED:
        out.write(text if text.endswith("\n") else text + "\n")
    _status(result, provider, err)
    if result.stop_reason != COMPLETED and text:
        print("Partial output before the run ended:", file=err)
        out.write(text if text.endswith("\n") else text + "\n")
