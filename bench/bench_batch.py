"""P6: N keyless Codex tasks through ``dsh batch`` vs one after another through the API,
and ``dsh batch --ray`` on a local Ray cluster vs ``dsh batch`` on this machine.

Each repeat runs, in this order: the N tasks sequentially through
``dsh_subagent.delegate`` on one ``SubagentService`` (in this process), the real ``dsh
batch`` executable on this machine (default concurrency: the CPU count), and the real
``dsh batch --ray ADDRESS`` against a local cluster started once with ``ray start --head``
(two CPUs, loopback only, usage statistics off). Walls are from process start to exit for
the executables (imports, profile load and, for Ray, connecting and shipping the bundle
included). All runs share one warmed CODEX_HOME and one loopback Responses fixture.

Everything runs twice: with an instant model, and with 1 s of simulated model time per
response (the fixture's answering thread sleeps, as a remote model keeps a request
open), since real tasks wait on the model far longer than the product works.

Reported: the throughput ratio sequential-wall / batch-wall, the Ray overhead per task
(Ray wall − local wall) / N, the per-task ``elapsed_seconds`` medians the records carry
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
    root: Path, label: str, env: dict[str, str], home: CodexHome, *extra: str
) -> tuple[float, list[dict[str, Any]]]:
    out = root / f"{label}.jsonl"
    argv = [str(BIN / "dsh"), "batch", str(root / "profile.toml"), "subagent_codex"]
    argv += [str(root / "tasks.jsonl"), "--out", str(out), "--cwd", str(home.workspace)]
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
        return None, "Ray is not installed (dsh-cli[ray]): row not measured"
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
    n = profile.p6_tasks
    label = f"model {latency:g} s"
    sequential = BatchRow(f"{label}: N one after another, Python API (delegate)")
    local = BatchRow(f"{label}: dsh batch, this machine (concurrency = CPU count)")
    on_ray = BatchRow(f"{label}: dsh batch --ray, local 2-CPU cluster", note=ray_note)
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

        wall, records = _dsh_batch(root, f"local-{latency}-{repeat}", env, home)
        local.walls.append(wall)
        _count(local, records, n)

        if address is not None:
            wall, records = _dsh_batch(root, f"ray-{latency}-{repeat}", env, home, "--ray", address)
            on_ray.walls.append(wall)
            _count(on_ray, records, n)
    seq_wall = statistics.median(sequential.walls)
    local_wall = statistics.median(local.walls)
    meta = {
        "model_latency_s": latency,
        "throughput_ratio_batch_over_sequential": seq_wall / local_wall,
        "ray_overhead_per_task_s": (
            (statistics.median(on_ray.walls) - local_wall) / n if on_ray.walls else None
        ),
    }
    return [sequential, local, on_ray], meta


async def run_p6(profile: Profile) -> tuple[list[BatchRow], dict[str, Any]]:
    """Each case ``p6_repeats`` times over ``p6_tasks`` tasks, per simulated model latency."""
    model = _Model()
    rows: list[BatchRow] = []
    per_latency: list[dict[str, Any]] = []
    with temp_root("p6") as root, ResponsesFixture(route=model) as fixture:
        home = codex_home(root / "codex", fixture.base_url)
        _profile(root / "profile.toml", home)
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
                _dsh_batch(root, "startup", env, home)
                startup, _ = _dsh_batch(root, "startup", env, home)
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
        "repeats": profile.p6_repeats,
        "cpu_count": os.cpu_count(),
        "dsh_batch_nothing_to_run_s": startup,
        "per_latency": per_latency,
    }
    return rows, meta_all
