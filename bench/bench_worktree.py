"""P7: the cost of worktree isolation per Codex delegation, on a repository of 10 000 files.

Every side runs one keyless Codex delegation (start → result → dispose, the app-server's
tree gone) from the same repository against the same loopback Responses fixture: plain
(the product works in the repository's own tree); isolated cold (a fresh worktree of the
repository's HEAD on a new branch is created, the product works there, then ``git add
--all`` finds nothing to commit, the worktree is removed and its branch deleted: create +
collect + remove); isolated warm (``Worktree(warm=1)``: a worktree checked out ahead on a
branch of its own is claimed without running git, found untouched by its tree watch,
its ``HEAD`` detached and branch deleted through git's ref files, and reset for reuse in
the background — the bench waits for that reset to finish before the next sample, so it
never overlaps a measured run, and reports its median separately). Plain and warm run as
adjacent pairs, then plain and cold. The model answers without editing, so every side
leaves the repository as it was.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import dsh_worktree.provider as worktree_provider
from dsh_contract_tests.fixtures.responses import PlainAnswer, ResponsesFixture
from dsh_subagent import ParentContext, SubagentService, SubagentStartRequest, TextBlock
from dsh_worktree import Worktree, WorktreeProvider
from dsh_worktree.pool import WarmPool

from bench.bench_codex import ANSWER, TASK, codex_home
from bench.bench_common import Comparison, Profile, Samples, clock, interleave_many, temp_root

__all__ = ["FILES", "make_repository", "run_p7"]

FILES: Final = 10_000
TARGET: Final = 1.10


def make_repository(root: Path, files: int = FILES) -> Path:
    """A git repository with ``files`` small committed files in 100 directories."""
    repo = root / "repo"
    for index in range(files):
        directory = repo / f"pkg{index % 100:02d}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"module_{index:05d}.py").write_text(
            f"VALUE_{index} = {index}\n", encoding="utf-8"
        )
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "bench@localhost",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "bench@localhost",
    }
    for args in (["init", "--quiet"], ["add", "--all"], ["commit", "--quiet", "-m", "files"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, timeout=600)
    return repo


async def _once(
    service: SubagentService,
    name: str,
    repo: Path,
    fixture: ResponsesFixture,
    settle: WorktreeProvider | None = None,
) -> float:
    fixture.enqueue(PlainAnswer(ANSWER))
    started = clock()
    run = await service.start(
        name,
        SubagentStartRequest(
            prompt=(TextBlock(text=TASK),), parent=ParentContext(session_id="bench", cwd=str(repo))
        ),
    )
    try:
        result = await run.result()
    finally:
        await run.dispose()
    elapsed = clock() - started
    if settle is not None:
        await settle.wait_settled()  # the background reset, outside the measured run
    if result.stop_reason != "completed" or result.text != ANSWER:
        raise RuntimeError(f"the {name} run failed: {result.stop_reason} {result.diagnostic}")
    if name != "codex-plain" and (result.changes is None or result.changes.commit is not None):
        raise RuntimeError("the isolated run reported unexpected changes")
    return elapsed


def _timed(phases: dict[str, list[float]], name: str, original: Any) -> Any:
    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = clock()
        try:
            return await original(*args, **kwargs)
        finally:
            phases[name].append(clock() - started)

    return timed


@contextlib.contextmanager
def timed_phases(phases: dict[str, list[float]]) -> Iterator[None]:
    """Time the provider's cold create and collect (+ remove) calls, and the warm pool's
    claim, collect and background recycle."""
    namespace = vars(worktree_provider)  # the names the provider module calls
    original_create, original_collect = namespace["create"], namespace["collect"]
    originals = {name: getattr(WarmPool, name) for name in ("claim_at", "release", "_recycle")}
    namespace["create"] = _timed(phases, "cold: create", original_create)
    namespace["collect"] = _timed(phases, "cold: collect + remove", original_collect)
    labels = {"claim_at": "warm: claim", "release": "warm: collect", "_recycle": "warm: recycle"}
    for name, original in originals.items():
        setattr(WarmPool, name, _timed(phases, labels[name], original))
    try:
        yield
    finally:
        namespace["create"], namespace["collect"] = original_create, original_collect
        for name, original in originals.items():
            setattr(WarmPool, name, original)


def _comparison(
    case: str, label: str, ours: list[float], plain: list[float], notes: list[str]
) -> Comparison:
    cost = statistics.median(ours) - statistics.median(plain)
    return Comparison(
        benchmark="P7 worktree isolation",
        case=f"one Codex delegation, repository of {FILES} files, {case}",
        ours_label=label,
        reference_label="the same delegation without isolation",
        ours=Samples(tuple(ours)),
        reference=Samples(tuple(plain)),
        ratio_of="ours/reference",
        target=f"≤ {TARGET:.2f}",
        target_check=lambda ratio: ratio <= TARGET,
        notes=[f"isolation cost (difference of medians): {cost:.3f} s per delegation", *notes],
    )


async def run_p7(profile: Profile) -> list[Comparison]:
    """Interleaved pairs: plain and warm-isolated, then plain and cold-isolated."""
    rounds = max(2, profile.p1_pairs // 3)
    phases: dict[str, list[float]] = {
        name: []
        for name in (
            "cold: create",
            "cold: collect + remove",
            "warm: claim",
            "warm: collect",
            "warm: recycle",
        )
    }
    with temp_root("p7") as root, ResponsesFixture() as fixture, timed_phases(phases):
        repo = make_repository(root)
        home = codex_home(root / "codex", fixture.base_url)
        worktrees = root / "worktrees"
        warm = Worktree(root=str(worktrees), warm=1).isolate(home.provider("codex-warm"))
        async with SubagentService() as service, warm:
            service.register_provider(home.provider("codex-plain"))
            service.register_provider(
                Worktree(root=str(worktrees)).isolate(home.provider("codex-isolated"))
            )
            service.register_provider(warm)
            await warm.prewarm(str(repo))
            # Two comparisons, each of adjacent pairs: a warm sample right after a cold one
            # ran while the kernel still wrote back (and freed) the cold side's 10 000
            # files, which measured the cold side's residue, not the pool.
            plain_warm, hot = await interleave_many(
                profile.warmup,
                rounds,
                (
                    lambda: _once(service, "codex-plain", repo, fixture),
                    lambda: _once(service, "codex-warm", repo, fixture, settle=warm),
                ),
            )
            plain_cold, cold = await interleave_many(
                profile.warmup,
                rounds,
                (
                    lambda: _once(service, "codex-plain", repo, fixture),
                    lambda: _once(service, "codex-isolated", repo, fixture),
                ),
            )

    def medians(prefix: str) -> list[str]:
        return [
            f"{name.removeprefix(prefix)}: median {statistics.median(values) * 1000:.0f} ms"
            for name, values in phases.items()
            if values and name.startswith(prefix)
        ]

    return [
        _comparison(
            "cold (a checkout per run)",
            "isolated cold (worktree create + collect + remove)",
            cold,
            plain_cold,
            medians("cold: "),
        ),
        _comparison(
            "warm pool (Worktree(warm=1))",
            "isolated warm (claim + collect; recycle off the run's path)",
            hot,
            plain_warm,
            [*medians("warm: "), "recycle runs in the background, not in the measured run"],
        ),
    ]
