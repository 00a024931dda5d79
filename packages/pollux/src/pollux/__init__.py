"""pollux: one async API over Gemini, OpenAI, Anthropic, OpenRouter and local servers.

Layering (each layer imports only the ones below it):

1. ``pollux/__init__.py``: the public door, explicit re-exports and a sorted ``__all__``.
2. ``Session``: owns provider clients, concurrency limiters, upload and cache registries.
3. The engine: plan, schedule, retry, assemble.
4. Providers: one small package each under ``pollux.providers``.
5. Pure value types with no I/O: sources, config, errors, ``pollux.interaction``.
6. ``pollux.testing``: the public test toolkit (provider emulator, scripted provider).

Provider SDKs are imported lazily, so ``import pollux`` stays fast.
"""

from __future__ import annotations

from ._api import check_ready as check_ready
from ._api import interact as interact
from ._api import prepare_environment as prepare_environment
from ._api import run as run
from ._api import run_many as run_many
from ._api import stream as stream
from ._deferred_api import cancel_deferred as cancel_deferred
from ._deferred_api import collect_deferred as collect_deferred
from ._deferred_api import defer as defer
from ._deferred_api import inspect_deferred as inspect_deferred
from ._local_reasoning import local_reasoning as local_reasoning
from ._session import Session as Session
from ._version import __version__ as __version__
from .config import Config as Config
from .config import ProviderName as ProviderName
from .errors import APIError as APIError
from .errors import CacheError as CacheError
from .errors import ConfigurationError as ConfigurationError
from .errors import ContextOverflowError as ContextOverflowError
from .errors import DeferredNotReadyError as DeferredNotReadyError
from .errors import InternalError as InternalError
from .errors import PlanningError as PlanningError
from .errors import PolluxError as PolluxError
from .errors import RateLimitError as RateLimitError
from .errors import SourceError as SourceError
from .errors import SourceTypeError as SourceTypeError
from .errors import ToolCallParseError as ToolCallParseError
from .interaction import CachePolicy as CachePolicy
from .interaction import CacheSetting as CacheSetting
from .interaction import CallInterceptor as CallInterceptor
from .interaction import Continuation as Continuation
from .interaction import DeferredHandle as DeferredHandle
from .interaction import DeferredSnapshot as DeferredSnapshot
from .interaction import Diagnostics as Diagnostics
from .interaction import Environment as Environment
from .interaction import Event as Event
from .interaction import Input as Input
from .interaction import Message as Message
from .interaction import MessageRole as MessageRole
from .interaction import Metrics as Metrics
from .interaction import Output as Output
from .interaction import OutputCollection as OutputCollection
from .interaction import OutputRequirements as OutputRequirements
from .interaction import ProviderCall as ProviderCall
from .interaction import ResponseSchemaInput as ResponseSchemaInput
from .interaction import ToolCall as ToolCall
from .interaction import ToolCallDelta as ToolCallDelta
from .interaction import ToolChoice as ToolChoice
from .interaction import ToolDeclaration as ToolDeclaration
from .interaction import ToolResult as ToolResult
from .interaction import Usage as Usage
from .interaction import intercept_calls as intercept_calls
from .providers.base import ProviderReadiness as ProviderReadiness
from .quota import CallQuota as CallQuota
from .quota import LocalQuota as LocalQuota
from .retry import RetryPolicy as RetryPolicy
from .source import Source as Source

__all__ = [
    "APIError",
    "CacheError",
    "CachePolicy",
    "CacheSetting",
    "CallInterceptor",
    "CallQuota",
    "Config",
    "ConfigurationError",
    "ContextOverflowError",
    "Continuation",
    "DeferredHandle",
    "DeferredNotReadyError",
    "DeferredSnapshot",
    "Diagnostics",
    "Environment",
    "Event",
    "Input",
    "InternalError",
    "LocalQuota",
    "Message",
    "MessageRole",
    "Metrics",
    "Output",
    "OutputCollection",
    "OutputRequirements",
    "PlanningError",
    "PolluxError",
    "ProviderCall",
    "ProviderName",
    "ProviderReadiness",
    "RateLimitError",
    "ResponseSchemaInput",
    "RetryPolicy",
    "Session",
    "Source",
    "SourceError",
    "SourceTypeError",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallParseError",
    "ToolChoice",
    "ToolDeclaration",
    "ToolResult",
    "Usage",
    "__version__",
    "cancel_deferred",
    "check_ready",
    "collect_deferred",
    "defer",
    "inspect_deferred",
    "interact",
    "intercept_calls",
    "local_reasoning",
    "prepare_environment",
    "run",
    "run_many",
    "stream",
]
