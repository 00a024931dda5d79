"""The generation keywords, declared once, and the decorator that spells them out at runtime.

:class:`GenerationSettings` is the one declaration of the seed's generation keywords
(``output``, ``temperature``, ..., ``provider_options``); :class:`DeferredSettings` is the same
without ``tool_choice`` (deferred delivery has no tool calling). A front door takes them as
``**settings: Unpack[GenerationSettings]`` (PEP 692), so a type checker sees exactly those
keywords, and :func:`generation_keywords` gives it the matching runtime signature (for
``inspect.signature``, ``help()`` and IDEs) and refuses any other keyword with Python's own
``TypeError``. Adding a keyword is one edit here (plus the provider code that honours it).
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ForwardRef, TypedDict, TypeVar, cast, get_args, get_origin

if TYPE_CHECKING:
    from .requirements import ResponseSchemaInput
    from .tools import ToolChoice

__all__ = [
    "DEFERRED_SETTING_NAMES",
    "SETTING_NAMES",
    "DeferredSettings",
    "GenerationSettings",
    "generation_keywords",
]

# The keywords are declared in three pieces only so that both public sets keep the seed's order
# (``provider_options`` last) while deferred delivery leaves out ``tool_choice``. A new keyword
# goes into the piece whose front doors honour it: _Sampling for all of them.


class _Sampling(TypedDict, total=False):
    output: ResponseSchemaInput | None
    """A pydantic model class or JSON Schema dict for structured output."""
    temperature: float | None
    """Sampling temperature (a number >= 0)."""
    top_p: float | None
    """Nucleus-sampling probability, in ``[0, 1]``."""
    max_tokens: int | None
    """Hard cap on output tokens (an integer > 0)."""
    seed: int | None
    """Sampling seed where the provider supports one."""
    reasoning_effort: str | None
    """Qualitative reasoning effort (for example ``"low"``)."""
    reasoning_budget_tokens: int | None
    """Explicit reasoning token budget (exclusive with ``reasoning_effort``)."""


class _ToolControl(TypedDict, total=False):
    tool_choice: ToolChoice | None
    """Tool-choice control: ``"auto"``, ``"required"``, ``"none"`` or ``{"name": ...}``."""


class _ProviderOptions(TypedDict, total=False):
    provider_options: dict[str, dict[str, Any]] | None
    """Raw provider-scoped options, keyed by provider name (``{"openai": {...}}``).

    Entries for other known providers are ignored, an unknown provider name is refused."""


class GenerationSettings(_Sampling, _ToolControl, _ProviderOptions, total=False):
    """The generation keywords of ``run``, ``run_many``, ``interact`` and ``stream`` (all optional).

    Each function lists the keys as keyword-only parameters in its runtime signature; every key
    defaults to None (the provider's default), and the values are validated once, into
    :class:`pollux.OutputRequirements`.

    Example:
        >>> from pollux.interaction import GenerationSettings, describe_call
        >>> settings: GenerationSettings = {"temperature": 0.2, "max_tokens": 64}
        >>> describe_call("Q?", settings=settings).requirements.max_tokens
        64
    """


class DeferredSettings(_Sampling, _ProviderOptions, total=False):
    """The generation keywords of ``defer``: :class:`GenerationSettings` without ``tool_choice``.

    Tool calling is out of scope for deferred delivery, so ``defer(..., tool_choice=...)`` is
    refused like any keyword the function does not take.
    """


SETTING_NAMES: tuple[str, ...] = tuple(GenerationSettings.__annotations__)
"""The keys of :class:`GenerationSettings`, in the seed's order."""

DEFERRED_SETTING_NAMES: tuple[str, ...] = tuple(DeferredSettings.__annotations__)
"""The keys of :class:`DeferredSettings`, in the seed's order."""

_F = TypeVar("_F", bound=Callable[..., Any])


def _annotation(hint: object) -> object:
    # The TypedDict keeps each (postponed) annotation as a ForwardRef; the signature shows the
    # text, as it did when the keywords were written out.
    return hint.__forward_arg__ if isinstance(hint, ForwardRef) else hint


def _unpacks(annotation: object, keys: type[Mapping[str, Any]]) -> bool:
    # Postponed annotations are text; otherwise it is the Unpack[...] object itself.
    if isinstance(annotation, str):
        return annotation.rpartition("Unpack[")[2] == f"{keys.__name__}]"
    origin = get_origin(annotation)
    return "Unpack" in repr(origin) and get_args(annotation) == (keys,)


def generation_keywords(
    keys: type[Mapping[str, Any]] = GenerationSettings,
    *,
    place_after: Mapping[str, str] | None = None,
) -> Callable[[_F], _F]:
    """Give a function taking ``**settings: Unpack[keys]`` the keys' explicit runtime signature.

    The decorated function's ``__signature__`` lists each key of ``keys`` as a keyword-only
    parameter (its annotation, default None) in place of ``**settings``, so
    ``inspect.signature``, ``help()`` and IDEs show the keywords a type checker sees. A keyword
    the signature does not list raises ``TypeError: f() got an unexpected keyword argument
    'x'``, as Python does for an explicit signature (with a did-you-mean suggestion); for a
    coroutine function the error comes when the call is awaited.

    Args:
        keys: The TypedDict the ``**settings`` parameter unpacks (its annotation must name it).
        place_after: Moves the function's own keyword-only parameters to sit right after a
            given parameter, for example ``{"tools": "tool_choice"}``, so the signature keeps
            the seed's order (a keyword-only parameter cannot follow ``**settings`` in source).

    Returns:
        The decorator.

    Raises:
        TypeError: (at decoration) the function has no ``**settings: Unpack[keys]``, a
            parameter of it shadows a key, or ``place_after`` names an unknown parameter.

    Example:
        >>> from typing_extensions import Unpack
        >>> @generation_keywords()
        ... def ask(prompt: str, **settings: Unpack[GenerationSettings]) -> dict:
        ...     return dict(settings)
        >>> "temperature" in str(inspect.signature(ask))
        True
        >>> ask("Q?", temperature=0.2)
        {'temperature': 0.2}
        >>> try:
        ...     ask("Q?", temprature=0.2)
        ... except TypeError as error:
        ...     print(error)
        ask() got an unexpected keyword argument 'temprature'. Did you mean 'temperature'?
    """
    hints = keys.__annotations__
    names = tuple(hints)

    def decorate(fn: _F) -> _F:
        signature = inspect.signature(fn)
        *own, var = signature.parameters.values()
        expected = f"Unpack[{keys.__name__}]"
        if var.kind is not inspect.Parameter.VAR_KEYWORD or not _unpacks(var.annotation, keys):
            raise TypeError(f"{fn.__qualname__} must end in **{var.name}: {expected}")
        shadowed = [p.name for p in own if p.name in hints]
        if shadowed:
            raise TypeError(f"{fn.__qualname__}: {', '.join(shadowed)} shadow {keys.__name__}")
        params = own + [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=_annotation(hints[name]),
            )
            for name in names
        ]
        for moved, anchor in (place_after or {}).items():
            by_name = {p.name: p for p in params}
            if moved not in by_name or anchor not in by_name or moved in hints:
                raise TypeError(f"{fn.__qualname__}: cannot place {moved} after {anchor}")
            params.remove(by_name[moved])
            params.insert(params.index(by_name[anchor]) + 1, by_name[moved])
        accepted = frozenset(p.name for p in params)
        qualname = fn.__qualname__

        def refuse(kwargs: Mapping[str, Any]) -> None:
            for name in kwargs:
                if name not in accepted:
                    close = difflib.get_close_matches(name, sorted(accepted), n=1)
                    suggestion = f". Did you mean {close[0]!r}?" if close else ""
                    raise TypeError(
                        f"{qualname}() got an unexpected keyword argument {name!r}{suggestion}"
                    )

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                if not accepted.issuperset(kwargs):
                    refuse(kwargs)
                return await fn(*args, **kwargs)

        else:
            # A plain function or an async generator function: checked when called, and the
            # generator is returned as is (no extra layer per event).
            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                if not accepted.issuperset(kwargs):
                    refuse(kwargs)
                return fn(*args, **kwargs)

        wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        return cast("_F", wrapper)

    return decorate
