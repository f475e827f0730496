"""dsh-tool-jobs: the background Job runtime and its model-facing controls."""

import logging

from dsh_tool_jobs.activity import ActivityTracker, JobActivity
from dsh_tool_jobs.background import (
    BACKGROUND_KILL_REASON,
    SUBAGENT_JOB_KIND,
    BackgroundSubagentLauncher,
    settle_run,
    settle_start,
)
from dsh_tool_jobs.config import JobsToolsConfig
from dsh_tool_jobs.controls import (
    JOB_KILL_DESCRIPTION,
    JOB_KILL_SCHEMA,
    JOB_LIST_DESCRIPTION,
    JOB_LIST_SCHEMA,
    JOB_OUTPUT_DESCRIPTION,
    JOB_OUTPUT_SCHEMA,
    JOBS_SYSTEM_PROMPT,
    ControlReply,
    PublicJob,
    job_kill,
    job_list,
    job_output,
)
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
from dsh_tool_jobs.tools import JobKillTool, JobListTool, JobOutputTool, job_tools

# Records reach the host's own handlers only, never Python's last-resort stderr output.
logging.getLogger("dsh_tool_jobs").addHandler(logging.NullHandler())

__all__ = [
    "BACKGROUND_KILL_REASON",
    "DEFAULT_MAX_CONCURRENT_JOBS_PER_OWNER",
    "JOBS_SYSTEM_PROMPT",
    "JOB_KILL_DESCRIPTION",
    "JOB_KILL_SCHEMA",
    "JOB_LIST_DESCRIPTION",
    "JOB_LIST_SCHEMA",
    "JOB_OUTPUT_DESCRIPTION",
    "JOB_OUTPUT_SCHEMA",
    "MAX_SAFE_INTEGER",
    "OWNER_DISPOSED",
    "SERVICE_DISPOSED",
    "SUBAGENT_JOB_KIND",
    "TERMINAL_STATUSES",
    "ActivityTracker",
    "BackgroundSubagentLauncher",
    "ChangeListener",
    "ControlReply",
    "DoneListener",
    "JobActivity",
    "JobError",
    "JobErrorCode",
    "JobHooks",
    "JobKillTool",
    "JobListTool",
    "JobOutcome",
    "JobOutputTool",
    "JobRegistry",
    "JobSnapshot",
    "JobStart",
    "JobStatus",
    "JobsToolsConfig",
    "KillOutcome",
    "NoticeSink",
    "PublicJob",
    "TerminalStatus",
    "job_kill",
    "job_list",
    "job_output",
    "job_tools",
    "notice_text",
    "render_list",
    "render_output",
    "settle_run",
    "settle_start",
    "status_line",
    "validate_job_limit",
]
