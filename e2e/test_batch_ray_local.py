"""``dsh batch --ray`` without an address: the local cluster dsh starts for the batch.

The real ``dsh`` executable is the driver (started as a terminal starts it, in a session
of its own, stdout and stderr pipes, i.e. not a TTY), the product is the example
provider's scripted child. Every process of the run carries a marker in its environment
(Ray's processes inherit dsh's environment), so the accounting sees every Ray process
the batch started, wherever it was re-parented. This process is a child subreaper, so
nothing escapes to init either.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest
from dsh_subprocess.testing import become_subreaper, reap_adopted_zombies
from unprivileged import unprivileged

pytest.importorskip("ray", reason="ray cannot be imported on this Python (dsh-batch[ray])")

# One worker runs every Ray cluster test: clusters started side by side contend for
# Ray's fixed default ports (client server, dashboard agent).
pytestmark = [pytest.mark.keyless, pytest.mark.xdist_group("ray")]

DSH = Path(sys.executable).with_name("dsh")
REPO = Path(__file__).resolve().parents[1]
MARKER_NAME = "PROCESS_MARKER_FOR_DSH_RAY_LOCAL_TESTS"
GONE_WITHIN_SECONDS = 30.0
"""Separates the guard's kill (at once) from Ray's own orphan checks (about a minute).

Without the guard Ray's agents outlive a SIGKILLed driver by about a minute; the guard
SIGKILLs the whole tree as soon as dsh's lifeline closes. The bound is loose on purpose
(a loaded 2-core machine); the measured figure is printed.
"""


@dataclass
class Run:
    root: Path
    env: dict[str, str]
    marker: str
    profile: Path

    def marked(self) -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.environ().get(MARKER_NAME) == self.marker:
                    found.append(proc)
            except psutil.Error:
                continue
        return [proc for proc in found if _alive(proc)]

    def argv(self, tasks: Path, *extra: str) -> list[str]:
        out = self.root / "results.jsonl"
        profile = str(self.profile)
        command = ["batch", profile, "subagent_example", str(tasks), "--out", str(out)]
        return [str(DSH), *command, *extra, "--ray"]

    def tasks(self, *lines: dict[str, str]) -> Path:
        path = self.root / "tasks.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
        return path


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@dataclass
class Started:
    """A ``dsh`` started as a terminal starts it; ``stderr`` is read once it has ended."""

    proc: subprocess.Popen[str]  # noqa: TID251 - the dsh executable, not a product
    stderr: str = ""

    def wait_mid_task(self, run: Run, token: str) -> None:
        """Until the held product wrote its ready file (dsh exiting first fails the test)."""
        while not (run.root / "ready" / token).exists():
            if self.proc.poll() is not None:
                pytest.fail(f"dsh exited {self.proc.returncode} early: {self.proc.communicate()}")
            time.sleep(0.1)


@contextmanager
def started(run: Run, argv: list[str], env: dict[str, str] | None = None) -> Iterator[Started]:
    """``dsh`` in a session of its own with pipes; killed with its group if still running."""
    proc = subprocess.Popen(  # noqa: TID251 - the dsh executable, as a terminal starts it
        argv,
        env=run.env if env is None else env,
        cwd=run.root,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    dsh = Started(proc)
    try:
        yield dsh
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        dsh.stderr = proc.communicate()[1]


@pytest.fixture
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    become_subreaper()
    # Short: Ray's unix socket paths under its temporary directory must fit in 107 bytes.
    root = Path(tmp_path_factory.mktemp("rl", numbered=True))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_", "RAY_"))}
    # As on a user's machine: Ray's processes import from cached bytecode. Compiling Ray
    # afresh in every process makes its agents miss the raylet's fixed 15 s start window
    # on a loaded machine.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for name in ("HOME", "TMPDIR"):
        (root / name.lower()).mkdir()
        env[name] = str(root / name.lower())
    marker = uuid.uuid4().hex
    env[MARKER_NAME] = marker
    ready = root / "ready"
    ready.mkdir()
    profile = root / "profile.toml"
    profile.write_text(
        # The holding child writes its ready file there: outside its cwd, so the
        # instance grants it, as a user grants a product's extra path.
        '[[providers]]\ntype = "example"\n\n[providers.config]\n'
        f"confinement = {{ write = [{json.dumps(str(ready))}] }}\n\n"
        "[providers.config.env]\n"
        f"DSH_CONTRACT_READY_DIR = {json.dumps(str(ready))}\n\n"
        '[[tools]]\nname = "subagent_example"\nprovider = "example"\n'
        'background_mode = "disabled"\n',
        encoding="utf-8",
    )
    box = Run(root, env, marker, profile)
    try:
        yield box
    finally:
        left = box.marked()
        for proc in left:
            proc.kill()
        reap_adopted_zombies()
        assert not left, f"left behind: {[proc.name() for proc in left]}"
        assert not (root / "home" / ".ray").exists(), "Ray wrote to the home directory"


def test_a_local_cluster_runs_the_batch_prints_only_dshs_lines_and_is_gone_after(
    run: Run,
) -> None:
    tasks = run.tasks({"id": "a", "task": "hello"}, {"id": "b", "task": "hello"})
    done = subprocess.run(
        run.argv(tasks),
        env=run.env,
        cwd=run.root,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert all(line.startswith("dsh: ") for line in lines), lines  # no Ray notice, no colour
    assert lines[-1].startswith("dsh: batch: 2 completed, 0 failed; results in")
    assert run.marked() == []  # every process of the cluster is gone once dsh exits


@pytest.mark.parametrize("length", [40, 64])
def test_a_long_tmpdir_still_starts_the_cluster_in_a_private_directory_removed_after(
    run: Run, length: int
) -> None:
    # TMPDIR of exactly `length` characters (a short base, padded): 40 is what Ray's
    # session sockets under it no longer fit, 64 is macOS's /var/folders/…/T/ and longer.
    base = Path(tempfile.mkdtemp(prefix="rl-", dir="/tmp"))
    try:
        tmpdir = base / ("t" * (length - len(str(base)) - 1))
        tmpdir.mkdir()
        assert len(str(tmpdir)) == length
        tasks = run.tasks({"id": "a", "task": "hello"})
        done = subprocess.run(
            [*run.argv(tasks), "-v"],
            env={**run.env, "TMPDIR": str(tmpdir)},
            cwd=run.root,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        assert done.stderr.splitlines()[-1].startswith("dsh: batch: 1 completed, 0 failed")
        prefix = "dsh.product.ray: the local Ray cluster's directory: "
        (where,) = [
            line[len(prefix) :] for line in done.stderr.splitlines() if line.startswith(prefix)
        ]
        session = Path(where)
        assert session.name.startswith("dshray-")
        assert len(session.name) == len("dshray-") + 8
        assert not session.exists()  # removed once the cluster is gone
        assert list(tmpdir.iterdir()) == []
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert run.marked() == []


@contextmanager
def _otlp_receiver() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    """An OTLP/HTTP collector on loopback: its endpoint and the (path, body) it received."""
    received: list[tuple[str, bytes]] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            with lock:
                received.append((self.path, body))
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _delegation_spans(received: list[tuple[str, bytes]]) -> list[dict[str, str]]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    spans = []
    for path, body in received:
        if path != "/v1/traces":
            continue
        for resource in ExportTraceServiceRequest.FromString(body).resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    if span.name.startswith("invoke_agent "):
                        attributes = {a.key: a.value.string_value for a in span.attributes}
                        spans.append({"name": span.name, **attributes})
    return spans


def test_with_the_otel_variables_the_actors_export_each_delegation(run: Run) -> None:
    pytest.importorskip("dsh_otel", reason="dsh-otel is not installed (dsh-cli[otel])")
    tasks = run.tasks({"id": "a", "task": "hello"}, {"id": "b", "task": "hello"})
    with _otlp_receiver() as (endpoint, received):
        done = subprocess.run(
            run.argv(tasks),
            env={**run.env, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint},
            cwd=run.root,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert all(line.startswith("dsh: ") for line in done.stderr.splitlines()), done.stderr
    assert "telemetry" not in done.stderr  # nothing to warn about: the actors export
    spans = _delegation_spans(received)
    assert [span["dsh.stop_reason"] for span in spans] == ["completed", "completed"], spans
    assert len({span["dsh.run.id"] for span in spans}) == 2  # two runs, not one twice


def test_uv_run_dsh_batch_ray_works_in_a_uv_project(run: Run) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH: `uv run` cannot be tried here")
    tasks = run.tasks({"id": "a", "task": "hello"})
    # `uv run` in this project, as a uv user starts dsh; the bundle has no pyproject.toml.
    done = subprocess.run(
        [uv, "run", "--no-sync", "--project", str(REPO), "dsh", *run.argv(tasks)[1:]],
        env=run.env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1].startswith("dsh: batch: 1 completed, 0 failed")


def test_after_ctrl_c_nothing_dsh_caused_is_alive_when_it_exits(run: Run) -> None:
    tasks = run.tasks(
        {"id": "held", "task": "dsh-contract/1 hold T-77777777"},
        {"id": "held2", "task": "dsh-contract/1 hold T-88888888"},
        {"id": "queued", "task": "hello"},
    )
    with started(run, run.argv(tasks, "--concurrency", "2")) as dsh:
        for token in ("T-77777777", "T-88888888"):  # both mid-task
            dsh.wait_mid_task(run, token)
        # What dsh caused, by pid: its descendants now (the guards' environment is their
        # own, without the marker) and whatever carries the marker.
        caused = {p.pid: p for p in psutil.Process(dsh.proc.pid).children(recursive=True)}
        caused.update((p.pid, p) for p in run.marked())
        os.killpg(dsh.proc.pid, signal.SIGINT)  # Ctrl-C in the terminal: dsh's process group
        dsh.proc.wait(timeout=600)
        left = [f"{p.pid} {p.cmdline()[:4]}" for p in caused.values() if _alive(p)]
        left += [f"{p.pid} {p.cmdline()[:4]}" for p in run.marked() if p.pid not in caused]
    assert dsh.proc.returncode == 130, dsh.stderr
    assert left == [], left


def test_after_dsh_is_sigkilled_mid_batch_every_process_of_its_cluster_is_gone(
    run: Run,
) -> None:
    tasks = run.tasks({"id": "held", "task": "dsh-contract/1 hold T-5ca1ab1e"})
    with started(run, run.argv(tasks)) as dsh:
        dsh.wait_mid_task(run, "T-5ca1ab1e")
        cluster = run.marked()
        names = {p.name() for p in cluster}
        assert {"raylet", "gcs_server"} <= names, names
        assert any(name.startswith("ray::") for name in names), names
        dsh.proc.send_signal(signal.SIGKILL)
        dsh.proc.wait()
        killed = time.monotonic()
        _, alive = psutil.wait_procs(cluster, timeout=60)
        gone_after = time.monotonic() - killed
    assert alive == [], [p.name() for p in alive]
    print(f"every cluster process gone {gone_after:.2f} s after the SIGKILL")
    assert gone_after < GONE_WITHIN_SECONDS


def _cluster_directory(stderr: str) -> Path:
    prefix = "dsh.product.ray: the local Ray cluster's directory: "
    (where,) = [line[len(prefix) :] for line in stderr.splitlines() if line.startswith(prefix)]
    return Path(where)


def test_the_cluster_directory_a_sigkilled_dsh_left_is_removed_by_the_next_run(
    run: Run,
) -> None:
    # The guard ends a killed dsh's cluster but knows nothing of its directory: the next
    # `dsh batch --ray` that starts a cluster in the same place (here /tmp: the fixture's
    # TMPDIR is too long for Ray's sockets) removes it.
    tasks = run.tasks({"id": "held", "task": "dsh-contract/1 hold T-d1ed0000"})
    with started(run, [*run.argv(tasks), "-v"]) as dsh:
        dsh.wait_mid_task(run, "T-d1ed0000")
        cluster = run.marked()
        dsh.proc.send_signal(signal.SIGKILL)
        dsh.proc.wait()
        _, alive = psutil.wait_procs(cluster, timeout=60)
    assert alive == [], [p.name() for p in alive]
    left = _cluster_directory(dsh.stderr)
    assert left.is_dir()  # what the kill -9 leaves
    tasks = run.tasks({"id": "next", "task": "hello"})
    done = subprocess.run(
        [*run.argv(tasks), "-v"],
        env=run.env,
        cwd=run.root,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"dsh.product.ray: removed a killed run's cluster directory: {left}" in done.stderr
    assert not left.exists()
    assert not _cluster_directory(done.stderr).exists()  # its own, removed as it ended


# Every readable environ and cmdline, searched for a planted value, as a product would.
SCAN = (
    "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f; done "
    "2>/dev/null | grep -o 'dsh-planted-[0-9a-f]\\{32\\}' | sort -u; "
    "n=0; for f in /proc/[0-9]*/environ; do cat $f >/dev/null 2>&1 && n=$((n+1)); done; "
    "echo readable=$n"
)


def test_no_process_of_the_batch_a_same_user_product_can_read_holds_the_hosts_secret(
    run: Run,
) -> None:
    """dsh (the driver) and its actors are not dumpable; Ray's own processes never get it.

    Everything runs without capabilities (``unprivileged``): root's CAP_SYS_PTRACE would
    read a not-dumpable process anyway. The scan runs while the product is mid-task.
    """
    secret = f"dsh-planted-{uuid.uuid4().hex}"
    tasks = run.tasks({"id": "held", "task": "dsh-contract/1 hold T-0dd5ec7e"})
    short_tmp = tempfile.mkdtemp(prefix="rl", dir="/tmp")
    # A short TMPDIR: Ray's socket paths under it must fit in 107 bytes.
    env = {**run.env, "OPENAI_API_KEY": secret, "TMPDIR": short_tmp}
    try:
        with started(run, unprivileged(run.argv(tasks)), env) as dsh:
            dsh.wait_mid_task(run, "T-0dd5ec7e")
            scan = subprocess.run(
                unprivileged(["sh", "-c", SCAN]), capture_output=True, text=True, check=True
            )
            cluster = run.marked()
            holders = []  # this test runs as root: it reads every environ
            for member in cluster:
                try:
                    if secret in member.environ().values():
                        holders.append(member.pid)
                except psutil.Error:
                    continue
            # The pool's actors (Ray titles them after the class); Ray's idle workers hold
            # nothing of dsh's and stay as Ray makes them.
            actors = [p.pid for p in cluster if "BatchActor" in " ".join(p.cmdline())]
            actor_environ = [
                subprocess.run(unprivileged(["cat", f"/proc/{pid}/environ"]), capture_output=True)
                for pid in actors
            ]
    finally:
        psutil.wait_procs(run.marked(), timeout=60)
        shutil.rmtree(short_tmp, ignore_errors=True)
    assert secret not in scan.stdout
    assert int(scan.stdout.rsplit("readable=", 1)[1]) > 0  # the scan did read environs
    assert holders == [dsh.proc.pid]  # only dsh itself, which is not dumpable
    assert actors, [p.name() for p in cluster]
    assert all(b"Permission denied" in done.stderr for done in actor_environ), [
        (pid, done.stderr) for pid, done in zip(actors, actor_environ, strict=True)
    ]


_PYTHON_BATCH = """
import json, sys
from dsh_batch import Notice, run_batch

notices = []
records = run_batch(
    [{"id": "a", "task": "hello"}, {"id": "b", "task": "hello"}],
    profile=sys.argv[1],
    target="subagent_example",
    out=sys.argv[2],
    ray=True,
    concurrency=2,
    observer=lambda event: notices.append(event.text) if isinstance(event, Notice) else None,
)
print(json.dumps([[r.id, r.stop_reason, r.answer] for r in records]))
print(json.dumps(notices))
"""


def test_run_batch_on_ray_returns_the_records_and_leaves_no_process(run: Run) -> None:
    """The Python entry point on dsh's own local cluster: the records come back in task
    order, the results file holds them, and nothing of the cluster outlives the call."""
    out = run.root / "py-results.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", _PYTHON_BATCH, str(run.profile), str(out)],
        env=run.env,
        cwd=run.root,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    records, notices = (json.loads(line) for line in done.stdout.splitlines())
    assert records == [["a", "completed", "done"], ["b", "completed", "done"]]
    assert notices == []
    assert sorted(json.loads(line)["id"] for line in out.read_text().splitlines()) == ["a", "b"]
    assert run.marked() == []
