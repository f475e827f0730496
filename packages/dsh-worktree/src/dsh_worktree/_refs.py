"""A few refs read straight from git's files, for the warm pool's hot path.

A claim checks that the repository's ``HEAD`` is still the pool's base, and a collection
checks that the run left its branch where it was and then detaches ``HEAD`` and deletes
the branch, on every delegation; asking git costs a process start each time, which is
most of what a warm claim or an unchanged collection would cost. Git's "files" ref
storage is simple and stable for the common case: ``HEAD``
holds ``ref: refs/heads/<name>`` or a commit id, a branch is a loose file holding its
commit id or a line of ``packed-refs``. Anything else (the reftable format, a symbolic
ref to a symbolic ref, a value that is not a commit id) answers ``None``, and the caller
asks git instead: these readers only ever decide the fast path, never the result.

:func:`detach_and_delete` writes, the way git itself does with the same files: each ref
(and ``packed-refs``) is changed under its ``<name>.lock`` file, created exclusively
(another git process that holds one makes this give up, and git is asked instead),
``HEAD`` replaced by a rename of its lock, the branch's loose file and reflog removed. It
only acts where that is the whole change: a loose branch at the base that
``packed-refs`` does not name.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Final

__all__ = ["branch_commit", "detach_and_delete", "head_commit", "head_target", "worktree_git_dir"]

_OID: Final = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_MAX_PACKED_BYTES: Final = 4 << 20  # a larger packed-refs file is left to git


def _read(path: str, limit: int = 4096) -> str | None:
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError:
        return None
    if len(data) > limit:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _files_backend(common_dir: str) -> bool:
    # A reftable repository keeps a stub HEAD and no loose refs: nothing here applies.
    return not os.path.exists(os.path.join(common_dir, "reftable"))


def worktree_git_dir(toplevel: str) -> str | None:
    """The git directory of the working tree at ``toplevel``: its ``.git`` directory, or
    the one its ``.git`` file names (a linked worktree, a separate git dir)."""
    dot_git = os.path.join(toplevel, ".git")
    if os.path.isdir(dot_git):
        return dot_git
    text = _read(dot_git)
    if text is None or not text.startswith("gitdir: "):
        return None
    named = text.removeprefix("gitdir: ").strip()
    return os.path.normpath(os.path.join(toplevel, named))


def head_target(git_dir: str) -> str | None:
    """The ref ``HEAD`` points at (``refs/heads/<name>``), or ``None`` (detached, unreadable)."""
    text = _read(os.path.join(git_dir, "HEAD"))
    if text is None or not text.startswith("ref: ") or not text.endswith("\n"):
        return None
    target = text[len("ref: ") : -1]
    return target if target.startswith("refs/heads/") and "\n" not in target else None


def branch_commit(common_dir: str, ref: str) -> str | None:
    """The commit id the branch ``ref`` (``refs/heads/<name>``) holds, or ``None``."""
    if not ref.startswith("refs/heads/") or not _files_backend(common_dir):
        return None
    loose = _read(os.path.join(common_dir, *ref.split("/")))
    if loose is not None:
        value = loose.strip()
        return value if _OID.fullmatch(value) else None
    packed = _read(os.path.join(common_dir, "packed-refs"), _MAX_PACKED_BYTES)
    if packed is None:
        return None
    for line in packed.splitlines():
        oid, _, name = line.partition(" ")
        if name == ref and _OID.fullmatch(oid):
            return oid
    return None


def head_commit(git_dir: str, common_dir: str) -> str | None:
    """The commit ``HEAD`` names in the working tree whose git directory is ``git_dir``."""
    if not _files_backend(common_dir):
        return None
    text = _read(os.path.join(git_dir, "HEAD"))
    if text is None:
        return None
    value = text.strip()
    if _OID.fullmatch(value):
        return value
    target = head_target(git_dir)
    return branch_commit(common_dir, target) if target is not None else None


def _lock(path: str) -> int | None:
    try:
        return os.open(path + ".lock", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    except OSError:
        return None  # taken by another git process, or not writable: git decides


def _packed_names(common_dir: str, ref: str) -> bool | None:
    packed = _read(os.path.join(common_dir, "packed-refs"), _MAX_PACKED_BYTES)
    if packed is None:
        return False if not os.path.exists(os.path.join(common_dir, "packed-refs")) else None
    return any(line.partition(" ")[2] == ref for line in packed.splitlines())


def detach_and_delete(git_dir: str, common_dir: str, ref: str, base: str) -> bool:
    """Detach ``HEAD`` (of the working tree whose git directory is ``git_dir``) at
    ``base`` and delete the branch ``ref``, which ``HEAD`` names and which holds ``base``.

    ``False`` with nothing changed when that is not exactly the state (or it is not
    stored as loose files, or a lock is taken): the caller asks git then.
    """
    if not _OID.fullmatch(base) or not ref.startswith("refs/heads/"):
        return False
    if not _files_backend(common_dir):
        return False
    head = os.path.join(git_dir, "HEAD")
    loose = os.path.join(common_dir, *ref.split("/"))
    head_fd = _lock(head)
    if head_fd is None:
        return False
    head_moved = False
    try:
        ref_fd = _lock(loose)
        if ref_fd is None:
            return False
        # packed-refs is locked too, as git does for a deletion: a concurrent pack-refs
        # must not write this branch into it between the check below and the unlink.
        packed = os.path.join(common_dir, "packed-refs")
        packed_fd = _lock(packed)
        try:
            if packed_fd is None:
                return False
            if head_target(git_dir) != ref or _read(loose) != base + "\n":
                return False
            if _packed_names(common_dir, ref) is not False:
                return False
            os.write(head_fd, (base + "\n").encode())
            os.close(head_fd)
            head_fd = -1
            os.replace(head + ".lock", head)
            head_moved = True
            os.unlink(loose)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(common_dir, "logs", *ref.split("/")))
            return True
        finally:
            if packed_fd is not None:
                os.close(packed_fd)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(packed + ".lock")
            os.close(ref_fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(loose + ".lock")
    finally:
        if head_fd >= 0:
            os.close(head_fd)
        if not head_moved:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(head + ".lock")
