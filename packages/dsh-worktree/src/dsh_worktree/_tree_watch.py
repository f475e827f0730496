"""Whether anything under a directory tree changed since a point in time (Linux inotify).

A warm pool asks this after a run's whole process tree exited, to skip a ``git status``
over a large worktree when nothing at all changed. A false positive only costs that slow
path; a false negative would lose a user's work. So every event on a watched directory
counts (including the kernel's own ``IN_Q_OVERFLOW`` and ``IN_IGNORED``), and when a
complete watch cannot be had :meth:`TreeWatch.arm` gives ``None`` rather than a partial one.

What it vouches for: once :meth:`TreeWatch.arm` returned, a change made by any process on
this machine through a path below the root raises an event — contents (``write``,
``truncate``, writes through a shared mapping, see below), metadata (mode, owner, times,
xattrs), names (create, delete, rename in or out, link, symlink) and watched directories
themselves removed or moved. A change made through another mount of the same filesystem
(a bind mount) is reported too: inotify marks inodes, not paths (checked on Linux 6.18).
The kernel queues an event during the syscall that made the change, so :meth:`changed`
asked after the writer's syscall returned sees it; no waiting is needed.

Limits:

* Linux only (inotify); elsewhere :meth:`TreeWatch.arm` gives ``None``.
* Symlinks are not followed: git tracks a symlink, not what it points to.
* Only directories are watched. A directory watch reports operations made through a
  name in that directory, so a hard link made *outside* the tree to a file inside it,
  and writes through such a link, raise no event here (the kernel sends the link-count
  ``IN_ATTRIB`` only to watches on the file's own inode).
* A write through a shared ``mmap`` raises no event of its own; it is seen as
  ``IN_CLOSE_WRITE`` when the last reference to the writable open file goes — the
  last descriptor closed *and* the mapping unmapped (at the latest when the process
  exits). Ask after the process tree exited, not while it runs.
* Changes made by another machine (network or FUSE filesystems) are not seen.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import sys
from typing import Final

__all__ = ["TreeWatch"]

_log = logging.getLogger("dsh_worktree")

_IN_MODIFY: Final = 0x00000002
_IN_ATTRIB: Final = 0x00000004
_IN_CLOSE_WRITE: Final = 0x00000008
_IN_MOVED_FROM: Final = 0x00000040
_IN_MOVED_TO: Final = 0x00000080
_IN_CREATE: Final = 0x00000100
_IN_DELETE: Final = 0x00000200
_IN_DELETE_SELF: Final = 0x00000400
_IN_MOVE_SELF: Final = 0x00000800
_IN_ONLYDIR: Final = 0x01000000
_IN_DONT_FOLLOW: Final = 0x02000000

# No IN_ACCESS / IN_OPEN / IN_CLOSE_NOWRITE: reading must not count as a change.
# IN_CLOSE_WRITE is what catches a write through mmap, which raises no IN_MODIFY: the
# writer had to open the file writable, and the release of that open file (last fd
# closed and mapping gone) raises IN_CLOSE_WRITE.
_MASK: Final = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
)

# Bounded; far above one event with the longest name (16 + NAME_MAX + 1 bytes).
_READ_SIZE: Final = 64 * 1024


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.inotify_init1.argtypes = [ctypes.c_int]
    libc.inotify_init1.restype = ctypes.c_int
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    libc.inotify_add_watch.restype = ctypes.c_int
    return libc


def _errno_error(call: str, path: str | None = None) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{call}: {os.strerror(code)}", path)


def _inotify_init1(flags: int) -> int:
    fd = int(_libc().inotify_init1(flags))
    if fd < 0:
        raise _errno_error("inotify_init1")
    return fd


def _inotify_add_watch(fd: int, path: str, mask: int) -> int:
    wd = int(_libc().inotify_add_watch(fd, os.fsencode(path), mask))
    if wd < 0:
        raise _errno_error("inotify_add_watch", path)
    return wd


def _raise(error: OSError) -> None:
    raise error


def _watch_tree(fd: int, root: str) -> None:
    # Each directory is watched before os.walk lists it, so an entry created during the
    # walk is either listed or reported as an event: nothing falls between the two.
    # The root may itself be a symlink (the caller named it); nothing below is followed.
    _inotify_add_watch(fd, root, _MASK)
    for dirpath, dirnames, _files in os.walk(root, followlinks=False, onerror=_raise):
        for name in dirnames:
            path = os.path.join(dirpath, name)
            # A symlink to a directory is listed among dirnames but not descended; the
            # watch on dirpath already reports changes to the link itself.
            if not os.path.islink(path):
                _inotify_add_watch(fd, path, _MASK | _IN_DONT_FOLLOW)


class TreeWatch:
    """Whether anything under a directory tree changed since :meth:`arm` (Linux inotify)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._changed = False

    @classmethod
    def arm(cls, root: str) -> TreeWatch | None:
        """Watch ``root`` and every directory below it (symlinks not followed).

        ``None`` when a watch cannot be had: not Linux, inotify missing, a limit reached
        (max_user_instances / max_user_watches: EMFILE/ENOSPC/ENOMEM), a directory that
        vanished or could not be read while walking — logged at DEBUG on the
        ``dsh_worktree`` logger, never raised. A partial watch is never returned (close
        what was opened): it could not vouch for the directories it missed.
        """
        if sys.platform != "linux":
            _log.debug("tree watch unavailable for %s: not Linux (%s)", root, sys.platform)
            return None
        try:
            fd = _inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError) as exc:  # AttributeError: libc without inotify
            _log.debug("tree watch unavailable for %s: %s", root, exc)
            return None
        try:
            _watch_tree(fd, root)
        except OSError as exc:
            os.close(fd)
            _log.debug("tree watch unavailable for %s: %s", root, exc)
            return None
        except BaseException:
            os.close(fd)
            raise
        return cls(fd)

    def changed(self) -> bool:
        """Whether any event arrived since arming (non-blocking; sticky once True).

        Any byte read from the inotify fd counts, including IN_Q_OVERFLOW and IN_IGNORED
        (a watched directory removed) — the watch is then no longer complete. A closed
        watch answers True (it can no longer vouch for anything).
        """
        if self._changed or self._fd < 0:
            return True
        try:
            # One read settles it: any byte means changed, and the answer is sticky, so
            # the rest of the queue need not be drained.
            os.read(self._fd, _READ_SIZE)
        except BlockingIOError:
            return False
        except OSError as exc:
            _log.debug("tree watch read failed, assuming changed: %s", exc)
        self._changed = True
        return True

    def close(self) -> None:
        """Release the inotify fd (idempotent); its watches go with it."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
