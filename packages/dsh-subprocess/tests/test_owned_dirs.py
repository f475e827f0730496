"""Owned directories: one left by a SIGKILLed owner is collected, nothing else is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from dsh_subprocess import collect_orphaned_dirs, make_owned_dir, owned_dirs
from dsh_subprocess.owned_dirs import OWNER_FILE

_MAKE_AND_HOLD = (
    "import sys, time\n"
    "from dsh_subprocess import make_owned_dir\n"
    "print(make_owned_dir('own-', sys.argv[1]), flush=True)\n"
    "time.sleep(600)\n"
)


def _made_by_a_killed_process(base: Path) -> Path:
    proc = subprocess.Popen(  # noqa: TID251 - a host to kill -9, as a user's terminal would
        [sys.executable, "-c", _MAKE_AND_HOLD, str(base)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        path = Path(proc.stdout.readline().strip())
        assert path.is_dir()
        assert collect_orphaned_dirs("own-", str(base)) == []  # its owner still runs
        assert path.is_dir()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    return path


def test_a_directory_of_a_killed_owner_is_collected_and_a_live_ones_kept(tmp_path: Path) -> None:
    orphan = _made_by_a_killed_process(tmp_path)
    (orphan / "session").mkdir()  # what the owner put there goes with it
    mine = Path(make_owned_dir("own-", str(tmp_path)))
    assert mine.name.startswith("own-")
    assert oct(mine.stat().st_mode & 0o777) == oct(0o700)
    assert collect_orphaned_dirs("own-", str(tmp_path)) == [str(orphan)]
    assert not orphan.exists()
    assert mine.is_dir()


def test_a_marker_naming_a_reused_pid_counts_as_gone(tmp_path: Path) -> None:
    # The pid runs (this process), but it is not the process that made the directory.
    path = Path(make_owned_dir("own-", str(tmp_path)))
    started = psutil.Process().create_time()
    (path / OWNER_FILE).write_text(f"{os.getpid()} {started - 5.0!r}\n", encoding="ascii")
    assert collect_orphaned_dirs("own-", str(tmp_path)) == [str(path)]


def test_unmarked_foreign_and_other_entries_are_left_alone(tmp_path: Path) -> None:
    # Unmarked: another program's, or one whose owner has not written its marker yet.
    unmarked = tmp_path / "own-unmarked"
    unmarked.mkdir()
    garbled = tmp_path / "own-garbled"
    garbled.mkdir()
    (garbled / OWNER_FILE).write_text("not a marker\n", encoding="ascii")
    a_file = tmp_path / "own-file"
    a_file.write_text("x", encoding="ascii")
    other_prefix = _made_by_a_killed_process(tmp_path).rename(tmp_path / "else-1")
    orphan = _made_by_a_killed_process(tmp_path)
    link = tmp_path / "own-link"
    link.symlink_to(orphan)
    assert collect_orphaned_dirs("own-", str(tmp_path)) == [str(orphan)]
    assert unmarked.is_dir()
    assert garbled.is_dir()
    assert a_file.is_file()
    assert link.is_symlink()  # the link itself stays; what it pointed at was the orphan
    assert other_prefix.is_dir()
    assert collect_orphaned_dirs("own-", str(tmp_path / "missing")) == []


def test_a_directory_interrupted_while_being_marked_is_not_left_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C between the directory and its marker: an unmarked directory would never be
    collected, so it goes at once."""

    def interrupted(pid: int) -> float:
        raise KeyboardInterrupt

    monkeypatch.setattr(owned_dirs, "_started", interrupted)
    with pytest.raises(KeyboardInterrupt):
        make_owned_dir("dsh-x-", str(tmp_path))
    assert list(tmp_path.iterdir()) == []
