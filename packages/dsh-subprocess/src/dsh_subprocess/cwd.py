"""The working-directory probe: can a product be started in this directory?"""

from __future__ import annotations

import os
import stat

from .errors import CwdProblem

__all__ = ["probe_cwd"]


def probe_cwd(path: str | os.PathLike[str]) -> CwdProblem | None:
    """Tell what, if anything, keeps ``path`` from being a product's working directory.

    :func:`~dsh_subprocess.spawn` runs this before anything starts and raises
    :class:`~dsh_subprocess.InvalidCwdError` with the problem; configuration checks call
    it to apply the same rule at load.

    Args:
        path: The directory to probe. It is not normalised and symlinks are followed.

    Returns:
        ``None`` for an absolute path naming a directory that may be entered, else
        ``"relative"``, ``"missing"`` (also for a path containing NUL, which cannot name
        anything), ``"not_a_directory"`` (the path or one of its components is a file) or
        ``"not_enterable"`` (``os.access(path, X_OK)`` fails, the mode has no execute
        bit at all, or the directory cannot be examined).
    """
    path = os.fspath(path)
    if not os.path.isabs(path):
        return "relative"
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "missing"
    except NotADirectoryError:
        return "not_a_directory"
    except ValueError:
        return "missing"  # an embedded NUL: no such path can exist
    except OSError:
        return "not_enterable"
    if not stat.S_ISDIR(info.st_mode):
        return "not_a_directory"
    # A directory with no search bit at all is refused even for root, whom access()
    # would let through: the product would be running somewhere nobody may enter.
    if not info.st_mode & 0o111 or not os.access(path, os.X_OK):
        return "not_enterable"
    return None
