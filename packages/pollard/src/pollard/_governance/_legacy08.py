"""The identity pollard 0.8 gave registered tool calls, to find what it recorded.

pollard 0.8's identity payload of a registered call was ``{"tool", "version", "args", "spec_digest",
"registry_digest"}`` with ``spec_digest = sha256(canonical({name, version, description, schema,
side_effects}))`` (no domain prefix, the description and the full schema included), the registry
digest over those, and sensitive arguments marked with ``"hint": null``. This project's identity
leaves the registry digest and the description out (see docs/pollard/governance.md, "Identity
stability"), so a 0.8 recording is found under this older id: hybrid and replay look it up when
the current id is missing, and serve the recorded node as it is (ids are the contract).
"""

from __future__ import annotations

import hashlib
from typing import Any

from pollard._core._canon import canonical_bytes, payload_digest
from pollard.redaction import redact
from pollard.registry import ActionSpec, Registry

__all__ = ["blocked_digests_08", "identity_payload_08", "registry_digest_08", "spec_digest_08"]


def spec_digest_08(spec: ActionSpec) -> str:
    """Pollard 0.8's digest of one action (description and annotations included)."""
    material = {
        "name": spec.name,
        "version": spec.version,
        "description": spec.description,
        "schema": spec.schema,
        "side_effects": spec.side_effects,
    }
    return hashlib.sha256(canonical_bytes(material)).hexdigest()


def registry_digest_08(registry: Registry) -> str:
    """Pollard 0.8's digest of the whole registry."""
    digests = sorted(spec_digest_08(spec) for spec in registry)
    return hashlib.sha256(canonical_bytes({"spec_digests": digests})).hexdigest()


def identity_payload_08(spec: ActionSpec, registry: Registry, original: Any) -> dict[str, Any]:
    """The identity payload pollard 0.8 recorded for this call (``original``: unredacted args)."""
    # 0.8 had no redaction key: its markers are plain SHA-256 with no hint.
    args = spec.redact_args(original, lambda value: redact(value))
    return {
        "tool": spec.name,
        "version": spec.version,
        "args": args,
        "spec_digest": spec_digest_08(spec),
        "registry_digest": registry_digest_08(registry),
    }


def blocked_digests_08(
    tool: str, original: Any, spec: ActionSpec | None, registry: Registry
) -> tuple[str, ...]:
    """The blocked payload digests pollard 0.8 may have recorded in a refusal of this call.

    0.8 digested ``{"tool", "args"}``; the args as given, or with sensitive fields marked.
    """
    digests = [payload_digest({"tool": tool, "args": original})]
    if spec is not None:
        marked = spec.redact_args(original, lambda value: redact(value))
        digests.append(payload_digest({"tool": tool, "args": marked}))
    return tuple(digests)
