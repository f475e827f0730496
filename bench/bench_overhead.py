"""P4: harness overhead against an instant scripted product.

The product is a two-line ``/bin/sh`` program speaking the example provider's wire
protocol (``{"type": "ready"}``, read the task, ``{"type": "final", "text": "done"}``),
so nearly all measured time is harness. (``python -m dsh_example_provider.child`` is not
instant: importing its package pulls in pydantic and anyio, ≈ 1 s on a loaded machine.)

Our side: start → result → dispose through ``SubagentService`` and the example provider
(its ``_argv`` seam pointed at that program), with and without the host-death guard.
Reference: ``anyio.open_process`` of the same program with the same stdio exchange, then
``wait()``. Ratio = reference / ours (1.0 = no overhead).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream
from dsh_example_provider import ExampleConfig, ExampleProvider
from dsh_subagent import Launch, ParentContext, SubagentService, SubagentStartRequest, TextBlock
from dsh_subprocess import ManagedProcess, SpawnSpec, StderrObserver

from bench.bench_common import Comparison, Profile, Samples, clock, temp_root

__all__ = ["run_p4"]

_TASK = "bench: answer at once"
_MAX_LINE = 1 << 20
TARGET = 0.8


_PRODUCT = (
    "/bin/sh",
    "-c",
    """printf '{"type": "ready"}\\n'; IFS= read -r task; """
    """printf '{"type": "final", "text": "done"}\\n'""",
)


class _InstantExampleProvider(ExampleProvider):
    """The example provider running the instant product."""

    def launch(self, cwd: str) -> Launch:
        return Launch(argv=_PRODUCT)


class _UnguardedExampleProvider(_InstantExampleProvider):
    """The instant example provider with ``SpawnSpec.host_death_guard`` switched off."""

    async def spawn(self, spec: SpawnSpec, stderr_observer: StderrObserver) -> ManagedProcess:
        unguarded = spec.model_copy(update={"host_death_guard": False})
        return await super().spawn(unguarded, stderr_observer)


async def _ours(service: SubagentService, name: str, workspace: Path) -> float:
    request = SubagentStartRequest(
        prompt=(TextBlock(text=_TASK),),
        parent=ParentContext(session_id="bench", cwd=str(workspace)),
    )
    started = clock()
    run = await service.start(name, request)
    try:
        result = await run.result()
    finally:
        await run.dispose()
    elapsed = clock() - started
    if result.stop_reason != "completed" or result.text != "done":
        raise RuntimeError(f"example run did not complete: {result.stop_reason}")
    return elapsed


async def _raw(workspace: Path, env: dict[str, str]) -> float:
    started = clock()
    proc = await anyio.open_process(
        list(_PRODUCT), cwd=str(workspace), env=env, stderr=subprocess.DEVNULL
    )
    async with proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        reader = BufferedByteReceiveStream(proc.stdout)
        hello = json.loads(await reader.receive_until(b"\n", _MAX_LINE))
        if hello.get("type") != "ready":
            raise RuntimeError("the example child did not say ready")
        await proc.stdin.send((json.dumps({"task": _TASK}) + "\n").encode())
        answer = json.loads(await reader.receive_until(b"\n", _MAX_LINE))
        if answer.get("text") != "done":
            raise RuntimeError("the example child did not answer done")
        await proc.stdin.aclose()
        code = await proc.wait()
    elapsed = clock() - started
    if code != 0:
        raise RuntimeError(f"the example child exited with {code}")
    return elapsed


async def run_p4(profile: Profile) -> list[Comparison]:
    """Guarded and unguarded cycles, each paired with a raw spawn of the same program."""
    with temp_root("p4") as root:
        workspace = root / "workspace"
        home = root / "home"
        tmp = root / "tmp"
        for directory in (workspace, home, tmp):
            directory.mkdir()
        overlay = {"HOME": str(home), "TMPDIR": str(tmp)}
        raw_env = {**os.environ, **overlay}
        guarded = _InstantExampleProvider(ExampleConfig(provider_name="example-guard", env=overlay))
        unguarded = _UnguardedExampleProvider(
            ExampleConfig(provider_name="example-noguard", env=overlay)
        )
        g_ours: list[float] = []
        g_raw: list[float] = []
        u_ours: list[float] = []
        u_raw: list[float] = []
        async with SubagentService() as service:
            service.register_provider(guarded)
            service.register_provider(unguarded)
            for index in range(profile.warmup + profile.p4_pairs):
                # One round: guarded, raw, unguarded, raw (A B A' B).
                samples = (
                    await _ours(service, "example-guard", workspace),
                    await _raw(workspace, raw_env),
                    await _ours(service, "example-noguard", workspace),
                    await _raw(workspace, raw_env),
                )
                if index >= profile.warmup:
                    g_ours.append(samples[0])
                    g_raw.append(samples[1])
                    u_ours.append(samples[2])
                    u_raw.append(samples[3])
    rows = []
    for case, ours, raw in (
        ("start→result→dispose, host-death guard on (default)", g_ours, g_raw),
        ("start→result→dispose, host-death guard off", u_ours, u_raw),
    ):
        rows.append(
            Comparison(
                benchmark="P4 harness overhead",
                case=case,
                ours_label="SubagentService + example provider",
                reference_label="raw anyio.open_process + wait",
                ours=Samples(tuple(ours)),
                reference=Samples(tuple(raw)),
                ratio_of="reference/ours",
                target=f"≥ {TARGET:.2f}",
                target_check=lambda ratio: ratio >= TARGET,
            )
        )
    return rows
