"""The Ray side of ``dsh batch --ray``: importing Ray, its output, the cluster dsh starts.

* **Ray's uv hook is off.** Ray's ``uv run`` runtime-env hook
  (``RAY_ENABLE_UV_RUN_RUNTIME_ENV``, on by default) makes every worker re-run the
  driver's ``uv run`` command inside the job's ``working_dir``. dsh ships its own
  ``working_dir`` (the batch bundle, with no ``pyproject.toml``), and its workers run the
  Python environment the cluster runs, where ``dsh-batch[ray]`` is installed; the hook
  would fail the batch at ``ray.init`` under ``uv run`` and do nothing useful elsewhere.
  So dsh turns it off before it imports Ray, and ``uv run dsh batch --ray`` behaves like
  ``dsh batch --ray`` from a plain virtual environment.
* **Ray's own output is dsh's logging.** Records of the ``ray`` logger and anything Ray
  prints on the driver go to the ``dsh.product.ray`` logger at INFO: ``dsh`` shows them
  with ``-v`` only, so a batch's stderr holds dsh's own lines alone.
* **The cluster dsh starts.** Without an address, no ``RAY_ADDRESS`` and no cluster
  started on this machine with ``ray start``, dsh starts a private one-node cluster on
  loopback for this batch: ``ray start --head --block`` under the host-death guard of
  ``dsh_subprocess`` (every Ray process is a descendant of the guard), no dashboard,
  usage statistics off, its own temporary directory (so no other ``ray.init`` on the
  machine finds it; under ``/tmp`` when ``TMPDIR`` is too long for Ray's unix socket
  paths; one left by a killed ``dsh`` is removed by the next ``dsh batch --ray`` that
  starts a cluster there) and a random token for Ray's token authentication that lives only in the
  environment of dsh and of the cluster (nothing is written to ``~/.ray``). When
  the batch ends the whole tree is terminated; should ``dsh`` itself be killed, the
  guard kills every process of the cluster at once. The cluster's processes (``raylet``,
  ``gcs_server``, Ray's workers) run as the user and are dumpable, so they get dsh's
  environment without what the product scrub withholds (credential-shaped names,
  URL passwords) except the names the profile's ``pass_env`` lists: a product cannot
  read what the cluster never held (``docs/security.md``, "The host's environment").
  dsh's own ``DSH_*`` settings reach the cluster unless credential-shaped.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Collection, Iterator, Mapping
from typing import Any, Final

from anyio.from_thread import start_blocking_portal
from dsh_profiles.errors import UsageError
from dsh_subprocess import (
    SpawnSpec,
    collect_orphaned_dirs,
    is_scrubbed_name,
    is_scrubbed_value,
    make_owned_dir,
    shutdown_guard_server,
    spawn,
)

__all__ = [
    "RAY_LOGGER",
    "RayUnavailableError",
    "cluster_environment",
    "connect_ray",
    "import_ray",
    "local_cluster",
    "one_line",
    "ray_output_as_logging",
]

RAY_LOGGER: Final = "dsh.product.ray"
"""Where Ray's own driver-side records and prints go (shown by ``dsh`` with ``-v``)."""

UV_HOOK_VARIABLE: Final = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"

_MAX_LINE: Final = 4096
_ANSI: Final = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
"""Terminal colour and cursor sequences Ray writes into its notices."""
_READY_SECONDS: Final = 300.0
"""How long a starting local cluster may take to accept connections (a loaded machine)."""

_STOP_GRACE_SECONDS: Final = 5.0

_SOCKET_PATH_MAX: Final = 103 if sys.platform == "darwin" else 107
"""Bytes in a unix socket path (``sun_path`` less its NUL)."""
_RAY_TAIL: Final = len("/session_2026-12-05_11-43-51_026291_4194304/sockets/") + 20
"""The longest Ray adds under ``--temp-dir``: its session directory (date, microseconds,
the largest Linux pid) and a socket name (``plasma_store.N``, 15 bytes) with room spare."""
_OWN_PREFIX_DIR: Final = "dshray-"
_OWN_DIR: Final = len("/dshray-") + 8
"""The run's own directory under the base (``mkdtemp``'s random part is 8 characters)."""
_FALLBACK_BASE: Final = "/tmp"


class RayUnavailableError(Exception):
    """Ray could not be started or reached; the message is one whole line."""


def one_line(exc: BaseException) -> str:
    """``Type: message`` with every line of the message joined into one (bounded)."""
    text = " ".join(str(exc).split())
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return line if len(line) <= _MAX_LINE else line[: _MAX_LINE - 1] + "…"


def import_ray() -> Any:
    """The ``ray`` module, with Ray's ``uv run`` runtime-env hook off (see the module doc).

    Raises:
        UsageError: Ray is not installed.
    """
    os.environ[UV_HOOK_VARIABLE] = "0"  # read by Ray when it is first imported
    try:
        import ray
        from ray._private import ray_constants
    except ImportError:
        raise UsageError(
            "--ray needs Ray: pip install 'dsh-batch[ray]' (on every node of the cluster too)"
        ) from None
    # Ray imported earlier in this process read the variable already.
    ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = False
    return ray


class _LineLog(io.TextIOBase):
    """A text stream that logs each line written to it."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._partial = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            line = _ANSI.sub("", line).rstrip()
            if line.strip():
                self._logger.info("%s", line)
        return len(text)

    def flush(self) -> None:
        pass


class _HostThreadsKept(io.TextIOBase):
    """``sys.stdout`` or ``sys.stderr`` while Ray is connected: what a thread of the
    host's own writes (one that ran before the block, other than the caller) goes to the
    host's stream as before; the caller's (Ray's driver calls) and the threads Ray
    started go to ``log``. The stream is process-wide: a host that runs ``run_batch`` in
    a worker thread keeps the output of its other threads."""

    def __init__(
        self, log: _LineLog, host: Any, host_threads: Collection[threading.Thread]
    ) -> None:
        self._log = log
        self._host = host
        # Thread objects, not idents: a thread started later may reuse an ended one's.
        self._host_threads = frozenset(host_threads)

    def _for_host(self) -> bool:
        return threading.current_thread() in self._host_threads

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self._for_host():
            return int(self._host.write(text))
        return self._log.write(text)

    def flush(self) -> None:
        if self._for_host():
            self._host.flush()

    def __getattr__(self, name: str) -> Any:  # encoding, buffer, fileno … of the host's
        return getattr(self._host, name)


class _Forward(logging.Handler):
    """Hands every record of the ``ray`` logger to dsh's Ray logger."""

    def __init__(self, target: logging.Logger) -> None:
        super().__init__()
        self._target = target

    def emit(self, record: logging.LogRecord) -> None:
        self._target.handle(record)


@contextlib.contextmanager
def ray_output_as_logging() -> Iterator[None]:
    """Ray's records and driver-side prints become INFO records of :data:`RAY_LOGGER`.

    Ray configures its ``ray`` logger with a stderr handler of its own when it is
    imported, and prints some notices (a worker that died) on ``sys.stdout``; for this
    block both reach dsh's logging instead. The host's other threads keep their output
    (each write is routed by its thread). Restored on exit.
    """
    target = logging.getLogger(RAY_LOGGER)
    ray_logger = logging.getLogger("ray")
    saved = list(ray_logger.handlers)
    forward = _Forward(target)
    for handler in saved:
        ray_logger.removeHandler(handler)
    ray_logger.addHandler(forward)
    stream = _LineLog(target)
    host = set(threading.enumerate()) - {threading.current_thread()}
    out = _HostThreadsKept(stream, sys.stdout, host)
    err = _HostThreadsKept(stream, sys.stderr, host)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield
    finally:
        ray_logger.removeHandler(forward)
        for handler in saved:
            ray_logger.addHandler(handler)


def _free_ports(count: int) -> list[int]:
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def _fits(base: str, limit: int) -> bool:
    return len(os.fsencode(base)) + _OWN_DIR + _RAY_TAIL <= limit


def _session_base(limit: int = _SOCKET_PATH_MAX) -> str:
    """Where the cluster's own directory goes: the temporary directory, if short enough.

    Ray puts its unix sockets under ``--temp-dir``, and their paths must fit in
    ``limit`` bytes: a longer temporary directory (macOS's ``/var/folders/…/T``, a test
    runner's numbered ones) makes ``ray start`` fail. Then ``/tmp`` serves; the run's
    directory in it is made by ``mkdtemp`` (random name, mode 0700), so no other user can
    have made it in advance or read it.

    Raises:
        RayUnavailableError: neither the temporary directory nor ``/tmp`` is short and
            writable.
    """
    temp = tempfile.gettempdir()
    for base in (temp, _FALLBACK_BASE):
        if _fits(base, limit) and os.access(base, os.W_OK | os.X_OK):
            return base
    room = limit - _OWN_DIR - _RAY_TAIL
    raise RayUnavailableError(
        f"the temporary directory {temp!r} is too long for Ray's unix socket paths and "
        f"{_FALLBACK_BASE} is not writable: set TMPDIR to a writable directory of at most "
        f"{room} bytes"
    )


_OWN_PREFIX: Final = "DSH_"


def cluster_environment(
    passed: Collection[str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of the local cluster: ``environ`` less what a product never gets.

    A name the scrub withholds for being credential-shaped, or a value with a URL
    password, stays out unless ``passed`` (the profile's ``pass_env``) names it; dsh's
    own ``DSH_*`` settings are judged without their prefix, so they reach its actors.
    """
    source = os.environ if environ is None else environ
    env: dict[str, str] = {}
    for name, value in source.items():
        bare = name[len(_OWN_PREFIX) :] if name.upper().startswith(_OWN_PREFIX) else name
        if name in passed or not (is_scrubbed_name(bare) or is_scrubbed_value(value)):
            env[name] = value
    return env


@contextlib.contextmanager
def local_cluster(passed: Collection[str] = ()) -> Iterator[str]:
    """A private one-node Ray cluster on loopback for one batch; yields its address.

    ``passed``: the names the profile's ``pass_env`` lists, the only credential-shaped
    ones the cluster's environment keeps (see :func:`cluster_environment`).

    Ray runs under the host-death guard (see the module doc). On exit the driver must
    have disconnected (``ray.shutdown()``); the whole tree is then terminated.

    Raises:
        RayUnavailableError: the cluster did not start.
    """
    base = _session_base()
    # A killed dsh left its directory (its guard ended the cluster): collected here.
    for orphan in collect_orphaned_dirs(_OWN_PREFIX_DIR, base):
        logging.getLogger(RAY_LOGGER).info("removed a killed run's cluster directory: %s", orphan)
    temp = make_owned_dir(_OWN_PREFIX_DIR, base)
    logging.getLogger(RAY_LOGGER).info("the local Ray cluster's directory: %s", temp)
    (port,) = _free_ports(1)
    token = secrets.token_hex(32)
    # Loopback only (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes Ray use 127.0.0.1 as the
    # node's address) and token authentication with a token of this batch only.
    shared = {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    }
    argv = (
        sys.executable,
        "-m",
        "ray.scripts.scripts",
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        f"--port={port}",
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--temp-dir={temp}",
    )
    # The workers see dsh's environment, less what only dsh may read: a profile's
    # pass_env reads the names it lists there; the products they start get a scrubbed one.
    env: dict[str, str | None] = {
        **cluster_environment(passed),
        **shared,
        "RAY_USAGE_STATS_ENABLED": "0",
        # How long the raylet waits for its agents to register (slow on a loaded machine;
        # the raylet's wait for their port files stays Ray's own 15 s).
        "RAY_agent_register_timeout_ms": str(int(_READY_SECONDS * 1000)),
    }
    spec = SpawnSpec(
        argv=argv,
        cwd=temp,
        env=env,
        stdin="devnull",
        stdout="devnull",
        stderr="pipe",  # Ray's banner and notices: dsh's -v shows them
        grace=_STOP_GRACE_SECONDS,
    )
    try:
        with start_blocking_portal() as portal:
            cluster = portal.call(spawn, spec)
            try:
                # `ray start` writes the address file once the node is up and registered.
                ready = os.path.join(temp, "ray_current_cluster")
                deadline = time.monotonic() + _READY_SECONDS
                while not os.path.exists(ready):
                    if cluster.exit_facts is not None or time.monotonic() > deadline:
                        raise RayUnavailableError(
                            "the local Ray cluster did not start (dsh -v shows Ray's output)"
                        )
                    time.sleep(0.1)
                with _driver_settings(shared):
                    yield f"127.0.0.1:{port}"
            finally:
                portal.call(cluster.terminate)
                # dsh's own guard server (the cluster went through it) ends now, not in
                # the bounded wait at interpreter exit: dsh exits once it is gone.
                shutdown_guard_server()
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@contextlib.contextmanager
def _driver_settings(settings: dict[str, str]) -> Iterator[None]:
    """This process, the driver, uses ``settings`` too (Ray read its environment at import)."""
    from ray._private import ray_constants
    from ray._raylet import Config  # type: ignore[attr-defined]

    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    Config.initialize("")  # Ray's configuration re-reads RAY_AUTH_MODE
    cluster_mode = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        ray_constants.ENABLE_RAY_CLUSTER = cluster_mode


def _existing_cluster() -> str | None:
    """Ray's own choice for ``ray.init()`` without an address: None = start a new one."""
    from ray._private import services

    try:
        found: str | None = services.canonicalize_bootstrap_address(None)  # type: ignore[arg-type]
    except Exception:
        return "auto"  # let ray.init report it
    return found


@contextlib.contextmanager
def connect_ray(
    address: str | None, runtime_env: dict[str, Any], passed: Collection[str] = ()
) -> Iterator[Any]:
    """``ray`` connected to ``address`` (``None``: Ray's default, or a cluster dsh starts).

    ``passed``: the profile's ``pass_env`` names, kept in a started cluster's environment.

    Raises:
        UsageError: Ray is not installed.
        RayUnavailableError: Ray could not be reached or started.
    """
    ray = import_ray()
    with contextlib.ExitStack() as stack:
        stack.enter_context(ray_output_as_logging())
        target = address
        if target is None and _existing_cluster() is None:
            target = stack.enter_context(local_cluster(passed))
        try:
            ray.init(
                address=target,
                runtime_env=runtime_env,
                log_to_driver=False,
                configure_logging=False,
            )
        except Exception as exc:
            raise RayUnavailableError(one_line(exc)) from None
        try:
            yield ray
        finally:
            ray.shutdown()
