"""Spawn failures: typed, fixed safe messages, the OSError on __cause__, nothing left running."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from dsh_subprocess import (
    InvalidCwdError,
    SpawnError,
    SpawnSpec,
    probe_cwd,
    spawn,
)
from dsh_subprocess.testing import host_descendants

pytestmark = pytest.mark.anyio

_SECRET_ARG = "argv-value-that-must-not-leak"


def _children() -> set[int]:
    # The guard server is the host's helper, started by the first guarded spawn; it is
    # not something the failed spawn left running (host_descendants leaves it out).
    return {p.pid for p in host_descendants()}


async def test_missing_program(tmp_path: Path, guarded: bool) -> None:
    before = _children()
    spec = SpawnSpec(
        argv=("dsh-no-such-program-xyz", _SECRET_ARG),
        cwd=str(tmp_path),
        env={"SOME_VALUE": _SECRET_ARG},
        host_death_guard=guarded,
    )
    with pytest.raises(SpawnError) as info:
        await spawn(spec)
    assert str(info.value) == "failed to start the program"
    assert isinstance(info.value.__cause__, FileNotFoundError)
    assert info.value.errno == 2
    assert _SECRET_ARG not in str(info.value)
    assert _children() <= before


async def test_program_that_is_not_executable(tmp_path: Path, guarded: bool) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    with pytest.raises(SpawnError) as info:
        await spawn(SpawnSpec(argv=(str(script),), cwd=str(tmp_path), host_death_guard=guarded))
    assert isinstance(info.value.__cause__, PermissionError)


async def test_relative_cwd(guarded: bool) -> None:
    with pytest.raises(InvalidCwdError) as info:
        await spawn(SpawnSpec(argv=("true",), cwd="relative/dir", host_death_guard=guarded))
    assert info.value.problem == "relative"
    assert str(info.value) == "invalid cwd: the working directory must be an absolute path"


async def test_missing_cwd(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(InvalidCwdError) as info:
        await spawn(SpawnSpec(argv=("true",), cwd=str(missing)))
    assert info.value.problem == "missing"
    assert str(missing) not in str(info.value)
    assert info.value.__cause__ is None


async def test_file_as_cwd(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(InvalidCwdError) as info:
        await spawn(SpawnSpec(argv=("true",), cwd=str(a_file)))
    assert info.value.problem == "not_a_directory"
    with pytest.raises(InvalidCwdError) as info:
        await spawn(SpawnSpec(argv=("true",), cwd=str(a_file / "below")))
    assert info.value.problem == "not_a_directory"


async def test_mode_600_cwd_is_not_enterable(tmp_path: Path) -> None:
    # Refused even when the tests run as root, whom access(X_OK) would let through:
    # a directory without any search bit is never a product's working directory.
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o600)
    try:
        with pytest.raises(InvalidCwdError) as info:
            await spawn(SpawnSpec(argv=("true",), cwd=str(closed)))
        assert info.value.problem == "not_enterable"
        assert isinstance(info.value, SpawnError)
    finally:
        closed.chmod(0o700)


async def test_no_cwd_error_is_a_vague_enoent(tmp_path: Path) -> None:
    # The probe runs before anything starts, so the guard never sees a bad cwd either.
    before = _children()
    with pytest.raises(InvalidCwdError):
        await spawn(SpawnSpec(argv=(sys.executable, "-c", ""), cwd=str(tmp_path / "gone")))
    assert _children() <= before


def test_probe_cwd_names_each_problem_without_raising(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("")
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o600)
    try:
        assert probe_cwd(tmp_path) is None
        assert probe_cwd(str(tmp_path) + "/.") is None  # not normalised, still a directory
        assert probe_cwd("relative/dir") == "relative"
        assert probe_cwd(tmp_path / "missing") == "missing"
        assert probe_cwd(str(tmp_path) + "/a\0b") == "missing"  # no such path can exist
        assert probe_cwd(a_file) == "not_a_directory"
        assert probe_cwd(a_file / "below") == "not_a_directory"
        # Refused even as root (these tests may run as root): no execute bit at all.
        assert probe_cwd(closed) == "not_enterable"
    finally:
        closed.chmod(0o700)
