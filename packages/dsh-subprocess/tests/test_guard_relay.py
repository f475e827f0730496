"""The guard's SIGTERM relay, run in a host of its own: escapees are asked, the group is not."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from dsh_subprocess import ExitFacts, SpawnSpec, spawn

# The Linux guard's own machinery (server, relay through /proc); the portable guard's
# counterpart is test_portable_guard.py.
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(sys.platform != "linux", reason="the Linux guard exists on Linux only"),
]

# Stands in for a guard: it starts one child in its own process group and one in a session of
# its own, both blocking SIGTERM, relays a SIGTERM as a guard does on receiving one, and
# reports which child has a SIGTERM pending (kill() marks it before it returns, so this is
# an observation, not a race). "scan" takes the fallback for kernels without
# /proc/<pid>/task/<tid>/children: a walk over all of /proc.
_RELAYING_HOST = """
import signal, subprocess, sys
from dsh_subprocess import _guard

if sys.argv[1] == "scan":
    _guard._subtree = lambda root: None
CHILD = (
    "import signal, time; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}); "
    "print('ready', flush=True); time.sleep(60)"
)

def start(**options):
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, **options)
    assert child.stdout.readline() == b"ready\\n"
    return child

def term_pending(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("ShdPnd:"):
                return bool(int(line.split()[1], 16) & 1 << (signal.SIGTERM - 1))

inside = start()
escapee = start(start_new_session=True)
asked = set()
_guard._relay_term(asked)
print("group member:", term_pending(inside.pid))
print("escapee:", term_pending(escapee.pid))
print("asked:", asked == {escapee.pid}, flush=True)
for child in (inside, escapee):
    child.kill()
    child.wait()
"""


@pytest.mark.parametrize("walk", ["children", "scan"])
async def test_relay_terms_descendants_outside_the_group_only(tmp_path: Path, walk: str) -> None:
    # Members of the guard's own group are left alone on purpose: the host's group
    # SIGTERM already reached them, and a second one may mean "stop now" to a product.
    spec = SpawnSpec(
        argv=(sys.executable, "-c", _RELAYING_HOST, walk),
        cwd=str(tmp_path),
        stdin="devnull",
        host_death_guard=False,
    )
    async with await spawn(spec, stderr_observer=lambda line: None) as host:
        assert host.stdout is not None
        out = b""
        with anyio.fail_after(60):
            async for chunk in host.stdout:
                out += chunk
            assert await host.wait() == ExitFacts(exit_code=0, signal=None)
    assert out == b"group member: False\nescapee: True\nasked: True\n"
