"""``--worktree``, the profile's ``[providers.worktree]`` and ``[tools.worktree]``, and
``dsh worktrees``, on real git.

The provider is a scripted double that writes a file into its cwd when it starts (the
real products editing through their own tools are the e2e worktree tier's).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import ClassVar

import pytest
from dsh_cli.cli import main
from dsh_profiles import Composition, ProfileError, StaticDiscovery, load_profile, open_runtime
from dsh_subagent import (
    CancelController,
    ParentContext,
    ResolvedSubagentStartRequest,
    SubprocessRunHandle,
)
from dsh_subagent.testing import ScriptedProvider
from dsh_subagent.tool import ToolCallContext, run_tool_call
from dsh_worktree import Worktree, WorktreeProvider
from dsh_worktree.testing import EditingProvider, private_git_env, scratch_repository
from dsh_worktree.testing import git_out as _git
from pydantic import BaseModel, ConfigDict


class EditingEntry(EditingProvider):
    """:class:`EditingProvider` that also records every run's cwd."""

    cwds: ClassVar[list[str]] = []

    async def start(self, request: ResolvedSubagentStartRequest) -> SubprocessRunHandle:
        assert request.parent.cwd is not None
        EditingEntry.cwds.append(request.parent.cwd)
        return await super().start(request)


DISCOVERY = StaticDiscovery({"editing": [EditingEntry]})


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, value in private_git_env(tmp_path / "home").items():
        monkeypatch.setenv(name, value)
    root = scratch_repository(tmp_path / "repo")
    return root


def _profile(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "profile.toml"
    path.write_text(
        f"""
[[providers]]
type = "editing"
provider_name = "worker"
{extra}

[[tools]]
name = "subagent_worker"
provider = "worker"
background_mode = "disabled"
""",
        encoding="utf-8",
    )
    return path


def _dsh(*argv: str) -> int:
    return main(list(argv), discovery=DISCOVERY)


def test_run_worktree_json_carries_the_changes_and_the_main_tree_stays(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _dsh(
        "run", str(_profile(tmp_path)), "subagent_worker", "task one", "--cwd", str(repo),
        "--worktree", "--json",
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    record = json.loads(captured.out)
    changes = record["changes"]
    assert set(changes) == {
        "branch", "commit", "base", "files_changed", "insertions", "deletions", "worktree",
    }  # fmt: skip
    assert _git(repo, "show", f"{changes['branch']}:edited.txt") == "task one"
    assert (changes["files_changed"], changes["insertions"], changes["deletions"]) == (1, 1, 0)
    assert f"dsh: worker: Changes: committed on branch {changes['branch']}" in captured.err
    assert _git(repo, "status", "--porcelain") == ""
    assert not (repo / "edited.txt").exists()


def test_the_profile_isolates_every_run_and_check_shows_it(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = _profile(tmp_path, '[providers.worktree]\nbranch = "agent/{id}"')
    assert _dsh("check", str(profile)) == 0
    assert "isolation: a git worktree per run (base='HEAD', branch='agent/{id}'" in (
        capsys.readouterr().out
    )
    assert _dsh("run", str(profile), "subagent_worker", "from the profile", "--cwd", str(repo)) == 0
    captured = capsys.readouterr()
    assert captured.out == "done\n"  # the answer alone on stdout
    (branch,) = [
        b for b in _git(repo, "branch", "--format=%(refname:short)").split() if b != "main"
    ]
    assert branch.startswith("agent/")
    assert _git(repo, "show", f"{branch}:edited.txt") == "from the profile"


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (
            "[providers.worktree]\nbogus = 1",
            "providers row 1 ('worker') field 'worktree.bogus': unknown field",
        ),
        (
            "[providers.worktree]\nbranch = 'x/{name}'",
            "providers row 1 ('worker') field 'worktree.branch': Value error, may use only",
        ),
        (
            "[providers.config]\ncwd = '.'\n[providers.worktree]\n",
            "providers row 1 ('worker') field 'worktree': worktree: provider \"worker\" "
            "configures a cwd",
        ),
    ],
)
def test_a_bad_worktree_setting_is_a_profile_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str, line: str
) -> None:
    assert _dsh("check", str(_profile(tmp_path, extra))) == 2
    assert line in capsys.readouterr().err


def test_worktree_setting_flags_need_worktree(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _dsh("run", str(_profile(tmp_path)), "subagent_worker", "t", "--worktree-keep")
    assert code == 2
    assert capsys.readouterr().err == (
        "dsh: error: --worktree-base/-branch/-root/-keep/-warm need --worktree\n"
    )


def test_batch_worktree_gives_each_task_its_branch(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"id": f"t{i}", "task": f"task {i}"}) + "\n" for i in range(3)),
        encoding="utf-8",
    )
    out = tmp_path / "results.jsonl"
    code = _dsh(
        "batch", str(_profile(tmp_path)), "subagent_worker", str(tasks), "--out", str(out),
        "--cwd", str(repo), "--concurrency", "3", "--worktree",
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(records) == 3
    for record in records:
        index = record["id"].removeprefix("t")
        branch = record["changes"]["branch"]
        assert _git(repo, "show", f"{branch}:edited.txt") == f"task {index}"
    assert len({r["changes"]["branch"] for r in records}) == 3


def _worktrees(repo: Path) -> list[str]:
    listed = _git(repo, "worktree", "list", "--porcelain").splitlines()
    return [line.removeprefix("worktree ") for line in listed if line.startswith("worktree ")]


def test_batch_worktree_reuses_a_warm_pool_as_large_as_its_concurrency(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"id": f"t{i}", "task": f"task {i}"}) + "\n" for i in range(4)),
        encoding="utf-8",
    )
    out = tmp_path / "results.jsonl"
    EditingEntry.cwds.clear()
    code = _dsh(
        "batch", str(_profile(tmp_path)), "subagent_worker", str(tasks), "--out", str(out),
        "--cwd", str(repo), "--concurrency", "1", "--worktree",
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    for record in records:
        index = record["id"].removeprefix("t")
        assert _git(repo, "show", f"{record['changes']['branch']}:edited.txt") == f"task {index}"
    # One worktree, checked out once and reset between tasks; removed at the end.
    assert len(EditingEntry.cwds) == 4
    assert len(set(EditingEntry.cwds)) == 1
    assert _worktrees(repo) == [str(repo)]
    assert _git(repo, "status", "--porcelain") == ""


@pytest.mark.parametrize("bad", ["65", "-1"])
def test_a_bad_worktree_warm_flag_is_a_usage_error(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "a", "task": "x"}) + "\n", encoding="utf-8")
    code = _dsh(
        "batch", str(_profile(tmp_path)), "subagent_worker", str(tasks), "--out",
        str(tmp_path / "out.jsonl"), "--cwd", str(repo), "--worktree", "--worktree-warm", bad,
    )  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("dsh: error: --worktree-warm")
    assert err.count("\n") == 1
    assert _worktrees(repo) == [str(repo)]


def test_batch_refuses_a_task_cwd_outside_a_repository_before_starting(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "plain").mkdir()
    tasks = tmp_path / "tasks.jsonl"
    lines = [{"id": "a", "task": "x"}, {"id": "b", "task": "y", "cwd": str(tmp_path / "plain")}]
    tasks.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    out = tmp_path / "results.jsonl"
    code = _dsh(
        "batch", str(_profile(tmp_path)), "subagent_worker", str(tasks), "--out", str(out),
        "--cwd", str(repo), "--worktree",
    )  # fmt: skip
    assert code == 2
    assert "dsh: error: worktree: the cwd is not inside a git repository: " in (
        capsys.readouterr().err
    )
    assert not out.exists()
    assert _git(repo, "branch", "--format=%(refname:short)") == "main"


def test_worktrees_list_and_recover(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A worktree left by a host whose collection failed (pid 0: abandoned on any host).
    path = tmp_path / "left"
    _git(repo, "worktree", "add", "--quiet", "-b", "dsh/left", str(path))
    base = _git(repo, "rev-parse", "HEAD")
    reason = f"dsh-worktree host=- boot=- pid=0 start=- base={base} id=left"
    _git(repo, "worktree", "lock", "--reason", reason, str(path))
    admin = Path(_git(path, "rev-parse", "--absolute-git-dir"))
    (admin / "dsh-worktree-ready").write_text("left\n", encoding="utf-8")  # fully created
    (path / "work.txt").write_text("kept\n", encoding="utf-8")

    assert _dsh("worktrees", "list", str(repo)) == 0
    listed = capsys.readouterr().out
    assert listed.startswith(f"abandoned  dsh/left  {path}  pid 0 on -\n")
    assert _dsh("worktrees", "recover", str(repo)) == 0
    recovered = capsys.readouterr().out
    assert recovered.startswith(f"committed {path} on dsh/left at ")
    assert _git(repo, "show", "dsh/left:work.txt") == "kept"
    assert not path.exists()
    assert _dsh("worktrees", "prune", str(repo)) == 0
    assert "prune: 0 abandoned worktree(s)" in capsys.readouterr().out


def test_worktrees_outside_a_repository_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _dsh("worktrees", "list", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.startswith("dsh: error: worktree: the cwd is not inside a git repository")


# -- a tool row's own isolation ---------------------------------------------------------


def _two_tools(tmp_path: Path, provider_extra: str, plain_extra: str, iso_extra: str) -> Path:
    """One provider row, two tool rows bound to it: ``plain`` and ``iso``."""
    path = tmp_path / "tools.toml"
    path.write_text(
        f"""
[[providers]]
type = "editing"
provider_name = "worker"
{provider_extra}

[[tools]]
name = "plain"
provider = "worker"
background_mode = "disabled"
{plain_extra}

[[tools]]
name = "iso"
provider = "worker"
background_mode = "disabled"
{iso_extra}
""",
        encoding="utf-8",
    )
    return path


def _compose_file(path: Path) -> Composition:
    return load_profile(path, discovery=DISCOVERY)


@pytest.mark.parametrize(
    ("provider_extra", "plain_extra", "iso_extra", "iso_settings", "plain_settings"),
    [
        # Only the tool row isolates: the tool gets its own instance, the other shares.
        ("", "", "[tools.worktree]\nkeep = true", {"keep": True}, None),
        ("", "", "[tools.worktree]\n", {}, None),
        # The tool row's table is laid field by field over the provider row's.
        (
            "[providers.worktree]\nbranch = 'agent/{id}'\nbase = 'main'",
            "",
            "[tools.worktree]\nbranch = 'iso/{id}'",
            {"branch": "iso/{id}", "base": "main"},
            {"branch": "agent/{id}", "base": "main"},
        ),
        # `worktree = false` turns the provider row's isolation off for that tool.
        ("[providers.worktree]\n", "worktree = false", "", {}, None),
    ],
)
def test_a_tool_rows_worktree_overrides_its_provider_rows(
    tmp_path: Path,
    provider_extra: str,
    plain_extra: str,
    iso_extra: str,
    iso_settings: dict[str, object],
    plain_settings: dict[str, object] | None,
) -> None:
    composition = _compose_file(_two_tools(tmp_path, provider_extra, plain_extra, iso_extra))
    for tool, expected in (("iso", iso_settings), ("plain", plain_settings)):
        loaded = composition.provider(composition.instance_for(tool))
        if expected is None:
            assert loaded.worktree is None, tool
            assert not isinstance(loaded.provider, WorktreeProvider), tool
        else:
            assert loaded.worktree == Worktree.model_validate(expected), tool
            assert isinstance(loaded.provider, WorktreeProvider), tool
            assert loaded.provider.settings == loaded.worktree
    bound = {tool: composition.instance_for(tool) for tool in ("plain", "iso")}
    # Exactly one of the two tools differs from the provider row and gets its own instance.
    own = [tool for tool, name in bound.items() if name != "worker"]
    assert len(own) == 1
    assert bound[own[0]] == f"worker@{own[0]}"
    assert composition.provider(bound[own[0]]).tool == own[0]
    assert [p.name for p in composition.providers] == ["worker", f"worker@{own[0]}"]


def test_a_tool_row_repeating_its_provider_rows_isolation_shares_the_instance(
    tmp_path: Path,
) -> None:
    profile = _two_tools(
        tmp_path, "[providers.worktree]\nkeep = true", "", "[tools.worktree]\nkeep = true"
    )
    composition = _compose_file(profile)
    assert [p.name for p in composition.providers] == ["worker"]
    assert composition.instance_for("iso") == composition.instance_for("plain") == "worker"


@pytest.mark.parametrize(
    ("provider_extra", "iso_extra", "line"),
    [
        (
            "",
            "[tools.worktree]\nbranch = 'x/{name}'",
            "tools row 2 ('iso') field 'worktree.branch': Value error, may use only the {id} "
            "placeholder",
        ),
        ("", "[tools.worktree]\nbogus = 1", "tools row 2 ('iso') field 'worktree.bogus': unknown"),
        ("", "[tools.worktree]\nkeep = 'yes'", "tools row 2 ('iso') field 'worktree.keep': "),
        (
            "[providers.worktree]\n",
            "[tools.worktree]\nbase = '-x'",
            "tools row 2 ('iso') field 'worktree.base': Value error, is not a ref",
        ),
        (
            "",
            "worktree = true",
            "tools row 2 ('iso') field 'worktree': Value error, must be a table of worktree "
            "settings ({} for the defaults) or false",
        ),
        (
            "[providers.config]\ncwd = '.'",
            "[tools.worktree]\n",
            "tools row 2 ('iso') field 'worktree': worktree: provider \"worker@iso\" "
            "configures a cwd",
        ),
    ],
)
def test_a_bad_tool_row_worktree_is_a_profile_error_and_nothing_starts(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], provider_extra: str,
    iso_extra: str, line: str,
) -> None:  # fmt: skip
    profile = _two_tools(tmp_path, provider_extra, "", iso_extra)
    assert _dsh("check", str(profile)) == 2
    err = capsys.readouterr().err
    assert line in err, err
    assert "Traceback" not in err
    code = _dsh("run", str(profile), "iso", "never runs", "--cwd", str(repo))
    assert code == 2
    assert line in capsys.readouterr().err
    assert _git(repo, "branch", "--format=%(refname:short)") == "main"
    assert _git(repo, "status", "--porcelain") == ""
    assert not (tmp_path / "home" / ".cache" / "dsh").exists()


def test_a_second_instance_name_taken_by_a_provider_row_is_refused(tmp_path: Path) -> None:
    profile = _two_tools(
        tmp_path,
        '\n[[providers]]\ntype = "editing"\nprovider_name = "worker@iso"',
        "",
        "[tools.worktree]\n",
    )
    with pytest.raises(ProfileError) as info:
        _compose_file(profile)
    assert info.value.problems == (
        "tools row 2 ('iso') field 'worktree': its own instance would be named 'worker@iso', "
        "which a provider row already uses; rename that provider row",
    )


def test_only_the_isolated_tool_row_makes_a_branch_and_check_shows_both(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = _two_tools(tmp_path, "", "", "[tools.worktree]\nbranch = 'iso/{id}'")
    assert _dsh("check", str(profile)) == 0
    shown = capsys.readouterr().out
    assert "  worker@iso  [type editing, row 1, for tool 'iso'] " in shown
    assert "isolation: a git worktree per run (base='HEAD', branch='iso/{id}'" in shown
    assert "  plain -> worker (background: disabled)" in shown
    assert "  iso -> worker@iso (background: disabled)" in shown

    assert _dsh("run", str(profile), "iso", "isolated", "--cwd", str(repo), "--json") == 0
    changes = json.loads(capsys.readouterr().out)["changes"]
    assert changes["branch"].startswith("iso/")
    assert _git(repo, "show", f"{changes['branch']}:edited.txt") == "isolated"
    assert _git(repo, "status", "--porcelain") == ""  # the main tree untouched

    assert _dsh("run", str(profile), "plain", "in place", "--cwd", str(repo), "--json") == 0
    assert json.loads(capsys.readouterr().out)["changes"] is None
    assert (repo / "edited.txt").read_text(encoding="utf-8") == "in place\n"  # not isolated
    branches = _git(repo, "branch", "--format=%(refname:short)").split()
    assert sorted(branches) == sorted(["main", changes["branch"]])


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_model_facing_tools_honour_each_tool_rows_isolation(
    repo: Path, tmp_path: Path
) -> None:
    # What dsh mcp and both framework adapters call: the tools open_runtime binds.
    profile = _two_tools(tmp_path, "[providers.worktree]\n", "worktree = false", "")
    composition = _compose_file(profile)
    parent = ParentContext(session_id="lead", cwd=str(repo))
    async with open_runtime(composition) as runtime:
        isolated, in_place = [
            await run_tool_call(
                runtime.tools[name],
                {"description": name, "prompt": f"via {name}"},
                ToolCallContext(parent=parent, cancel=CancelController().signal),
            )
            for name in ("iso", "plain")
        ]
    assert not isolated.is_error
    assert not in_place.is_error
    (branch,) = [
        b for b in _git(repo, "branch", "--format=%(refname:short)").split() if b != "main"
    ]
    assert isolated.text.startswith(f"done\nChanges: committed on branch {branch} (1 files")
    assert _git(repo, "show", f"{branch}:edited.txt") == "via iso"
    assert in_place.text == "done"  # no Changes line: not isolated
    assert (repo / "edited.txt").read_text(encoding="utf-8") == "via plain\n"


class FixedConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FixedEntry(ScriptedProvider):
    """A provider whose configuration takes no ``provider_name``: one name only."""

    Config: ClassVar[type[FixedConfig]] = FixedConfig

    def __init__(self, config: FixedConfig) -> None:
        super().__init__("fixed")


def test_a_provider_that_takes_no_second_name_cannot_isolate_one_tool(tmp_path: Path) -> None:
    path = tmp_path / "fixed.toml"
    path.write_text(
        '[[providers]]\ntype = "fixed"\n\n[[tools]]\nname = "iso"\nprovider = "fixed"\n'
        'background_mode = "disabled"\n[tools.worktree]\n',
        encoding="utf-8",
    )
    with pytest.raises(ProfileError) as info:
        load_profile(path, discovery=StaticDiscovery({"fixed": [FixedEntry]}))
    assert info.value.problems == (
        "tools row 1 ('iso') field 'worktree': provider type 'fixed' cannot be given a second "
        "instance name ('fixed@iso'); isolate a separate provider row instead",
    )


def test_git_missing_from_path_is_one_line_and_nothing_starts(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "no-git-here"
    empty.mkdir()
    path = os.environ["PATH"]
    monkeypatch.setenv("PATH", str(empty))
    code = _dsh(
        "run", str(_profile(tmp_path)), "subagent_worker", "task", "--cwd", str(repo),
        "--worktree",
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == [
        "dsh: error: worktree: git is not on PATH (worktree isolation runs the git command)"
    ]
    assert not (repo / "edited.txt").exists()
    monkeypatch.setenv("PATH", path)
    assert _git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert _git(repo, "branch", "--format=%(refname:short)") == "main"
