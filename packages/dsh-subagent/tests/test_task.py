"""One-shot task admission shared by the product providers."""

from __future__ import annotations

import pytest
from dsh_subagent import SubagentError, SubagentErrorCode, TextBlock, one_shot_task_texts


def test_texts_are_kept_in_order_including_blank_blocks_beside_real_text() -> None:
    blocks = (TextBlock(text="first"), TextBlock(text="  "), TextBlock(text="third"))
    assert one_shot_task_texts("p", blocks) == ["first", "  ", "third"]


@pytest.mark.parametrize(
    ("blocks", "message"),
    [
        ((), "p: the one-shot task must contain only text blocks"),
        ((TextBlock(text=""), TextBlock(text=" \n\t")), "p: the one-shot task must not be empty"),
    ],
)
def test_empty_or_blank_tasks_are_refused_as_invalid_requests(
    blocks: tuple[TextBlock, ...], message: str
) -> None:
    with pytest.raises(SubagentError) as caught:
        one_shot_task_texts("p", blocks)
    assert caught.value.code is SubagentErrorCode.INVALID_REQUEST
    assert caught.value.message == message


def test_a_non_text_block_is_refused() -> None:
    class ImageBlock:
        type = "image"
        text = ""

    with pytest.raises(SubagentError, match="only text blocks"):
        one_shot_task_texts("p", [TextBlock(text="x"), ImageBlock()])  # type: ignore[list-item]
