"""dsh-openai-agents: dsh subagent and Job tools as OpenAI Agents SDK function tools."""

from dsh_subagent import ParentSource

from dsh_openai_agents.function_tools import INVALID_ARGUMENTS, SubagentFunctionTools

__all__ = ["INVALID_ARGUMENTS", "ParentSource", "SubagentFunctionTools"]
