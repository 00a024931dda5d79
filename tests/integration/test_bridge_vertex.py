"""The pollard bridge over provider="vertex": recorded, charged and replayed offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.oauth2.credentials import Credentials

from pollard import AsyncRuntime, Budget
from pollard.adapters.pollux import governed_run_many
from pollux import Config, RetryPolicy
from pollux.testing import Emulator
from tests._google import without_google

TOKEN = "ya29.vertex-bridge-token-0123456789"
MODEL = "gemini-2.5-flash"


@pytest.fixture(autouse=True)
def _no_google_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    without_google(monkeypatch, tmp_path)


async def test_a_governed_fan_out_records_and_replays_without_vertex(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "runs.db"
    prompts = ["One?", "Two?"]
    with Emulator(api_key=TOKEN, models=(MODEL,)) as emu:
        config = Config(
            provider="vertex",
            model=MODEL,
            project="acme-prod",
            location="us-central1",
            base_url=emu.base_url("vertex"),
            credentials=Credentials(token=TOKEN),
            retry=RetryPolicy(max_attempts=1),
        )
        async with AsyncRuntime(db) as rt:
            run = rt.run("vertex", budget=Budget(steps=5))
            recorded = await governed_run_many(run, prompts, config=config)
            nodes = [n for n in run.store.children(run.root_id) if n.kind.value == "model_call"]
        sent = len(emu.requests)
    assert recorded.status == "ok" and sent == 2
    for node in nodes:
        assert node.payload["provider"] == "vertex"
        assert node.payload["model"] == MODEL
        assert node.payload["_pollard"] == {"provider": "gcp.vertex_ai"}
        assert TOKEN not in json.dumps(node.payload) + json.dumps(node.result)
    # Vertex AI is gone (the emulator stopped) and so are the credentials: no ADC here, none
    # injected. Replay answers from the ledger without asking for a token.
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-adc.json"))
    offline = Config(
        provider="vertex",
        model=MODEL,
        project="acme-prod",
        location="us-central1",
        base_url=config.base_url,
        retry=RetryPolicy(max_attempts=1),
    )
    async with AsyncRuntime(db, mode="replay") as rt:
        run = rt.run("vertex", budget=Budget(steps=5))
        replayed = await governed_run_many(run, prompts, config=offline)
    assert replayed.answers == recorded.answers
