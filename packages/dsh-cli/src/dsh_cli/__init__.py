"""dsh-cli: the ``dsh`` command (its commands and their rendering).

It has no Python API of its own: the Loader, the composition runtime and one task run as
``dsh run`` runs it (``run_task``) are the ``dsh_profiles`` library's, and a batch is
``dsh_batch``'s. Nothing is imported here, so the ``dsh`` command can start
handling Ctrl-C before the heavy imports run.
"""

from __future__ import annotations

__all__: list[str] = []
