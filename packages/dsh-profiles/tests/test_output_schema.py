"""One output-schema check: a profile's tool row, the tool configuration and a schema file
refuse the same schema with the same words (``dsh_subagent.structured.JsonOutputSchema``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dsh_profiles import ProfileError, parse_profile
from dsh_profiles.errors import UsageError
from dsh_profiles.output_schema import load_output_schema
from dsh_subagent.tool import SubagentToolConfig
from pydantic import ValidationError

NOT_AN_OBJECT = {"type": "array"}


def _tool_config_message(schema: object) -> str:
    with pytest.raises(ValidationError) as raised:
        SubagentToolConfig.model_validate({"provider": "p", "output_schema": schema})
    (error,) = raised.value.errors()
    assert error["loc"] == ("output_schema",)
    return str(error["msg"]).removeprefix("Value error, ")


def test_a_tool_row_and_the_tool_config_refuse_a_schema_alike() -> None:
    message = _tool_config_message(NOT_AN_OBJECT)
    assert "object-rooted" in message
    with pytest.raises(ProfileError) as raised:
        parse_profile(
            {
                "providers": [{"type": "example"}],
                "tools": [{"name": "t", "provider": "example", "output_schema": NOT_AN_OBJECT}],
            }
        )
    # The Loader shows pydantic's message as it comes ("Value error, " included).
    assert raised.value.problems == (
        f"tools row 1 ('t') field 'output_schema': Value error, {message}",
    )


def test_a_schema_file_is_refused_alike_naming_the_flag_and_the_path(tmp_path: Path) -> None:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(NOT_AN_OBJECT), encoding="utf-8")
    with pytest.raises(UsageError) as raised:
        load_output_schema(str(path), "--output-schema")
    assert str(raised.value) == f"--output-schema {path}: {_tool_config_message(NOT_AN_OBJECT)}"


def test_no_path_is_no_schema_and_a_good_file_is_its_schema(tmp_path: Path) -> None:
    assert load_output_schema(None) is None
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema), encoding="utf-8")
    assert load_output_schema(str(path)) == schema
