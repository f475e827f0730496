"""P1 with confinement against without: one keyless Codex delegation, start → app-server exit.

Run from the workspace root:
``uv run --locked python packages/dsh-subprocess/bench/confinement_p1.py [PAIRS]``.

The workspace's P1 setup (``bench/bench_codex.py``: the pinned app-server, the loopback
Responses fixture, an isolated HOME/CODEX_HOME/TMPDIR) with the provider's spawn seam
patched to add a :class:`~dsh_subprocess.Confinement`, for these runs only: read the
system paths and the app-server's installation, write the run's temporary root (its
HOME, CODEX_HOME, TMPDIR and workspace), TCP connect to the fixture's port only. Pairs
alternate their order; the ratio is of the medians, confined ÷ unconfined.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the workspace's bench package

import anyio
from dsh_contract_tests.fixtures.responses import ResponsesFixture
from dsh_subagent import ProductProvider, SubagentService
from dsh_subagent_codex import CodexConfig, CodexProvider
from dsh_subprocess import (
    Confinement,
    ManagedProcess,
    SpawnSpec,
    StderrObserver,
    landlock_abi,
    system_read_paths,
)

from bench.bench_codex import codex_home, ours_once
from bench.bench_common import temp_root


@contextlib.contextmanager
def confined_codex_spawn(root: Path, port: int, applied: list[bool]) -> Iterator[None]:
    original = CodexProvider.spawn

    async def spawn(
        self: ProductProvider[CodexConfig], spec: SpawnSpec, stderr_observer: StderrObserver
    ) -> ManagedProcess:
        install = Path(spec.argv[0]).resolve().parent.parent  # noqa: ASYNC240 - a bench
        policy = Confinement(
            mode="required",
            read=(*system_read_paths(), str(install)),
            write=(str(root),),
            connect_ports=(port,),
        )
        proc = await original(
            self, spec.model_copy(update={"confinement": policy}), stderr_observer
        )
        applied.append(proc.confined)
        return proc

    CodexProvider.spawn = spawn  # type: ignore[method-assign]
    try:
        yield
    finally:
        CodexProvider.spawn = original  # type: ignore[method-assign]


async def main(pairs: int) -> None:
    if landlock_abi() < 4:
        print("needs Landlock ABI 4: nothing to measure")
        return
    with temp_root("p1-confined") as root, ResponsesFixture() as fixture:
        home = codex_home(root, fixture.base_url)
        port = urlsplit(fixture.base_url).port
        assert port is not None
        applied: list[bool] = []
        async with SubagentService() as service:
            service.register_provider(home.provider())

            async def plain() -> float:
                return await ours_once(service, "codex", home, fixture)

            async def confined() -> float:
                with confined_codex_spawn(root, port, applied):
                    return await ours_once(service, "codex", home, fixture)

            for _ in range(2):  # warm-up
                await plain()
                await confined()
            samples: dict[str, list[float]] = {"plain": [], "confined": []}
            for index in range(pairs):
                order = (plain, confined) if index % 2 == 0 else (confined, plain)
                for side in order:
                    samples["plain" if side is plain else "confined"].append(await side())
    assert applied, "no confined run"
    assert all(applied), "confinement was not applied"
    for name, values in samples.items():
        print(f"P1 {name:8}: median {statistics.median(values) * 1000:.1f} ms over {pairs}")
    ratio = statistics.median(samples["confined"]) / statistics.median(samples["plain"])
    print(f"ratio of the medians (confined ÷ unconfined): {ratio:.3f}")


if __name__ == "__main__":
    anyio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 20)
