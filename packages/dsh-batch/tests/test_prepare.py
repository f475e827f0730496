"""``check_places`` and ``load_setup``: a batch's checks before its results file is opened,
in the words of whoever asked (``dsh batch``'s flags here)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest
from dsh_batch.files import BatchTask
from dsh_batch.prepare import COMMAND_WORDING, Places, check_places, load_setup
from dsh_profiles import StaticDiscovery, UsageError
from dsh_profiles.loader import Composition
from dsh_subagent.testing import Script, ScriptedProvider
from dsh_worktree import MAX_WARM, Worktree
from pydantic import BaseModel, ConfigDict, JsonValue

SCHEMA: dict[str, JsonValue] = {"type": "object", "properties": {"ok": {"type": "boolean"}}}


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    provider_name: str = "scripted"


class _Answers(ScriptedProvider):
    Config: ClassVar[type[_Config]] = _Config

    def __init__(self, config: _Config) -> None:
        super().__init__(config.provider_name, [Script.answer("ok")])


DISCOVERY = StaticDiscovery({"scripted": [_Answers]})


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    path = tmp_path / "profile.toml"
    path.write_text(
        '[[providers]]\ntype = "scripted"\n\n'
        '[[tools]]\nname = "typed"\nprovider = "scripted"\nbackground_mode = "disabled"\n'
        '[tools.output_schema]\ntype = "object"\n',
        encoding="utf-8",
    )
    return path


def _places(profile: Path, **given: object) -> Places:
    arguments: dict[str, object] = {
        "files": None,
        "cwd": str(profile.parent),
        "on_ray": False,
        "out": None,
        "tasks_path": None,
        "profile": profile,
        **given,
    }
    return check_places(wording=COMMAND_WORDING, **arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"files": "/nonexistent/dir"}, "--files '/nonexistent/dir' is not a directory"),
        ({"cwd": "/nonexistent/dir"}, "--cwd '/nonexistent/dir' is not an accessible directory"),
        (
            {"cwd": "relative", "on_ray": True},
            "with --ray, --cwd must be an absolute path on the worker nodes",
        ),
        ({"out": "."}, "--out '.' is a directory"),
    ],
)
def test_each_place_is_named_in_the_given_words(
    profile: Path, given: dict[str, object], message: str
) -> None:
    with pytest.raises(UsageError) as caught:
        _places(profile, **given)
    assert str(caught.value).startswith(message)


def test_the_places_are_made_absolute(profile: Path) -> None:
    places = _places(profile, files=str(profile.parent), cwd=None)
    assert places == Places(str(profile.parent), str(Path.cwd()), None)
    on_ray = _places(profile, cwd="/on/the/nodes", on_ray=True)
    assert on_ray == Places(None, None, "/on/the/nodes")


def test_the_typed_rows_schema_goes_to_every_task_without_one(profile: Path) -> None:
    own = BatchTask(id="b", task="y", output_schema=SCHEMA)
    setup = load_setup(
        profile,
        "typed",
        (BatchTask(id="a", task="x"), own),
        _places(profile),
        wording=COMMAND_WORDING,
        discovery=DISCOVERY,
    )
    assert [t.output_schema for t in setup.tasks] == [{"type": "object"}, SCHEMA]
    assert setup.provider == "scripted"
    assert setup.ray is None


def test_a_bad_batch_wide_schema_is_named(profile: Path) -> None:
    with pytest.raises(UsageError, match=r"^--output-schema: "):
        load_setup(
            profile,
            "typed",
            (),
            _places(profile),
            wording=COMMAND_WORDING,
            output_schema={"type": "array"},
            discovery=DISCOVERY,
        )


def test_isolation_gets_a_pool_as_large_as_the_concurrency_and_travels_to_ray(
    profile: Path,
) -> None:
    announced: list[str] = []

    def announce(composition: Composition, provider: str) -> None:
        announced.append(provider)

    def isolated(composition: Composition, provider: str) -> Worktree:
        return Worktree(branch="b/{id}")

    here = load_setup(
        profile,
        "typed",
        (),
        _places(profile),
        wording=COMMAND_WORDING,
        concurrency=3,
        worktree=isolated,
        discovery=DISCOVERY,
        announce=announce,
    )
    pooled = here.composition.provider("scripted").worktree
    assert pooled is not None
    assert pooled.warm == min(3, MAX_WARM)
    assert announced == ["scripted"]
    on_ray = load_setup(
        profile,
        "typed",
        (),
        _places(profile, cwd=None, on_ray=True),
        wording=COMMAND_WORDING,
        worktree=isolated,
        ray="127.0.0.1:6379",
        ray_retries=2,
        discovery=DISCOVERY,
        announce=announce,
    )
    assert announced == ["scripted"]  # on Ray each node decides for itself
    assert on_ray.ray is not None
    assert (on_ray.ray.address, on_ray.ray.retries) == ("127.0.0.1:6379", 2)
    assert on_ray.ray.worktree == Worktree(branch="b/{id}")  # unpooled: each actor decides
    assert on_ray.concurrency is None  # the cluster's
