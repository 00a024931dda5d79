"""The pollard bridge over provider="azure_openai": recorded, charged and replayed offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pollard import AsyncRuntime, Budget
from pollard.adapters.pollux import governed_run_many
from pollux import Config, RetryPolicy
from pollux.testing import Emulator

KEY = "azure-bridge-key-0123456789"
DEPLOYMENT = "prod-gpt5-mini"


@pytest.fixture(autouse=True)
def _no_azure_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_API_KEY", "OPENAI_API_VERSION"):
        monkeypatch.delenv(name, raising=False)


async def test_a_governed_fan_out_records_and_replays_without_the_resource(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    prompts = ["One?", "Two?"]
    with Emulator(api_key=KEY, models=(DEPLOYMENT,)) as emu:
        config = Config(
            provider="azure_openai",
            model=DEPLOYMENT,
            base_url=emu.base_url("azure_openai"),
            credentials=lambda: KEY,
            retry=RetryPolicy(max_attempts=1),
        )
        async with AsyncRuntime(db) as rt:
            run = rt.run("azure", budget=Budget(steps=5))
            recorded = await governed_run_many(run, prompts, config=config)
            nodes = [n for n in run.store.children(run.root_id) if n.kind.value == "model_call"]
        sent = len(emu.requests)
    assert recorded.status == "ok" and sent == 2
    for node in nodes:
        assert node.payload["provider"] == "azure_openai"
        assert node.payload["model"] == DEPLOYMENT
        assert node.payload["_pollard"] == {"provider": "azure.ai.openai"}
        assert KEY not in json.dumps(node.payload) + json.dumps(node.result)
    # The resource is gone: replay answers from the ledger.
    async with AsyncRuntime(db, mode="replay") as rt:
        run = rt.run("azure", budget=Budget(steps=5))
        replayed = await governed_run_many(run, prompts, config=config)
    assert replayed.answers == recorded.answers
