"""Every distribution keeps its log records off an unconfigured host's stderr.

Each package attaches a ``NullHandler`` to the loggers it writes to, so Python's
last-resort handler never prints them; a WARNING on each, in a fresh interpreter that
configured no logging, must print nothing.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

LOGGERS = {
    "dsh_subprocess": ["dsh_subprocess", "dsh_subprocess.stderr"],
    "dsh_subagent": ["dsh_subagent", "dsh_subagent.lines", "dsh.product.codex"],
    "dsh_tool_jobs": ["dsh_tool_jobs"],
    "dsh_subagent_codex": ["dsh_subagent_codex"],
    "dsh_subagent_claude_code": ["dsh_subagent_claude_code"],
    "dsh_subagent_acp": ["dsh_subagent_acp"],
    "dsh_mcp": ["dsh_mcp", "dsh.calls", "dsh.jobs"],
    "dsh_otel": ["dsh_otel"],
}


@pytest.mark.parametrize(("package", "loggers"), sorted(LOGGERS.items()))
def test_a_warning_reaches_no_stderr_of_a_host_without_logging(
    package: str, loggers: list[str]
) -> None:
    code = (
        f"import logging, {package}\n"
        f"for name in {loggers!r}:\n"
        "    logging.getLogger(name).warning('planted %s', name)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
