"""Claude Code's own structured output (``output:flag-honest``).

With the SDK's ``output_format`` (``--json-schema``) the CLI gives the model a
structured-output tool whose input must match the schema; the result message then
carries that input as ``structured_output``, or ends with the subtype
``error_max_structured_output_retries`` when the model could not comply. Both become
what the host validates or the fixed ``output-invalid`` failure; the host validates the
answer in every case (:mod:`dsh_subagent.structured`).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Final

from claude_agent_sdk import ClaudeAgentOptions, ResultMessage
from dsh_subagent import OUTPUT_INVALID, ProductFailure
from pydantic import JsonValue

from dsh_subagent_claude_code.failures import result_failure
from dsh_subagent_claude_code.product import PRODUCT

__all__ = ["COULD_NOT_COMPLY", "structured_answer", "with_output_schema"]

COULD_NOT_COMPLY: Final = "error_max_structured_output_retries"
"""The SDK subtype of a run whose model did not produce a conforming answer."""


def with_output_schema(
    options: ClaudeAgentOptions, schema: dict[str, JsonValue]
) -> ClaudeAgentOptions:
    """``options`` asking the CLI to constrain the answer to ``schema``."""
    return dataclasses.replace(options, output_format={"type": "json_schema", "schema": schema})


def structured_answer(message: ResultMessage) -> tuple[str | None, ProductFailure | None]:
    """The answer (``structured_output`` as JSON text) of a structured run, or its failure.

    A success without ``structured_output``, and the product's own report that it could
    not comply, fail with category ``output-invalid``; any other failure is classified
    as for a plain run.
    """
    if message.subtype == COULD_NOT_COMPLY:
        return None, ProductFailure(PRODUCT, "query-run", OUTPUT_INVALID)
    if message.subtype != "success" or message.is_error is not False:
        return None, result_failure(message)
    if message.structured_output is None:
        return None, ProductFailure(PRODUCT, "query-run", OUTPUT_INVALID)
    try:
        return json.dumps(message.structured_output, ensure_ascii=False), None
    except (TypeError, ValueError):
        return None, ProductFailure(PRODUCT, "query-run", OUTPUT_INVALID)
