"""The webhook routes' event files (`infra/events/webhooks-*.json`) on the batches function: their
shape, that template.yaml routes each to `NimbusBatchesFunction`, what each answers as it is (401:
placeholder key), and the secrets and endpoints API end to end through `nimbus-batches` under the
RIE against moto with a real key.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import nimbus_testkit as kit
import test_batches_lambda_events as batch_events
from batch_lambda_kit import invoke_json

EVENT_NAMES = [path.name for path in kit.event_files("webhooks-*.json")]
ENDPOINT_ID_PLACEHOLDER = "whep_REPLACE_WITH_ENDPOINT_ID"
SECRET_ID_PLACEHOLDER = "wsec_REPLACE_WITH_SECRET_ID"

# Every route of the webhook API has its event file.
ROUTES = {
    "webhooks-secret-create.json": ("POST", "/v1/webhook_secrets"),
    "webhooks-secret-list.json": ("GET", "/v1/webhook_secrets"),
    "webhooks-secret-revoke.json": ("DELETE", f"/v1/webhook_secrets/{SECRET_ID_PLACEHOLDER}"),
    "webhooks-endpoint-create.json": ("POST", "/v1/webhook_endpoints"),
    "webhooks-endpoint-list.json": ("GET", "/v1/webhook_endpoints"),
    "webhooks-endpoint-retrieve.json": ("GET", f"/v1/webhook_endpoints/{ENDPOINT_ID_PLACEHOLDER}"),
    "webhooks-endpoint-rotate-secret.json": ("POST", f"/v1/webhook_endpoints/{ENDPOINT_ID_PLACEHOLDER}/rotate_secret"),
    "webhooks-endpoint-deliveries.json": ("GET", f"/v1/webhook_endpoints/{ENDPOINT_ID_PLACEHOLDER}/deliveries"),
    "webhooks-endpoint-delete.json": ("DELETE", f"/v1/webhook_endpoints/{ENDPOINT_ID_PLACEHOLDER}"),
}


def test_every_webhook_route_has_an_event_file() -> None:
    assert sorted(EVENT_NAMES) == sorted(ROUTES)


@pytest.mark.parametrize("name", EVENT_NAMES)
def test_webhook_event_is_well_formed_and_routed_to_the_batches_function(name: str) -> None:
    event = kit.load_event(name)
    headers, context = kit.check_http_api_event(event)
    method, path = context["http"]["method"], event["rawPath"]
    assert (method, path) == ROUTES[name]
    assert event["isBase64Encoded"] is False
    if event.get("body"):
        assert method == "POST"
        assert headers["content-type"] == "application/json"
        assert headers["content-length"] == str(len(event["body"].encode()))
        json.loads(event["body"])
    else:
        assert "content-length" not in headers
    routes = batch_events.template_routes("NimbusBatchesFunction")
    assert any(m == method and p.fullmatch(path) for m, p in routes), f"{method} {path} is not routed to the function"


@pytest.mark.parametrize("name", EVENT_NAMES)
def test_webhook_event_as_it_is_needs_a_key(batches_lambda: kit.LambdaUnderRie, name: str) -> None:
    status, body = invoke_json(batches_lambda, kit.load_event(name))
    assert status == 401, body
    assert body["error"]["code"] == "invalid_api_key", body


def call(
    batches_lambda: kit.LambdaUnderRie, key: str, name: str, *, ids: dict[str, str] | None = None, body: Any = None
) -> tuple[int, Any]:
    event = kit.with_api_key(kit.load_event(name), key)
    for placeholder, value in (ids or {}).items():
        event = kit.replace_strings(event, placeholder, value)
    if body is not None:
        event = kit.with_body(event, body)
    return invoke_json(batches_lambda, event)


def test_secrets_through_the_lambda(batches_lambda: kit.LambdaUnderRie, aws_api_key: dict[str, Any]) -> None:
    key = aws_api_key["api_key"]
    status, created = call(batches_lambda, key, "webhooks-secret-create.json")
    assert status == 200, created
    assert created["object"] == "webhook_secret" and created["secret"].startswith("whsec_")
    status, listed = call(batches_lambda, key, "webhooks-secret-list.json")
    assert status == 200, listed
    mine = [s for s in listed["data"] if s["id"] == created["id"]]
    assert len(mine) == 1 and created["secret"] not in mine[0]["secret"], listed
    ids = {SECRET_ID_PLACEHOLDER: created["id"]}
    status, revoked = call(batches_lambda, key, "webhooks-secret-revoke.json", ids=ids)
    assert (status, revoked) == (200, {"id": created["id"], "object": "webhook_secret", "deleted": True})
    status, again = call(batches_lambda, key, "webhooks-secret-revoke.json", ids=ids)
    assert status == 404 and again["error"]["param"] == "id", again


def test_endpoints_through_the_lambda(batches_lambda: kit.LambdaUnderRie, aws_api_key: dict[str, Any]) -> None:
    key = aws_api_key["api_key"]
    status, created = call(batches_lambda, key, "webhooks-endpoint-create.json")
    assert status == 200, created
    assert created["object"] == "webhook_endpoint" and created["signing_secret"].startswith("whsec_")
    ids = {ENDPOINT_ID_PLACEHOLDER: created["id"]}

    status, shown = call(batches_lambda, key, "webhooks-endpoint-retrieve.json", ids=ids)
    assert status == 200 and "signing_secret" not in shown, shown
    assert shown["url"] == "https://hooks.example.com/nimbus"
    status, listed = call(batches_lambda, key, "webhooks-endpoint-list.json")
    assert status == 200 and created["id"] in [e["id"] for e in listed["data"]], listed
    status, rotated = call(batches_lambda, key, "webhooks-endpoint-rotate-secret.json", ids=ids)
    assert status == 200 and rotated["signing_secret"] != created["signing_secret"], rotated
    status, deliveries = call(batches_lambda, key, "webhooks-endpoint-deliveries.json", ids=ids)
    assert (status, deliveries["data"]) == (200, []), deliveries

    # Lambda never accepts plain-HTTP loopback receivers.
    status, refused = call(
        batches_lambda,
        key,
        "webhooks-endpoint-create.json",
        body={"url": "http://127.0.0.1:8080/hook", "event_types": ["batch.completed"]},
    )
    assert status == 400 and refused["error"]["param"] == "url", refused

    status, deleted = call(batches_lambda, key, "webhooks-endpoint-delete.json", ids=ids)
    assert status == 200 and deleted["deleted"] is True, deleted
    status, gone = call(batches_lambda, key, "webhooks-endpoint-retrieve.json", ids=ids)
    assert status == 404, gone
