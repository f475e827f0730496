"""P1 with confinement against without: one keyless Codex delegation, start → app-server exit.

Run from the workspace root:
``uv run --locked python packages/dsh-subprocess/bench/confinement_p1.py [PAIRS] [MODE ...]``
(MODE: ``never``, the default, and/or ``bypass``).

The workspace's P1 setup (``bench/bench_codex.py``: the pinned app-server, the loopback
Responses fixture, an isolated HOME/CODEX_HOME/TMPDIR) with two provider instances per
Codex permission mode, identical but for ``confinement``: ``off`` (unconfined) and the
default ``auto`` (the policy a user gets: the runtime's own :func:`dsh_subagent.run_policy`
with the Codex provider's reach). Every spawn's ``ManagedProcess.confined`` is checked,
and the ``sandbox`` field each side's ``thread/start`` sent is printed. Pairs alternate
their order; the figures are the medians of each side, their ratio (confined ÷
unconfined), the median of the per-pair ratios with a 95 % bootstrap interval, the
phases of every run (spawn; spawn → ``initialize`` answered; ``thread/start``; its answer
→ the model request reaching the fixture; that request → ``turn/completed``; result →
whole-tree exit) and the load average.

Until 2026-12-05 this script's "unconfined" side was confined as well: it used the
provider's default ``confinement`` (``auto``, since providers have one), so its figures
(0.97 and 0.94 in bypass mode, 1.11 in ``never`` mode) were the ratio of two confined runs
with different policies (the script's own against the runtime's), not confinement's cost.

Figures (2026-12-05, 2 cores shared with other engineers' runs, app-server 0.163.0, 40
pairs per mode, modes interleaved; ratio of the medians, then the median per-pair ratio
with its 95 % interval):

* load average 12.7 → 13.3: ``never`` 1.027, 1.023 (0.93–1.10); bypass 1.043, 0.998
  (0.93–1.08);
* 17.1 → 19.3: ``never`` 0.970, 1.026 (0.89–1.05); bypass 0.997, 0.987 (0.86–1.09);
* 19.6 → 30.7: ``never`` 1.025, 1.041 (0.96–1.13); bypass 0.996, 1.035 (0.93–1.09);
* 11.8 → 16.7 (60 pairs): ``never`` 1.046, 1.041 (0.96–1.10); bypass 1.063, 1.062
  (0.99–1.10).

* quiet machine, load average 1.2 → 3.4 (100 pairs, 2026-12-05 15:50): ``never`` 1.019,
  1.010 (0.98–1.05); bypass 1.004, 1.026 (0.98–1.07); 40 pairs at load 0.5 → 1.2:
  ``never`` 1.056, 1.016 (0.97–1.08); bypass 0.994, 0.983 (0.96–1.02). Every phase but
  the spawn is the same on both sides; the spawn is 1.2–2.5 ms longer confined.

``never`` costs what bypass costs. The spread is the machine's: two identical unconfined
instances, interleaved over 30 pairs at load 29, gave 0.85. Measures that the load does
not blur (same day, diagnostic patches, not in this script): the user + system CPU of the
whole app-server tree (its rusage, reaped by a wrapper) was 117.6 ms unconfined and
118.6 ms confined in ``never`` mode, 120.3 and 119.3 ms in bypass mode (medians of 25
pairs), and under strace the confined and unconfined trees make the same calls, none
refused. The one phase longer confined is the spawn: at load 19, 32.1 ms against 25.7 ms
for :func:`dsh_subprocess.spawn` (the ruleset applied before ``exec``, see
``bench/confinement.py``) and 1.64 ms against 1.38 ms for the run's policy; on a quiet
machine (load 2, 30 pairs) the whole run took 135.1 ms confined and 135.6 ms unconfined.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the workspace's bench package

import anyio
from dsh_contract_tests.fixtures.responses import PlainAnswer, ResponsesFixture
from dsh_contract_tests.fixtures.responses.script import RecordedRequest
from dsh_subagent import ConfinementSetting, ProductProvider, SubagentService
from dsh_subagent_codex import CodexConfig, CodexProvider
from dsh_subagent_codex.jsonrpc import JsonRpcLines
from dsh_subprocess import ManagedProcess, SpawnSpec, StderrObserver, landlock_abi

from bench.bench_codex import ANSWER, CodexHome, codex_home, probe_codex_wire, start_request
from bench.bench_common import bootstrap_median_interval, clock, temp_root

MODES = {"never": "never", "bypass": "dangerously-bypass-approvals-and-sandbox"}
PHASES = (
    "spawn",
    "initialize",
    "thread/start",
    "turn/start → model request",
    "model request → turn/completed",
    "teardown (to tree exit)",
)


class Observed:
    """What the patched seams saw: each spawn's ``confined``, each ``thread/start``'s
    ``sandbox``, and when each model request reached the fixture."""

    def __init__(self) -> None:
        self.confined: list[bool] = []
        self.sandbox: list[str | None] = []
        self.model_requests: list[float] = []

    def route(self, request: RecordedRequest) -> None:
        self.model_requests.append(clock())


@contextlib.contextmanager
def observed_seams(observed: Observed) -> Iterator[None]:
    original_spawn = CodexProvider.spawn
    original_send = JsonRpcLines.send_request

    async def spawn(
        self: ProductProvider[CodexConfig], spec: SpawnSpec, stderr_observer: StderrObserver
    ) -> ManagedProcess:
        proc = await original_spawn(self, spec, stderr_observer)
        observed.confined.append(proc.confined)
        return proc

    async def send_request(self: JsonRpcLines, method: str, params: Any) -> str:
        if method == "thread/start":
            observed.sandbox.append(params.get("sandbox"))
        return await original_send(self, method, params)

    CodexProvider.spawn = spawn  # type: ignore[method-assign]
    JsonRpcLines.send_request = send_request  # type: ignore[method-assign]
    try:
        yield
    finally:
        CodexProvider.spawn = original_spawn  # type: ignore[method-assign]
        JsonRpcLines.send_request = original_send  # type: ignore[method-assign]


async def one_run(
    service: SubagentService,
    name: str,
    home: CodexHome,
    fixture: ResponsesFixture,
    observed: Observed,
) -> dict[str, float]:
    """One probed delegation: its total and its phases, in seconds."""
    marks: dict[str, float] = {}
    fixture.enqueue(PlainAnswer(ANSWER))
    requests = len(observed.model_requests)
    with probe_codex_wire(marks):
        started = clock()
        run = await service.start(name, start_request(home.workspace))
        try:
            result = await run.result()
            resulted = clock()
        finally:
            await run.dispose()
        disposed = clock()
    if result.stop_reason != "completed" or result.text != ANSWER:
        raise RuntimeError(f"the Codex run failed: {result.stop_reason} {result.diagnostic}")
    init = marks["response initialize"]
    thread = marks["response thread/start"]
    requested = observed.model_requests[requests]
    return {
        "total": disposed - started,
        PHASES[0]: marks["spawned"] - started,
        PHASES[1]: init - marks["spawned"],
        PHASES[2]: thread - init,
        PHASES[3]: requested - thread,
        PHASES[4]: marks["notification turn/completed"] - requested,
        PHASES[5]: disposed - resulted,
    }


def report(mode: str, off: list[dict[str, float]], on: list[dict[str, float]]) -> None:
    def median_ms(runs: list[dict[str, float]], key: str) -> float:
        return statistics.median(run[key] for run in runs) * 1000

    print(f"\n{mode} mode, {len(off)} pairs      unconfined   confined  (medians, ms)")
    for key in ("total", *PHASES):
        print(f"  {key:32} {median_ms(off, key):9.1f} {median_ms(on, key):10.1f}")
    ratio = median_ms(on, "total") / median_ms(off, "total")
    paired = [a["total"] / b["total"] for a, b in zip(on, off, strict=True)]
    low, high = bootstrap_median_interval(paired)
    print(f"  ratio of the medians (confined ÷ unconfined): {ratio:.3f}")
    print(f"  median per-pair ratio: {statistics.median(paired):.3f} (95 %: {low:.3f}–{high:.3f})")


async def main(pairs: int, modes: list[str]) -> None:
    if landlock_abi() < 4:
        print("needs Landlock ABI 4: nothing to measure")
        return
    observed = Observed()
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    with (
        temp_root("p1-confined") as root,
        ResponsesFixture(route=observed.route) as fixture,
        observed_seams(observed),
    ):
        home = codex_home(root, fixture.base_url)
        sides: dict[str, tuple[str, str]] = {}
        async with SubagentService() as service:
            for mode in modes:
                for confined in (False, True):
                    name = f"codex-{mode}-{'on' if confined else 'off'}"
                    setting = ConfinementSetting() if confined else ConfinementSetting(mode="off")
                    service.register_provider(
                        home.provider(name, permission_mode=MODES[mode], confinement=setting)
                    )
                sides[mode] = (f"codex-{mode}-off", f"codex-{mode}-on")
            for mode in modes:  # warm-up, and what each side sends and gets
                for name in sides[mode]:
                    observed.confined.clear()
                    observed.sandbox.clear()
                    await one_run(service, name, home, fixture, observed)
                    print(
                        f"{name}: confined={observed.confined}, "
                        f"thread/start sandbox={observed.sandbox}"
                    )
                    assert observed.confined == [name.endswith("-on")], "confinement mismatch"
            samples: dict[str, list[dict[str, float]]] = {
                name: [] for pair in sides.values() for name in pair
            }
            for index in range(pairs):
                for mode in modes:
                    off, on = sides[mode]
                    for name in (off, on) if index % 2 == 0 else (on, off):
                        observed.confined.clear()
                        samples[name].append(await one_run(service, name, home, fixture, observed))
                        assert observed.confined == [name == on], "confinement mismatch"
    for mode in modes:
        off, on = sides[mode]
        report(mode, samples[off], samples[on])
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    arguments = sys.argv[1:]
    count = int(arguments.pop(0)) if arguments and arguments[0].isdigit() else 20
    chosen = arguments or ["never"]
    unknown = sorted(set(chosen) - set(MODES))
    if unknown:
        raise SystemExit(f"unknown mode(s) {', '.join(unknown)}: choose from never, bypass")
    anyio.run(main, count, chosen)
