"""dsh-tool-jobs: the background Job runtime and its model-facing controls."""

from dsh_tool_jobs.errors import JobError, JobErrorCode
from dsh_tool_jobs.model import (
    MAX_SAFE_INTEGER,
    TERMINAL_STATUSES,
    ChangeListener,
    DoneListener,
    JobHooks,
    JobOutcome,
    JobSnapshot,
    JobStart,
    JobStatus,
    KillOutcome,
    NoticeSink,
    TerminalStatus,
)
from dsh_tool_jobs.registry import (
    DEFAULT_MAX_CONCURRENT_JOBS_PER_OWNER,
    OWNER_DISPOSED,
    SERVICE_DISPOSED,
    JobRegistry,
    validate_job_limit,
)
from dsh_tool_jobs.render import notice_text, render_list, render_output, status_line

__all__ = [
    "DEFAULT_MAX_CONCURRENT_JOBS_PER_OWNER",
    "MAX_SAFE_INTEGER",
    "OWNER_DISPOSED",
    "SERVICE_DISPOSED",
    "TERMINAL_STATUSES",
    "ChangeListener",
    "DoneListener",
    "JobError",
    "JobErrorCode",
    "JobHooks",
    "JobOutcome",
    "JobRegistry",
    "JobSnapshot",
    "JobStart",
    "JobStatus",
    "KillOutcome",
    "NoticeSink",
    "TerminalStatus",
    "notice_text",
    "render_list",
    "render_output",
    "status_line",
    "validate_job_limit",
]
