"""``Delegate``, the Ray Data step, called the way ``map_batches`` calls it (no cluster).

The product is the example provider's scripted child (a real process per row, under the
host-death guard), so the test proves rows settle with their product trees gone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dsh_cli.errors import UsageError
from dsh_cli.ray_data import OUTPUT_COLUMNS, Delegate
from dsh_subprocess.testing import ProcessWatch


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    path = tmp_path / "profile.toml"
    path.write_text(
        '[[providers]]\ntype = "example"\n\n'
        '[[tools]]\nname = "subagent_example"\nprovider = "example"\n'
        'background_mode = "disabled"\n',
        encoding="utf-8",
    )
    return path


def test_each_row_becomes_its_outcome_and_a_failure_is_a_row_never_an_exception(
    profile: Path, tmp_path: Path
) -> None:
    batch: dict[str, list[Any]] = {
        "id": ["ok", "fails", "empty", "token"],
        "task": [
            "hello",
            "dsh-contract/1 fail T-00000f01",
            None,
            "dsh-contract/1 complete T-00000c01",
        ],
        "note": [1, 2, 3, 4],  # the caller's own columns pass through
    }
    with ProcessWatch() as watch:
        with Delegate(str(profile), "subagent_example", cwd=str(tmp_path), concurrency=2) as step:
            out = step(batch)
            again = step({"task": ["dsh-contract/1 complete T-00000c02"]})  # the same service
        assert not watch.alive(), "a product outlived its row"
        products = [seen for seen in watch.seen if "dsh_example_provider.child" in seen.argv]
    assert products  # the watch saw real product processes (rows ran as processes)
    assert set(out) == {"id", "task", "note", *OUTPUT_COLUMNS}
    assert out["note"] == [1, 2, 3, 4]
    assert out["stop_reason"] == ["completed", "error", "error", "completed"]
    assert out["answer"][0] == "done"
    assert out["answer"][3] == "T-00000c01"
    assert out["diagnostic"][2] == "the row has no task"
    assert "category: child-error" in out["diagnostic"][1]
    assert all(seconds >= 0 for seconds in out["elapsed_seconds"])
    assert out["usage"] == [None] * 4
    assert (again["stop_reason"], again["answer"]) == (["completed"], ["T-00000c02"])


def test_usage_comes_back_as_json(profile: Path, tmp_path: Path) -> None:
    with Delegate(str(profile), "subagent_example", cwd=str(tmp_path)) as step:
        out = step({"task": ["dsh-example/progress please"]})
    assert out["stop_reason"] == ["completed"]
    assert json.loads(out["usage"][0]) == {"input_tokens": 1200, "output_tokens": 34}


def test_a_bad_target_fails_construction_and_starts_nothing(profile: Path) -> None:
    with ProcessWatch() as watch, pytest.raises(UsageError, match="nope"):
        Delegate(str(profile), "nope")
    assert watch.seen == ()


def test_nothing_imports_ray_unless_asked() -> None:
    code = (
        "import sys, dsh_cli.cli, dsh_cli.batch_ray, dsh_cli.ray_data\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] == 'ray'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"
