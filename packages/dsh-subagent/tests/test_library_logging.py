"""A host that configured no logging sees nothing from the library on its stderr.

Python prints WARNING-and-up records that reach no handler through its last-resort
handler, so a failed run's warning would land on the host's stderr behind its back.
The packages attach a ``NullHandler`` to their loggers, as the logging HOWTO asks of
libraries; a host that configures logging still receives every record.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent

SCRIPT = textwrap.dedent(
    """
    import logging, sys
    sys.path.insert(0, {here!r})
    from subagent_echo import EchoConfig, EchoProvider
    from dsh_subagent import delegate_sync

    if sys.argv[1] == "configured":
        logging.basicConfig(format="%(name)s %(levelname)s: %(message)s")
    result = delegate_sync(EchoProvider(EchoConfig()), "exit 3", cwd={cwd!r})
    print(result.stop_reason)
    """
)


def _run(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    code = SCRIPT.format(here=str(HERE), cwd=str(tmp_path))
    return subprocess.run(
        [sys.executable, "-c", code, mode],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_failed_run_writes_nothing_to_an_unconfigured_hosts_stderr(tmp_path: Path) -> None:
    done = _run(tmp_path, "unconfigured")
    assert (done.returncode, done.stdout) == (0, "error\n"), done.stderr
    assert done.stderr == ""


def test_a_host_that_configured_logging_still_gets_the_warning(tmp_path: Path) -> None:
    done = _run(tmp_path, "configured")
    assert (done.returncode, done.stdout) == (0, "error\n"), done.stderr
    assert "dsh_subagent WARNING: subagent-echo" in done.stderr
    assert "failed (error)" in done.stderr
