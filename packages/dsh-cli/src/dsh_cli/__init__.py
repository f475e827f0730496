"""dsh-cli: the ``dsh`` command (its commands and their rendering).

It has no Python API of its own: the Loader and the composition runtime are the
``dsh_profiles`` library's. Nothing is imported here, so the ``dsh`` command can start
handling Ctrl-C before the heavy imports run.
"""

from __future__ import annotations

__all__: list[str] = []
