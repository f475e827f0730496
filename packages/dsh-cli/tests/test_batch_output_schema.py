"""``dsh batch`` typed results: per-task and batch-wide schemas, ``structured`` in records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest
from dsh_batch.files import BatchRecord, read_tasks
from dsh_cli.cli import main
from dsh_profiles import StaticDiscovery
from dsh_subagent import (
    ResolvedSubagentStartRequest,
    SubagentCapabilities,
    SubprocessRunHandle,
    TextBlock,
)
from dsh_subagent.testing import Script, ScriptedProvider
from pydantic import BaseModel, ConfigDict

SECRET = "BATCH-ANSWER-SECRET-77"
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


class EchoConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    provider_name: str = "echo"


class EchoEntry(ScriptedProvider):
    """Answers each task with its own text (so each task scripts its answer)."""

    Config: ClassVar[type[EchoConfig]] = EchoConfig

    def __init__(self, config: EchoConfig) -> None:
        super().__init__(
            config.provider_name,
            [Script(output=(TextBlock(text="unused"),))],
            capabilities=SubagentCapabilities(output_schema=True),
        )

    async def start(self, request: ResolvedSubagentStartRequest) -> SubprocessRunHandle:
        self._scripts = [Script(output=(TextBlock(text=request.prompt[0].text),))]
        return await super().start(request)


DISCOVERY = StaticDiscovery({"echo": [EchoEntry]})


def _files(tmp_path: Path, *tasks: dict[str, object]) -> tuple[str, str, Path]:
    profile = tmp_path / "profile.toml"
    profile.write_text('[[providers]]\ntype = "echo"\nprovider_name = "w"\n', encoding="utf-8")
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    return str(profile), str(task_file), tmp_path / "out.jsonl"


def _records(out: Path) -> dict[str, dict[str, object]]:
    return {r["id"]: r for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())}


def test_a_batch_wide_schema_and_a_task_schema_fill_structured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    own = {"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"]}
    profile, tasks, out = _files(
        tmp_path,
        {"id": "wide", "task": '{"n": 1}', "cwd": str(tmp_path)},
        {"id": "own", "task": '{"s": "x"}', "cwd": str(tmp_path), "output_schema": own},
        {"id": "bad", "task": json.dumps({"n": SECRET}), "cwd": str(tmp_path)},
    )
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA), encoding="utf-8")
    argv = ["batch", profile, "w", tasks, "--out", str(out), "--output-schema", str(schema)]
    assert main([*argv, "--concurrency", "1"], discovery=DISCOVERY) == 1
    records = _records(out)
    assert records["wide"]["structured"] == {"n": 1}
    assert records["own"]["structured"] == {"s": "x"}
    bad = records["bad"]
    assert bad["stop_reason"] == "error"
    assert "structured" not in bad  # written only when set
    assert str(bad["diagnostic"]).splitlines() == [
        "Structured output failure (category: output-invalid)",
        "$.n: wrong type (expected integer)",
    ]
    assert SECRET not in str(bad["diagnostic"])


def test_without_a_schema_records_are_as_before(tmp_path: Path) -> None:
    profile, tasks, out = _files(tmp_path, {"id": "a", "task": "plain", "cwd": str(tmp_path)})
    assert main(["batch", profile, "w", tasks, "--out", str(out)], discovery=DISCOVERY) == 0
    (line,) = out.read_text(encoding="utf-8").splitlines()
    assert "structured" not in json.loads(line)
    assert BatchRecord.model_validate_json(line).structured is None


def test_a_task_with_a_bad_schema_is_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(
        json.dumps({"id": "a", "task": "t", "output_schema": {"type": "array"}}) + "\n",
        encoding="utf-8",
    )
    listed = read_tasks(path)
    assert listed.tasks == ()
    ((line_no, reason),) = [(b.line_no, b.reason) for b in listed.bad_lines]
    assert line_no == 1
    assert reason.startswith("field 'output_schema': subagent output_schema must be")


def test_a_bad_batch_schema_file_is_a_usage_error_and_nothing_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile, tasks, out = _files(tmp_path, {"id": "a", "task": "t", "cwd": str(tmp_path)})
    schema = tmp_path / "schema.json"
    schema.write_text('{"type": "string"}', encoding="utf-8")
    argv = ["batch", profile, "w", tasks, "--out", str(out), "--output-schema", str(schema)]
    assert main(argv, discovery=DISCOVERY) == 2
    assert "--output-schema" in capsys.readouterr().err
    assert not out.exists() or out.read_text(encoding="utf-8") == ""


def test_a_typed_tool_row_types_the_batch(tmp_path: Path) -> None:
    profile, tasks, out = _files(tmp_path, {"id": "a", "task": '{"n": 5}', "cwd": str(tmp_path)})
    Path(profile).write_text(
        '[[providers]]\ntype = "echo"\nprovider_name = "w"\n\n'
        '[[tools]]\nname = "count"\nprovider = "w"\nbackground_mode = "disabled"\n'
        '[tools.output_schema]\ntype = "object"\nrequired = ["n"]\n',
        encoding="utf-8",
    )
    assert main(["batch", profile, "count", tasks, "--out", str(out)], discovery=DISCOVERY) == 0
    assert _records(out)["a"]["structured"] == {"n": 5}
