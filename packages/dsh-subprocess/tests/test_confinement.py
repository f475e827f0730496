"""Kernel confinement (Landlock) of a product's tree, tried from inside by real children.

Each case spawns a small Python child that attempts an escape and prints, as JSON, what
each attempt gave: ``"ok"`` or the errno. Landlock is needed (ABI 6 for the scoping
cases); without it these cases skip visibly. The cases where Landlock is missing are
simulated in ``test_confinement_modes.py``.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from dsh_subprocess import (
    Confinement,
    ConfinementUnavailableError,
    ExitFacts,
    SpawnError,
    SpawnSpec,
    confinement,
    landlock_abi,
    spawn,
    system_read_paths,
)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(landlock_abi() < 6, reason="needs Landlock ABI 6 (Linux 6.12 or later)"),
]

_PRELUDE = """
import json, os, socket, sys
R = {}
def attempt(name, fn):
    try:
        fn()
        R[name] = "ok"
    except OSError as exc:
        R[name] = errno_name(exc.errno)
def errno_name(number):
    import errno
    return errno.errorcode.get(number, str(number))
def read(path):
    with open(path, "rb") as handle:
        handle.read(1)
"""
_EPILOGUE = "\nprint(json.dumps(R))\n"


def python_paths() -> tuple[str, ...]:
    """What a child ``sys.executable`` needs to read: the venv and the real install."""
    real = os.path.realpath(sys.executable)
    return tuple(
        {
            os.path.dirname(os.path.dirname(real)),
            sys.prefix,
            os.path.realpath(sys.prefix),
            os.path.realpath(sys.base_prefix),
        }
    )


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """A work directory (the child's cwd, writable) and a secret outside it."""
    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("planted secret\n")
    return {"work": work, "outside": outside, "secret": secret}


def policy(work: Path, **extra: Any) -> Confinement:
    return Confinement(
        mode="required", read=(*system_read_paths(), *python_paths()), write=(str(work),), **extra
    )


async def probe(
    code: str,
    work: Path,
    confined: Confinement | None,
    *,
    host_death_guard: bool = True,
) -> dict[str, str]:
    """Run ``code`` (with :data:`_PRELUDE`) in a child; return its attempts' outcomes."""
    result: dict[str, str] = json.loads(
        await run(code + _EPILOGUE, work, confined, host_death_guard=host_death_guard)
    )
    return result


async def run(
    code: str, work: Path, confined: Confinement | None, *, host_death_guard: bool = True
) -> bytes:
    """Run ``code`` (with :data:`_PRELUDE`) in a child; return its whole stdout.

    The stdout is read to EOF: until every process holding it (descendants that left
    the child's session included) has closed it.
    """
    spec = SpawnSpec(
        argv=(sys.executable, "-I", "-c", _PRELUDE + code),
        cwd=str(work),
        stdin="devnull",
        confinement=confined,
        host_death_guard=host_death_guard,
    )
    stderr: list[str] = []
    out = b""
    async with await spawn(spec, stderr_observer=stderr.append) as proc:
        assert proc.confined == (confined is not None)
        assert proc.stdout is not None
        while True:
            try:
                out += await proc.stdout.receive()
            except anyio.EndOfStream:
                break
        facts = await proc.wait()
    assert facts.exit_code == 0, (facts, stderr)
    return out


_FILES = """
attempt("read_outside", lambda: read(SECRET))
attempt("write_outside", lambda: open(OUTSIDE + "/new.txt", "w").close())
attempt("list_outside", lambda: os.listdir(OUTSIDE))
attempt("write_inside", lambda: open("inside.txt", "w").write("x"))
attempt("read_inside", lambda: read("inside.txt"))
attempt("mkdir_inside", lambda: os.mkdir("sub"))
attempt("rename_between_dirs_inside", lambda: os.rename("inside.txt", "sub/moved.txt"))
attempt("read_system", lambda: read("/etc/passwd"))
attempt("write_dev_null", lambda: open("/dev/null", "w").write("x"))
attempt("read_tmp", lambda: os.listdir("/tmp"))
attempt("write_dev_stderr_pipe", lambda: open("/dev/stderr", "w").write(""))
"""


async def test_confinement_is_in_effect_in_every_spawn_path(
    guard_mode: str, layout: dict[str, Path]
) -> None:
    """Fails when a spawn path drops the policy on its way to the product.

    Server, per-spawn guard, forced portable guard and no guard (the exec trampoline):
    the same child reads the planted secret unconfined and is refused confined.
    """
    work = layout["work"]
    code = f"SECRET = {str(layout['secret'])!r}\nOUTSIDE = {str(layout['outside'])!r}\n" + _FILES
    guarded = guard_mode != "direct"
    control = work.parent / "control"
    control.mkdir()
    free = await probe(code, control, None, host_death_guard=guarded)
    assert free["read_outside"] == "ok"  # the control: this test can fail
    assert free["write_outside"] == "ok"
    (layout["outside"] / "new.txt").unlink()
    confined = await probe(code, work, policy(work), host_death_guard=guarded)
    assert confined == {
        "read_outside": "EACCES",
        "write_outside": "EACCES",
        "list_outside": "EACCES",
        "write_inside": "ok",
        "read_inside": "ok",
        "mkdir_inside": "ok",
        "rename_between_dirs_inside": "ok",
        "read_system": "ok",
        "write_dev_null": "ok",
        "read_tmp": "EACCES",
        "write_dev_stderr_pipe": "ok",
    }
    assert not (layout["outside"] / "new.txt").exists()


async def test_links_planted_in_the_cwd(layout: dict[str, Path]) -> None:
    """A symlink to the secret is refused (the kernel checks the file it resolves to), and
    the tree cannot make a hard link to it. A hard link that someone outside the run
    planted in an allowed directory is the same file under an allowed path: it is
    readable. Pinned, as docs/security.md says: the allowed trees are trusted content.
    """
    work, secret = layout["work"], layout["secret"]
    (work / "symlink").symlink_to(secret)
    os.link(secret, work / "planted_hard_link")
    code = f"""
SECRET = {str(secret)!r}
attempt("read_symlink", lambda: read("symlink"))
attempt("make_hard_link", lambda: os.link(SECRET, "own_hard_link"))
attempt("make_symlink_then_read", lambda: (os.symlink(SECRET, "own_symlink"), read("own_symlink")))
attempt("read_planted_hard_link", lambda: read("planted_hard_link"))
"""
    result = await probe(code, work, policy(work))
    assert result == {
        "read_symlink": "EACCES",
        "make_hard_link": "EXDEV",
        "make_symlink_then_read": "EACCES",
        "read_planted_hard_link": "ok",
    }
    assert not (work / "own_hard_link").exists()


async def test_a_setsid_double_forked_grandchild_stays_confined(layout: dict[str, Path]) -> None:
    work = layout["work"]
    code = f"""
first_session = os.getsid(0)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        try:
            read({str(layout["secret"])!r})
            outcome = "ok"
        except OSError as exc:
            outcome = errno_name(exc.errno)
        print(outcome, os.getsid(0) != first_session, flush=True)
        os._exit(0)
    os._exit(0)
os.wait()
"""
    # The grandchild, in a session of its own, holds stdout: its line arrives before EOF.
    assert await run(code, work, policy(work)) == b"EACCES True\n"


async def test_the_hosts_proc_entries_and_ptrace_are_refused(layout: dict[str, Path]) -> None:
    """``/proc`` is readable, but not the host's environment, memory, root, cwd or exe,
    nor a ptrace of it (as root too: the product loses CAP_SYS_ADMIN and CAP_PERFMON,
    with which the kernel would let it read another domain's ``environ``). The command
    line and status stay readable, as for any process on the system.
    """
    host = os.getpid()
    work = layout["work"]
    code = f"""
import ctypes
HOST = {host}
def seize():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(0x4206, HOST, 0, 0) != 0:  # PTRACE_SEIZE: never stops the host
        raise OSError(ctypes.get_errno(), "ptrace")
attempt("environ", lambda: read(f"/proc/{{HOST}}/environ"))
attempt("maps", lambda: read(f"/proc/{{HOST}}/maps"))
attempt("mem", lambda: read(f"/proc/{{HOST}}/mem"))
attempt("root", lambda: os.listdir(f"/proc/{{HOST}}/root/"))
attempt("cwd", lambda: os.readlink(f"/proc/{{HOST}}/cwd"))
attempt("exe", lambda: os.readlink(f"/proc/{{HOST}}/exe"))
attempt("fd", lambda: os.readlink(f"/proc/{{HOST}}/fd/0"))
attempt("ptrace", seize)
attempt("cmdline", lambda: read(f"/proc/{{HOST}}/cmdline"))
attempt("status", lambda: read(f"/proc/{{HOST}}/status"))
attempt("stat", lambda: read(f"/proc/{{HOST}}/stat"))
attempt("own_environ", lambda: read("/proc/self/environ"))
"""
    free = await probe(code.replace('attempt("ptrace", seize)', ""), work, None)
    assert free["environ"] == "ok"  # the control: this test can fail
    result = await probe(code, work, policy(work))
    assert result == {
        "environ": "EACCES",
        "maps": "EACCES",
        "mem": "EACCES",
        "root": "EACCES",
        "cwd": "EACCES",
        "exe": "EACCES",
        "fd": "EACCES",
        "ptrace": "EPERM",
        "cmdline": "ok",
        "status": "ok",
        "stat": "ok",
        "own_environ": "ok",
    }


async def test_signals_reach_the_own_tree_only(layout: dict[str, Path]) -> None:
    work = layout["work"]
    outsider = SpawnSpec(argv=("sleep", "60"), cwd=str(work), stdin="devnull", stdout="devnull")
    async with await spawn(outsider) as sleeper:
        code = f"""
import signal, time
OUTSIDER = {sleeper.pid}
attempt("term_outsider", lambda: os.kill(OUTSIDER, signal.SIGTERM))
attempt("probe_host", lambda: os.kill({os.getpid()}, 0))
child = os.fork()
if child == 0:
    time.sleep(60)
    os._exit(0)
attempt("term_own_child", lambda: os.kill(child, signal.SIGTERM))
os.waitpid(child, 0)
"""
        result = await probe(code, work, policy(work))
        assert result == {"term_outsider": "EPERM", "probe_host": "EPERM", "term_own_child": "ok"}
        assert sleeper.exit_facts is None
        assert sleeper.tree_alive()


async def test_unix_sockets_abstract_refused_pathname_not(layout: dict[str, Path]) -> None:
    """Abstract unix sockets outside the tree are refused (ABI 6 scoping). A pathname
    socket is NOT: Landlock (ABI 7) does not mediate ``connect()`` to a socket file,
    wherever it lives (here in a directory the tree can neither read nor list). Pinned
    so the docs' statement stays true; docs/security.md.
    """
    work = layout["work"]
    name = f"\0dsh-confinement-test-{os.getpid()}-{id(layout)}"
    path = layout["outside"] / "daemon.sock"
    with (
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as abstract,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as pathname,
    ):
        abstract.bind(name)
        abstract.listen()
        pathname.bind(str(path))
        pathname.listen()
        code = f"""
def connect(address):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(address)
attempt("abstract", lambda: connect({name!r}))
attempt("pathname", lambda: connect({str(path)!r}))
def bind_outside():
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind({str(layout["outside"] / "own.sock")!r})
attempt("bind_pathname_outside", bind_outside)
"""
        result = await probe(code, work, policy(work))
        # Creating a socket file is a file access (make_sock): refused outside the policy.
        assert result == {"abstract": "EPERM", "pathname": "ok", "bind_pathname_outside": "EACCES"}
        pathname.setblocking(False)
        accepted, _ = pathname.accept()  # it really arrived
        accepted.close()
        abstract.setblocking(False)
        with pytest.raises(BlockingIOError):
            abstract.accept()


async def test_tcp_connect_only_to_listed_ports_and_no_bind(layout: dict[str, Path]) -> None:
    """A listed port works, another is refused before any packet leaves, bind is refused.
    UDP is not mediated by Landlock: a datagram still arrives (pinned, docs/security.md).
    """
    work = layout["work"]
    with (
        socket.create_server(("127.0.0.1", 0)) as allowed,
        socket.create_server(("127.0.0.1", 0)) as other,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
    ):
        udp.bind(("127.0.0.1", 0))
        ports = allowed.getsockname()[1], other.getsockname()[1], udp.getsockname()[1]
        code = f"""
ALLOWED, OTHER, UDP = {ports}
attempt("connect_listed", lambda: socket.create_connection(("127.0.0.1", ALLOWED)).close())
attempt("connect_other", lambda: socket.create_connection(("127.0.0.1", OTHER)).close())
attempt("bind", lambda: socket.create_server(("127.0.0.1", 0)).close())
def datagram():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        sender.sendto(b"x", ("127.0.0.1", UDP))
attempt("udp", datagram)
"""
        result = await probe(code, work, policy(work, connect_ports=(ports[0],)))
        assert result == {
            "connect_listed": "ok",
            "connect_other": "EACCES",
            "bind": "EACCES",
            "udp": "ok",
        }
        for server in (allowed, other):
            server.setblocking(False)
        allowed.accept()[0].close()
        with pytest.raises(BlockingIOError):
            other.accept()  # never reached
        udp.settimeout(5)
        assert udp.recv(16) == b"x"
        free = await probe(code, work, policy(work, restrict_tcp=False))
        assert free["connect_other"] == "ok"
        assert free["bind"] == "ok"


async def test_a_missing_policy_path_is_skipped(layout: dict[str, Path]) -> None:
    work = layout["work"]
    missing = str(layout["outside"] / "not-there")
    confined = Confinement(
        mode="required",
        read=(*system_read_paths(), *python_paths(), missing),
        write=(str(work), missing + "-either"),
    )
    assert missing in confined.effective().missing
    code = f"attempt('read_outside', lambda: read({str(layout['secret'])!r}))"
    assert await probe(code, work, confined) == {"read_outside": "EACCES"}


@pytest.mark.parametrize("with_guard", [True, False], ids=["guard", "direct"])
async def test_a_program_outside_the_policy_cannot_start(
    layout: dict[str, Path], with_guard: bool
) -> None:
    """Exec is a read+execute access like any other: refused, the spawn fails as
    ``failed to start the program`` with EACCES; a missing one is ENOENT as ever."""
    work = layout["work"]
    confined = Confinement(mode="required", read=python_paths(), write=(str(work),))
    spec = SpawnSpec(argv=("/bin/true",), cwd=str(work), confinement=confined)
    for argv, code in ((("/bin/true",), errno.EACCES), ((str(work / "nope"),), errno.ENOENT)):
        spec = spec.model_copy(update={"argv": argv, "host_death_guard": with_guard})
        with pytest.raises(SpawnError) as raised:
            await spawn(spec)
        assert type(raised.value) is SpawnError
        assert raised.value.errno == code


async def test_a_refused_ruleset_starts_nothing(
    layout: dict[str, Path], guard_mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed where the policy is applied (the guard server's child, a per-spawn
    guard, the portable guard, the trampoline): a ruleset the kernel refuses (here one
    naming a right no kernel knows, as on a kernel older than the host believed) raises
    ConfinementUnavailableError and the product never runs, even in ``auto`` mode."""
    work = layout["work"]
    real = confinement.kernel_policy

    def unknown_right(conf: Confinement, abi: int) -> tuple[Any, ...]:
        fs, net, scoped, rules, ports = real(conf, abi)
        return (fs | 1 << 62, net, scoped, rules, ports)

    monkeypatch.setattr(confinement, "kernel_policy", unknown_right)
    marker = work / "ran"
    spec = SpawnSpec(
        argv=("/bin/sh", "-c", f"touch {marker}"),
        cwd=str(work),
        confinement=Confinement(mode="auto", read=system_read_paths(), write=(str(work),)),
        host_death_guard=guard_mode != "direct",
    )
    with pytest.raises(ConfinementUnavailableError) as raised:
        await spawn(spec)
    assert raised.value.errno == errno.EINVAL
    assert str(raised.value) == "failed to confine the program: the kernel refused the ruleset"
    assert not marker.exists()


async def test_a_file_in_the_policy_gets_file_rights_only(layout: dict[str, Path]) -> None:
    """A write rule on a regular file (not a directory) is accepted by the kernel with
    the file rights (a directory right on a file would be EINVAL): that file is writable,
    its siblings are not, and nothing can be created next to it."""
    work, outside = layout["work"], layout["outside"]
    allowed = outside / "allowed.log"
    allowed.write_text("")
    confined = Confinement(
        mode="required", read=(*system_read_paths(), *python_paths()), write=(str(allowed),)
    )
    code = f"""
attempt("append_allowed", lambda: open({str(allowed)!r}, "a").write("x"))
attempt("read_sibling", lambda: read({str(layout["secret"])!r}))
attempt("create_sibling", lambda: open({str(outside / "new")!r}, "w").close())
"""
    result = await probe(code, work, confined)
    assert result == {"append_allowed": "ok", "read_sibling": "EACCES", "create_sibling": "EACCES"}
    assert allowed.read_text() == "x"


async def test_pseudo_terminals_only_when_asked(layout: dict[str, Path]) -> None:
    """Opening a new pty (``/dev/ptmx``, then its ``/dev/pts`` side, with terminal
    ioctls) is refused by default and works with ``pseudo_terminals=True``."""
    work = layout["work"]
    code = """
import termios
def open_pty():
    leader, follower = os.openpty()
    termios.tcgetattr(follower)
    os.close(leader)
    os.close(follower)
attempt("openpty", open_pty)
"""
    assert await probe(code, work, policy(work)) == {"openpty": "EACCES"}
    with_ptys = policy(work, pseudo_terminals=True)
    assert "/dev/pts" in with_ptys.effective().devices
    assert await probe(code, work, with_ptys) == {"openpty": "ok"}


async def test_a_bare_program_name_is_found_on_path(
    guard_mode: str, layout: dict[str, Path]
) -> None:
    """Nothing the exec needs is loaded after the ruleset applies: a bare name is looked
    up on the child's PATH (by ``os.execvp``, which imports on first use) in every
    spawn path, past PATH entries the policy does not allow."""
    work = layout["work"]
    spec = SpawnSpec(
        argv=("cat", "inside.txt"),
        cwd=str(work),
        stdin="devnull",
        # Not the Python install the guards run from: nothing of it is readable.
        confinement=Confinement(mode="required", read=system_read_paths(), write=(str(work),)),
        host_death_guard=guard_mode != "direct",
        env={"PATH": f"{layout['outside']}:/usr/bin:/bin"},
    )
    (work / "inside.txt").write_text("found\n")
    async with await spawn(spec) as proc:
        assert proc.stdout is not None
        out = b""
        async for chunk in proc.stdout:
            out += chunk
        assert await proc.wait() == ExitFacts(exit_code=0, signal=None)
    assert out == b"found\n"


async def test_a_mount_namespace_does_not_escape(layout: dict[str, Path]) -> None:
    """A confined process may enter new user and mount namespaces, where it holds every
    capability, but Landlock refuses it any mount: the outside directory cannot be bound
    into the cwd. The unconfined control does exactly that."""
    work = layout["work"]
    (work / "mnt").mkdir()
    code = f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def call(result):
    if result != 0:
        raise OSError(ctypes.get_errno(), "failed")
CLONE_NEWUSER, CLONE_NEWNS, MS_BIND = 0x10000000, 0x00020000, 4096
SOURCE, TARGET = {str(layout["outside"]).encode()!r}, {str(work / "mnt").encode()!r}
attempt("unshare", lambda: call(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS)))
attempt("bind_mount", lambda: call(libc.mount(SOURCE, TARGET, None, MS_BIND, None)))
attempt("read_through_mount", lambda: read(TARGET + b"/secret.txt"))
"""
    free = await probe(code, work, None)  # its mount lives and dies in its own namespace
    if free["unshare"] != "ok":
        pytest.skip(f"unprivileged user namespaces are not available here ({free['unshare']})")
    assert free == {"unshare": "ok", "bind_mount": "ok", "read_through_mount": "ok"}
    result = await probe(code, work, policy(work))
    assert result == {"unshare": "ok", "bind_mount": "EPERM", "read_through_mount": "ENOENT"}
