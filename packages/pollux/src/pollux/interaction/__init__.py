"""The interaction model: Environment + Input (+ Config) -> Output.

Pure value types with no I/O: :class:`Environment`, :class:`Input`, :class:`Message`,
:class:`Continuation`, the tool types, :class:`Output` and its facets, :class:`Event`,
:class:`OutputCollection`, :class:`OutputRequirements`, and the deferred handle/snapshot.
"""

from __future__ import annotations

from .cache_events import CacheEvent as CacheEvent
from .cache_events import CacheEventKind as CacheEventKind
from .cache_events import observe_caches as observe_caches
from .call import CallDescription as CallDescription
from .call import describe_call as describe_call
from .call import requirements_from as requirements_from
from .continuation import Continuation as Continuation
from .deferred import BATCH_DISCOUNT as BATCH_DISCOUNT
from .deferred import BATCH_FULL_PRICE_CACHE_READS as BATCH_FULL_PRICE_CACHE_READS
from .deferred import DeferredHandle as DeferredHandle
from .deferred import DeferredSnapshot as DeferredSnapshot
from .deferred import DeferredStatus as DeferredStatus
from .environment import CachePolicy as CachePolicy
from .environment import CacheSetting as CacheSetting
from .environment import Environment as Environment
from .events import Event as Event
from .events import EventType as EventType
from .input import Input as Input
from .intercept import CallInterceptor as CallInterceptor
from .intercept import ProviderCall as ProviderCall
from .intercept import StreamInterceptor as StreamInterceptor
from .intercept import intercept_calls as intercept_calls
from .messages import Message as Message
from .messages import MessageRole as MessageRole
from .output import CacheMode as CacheMode
from .output import CollectionStatus as CollectionStatus
from .output import CompletionStatus as CompletionStatus
from .output import Diagnostics as Diagnostics
from .output import Metrics as Metrics
from .output import Output as Output
from .output import OutputCollection as OutputCollection
from .output import Usage as Usage
from .output import completion_status_for as completion_status_for
from .output import error_output as error_output
from .requirements import OutputRequirements as OutputRequirements
from .requirements import ResponseSchemaInput as ResponseSchemaInput
from .settings import DeferredSettings as DeferredSettings
from .settings import GenerationSettings as GenerationSettings
from .settings import generation_keywords as generation_keywords
from .tools import ToolCall as ToolCall
from .tools import ToolCallDelta as ToolCallDelta
from .tools import ToolChoice as ToolChoice
from .tools import ToolDeclaration as ToolDeclaration
from .tools import ToolResult as ToolResult

__all__ = [
    "BATCH_DISCOUNT",
    "BATCH_FULL_PRICE_CACHE_READS",
    "CacheEvent",
    "CacheEventKind",
    "CacheMode",
    "CachePolicy",
    "CacheSetting",
    "CallDescription",
    "CallInterceptor",
    "CollectionStatus",
    "CompletionStatus",
    "Continuation",
    "DeferredHandle",
    "DeferredSettings",
    "DeferredSnapshot",
    "DeferredStatus",
    "Diagnostics",
    "Environment",
    "Event",
    "EventType",
    "GenerationSettings",
    "Input",
    "Message",
    "MessageRole",
    "Metrics",
    "Output",
    "OutputCollection",
    "OutputRequirements",
    "ProviderCall",
    "ResponseSchemaInput",
    "StreamInterceptor",
    "ToolCall",
    "ToolCallDelta",
    "ToolChoice",
    "ToolDeclaration",
    "ToolResult",
    "Usage",
    "completion_status_for",
    "describe_call",
    "error_output",
    "generation_keywords",
    "intercept_calls",
    "observe_caches",
    "requirements_from",
]
