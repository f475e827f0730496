"""A scripted pydantic-ai FunctionModel for the adapter tests (module name unique on sys.path)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

__all__ = ["CLAUDE_ANSWER", "Steps", "call", "tool_returns"]

CLAUDE_ANSWER = "PYDANTIC_AI_CLAUDE_CODE_SENTINEL"
"""What the loopback Messages model answers Claude Code by default in these tests."""


class Steps:
    """Step N answers the N-th model request with its tool calls; then the final text.

    The final text is every tool result so far, one per line: what the agent "got".
    """

    def __init__(self, *steps: Sequence[ToolCallPart]) -> None:
        self.steps = steps
        self.infos: list[AgentInfo] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.infos.append(info)
        answered = sum(isinstance(message, ModelResponse) for message in messages)
        if answered < len(self.steps):
            return ModelResponse(parts=list(self.steps[answered]))
        text = "\n".join(str(part.content) for part in tool_returns(messages))
        return ModelResponse(parts=[TextPart(text or "done")])

    def model(self) -> FunctionModel:
        """The FunctionModel driven by these steps."""
        return FunctionModel(self)


def call(tool: str, **arguments: object) -> ToolCallPart:
    """One tool call part."""
    return ToolCallPart(tool, dict(arguments))


def tool_returns(messages: Sequence[ModelMessage]) -> list[ToolReturnPart]:
    """Every tool result the model was sent, in order."""
    return [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
