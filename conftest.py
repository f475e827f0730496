"""Workspace-wide test policy.

* Every async test runs on asyncio and trio unless a module narrows ``anyio_backend``.
* The test process is a child subreaper (Linux), so a descendant that escapes its
  process group is re-parented here instead of to init and cannot hide from the
  leftover check below.
* A test that leaves a process it started alive fails, after the process is killed.
* ``kit_wheels``: the dsh wheels the fresh-venv tests install, built once per session.
* The five known ACP agents beyond codex-acp (docs/agents.md) run their kit classes and
  tier only with ``DSH_TEST_ACP_AGENTS=1``: together they take about an hour on two cores,
  past the whole suite's budget, so CI runs them in a job of their own. The report header
  says when they are left out.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh_subprocess.testing import ProcessWatch, become_subreaper
from fresh_venv import build_kit_wheels
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "nightly", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("DSH_HYPOTHESIS_PROFILE", "ci"))

become_subreaper()

_ACP_AGENT_MODULES = (
    "e2e/contract/test_acp_agents_contract.py",
    "e2e/test_acp_agents_tier.py",
    "e2e/test_acp_agents_ctrl_c.py",
    "e2e/test_acp_opencode_offline.py",
)
_ACP_AGENTS_ON = os.environ.get("DSH_TEST_ACP_AGENTS", "") not in ("", "0")
collect_ignore = [] if _ACP_AGENTS_ON else list(_ACP_AGENT_MODULES)


def pytest_report_header() -> list[str]:
    if _ACP_AGENTS_ON:
        return ["dsh: the known ACP agents' kit classes and tier run (DSH_TEST_ACP_AGENTS)"]
    return [
        "dsh: NOT RUN: the known ACP agents' kit classes and tier "
        f"({', '.join(_ACP_AGENT_MODULES)}); set DSH_TEST_ACP_AGENTS=1 to run them"
    ]


_LEFTOVER_GRACE_SECONDS = 3.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def no_leftover_processes() -> Iterator[None]:
    watch = ProcessWatch()
    yield
    watch.wait_gone(_LEFTOVER_GRACE_SECONDS)
    leftover = watch.kill_leftovers()
    if leftover:
        pytest.fail("test left processes behind: " + "; ".join(leftover))


@pytest.fixture(scope="session")
def kit_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels of dsh-subprocess, dsh-subagent and dsh-contract-tests, built as the kit
    README says, shared by every fresh-venv test of the session."""
    return build_kit_wheels(tmp_path_factory.mktemp("kit-wheels"))
