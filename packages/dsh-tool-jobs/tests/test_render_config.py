"""Status lines, UTF-8 byte bounds, notices, and JobsToolsConfig validation."""

from __future__ import annotations

import pytest
from dsh_tool_jobs import JobError, JobErrorCode, JobSnapshot, notice_text, render_output
from dsh_tool_jobs.config import JobsToolsConfig
from dsh_tool_jobs.render import bound_result, fit_head, fit_tail, render_list, status_line
from hypothesis import given
from hypothesis import strategies as st


def snap(
    status: str = "running",
    detail: str | None = None,
    limit: int | None = None,
    label: str = "pnpm test",
) -> JobSnapshot:
    return JobSnapshot.model_validate(
        {
            "id": "bash-1",
            "kind": "bash",
            "label": label,
            "status": status,
            "detail": detail,
            "output_limit_bytes": limit,
            "started_at": 1,
            "finished_at": None if status in ("running", "stopping") else 2,
            "reported": False,
        }
    )


def test_status_line() -> None:
    assert status_line(snap()) == "[status: running]"
    assert status_line(snap("completed", "exit code: 0")) == "[status: completed, exit code: 0]"


def test_render_output_separator_rule() -> None:
    assert render_output("line one", snap()) == "line one\n[status: running]"
    assert render_output("line one\n", snap()) == "line one\n[status: running]"
    assert render_output("", snap()) == "(no new output)\n[status: running]"


def test_render_output_bounded_keeps_the_status_line_and_the_tail() -> None:
    text = "é" * 100 + "THE END"
    rendered = render_output(text, snap("completed", limit=60))
    assert len(rendered.encode()) <= 60
    assert rendered.startswith("[output truncated]\n")
    assert rendered.endswith("THE END\n[status: completed]")
    assert "\ufffd" not in rendered
    # A limit smaller than the fixed parts keeps a tail of them.
    tiny = render_output(text, snap("completed", limit=10))
    assert tiny == "completed]"
    assert render_output("short", snap(limit=1000)) == "short\n[status: running]"


def test_bound_result_marker() -> None:
    assert bound_result("abc", None) == "abc"
    assert bound_result("abc", 3) == "abc"
    assert bound_result("x" * 40, 25) == "[result truncated]\n" + "x" * 6


def test_render_list() -> None:
    assert render_list([]) == "(no background jobs)"
    assert render_list([snap(), snap("killed", label="b")]) == (
        "bash-1 [bash] running — pnpm test\nbash-1 [bash] killed — b"
    )


def test_notice_text_and_its_bounded_forms() -> None:
    full = notice_text(snap("completed", "exit code: 0"))
    assert full == (
        "background job bash-1 (bash: pnpm test) finished [status: completed, exit code: 0]. "
        "Read its output with job_output."
    )
    assert notice_text(snap("completed", "exit code: 0", limit=len(full))) == full
    head = notice_text(snap("failed", "x" * 200, limit=100))
    assert len(head.encode()) == 100
    assert head.startswith("background job bash-1 (bash: pnpm test) finished")
    assert head.endswith("\n[notice truncated]\nDone; job_output.")
    compact = notice_text(snap("failed", "x" * 200, limit=45))
    assert compact == "background job bash-1\nDone; job_output."
    assert notice_text(snap("failed", "x" * 200, limit=10)) == "job_output."[-10:]


@given(st.text(), st.integers(min_value=0, max_value=64))
def test_fit_head_and_tail_never_split_a_code_point(text: str, limit: int) -> None:
    for fitted in (fit_head(text, limit), fit_tail(text, limit)):
        assert len(fitted.encode()) <= max(limit, 0) or fitted == text
        assert len(fitted.encode()) <= limit or len(text.encode()) <= limit
    assert text.startswith(fit_head(text, limit))
    assert text.endswith(fit_tail(text, limit))
    # Maximal: one more code point would not fit.
    head = fit_head(text, limit)
    if head != text:
        assert len((head + text[len(head)]).encode()) > limit


@given(st.text(), st.integers(min_value=1, max_value=200))
def test_render_output_is_always_within_the_limit(text: str, limit: int) -> None:
    rendered = render_output(text, snap("failed", "boom", limit=limit))
    assert len(rendered.encode()) <= limit


def test_config_defaults() -> None:
    config = JobsToolsConfig()
    assert (
        config.wait_timeout_ms,
        config.max_wait_timeout_ms,
        config.max_concurrent_jobs_per_owner,
    ) == (30_000, 600_000, 10)
    assert JobsToolsConfig.load(None) == config


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"wait_timeout_ms": 0}, "wait_timeout_ms: Input should be greater than 0"),
        ({"max_wait_timeout_ms": -5}, "max_wait_timeout_ms: Input should be greater than 0"),
        ({"max_concurrent_jobs_per_owner": 0}, "max_concurrent_jobs_per_owner: Input should be"),
        ({"max_concurrent_jobs_per_owner": 1.5}, "max_concurrent_jobs_per_owner: Input should"),
        ({"max_concurrent_jobs_per_owner": True}, "max_concurrent_jobs_per_owner: Input should"),
        ({"max_concurrent_jobs_per_owner": 2**53}, "max_concurrent_jobs_per_owner: Input should"),
        (
            {"wait_timeout_ms": 700_000},
            "wait_timeout_ms (700000) exceeds max_wait_timeout_ms (600000)",
        ),
        ({"completion": "wakeup"}, "completion: Extra inputs are not permitted"),
    ],
)
def test_config_rejects_invalid_values_naming_the_field(
    data: dict[str, object], message: str
) -> None:
    with pytest.raises(JobError) as info:
        JobsToolsConfig.load(data)
    assert info.value.code is JobErrorCode.INVALID_CONFIG
    assert str(info.value).startswith("tool-jobs: invalid configuration: ")
    assert message in str(info.value)


def test_config_accepts_the_largest_safe_integer() -> None:
    config = JobsToolsConfig.load({"max_concurrent_jobs_per_owner": 2**53 - 1})
    assert config.max_concurrent_jobs_per_owner == 2**53 - 1
