"""P7: the cost of worktree isolation per Codex delegation, on a repository of 10 000 files.

Both sides run one keyless Codex delegation (start → result → dispose, the app-server's
tree gone) from the same repository against the same loopback Responses fixture: plain
(the product works in the repository's own tree) and isolated by dsh-worktree (a fresh
worktree of the repository's HEAD on a new branch is created, the product works there,
then ``git add --all`` finds nothing to commit, the worktree is removed and its branch
deleted). The difference is the whole isolation cost: create + collect + remove. The
model answers without editing, so both sides leave the repository as it was.
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
from dsh_worktree import Worktree

from bench.bench_codex import ANSWER, TASK, codex_home
from bench.bench_common import Comparison, Profile, Samples, clock, interleave, temp_root

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
    service: SubagentService, name: str, repo: Path, fixture: ResponsesFixture
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
    if result.stop_reason != "completed" or result.text != ANSWER:
        raise RuntimeError(f"the {name} run failed: {result.stop_reason} {result.diagnostic}")
    if name == "codex-isolated" and (result.changes is None or result.changes.commit is not None):
        raise RuntimeError("the isolated run reported unexpected changes")
    return elapsed


@contextlib.contextmanager
def timed_phases(phases: dict[str, list[float]]) -> Iterator[None]:
    """Time the provider's worktree create and collect (+ remove) calls."""
    namespace = vars(worktree_provider)  # the names the provider module calls
    original_create, original_collect = namespace["create"], namespace["collect"]

    async def create(*args: Any) -> Any:
        started = clock()
        try:
            return await original_create(*args)
        finally:
            phases["create"].append(clock() - started)

    async def collect(*args: Any) -> Any:
        started = clock()
        try:
            return await original_collect(*args)
        finally:
            phases["collect + remove"].append(clock() - started)

    namespace["create"], namespace["collect"] = create, collect
    try:
        yield
    finally:
        namespace["create"], namespace["collect"] = original_create, original_collect


async def run_p7(profile: Profile) -> list[Comparison]:
    """Interleaved pairs: isolated Codex delegation against the plain one."""
    pairs = max(2, profile.p1_pairs // 3)
    phases: dict[str, list[float]] = {"create": [], "collect + remove": []}
    with temp_root("p7") as root, ResponsesFixture() as fixture, timed_phases(phases):
        repo = make_repository(root)
        home = codex_home(root / "codex", fixture.base_url)
        worktrees = root / "worktrees"
        async with SubagentService() as service:
            service.register_provider(home.provider("codex-plain"))
            service.register_provider(
                Worktree(root=str(worktrees)).isolate(home.provider("codex-isolated"))
            )
            isolated, plain = await interleave(
                profile.warmup,
                pairs,
                lambda: _once(service, "codex-isolated", repo, fixture),
                lambda: _once(service, "codex-plain", repo, fixture),
            )
    cost = statistics.median(isolated) - statistics.median(plain)
    return [
        Comparison(
            benchmark="P7 worktree isolation",
            case=f"one Codex delegation, repository of {FILES} files",
            ours_label="isolated (worktree create + collect + remove)",
            reference_label="the same delegation without isolation",
            ours=Samples(tuple(isolated)),
            reference=Samples(tuple(plain)),
            ratio_of="ours/reference",
            target=f"≤ {TARGET:.2f}",
            target_check=lambda ratio: ratio <= TARGET,
            notes=[
                f"isolation cost (difference of medians): {cost:.3f} s per delegation",
                *(
                    f"{name}: median {statistics.median(values):.3f} s"
                    for name, values in phases.items()
                    if values
                ),
            ],
        )
    ]
