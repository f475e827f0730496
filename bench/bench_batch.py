"""P6: N keyless Codex tasks through ``dsh batch`` vs one after another through the API,
and on a local Ray cluster (``dsh batch --ray``'s actor pool, a Ray Data pipeline) vs
``dsh batch`` on this machine.

Each repeat runs, in this order: the N tasks sequentially through
``dsh_subagent.delegate`` on one ``SubagentService`` (in this process), the real ``dsh
batch`` executable on this machine (concurrency 2), the real ``dsh batch --ray ADDRESS``
(its pool: one actor per CPU of the cluster, 2) and a Ray Data pipeline
(``read_json → map_batches(Delegate) → write_json`` with two actors) against a local
cluster started once with ``ray start --head`` (two CPUs, loopback only, usage statistics
off). Walls are from process start to exit for the executables and the pipeline's driver
(imports, profile load and, for Ray, connecting, shipping the bundle and starting the
actors included). All runs share one warmed CODEX_HOME and one loopback Responses
fixture; one small ``--ray`` batch and one pipeline warm the cluster first (its first
job starts worker processes). Everything runs at two batch sizes, N and M: Ray's cost
over the local batch is ``fixed + per_task × N``, so per task = the slope between the
sizes, fixed = the rest.

Everything runs twice: with an instant model, and with 1 s of simulated model time per
response (the fixture's answering thread sleeps, as a remote model keeps a request
open), since real tasks wait on the model far longer than the product works.

Reported: the throughput ratio sequential-wall / batch-wall, Ray's overhead per task and
fixed cost per batch over the local batch, the per-task ``elapsed_seconds`` medians the
records carry
(delegation start → disposed, measured where the task ran), and what ``dsh batch`` costs
with nothing to run (start-up, profile, results scan).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsh_contract_tests.fixtures.responses import PlainAnswer, RecordedRequest, ResponsesFixture
from dsh_subagent import SubagentService, delegate
from dsh_subprocess.testing import ProcessWatch

from bench.bench_codex import ANSWER, CodexHome, codex_home
from bench.bench_common import Profile, clock, temp_root

__all__ = ["BatchRow", "run_p6"]

BIN = Path(sys.executable).parent
TASK = "Reply with the bench sentinel and nothing else."
_RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # bind loopback only
}


@dataclass
class BatchRow:
    """One way of running the N tasks, over the repeats."""

    case: str
    walls: list[float] = field(default_factory=list)
    task_elapsed: list[float] = field(default_factory=list)
    completed: int = 0
    attempted: int = 0
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "wall_median_s": statistics.median(self.walls) if self.walls else None,
            "walls_s": self.walls,
            "task_elapsed_median_s": (
                statistics.median(self.task_elapsed) if self.task_elapsed else None
            ),
            "completed": self.completed,
            "attempted": self.attempted,
            "note": self.note,
        }


@dataclass
class _Model:
    """The fixture's answer, after ``latency`` seconds of simulated model time."""

    latency: float = 0.0

    def __call__(self, request: RecordedRequest) -> PlainAnswer:
        if self.latency:
            time.sleep(self.latency)  # the answering thread: other requests go on meanwhile
        return PlainAnswer(ANSWER, "final_answer")


def _profile(path: Path, home: CodexHome) -> None:
    table = "\n".join(f"{key} = {json.dumps(value)}" for key, value in home.env.items())
    path.write_text(
        f'[[providers]]\ntype = "codex"\n\n[providers.config.env]\n{table}\n\n'
        '[[tools]]\nname = "subagent_codex"\nprovider = "codex"\nbackground_mode = "disabled"\n',
        encoding="utf-8",
    )


def _tasks(path: Path, n: int) -> None:
    lines = [json.dumps({"id": f"t{i}", "task": TASK}) for i in range(n)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _dsh_batch(
    root: Path, label: str, env: dict[str, str], home: CodexHome, tasks: Path, *extra: str
) -> tuple[float, list[dict[str, Any]]]:
    out = root / f"{label}.jsonl"
    argv = [str(BIN / "dsh"), "batch", str(root / "profile.toml"), "subagent_codex"]
    argv += [str(tasks), "--out", str(out), "--cwd", str(home.workspace)]
    started = clock()
    done = subprocess.run(
        [*argv, *extra],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    wall = clock() - started
    if done.returncode != 0:
        raise RuntimeError(f"dsh batch {label} exited {done.returncode}: {done.stderr[-2000:]}")
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    return wall, records


def _count(row: BatchRow, records: list[dict[str, Any]], n: int) -> None:
    row.attempted += n
    row.completed += sum(1 for r in records if r["answer"] == ANSWER)
    row.task_elapsed += [float(r["elapsed_seconds"]) for r in records]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_ray(env: dict[str, str], temp: Path) -> tuple[str | None, str]:
    """A local head node on loopback; (address, note). ``None`` when Ray is missing."""
    if shutil.which("ray", path=str(BIN)) is None:
        return None, "Ray is not installed (dsh-batch[ray]): row not measured"
    address = f"127.0.0.1:{_free_port()}"
    started = subprocess.run(
        [
            str(BIN / "ray"),
            "start",
            "--head",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--port={address.rsplit(':', 1)[1]}",
            f"--temp-dir={temp}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if started.returncode != 0:
        return None, f"ray start failed: {started.stderr[-500:]}"
    return address, "cluster: ray start --head --num-cpus=2, loopback"


_PIPELINE = """
import sys

import ray
from dsh_batch.ray_data import Delegate

address, bundle, tasks, cwd, out = sys.argv[1:]
ray.init(address=address, runtime_env={"working_dir": bundle}, log_to_driver=False)
ray.data.DataContext.get_current().enable_progress_bars = False
ray.data.read_json(tasks).map_batches(
    Delegate,
    fn_constructor_kwargs={"profile": "profile.toml", "target": "subagent_codex", "cwd": cwd},
    compute=ray.data.ActorPoolStrategy(size=2),
    batch_size=1,
    num_cpus=0.5,
).write_json(out)
ray.shutdown()
"""


def _ray_data(
    root: Path, label: str, env: dict[str, str], home: CodexHome, address: str, tasks: Path
) -> tuple[float, list[dict[str, Any]]]:
    out = root / f"{label}-out"
    argv = [sys.executable, "-c", _PIPELINE, address, str(root / "bundle"), str(tasks)]
    started = clock()
    done = subprocess.run(
        [*argv, str(home.workspace), str(out)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    wall = clock() - started
    if done.returncode != 0:
        raise RuntimeError(f"Ray Data {label} exited {done.returncode}: {done.stderr[-2000:]}")
    records = [
        json.loads(line)
        for path in sorted(out.glob("*.json*"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    return wall, records


def _slope(
    ray_rows: dict[int, BatchRow], local_rows: dict[int, BatchRow]
) -> tuple[float | None, float | None]:
    """(per-task overhead, fixed cost) of Ray over the local batch, from two sizes."""
    if any(not row.walls for row in ray_rows.values()):
        return None, None
    (n, m) = sorted(ray_rows)
    extra = {
        size: statistics.median(ray_rows[size].walls) - statistics.median(local_rows[size].walls)
        for size in (n, m)
    }
    per_task = (extra[m] - extra[n]) / (m - n)
    return per_task, extra[n] - per_task * n


async def _one_latency(
    service: SubagentService,
    root: Path,
    env: dict[str, str],
    home: CodexHome,
    address: str | None,
    ray_note: str,
    latency: float,
    profile: Profile,
) -> tuple[list[BatchRow], dict[str, Any]]:
    label = f"model {latency:g} s"
    rows: list[BatchRow] = []
    local_rows: dict[int, BatchRow] = {}
    pool_rows: dict[int, BatchRow] = {}
    data_rows: dict[int, BatchRow] = {}
    seq_walls: dict[int, float] = {}
    for n in (profile.p6_tasks, profile.p6_more_tasks):
        tasks = root / f"tasks-{n}.jsonl"
        _tasks(tasks, n)
        sequential = BatchRow(f"{label}, N={n}: one after another, Python API (delegate)")
        local = BatchRow(f"{label}, N={n}: dsh batch, this machine (concurrency 2)")
        pool = BatchRow(f"{label}, N={n}: dsh batch --ray, actor pool (2 actors)", note=ray_note)
        data = BatchRow(f"{label}, N={n}: Ray Data map_batches(Delegate), 2 actors")
        for repeat in range(profile.p6_repeats):
            started = clock()
            results = []
            for _ in range(n):
                begun = clock()
                result = await delegate(service, TASK, cwd=home.workspace, provider="codex")
                results.append((result, clock() - begun))
            sequential.walls.append(clock() - started)
            sequential.attempted += n
            sequential.completed += sum(1 for r, _ in results if r.text == ANSWER)
            sequential.task_elapsed += [elapsed for _, elapsed in results]

            tag = f"{latency}-{n}-{repeat}"
            wall, records = _dsh_batch(root, f"local-{tag}", env, home, tasks, "--concurrency", "2")
            local.walls.append(wall)
            _count(local, records, n)

            if address is not None:
                wall, records = _dsh_batch(root, f"ray-{tag}", env, home, tasks, "--ray", address)
                pool.walls.append(wall)
                _count(pool, records, n)
                wall, records = _ray_data(root, f"data-{tag}", env, home, address, tasks)
                data.walls.append(wall)
                _count(data, records, n)
        rows += [sequential, local, pool, data]
        local_rows[n], pool_rows[n], data_rows[n] = local, pool, data
        seq_walls[n] = statistics.median(sequential.walls)
    pool_task, pool_fixed = _slope(pool_rows, local_rows)
    data_task, data_fixed = _slope(data_rows, local_rows)
    n = profile.p6_tasks
    meta = {
        "model_latency_s": latency,
        "throughput_ratio_batch_over_sequential": seq_walls[n]
        / statistics.median(local_rows[n].walls),
        "ray_pool_overhead_per_task_s": pool_task,
        "ray_pool_fixed_s": pool_fixed,
        "ray_data_overhead_per_task_s": data_task,
        "ray_data_fixed_s": data_fixed,
    }
    return rows, meta


async def run_p6(profile: Profile) -> tuple[list[BatchRow], dict[str, Any]]:
    """Each case ``p6_repeats`` times per batch size, per simulated model latency."""
    model = _Model()
    rows: list[BatchRow] = []
    per_latency: list[dict[str, Any]] = []
    with temp_root("p6") as root, ResponsesFixture(route=model) as fixture:
        home = codex_home(root / "codex", fixture.base_url)
        _profile(root / "profile.toml", home)
        (root / "bundle").mkdir()
        shutil.copyfile(root / "profile.toml", root / "bundle" / "profile.toml")
        _tasks(root / "tasks.jsonl", profile.p6_tasks)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
        (root / "home").mkdir()
        env.update(HOME=str(root / "home"), TMPDIR=str(root), **_RAY_ENV)
        cluster_watch = ProcessWatch()
        # Ray's unix socket paths under its temp dir must fit in 107 bytes: keep it short.
        address, ray_note = _start_ray(env, root / "ray")
        try:
            async with SubagentService() as service:
                service.register_provider(home.provider("codex"))
                # Warm-up: one delegation initialises the shared CODEX_HOME alone.
                await delegate(service, TASK, cwd=home.workspace, provider="codex")
                # What `dsh batch` costs with nothing to run: start-up, profile, resume scan.
                _dsh_batch(root, "startup", env, home, root / "tasks.jsonl")
                startup, _ = _dsh_batch(root, "startup", env, home, root / "tasks.jsonl")
                if address is not None:
                    # Warm-up: the cluster's first job starts its worker processes and
                    # unpacks a runtime environment once; measured batches start warm.
                    warm = root / "tasks-warm.jsonl"
                    _tasks(warm, 2)
                    _dsh_batch(root, "ray-warmup", env, home, warm, "--ray", address)
                    _ray_data(root, "data-warmup", env, home, address, warm)
                for latency in profile.p6_latencies:
                    model.latency = latency
                    more, meta = await _one_latency(
                        service, root, env, home, address, ray_note, latency, profile
                    )
                    rows += more
                    per_latency.append(meta)
        finally:
            model.latency = 0.0
            cluster_watch.kill_leftovers()  # the cluster's processes, ours by descent
    meta_all: dict[str, Any] = {
        "tasks": profile.p6_tasks,
        "more_tasks": profile.p6_more_tasks,
        "repeats": profile.p6_repeats,
        "cpu_count": os.cpu_count(),
        "dsh_batch_nothing_to_run_s": startup,
        "per_latency": per_latency,
    }
    return rows, meta_all
