"""Adaptive experimentation (`[functions.F.experimentation] type = "adaptive"`) through the real
`tensorzero` client: simulated feedback makes one variant better, the poller (every second here)
recomputes the experiment from it, and the experiment converges on that variant; an episode keeps
its first variant throughout. `GET /experiments/{function}` and `nimbus experiments` show it."""

from __future__ import annotations

import random
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

import nimbus_testkit as kit
import tensorzero_kit as tzk

EXPERIMENT = """
[metrics.helpful]
type = "boolean"
level = "inference"
optimize = "max"

[functions.adaptive_reply]
type = "chat"

[functions.adaptive_reply.variants.plain]
type = "chat_completion"
model = "dummy"

[functions.adaptive_reply.variants.better]
type = "chat_completion"
model = "dummy"

[functions.adaptive_reply.variants.spare]
type = "chat_completion"
model = "dummy"

[functions.adaptive_reply.experimentation]
type = "adaptive"
metric = "helpful"
candidate_variants = ["plain", "better"]
fallback_variants = ["spare"]
min_samples_per_variant = 5
update_period_s = 1
"""

# How often each variant's answer is found helpful in the simulation.
HELPFUL = {"plain": 0.2, "better": 0.9}


@pytest.fixture(scope="module")
def server(server_factory: Callable[..., kit.NimbusServer], tmp_path_factory: pytest.TempPathFactory) -> kit.NimbusServer:
    config_dir = tmp_path_factory.mktemp("experiment-config") / "config"
    shutil.copytree(kit.DEFAULT_CONFIG.parent, config_dir)
    config = config_dir / kit.DEFAULT_CONFIG.name
    config.write_text(config.read_text() + "\n" + EXPERIMENT)
    return server_factory("nimbus-experiments", config=config, extra_env={"NIMBUS_SCHEDULE_INTERVAL_SECS": "1"})


@pytest.fixture(scope="module")
def tz(server: kit.NimbusServer) -> Iterator[Any]:
    from tensorzero import TensorZeroGateway  # noqa: PLC0415

    with TensorZeroGateway.build_http(gateway_url=server.base_url, timeout=30) as client:
        yield client


def experiment(server: kit.NimbusServer) -> dict[str, Any]:
    response = requests.get(f"{server.base_url}/experiments/adaptive_reply", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def reply(tz: Any, episode_id: uuid.UUID | None = None) -> Any:
    return tz.inference(function_name="adaptive_reply", input=tzk.says("Hello"), episode_id=episode_id)


def test_the_experiment_converges_on_the_better_variant_and_episodes_stay_sticky(
    tz: Any, server: kit.NimbusServer
) -> None:
    before = experiment(server)
    assert before["decision"]["phase"] == "nursery"
    assert before["winner"] is None
    assert before["probabilities"] == {"plain": 0.5, "better": 0.5}

    rng = random.Random(7)
    sticky = reply(tz)
    sticky_variant = sticky.variant_name
    served: Counter[str] = Counter()
    deadline = time.monotonic() + 90
    state = before
    while state["winner"] is None:
        assert time.monotonic() < deadline, f"no winner in time: {state}, served {served}"
        for _ in range(10):
            response = reply(tz)
            served[response.variant_name] += 1
            helpful = rng.random() < HELPFUL[response.variant_name]
            tz.feedback(metric_name="helpful", inference_id=response.inference_id, value=helpful)
        # The same episode keeps its first variant, whatever the experiment does meanwhile.
        again = reply(tz, sticky.episode_id)
        assert again.variant_name == sticky_variant
        time.sleep(1.2)
        state = experiment(server)

    assert state["winner"] == "better", state
    assert state["decision"] == {"phase": "stopped", "winner": "better"}
    assert state["probabilities"] == {"better": 1.0}
    stats = {row["variant"]: row for row in state["variants"]}
    assert stats["better"]["count"] >= 5 and stats["plain"]["count"] >= 5
    assert stats["better"]["mean"] > stats["plain"]["mean"]
    assert state["computed_at"] is not None

    # New episodes now all get the winner (once the cached decision is read again: ≤ 1 s here).
    time.sleep(1.2)
    assert {reply(tz).variant_name for _ in range(10)} == {"better"}
    # The old episode still keeps its variant.
    assert reply(tz, sticky.episode_id).variant_name == sticky_variant

    # The CLI shows the same, from the server's data dir.
    shown = server.cli.run("experiments", "adaptive_reply", "--config", server.env["NIMBUS_CONFIG"]).stdout
    assert "experiment adaptive_reply (adaptive, metric helpful): stopped: winner better" in shown
    assert "variant better: 100.0% of new episodes" in shown


def test_experiments_of_other_functions_are_404(server: kit.NimbusServer) -> None:
    for name in ("draft_email", "no_such_function"):
        response = requests.get(f"{server.base_url}/experiments/{name}", timeout=10)
        assert response.status_code == 404, response.text
        assert "no adaptive experiment" in response.json()["error"]
