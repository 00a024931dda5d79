"""Provider packages behind one protocol (:mod:`pollux.providers.base`).

Each provider is a small package (``local``, ``openrouter``, ``openai``, ...) or module
(``mock``) that declares its capabilities in one table. Provider modules import their SDKs
lazily; nothing here is imported by ``import pollux``.
"""
