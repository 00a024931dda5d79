"""PostgreSQL pieces of `PostgresStore`'s hot path: literal quoting and the reservation function.

A budgeted step sends two simple queries. Their parameters are written as SQL literals here
instead of by the driver's general adapter (``ClientCursor.mogrify``), which costs more client
CPU than the rest of the step: the hot path only ever binds str, bytes, int, float, Decimal,
None and flat lists of those, so the quoting rules are few and exact (they need
``standard_conforming_strings = on``, PostgreSQL's default since 9.1, which the store checks
per connection before using them).

`RESERVE_FUNCTION` and `COMMIT_FUNCTION` are a step's two round trips as server-side functions
(one statement each, no BEGIN/COMMIT, plans kept by the session): the reservation locks the
scopes, judges every claim and writes the hold; the commit inserts the node, settles its
charges and releases the hold. The store creates them on its first writable open (a new store
or one an older version made) and falls back to its multi-statement batches when the role may
not create them; both paths read and write the same rows, so old and new clients share a
store.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

__all__ = [
    "COMMIT_NAME",
    "FUNCTIONS",
    "FUNCTION_NAMES",
    "RESERVE_NAME",
    "literal",
    "literals",
    "text_params",
]

_ARRAY_ESCAPE = str.maketrans({"\\": "\\\\", '"': '\\"'})


def literal(value: Any) -> str | None:
    """``value`` as a SQL literal, or None when it is not a type the hot path quotes here.

    Strings become untyped literals (``'it''s'``), coerced by the server to the parameter's
    type (text, numeric, float8, bytea in hex form). A string holding NUL is left to the
    driver, which refuses it with its usual error (PostgreSQL text cannot hold NUL).
    """
    kind = type(value)
    if kind is str:
        text: str = value
        if "\x00" in text:
            return None
        return "'" + text.replace("'", "''") + "'"
    if value is None:
        return "NULL"
    if kind is int:  # not bool (a subclass): it is left to the driver
        return str(value)
    if kind is bytes:
        raw: bytes = value
        return "'\\x" + raw.hex() + "'"
    if kind is float or kind is Decimal:
        return "'" + str(value) + "'"  # quoted: 'inf', 'NaN' and exponents parse as typed input
    if kind is list:
        parts = []
        for item in value:
            if type(item) is str:
                if "\x00" in item:
                    return None
                parts.append('"' + item.translate(_ARRAY_ESCAPE) + '"')
            elif type(item) in (int, float, Decimal):
                parts.append(str(item))
            else:
                return None
        return "'{" + ",".join(parts).replace("'", "''") + "}'"
    return None


def literals(values: Sequence[Any]) -> str | None:
    """Comma-separated literals, or None when one of them must go through the driver."""
    out = []
    for value in values:
        text = literal(value)
        if text is None:
            return None
        out.append(text)
    return ", ".join(out)


_NUMBERS = frozenset({int, float, Decimal})


def _array(items: list[Any]) -> bytes | None:
    """A flat list of str (or of numbers) as array input text, or None."""
    if not items:
        return b"{}"
    if type(items[0]) is not str:  # numbers (limits, amounts): no quoting, no exception path
        for item in items:
            if type(item) not in _NUMBERS:
                return None
        return ("{" + ",".join(map(str, items)) + "}").encode("ascii")
    try:
        joined = "".join(items)  # the common case in one pass: no element needs escaping
    except TypeError:  # mixed with a non-string
        return None
    if "\x00" in joined:
        return None
    if "\\" in joined or '"' in joined:
        return ('{"' + '","'.join(item.translate(_ARRAY_ESCAPE) for item in items) + '"}').encode()
    return ('{"' + '","'.join(items) + '"}').encode("utf-8")


def text_params(values: Sequence[Any]) -> list[bytes | None] | None:
    """``values`` as text-format parameters of an extended-protocol call, or None.

    The same types as `literal`, written as the server's input text (no SQL quoting: a bound
    parameter is never parsed as SQL). None when a value is not one of them, so the caller
    takes the quoting path (where the driver refuses what PostgreSQL cannot hold, like NUL).
    """
    out: list[bytes | None] = []
    append = out.append
    for value in values:
        kind = type(value)
        if kind is str:
            if "\x00" in value:
                return None
            append(value.encode("utf-8"))
        elif value is None:
            append(None)
        elif kind is bytes:
            append(b"\\x" + value.hex().encode("ascii"))
        elif kind is int or kind is float or kind is Decimal:
            append(str(value).encode("ascii"))
        elif kind is list:
            array = _array(value)
            if array is None:
                return None
            append(array)
        else:
            return None
    return out


# A store creates a function only when its name is missing, so a change to a body below must
# come with a new name (``_v2``): stores made by this version keep working with theirs.
# v2: each figure is read by index on its own key (a claim's settled total, a refusal's totals
# per scope, a window's events); v1 joined every ledger row (and window event) of the store, so
# a reservation got slower with every run the store ever recorded (3,000 earlier runs made a
# step ten times slower on the server). v1 stays in the databases it was created in, for the
# clients of the version that uses it.
RESERVE_NAME = "pollard_reserve_v2"
COMMIT_NAME = "pollard_commit_v1"
FUNCTION_NAMES = (RESERVE_NAME, COMMIT_NAME)

# Every statement below runs on plans built once per session (``force_generic_plan``: a custom
# plan per call would cost more than the statement) and commits without waiting for its WAL
# flush (see `PostgresStore`: a durable commit forces the flush afterwards, outside the locks).

# The judgement of `RESERVE_FUNCTION` over one snapshot: the live holds, each claim's settled
# total and held amount, then whether any claim is refused. With windows their figures join the
# claims' (`_WINDOW_FIGURES`); without, the statement is smaller: fewer plan nodes per call.
_JUDGE_HEAD = """\
    WITH live AS (
      SELECT array_agg(r.claims) FILTER (WHERE r.expires > t) AS claims,
             coalesce(bool_or(r.expires <= t), false) AS expired
      FROM (SELECT s.expires, s.claims FROM pollard_reservations s
            WHERE s.store_id = p_store ORDER BY s.id) AS r),
    held AS (
      SELECT x->>0 AS kind, x->>1 AS key, x->>2 AS meter, (x->>3)::numeric AS amount
      FROM live CROSS JOIN LATERAL unnest(live.claims) AS h(claims)
      CROSS JOIN LATERAL jsonb_array_elements(h.claims::jsonb) AS x),
    figures AS (
      SELECT c.lim, c.req,
             coalesce((SELECT l.total::numeric FROM pollard_ledger l WHERE l.store_id = p_store
                       AND l.scope = c.scope AND l.meter = c.meter), 0) AS settled,
             coalesce((SELECT sum(h.amount) FROM held h WHERE h.kind = 'b'
                       AND h.key = c.scope AND h.meter = c.meter), 0) AS active
      FROM unnest(c_scope, c_meter, c_lim, c_req) AS c(scope, meter, lim, req)"""
_WINDOW_FIGURES = """
      UNION ALL
      SELECT w.lim, w.req,
             coalesce((SELECT sum(e.amount::numeric) FROM pollard_window_events e
                       WHERE e.store_id = p_store AND e.wkey = w.k AND e.meter = w.m
                       AND e.at > t - w.secs), 0),
             coalesce((SELECT sum(h.amount) FROM held h WHERE h.kind = 'w'
                       AND h.key = w.k AND h.meter = w.m), 0)
      FROM unnest(w_key, w_meter, w_lim, w_secs, w_req) AS w(k, m, lim, secs, req)"""
_JUDGE_TAIL = """)
    SELECT live.claims, live.expired,
           EXISTS (SELECT 1 FROM figures f WHERE NOT (f.settled < f.lim
                   AND (f.req = 0 OR f.req <= f.lim - f.settled - f.active)))
      INTO v_claims, v_expired, v_refused
      FROM live;
"""

# The admission rule of `judge` (refuse when ``settled >= limit`` or when a positive request
# exceeds ``limit - settled - active``), evaluated under the scopes' advisory locks over ONE
# snapshot: live holds, settled totals and window sums are read by one statement, so a commit
# landing meanwhile is seen whole (its charge and its released hold) or not at all. No rows back
# means the hold was written; otherwise the rows are the figures `admit` explains a refusal
# from ("now", each live reservation's claims "r", settled totals "t", window sums "w"), read
# by one later statement: when they fit after all (a settlement landed in between), the store
# asks again, as its batch path does.
# The reservation scan is a plain index scan (bitmap scans are off for the transaction): it
# marks the index entries of holds deleted by earlier commits dead, so a store that is not
# vacuumed does not get slower with every step it recorded. Expired holds and window events are
# deleted after the judgement (it ignores them anyway).
RESERVE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {RESERVE_NAME}(
  p_store text, p_now float8, p_keys bigint[], c_scope text[], c_meter text[], c_lim numeric[],
  c_req numeric[], w_key text[], w_meter text[], w_lim numeric[], w_secs float8[],
  w_req numeric[], p_rid text, p_lease float8, p_held text)
RETURNS TABLE(tag text, a text, b text, c text) LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  t float8 := coalesce(p_now, extract(epoch FROM clock_timestamp())::float8);
  v_claims text[];
  v_expired boolean;
  v_refused boolean;
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true),
          set_config('enable_bitmapscan', 'off', true),
          set_config('plan_cache_mode', 'force_generic_plan', true),
          (SELECT count(*) FROM (SELECT pg_advisory_xact_lock(k) FROM unnest(p_keys) AS k) AS l);
  -- Without windows the judgement is a smaller statement: fewer plan nodes to start per call.
  IF coalesce(cardinality(w_key), 0) = 0 THEN
{_JUDGE_HEAD}{_JUDGE_TAIL}  ELSE
{_JUDGE_HEAD}{_WINDOW_FIGURES}{_JUDGE_TAIL}  END IF;
  IF v_expired THEN
    DELETE FROM pollard_reservations r WHERE r.store_id = p_store AND r.expires <= t;
  END IF;
  FOR i IN 1 .. coalesce(cardinality(w_key), 0) LOOP  -- one index range per window
    DELETE FROM pollard_window_events e WHERE e.store_id = p_store AND e.wkey = w_key[i]
      AND e.meter = w_meter[i] AND e.at <= t - w_secs[i];
  END LOOP;
  IF p_held IS NOT NULL AND NOT v_refused THEN
    INSERT INTO pollard_reservations (store_id, id, expires, claims)
      VALUES (p_store, p_rid, t + p_lease, p_held);
    RETURN;
  END IF;
  -- The figures of a refusal (or of an unheld admission), read again in one snapshot of their
  -- own: a hold settled since the judgement is then seen as its charge, not as both.
  RETURN QUERY
    SELECT 'now', t::text, NULL::text, NULL::text
    UNION ALL SELECT 'r', r.claims, NULL, NULL FROM pollard_reservations r
      WHERE r.store_id = p_store AND r.expires > t
    UNION ALL SELECT 't', l.scope, l.meter, l.total
      FROM (SELECT DISTINCT s FROM unnest(c_scope) AS u(s)) AS u
      CROSS JOIN LATERAL (SELECT l.scope, l.meter, l.total FROM pollard_ledger l
                          WHERE l.store_id = p_store AND l.scope = u.s OFFSET 0) AS l
    UNION ALL SELECT 'w', q.i::text, NULL, q.total::text
      FROM (SELECT x.i, (SELECT sum(e.amount::numeric) FROM pollard_window_events e
                         WHERE e.store_id = p_store AND e.wkey = x.k AND e.meter = x.m
                         AND e.at > t - x.s) AS total
            FROM unnest(w_key, w_meter, w_secs) WITH ORDINALITY AS x(k, m, s, i)) AS q
      WHERE q.total IS NOT NULL;
END
$fn$
"""

# The node, its charges on every scope, its window events and the reservation's release, as one
# transaction: nothing but the checks runs for a known id. ``p_guard`` is the lost-hold guard:
# given a reservation id (a commit on another session than its hold's, so a server crash may
# have come between), nothing is written unless that reservation still exists. No ledger lock:
# a reservation reads every figure in one snapshot, so it sees this commit whole or not at all.
COMMIT_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {COMMIT_NAME}(
  p_store text, p_now float8, p_guard text, p_id bytea, p_parent bytea, p_kind int,
  p_attempt int, p_payload text, p_result text, p_digest bytea, p_meta text, p_interned int,
  l_scope text[], l_meter text[], l_amount text[], e_key text[], e_meter text[],
  e_amount text[], p_rid text)
RETURNS TABLE(parent_ok boolean, inserted boolean, hold_ok boolean)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  v_parent boolean := true;
  v_hold boolean := true;
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true),
          set_config('plan_cache_mode', 'force_generic_plan', true);
  IF p_parent IS NOT NULL THEN
    v_parent := EXISTS (SELECT 1 FROM pollard_nodes n
                        WHERE n.store_id = p_store AND n.id = p_parent);
  END IF;
  IF p_guard IS NOT NULL THEN
    v_hold := EXISTS (SELECT 1 FROM pollard_reservations r
                      WHERE r.store_id = p_store AND r.id = p_guard);
  END IF;
  IF NOT (v_parent AND v_hold) THEN
    RETURN QUERY SELECT v_parent, false, v_hold;
    RETURN;
  END IF;
  INSERT INTO pollard_nodes AS n (store_id, id, parent, kind, attempt, payload, result,
                                  result_digest, meta, interned)
    VALUES (p_store, p_id, p_parent, p_kind, p_attempt, p_payload, p_result, p_digest, p_meta,
            p_interned)
    ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN
    RETURN QUERY SELECT v_parent, false, v_hold;
    RETURN;
  END IF;
  IF cardinality(l_scope) > 0 THEN
    INSERT INTO pollard_ledger AS l (store_id, scope, meter, total)
      SELECT p_store, x.s, x.m, x.a FROM unnest(l_scope, l_meter, l_amount) AS x(s, m, a)
      ON CONFLICT (store_id, scope, meter)
      DO UPDATE SET total = (l.total::numeric + excluded.total::numeric)::text;
  END IF;
  IF cardinality(e_key) > 0 THEN
    INSERT INTO pollard_window_events (store_id, wkey, meter, at, amount)
      SELECT p_store, x.k, x.m, coalesce(p_now, extract(epoch FROM clock_timestamp())::float8),
             x.a
      FROM unnest(e_key, e_meter, e_amount) AS x(k, m, a);
  END IF;
  IF p_rid IS NOT NULL THEN
    DELETE FROM pollard_reservations r WHERE r.store_id = p_store AND r.id = p_rid;
  END IF;
  RETURN QUERY SELECT v_parent, true, v_hold;
END
$fn$
"""

FUNCTIONS = (RESERVE_FUNCTION, COMMIT_FUNCTION)
