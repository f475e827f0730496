"""SpawnCounter: the evidence the Loader tier relies on must itself be able to fail."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from dsh_profiles.spawnguard import SpawnAttemptError, SpawnCounter


def test_counts_a_real_spawn_and_restores_the_originals() -> None:
    original = subprocess.Popen.__init__  # noqa: TID251 (identity check only)
    with SpawnCounter() as counter:
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert counter.count == 1
    assert counter.attempts[0][0] == "subprocess.Popen"
    assert subprocess.Popen.__init__ is original  # noqa: TID251 (identity check only)


def test_forbidding_counter_refuses_before_anything_starts() -> None:
    with SpawnCounter(forbid=True) as counter, pytest.raises(SpawnAttemptError):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert counter.count == 1


def test_os_level_entry_points_are_counted() -> None:
    with SpawnCounter(forbid=True) as counter:
        with pytest.raises(SpawnAttemptError):
            os.system("true")
        with pytest.raises(SpawnAttemptError):
            os.posix_spawn(sys.executable, [sys.executable, "-c", "pass"], os.environ)
    assert [entry for entry, _ in counter.attempts] == ["os.system", "os.posix_spawn"]


def test_counters_nest_and_the_outer_one_still_sees_attempts() -> None:
    with SpawnCounter() as outer:
        with SpawnCounter() as inner:
            subprocess.run([sys.executable, "-c", "pass"], check=True)
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert (inner.count, outer.count) == (1, 2)


def test_an_os_entry_point_reached_through_popen_is_the_same_attempt() -> None:
    # close_fds=False makes Popen spawn through os.posix_spawn on every supported version
    # (3.13 does so by default); a direct os.posix_spawn is still its own attempt.
    with SpawnCounter() as counter:
        subprocess.run([sys.executable, "-c", "pass"], check=True, close_fds=False)
        pid = os.posix_spawn(sys.executable, [sys.executable, "-c", "pass"], os.environ)
    assert os.waitpid(pid, 0)[1] == 0
    assert [entry for entry, _ in counter.attempts] == ["subprocess.Popen", "os.posix_spawn"]
