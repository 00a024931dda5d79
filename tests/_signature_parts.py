"""Pieces of the seed's front-door signatures, as ``str(inspect.signature(...))`` spells them.

Shared by the tests that pin pollux's front doors and the bridge's entry points to the
signatures they had before the generation keywords were declared once.
"""

SAMPLING = (
    "output: 'ResponseSchemaInput | None' = None, temperature: 'float | None' = None, "
    "top_p: 'float | None' = None, max_tokens: 'int | None' = None, seed: 'int | None' = None, "
    "reasoning_effort: 'str | None' = None, reasoning_budget_tokens: 'int | None' = None"
)
TOOL_CHOICE = "tool_choice: 'ToolChoice | None' = None"
TOOLS = "tools: 'Sequence[ToolDeclaration] | None' = None"
OPTIONS = "provider_options: 'dict[str, dict[str, Any]] | None' = None"
PROMPTS = "prompts: 'str | Sequence[str | None] | None' = None"
TURN = "environment: 'Environment', input: 'Input'"
