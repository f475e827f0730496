"""Bad configuration and input: a clear error naming the field, and no process started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reliability.badconfig import config_cases, run_config_case, run_task_case, task_cases

pytestmark = pytest.mark.reliability


def _params() -> list[Any]:
    return [
        pytest.param(
            case,
            id=case.id,
            marks=[pytest.mark.xfail(strict=True, reason=case.xfail)] if case.xfail else [],
        )
        for case in config_cases()
    ]


@pytest.mark.parametrize("case", _params())
def test_invalid_config_is_refused_naming_the_field(case: Any, tmp_path: Path) -> None:
    report = run_config_case(case, tmp_path)
    assert report.ok, report.detail


def _task_params() -> list[Any]:
    return [
        pytest.param(
            product,
            label,
            id=f"{product}-{label}",
            marks=[pytest.mark.xfail(strict=True, reason=xfail)] if xfail else [],
        )
        for product, label, xfail in task_cases()
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # ACP's start() needs asyncio
@pytest.mark.parametrize(("product", "label"), _task_params())
async def test_bad_task_input_starts_nothing(
    product: str, label: str, tmp_path: Path, anyio_backend: str
) -> None:
    del anyio_backend
    report = await run_task_case(product, label, tmp_path)
    assert report.ok, f"{report.detail} (started {report.started})"
