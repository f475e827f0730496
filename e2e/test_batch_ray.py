"""``dsh batch --ray`` on a local Ray cluster this module starts, against the REAL Codex and
the example provider's scripted child (for the pool's timing, death and Ctrl-C cases).

The cluster is what a user starts on a head node (``ray start --head``), with two CPUs,
no dashboard, usage statistics off and every address on loopback
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes Ray bind 127.0.0.1 instead of the
machine's network address). The real ``dsh`` executable is the driver. The Codex home
the product reads lives in the batch's ``--files`` directory and reaches the workers only
through Ray's runtime environment: the test proves the product used the unpacked copy.

Ray keeps idle workers (and each worker's guard server) for the next task, so this
module replaces the workspace's leftover check with one that lets the cluster's own
processes live until the module ends and fails on anything else, i.e. any product. The
pool's actors are not such processes: each test checks that none outlives its batch.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from dsh_contract_tests.fixtures import responses
from dsh_subprocess import GUARD_PATH
from dsh_subprocess.testing import ProcessWatch, SeenProcess

pytest.importorskip("ray", reason="ray cannot be imported on this Python (dsh-batch[ray])")

# One worker runs every Ray cluster test: clusters started side by side contend for
# Ray's fixed default ports (client server, dashboard agent).
pytestmark = [pytest.mark.keyless, pytest.mark.xdist_group("ray")]

BIN = Path(sys.executable).parent
DSH, RAY = BIN / "dsh", BIN / "ray"
_LEFTOVER_GRACE_SECONDS = 5.0


def answer_for(task_id: str) -> str:
    return f"ANSWER-{task_id.upper()}"


def task_line(task_id: str) -> str:
    task = f"BATCH-TASK {task_id}: reply with your sentinel and nothing else."
    return json.dumps({"id": task_id, "task": task})


@dataclass
class Router:
    """Answers each task by id; the first request of a ``hold_first`` id is held."""

    hold_first: set[str] = field(default_factory=set)
    seen: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: responses.RecordedRequest) -> responses.Behaviour | None:
        body = json.dumps(request.body)
        start = body.find("BATCH-TASK ")
        if start < 0:
            return None
        task_id = body[start + len("BATCH-TASK ") :].split(":", 1)[0]
        with self.lock:
            first = task_id not in self.seen
            self.seen.append(task_id)
        if first and task_id in self.hold_first:
            return responses.Hold()
        return responses.PlainAnswer(answer_for(task_id), "final_answer")

    def count(self, task_id: str) -> int:
        with self.lock:
            return self.seen.count(task_id)


@dataclass(frozen=True)
class Cluster:
    address: str
    env: dict[str, str]
    temp_dir: Path


def _is_cluster_process(proc: psutil.Process) -> bool:
    """Ray's own daemons and workers, and the guard servers the workers keep."""
    try:
        name, cmdline = proc.name(), proc.cmdline()
    except psutil.Error:
        return False
    if name.startswith("ray::") or name in {"raylet", "gcs_server"}:
        return True
    if any(f"{os.sep}ray{os.sep}" in part for part in cmdline[:3]):
        return True
    return len(cmdline) > 3 and cmdline[3] == GUARD_PATH


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # Short: Ray's unix socket paths under its temp dir must fit in 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="dshray-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # Ray's agents must start within 15 s
    for name in ("HOME", "TMPDIR"):
        (root / name.lower()).mkdir()
        env[name] = str(root / name.lower())
    env.update(
        RAY_USAGE_STATS_ENABLED="0",
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",  # loopback only
        PROCESS_MARKER_FOR_DSH_RAY_TESTS=uuid.uuid4().hex,
    )
    address = f"127.0.0.1:{_free_port()}"
    watch = ProcessWatch()
    try:
        started = subprocess.run(
            [
                str(RAY),
                "start",
                "--head",
                "--num-cpus=2",
                "--include-dashboard=false",
                "--disable-usage-stats",
                f"--port={address.rsplit(':', 1)[1]}",
                f"--temp-dir={root / 'ray'}",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert started.returncode == 0, started.stdout + started.stderr
        yield Cluster(address, env, root / "ray")
    finally:
        # Every process the cluster started is ours (a descendant of this subreaper).
        watch.kill_leftovers()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def no_leftover_processes() -> Iterator[None]:
    """Only the cluster's own processes may outlive a test (see the module docstring)."""
    watch = ProcessWatch()
    yield
    deadline = time.monotonic() + _LEFTOVER_GRACE_SECONDS

    def strangers() -> list[SeenProcess]:
        return [seen for seen in watch.alive() if not _is_cluster_process(seen.process)]

    while (left := strangers()) and time.monotonic() < deadline:
        psutil.wait_procs([seen.process for seen in left], timeout=0.2)
    for seen in left:
        seen.process.kill()
    if left:
        pytest.fail("test left processes behind: " + "; ".join(str(seen) for seen in left))


@dataclass
class Batch:
    root: Path
    files: Path
    profile: Path
    router: Router
    model: responses.ResponsesFixture

    def tasks(self, *lines: str) -> Path:
        path = self.root / "tasks.jsonl"
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        return path

    @property
    def out(self) -> Path:
        return self.root / "results.jsonl"

    def records(self) -> dict[str, dict[str, Any]]:
        lines = self.out.read_text(encoding="utf-8").splitlines()
        return {record["id"]: record for record in map(json.loads, lines)}

    def argv(self, cluster: Cluster, tasks: Path, *extra: str) -> list[str]:
        return [
            str(DSH),
            "batch",
            str(self.profile),
            "subagent_codex",
            str(tasks),
            "--out",
            str(self.out),
            "--files",
            str(self.files),
            "--ray",
            cluster.address,
            *extra,
        ]


@pytest.fixture
def batch(tmp_path: Path) -> Iterator[Batch]:
    router = Router()
    with responses.ResponsesFixture(route=router) as model:
        files = tmp_path / "files"
        codex_env = responses.codex_keyless_env(files / "codex")
        responses.write_codex_config(codex_env["CODEX_HOME"], model.base_url)
        # The profile names the shipped files by ${DSH_FILES}, never by a head-node path.
        env = {key: value.replace(str(files), "${DSH_FILES}") for key, value in codex_env.items()}
        table = "\n".join(f"{key} = {json.dumps(value)}" for key, value in env.items())
        profile = tmp_path / "profile.toml"
        profile.write_text(
            '[[providers]]\ntype = "codex"\n\n[providers.config.env]\n'
            f"{table}\n\n"
            '[[tools]]\nname = "subagent_codex"\nprovider = "codex"\n'
            'background_mode = "disabled"\n',
            encoding="utf-8",
        )
        yield Batch(tmp_path, files, profile, router, model)


def test_a_batch_on_ray_runs_each_task_in_a_worker_with_the_shipped_files(
    cluster: Cluster, batch: Batch
) -> None:
    tasks = batch.tasks(task_line("one"), task_line("two"), task_line("three"))
    with ProcessWatch() as watch:
        done = subprocess.run(
            batch.argv(cluster, tasks),
            env=cluster.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    written = batch.out.read_text(encoding="utf-8") if batch.out.exists() else "(none)"
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\nrecords:\n{written}"
    assert "dsh: batch: 3 completed, 0 failed; results in" in done.stderr
    records = batch.records()
    assert {key: value["answer"] for key, value in records.items()} == {
        task_id: answer_for(task_id) for task_id in ("one", "two", "three")
    }
    assert [batch.router.count(i) for i in ("one", "two", "three")] == [1, 1, 1]
    codex_runs = [seen for seen in watch.seen if seen.name == "codex"]
    assert len(codex_runs) >= 3
    assert not [seen for seen in watch.alive() if seen.name == "codex"]
    # The products ran on the copy Ray unpacked, never on the driver's directory.
    assert sorted(p.name for p in (batch.files / "codex" / "codex-home").iterdir()) == [
        "config.toml"
    ]
    unpacked = cluster.temp_dir.glob("session_*/runtime_resources/working_dir_files/*/codex")
    used = [d for d in unpacked if len(list((d / "codex-home").iterdir())) > 1]
    assert used, unpacked


def _ancestor_worker(proc: psutil.Process) -> psutil.Process:
    for parent in proc.parents():
        if parent.name().startswith("ray::"):
            return parent
    raise AssertionError(f"no Ray worker above {proc}")


@pytest.mark.parametrize("retries", [0, 1])
def test_a_ray_actor_killed_mid_task_leaves_no_product_and_is_failed_or_retried(
    cluster: Cluster, batch: Batch, retries: int
) -> None:
    batch.router.hold_first.add("victim")
    tasks = batch.tasks(task_line("victim"))
    watch = ProcessWatch()
    proc = subprocess.Popen(  # noqa: TID251 - the dsh executable, as a terminal starts it
        [*batch.argv(cluster, tasks), "--ray-retries", str(retries)],
        env=cluster.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        while batch.model.holding < 1:  # the product is mid-task: its request is held
            if proc.poll() is not None:
                pytest.fail(f"dsh exited {proc.returncode} early: {proc.communicate()}")
            time.sleep(0.05)
        # The task's product and the one the actor keeps ready (docs/harness.md, "Ready
        # products"): both trees must end with the worker.
        codexes = [seen.process for seen in watch.alive() if seen.name == "codex"]
        assert codexes, "no Codex app-server is running the task"
        worker = _ancestor_worker(codexes[0])
        tree: list[psutil.Process] = []
        for codex in codexes:
            parents = codex.parents()
            guards = parents[: parents.index(worker)]  # between the worker and the product
            tree += [codex, *codex.children(recursive=True), *guards]
        worker.send_signal(signal.SIGKILL)
        _, alive = psutil.wait_procs(tree, timeout=60)
        assert alive == [], "the killed worker's product tree survived it"
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    (record,) = batch.records().values()
    if retries == 0:
        assert proc.returncode == 1, err
        assert record["stop_reason"] == "error"
        assert record["diagnostic"] == (
            "the Ray actor running this task died (ActorDiedError; --ray-retries 0)"
        )
        assert batch.router.count("victim") == 1
    else:
        assert proc.returncode == 0, err
        assert (record["stop_reason"], record["answer"]) == ("completed", answer_for("victim"))
        assert batch.router.count("victim") == 2
        # The retry is one line of the normal output (no -v).
        assert (
            "dsh: victim: the Ray actor running it died (ActorDiedError); running it again "
            "from scratch (attempt 2 of 2)"
        ) in err.splitlines(), err
    assert out == ""
    # Ray's own notice of the dead worker is dsh logging, shown with -v only.
    assert all(line.startswith("dsh: ") for line in err.splitlines()), err


# -- the pool, with the example provider's scripted child ------------------------------

Dsh = subprocess.Popen[str]  # noqa: TID251 - the dsh executable, as a terminal starts it
ACTOR_GONE_WITHIN_SECONDS = 60.0
"""A loose bound for Ray to end a killed actor's process (a loaded 2-core machine)."""


def _actors() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.name().startswith("ray::BatchActor") and proc.status() != "zombie":
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _no_actor_left() -> None:
    _, alive = psutil.wait_procs(_actors(), timeout=ACTOR_GONE_WITHIN_SECONDS)
    assert alive == [], f"actors outlived their batch: {alive}"


@dataclass
class Example:
    root: Path
    ready: Path
    profile: Path

    def tasks(self, *rows: tuple[str, str]) -> Path:
        path = self.root / "tasks.jsonl"
        lines = [json.dumps({"id": task_id, "task": task}) for task_id, task in rows]
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        return path

    @property
    def out(self) -> Path:
        return self.root / "results.jsonl"

    def records(self) -> dict[str, dict[str, Any]]:
        if not self.out.exists():
            return {}
        lines = self.out.read_text(encoding="utf-8").splitlines()
        return {record["id"]: record for record in map(json.loads, lines)}

    def popen(
        self,
        cluster: Cluster,
        tasks: Path,
        *extra: str,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> Dsh:
        argv = [str(DSH), "batch", str(self.profile), "subagent_example", str(tasks)]
        argv += ["--out", str(self.out), "--cwd", str(cwd or self.root)]
        argv += ["--ray", cluster.address]
        return subprocess.Popen(  # noqa: TID251 - the dsh executable, as a terminal starts it
            [*argv, *extra],
            env=cluster.env if env is None else env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def starts(self, name: str) -> int:
        path = self.ready / f"{name}.starts"
        return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


@pytest.fixture
def example(tmp_path: Path) -> Example:
    ready = tmp_path / "ready"
    ready.mkdir()
    profile = tmp_path / "profile.toml"
    profile.write_text(
        '[[providers]]\ntype = "example"\n\n[providers.config.env]\n'
        f"DSH_CONTRACT_READY_DIR = {json.dumps(str(ready))}\n\n"
        '[[tools]]\nname = "subagent_example"\nprovider = "example"\n'
        'background_mode = "disabled"\n',
        encoding="utf-8",
    )
    return Example(tmp_path, ready, profile)


def _wait(proc: Dsh, until: Any, what: str) -> None:
    """Until ``until()`` holds (an event the test waits on); dsh must still be running."""
    while not until():
        if proc.poll() is not None:
            pytest.fail(f"dsh exited {proc.returncode} before {what}: {proc.communicate()}")
        time.sleep(0.05)


def _held_product() -> psutil.Process:
    """The example child that holds its task (the one with a grandchild) under a Ray
    worker: other tests of the suite run the example child too, outside Ray."""
    for proc in psutil.process_iter():
        try:
            if (
                "dsh_example_provider.child" in " ".join(proc.cmdline())
                and proc.children()
                and any(parent.name().startswith("ray::") for parent in proc.parents())
            ):
                return proc
        except psutil.Error:
            continue
    raise AssertionError("no held product found")


def test_a_killed_actors_task_is_failed_from_its_start_and_the_pool_goes_on(
    cluster: Cluster, example: Example
) -> None:
    # Three actors on two CPUs: the third is never placed, so "victim" waits on the driver
    # until "a" or "b" (held at the gate "go") settles. Its record must time it from
    # there, not from the moment the batch began.
    tasks = example.tasks(
        ("a", "dsh-example/wait-for go"),
        ("b", "dsh-example/wait-for go"),
        ("victim", "dsh-contract/1 hold T-0000dead"),
        ("c", "dsh-example/wait-for go2"),
        ("d", "hello"),
    )
    proc = example.popen(cluster, tasks, "--concurrency", "3")
    try:
        _wait(proc, lambda: example.starts("go") == 2, "a and b started")
        gate_opened = time.monotonic()
        (example.ready / "go").touch()
        _wait(proc, lambda: (example.ready / "T-0000dead").exists(), "the victim held")
        held = time.monotonic()
        product = _held_product()
        actor = _ancestor_worker(product)
        tree = [product, *product.children(recursive=True)]
        actor.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        _, alive = psutil.wait_procs(tree, timeout=60)
        assert alive == [], "the killed actor's product tree survived it"
        _wait(proc, lambda: "victim" in example.records(), "the victim's record")
        recorded = time.monotonic()
        (example.ready / "go2").touch()  # the pool goes on after the death
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 1, err
    records = example.records()
    assert {key: value["stop_reason"] for key, value in records.items()} == {
        "a": "completed",
        "b": "completed",
        "victim": "error",
        "c": "completed",
        "d": "completed",
    }
    victim = records["victim"]
    # From its start (after the gate opened) to its death, as the driver learnt of it.
    assert killed - held <= victim["elapsed_seconds"] <= recorded - gate_opened
    assert victim["diagnostic"] == (
        "the Ray actor running this task died (ActorDiedError; --ray-retries 0)"
    )
    assert "dsh: batch: 4 completed, 1 failed" in err
    assert out == ""
    _no_actor_left()


def test_ctrl_c_cancels_every_running_task_on_the_pool_and_exits_130(
    cluster: Cluster, example: Example
) -> None:
    tasks = example.tasks(
        ("one", "dsh-example/wait-for never"),
        ("two", "dsh-example/wait-for never"),
        ("three", "hello"),
    )
    watch = ProcessWatch()
    proc = example.popen(cluster, tasks, "--concurrency", "2")
    try:
        _wait(proc, lambda: example.starts("never") == 2, "both tasks started")
        products = [seen.process for seen in watch.alive() if "child" in " ".join(seen.argv)]
        assert len(products) >= 2, watch.alive()
        # What dsh caused under its actors: each actor's guard server, the products'
        # guards, the products. (The actors' own processes Ray ends after `ray.kill`,
        # which does not wait: `_no_actor_left` below.)
        caused = [p for actor in _actors() for p in actor.children(recursive=True)]
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal: the whole group
        proc.wait(timeout=600)
        # At the moment dsh exits: each actor's close returned only once its guard
        # server, the guards and their trees were gone.
        at_exit = [f"{p.pid} {p.name()} {p.cmdline()[:4]}" for p in alive_of(caused)]
        _, err = proc.communicate()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, err
    assert "dsh: SIGINT: cancelling 2 running task(s) on Ray" in err
    assert "dsh: batch interrupted; run the same command again to resume" in err
    assert example.records() == {}  # cancelled runs are not recorded: resume runs them
    assert alive_of(products) == []  # each run returned only once its tree was gone
    assert at_exit == [], at_exit  # dsh exits once everything it caused is gone
    _no_actor_left()


def test_otel_variables_the_nodes_lack_are_one_warning_line(
    cluster: Cluster, example: Example
) -> None:
    pytest.importorskip("dsh_otel", reason="dsh-otel is not installed (dsh-cli[otel])")
    tasks = example.tasks(("a", "hello"))
    # Set for dsh only: the cluster's processes were started without them. (Traces only,
    # and the driver delegates nothing, so nothing is sent to the closed port.)
    env = {**cluster.env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9/v1/traces"}
    proc = example.popen(cluster, tasks, env=env)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert out == ""
    warnings = [line for line in err.splitlines() if "telemetry" in line]
    assert warnings == [
        "dsh: warning: the Ray actors export no telemetry: the OTEL_EXPORTER_OTLP_* "
        "variables are not set where the node's Ray runs (dsh never ships the driver's "
        "environment)"
    ]
    assert example.records()["a"]["stop_reason"] == "completed"
    _no_actor_left()


def alive_of(procs: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


# -- Ray Data: map_batches(Delegate) in a pipeline --------------------------------------

PIPELINE = """
import sys

import ray
from dsh_batch.ray_data import Delegate

address, bundle, tasks, cwd, out_json, out_parquet = sys.argv[1:]
ray.init(address=address, runtime_env={"working_dir": bundle}, log_to_driver=False)
ray.data.DataContext.get_current().enable_progress_bars = False
rows = ray.data.read_json(tasks)
done = rows.map_batches(
    Delegate,
    fn_constructor_kwargs={"profile": "profile.toml", "target": "subagent_example", "cwd": cwd},
    compute=ray.data.ActorPoolStrategy(size=2),
    batch_size=1,
    num_cpus=0.5,  # two actors on one CPU: the other is for reading the file
).materialize()
done.write_json(out_json)
done.write_parquet(out_parquet)
ray.shutdown()
"""


def _map_workers() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if "MapWorker" in proc.name() and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_a_ray_data_pipeline_delegates_each_row_and_survives_a_killed_actor(
    cluster: Cluster, example: Example
) -> None:
    pq = pytest.importorskip("pyarrow.parquet", reason="Ray Data needs pyarrow (dev group)")
    bundle = example.root / "bundle"
    bundle.mkdir()
    shutil.copyfile(example.profile, bundle / "profile.toml")
    tasks = example.tasks(
        ("r1", "hello"),
        ("gated", "dsh-example/wait-for gate"),
        ("r3", "dsh-contract/1 complete T-000000c3"),
        ("r4", "dsh-contract/1 fail T-000000f4"),
    )
    out_json, out_parquet = example.root / "out-json", example.root / "out-parquet"
    argv = [sys.executable, "-c", PIPELINE, cluster.address, str(bundle), str(tasks)]
    argv += [str(example.root), str(out_json), str(out_parquet)]
    # Under `uv run` (as these tests run) Ray's uv hook would want this project's
    # pyproject.toml in the job's working_dir; a user shipping a bundle turns it off too.
    env = {**cluster.env, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    proc: Dsh = subprocess.Popen(  # noqa: TID251 - a Ray driver, as a user's script runs
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _wait(proc, lambda: example.starts("gate") == 1, "the gated row started")
        product = _only_product_under_a_map_worker(proc)
        (actor,) = [a for a in product.parents() if "MapWorker" in a.name()]
        tree = [product, *product.children(recursive=True)]
        actor.send_signal(signal.SIGKILL)  # mid-batch: its row's product is working
        _, alive = psutil.wait_procs(tree, timeout=60)
        assert alive == [], "the killed actor's product tree survived it"
        (example.ready / "gate").touch()
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, err[-4000:]
    rows = [
        json.loads(line)
        for path in sorted(out_json.glob("*.json*"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    by_id = {row["id"]: row for row in rows}
    assert sorted(by_id) == ["gated", "r1", "r3", "r4"]
    assert {key: row["stop_reason"] for key, row in by_id.items()} == {
        "r1": "completed",
        "gated": "completed",  # Ray Data restarted the actor and ran the row again
        "r3": "completed",
        "r4": "error",
    }
    assert (by_id["r1"]["answer"], by_id["r3"]["answer"]) == ("done", "T-000000c3")
    assert "category: child-error" in by_id["r4"]["diagnostic"]
    assert all(row["elapsed_seconds"] >= 0 for row in rows)
    assert example.starts("gate") == 2  # the killed attempt, then the one that answered
    table = pq.read_table(out_parquet)
    assert sorted(table.column("id").to_pylist()) == ["gated", "r1", "r3", "r4"]
    assert {"stop_reason", "answer", "diagnostic", "usage", "elapsed_seconds"} <= set(
        table.column_names
    )
    _, left = psutil.wait_procs(_map_workers(), timeout=ACTOR_GONE_WITHIN_SECONDS)
    assert left == [], f"Ray Data's actors outlived the pipeline: {left}"


def _only_product_under_a_map_worker(proc: Dsh) -> psutil.Process:
    """The gated row's product: the others answer at once, so it is the one left."""

    def products() -> list[psutil.Process]:
        found = []
        for candidate in psutil.process_iter():
            try:
                if "dsh_example_provider.child" in " ".join(candidate.cmdline()) and any(
                    "MapWorker" in parent.name() for parent in candidate.parents()
                ):
                    found.append(candidate)
            except psutil.Error:
                continue
        return found

    # One snapshot answers both: the gated product waits for its gate, so when it is the
    # only one alive it is this one (a second listing could already hold a later row's).
    seen: list[psutil.Process] = []

    def only_one() -> bool:
        seen[:] = products()
        return len(seen) == 1

    _wait(proc, only_one, "only the gated row's product is left")
    (product,) = seen
    return product


def _git(repo: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=T", "-c", "user.email=t@example.invalid", *args],
        cwd=repo,
        env={**env, "GIT_CONFIG_NOSYSTEM": "1"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


def test_worktree_on_ray_gives_each_task_its_branch_on_the_node(
    cluster: Cluster, example: Example
) -> None:
    repo = example.root / "repo"
    repo.mkdir()
    _git(repo, cluster.env, "init", "--quiet", "--initial-branch=main")
    (repo / "readme.txt").write_text("hello\n", encoding="utf-8")
    _git(repo, cluster.env, "add", "--all")
    _git(repo, cluster.env, "commit", "--quiet", "-m", "initial")
    tasks = example.tasks(
        *[(f"t{i}", f"task {i}: dsh-example/write edited.txt") for i in range(3)],
        ("none", "hello"),
    )
    proc = example.popen(cluster, tasks, "--worktree", "--concurrency", "2", cwd=repo)
    out, err = proc.communicate(timeout=600)
    records = example.records()
    assert proc.returncode == 0, f"{err}\n{records}"
    assert out == ""
    for i in range(3):
        changes = records[f"t{i}"]["changes"]
        assert (changes["files_changed"], changes["insertions"]) == (1, 1)
        shown = _git(repo, cluster.env, "show", f"{changes['branch']}:edited.txt")
        assert shown == f"task {i}: dsh-example/write edited.txt"
    assert records["none"]["changes"]["commit"] is None  # nothing changed: branch deleted
    assert len({records[f"t{i}"]["changes"]["branch"] for i in range(3)}) == 3
    assert not (repo / "edited.txt").exists()  # the main tree is never touched
    assert _git(repo, cluster.env, "status", "--porcelain") == ""
    assert len(_git(repo, cluster.env, "worktree", "list").splitlines()) == 1
    _no_actor_left()
