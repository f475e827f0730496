"""The driver's side of ``dsh batch --ray``'s actor pool, against a stand-in for ``ray``.

The e2e tier runs the pool on a real cluster (kills, Ctrl-C, timing); this pins what a real
cluster cannot be made to do on demand: actors that never come up.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dsh_batch import ray_pool
from dsh_batch.engine import BatchPlan, Interrupts
from dsh_batch.events import BatchEvent, TaskSettled
from dsh_batch.files import BatchRecord, BatchTask, ResultsFile
from dsh_batch.ray_cluster import ray_output_as_logging
from dsh_batch.ray_pool import _Pool


class RayError(Exception):
    pass


class RayActorError(RayError):
    pass


class Ref:
    _ids = itertools.count()

    def __init__(self, value: Any = None, error: Exception | None = None) -> None:
        self.value, self.error, self.id = value, error, next(self._ids)


class Method:
    def __init__(self, call: Any) -> None:
        self._call = call

    def remote(self, *args: Any) -> Ref:
        return self._call(*args)  # type: ignore[no-any-return]


class Actor:
    def __init__(self, comes_up: bool) -> None:
        self.comes_up, self.killed = comes_up, False
        self.ran: list[str] = []
        failure = None if comes_up else RayError("RuntimeEnvSetupError: no such package")
        self.ready = Method(lambda: Ref(True, failure))
        self.run = Method(self._run)
        self.close = Method(lambda: Ref())
        self.cancel = Method(lambda: Ref())

    def _run(self, task_json: str) -> Ref:
        task = BatchTask.model_validate_json(task_json)
        self.ran.append(task.id)
        record = BatchRecord(id=task.id, stop_reason="completed", elapsed_seconds=0.1)
        return Ref(record.model_dump_json())


class FakeRay:
    """``ray`` as the pool uses it; ``pattern`` says which new actors come up."""

    class exceptions:
        RayError = RayError
        RayActorError = RayActorError

    def __init__(self, pattern: list[bool]) -> None:
        self.pattern = list(pattern)
        self.actors: list[Actor] = []

    def remote(self, cls: type) -> Any:
        ray = self

        class ActorClass:
            def options(self, **_: Any) -> Any:
                return self

            def remote(self, *_: Any) -> Actor:
                actor = Actor(ray.pattern.pop(0) if ray.pattern else True)
                ray.actors.append(actor)
                return actor

        return ActorClass()

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 2.0}

    def wait(self, refs: list[Ref], **_: Any) -> tuple[list[Ref], list[Ref]]:
        return refs[:1], refs[1:]

    def get(self, ref: Ref) -> Any:
        if ref.error is not None:
            raise ref.error
        return ref.value

    def kill(self, actor: Actor, **_: Any) -> None:
        actor.killed = True


def _plan(n: int, concurrency: int = 2) -> BatchPlan:
    tasks = tuple(BatchTask(id=f"t{i}", task="x") for i in range(n))
    return BatchPlan(tasks, "example", None, concurrency)


def test_an_actor_that_never_comes_up_is_dropped_and_the_others_run_every_task(
    tmp_path: Path,
) -> None:
    ray = FakeRay([False, True])
    results = ResultsFile(tmp_path / "out.jsonl")
    results.open()
    try:
        summary = _Pool(ray, _plan(3), None, 0, None).drive(results, None, Interrupts(), None)
    finally:
        results.close()
    assert (summary.done, summary.failed, summary.error) == (3, 0, None)
    broken, working = ray.actors
    assert (broken.ran, working.ran) == ([], ["t0", "t1", "t2"])
    assert [actor.killed for actor in ray.actors] == [True, True]  # none outlives the batch


def test_when_no_actor_comes_up_the_batch_fails_with_rays_reason_and_records_nothing(
    tmp_path: Path,
) -> None:
    ray = FakeRay([False, False])
    results = ResultsFile(tmp_path / "out.jsonl")
    results.open()
    try:
        summary = _Pool(ray, _plan(3), None, 0, None).drive(results, None, Interrupts(), None)
    finally:
        results.close()
    assert (summary.done, summary.failed, summary.not_run) == (0, 0, 3)
    assert summary.error == (
        "a Ray actor of the pool could not start: RayError: RuntimeEnvSetupError: no such package"
    )
    out = tmp_path / "out.jsonl"
    assert not out.exists() or out.read_text(encoding="utf-8") == ""
    assert all(actor.killed for actor in ray.actors)


def test_the_pool_has_no_more_actors_than_tasks(tmp_path: Path) -> None:
    ray = FakeRay([])
    results = ResultsFile(tmp_path / "out.jsonl")
    results.open()
    try:
        _Pool(ray, _plan(1, concurrency=8), None, 0, None).drive(results, None, Interrupts(), None)
    finally:
        results.close()
    assert len(ray.actors) == 1


def test_what_the_hosts_observer_prints_reaches_the_hosts_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """While Ray is connected its prints are redirected to logging; the observer (the
    host's code, on the calling thread) prints to the host's own stdout and stderr, as
    ``docs/batch.md``'s example does."""

    @contextlib.contextmanager
    def connect(*_: Any) -> Iterator[FakeRay]:
        with ray_output_as_logging():  # what the real connect_ray does around the pool
            print("a notice of Ray's own")
            yield FakeRay([])

    monkeypatch.setattr(ray_pool, "connect_ray", connect)
    profile = tmp_path / "profile.toml"
    profile.write_text('[[providers]]\ntype = "example"\n', encoding="utf-8")
    results = ResultsFile(tmp_path / "out.jsonl")
    results.open()

    def show(event: BatchEvent) -> None:
        if isinstance(event, TaskSettled):
            print(f"settled {event.record.id}")
            print(f"on stderr {event.record.id}", file=sys.stderr)

    try:
        summary = ray_pool.run_on_ray(
            None,
            profile=profile,
            files=None,
            plan=_plan(2),
            base_cwd=None,
            retries=0,
            results=results,
            observer=show,
        )
    finally:
        results.close()
    assert (summary.done, summary.error) == (2, None)
    seen = capsys.readouterr()
    assert sorted(seen.out.splitlines()) == ["settled t0", "settled t1"]  # not Ray's notice
    assert sorted(seen.err.splitlines()) == ["on stderr t0", "on stderr t1"]
