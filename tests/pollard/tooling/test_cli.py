"""The pollard CLI through a subprocess: every command and option on SQLite stores."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pollard import Runtime, SQLiteStore, seal

from ._cli import one_error_line, pollard, tamper
from ._trees import SECRET_PROMPT, SECRET_RESULT, SECRET_TOKEN, Sample, build_sample

SECRETS = (SECRET_PROMPT, SECRET_RESULT, SECRET_TOKEN)


def forge_result(node_id: str) -> str:
    """SQL that rewrites one node's stored result behind pollard's back."""
    return (
        f"UPDATE nodes SET result = replace(result, '42 and 7', '43 and 7') WHERE id = X'{node_id}'"
    )


@pytest.fixture
def sample_db(tmp_path: Path) -> tuple[Path, Sample]:
    path = tmp_path / "runs.db"
    with SQLiteStore(path) as store:
        sample = build_sample(store)
    return path, sample


@pytest.fixture
def recorded_db(tmp_path: Path) -> tuple[Path, str]:
    """A store written by the runtime itself (two runs)."""
    path = tmp_path / "recorded.db"
    with Runtime(path) as runtime:
        with runtime.run("alpha") as run:
            run.model_call(
                {"model": "mock-1", "input": "hi"},
                fn=lambda _p: {"text": "hello", "usage": {"input_tokens": 2, "output_tokens": 3}},
            )
            run.note({"checkpoint": "one"})
            root = run.root_id
        with runtime.run("beta") as run:
            run.note({"status": "ok"})
    return path, root


def test_help_lists_every_command_and_each_command_has_help() -> None:
    from pollard.cli import build_parser

    top = pollard("--help")
    assert top.code == 0
    commands = ["runs", "show", "report", "verify", "seal", "merge", "gc", "export", "import"]
    commands += ["migrate", "approvals", "approve", "deny", "team-report", "verify-dependencies"]
    for name in commands:
        assert name in top.out
        result = pollard(name, "--help")
        assert result.code == 0, result.err
        assert result.out.startswith(f"usage: pollard {name}")
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert sorted(sub.choices) == sorted(commands)  # type: ignore[union-attr]
    assert pollard("--version").out.startswith("pollard ")


def test_runs_lists_every_run_of_every_store(
    recorded_db: tuple[Path, str], sample_db: tuple[Path, Sample]
) -> None:
    recorded, _ = recorded_db
    sample, smp = sample_db
    text = pollard("runs", recorded, sample)
    assert text.code == 0
    assert "alpha" in text.out and "beta" in text.out and "triage" in text.out
    data = pollard("runs", recorded, sample, "--json").json()
    rows = {(r["store"], r["label"]): r for r in data["runs"]}
    assert rows[(str(sample), "triage")] == {
        "store": str(sample),
        "root_id": smp.root,
        "label": "triage",
        "attempt": 0,
        "nodes": 8,
        "pruned": 1,
    }
    assert rows[(str(recorded), "alpha")]["nodes"] == 3
    assert [r["label"] for r in data["runs"] if r["store"] == str(recorded)] == ["alpha", "beta"]


def test_show_is_a_content_free_tree_by_default(sample_db: tuple[Path, Sample]) -> None:
    path, smp = sample_db
    result = pollard("show", path, smp.root)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == "root f187428a triage"
    assert lines[1] == f"model_call {smp.model[:8]} openai/gpt-5.5 [steps=1 tokens=60 usd=0.0031]"
    assert f"|-- note {smp.pruned[:8]} status=draft [PRUNED]" in lines
    assert f"    |   tool_call {smp.tool[:8]} send@1 [steps=1] [REDACTED]" in lines
    assert f"    `-- refusal {smp.refusal[:8]} budget:tokens [REFUSED]" in lines
    for secret in SECRETS:
        assert secret not in result.out
    unicode = pollard("show", path, smp.root, "--unicode").out
    assert f"└── note {smp.anchor[:8]} branch" in unicode


def test_show_payloads_and_json(sample_db: tuple[Path, Sample]) -> None:
    path, smp = sample_db
    with_payloads = pollard("show", path, "triage", "--payloads").out
    assert SECRET_PROMPT in with_payloads and SECRET_RESULT in with_payloads
    assert SECRET_TOKEN not in with_payloads  # redacted before it was ever stored

    data = pollard("show", path, "triage", "--json").json()
    assert data["root_id"] == smp.root
    nodes = {n["id"]: n for n in data["nodes"]}
    assert len(nodes) == 8 and "payload" not in nodes[smp.model]
    assert nodes[smp.model]["charges"] == {"steps": 1, "tokens": 60, "usd": 0.0031}
    assert nodes[smp.left]["avoided"] == {"tokens": 75}
    assert nodes[smp.refusal]["refusal"]["reason"] == "budget"
    assert nodes[smp.refusal]["refusal"]["remaining"] == "-35"
    assert nodes[smp.pruned]["pruned"] is True and nodes[smp.tool]["redacted"] is True
    assert nodes[smp.model]["children"] == sorted(nodes[smp.model]["children"])
    assert set(nodes[smp.model]["children"]) == {smp.anchor, smp.pruned}
    assert not any(secret in json.dumps(data) for secret in SECRETS)
    full = pollard("show", path, "triage", "--json", "--payloads").json()
    model = next(n for n in full["nodes"] if n["id"] == smp.model)
    assert model["payload"]["input"] == SECRET_PROMPT
    assert model["result"]["text"] == SECRET_RESULT


def test_show_html_writes_one_static_page(sample_db: tuple[Path, Sample], tmp_path: Path) -> None:
    path, smp = sample_db
    page = tmp_path / "run.html"
    result = pollard("show", path, smp.root, "--html", page)
    assert result.code == 0 and result.out.strip() == str(page)
    text = page.read_text(encoding="utf-8")
    # One inline script (allowed by its hash) draws the rows; nothing is loaded from elsewhere.
    assert "<script src" not in text and "script-src 'sha256-" in text and smp.refusal in text
    assert not any(secret in text for secret in SECRETS)
    info = pollard("show", path, smp.root, "--html", page, "--json", "--payloads").json()
    assert info == {"root_id": smp.root, "output": str(page), "bytes": page.stat().st_size}
    assert SECRET_PROMPT in page.read_text(encoding="utf-8")
    missing_dir = tmp_path / "nope" / "run.html"
    assert "cannot write" in one_error_line(pollard("show", path, smp.root, "--html", missing_dir))


def test_root_can_be_an_id_a_prefix_a_label_or_an_inner_node(
    sample_db: tuple[Path, Sample],
) -> None:
    path, smp = sample_db
    for root in (smp.root, smp.root[:6], "triage"):
        assert pollard("report", path, root, "--json").json()["root_id"] == smp.root
    inner = pollard("show", path, smp.anchor, "--json").json()
    assert [n["id"] for n in inner["nodes"]] == [smp.anchor, smp.left, smp.tool, smp.refusal]
    assert "no node or run matches 'nothing'" in one_error_line(pollard("show", path, "nothing"))


def test_an_ambiguous_label_asks_for_the_id(tmp_path: Path) -> None:
    path = tmp_path / "two.db"
    with Runtime(path) as runtime:
        runtime.run("same")
        runtime.run("same", attempt=1)
    assert "2 runs are labelled 'same'" in one_error_line(pollard("show", path, "same"))


def test_report_sums_spent_and_avoided(
    sample_db: tuple[Path, Sample], recorded_db: tuple[Path, str]
) -> None:
    path, smp = sample_db
    data = pollard("report", path, smp.root, "--json").json()
    assert data == {
        "root_id": smp.root,
        "nodes": 8,
        "refusals": 1,
        "pruned": 1,
        "spent": {"steps": 4, "tokens": 135, "usd": 0.0031},
        "avoided": {"tokens": 75},
        "ledger": {},  # the sample was written node by node, outside any budget scope
        # The model calls' recorded prompt tokens: none read from or written to a cache.
        "cache": {
            "prompt_tokens": 40,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "hit_ratio": 0.0,
            "saved": {},
            "saved_exact": {},
        },
        "exact": {  # the audit form: exact decimal texts
            "spent": {"steps": "4", "tokens": "135", "usd": "0.0031"},
            "avoided": {"tokens": "75"},
            "ledger": {},
        },
    }
    text = pollard("report", path, smp.root).out
    assert "spent     steps=4 tokens=135 usd=0.0031" in text
    assert "cache     hit ratio 0.0% (0 of 40 prompt tokens read, 0 written)" in text
    recorded, root = recorded_db
    data = pollard("report", recorded, root, "--json").json()
    assert data["spent"]["tokens"] == 5 and data["spent"]["steps"] == 1
    assert data["ledger"]["tokens"] == 5  # the runtime settles into the run's totals


def test_verify_passes_then_reports_tampering_with_exit_1(sample_db: tuple[Path, Sample]) -> None:
    path, smp = sample_db
    ok = pollard("verify", path, "--json")
    assert ok.code == 0
    assert ok.json() == {"ok": True, "roots": 1, "nodes": 8, "findings": []}
    assert pollard("verify", path).out.strip() == "verified 8 node(s) in 1 run(s): ok"
    tamper(path, forge_result(smp.model))
    bad = pollard("verify", path, "--json")
    assert bad.code == 1
    report = bad.json()
    assert report["ok"] is False
    assert [f["node_id"] for f in report["findings"]] == [smp.model]
    assert "does not match its digest" in report["findings"][0]["message"]
    scoped = pollard("verify", path, smp.tool)  # the tool call's ancestry includes the model call
    assert scoped.code == 1 and smp.model in scoped.out


def test_seal_prints_the_digest_json_and_output(
    sample_db: tuple[Path, Sample], tmp_path: Path
) -> None:
    path, smp = sample_db
    with SQLiteStore(path, read_only=True) as store:
        expected = seal(store, smp.root)
    assert pollard("seal", path, smp.root).out.strip() == expected.digest
    assert pollard("seal", path, smp.root, "--json").json() == expected.to_dict()
    out = tmp_path / "seal.json"
    summary = pollard("seal", path, smp.root, "--output", out, "--json").json()
    assert summary == {"root_id": smp.root, "digest": expected.digest, "output": str(out)}
    assert json.loads(out.read_text()) == expected.to_dict()
    tamper(path, forge_result(smp.model))
    assert one_error_line(pollard("seal", path, smp.root), code=1).startswith("pollard: integrity:")


def test_merge_copies_counts_and_is_idempotent(
    sample_db: tuple[Path, Sample], recorded_db: tuple[Path, str], tmp_path: Path
) -> None:
    sample, smp = sample_db
    recorded, _ = recorded_db
    dest = tmp_path / "combined.db"
    first = pollard("merge", dest, sample, recorded, "--json")
    assert first.code == 0, first.err
    data = first.json()
    assert data["destination"] == str(dest)
    assert [s["source"] for s in data["sources"]] == [str(sample), str(recorded)]
    assert data["totals"] == {
        "copied": 13,
        "existing": 0,
        "result_conflicts": 0,
        "meta_conflicts": 0,
    }
    again = pollard("merge", dest, sample, recorded, "--json").json()
    assert again["totals"]["copied"] == 0 and again["totals"]["existing"] == 13
    labels = {r["label"] for r in pollard("runs", dest, "--json").json()["runs"]}
    assert labels == {"triage", "alpha", "beta"}
    text = pollard("merge", dest, sample)
    assert text.code == 0 and "copied 0" in text.out
    with SQLiteStore(dest, read_only=True) as store:
        assert store.totals(smp.root)["tokens"] == 135
    assert "is the destination" in one_error_line(pollard("merge", sample, sample))


def test_merge_records_conflicts_and_replay_refuses_them(
    sample_db: tuple[Path, Sample], tmp_path: Path
) -> None:
    sample, smp = sample_db
    other = tmp_path / "other.db"
    assert pollard("merge", other, sample).code == 0
    # Same node, different stored result and digest (a re-recorded call): a real conflict.
    tamper(other, forge_result(smp.model))
    with SQLiteStore(other) as store:
        node = store.get(smp.model)
    from pollard import Node

    forged = Node.create(
        node.kind,
        node.parent,
        node.payload,
        attempt=node.attempt,
        result=node.result,
        meta=node.meta,
    )
    with SQLiteStore(other) as store:
        store.drop_nodes([n.id for n in reversed(list(store.walk(smp.model)))])
        store.put(forged)
    refused = pollard("merge", sample, other, "--replay")
    assert one_error_line(refused, code=1).startswith("pollard: integrity: replay merge refused")
    merged = pollard("merge", sample, other, "--json")
    assert merged.code == 0
    assert merged.json()["totals"]["result_conflicts"] == 1
    with SQLiteStore(sample, read_only=True) as store:
        kept = store.get(smp.model)
    assert kept.result["text"] == SECRET_RESULT
    assert kept.meta["result_conflicts"][0]["result_digest"] == forged.result_digest
    assert "[RESULT-CONFLICT]" in pollard("show", sample, smp.root).out


def test_gc_drops_pruned_subtrees_and_compacts(sample_db: tuple[Path, Sample]) -> None:
    path, smp = sample_db
    dropped = pollard("gc", path, "drop-pruned", "--json")
    assert dropped.code == 0, dropped.err
    report = dropped.json()
    assert report["mode"] == "drop-pruned" and report["removed_nodes"] == 2
    with SQLiteStore(path, read_only=True) as store:
        assert not store.exists(smp.pruned) and not store.exists(smp.pruned_child)
        assert report["survivor_seals"] == {smp.root: seal(store, smp.root).digest}
    assert pollard("gc", path, "drop-pruned", "--json").json()["removed_nodes"] == 0
    compact = pollard("gc", path, "compact")
    assert compact.code == 0 and compact.out.startswith("compact: removed 0 node(s)")
    assert f"seal {smp.root} " in compact.out


def test_gc_refuses_a_tampered_store_and_removes_nothing(sample_db: tuple[Path, Sample]) -> None:
    path, smp = sample_db
    tamper(path, forge_result(smp.model))
    assert one_error_line(pollard("gc", path, "drop-pruned"), code=1).startswith(
        "pollard: integrity:"
    )
    with SQLiteStore(path, read_only=True) as store:
        assert store.exists(smp.pruned)


def test_export_then_import_round_trips(sample_db: tuple[Path, Sample], tmp_path: Path) -> None:
    path, smp = sample_db
    exported = tmp_path / "triage.json"
    info = pollard("export", path, "triage", exported, "--json").json()
    assert info["nodes"] == 8 and info["root_id"] == smp.root
    document = json.loads(exported.read_text())
    assert document["format"] == "pollard/subtree/v1"
    assert document["nodes"][0]["id"] == smp.root
    archive = tmp_path / "archive.db"
    imported = pollard("import", exported, archive, "--expect-seal", info["digest"], "--json")
    assert imported.code == 0, imported.err
    assert imported.json() == {
        "root_id": smp.root,
        "imported": 8,
        "existing": 0,
        "digest": info["digest"],
    }
    assert pollard("import", exported, archive, "--json").json()["existing"] == 8
    assert pollard("seal", archive, smp.root).out.strip() == info["digest"]
    with SQLiteStore(path, read_only=True) as original:
        meta = original.get(smp.model).meta
    with SQLiteStore(archive, read_only=True) as store:
        assert store.get(smp.model).meta == meta
        assert store.totals(smp.root)["tokens"] == 135
    text = pollard("export", path, smp.root, tmp_path / "again.json")
    assert text.code == 0 and text.out.splitlines()[1] == f"seal {info['digest']}"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: d["nodes"][1].__setitem__(
                "result", d["nodes"][1]["result"].replace("42", "43")
            ),
            "does not match its digest",
        ),
        (
            lambda d: d["nodes"][1].__setitem__(
                "payload", d["nodes"][1]["payload"].replace("secret", "public")
            ),
            "does not match its content",
        ),
        (
            lambda d: d["nodes"][1].__setitem__(
                "meta", d["nodes"][1]["meta"].replace('"60"', '"6"')
            ),
            "content digest",
        ),
        (lambda d: d["nodes"].insert(2, d["nodes"].pop(5)), "walk order"),
        (lambda d: d["nodes"].append(dict(d["nodes"][3])), "appears twice"),
        (lambda d: d["seal"].__setitem__("digest", "0" * 64), "seal does not match"),
    ],
)
def test_import_rejects_a_tampered_file_and_writes_nothing(
    sample_db: tuple[Path, Sample], tmp_path: Path, edit, message: str
) -> None:
    path, _ = sample_db
    exported = tmp_path / "x.json"
    assert pollard("export", path, "triage", exported).code == 0
    document = json.loads(exported.read_text())
    edit(document)
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(document))
    target = tmp_path / "target.db"
    line = one_error_line(
        pollard("import", forged, target), code=2
    )  # a bad file, as in pollard 0.8
    assert line.startswith("pollard: integrity:") and message in line
    assert not target.exists()


def test_import_needs_the_subtree_parent_and_a_valid_file(
    sample_db: tuple[Path, Sample], tmp_path: Path
) -> None:
    path, smp = sample_db
    inner = tmp_path / "inner.json"
    assert pollard("export", path, smp.anchor, inner).code == 0
    fresh = tmp_path / "fresh.db"
    assert "not in the target store" in one_error_line(pollard("import", inner, fresh))
    ok = pollard("import", inner, path, "--json")  # its parent exists there
    assert ok.code == 0 and ok.json()["existing"] == 4
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    assert "not a valid pollard/subtree/v1 file" in one_error_line(pollard("import", junk, fresh))
    assert "no such file" in one_error_line(pollard("import", tmp_path / "absent.json", fresh))
    assert "the seal digest" in one_error_line(
        pollard("import", inner, path, "--expect-seal", "f" * 64), code=2
    )


def test_usage_and_input_errors_exit_2_with_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    for args in (
        ("runs", missing),
        ("show", missing, "x"),
        ("verify", missing),
        ("gc", missing, "compact"),
    ):
        assert "no such store" in one_error_line(pollard(*args))
    assert not missing.exists()
    assert "invalid choice" in one_error_line(pollard("frobnicate"))
    assert "required" in one_error_line(pollard("show"))
    assert "invalid choice" in one_error_line(pollard("gc", missing, "everything"))
    assert "required" in one_error_line(pollard())
    not_db = tmp_path / "text.db"
    not_db.write_text("this is not a database" * 100)
    assert one_error_line(pollard("runs", not_db)).startswith("pollard: ")


PG_DSN = "postgresql://alice:hunter2@127.0.0.1:1/pollard"


@pytest.mark.parametrize(
    "args",
    [
        ("runs", PG_DSN + "#team"),
        ("runs", "{pg}"),
        ("show", "{pg}", "triage"),
        ("report", "{pg}", "triage"),
        ("verify", "{pg}"),
        ("seal", "{pg}", "triage"),
        ("merge", "{tmp}/dest.db", "{pg}"),
        ("merge", "{pg}", "{tmp}/missing.db"),
        ("gc", "{pg}", "compact"),
        ("export", "{pg}", "triage", "{tmp}/out.json"),
    ],
)
def test_every_command_takes_postgres_specs_and_never_prints_the_dsn(
    args: tuple[str, ...], tmp_path: Path
) -> None:
    argv = [
        arg.replace("{pg}", "pg-env:POLLARD_CLI_TEST_DSN#team").format(tmp=tmp_path) for arg in args
    ]
    line = one_error_line(pollard(*argv, env={"POLLARD_CLI_TEST_DSN": PG_DSN}))
    assert "hunter2" not in line and "alice" not in line
    if importlib.util.find_spec("pollard.stores.postgres") is None and "missing.db" not in argv[-1]:
        assert line == "pollard: the PostgreSQL store is not available yet"


def test_import_takes_a_postgres_target(sample_db: tuple[Path, Sample], tmp_path: Path) -> None:
    path, _ = sample_db
    exported = tmp_path / "run.json"
    assert pollard("export", path, "triage", exported).code == 0
    line = one_error_line(
        pollard("import", exported, PG_DSN + "#team", env={"POLLARD_CLI_TEST_DSN": PG_DSN})
    )
    assert "hunter2" not in line


def test_the_console_script_is_installed() -> None:
    script = Path(sys.executable).with_name("pollard")
    if not script.exists():
        pytest.skip("no console script next to this interpreter")
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.startswith("pollard ")
