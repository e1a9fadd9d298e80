"""TensorZero itself against Nimbus (issue 30 §5): one configuration (differential_config/), the same
requests and one recording upstream through TensorZero's real gateway (embedded in the pinned
`tensorzero` package) and through Nimbus's local server; the replies, the error statuses and what each
gateway sent upstream are compared field by field (differential_kit.py).

A comparison that differs today is a strict xfail naming why: an item of issue 30, or "not in the
issue" with the difference spelled out. Once the difference is gone the test fails as XPASS: remove
its mark (or the item from its reasons) then.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import differential_kit as dk
from differential_cases import (
    BAD_INPUT,
    FOCUSED,
    OBSERVABILITY,
    REPLY_FIELDS,
    SCENARIOS,
    Extract,
    Scenario,
    because,
    said,
    still_open,
)
import nimbus_testkit as kit
from mock_upstream import RecordingUpstream

# --------------------------------------------------------------------------------------------
# The gateways: TensorZero on the full configuration; Nimbus on the chat_completion part, and on
# the full configuration (best-of-n, mixture-of-n) if it loads it.
# --------------------------------------------------------------------------------------------


@dataclass
class Gateways:
    pair: dk.Pair
    # Nimbus on the configuration with best-of-n and mixture-of-n, if it loads it.
    variants_pair: dk.Pair | None
    variants_refusal: str
    full_config: Path


@pytest.fixture(scope="module")
def gateways(tmp_path_factory: pytest.TempPathFactory, logs_dir: Path) -> Iterator[Gateways]:
    upstream = RecordingUpstream()
    chat_config, full_config = dk.write_configs(tmp_path_factory.mktemp("differential"), upstream.api_base)
    tensorzero = dk.TensorZeroSide(full_config)
    started: list[kit.NimbusServer] = []
    try:
        server = kit.NimbusServer(
            tmp_path_factory.mktemp("data-differential"), logs_dir, config=chat_config, name="nimbus-differential"
        )
        started.append(server)
        nimbus = dk.NimbusSide(server.base_url)
        variants_pair, refusal = None, ""
        try:
            variants_server = kit.NimbusServer(
                tmp_path_factory.mktemp("data-differential-variants"),
                logs_dir,
                config=full_config,
                name="nimbus-differential-variants",
                extra_env={"RUST_BACKTRACE": "0"},
            )
            started.append(variants_server)
            variants_pair = dk.Pair(tensorzero, dk.NimbusSide(variants_server.base_url), upstream)
        except kit.HarnessError as err:
            refusal = str(err)
        yield Gateways(dk.Pair(tensorzero, nimbus, upstream), variants_pair, refusal, full_config)
    finally:
        for server in started:
            server.stop()
        tensorzero.close()
        upstream.stop()


def run(scenario: Scenario, gateways: Gateways) -> tuple[dk.Outcome, dk.Outcome]:
    """The scenario through both gateways (once per module)."""
    pair = gateways.variants_pair if scenario.variants else gateways.pair
    if pair is None:
        pytest.fail(f"Nimbus refused {gateways.full_config.name}: {gateways.variants_refusal[:2000]}")
    if scenario.openai is not None:
        return pair.once(scenario.name, lambda p: p.openai(scenario.openai or {}))
    return pair.once(scenario.name, lambda p: p.inference(**(scenario.inference or {})))


def _params(aspect: str) -> list[Any]:
    params = []
    for scenario in SCENARIOS:
        reasons: tuple[str, ...] = getattr(scenario, aspect)
        marks = [because(*still_open(reasons))] if still_open(reasons) else []
        params.append(pytest.param(scenario, id=scenario.name, marks=marks))
    return params


@pytest.mark.parametrize("scenario", _params("reply"))
def test_same_reply(gateways: Gateways, scenario: Scenario) -> None:
    tensorzero, nimbus = run(scenario, gateways)
    dk.assert_same_reply(tensorzero, nimbus)


@pytest.mark.parametrize("scenario", _params("upstream"))
def test_same_upstream_requests(gateways: Gateways, scenario: Scenario) -> None:
    tensorzero, nimbus = run(scenario, gateways)
    assert tensorzero.upstream, "TensorZero sent nothing upstream: the scenario tests nothing"
    dk.assert_same_upstream(tensorzero, nimbus, as_set=scenario.concurrent)


@pytest.mark.parametrize(
    ("scenario_name", "extract"),
    [
        pytest.param(scenario, extract, id=name, marks=[because(*still_open(reasons))] if still_open(reasons) else [])
        for name, scenario, extract, reasons in FOCUSED
    ],
)
def test_same_upstream_field(gateways: Gateways, scenario_name: str, extract: Extract) -> None:
    scenario = next(s for s in SCENARIOS if s.name == scenario_name)
    tensorzero, nimbus = run(scenario, gateways)
    assert tensorzero.upstream and nimbus.upstream, (len(tensorzero.upstream), len(nimbus.upstream))
    dk.assert_same(extract(tensorzero.upstream_dicts()), extract(nimbus.upstream_dicts()), ordered=True, what=scenario_name)


@pytest.mark.parametrize(
    ("scenario_name", "extract"),
    [
        pytest.param(scenario, extract, id=name, marks=[because(*still_open(reasons))] if still_open(reasons) else [])
        for name, scenario, extract, reasons in REPLY_FIELDS
    ],
)
def test_same_reply_field(gateways: Gateways, scenario_name: str, extract: Callable[[Any], Any]) -> None:
    scenario = next(s for s in SCENARIOS if s.name == scenario_name)
    tensorzero, nimbus = run(scenario, gateways)
    assert (tensorzero.status, nimbus.status) == (200, 200), (tensorzero.reply, nimbus.reply)
    dk.assert_same(extract(tensorzero.reply), extract(nimbus.reply), ordered=True, what=scenario_name)


# --------------------------------------------------------------------------------------------
# Bad input: the same status (the messages are worded differently), and nothing sent upstream.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [pytest.param(name, kwargs, id=name, marks=[because(*still_open(reasons))] if still_open(reasons) else []) for name, kwargs, reasons in BAD_INPUT],
)
def test_same_error_status(gateways: Gateways, name: str, kwargs: dict[str, Any]) -> None:
    tensorzero, nimbus = gateways.pair.once(f"bad:{name}", lambda p: p.inference(**kwargs))
    assert tensorzero.status >= 400, f"TensorZero accepted it: {tensorzero.reply!r}"
    dk.assert_same_reply(tensorzero, nimbus)
    assert (len(tensorzero.upstream), len(nimbus.upstream)) == (0, 0)


def test_same_error_status_on_openai_route(gateways: Gateways) -> None:
    tensorzero, nimbus = gateways.pair.once("bad:openai-model", lambda p: p.openai({"model": "mock", "messages": said("x")}))
    assert tensorzero.status == 400, tensorzero.reply
    dk.assert_same_reply(tensorzero, nimbus)
    assert json.loads(nimbus.reply)["error"]["message"]


# --------------------------------------------------------------------------------------------
# The configuration itself
# --------------------------------------------------------------------------------------------


@because(OBSERVABILITY)
def test_loads_a_config_with_observability_off(gateways: Gateways) -> None:
    """TensorZero's own configs commonly turn observability off; the differential configs leave it out."""
    config = gateways.full_config.with_name("observability.toml")
    config.write_text("[gateway.observability]\nenabled = false\n\n" + gateways.full_config.with_name("chat.toml").read_text())
    result = subprocess.run(  # noqa: S603
        [str(kit.binary("nimbus")), "check-config", "--config", str(config)],
        env=kit.clean_env({"RUST_BACKTRACE": "0"}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
