"""Model-visible texts: status lines, ``job_output`` bodies, notices, byte bounds.

Bounds count UTF-8 bytes, never characters, and never split a code point. A bounded
``job_output`` keeps its status line intact and the *tail* of the body (a final answer
ends with its conclusion), behind the ``[output truncated]`` marker; any other bounded
text keeps its tail behind ``[result truncated]``, except an error, which keeps its head
(what failed, for which job, the exception type) before ``\n[result truncated]``; a
bounded notice keeps the stable ``background job <id>`` prefix and the collection hint.
"""

from __future__ import annotations

import time
from typing import Final

from dsh_tool_jobs.model import JobSnapshot

__all__ = [
    "NOTICE_TRUNCATED",
    "NO_NEW_OUTPUT",
    "OUTPUT_TRUNCATED",
    "RESULT_TRUNCATED",
    "TOOL_ERROR_PREFIX",
    "bound_error",
    "bound_result",
    "fit_head",
    "fit_tail",
    "format_duration",
    "notice_text",
    "render_list",
    "render_output",
    "status_line",
]

NO_NEW_OUTPUT: Final = "(no new output)"
OUTPUT_TRUNCATED: Final = "[output truncated]\n"
RESULT_TRUNCATED: Final = "[result truncated]\n"
NOTICE_TRUNCATED: Final = "\n[notice truncated]"
_NOTICE_ACTION: Final = "\nDone; job_output."
TOOL_ERROR_PREFIX: Final = "Error: "
"""What the tool protocol puts before an error message in the model's text."""


def _is_continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def fit_head(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` that fits in ``max_bytes`` UTF-8 bytes."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    cut = max(max_bytes, 0)
    while cut > 0 and _is_continuation(data[cut]):
        cut -= 1
    return data[:cut].decode("utf-8")


def fit_tail(text: str, max_bytes: int) -> str:
    """The longest suffix of ``text`` that fits in ``max_bytes`` UTF-8 bytes."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    start = len(data) - max(max_bytes, 0)
    while start < len(data) and _is_continuation(data[start]):
        start += 1
    return data[start:].decode("utf-8")


def _bytes(text: str) -> int:
    return len(text.encode("utf-8"))


def _bound(content: str, suffix: str, limit: int | None, marker: str) -> str:
    complete = content + suffix
    if limit is None or _bytes(complete) <= limit:
        return complete
    fixed = marker + suffix
    if _bytes(fixed) >= limit:
        return fit_tail(fixed, limit)
    return marker + fit_tail(content, limit - _bytes(fixed)) + suffix


def status_line(job: JobSnapshot) -> str:
    """``[status: <status>]`` or ``[status: <status>, <detail>]``."""
    if job.detail is None:
        return f"[status: {job.status}]"
    return f"[status: {job.status}, {job.detail}]"


def render_output(text: str, job: JobSnapshot) -> str:
    """Render a ``job_output`` result, bounded by the job's ``output_limit_bytes``.

    The body is ``text`` or ``(no new output)``; a newline separates it from the status
    line unless the body already ends with one.
    """
    body = text or NO_NEW_OUTPUT
    separator = "" if body.endswith("\n") else "\n"
    return _bound(body, separator + status_line(job), job.output_limit_bytes, OUTPUT_TRUNCATED)


def bound_result(text: str, limit: int | None) -> str:
    """Bound any other model-visible result of a job tool to ``limit`` UTF-8 bytes."""
    return _bound(text, "", limit, RESULT_TRUNCATED)


def bound_error(message: str, limit: int | None) -> str:
    """Bound an error message so the model's ``Error: <message>`` text fits ``limit`` bytes.

    The head is kept (it says what failed). The tool protocol's 7-byte ``Error: ``
    prefix is the floor: under a limit that small the message is empty and the model
    sees the prefix alone.
    """
    if limit is None:
        return message
    budget = max(limit - _bytes(TOOL_ERROR_PREFIX), 0)
    if _bytes(message) <= budget:
        return message
    marker = "\n" + RESULT_TRUNCATED.rstrip("\n")
    if _bytes(marker) >= budget:
        return fit_head(message, budget)
    return fit_head(message, budget - _bytes(marker)) + marker


def format_duration(ms: int) -> str:
    """A job's elapsed time in whole seconds: ``45s``, ``4m 05s``, ``1h 02m``."""
    seconds = max(ms, 0) // 1000
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def _progress(job: JobSnapshot, now_ms: int) -> str:
    """`` (<elapsed>[, <N> tokens][, last: <activity>])`` for a job with an activity."""
    activity = job.activity
    if activity is None:
        return ""
    end = job.finished_at if job.finished_at is not None else now_ms
    parts = [format_duration(end - job.started_at)]
    if activity.tokens is not None:
        parts.append(f"{activity.tokens:,} tokens")
    last = activity.describe()
    if last is not None and not job.terminal:
        parts.append(f"last: {last}")
    return f" ({', '.join(parts)})"


def render_list(jobs: list[JobSnapshot], now_ms: int | None = None) -> str:
    """``job_list`` text: one ``<id> [<kind>] <status> — <label>[ (<progress>)]`` line per job.

    A job whose producer keeps an activity (a background subagent) adds its elapsed
    time, its token count when reported and, while it runs, its last activity as a safe
    category: `` (2m 05s, 1,234 tokens, last: tool-started command Bash)``. Never
    product text, command text or paths (see :mod:`dsh_tool_jobs.activity`).

    Args:
        jobs: The snapshots to list.
        now_ms: The current time in epoch milliseconds (default: the clock).
    """
    if not jobs:
        return "(no background jobs)"
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return "\n".join(
        f"{job.id} [{job.kind}] {job.status} — {job.label}{_progress(job, now)}" for job in jobs
    )


def notice_text(job: JobSnapshot) -> str:
    """The completion notice for a settled job, bounded by its ``output_limit_bytes``.

    Unbounded form: ``background job <id> (<kind>: <label>) finished <status line>. Read
    its output with job_output.`` Over the bound it degrades, in order, to the id prefix
    plus as much of the detail as fits and ``[notice truncated]``, then the id prefix
    alone, then a tail of the collection hint.
    """
    prefix = f"background job {job.id}"
    detail = f" ({job.kind}: {job.label}) finished {status_line(job)}"
    complete = f"{prefix}{detail}. Read its output with job_output."
    limit = job.output_limit_bytes
    if limit is None or _bytes(complete) <= limit:
        return complete
    fixed = prefix + NOTICE_TRUNCATED + _NOTICE_ACTION
    if _bytes(fixed) <= limit:
        head = fit_head(detail, limit - _bytes(fixed))
        return prefix + head + NOTICE_TRUNCATED + _NOTICE_ACTION
    compact = prefix + _NOTICE_ACTION
    if _bytes(compact) <= limit:
        return compact
    return fit_tail(_NOTICE_ACTION, limit)
