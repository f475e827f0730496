"""Keyless real-product tier: typed results through the pinned Codex app-server.

With an ``output_schema`` the provider sends ``turn/start`` an ``outputSchema``; Codex
puts it on the Responses request as ``text.format`` (``json_schema``, strict) and the
loopback fixture answers with a final message that conforms, or does not. Codex does not
check the answer itself (the model API's strict mode would): the host does, so the result
is the object or ``error`` with category ``output-invalid``, and no process survives.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from dsh_contract_tests.fixtures.responses import (
    PlainAnswer,
    ResponsesFixture,
    codex_keyless_env,
    write_codex_config,
)
from dsh_subagent import COMPLETED, ERROR, OUTPUT_INVALID, SubagentResult, delegate
from dsh_subagent_codex import CodexConfig, CodexProvider
from dsh_subprocess.testing import host_descendants
from pydantic import BaseModel

pytestmark = [pytest.mark.anyio, pytest.mark.keyless]

SECRET = "STRUCTURED-ANSWER-SECRET-5b2d"


class Finding(BaseModel):
    path: str
    line: int
    message: str


class Review(BaseModel):
    findings: list[Finding]


GOOD: dict[str, Any] = {"findings": [{"path": "app.py", "line": 12, "message": "unused import"}]}


async def _delegate(
    tmp_path: Path, answer: str, schema: Any = Review
) -> tuple[SubagentResult, dict[str, Any]]:
    with ResponsesFixture([PlainAnswer(answer, phase="final_answer")]) as fixture:
        root = tmp_path / "keyless"
        workspace = root / "workspace"
        workspace.mkdir(parents=True)
        env = codex_keyless_env(root)
        write_codex_config(env["CODEX_HOME"], fixture.base_url)
        provider = CodexProvider(CodexConfig(env=dict(env), dispose_grace=2.0))
        with anyio.fail_after(90):
            result = await delegate(provider, "review app.py", cwd=workspace, output_schema=schema)
        (request,) = fixture.requests
    assert not host_descendants(), "a process of the run survived"
    body: dict[str, Any] = request.body
    return result, body


async def test_conforming_answer_yields_the_model_instance(tmp_path: Path) -> None:
    result, body = await _delegate(tmp_path, json.dumps(GOOD))
    assert result.stop_reason == COMPLETED, result.diagnostic
    assert isinstance(result.structured, Review)
    assert result.structured == Review.model_validate(GOOD)
    assert json.loads(result.text) == GOOD
    # What the real product put on the wire: the schema as the Responses text format.
    text_format = body["text"]["format"]
    assert text_format["type"] == "json_schema"
    assert text_format["strict"] is True  # the model API enforces it on a real model
    assert text_format["schema"]["required"] == ["findings"]
    assert text_format["schema"]["$defs"]["Finding"]["required"] == ["path", "line", "message"]


async def test_a_json_schema_dict_yields_the_parsed_json(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    result, body = await _delegate(tmp_path, '{"ok": false}', schema)
    assert result.stop_reason == COMPLETED, result.diagnostic
    assert result.structured == {"ok": False}
    assert body["text"]["format"]["schema"] == schema


@pytest.mark.parametrize(
    ("answer", "violation"),
    [
        (
            json.dumps({"findings": [{"path": "a", "line": SECRET, "message": "m"}]}),
            "$.findings[0].line: wrong type (expected integer)",
        ),
        (
            json.dumps({"findings": [{"path": SECRET, "message": "m"}]}),
            "$.findings[0]: missing field 'line'",
        ),
        (f"Here are the findings: {SECRET}", "$: not JSON"),
    ],
    ids=["wrong-type", "missing-field", "not-json"],
)
async def test_nonconforming_answer_fails_with_the_fixed_category(
    tmp_path: Path, answer: str, violation: str
) -> None:
    result, _ = await _delegate(tmp_path, answer)
    assert result.stop_reason == ERROR
    assert result.structured is None
    assert result.diagnostic is not None
    assert result.diagnostic.splitlines() == [
        f"Structured output failure (category: {OUTPUT_INVALID})",
        violation,
    ]
    assert SECRET not in result.diagnostic


async def test_without_a_schema_the_request_carries_no_schema(tmp_path: Path) -> None:
    with ResponsesFixture([PlainAnswer("plain")]) as fixture:
        root = tmp_path / "keyless"
        workspace = root / "workspace"
        workspace.mkdir(parents=True)
        env = codex_keyless_env(root)
        write_codex_config(env["CODEX_HOME"], fixture.base_url)
        provider = CodexProvider(CodexConfig(env=dict(env), dispose_grace=2.0))
        with anyio.fail_after(90):
            result = await delegate(provider, "plain", cwd=workspace)
        (request,) = fixture.requests
    assert result.stop_reason == COMPLETED
    assert result.structured is None
    assert request.body.get("text", {}).get("format") is None
