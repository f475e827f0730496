"""The ``reach`` directive: a command the product is asked to run, and how its run answers.

The ``confinement:*`` rules play a prompt-injected delegation: the task carries, besides
``dsh-contract/1 reach <token>``, one command line::

    dsh-contract/1 command <the command, URL-safe base64>

A loopback model route (or a scripted child) decodes it with :func:`find_command`, has
the product run it with its shell tool (``sh -c``), and answers :func:`relayed_answer`:
the token, then what the command printed (stdout and stderr), bounded. The answer is
where a model would send what it read, so a planted text the command managed to read
shows in the run's output.

The command is base64 so that it survives any request body (JSON escaping, quoting) and
so that no path or marker of it appears verbatim in the task text.
"""

from __future__ import annotations

import base64
import re
from typing import Final

__all__ = [
    "ATTEMPTED",
    "COMMAND_PREFIX",
    "RELAY_LIMIT",
    "attempt",
    "command_line",
    "find_command",
    "relayed_answer",
    "tool_output_text",
]

COMMAND_PREFIX: Final = "dsh-contract/1 command"
_COMMAND: Final = re.compile(r"dsh-contract/1 command ([A-Za-z0-9_-]+={0,2})")

ATTEMPTED: Final = "dsh-contract-attempted-42"
"""What a reach command prints once its attempt is over (computed by the shell, so the
command's own text never contains it)."""

# printf, not $((…)): some agents (Qwen Code) refuse any `$(` in a command as injection.
_ATTEMPTED_SHELL: Final = "printf 'dsh-contract-attempted-%s%s\\n' 4 2"

RELAY_LIMIT: Final = 2000
"""Characters of the command's output a ``reach`` answer carries (its end is kept)."""


def command_line(command: str) -> str:
    """The task line that carries ``command``."""
    encoded = base64.urlsafe_b64encode(command.encode("utf-8")).decode("ascii")
    return f"{COMMAND_PREFIX} {encoded}"


def find_command(text: str) -> str | None:
    """The command of the last command line in ``text`` (a task or a request body)."""
    found = _COMMAND.findall(text)
    if not found:
        return None
    try:
        return base64.urlsafe_b64decode(found[-1]).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None


def attempt(shell: str) -> str:
    """A reach command: ``shell`` with every message in English and its stderr kept, then
    the :data:`ATTEMPTED` marker."""
    return f"LC_ALL=C; export LC_ALL; {{ {shell}; }} 2>&1; {_ATTEMPTED_SHELL}"


def relayed_answer(token: str, output: str) -> str:
    """A ``reach`` run's answer: the token, then the end of the command's output."""
    return f"{token}\n{output[-RELAY_LIMIT:]}"


def tool_output_text(output: object) -> str:
    """The text of a tool result as a wire carries it: a string, or content blocks."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        parts = [
            str(block.get("text", "")) if isinstance(block, dict) else str(block)
            for block in output
        ]
        return "\n".join(parts)
    return "" if output is None else str(output)
