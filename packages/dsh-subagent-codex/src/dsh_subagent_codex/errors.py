"""The provider's one internal error: the app-server broke the protocol.

It never leaves a run: the runtime turns it into the safe line of the stage it struck
(category ``unknown``) and keeps it, with its descriptive, payload-free message, on the
``__cause__`` chain only.
"""

from __future__ import annotations

__all__ = ["CodexProtocolError"]


class CodexProtocolError(Exception):
    """The app-server broke the protocol (a descriptive, payload-free message)."""
