"""The Ray side of ``dsh batch --ray`` without a cluster: Ray's uv hook, its output, errors."""

from __future__ import annotations

import io
import logging
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from dsh_batch.ray_cluster import (
    RAY_LOGGER,
    cluster_environment,
    import_ray,
    one_line,
    ray_output_as_logging,
)
from dsh_profiles.logs import cli_logging

pytest.importorskip("ray", reason="ray cannot be imported on this Python (dsh-batch[ray])")

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def under_uv_run(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Ray believes the driver runs under ``uv run`` in a project (this repository)."""
    from ray._private.runtime_env import uv_runtime_env_hook

    def uv_run_cmdline() -> list[str]:
        return ["uv", "run", "dsh", "batch"]

    monkeypatch.setattr(uv_runtime_env_hook, "_get_uv_run_cmdline", uv_run_cmdline)
    monkeypatch.chdir(REPO)  # a pyproject.toml outside the bundle, as for a uv user
    return import_ray()


def test_under_uv_run_rays_hook_is_off_and_the_bundle_is_the_working_dir(
    under_uv_run: Any, tmp_path: Path
) -> None:
    from ray._private import ray_constants
    from ray._private.worker import _maybe_modify_runtime_env

    bundle = {"working_dir": str(tmp_path)}
    assert _maybe_modify_runtime_env(dict(bundle), False) == bundle
    # Deliberate, and what it prevents: with the hook on, ray.init fails under `uv run`
    # because the bundle has no pyproject.toml (workers would re-run `uv run` in it).
    ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = True
    try:
        with pytest.raises(RuntimeError, match=r"pyproject\.toml is not in the working_dir"):
            _maybe_modify_runtime_env(dict(bundle), False)
    finally:
        import_ray()
    assert ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV is False


def test_an_error_is_one_whole_line() -> None:
    exc = RuntimeError("Your pyproject.toml is not in the working_dir\n  so the workers\tfail.")
    assert one_line(exc) == (
        "RuntimeError: Your pyproject.toml is not in the working_dir so the workers fail."
    )
    long = one_line(ValueError("x" * 10_000))
    assert "\n" not in long
    assert len(long) == 4096
    assert long.endswith("…")
    assert one_line(ConnectionError()) == "ConnectionError"


@pytest.mark.parametrize("verbose", [False, True])
def test_rays_records_and_prints_reach_stderr_only_with_v(verbose: bool) -> None:
    import_ray()
    stream = io.StringIO()
    ray_logger = logging.getLogger("ray")
    handlers = list(ray_logger.handlers)
    with cli_logging(verbose=verbose, stream=stream), ray_output_as_logging():
        ray_logger.warning("Token authentication is enabled for this Ray cluster.")
        print("\x1b[33mA worker died or was killed\x1b[0m while executing a task")
    assert ray_logger.handlers == handlers  # Ray's own handler is back afterwards
    if verbose:
        assert stream.getvalue().splitlines() == [
            "ray: Token authentication is enabled for this Ray cluster.",
            "dsh.product.ray: A worker died or was killed while executing a task",
        ]
    else:
        assert stream.getvalue() == ""


def test_the_local_cluster_holds_no_credential_the_profile_does_not_pass() -> None:
    """Ray's processes are dumpable: a product could read what their environment holds."""
    environ = {
        "PATH": "/usr/bin",
        "OPENAI_API_KEY": "sk-ambient",
        "ANTHROPIC_API_KEY": "sk-passed",
        "DATABASE_URL": "postgres://u:pw@db/x",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer t",
        "DSH_KEEP_DUMPABLE": "1",  # dsh's own setting reaches its actors
        "DSH_API_TOKEN": "t",  # credential-shaped under the prefix: withheld
        "PROCESS_MARKER": "m",
    }
    assert cluster_environment({"ANTHROPIC_API_KEY"}, environ) == {
        "PATH": "/usr/bin",
        "ANTHROPIC_API_KEY": "sk-passed",
        "DSH_KEEP_DUMPABLE": "1",
        "PROCESS_MARKER": "m",
    }


def test_the_cluster_directory_is_the_temp_dir_only_while_rays_sockets_fit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from dsh_batch import ray_cluster
    from ray._private.utils import validate_socket_filepath

    import_ray()
    short = tmp_path.anchor + "t"  # "/t": stands for any short enough TMPDIR
    monkeypatch.setattr(os, "access", lambda path, mode: True)
    monkeypatch.setattr(tempfile, "tempdir", short)
    assert ray_cluster._session_base() == short
    # The longest TMPDIR still used: Ray's longest socket path under it fits (its own check).
    room = 107 - ray_cluster._OWN_DIR - ray_cluster._RAY_TAIL
    longest = "/" + "t" * (room - 1)
    monkeypatch.setattr(tempfile, "tempdir", longest)
    assert ray_cluster._session_base(107) == longest
    session = "session_2026-12-05_11-43-51_026291_4194304"
    validate_socket_filepath(f"{longest}/dshray-abcdefgh/{session}/sockets/plasma_store.99")
    monkeypatch.setattr(tempfile, "tempdir", longest + "t")
    assert ray_cluster._session_base(107) == "/tmp"


def test_without_a_short_writable_base_the_error_names_tmpdir(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dsh_batch import ray_cluster
    from dsh_batch.ray_cluster import RayUnavailableError

    long = "/" + "t" * 60
    monkeypatch.setattr(tempfile, "tempdir", long)
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(RayUnavailableError) as caught:
        ray_cluster._session_base()
    assert str(caught.value) == (
        f"the temporary directory '{long}' is too long for Ray's unix socket paths and /tmp "
        "is not writable: set TMPDIR to a writable directory of at most 19 bytes"
    )


def test_the_hosts_other_threads_keep_their_output_while_ray_is_connected(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A host that runs ``run_batch`` in a worker thread (as docs/batch.md suggests for
    async code) keeps its other threads' output; what Ray's own threads and its driver
    calls print still becomes dsh's log records."""
    caplog.set_level(logging.INFO, logger=RAY_LOGGER)
    go, said = threading.Event(), threading.Event()

    def host_thread() -> None:
        go.wait()
        print("the host's event loop says this")
        print("and this on stderr", file=sys.stderr)
        said.set()

    host = threading.Thread(target=host_thread)
    host.start()
    with ray_output_as_logging():
        go.set()
        said.wait()
        print("a notice of Ray's driver call")  # the calling thread: Ray's
        ray_thread = threading.Thread(target=lambda: print("a worker died (Ray's thread)"))
        ray_thread.start()
        ray_thread.join()
    host.join()
    seen = capsys.readouterr()
    assert (seen.out, seen.err) == ("the host's event loop says this\n", "and this on stderr\n")
    assert [r.getMessage() for r in caplog.records if r.name == RAY_LOGGER] == [
        "a notice of Ray's driver call",
        "a worker died (Ray's thread)",
    ]
