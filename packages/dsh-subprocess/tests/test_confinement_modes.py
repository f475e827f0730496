"""The confinement policy as data, and the modes where the kernel offers no Landlock.

A kernel without Landlock is simulated by making :func:`landlock_abi` answer 0; these
cases run on every system.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import anyio
import pytest
from dsh_subprocess import (
    Confinement,
    ConfinementUnavailableError,
    SpawnError,
    SpawnSpec,
    _landlock,
    confinement,
    guard_server_pid,
    spawn,
    system_read_paths,
)
from pydantic import ValidationError


@pytest.fixture
def no_landlock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(confinement, "landlock_abi", lambda: 0)
    monkeypatch.setattr(confinement, "_warned_unavailable", False)


async def run_cat(path: Path, cwd: Path, conf: Confinement, guarded: bool = True) -> bytes:
    spec = SpawnSpec(
        argv=("cat", str(path)),
        cwd=str(cwd),
        stdin="devnull",
        confinement=conf,
        host_death_guard=guarded,
    )
    out = b""
    async with await spawn(spec) as proc:
        assert not proc.confined  # every case here runs unconfined
        assert proc.stdout is not None
        while True:
            try:
                out += await proc.stdout.receive()
            except anyio.EndOfStream:
                break
        assert (await proc.wait()).exit_code == 0
    return out


@pytest.mark.anyio
@pytest.mark.usefixtures("no_landlock")
async def test_required_without_landlock_starts_nothing(tmp_path: Path, guard_mode: str) -> None:
    marker = tmp_path / "ran"
    spec = SpawnSpec(
        argv=("/bin/sh", "-c", f"touch {marker}"),
        cwd=str(tmp_path),
        confinement=Confinement(mode="required", read=system_read_paths()),
        host_death_guard=guard_mode != "direct",
    )
    with pytest.raises(ConfinementUnavailableError) as raised:
        await spawn(spec)
    assert str(raised.value) == "confinement required: the kernel offers no Landlock here"
    assert isinstance(raised.value, SpawnError)
    assert raised.value.errno is None
    assert guard_server_pid() is None  # not even the guard server was started
    assert not marker.exists()


@pytest.mark.anyio
@pytest.mark.usefixtures("no_landlock")
async def test_auto_without_landlock_runs_unconfined_and_warns_once(
    tmp_path: Path, guard_mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"outside the policy\n")
    work = tmp_path / "work"
    work.mkdir()
    conf = Confinement(read=system_read_paths(), write=(str(work),))
    with caplog.at_level(logging.WARNING, logger="dsh_subprocess"):
        for _ in range(2):
            assert await run_cat(secret, work, conf, guard_mode != "direct") == secret.read_bytes()
    warnings = [r for r in caplog.records if r.name == "dsh_subprocess.confinement"]
    assert len(warnings) == 1
    assert warnings[0].levelno == logging.WARNING
    assert "products run unconfined" in warnings[0].getMessage()


@pytest.mark.anyio
@pytest.mark.usefixtures("no_landlock")
async def test_off_runs_unconfined_silently(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"outside the policy\n")
    with caplog.at_level(logging.DEBUG, logger="dsh_subprocess"):
        out = await run_cat(secret, tmp_path, Confinement(mode="off"))
    assert out == secret.read_bytes()
    assert [r for r in caplog.records if r.name == "dsh_subprocess.confinement"] == []


@pytest.mark.anyio
@pytest.mark.skipif(confinement.landlock_abi() < 1, reason="needs Landlock")
async def test_off_is_unconfined_where_landlock_exists(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"outside the policy\n")
    work = tmp_path / "work"
    work.mkdir()
    out = await run_cat(secret, work, Confinement(mode="off", read=system_read_paths()))
    assert out == secret.read_bytes()


def test_the_spec_is_unconfined_by_default() -> None:
    assert SpawnSpec(argv=("x",), cwd="/").confinement is None


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("read", ("relative/dir",), "expected an absolute path"),
        ("write", ("/ok", "also/relative"), "expected an absolute path"),
        ("read", ("/a\0b",), "must not contain NUL"),
        ("read", "/usr", "not a single path"),
        ("connect_ports", (0,), "from 1 to 65535"),
        ("connect_ports", (70000,), "from 1 to 65535"),
        ("bind_ports", (-1,), "from 0 to 65535"),
        ("mode", "on", "'auto', 'required' or 'off'"),
        ("surprise", True, "Extra inputs are not permitted"),
    ],
)
def test_invalid_policies_name_the_field(field: str, value: object, message: str) -> None:
    with pytest.raises(ValidationError) as raised:
        Confinement.model_validate({field: value})
    errors = raised.value.errors()
    assert errors[0]["loc"][0] == field
    assert message in str(raised.value)


def test_paths_are_normalised_and_deduplicated() -> None:
    conf = Confinement(read=("/usr/", Path("/usr"), "/a/../etc"), connect_ports=(443, 443))
    assert conf.read == ("/usr", "/etc")
    assert conf.connect_ports == (443,)
    with pytest.raises(ValidationError):
        conf.mode = "off"  # type: ignore[misc]  # frozen


def test_system_read_paths_leave_home_and_tmp_out() -> None:
    paths = system_read_paths()
    assert {"/usr", "/etc", "/proc"} <= set(paths)
    assert all(p.startswith("/") for p in paths)
    resolv = os.path.realpath("/etc/resolv.conf")
    assert any(resolv == p or resolv.startswith(p + "/") for p in paths)  # DNS works
    directories = [p for p in paths if p != resolv]  # that one file may lie anywhere
    for private in ("/home", "/root", "/tmp", "/var", "/dev"):
        assert not any(p == private or p.startswith(private + "/") for p in directories)


@pytest.mark.parametrize(
    ("abi", "rights", "tcp", "scoped"),
    [
        (0, set(), False, ()),
        (1, {"read_file", "make_block"}, False, ()),
        (3, {"refer", "truncate"}, False, ()),
        (4, {"truncate"}, True, ()),
        (6, {"ioctl_dev"}, True, ("abstract_unix_socket", "signal")),
        (7, {"ioctl_dev"}, True, ("abstract_unix_socket", "signal")),
    ],
)
def test_the_effective_policy_follows_the_abi(
    abi: int, rights: set[str], tcp: bool, scoped: tuple[str, ...]
) -> None:
    conf = Confinement(read=("/usr",), write=("/nonexistent-dsh-path",), connect_ports=(443,))
    eff = conf.effective(abi)
    assert eff.abi == abi
    assert eff.enforced == (abi > 0)
    assert rights <= set(eff.fs_rights)
    if abi < 2:
        assert "refer" not in eff.fs_rights
    if abi < 5:
        assert "ioctl_dev" not in eff.fs_rights
    assert eff.tcp == tcp
    assert eff.connect_ports == ((443,) if tcp else ())
    assert eff.scoped == scoped
    assert eff.missing == ("/nonexistent-dsh-path",)
    assert {"udp", "pathname_unix_socket"} <= set(eff.not_enforced)
    assert ("tcp" in eff.not_enforced) == (not tcp)
    assert ("files" in eff.not_enforced) == (abi == 0)
    assert "/dev/null" in eff.devices


def test_off_and_unfiltered_tcp_in_the_effective_policy() -> None:
    off = Confinement(mode="off").effective(7)
    assert not off.enforced
    assert off.fs_rights == ()
    assert not off.tcp
    open_tcp = Confinement(restrict_tcp=False, connect_ports=(1,)).effective(7)
    assert open_tcp.enforced
    assert not open_tcp.tcp
    assert "tcp" in open_tcp.not_enforced


def test_the_kernel_policy_names_only_what_the_abi_knows() -> None:
    conf = Confinement(read=("/usr",), write=("/w",), connect_ports=(8080,), bind_ports=(0,))
    fs, net, scoped, rules, ports = confinement.kernel_policy(conf, 1)
    assert fs == _landlock.handled_fs(1)
    assert not fs & _landlock.FS_REFER
    assert net == 0
    assert scoped == 0
    assert ports == []
    fs, net, scoped, rules, ports = confinement.kernel_policy(conf, 7)
    assert net == _landlock.NET_BIND_TCP | _landlock.NET_CONNECT_TCP
    assert scoped == _landlock.SCOPE_SIGNAL | _landlock.SCOPE_ABSTRACT_UNIX_SOCKET
    assert (b"/usr", _landlock.READ) in rules
    assert (b"/w", _landlock.WRITE) in rules
    assert not _landlock.WRITE & (_landlock.FS_MAKE_BLOCK | _landlock.FS_MAKE_CHAR)
    assert ports == [(8080, _landlock.NET_CONNECT_TCP), (0, _landlock.NET_BIND_TCP)]
    unfiltered = conf.model_copy(update={"restrict_tcp": False})
    assert confinement.kernel_policy(unfiltered, 7)[1] == 0


def test_landlock_abi_is_zero_off_linux_and_an_int_here() -> None:
    abi = confinement.landlock_abi()
    assert isinstance(abi, int)
    assert abi >= 0
    if sys.platform != "linux":
        assert abi == 0


@pytest.mark.anyio
@pytest.mark.skipif(confinement.landlock_abi() < 4, reason="needs Landlock ABI 4")
async def test_an_older_abi_is_named_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """On an ABI 4 kernel (simulated here: the policy is built for ABI 4) signals and
    abstract sockets are not scoped: one warning says so, and the spawn goes ahead."""
    monkeypatch.setattr(confinement, "landlock_abi", lambda: 4)
    monkeypatch.setattr(confinement, "_warned_partial", False)
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"inside the policy\n")
    conf = Confinement(mode="required", read=(*system_read_paths(), str(tmp_path)))
    with caplog.at_level(logging.WARNING, logger="dsh_subprocess"):
        for _ in range(2):
            spec = SpawnSpec(argv=("cat", str(secret)), cwd=str(tmp_path), confinement=conf)
            async with await spawn(spec) as proc:
                assert proc.confined
                assert proc.stdout is not None
                assert await proc.stdout.receive() == secret.read_bytes()
                await proc.wait()
    warnings = [r.getMessage() for r in caplog.records if r.name == "dsh_subprocess.confinement"]
    assert warnings == [
        "confinement: Landlock ABI 4 here does not enforce: "
        "pathname_unix_socket, abstract_unix_socket, signal"
    ]
