"""Whether a ``dsh batch --ray`` actor exports its delegations, and why not when it does not.

The e2e tier runs the actors on a real cluster with a loopback collector; this pins the
reasons an actor gives the driver (whose one warning line quotes them).
"""

from __future__ import annotations

import sys
from typing import Any, cast

import pytest
from dsh_batch.actor import BatchActor, _start_export


class _Holder:
    _export: Any = None


def test_without_the_variables_the_reason_is_the_nodes_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for signal in ("", "_TRACES", "_METRICS"):
        monkeypatch.delenv(f"OTEL_EXPORTER_OTLP{signal}_ENDPOINT", raising=False)
    holder = _Holder()
    assert _start_export(cast(BatchActor, holder)) == (
        "the OTEL_EXPORTER_OTLP_* variables are not set where the node's Ray runs "
        "(dsh never ships the driver's environment)"
    )
    assert holder._export is None


def test_without_dsh_otel_on_the_node_the_reason_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setitem(sys.modules, "dsh_otel", None)  # import fails: not installed
    holder = _Holder()
    assert _start_export(cast(BatchActor, holder)) == (
        "dsh-otel is not installed on the Ray node (pip install 'dsh-batch[otel]')"
    )
    assert holder._export is None


def test_with_the_variables_and_dsh_otel_the_actor_exports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("dsh_otel", reason="dsh-otel is not installed (dsh-batch[otel])")
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    # Traces only, and no delegation runs: nothing is sent to the closed port.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/v1/traces")
    holder = _Holder()
    assert _start_export(cast(BatchActor, holder)) is None
    try:
        assert holder._export is not None
    finally:
        holder._export.close()
