"""Run one fault-matrix cell and judge it: settlement, secrets, survivors, descriptors."""

from __future__ import annotations

import contextlib
import gc
import re
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import psutil
from dsh_subagent import (
    ABORTED,
    COMPLETED,
    ERROR,
    RUN_END,
    RUN_START,
    CancelController,
    ParentContext,
    PublishedRun,
    StartCancelledError,
    SubagentError,
    SubagentEvent,
    SubagentResult,
    SubagentRunEnded,
    SubagentRunStarted,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
)
from dsh_subagent.tool import render_foreground_failure
from dsh_subprocess.testing import ProcessWatch
from dsh_tool_jobs.background import settle_start
from dsh_tool_jobs.model import JobOutcome

from reliability.cells import ANSWER, Cell, Outcome
from reliability.fakes import FakeSetup
from reliability.planted import Planted, find_leaks
from reliability.probes import fd_count, pid_alive, wait_fds_back
from reliability.profiles import Profile

__all__ = ["CellReport", "SafeLine", "parse_safe_line", "run_cell"]

_LINE = re.compile(
    r"Product subagent failure \(product: (?P<product>[^;)]+); stage: (?P<stage>[^;)]+); "
    r"category: (?P<category>[^;)]+)(?:; HTTP status: (?P<http>\d+))?"
    r"(?:; exit code: (?P<code>-?\d+))?(?:; signal: (?P<signal>[A-Z0-9]+))?\)"
)


@dataclass(frozen=True)
class SafeLine:
    """The fields of one safe product-failure line."""

    stage: str
    category: str
    exit_code: int | None
    signal: str | None


def parse_safe_line(text: str | None) -> SafeLine | None:
    """The first safe line in ``text``, or ``None``."""
    if not text:
        return None
    match = _LINE.search(text)
    if match is None:
        return None
    code = match.group("code")
    return SafeLine(
        match.group("stage"),
        match.group("category"),
        None if code is None else int(code),
        match.group("signal"),
    )


@dataclass
class CellReport:
    """What one cell did.

    Attributes:
        cell_id: ``provider/behaviour@stage``.
        observed: A short description of the actual settlement.
        problems: Settlement problems (wrong stop reason, stage, category, events, ...).
        leaks: Planted secrets found on a model-visible surface.
        survivors: Processes of the tree alive after disposal.
        fd_leak: Descriptors still open beyond the count before the cell.
        seconds: Wall time of the cell.
        rss_growth: Peak host RSS above its level before the cell (bytes), when sampled.
    """

    cell_id: str
    observed: str = ""
    problems: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    survivors: list[str] = field(default_factory=list)
    fd_leak: int = 0
    seconds: float = 0.0
    rss_growth: int | None = None

    @property
    def settled_correctly(self) -> bool:
        """Settled once, as documented, with paired events and no leaked secret."""
        return not self.problems and not self.leaks

    @property
    def passed(self) -> bool:
        """Every check of the cell held."""
        return self.settled_correctly and not self.survivors and self.fd_leak == 0

    def explain(self) -> str:
        """Everything that went wrong, one item per line."""
        lines = [f"{self.cell_id}: observed {self.observed}"]
        lines += [f"  problem: {p}" for p in self.problems]
        lines += [f"  leak: {p}" for p in self.leaks]
        lines += [f"  survivor: {p}" for p in self.survivors]
        if self.fd_leak:
            lines.append(f"  fd leak: {self.fd_leak}")
        return "\n".join(lines)


async def _cancel_when_ready(cell: Cell, setup: FakeSetup, controller: CancelController) -> None:
    assert cell.cancel_when is not None
    # The marker is written by another process: polling is the only way to see it.
    while not cell.cancel_when(setup):  # noqa: ASYNC110
        await anyio.sleep(0.01)
    controller.cancel("reliability: caller cancelled")


def _match_line(expect: Outcome, line: SafeLine | None) -> str | None:
    """Why ``line`` does not satisfy ``expect`` (``None`` when it does)."""
    if expect.stage is None:
        return None if line is None else "a failure line where none was expected"
    if line is None:
        return "no safe failure line"
    if (line.stage, line.category) != (expect.stage, expect.category):
        return f"stage/category {line.stage}/{line.category}"
    if expect.check_exit and (line.exit_code, line.signal) != (expect.exit_code, expect.signal):
        return f"exit code {line.exit_code} signal {line.signal}"
    return None


def _judge_start_error(
    expects: Sequence[Outcome], error: BaseException, events: list[SubagentEvent]
) -> tuple[str, list[str]]:
    message = str(error)
    line = parse_safe_line(message)
    observed = f"start raised {type(error).__name__}: {message[:160]}"
    problems = []
    if any(e.type in (RUN_START, RUN_END) for e in events):
        problems.append("a failed start emitted a lifecycle event")
    if not isinstance(error, SubagentError):
        where = "".join(traceback.format_exception(error)[-4:])
        return observed, [*problems, f"start raised a non-SubagentError:\n{where}"]
    reasons = []
    for expect in expects:
        if expect.kind == "start-aborted":
            if line is None and isinstance(error, StartCancelledError):
                return observed, problems
            reasons.append("not StartCancelledError")
        elif expect.kind == "start-error":
            why = _match_line(expect, line)
            if why is None:
                return observed, problems
            reasons.append(why)
        else:
            reasons.append(f"expected a published run ({expect.kind})")
    return observed, [*problems, "start error does not match: " + "; ".join(reasons)]


def _judge_result(
    expects: Sequence[Outcome],
    result: SubagentResult,
    again: SubagentResult,
    events: list[SubagentEvent],
    job: JobOutcome,
) -> tuple[str, list[str]]:
    line = parse_safe_line(result.diagnostic)
    observed = f"{result.stop_reason} diagnostic={result.diagnostic!r}"
    problems = []
    if again != result:
        problems.append("result() returned a different value the second time")
    starts = [e for e in events if isinstance(e, SubagentRunStarted)]
    ends = [e for e in events if isinstance(e, SubagentRunEnded)]
    if len(starts) != 1 or len(ends) != 1 or starts[0].run_id != ends[0].run_id:
        problems.append(f"lifecycle events not paired: {len(starts)} start, {len(ends)} end")
    elif ends[0].stop_reason != result.stop_reason:
        problems.append(f"end event says {ends[0].stop_reason}, result {result.stop_reason}")
    expected_job = {COMPLETED: "completed", ABORTED: "killed"}.get(result.stop_reason, "failed")
    if job.status != expected_job:
        problems.append(f"job status {job.status}, expected {expected_job}")
    reasons = []
    for expect in expects:
        if expect.kind not in (COMPLETED, ERROR, ABORTED):
            reasons.append(f"expected {expect.kind}")
            continue
        if result.stop_reason != expect.kind:
            reasons.append(f"stop reason {result.stop_reason}")
            continue
        if expect.kind == COMPLETED and result.text != ANSWER:
            reasons.append("completed with a different answer")
            continue
        if expect.kind != ERROR and result.diagnostic is not None:
            reasons.append("a diagnostic on a non-error result")
            continue
        why = _match_line(expect, line)
        if why is not None:
            reasons.append(why)
            continue
        return observed, problems
    return observed, [*problems, "result does not match: " + "; ".join(reasons)]


def _surfaces(
    result: SubagentResult | None,
    error: BaseException | None,
    events: list[SubagentEvent],
    job: JobOutcome | None,
) -> dict[str, str | None]:
    surfaces: dict[str, str | None] = {}
    if result is not None:
        surfaces["output"] = result.text
        surfaces["diagnostic"] = result.diagnostic
        surfaces["foreground tool text"] = (
            result.text if result.stop_reason == COMPLETED else render_foreground_failure(result)
        )
    if error is not None:
        surfaces["start error"] = f"{type(error).__name__}: {error}"
        surfaces["start error message"] = getattr(error, "message", None)
    for index, event in enumerate(events):
        if isinstance(event, SubagentRunEnded):
            blocks = event.last_assistant_message or ()
            surfaces[f"event {index} end"] = " ".join(
                [event.stop_reason, event.id, event.provider, *(b.text for b in blocks)]
            )
        elif isinstance(event, SubagentRunStarted):
            surfaces[f"event {index} start"] = f"{event.id} {event.provider}"
    if job is not None:
        surfaces["job detail"] = job.detail
        surfaces["job output"] = job.output
    return surfaces


async def run_cell(
    cell: Cell, root: Path, profile: Profile, planted: Planted | None = None
) -> CellReport:
    """Run ``cell`` in ``root`` (a fresh directory) and judge everything it left.

    The caller must be a subreaper (see :func:`dsh_subprocess.testing.become_subreaper`) and
    must not run other product processes meanwhile: survivors are found as new
    descendants of this process.
    """
    report = CellReport(cell.id)
    setup = FakeSetup(root=root, planted=planted or Planted())
    setup.prelude = cell.prelude(setup, profile)
    watch = ProcessWatch()
    fds_before = fd_count()
    started = time.monotonic()
    events: list[SubagentEvent] = []
    controller = CancelController()
    holder: dict[str, object] = {}
    job: JobOutcome | None = None
    result: SubagentResult | None = None
    again: SubagentResult | None = None
    provider = cell.build(setup, profile)
    sampler = RssSampler() if cell.max_rss_growth is not None else None

    async def starting() -> PublishedRun:
        try:
            run = await service.start(provider.name, request)
        except BaseException as exc:
            holder["error"] = exc
            raise
        holder["run"] = run
        return run

    request = SubagentStartRequest(
        prompt=(TextBlock(text=setup.planted.prompt()),),
        parent=ParentContext(session_id="reliability", cwd=str(setup.workspace)),
        cancel=controller.signal,
    )
    try:
        with anyio.fail_after(cell.timeout), sampler or contextlib.nullcontext():
            async with SubagentService() as service:
                service.add_listener(events.append)
                service.register_provider(provider)
                async with anyio.create_task_group() as tg:
                    if cell.cancel_when is not None:
                        tg.start_soon(_cancel_when_ready, cell, setup, controller)
                    job = await settle_start(starting(), controller.signal)
                    tg.cancel_scope.cancel()
                run = holder.get("run")
                if isinstance(run, PublishedRun):
                    result = await run.result()
                    again = await run.result()
                    await run.dispose()  # idempotent: settle_run disposed it already
    except TimeoutError:
        report.problems.append(f"did not settle and dispose within {cell.timeout:.0f}s")
    report.seconds = time.monotonic() - started
    if sampler is not None and cell.max_rss_growth is not None:
        report.rss_growth = sampler.growth
        if sampler.growth > cell.max_rss_growth:
            report.problems.append(
                f"host RSS grew by {sampler.growth / 2**20:.1f} MiB "
                f"(bound {cell.max_rss_growth / 2**20:.0f} MiB)"
            )

    error = holder.get("error")
    if isinstance(error, BaseException):
        report.observed, problems = _judge_start_error(cell.expect, error, events)
        report.problems += problems
    elif result is not None and again is not None and job is not None:
        report.observed, problems = _judge_result(cell.expect, result, again, events, job)
        report.problems += problems
    elif not report.problems:
        report.problems.append("neither a run nor a start error")
    report.leaks = find_leaks(
        setup.planted,
        _surfaces(result, error if isinstance(error, BaseException) else None, events, job),
    )
    # Killed as well as reported, so the next cell starts clean.
    report.survivors += watch.kill_leftovers()
    for name in cell.pidfiles:
        escapee = pid_alive(setup.pidfile(name))
        if escapee is not None and not any(s.startswith(f"{escapee} ") for s in report.survivors):
            report.survivors.append(f"{escapee} ({name})")
    # Collect now, so an abandoned async generator or unclosed resource of this cell is
    # reported against this cell rather than whichever test happens to run the GC.
    gc.collect()
    report.fd_leak = await wait_fds_back(fds_before)
    return report


class RssSampler:
    """Samples this process's RSS from a thread while in use; ``growth`` is the peak
    above the level at entry (a freed buffer would hide from a before/after pair)."""

    def __init__(self, interval: float = 0.002) -> None:
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._me = psutil.Process()
        self._base = 0
        self._peak = 0

    @property
    def growth(self) -> int:
        return max(0, self._peak - self._base)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._peak = max(self._peak, self._me.memory_info().rss)

    def __enter__(self) -> RssSampler:
        self._base = self._peak = self._me.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._peak = max(self._peak, self._me.memory_info().rss)
