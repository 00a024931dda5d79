"""Token estimators for ``TokenMeter(estimator=..., reserved_output_tokens=N)``.

An estimator has ``estimate_input_tokens(payload) -> int``. ``pollard.estimators.openai`` counts
locally with tiktoken (the ``tiktoken`` extra); the Anthropic and Bedrock step functions in
``pollard.adapters`` are estimators too, backed by the providers' token-count endpoints.
"""
