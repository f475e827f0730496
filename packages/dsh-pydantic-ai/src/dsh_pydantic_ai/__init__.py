"""dsh-pydantic-ai: dsh subagent and Job tools as a pydantic-ai toolset."""

from dsh_subagent import ParentSource

from dsh_pydantic_ai.toolset import SubagentToolset

__all__ = ["ParentSource", "SubagentToolset"]
