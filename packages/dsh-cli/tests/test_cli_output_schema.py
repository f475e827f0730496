"""``dsh run --output-schema FILE``: the validated object on stdout, or one clear failure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest
from dsh_cli.cli import main
from dsh_profiles import StaticDiscovery, load_profile
from dsh_profiles.errors import ProfileError
from dsh_profiles.run import EXIT_START_FAILED
from dsh_subagent import SubagentCapabilities, TextBlock
from dsh_subagent.testing import Script, ScriptedProvider
from pydantic import BaseModel, ConfigDict

SECRET = "ANSWER-SECRET-31f"


class TypedConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    provider_name: str = "typed"
    answer: str = '{"verdict": "ok", "score": 3}'
    enforces: bool = True


class TypedEntry(ScriptedProvider):
    Config: ClassVar[type[TypedConfig]] = TypedConfig
    instances: ClassVar[list[TypedEntry]] = []

    def __init__(self, config: TypedConfig) -> None:
        script = Script(output=(TextBlock(text=config.answer),))
        flags = SubagentCapabilities(output_schema=config.enforces)
        super().__init__(config.provider_name, [script], capabilities=flags)
        TypedEntry.instances.append(self)


DISCOVERY = StaticDiscovery({"typed": [TypedEntry]})
SCHEMA = {
    "type": "object",
    "properties": {"verdict": {"type": "string"}, "score": {"type": "integer"}},
    "required": ["verdict", "score"],
}


def _files(tmp_path: Path, config: str = "", schema: object = SCHEMA) -> tuple[str, str]:
    profile = tmp_path / "profile.toml"
    profile.write_text(
        f'[[providers]]\ntype = "typed"\nprovider_name = "worker"\n[providers.config]\n{config}\n',
        encoding="utf-8",
    )
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(schema), encoding="utf-8")
    return str(profile), str(schema_file)


def _dsh(*argv: str) -> int:
    return main(list(argv), discovery=DISCOVERY)


def test_stdout_carries_the_validated_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile, schema = _files(tmp_path)
    TypedEntry.instances.clear()
    assert _dsh("run", profile, "worker", "Review.", "--output-schema", schema) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"verdict": "ok", "score": 3}
    (provider,) = TypedEntry.instances
    (record,) = provider.records
    assert record.request.output_schema == SCHEMA


def test_json_record_carries_structured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile, schema = _files(tmp_path)
    assert _dsh("run", profile, "worker", "Review.", "--output-schema", schema, "--json") == 0
    record = json.loads(capsys.readouterr().out)
    assert record["structured"] == {"verdict": "ok", "score": 3}
    assert record["stop_reason"] == "completed"


def test_without_the_flag_the_record_is_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile, _ = _files(tmp_path)
    assert _dsh("run", profile, "worker", "Review.", "--json") == 0
    assert "structured" not in json.loads(capsys.readouterr().out)


def test_a_nonconforming_answer_fails_with_the_category_and_not_the_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answer = json.dumps({"verdict": SECRET, "score": SECRET}).replace('"', '\\"')
    profile, schema = _files(tmp_path, f'answer = "{answer}"')
    code = _dsh("run", profile, "worker", "Review.", "--output-schema", schema, "--json")
    captured = capsys.readouterr()
    assert code == 1
    record = json.loads(captured.out)
    assert record["structured"] is None
    assert record["stop_reason"] == "error"
    assert record["diagnostic"].splitlines() == [
        "Structured output failure (category: output-invalid)",
        "$.score: wrong type (expected integer)",
    ]
    assert SECRET not in record["diagnostic"]


def test_a_provider_that_cannot_enforce_refuses_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile, schema = _files(tmp_path, "enforces = false")
    TypedEntry.instances.clear()
    assert _dsh("run", profile, "worker", "Review.", "--output-schema", schema) == EXIT_START_FAILED
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().endswith(
        'could not start: subagent provider "worker" does not support the "output_schema" '
        'capability (request field "output_schema")'
    )
    assert [p.start_count for p in TypedEntry.instances] == [0]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"type": "string"}', 'must be an object-rooted JSON Schema ({"type": "object"})'),
        (b'{"type": "object",\n "properties": 7}', "not a valid JSON Schema (at output_schema"),
        (b"{not json", "not JSON (line 1, column 2)"),
        (b"\xff\xfe", "not UTF-8 text"),
    ],
)
def test_a_bad_schema_file_is_a_usage_error_before_anything_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, expected: str
) -> None:
    profile, schema = _files(tmp_path)
    Path(schema).write_bytes(content)
    TypedEntry.instances.clear()
    assert _dsh("run", profile, "worker", "Review.", "--output-schema", schema) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dsh: error: --output-schema {schema}: ")
    assert expected in err
    assert err.count("\n") == 1
    assert TypedEntry.instances == []  # refused before the profile was loaded


def test_a_missing_schema_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile, _ = _files(tmp_path)
    missing = str(tmp_path / "nope.json")
    assert _dsh("run", profile, "worker", "Review.", "--output-schema", missing) == 2
    assert capsys.readouterr().err == (
        f"dsh: error: --output-schema {missing}: cannot read the file (No such file or directory)\n"
    )


def _tool_profile(tmp_path: Path, table: str) -> Path:
    profile = tmp_path / "typed.toml"
    profile.write_text(
        '[[providers]]\ntype = "typed"\nprovider_name = "worker"\n\n'
        '[[tools]]\nname = "review"\nprovider = "worker"\nbackground_mode = "disabled"\n'
        f"[tools.output_schema]\n{table}\n",
        encoding="utf-8",
    )
    return profile


def test_a_tool_rows_schema_is_checked_at_load_naming_row_and_field(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as caught:
        load_profile(_tool_profile(tmp_path, 'type = "array"'), discovery=DISCOVERY)
    message = str(caught.value)
    assert "tools row 1 ('review') field 'output_schema'" in message
    assert "object-rooted JSON Schema" in message


def test_a_typed_tool_row_forwards_its_schema_to_every_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = _tool_profile(
        tmp_path,
        'type = "object"\nrequired = ["verdict"]\n'
        '[tools.output_schema.properties.verdict]\ntype = "string"\n',
    )
    TypedEntry.instances.clear()
    assert _dsh("run", str(profile), "review", "Review.", "--json") == 0
    record = json.loads(capsys.readouterr().out)
    assert record["answer"] == '{"verdict": "ok", "score": 3}'
    (provider,) = TypedEntry.instances
    (run,) = provider.records
    assert run.request.output_schema == {
        "type": "object",
        "required": ["verdict"],
        "properties": {"verdict": {"type": "string"}},
    }
