"""``--output-schema FILE``: the JSON Schema a run's answer must match (typed results).

The file is read and checked before the profile is loaded, so a bad schema starts
nothing; the message names the file and what is wrong, never the file's text. The run
itself is the library's: a provider that cannot enforce a schema refuses it before start
(``output:refused-before-start``), and the host validates the answer
(``output:nonconforming-fails``).
"""

from __future__ import annotations

import json
from pathlib import Path

from dsh_subagent import SubagentError
from dsh_subagent.structured import check_output_schema
from pydantic import JsonValue

from dsh_profiles.errors import UsageError

__all__ = ["check_schema", "load_output_schema"]

MAX_SCHEMA_BYTES = 1024 * 1024
"""The largest schema file read (a schema is small; the bound keeps a mistake cheap)."""


def load_output_schema(
    path: str | None, flag: str = "--output-schema"
) -> dict[str, JsonValue] | None:
    """The object-rooted JSON Schema in ``path`` (``None`` when no path was given).

    Raises:
        UsageError: unreadable, too large, not JSON, or not an object-rooted JSON Schema.
    """
    if path is None:
        return None
    file = Path(path)
    try:
        with file.open("rb") as stream:
            data = stream.read(MAX_SCHEMA_BYTES + 1)
    except OSError as exc:
        raise UsageError(
            f"{flag} {path}: cannot read the file ({exc.strerror or 'error'})"
        ) from None
    if len(data) > MAX_SCHEMA_BYTES:
        raise UsageError(f"{flag} {path}: larger than {MAX_SCHEMA_BYTES} bytes")
    try:
        schema = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{flag} {path}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{flag} {path}: not JSON (line {exc.lineno}, column {exc.colno})"
        ) from None
    return check_schema(schema, f"{flag} {path}")


def check_schema(schema: object, what: str) -> dict[str, JsonValue]:
    """``schema`` when it is an object-rooted JSON Schema.

    Raises:
        UsageError: it is not; the message starts with ``what``.
    """
    try:
        return check_output_schema(schema)
    except SubagentError as exc:
        raise UsageError(f"{what}: {exc.message}") from None
