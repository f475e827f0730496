"""``dsh demo`` through the real ``dsh``: its report, its temporary root, Ctrl-C at any moment.

The keyless setup is the kit's (``keyless_profile.serve_keyless_profile``); the real
Codex app-server and Claude Code CLI answer from its loopback models. The sandbox is
:mod:`cli_sandbox`'s: its TMPDIR is where the demo's temporary root goes.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from cli_sandbox import Sandbox, dsh, finish, no_traceback, run

pytestmark = pytest.mark.keyless

CODEX = "DSH-DEMO: the real Codex app-server answered through the loopback model."
CLAUDE = "DSH-DEMO: the real Claude Code CLI answered through the loopback model."


def _roots(box: Sandbox) -> list[Path]:
    return sorted(Path(box.env["TMPDIR"]).glob("dsh-demo-*"))


def test_the_demo_reports_both_real_answers_and_removes_its_temporary_root(
    sandbox: Sandbox,
) -> None:
    code, out, err = run(sandbox, "demo")
    assert code == 0, out + err
    lines = out.splitlines()
    assert lines[0] == "dsh demo — REAL products, EMBEDDED LOOPBACK MODEL"
    assert f"  answer:      {CODEX}" in lines
    assert f"  answer:      {CLAUDE}" in lines
    assert lines.count("  stop reason: completed") == 2
    assert lines.count("  loopback model requests: 1") == 2
    (removed,) = [line for line in lines if line.startswith("temporary root ")]
    root = Path(removed.removeprefix("temporary root ").removesuffix(" removed: True"))
    assert root.parent == Path(sandbox.env["TMPDIR"])
    assert root.name.startswith("dsh-demo-")
    assert not root.exists()
    assert _roots(sandbox) == []


@pytest.mark.parametrize("moment", ["root made", "product running"])
def test_ctrl_c_at_any_moment_leaves_no_root_and_no_process(sandbox: Sandbox, moment: str) -> None:
    """Deliberate: the exit status depends on what Ctrl-C interrupted (130 before the runs'
    own handling, 1 for cancelled runs, 0 if both had just completed); what never varies
    is that the temporary root and every product process are gone."""
    proc = dsh(sandbox, "demo")
    names = {"claude", "codex"}
    while proc.poll() is None:  # the event: the root exists, or a product process does
        if moment == "root made" and _roots(sandbox):
            break
        if moment == "product running" and names & {p.name() for p in sandbox.survivors()}:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "dsh demo ended before the moment to interrupt it"
    os.killpg(proc.pid, signal.SIGINT)
    code, out, err = finish(proc)
    no_traceback(err)
    assert code in (0, 1, 130), out + err
    if code == 130:
        assert err.splitlines()[-1] == "dsh: interrupted"
    if code == 1:
        assert "dsh demo: SIGINT: cancelling both runs" in err
    assert _roots(sandbox) == []
    assert sandbox.survivors() == []
