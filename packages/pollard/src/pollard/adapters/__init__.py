"""Provider adapters: step functions for ``run.model_call(payload, fn=...)``.

Each adapter lives in its own submodule and is an optional extra (``pollard[openai]``,
``pollard[anthropic]``, ``pollard[bedrock]``, ``pollard[litellm]``). Adapters take the client
you built: pollard never reads credentials or constructs provider clients. Every adapter returns the
same result shape (``text``, ``tool_calls``, ``usage`` with cache and reasoning tokens, ``raw``);
see ``pollard.adapters._common`` and docs/pollard/governance.md.
"""
