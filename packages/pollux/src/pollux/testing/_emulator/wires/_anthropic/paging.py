"""The list pagination the Anthropic API uses (``limit``, ``after_id``, ``before_id``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import invalid

__all__ = ["page"]


def page(items: list[dict[str, Any]], query: Mapping[str, str]) -> dict[str, Any]:
    """One page of ``items`` (already newest first) as ``{data, has_more, first_id, last_id}``."""
    try:
        limit = int(query.get("limit", "20"))
    except ValueError as exc:
        raise invalid("limit: Input should be a valid integer") from exc
    if not 1 <= limit <= 1000:
        raise invalid("limit: Input should be between 1 and 1000")
    ids = [item["id"] for item in items]
    after, before = query.get("after_id"), query.get("before_id")
    if after is not None and before is not None:
        raise invalid("after_id: use after_id or before_id, not both")
    if after is not None:
        start = ids.index(after) + 1 if after in ids else len(ids)
        chosen = items[start : start + limit]
        more = start + limit < len(items)
    elif before is not None:
        end = ids.index(before) if before in ids else 0
        chosen = items[max(0, end - limit) : end]
        more = end - limit > 0
    else:
        chosen = items[:limit]
        more = limit < len(items)
    return {
        "data": chosen,
        "has_more": more,
        "first_id": chosen[0]["id"] if chosen else None,
        "last_id": chosen[-1]["id"] if chosen else None,
    }
