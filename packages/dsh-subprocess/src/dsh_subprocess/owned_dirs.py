"""Directories a host owns on disk, collected by a later host when their owner was killed.

A host removes its own directory when it ends; a ``kill -9`` (or the OOM killer) stops it
first, and the guard that ends its product trees cannot know the directory. So the
directory carries its owner (:data:`OWNER_FILE`: the pid and the start time of the
process that made it), and the next host that makes one with the same prefix in the same
place removes those whose owner is gone (:func:`collect_orphaned_dirs`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile

import psutil

__all__ = ["OWNER_FILE", "collect_orphaned_dirs", "make_owned_dir"]

OWNER_FILE = "dsh-owner"
"""The file in an owned directory naming its owner: ``<pid> <start time>``."""

_START_TOLERANCE_SECONDS = 0.01  # the start time is read back exactly; a reused pid is not


def _started(pid: int) -> float:
    return psutil.Process(pid).create_time()


def make_owned_dir(prefix: str, base: str) -> str:
    """A new private directory under ``base`` (``mkdtemp``: random name, mode 0700).

    It is marked as this process's before it is returned, so a later
    :func:`collect_orphaned_dirs` removes it only once this process is gone.
    """
    path = tempfile.mkdtemp(prefix=prefix, dir=base)
    try:
        marker = os.path.join(path, OWNER_FILE)
        pending = marker + ".new"
        with open(pending, "w", encoding="ascii") as out:
            out.write(f"{os.getpid()} {_started(os.getpid())!r}\n")
        os.replace(pending, marker)  # whole or absent: a half-written marker never reads
    except BaseException:
        # Ctrl-C while marking: unmarked, no later host would ever remove it.
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path


def _owner_gone(path: str) -> bool:
    """Whether ``path``'s marker names a process that no longer runs (unmarked: no)."""
    try:
        with open(os.path.join(path, OWNER_FILE), encoding="ascii") as marker:
            pid_text, started_text = marker.read().split()
        pid, started = int(pid_text), float(started_text)
    except (OSError, ValueError):
        return False  # not ours, or its owner is still writing the marker
    try:
        return abs(_started(pid) - started) > _START_TOLERANCE_SECONDS  # a reused pid
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def collect_orphaned_dirs(prefix: str, base: str) -> list[str]:
    """Remove the directories ``base/<prefix>*`` of this user whose owner is gone.

    Only a directory (never a symlink) owned by this user and marked by
    :func:`make_owned_dir` is considered; one whose marker names a process that still
    runs is left alone. Errors while removing are ignored (the next call tries again).

    Returns:
        The paths removed.
    """
    removed: list[str] = []
    try:
        names = os.listdir(base)
    except OSError:
        return removed
    uid = os.getuid()
    for name in names:
        if not name.startswith(prefix):
            continue
        path = os.path.join(base, name)
        with contextlib.suppress(OSError):
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
                continue
            if _owner_gone(path):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed
