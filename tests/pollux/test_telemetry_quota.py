"""pollux's quota-wait metrics: a histogram of every admission's wait and a counter of waits.

The points go to the SDK's in-memory metric reader. pollux reads the global meter provider
through ``opentelemetry.metrics.get_meter_provider()``; the tests hand it their provider there
(setting the real global is once per process and would leak points into every later test).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import pollux
from pollux import Config, LocalQuota

WINDOW_S = 0.3


@pytest.fixture
def reader(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemoryMetricReader]:
    memory = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[memory])
    monkeypatch.setattr(metrics, "get_meter_provider", lambda: provider)
    yield memory
    provider.shutdown()


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Every data point pollux's meter reported, by instrument name."""
    data = reader.get_metrics_data()
    found: dict[str, list[Any]] = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            assert scope.scope.name == "pollux"
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def mock_config(quota: LocalQuota) -> Config:
    return Config(provider="openai", model="gpt-5-nano", use_mock=True, quota=quota)


async def test_quota_waits_are_a_histogram_of_seconds_and_a_counter(
    reader: InMemoryMetricReader,
) -> None:
    quota = LocalQuota(requests_per_minute=2, window_s=WINDOW_S)
    result = await pollux.run_many([f"Q{i}?" for i in range(5)], config=mock_config(quota))
    waits = [o.diagnostics.raw["quota"]["waited_s"] for o in result.outputs]
    waited = [w for w in waits if w > 0]
    assert waited  # two fit the first window; later ones waited

    found = points(reader)
    (histogram,) = found["pollux.quota.wait.duration"]
    assert histogram.count == 5  # every admission, the ones with room at 0 s included
    assert histogram.sum == pytest.approx(sum(waits), abs=1e-3)
    assert histogram.max >= max(waited) - 1e-3
    assert dict(histogram.attributes) == {
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-5-nano",
    }
    (counter,) = found["pollux.quota.waits"]
    assert counter.value == len(waited)
    assert dict(counter.attributes) == dict(histogram.attributes)


async def test_no_wait_records_no_wait_and_no_quota_records_nothing(
    reader: InMemoryMetricReader,
) -> None:
    await pollux.run("Q?", config=mock_config(LocalQuota(requests_per_minute=100)))
    found = points(reader)
    (histogram,) = found["pollux.quota.wait.duration"]
    assert (histogram.count, histogram.sum) == (1, 0)
    assert "pollux.quota.waits" not in found  # nothing waited, so the counter never started

    reader.get_metrics_data()  # drain
    await pollux.run("Q?", config=Config(provider="openai", model="gpt-5-nano", use_mock=True))
    after = points(reader)
    assert after.get("pollux.quota.wait.duration", [])[0].count == 1  # unchanged: cumulative


def test_without_a_meter_provider_nothing_is_recorded() -> None:
    from pollux import _telemetry

    # The API's default provider stands in: the instruments are never made.
    assert _telemetry._quota_instruments() is None
