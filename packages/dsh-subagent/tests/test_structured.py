"""Typed results (``output:*``): host validation of an answer against an output schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dsh_subagent import (
    COMPLETED,
    ERROR,
    MAX_SUBAGENT_DIAGNOSTIC_BYTES,
    NO_START_CAPABILITIES,
    OUTPUT_INVALID,
    SubagentCapabilities,
    SubagentError,
    SubagentErrorCode,
    SubagentRunEnded,
    SubagentService,
    delegate,
    validate_answer,
)
from dsh_subagent.testing import Script, ScriptedProvider
from pydantic import BaseModel, JsonValue, field_validator

pytestmark = pytest.mark.anyio

ENFORCES = SubagentCapabilities(output_schema=True)
SECRET = "SECRET-ANSWER-VALUE-42"


class Finding(BaseModel):
    path: str
    line: int
    severity: str


class Review(BaseModel):
    findings: list[Finding]


CONFORMING = json.dumps({"findings": [{"path": "a.py", "line": 3, "severity": "high"}]})


async def test_conforming_answer_yields_a_model_instance_and_keeps_the_text(tmp_path: Path) -> None:
    provider = ScriptedProvider("p", [Script.answer(CONFORMING)], capabilities=ENFORCES)
    result = await delegate(provider, "review", cwd=tmp_path, output_schema=Review)
    assert result.stop_reason == COMPLETED
    assert isinstance(result.structured, Review)
    assert result.structured.findings[0].line == 3
    assert result.text == CONFORMING
    assert result.structured_as(Review) is result.structured


async def test_conforming_answer_with_a_json_schema_yields_the_parsed_json(tmp_path: Path) -> None:
    schema: dict[str, JsonValue] = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
    }
    provider = ScriptedProvider("p", [Script.answer('{"ok": true}')], capabilities=ENFORCES)
    result = await delegate(provider, "t", cwd=tmp_path, output_schema=schema)
    assert result.stop_reason == COMPLETED
    assert result.structured == {"ok": True}


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("not json at all " + SECRET, "$: not JSON"),
        (
            json.dumps({"findings": [{"path": SECRET, "line": SECRET, "severity": "x"}]}),
            "$.findings[0].line: wrong type (expected integer)",
        ),
        (
            json.dumps({"findings": [{"path": SECRET, "severity": "x"}]}),
            "$.findings[0]: missing field 'line'",
        ),
        (json.dumps([SECRET]), "$: wrong type (expected object)"),
        ("", "$: not JSON"),
    ],
)
async def test_nonconforming_answer_fails_with_the_fixed_category_and_no_answer_text(
    tmp_path: Path, answer: str, expected: str
) -> None:
    provider = ScriptedProvider("p", [Script.answer(answer)], capabilities=ENFORCES)
    result = await delegate(provider, "review", cwd=tmp_path, output_schema=Review)
    assert result.stop_reason == ERROR
    assert result.structured is None
    assert result.diagnostic is not None
    lines = result.diagnostic.splitlines()
    assert lines[0] == f"Structured output failure (category: {OUTPUT_INVALID})"
    assert expected in lines[1:]
    assert SECRET not in result.diagnostic
    assert result.text == answer  # the answer itself stays the host's, apart from the line


def test_a_key_the_answer_chose_is_not_repeated() -> None:
    schema: dict[str, JsonValue] = {
        "type": "object",
        "additionalProperties": {"type": "integer"},
    }
    value, violations = validate_answer(json.dumps({SECRET: "x"}), schema)
    assert value is None
    assert [v.line() for v in violations] == ["$.*: wrong type (expected integer)"]


def test_an_extra_field_is_reported_without_its_name() -> None:
    schema: dict[str, JsonValue] = {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }
    _, violations = validate_answer(json.dumps({SECRET: 1}), schema)
    assert [v.line() for v in violations] == ["$: unexpected field"]


def test_model_validators_fail_without_their_message_or_input() -> None:
    class Strict(BaseModel):
        word: str

        @field_validator("word")
        @classmethod
        def _upper(cls, value: str) -> str:
            raise ValueError(f"bad word {value}")

    value, violations = validate_answer(json.dumps({"word": SECRET}), Strict)
    assert value is None
    assert [v.line() for v in violations] == ["$.word: fails value_error"]


def test_many_violations_are_counted_and_bounded() -> None:
    schema: dict[str, JsonValue] = {
        "type": "object",
        "properties": {"xs": {"type": "array", "items": {"type": "string"}}},
    }
    text = json.dumps({"xs": list(range(5000))})
    from dsh_subagent.structured import output_failure_line

    _, violations = validate_answer(text, schema)
    line = output_failure_line(violations)
    assert len(violations) == 5000
    assert line.endswith("(and 4992 more violations)")
    assert len(line.encode()) <= MAX_SUBAGENT_DIAGNOSTIC_BYTES


async def test_a_failed_run_is_not_validated(tmp_path: Path) -> None:
    from dataclasses import replace

    script = replace(Script.answer("partial"), stop_reason="max-tokens")
    provider = ScriptedProvider("p", [script], capabilities=ENFORCES)
    result = await delegate(provider, "t", cwd=tmp_path, output_schema=Review)
    assert result.stop_reason == "max-tokens"
    assert result.structured is None


async def test_provider_without_the_flag_refuses_before_start(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        "p", [Script.answer(CONFORMING)], capabilities=NO_START_CAPABILITIES
    )
    with pytest.raises(SubagentError) as caught:
        await delegate(provider, "t", cwd=tmp_path, output_schema=Review)
    assert caught.value.code == SubagentErrorCode.UNSUPPORTED_CAPABILITY
    assert provider.start_count == 0


@pytest.mark.parametrize(
    "schema",
    [{"type": "string"}, {"type": "object", "properties": {"a": {"type": 7}}}, {"properties": {}}],
)
async def test_invalid_schema_is_refused_before_start(tmp_path: Path, schema: object) -> None:
    provider = ScriptedProvider("p", [Script.answer("{}")], capabilities=ENFORCES)
    with pytest.raises(SubagentError) as caught:
        await delegate(provider, "t", cwd=tmp_path, output_schema=schema)  # type: ignore[arg-type]
    assert caught.value.code == SubagentErrorCode.INVALID_REQUEST
    assert "output_schema" in str(caught.value)
    assert provider.start_count == 0


async def test_the_service_end_event_and_every_await_see_the_validated_result(
    tmp_path: Path,
) -> None:
    from dsh_subagent import ParentContext, SubagentStartRequest, TextBlock

    ended: list[SubagentRunEnded] = []
    provider = ScriptedProvider("p", [Script.answer('"not an object"')], capabilities=ENFORCES)
    async with SubagentService() as service:
        service.add_listener(lambda e: ended.append(e) if isinstance(e, SubagentRunEnded) else None)
        service.register_provider(provider)
        request = SubagentStartRequest(
            prompt=(TextBlock(text="t"),),
            parent=ParentContext(session_id="s", cwd=str(tmp_path)),
            output_schema=Review,
        )
        run = await service.start("p", request)
        first = await run.result()
        second = await run.result()
        await run.dispose()
    assert first is second
    assert first.stop_reason == ERROR
    assert [e.stop_reason for e in ended] == [ERROR]


async def test_without_a_schema_nothing_changes(tmp_path: Path) -> None:
    provider = ScriptedProvider("p", [Script.answer("plain text")])
    result = await delegate(provider, "t", cwd=tmp_path)
    assert result.stop_reason == COMPLETED
    assert result.structured is None
    assert result.text == "plain text"


async def test_a_remote_reference_is_refused_before_start(tmp_path: Path) -> None:
    provider = ScriptedProvider("p", [Script.answer("{}")], capabilities=ENFORCES)
    schema: dict[str, JsonValue] = {
        "type": "object",
        "properties": {"a": {"$ref": "https://example.invalid/schema.json"}},
    }
    with pytest.raises(SubagentError) as caught:
        await delegate(provider, "t", cwd=tmp_path, output_schema=schema)
    assert caught.value.code == SubagentErrorCode.INVALID_REQUEST
    assert "only local references" in caught.value.message
    assert provider.start_count == 0


async def test_a_model_without_a_json_schema_is_refused_before_start(tmp_path: Path) -> None:
    from collections.abc import Callable

    class Odd(BaseModel):
        hook: Callable[[], None]

    provider = ScriptedProvider("p", [Script.answer("{}")], capabilities=ENFORCES)
    with pytest.raises(SubagentError) as caught:
        await delegate(provider, "t", cwd=tmp_path, output_schema=Odd)
    assert caught.value.code == SubagentErrorCode.INVALID_REQUEST
    assert caught.value.message.startswith("subagent output_schema: the model has no JSON Schema")
    assert provider.start_count == 0


async def test_a_dangling_local_reference_is_refused_before_start(tmp_path: Path) -> None:
    provider = ScriptedProvider("p", [Script.answer("{}")], capabilities=ENFORCES)
    schema: dict[str, JsonValue] = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/Missing"}, "b": {"$ref": "#/properties/a"}},
    }
    with pytest.raises(SubagentError) as caught:
        await delegate(provider, "t", cwd=tmp_path, output_schema=schema)
    assert caught.value.message.endswith("a local reference ($ref) points at nothing in the schema")
    assert provider.start_count == 0


def test_a_schema_that_cannot_be_applied_is_a_violation_never_a_raise() -> None:
    # Only reachable by calling validate_answer directly (the service refuses it first):
    # settlement must never raise out of result().
    schema: dict[str, JsonValue] = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/Missing"}},
    }
    value, violations = validate_answer('{"a": 1}', schema)
    assert value is None
    (violation,) = violations
    assert violation.line().startswith("$: the schema cannot be applied (")


def test_structured_as_types_plain_json_and_refuses_a_missing_answer() -> None:
    from dsh_subagent import SubagentResult

    plain = SubagentResult(stop_reason=COMPLETED, structured=json.loads(CONFORMING))
    review = plain.structured_as(Review)
    assert isinstance(review, Review)
    assert review.findings[0].path == "a.py"
    failed = SubagentResult(stop_reason=ERROR, diagnostic="d")
    with pytest.raises(ValueError, match=r"no structured answer \(stop reason error\)"):
        failed.structured_as(Review)


def test_a_result_with_a_model_instance_serialises_as_json() -> None:
    from dsh_subagent import SubagentResult

    review = Review.model_validate_json(CONFORMING)
    result = SubagentResult(stop_reason=COMPLETED, structured=review)
    dumped = result.model_dump(mode="json")
    assert dumped["structured"] == json.loads(CONFORMING)
