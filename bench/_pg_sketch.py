"""What would bring `PostgresStore` to its floor: a sketch of admission by running totals.

``python -m bench._pg_sketch [ROUNDS]`` measures server and client CPU per budgeted step, in
alternation on one connection in a fresh schema (dropped after), for four loops:

- the floor (`bench._pg_floor`, prepared);
- the store's two step functions, called with the parameters a budgeted step sends;
- a sketch with one ledger row per (scope, meter) plus a ``held`` column: the reservation is one
  ``UPDATE`` of the claimed rows through ``unnest`` (each row's figures re-checked on its latest
  version by the row lock), then the hold's ``INSERT``; the commit releases the hold, inserts
  the node and moves the charges into the totals;
- a sketch with ONE row per scope holding every meter's settled and held totals (arrays in a
  fixed order): the reservation is the floor's one-row ``UPDATE ... WHERE it fits``, the commit
  one ``UPDATE`` of the same row.

The sketches are the happy path only (one scope, no windows, no refusal, no expiry sweep, no
lost-hold guard): a lower bound of what such a design costs, not a store. docs/reliability.md
("Fourth pass") reports their figures.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench import _pg_floor

DSN = os.environ.get("POLLARD_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
STEPS = 1_500
SCOPE = "8fdbe3bfa9ab8cf49c87486eaf6f40b83edcb4a86f613142ad76723381ea2723"
PAYLOAD = '{"i":%d,"model":"m"}'
RESULT = '{"text":"ok","usage":{"input_tokens":12,"output_tokens":3}}'
META = (
    '{"charges":{"seconds":1e-05,"steps":1,"tokens":15},"created_at":"2026-12-07T12:55:36Z",'
    '"duration_s":1e-05,"usage":{"input_tokens":12,"output_tokens":3},"writer":"w"}'
)
HELD = f'[["b", "{SCOPE}", "steps", "1"]]'
_ASYNC = "SELECT set_config('synchronous_commit', 'off', true)"
_NODE = (
    "INSERT INTO pollard_nodes (store_id, id, parent, kind, attempt, payload, result, "
    "result_digest, meta, interned) SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s, %s"
)
_RESERVE_FN = (
    "SELECT * FROM pollard_reserve_v2(%s, %s, %s, %s, %s, %s::numeric[], %s::numeric[], "
    "%s::text[], %s::text[], %s::numeric[], %s::float8[], %s::numeric[], %s, %s, %s)"
)
_COMMIT_FN = (
    "SELECT * FROM pollard_commit_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::text[], "
    "%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s)"
)
_ROWS_TABLE = (
    "CREATE TABLE sketch_ledger (store_id text, scope text, meter text, "
    "total numeric NOT NULL DEFAULT 0, held numeric NOT NULL DEFAULT 0, "
    "PRIMARY KEY (store_id, scope, meter))"
)
_ROWS_RESERVE = (
    f"WITH s AS ({_ASYNC}), c AS (SELECT * FROM unnest(%s::text[], %s::text[], %s::numeric[], "
    "%s::numeric[]) AS c(scope, meter, lim, req)), u AS (UPDATE sketch_ledger l "
    "SET held = l.held + c.req FROM c WHERE l.store_id = %s AND l.scope = c.scope "
    "AND l.meter = c.meter AND l.total < c.lim "
    "AND (c.req = 0 OR c.req <= c.lim - l.total - l.held) "
    "AND EXISTS (SELECT 1 FROM s) RETURNING 1) "
    "INSERT INTO pollard_reservations (store_id, id, expires, claims) SELECT %s, %s, "
    "extract(epoch FROM clock_timestamp())::float8 + 60, %s WHERE (SELECT count(*) FROM u) = %s "
    "RETURNING 1"
)
_ROWS_COMMIT = (
    f"WITH s AS ({_ASYNC}), d AS (DELETE FROM pollard_reservations WHERE store_id = %s "
    "AND id = %s AND EXISTS (SELECT 1 FROM s) RETURNING 1), "
    f"ins AS ({_NODE} FROM d ON CONFLICT DO NOTHING RETURNING 1), "
    "led AS (UPDATE sketch_ledger l SET total = l.total + x.a, held = l.held - x.h "
    "FROM unnest(%s::text[], %s::text[], %s::text[]::numeric[], %s::text[]::numeric[]) "
    "AS x(s, m, a, h) WHERE l.store_id = %s AND l.scope = x.s AND l.meter = x.m "
    "AND EXISTS (SELECT 1 FROM ins) RETURNING 1) "
    "SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM led)"
)
_SCOPE_TABLE = (
    "CREATE TABLE sketch_scope (store_id text, scope text, meters text[] NOT NULL, "
    "total numeric[] NOT NULL, held numeric[] NOT NULL, PRIMARY KEY (store_id, scope))"
)
# Meters in the row's order: steps, tokens, seconds.
_SCOPE_RESERVE = (
    f"WITH s AS ({_ASYNC}), u AS (UPDATE sketch_scope SET held[1] = held[1] + %s::numeric, "
    "held[2] = held[2] + %s::numeric WHERE store_id = %s AND scope = %s "
    "AND total[1] < %s::numeric AND total[1] + held[1] + %s::numeric <= %s::numeric "
    "AND total[2] < %s::numeric AND (%s::numeric = 0 OR total[2] + held[2] + %s::numeric "
    "<= %s::numeric) AND EXISTS (SELECT 1 FROM s) RETURNING 1) "
    "INSERT INTO pollard_reservations (store_id, id, expires, claims) SELECT %s, %s, "
    "extract(epoch FROM clock_timestamp())::float8 + 60, %s FROM u RETURNING 1"
)
_SCOPE_COMMIT = (
    f"WITH s AS ({_ASYNC}), d AS (DELETE FROM pollard_reservations WHERE store_id = %s "
    "AND id = %s AND EXISTS (SELECT 1 FROM s) RETURNING 1), "
    f"ins AS ({_NODE} FROM d ON CONFLICT DO NOTHING RETURNING 1) "
    "UPDATE sketch_scope SET total[1] = total[1] + %s::numeric, held[1] = held[1] - %s::numeric, "
    "total[2] = total[2] + %s::numeric, held[2] = held[2] - %s::numeric, "
    "total[3] = total[3] + %s::numeric WHERE store_id = %s AND scope = %s "
    "AND EXISTS (SELECT 1 FROM ins) RETURNING 1"
)

Step = Callable[[int], None]


def _loops(conn: Any) -> dict[str, Step]:
    cur = conn.cursor()
    parents = {name: os.urandom(32) for name in ("store", "rows", "scope")}
    for parent in parents.values():
        cur.execute(
            _COMMIT_FN,
            ("s", None, None, parent, None, 1, 0, "{}", "{}", os.urandom(32), "{}", 0)
            + ([],) * 6
            + (None,),
        )

    def node(name: str, i: int) -> tuple[Any, ...]:
        nid, parent = os.urandom(32), parents[name]
        parents[name] = nid
        return ("s", nid, parent, 1, 0, PAYLOAD % i, RESULT, os.urandom(32), META, 0)

    def floor(i: int) -> None:
        _pg_floor._steps(cur, 1, False, True)

    def store(i: int) -> None:
        rid = os.urandom(16).hex()
        claims = ([SCOPE, SCOPE], ["steps", "tokens"], [10**9, 10**12], [1, 0])
        keys = [-5143788865376666646]
        cur.execute(
            _RESERVE_FN,
            ("s", None, keys, *claims, [], [], [], [], [], rid, 60.0, HELD),
            prepare=True,
        )
        assert not cur.fetchall()
        meters = ["steps", "seconds", "tokens"]
        row = node("store", i)
        cur.execute(
            _COMMIT_FN,
            (
                "s",
                None,
                None,
                *row[1:],
                [SCOPE] * 3,
                meters,
                ["1", "0.00001", "15"],
                [],
                [],
                [],
                rid,
            ),
            prepare=True,
        )
        assert cur.fetchall()

    def rows(i: int) -> None:
        rid = os.urandom(16).hex()
        claims = ([SCOPE, SCOPE], ["steps", "tokens"], [10**9, 10**12], [1, 0])
        cur.execute(_ROWS_RESERVE, (*claims, "s", "s", rid, HELD, 2), prepare=True)
        assert cur.fetchall()
        meters = ["steps", "seconds", "tokens"]
        charges = (["1", "0.00001", "15"], ["1", "0", "0"])
        cur.execute(
            _ROWS_COMMIT,
            ("s", rid, *node("rows", i), [SCOPE] * 3, meters, *charges, "s"),
            prepare=True,
        )
        assert cur.fetchone() == (1, 3)

    def scope(i: int) -> None:
        rid = os.urandom(16).hex()
        limits = ("1000000000", "1", "1000000000", "1000000000000", "0", "0", "1000000000000")
        cur.execute(_SCOPE_RESERVE, ("1", "0", "s", SCOPE, *limits, "s", rid, HELD), prepare=True)
        assert cur.fetchall()
        charges = ("1", "1", "15", "0", "0.00001")
        cur.execute(
            _SCOPE_COMMIT, ("s", rid, *node("scope", i), *charges, "s", SCOPE), prepare=True
        )
        assert cur.fetchall()

    return {
        "the floor": floor,
        "store functions": store,
        "sketch: a row per meter + held": rows,
        "sketch: one row per scope + held": scope,
    }


def _measure(conn: Any, step: Step) -> tuple[float, float]:
    """(server, client) CPU milliseconds per step."""
    for i in range(30):
        step(i)
    server, client = _pg_floor._backend_cpu(conn), time.process_time()
    for i in range(STEPS):
        step(i)
    server = _pg_floor._backend_cpu(conn) - server
    client = time.process_time() - client
    return server / STEPS * 1e3, client / STEPS * 1e3


def main(rounds: int) -> None:
    import psycopg

    from pollard import PostgresStore

    schema = f"pollard_sketch_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    dsn = f"{DSN}{'&' if '?' in DSN else '?'}options=-csearch_path%3D{schema}"
    try:
        PostgresStore(dsn, store_id="s").close()  # tables and step functions
        _pg_floor.setup(dsn, 10**9)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(_ROWS_TABLE)
            conn.execute(
                "INSERT INTO sketch_ledger (store_id, scope, meter) "
                "SELECT 's', %s, m FROM unnest(ARRAY['steps', 'tokens', 'seconds']) AS m",
                (SCOPE,),
            )
            conn.execute(_SCOPE_TABLE)
            conn.execute(
                "INSERT INTO sketch_scope VALUES ('s', %s, ARRAY['steps', 'tokens', 'seconds'], "
                "ARRAY[0, 0, 0]::numeric[], ARRAY[0, 0, 0]::numeric[])",
                (SCOPE,),
            )
            loops = _loops(conn)
            for n in range(1, rounds + 1):
                floor = 0.0
                for name, step in loops.items():
                    server, client = _measure(conn, step)
                    floor = floor or server + client
                    print(
                        f"round {n}  {name:34} server {server:.3f} + client {client:.3f} ms; "
                        f"floor / this {floor / (server + client):.2f}",
                        flush=True,
                    )
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
