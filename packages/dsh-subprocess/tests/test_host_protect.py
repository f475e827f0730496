"""The host's environment and memory, kept from same-user products (Linux).

Every process here runs without capabilities (``unprivileged``: root's
``CAP_SYS_PTRACE`` would bypass the "not dumpable" check, so a root test of it proves
nothing). Each check has its unprotected twin that reads the planted secret, so the
protected case can fail.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from unprivileged import unprivileged

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux: /proc and prctl")

SECRET_NAME = "DSH_TEST_HOST_SECRET"

# Reads another process's /proc entries and tries ptrace attach; prints what it got.
READER = r"""
import ctypes, errno, json, sys
pid, secret = sys.argv[1], sys.argv[2]
out = {}
for entry in ("environ", "mem", "maps", "cmdline"):
    try:
        with open(f"/proc/{pid}/{entry}", "rb") as f:
            data = f.read(1 << 20) if entry != "mem" else b""
        out[entry] = "secret" if secret.encode() in data else "read"
    except OSError as exc:
        out[entry] = errno.errorcode[exc.errno]
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH, PTRACE_DETACH = 16, 17
if libc.ptrace(PTRACE_ATTACH, int(pid), None, None) == 0:
    out["ptrace"] = "attached"
    import os
    os.waitpid(int(pid), 0)
    libc.ptrace(PTRACE_DETACH, int(pid), None, None)
else:
    out["ptrace"] = errno.errorcode[ctypes.get_errno()]
print(json.dumps(out))
"""

# A host holding the secret in its environment: optionally opts in, says "ready", waits.
HOST = r"""
import sys
import dsh_subprocess
protected = dsh_subprocess.protect_host_process() if sys.argv[1] == "1" else False
print(protected, dsh_subprocess.host_process_protected(), flush=True)
sys.stdin.read()
"""


def _read_as_same_user(pid: int, secret: str) -> dict[str, str]:
    done = subprocess.run(
        unprivileged([sys.executable, "-c", READER, str(pid), secret]),
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, str] = json.loads(done.stdout)
    return result


@pytest.fixture
def secret() -> str:
    return f"host-secret-{uuid.uuid4().hex}"


@pytest.fixture
def host(secret: str, request: pytest.FixtureRequest) -> Iterator[tuple[int, str]]:
    """A capability-less host (opted in when the test's param says so) and its first line."""
    opt_in = "1" if request.param else "0"
    # The host under test is started as a user starts one, not as a product.
    proc = subprocess.Popen(  # noqa: TID251
        unprivileged([sys.executable, "-c", HOST, opt_in]),
        env={**os.environ, SECRET_NAME: secret},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    try:
        yield proc.pid, proc.stdout.readline().strip()
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        proc.stdout.close()


@pytest.mark.parametrize("host", [False], indirect=True)
def test_an_unprotected_host_is_read_whole_by_a_same_user_process(
    host: tuple[int, str], secret: str
) -> None:
    pid, said = host
    assert said == "False False"
    seen = _read_as_same_user(pid, secret)
    assert seen["environ"] == "secret"  # the leak the opt-in closes
    assert seen["ptrace"] == "attached"


@pytest.mark.parametrize("host", [True], indirect=True)
def test_a_protected_host_refuses_environ_mem_and_ptrace_but_not_cmdline(
    host: tuple[int, str], secret: str
) -> None:
    pid, said = host
    assert said == "True True"
    seen = _read_as_same_user(pid, secret)
    assert seen == {
        "environ": "EACCES",
        "mem": "EACCES",
        "maps": "EACCES",
        # Deliberate in the docs: the kernel keeps cmdline world-readable whatever the
        # dumpable flag says (ps shows it), so a secret never belongs on a command line.
        "cmdline": "read",
        "ptrace": "EPERM",
    }


# A capability-less host that protects itself (or not) and spawns, through dsh, a
# product that reads its guard's (and the guard server's) /proc entries and reports
# whether it is dumpable itself.
GUARDED_HOST = r"""
import json, os, sys
import anyio
import dsh_subprocess

PRODUCT = '''
import ctypes, errno, json, os
def environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return "secret" if os.environ["SECRET"].encode() in f.read() else "read"
    except OSError as exc:
        return errno.errorcode[exc.errno]
guard = os.getppid()
with open(f"/proc/{guard}/stat", "rb") as f:
    server = int(f.read().rsplit(b")", 1)[1].split()[1])
dumpable = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)
print(json.dumps({"dumpable": dumpable, "guard": environ(guard), "server": environ(server),
                  "server_is_host": server == int(os.environ["HOST_PID"])}))
'''

# Past the server's request size limit the spawn gets a guard of its own.
PAD = {f"PAD{i}": "x" * 100_000 for i in range(3)} if sys.argv[1] == "per-spawn" else {}

async def main():
    spec = dsh_subprocess.SpawnSpec(
        argv=(sys.executable, "-c", PRODUCT), cwd="/", stdin="devnull",
        env={"SECRET": os.environ["SECRET"], "HOST_PID": str(os.getpid()), **PAD},
    )
    async with await dsh_subprocess.spawn(spec) as proc:
        assert proc.stdout is not None
        out = b""
        async for chunk in proc.stdout:
            out += chunk
        facts = await proc.wait()
    assert facts.exit_code == 0, facts
    print(out.decode().strip())

anyio.run(main)
"""


@pytest.mark.parametrize("guard", ["served", "per-spawn"])
def test_the_guard_is_not_readable_and_the_product_is_dumpable_again(
    guard: str, secret: str
) -> None:
    """The guard (and server) refuse the product; the product's execve reset its flag.

    The host is not protected here, so only the guard's own setting is under test.
    ``DSH_SUBPROCESS_GUARD`` cannot pick per-spawn mode; a request over the server's size
    limit does, so that case pads the product's environment past it.
    """
    env = {**os.environ, "SECRET": secret}
    done = subprocess.run(
        unprivileged([sys.executable, "-c", GUARDED_HOST, guard]),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["dumpable"] == 1  # execve reset it: the product is as it always was
    assert seen["guard"] == "EACCES"
    if guard == "served":
        assert not seen["server_is_host"]
        assert seen["server"] == "EACCES"
    else:
        # The per-spawn guard's parent is the unprotected host itself: the twin that
        # shows the product can read what is not protected.
        assert seen["server_is_host"]
        assert seen["server"] == "secret"


FORK_CHILD = r"""
import ctypes, os, sys
import dsh_subprocess
assert dsh_subprocess.protect_host_process()
pid = os.fork()
if pid == 0:
    os._exit(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))
_, status = os.waitpid(pid, 0)
print(os.WEXITSTATUS(status))
"""


def test_a_fork_child_before_exec_inherits_the_setting() -> None:
    """The guard's fork child, until it execs the product, is as unreadable as the guard."""
    done = subprocess.run(
        [sys.executable, "-c", FORK_CHILD], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "0"


WARNING_HOST = r"""
import logging, sys
import anyio
import dsh_subprocess
logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
if sys.argv[1] == "1":
    dsh_subprocess.protect_host_process()

async def main():
    for _ in range(2):
        spec = dsh_subprocess.SpawnSpec(argv=("true",), cwd="/", stdin="devnull", stdout="devnull")
        async with await dsh_subprocess.spawn(spec) as proc:
            await proc.wait()

anyio.run(main)
"""


@pytest.mark.parametrize("opt_in", [False, True])
def test_an_unprotected_host_is_warned_once_at_its_first_spawn(opt_in: bool) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WARNING_HOST, "1" if opt_in else "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "can read its environment" in line]
    if opt_in:
        assert warnings == []
    else:
        (line,) = warnings
        assert line.startswith("dsh_subprocess WARNING products spawned by this process")
        assert "dsh_subprocess.protect_host_process()" in line


def test_protection_is_not_applied_behind_the_hosts_back() -> None:
    """Importing and spawning never makes the host undumpable: it is the host's opt-in."""
    script = (
        "import anyio, dsh_subprocess\n"
        "spec = dsh_subprocess.SpawnSpec(argv=('true',), cwd='/', stdin='devnull')\n"
        "async def main():\n"
        "    async with await dsh_subprocess.spawn(spec) as proc:\n"
        "        await proc.wait()\n"
        "anyio.run(main)\n"
        "print(dsh_subprocess.host_process_protected())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("page", "heading"),
    [
        ("security.md", "## The host's environment"),
        ("harness.md", "## Your host's own environment"),
    ],
)
def test_the_documented_opt_in_protects_the_host(page: str, heading: str) -> None:
    """The snippet the docs tell a library host to paste, run as written."""
    path = Path(__file__).resolve().parents[3] / "docs" / page
    section = path.read_text(encoding="utf-8").split(heading, 1)[1]
    (snippet,) = re.findall(r"```python\n(.*?)```", section.split("\n## ", 1)[0], re.S)
    check = "\nprint(dsh_subprocess.host_process_protected())\n"
    done = subprocess.run(
        [sys.executable, "-c", snippet + check], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "True"
