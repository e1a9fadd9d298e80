"""`/v1/models` through the OpenAI SDK."""

from __future__ import annotations

from collections.abc import Callable

import openai
import pytest
import requests

import nimbus_testkit as kit

# The models of infra/config/nimbus.toml that the tests rely on (the servers run without
# OPENAI_API_KEY, so `gpt-4o-mini`, whose only provider reads it, is configured but not listed).
DEFAULT_MODELS = {"dummy", "dummy-embedding", "dummy-error", "dummy-slow", "dummy-fallback"}
NEEDS_OPENAI_API_KEY = {"gpt-4o-mini"}


def test_lists_every_configured_model(client: openai.OpenAI) -> None:
    page = client.models.list()
    ids = [model.id for model in page.data]
    assert DEFAULT_MODELS <= set(ids), ids
    assert len(ids) == len(set(ids)), f"duplicate model ids: {ids}"
    for model in page.data:
        assert model.object == "model"
        assert isinstance(model.created, int) and model.created > 0
        assert isinstance(model.owned_by, str) and model.owned_by


def test_model_list_matches_the_config_file(client: openai.OpenAI, nimbus_server: kit.NimbusServer) -> None:
    """The served list is exactly what `nimbus check-config` reads from the same config file, but
    the models whose key is an environment variable the server does not have."""
    result = nimbus_server.cli.run("check-config", "--config", str(nimbus_server.config))
    configured = {
        line.removeprefix("model ").split(":", 1)[0].strip()
        for line in result.stdout.splitlines()
        if line.startswith("model ")
    }
    assert configured, result.stdout
    assert {model.id for model in client.models.list().data} == configured - NEEDS_OPENAI_API_KEY


def test_a_model_is_listed_once_its_key_is_in_the_environment(
    client: openai.OpenAI, server_factory: Callable[..., kit.NimbusServer]
) -> None:
    """Without OPENAI_API_KEY `gpt-4o-mini` is neither listed nor retrievable, and a call names the
    missing variable; a server with the variable lists it."""
    assert not NEEDS_OPENAI_API_KEY & {model.id for model in client.models.list().data}
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o-mini")
    with pytest.raises(openai.InternalServerError) as raised:
        client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    assert raised.value.status_code == 502
    assert "OPENAI_API_KEY, which is not set" in str(raised.value), raised.value
    keyed = server_factory("nimbus-openai-key", extra_env={"OPENAI_API_KEY": "sk-test-not-used"})
    listed = requests.get(f"{keyed.api_base}/models", timeout=10).json()
    assert NEEDS_OPENAI_API_KEY <= {model["id"] for model in listed["data"]}


def test_list_wire_format(nimbus_server: kit.NimbusServer) -> None:
    response = requests.get(f"{nimbus_server.api_base}/models", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["object"] == "list"
    assert isinstance(body["data"], list)


def test_retrieve_one_model(client: openai.OpenAI) -> None:
    model = client.models.retrieve("dummy-embedding")
    assert model.id == "dummy-embedding"
    assert model.object == "model"


def test_retrieve_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.models.retrieve("no-such-model")
    assert raised.value.status_code == 404
    assert raised.value.code == "model_not_found"
    kit.error_envelope(raised.value.response)
