"""``Delegate``, the Ray Data step, called the way ``map_batches`` calls it (no cluster).

The product is the example provider's scripted child (a real process per row, under the
host-death guard), so the test proves rows settle with their product trees gone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dsh_batch.ray_data import OUTPUT_COLUMNS, Delegate
from dsh_profiles.errors import UsageError
from dsh_subprocess.testing import ProcessWatch
from dsh_worktree.testing import git_out as _git
from dsh_worktree.testing import private_git_env, scratch_repository


def _columns(out: Any) -> dict[str, list[Any]]:
    """The batch as columns: a pyarrow.Table (pyarrow installed) or the dict itself."""
    return out.to_pydict() if hasattr(out, "to_pydict") else dict(out)


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
            out = _columns(step(batch))
            again = _columns(step({"task": ["dsh-contract/1 complete T-00000c02"]}))
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


def test_usage_comes_back_as_json_with_every_field_of_a_batch_records(
    profile: Path, tmp_path: Path
) -> None:
    with Delegate(str(profile), "subagent_example", cwd=str(tmp_path)) as step:
        out = _columns(step({"task": ["dsh-example/progress please"]}))
    assert out["stop_reason"] == ["completed"]
    assert json.loads(out["usage"][0]) == {
        "input_tokens": 1200,
        "cached_input_tokens": None,
        "output_tokens": 34,
        "reasoning_tokens": None,
        "cost_usd": None,  # a key as in a `dsh batch` record: unreported, not unknown
    }


def test_a_bad_target_fails_construction_and_starts_nothing(profile: Path) -> None:
    with ProcessWatch() as watch, pytest.raises(UsageError, match="nope"):
        Delegate(str(profile), "nope")
    assert watch.seen == ()


def test_nothing_imports_ray_unless_asked() -> None:
    code = (
        "import sys, dsh_batch, dsh_batch.actor, dsh_batch.ray_pool, dsh_batch.ray_data\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] == 'ray'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_added_columns_have_fixed_arrow_types_even_when_every_value_is_null(
    profile: Path, tmp_path: Path
) -> None:
    # Inferred, an all-null diagnostic column would be Arrow's null type and Parquet files
    # written per batch would disagree on the schema.
    pa = pytest.importorskip("pyarrow", reason="pyarrow is in the workspace's dev group")
    with Delegate(str(profile), "subagent_example", cwd=str(tmp_path)) as step:
        out = step({"task": ["hello"]})
    assert isinstance(out, pa.Table)
    assert out.column("diagnostic").to_pylist() == [None]
    assert {name: str(out.schema.field(name).type) for name in OUTPUT_COLUMNS} == {
        "stop_reason": "string",
        "answer": "string",
        "diagnostic": "string",
        "usage": "string",
        "elapsed_seconds": "double",
        "changes": "string",
    }


def test_without_pyarrow_the_batch_comes_back_as_a_dict(
    profile: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` raises ImportError
    with Delegate(str(profile), "subagent_example", cwd=str(tmp_path)) as step:
        out = step({"task": ["hello"], "n": [7]})
    assert out == {
        "task": ["hello"],
        "n": [7],
        "stop_reason": ["completed"],
        "answer": ["done"],
        "diagnostic": [None],
        "usage": [None],
        "elapsed_seconds": out["elapsed_seconds"],
        "changes": [None],
    }


def test_with_worktree_isolation_each_row_carries_its_change_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in private_git_env(tmp_path / "home").items():
        monkeypatch.setenv(name, value)
    repo = scratch_repository(tmp_path / "repo")
    profile = tmp_path / "profile.toml"
    profile.write_text(
        '[[providers]]\ntype = "example"\n\n[providers.worktree]\n\n'
        '[[tools]]\nname = "subagent_example"\nprovider = "example"\n'
        'background_mode = "disabled"\n',
        encoding="utf-8",
    )
    rows = {"id": ["edits", "reads"], "task": ["dsh-example/write edited.txt", "hello"]}
    with Delegate(str(profile), "subagent_example", cwd=str(repo), concurrency=2) as step:
        out = _columns(step(rows))
    assert out["stop_reason"] == ["completed", "completed"]
    edits, reads = (json.loads(text) for text in out["changes"])
    assert (edits["files_changed"], edits["insertions"]) == (1, 1)
    assert _git(repo, "show", f"{edits['branch']}:edited.txt") == "dsh-example/write edited.txt"
    assert reads["commit"] is None  # nothing changed: no commit, the branch deleted
    assert not (repo / "edited.txt").exists()  # the main tree is never touched
    assert _git(repo, "worktree", "list").count("\n") == 0  # only the main tree


# Builds a Delegate in a fresh process where a stand-in ``ray`` module says whether this
# is an actor (Ray's ``get_runtime_context().get_actor_id()``), then says whether the
# process became not dumpable. A stand-in, not Ray: the real actor path is proven by
# ``e2e/test_batch_ray_local.py`` through the same helper.
IN_A_FAKE_ACTOR = r"""
import ctypes, sys, types
actor_id = sys.argv[3] or None
ray = types.ModuleType("ray")
ray.is_initialized = lambda: True
ray.get_runtime_context = lambda: types.SimpleNamespace(get_actor_id=lambda: actor_id)
sys.modules["ray"] = ray
from dsh_batch.ray_data import Delegate
with Delegate(sys.argv[1], "subagent_example", cwd=sys.argv[2]):
    print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="Linux: not dumpable")
@pytest.mark.parametrize(
    ("actor_id", "keep", "dumpable"),
    [("a1", None, "0"), ("", None, "1"), ("a1", "1", "1")],
    ids=["in-an-actor", "outside-ray", "kept-dumpable"],
)
def test_a_delegate_makes_only_its_ray_actor_not_dumpable(
    profile: Path, tmp_path: Path, actor_id: str, keep: str | None, dumpable: str
) -> None:
    """In Ray Data's actor the process keeps its memory to itself; a host building a
    Delegate itself is left as it is (changing its core dumps is its own choice)."""
    env = {k: v for k, v in os.environ.items() if k != "DSH_KEEP_DUMPABLE"}
    if keep is not None:
        env["DSH_KEEP_DUMPABLE"] = keep
    done = subprocess.run(
        [sys.executable, "-c", IN_A_FAKE_ACTOR, str(profile), str(tmp_path), actor_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == dumpable


def test_a_delegate_built_where_ray_is_imported_but_not_connected_starts_no_ray() -> None:
    """Asking Ray whether this is an actor would start a local Ray instance here."""
    pytest.importorskip("ray", reason="ray cannot be imported on this Python (dsh-batch[ray])")
    code = (
        "import ray, psutil\n"
        "from dsh_subprocess.protect import protect_ray_actor_process\n"
        "print(protect_ray_actor_process(), ray.is_initialized(),"
        " len(psutil.Process().children(recursive=True)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["False", "False", "0"]
