"""`POST /feedback` and the records routes (`GET /inferences/{id}`, `GET /episodes/{id}/inferences`)
with plain HTTP against `nimbus serve` and its default config (metrics `answer_quality`: float,
inference level; `email_sent`: boolean, episode level). Errors are TensorZero's `{"error": "…"}`.

Records are written by `POST /inference`; the stores themselves are covered by the Rust contract
suite (tests/tests/record_stores.rs) and the router tests, so here every target is missing.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import requests

import nimbus_testkit as kit


def uuid7() -> str:
    """A UUIDv7 for now (Python 3.11 has no uuid7)."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    value = value & ~(0xF << 76) | (0x7 << 76)  # version 7
    value = value & ~(0x3 << 62) | (0x2 << 62)  # RFC 4122 variant
    return str(uuid.UUID(int=value))


def tensorzero_error(response: requests.Response, status: int) -> str:
    """Assert a TensorZero error with `status` and return its message."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert list(body) == ["error"], body
    assert isinstance(body["error"], str)
    return body["error"]


def feedback(server: kit.NimbusServer, body: dict[str, Any], **kwargs: Any) -> requests.Response:
    return requests.post(f"{server.base_url}/feedback", json=body, timeout=30, **kwargs)


def client_body(**fields: Any) -> dict[str, Any]:
    """What the tensorzero client sends: every field, unset ones null."""
    body: dict[str, Any] = {
        "metric_name": None,
        "value": None,
        "inference_id": None,
        "episode_id": None,
        "tags": {},
        "dryrun": None,
        "internal": False,
    }
    body.update(fields)
    return body


def test_unknown_metrics_are_404(nimbus_server: kit.NimbusServer) -> None:
    message = tensorzero_error(
        feedback(nimbus_server, client_body(metric_name="stars", value=5, inference_id=uuid7())), 404
    )
    assert "stars" in message


def test_bad_feedback_is_400_naming_what_is_wrong(nimbus_server: kit.NimbusServer) -> None:
    inference_id, episode_id = uuid7(), uuid7()
    cases = [
        ({"metric_name": "answer_quality", "value": 1, "inference_id": inference_id, "score": 2}, "score"),
        (client_body(metric_name="answer_quality", value=1, inference_id="not-a-uuid"), "inference_id"),
        (client_body(metric_name="answer_quality", value="good", inference_id=inference_id), "number"),
        (client_body(metric_name="email_sent", value=1, episode_id=episode_id), "boolean"),
        (client_body(metric_name="email_sent", value=True, inference_id=inference_id), "episode_id"),
        (client_body(metric_name="answer_quality", value=1, episode_id=episode_id), "inference_id"),
        (client_body(metric_name="comment", value="x", inference_id=inference_id, episode_id=episode_id), "not both"),
        (client_body(metric_name="comment", value=3, episode_id=episode_id), "string"),
        (client_body(metric_name="demonstration", value="x", episode_id=episode_id), "inference_id"),
        ({"metric_name": "answer_quality", "inference_id": inference_id}, "value"),
    ]
    for body, expected in cases:
        message = tensorzero_error(feedback(nimbus_server, body), 400)
        assert expected in message, (body, message)


def test_feedback_on_a_missing_target_is_404_after_a_short_wait(nimbus_server: kit.NimbusServer) -> None:
    inference_id = uuid7()
    started = time.monotonic()
    message = tensorzero_error(
        feedback(nimbus_server, client_body(metric_name="answer_quality", value=0.5, inference_id=inference_id)), 404
    )
    waited = time.monotonic() - started
    assert inference_id in message
    assert 1.0 <= waited < 15, waited
    episode_id = uuid7()
    message = tensorzero_error(
        feedback(nimbus_server, client_body(metric_name="email_sent", value=True, episode_id=episode_id, dryrun=True)),
        404,
    )
    assert episode_id in message


def test_records_routes_answer_404_for_unknown_ids_and_400_for_bad_ones(nimbus_server: kit.NimbusServer) -> None:
    base = nimbus_server.base_url
    missing = uuid7()
    assert missing in tensorzero_error(requests.get(f"{base}/inferences/{missing}", timeout=10), 404)
    assert "inference_id" in tensorzero_error(requests.get(f"{base}/inferences/zzz", timeout=10), 400)
    assert missing in tensorzero_error(requests.get(f"{base}/episodes/{missing}/inferences", timeout=10), 404)
    for query, name in [("limit=0", "limit"), ("limit=101", "limit"), ("after=x", "after"), ("order=asc", "order")]:
        message = tensorzero_error(requests.get(f"{base}/episodes/{missing}/inferences?{query}", timeout=10), 400)
        assert name in message, (query, message)


def test_the_routes_need_a_key_once_keys_exist(keyed_server: tuple[kit.NimbusServer, dict[str, Any]]) -> None:
    server, created = keyed_server
    assert feedback(server, client_body(metric_name="stars", value=1, inference_id=uuid7())).status_code == 401
    assert requests.get(f"{server.base_url}/inferences/{uuid7()}", timeout=10).status_code == 401
    headers = {"authorization": f"Bearer {created['api_key']}"}
    response = requests.get(f"{server.base_url}/inferences/{uuid7()}", headers=headers, timeout=10)
    tensorzero_error(response, 404)
