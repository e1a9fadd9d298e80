"""`/v1/embeddings` through the OpenAI SDK: float and base64 encodings, batching, dimensions."""

from __future__ import annotations

import base64
import math
import struct

import openai
import pytest
import requests

import nimbus_testkit as kit

DEFAULT_DIMENSIONS = 16


def as_f32(values: list[float]) -> list[float]:
    """Round each value to float32, the precision the gateway computes in."""
    return [struct.unpack("<f", struct.pack("<f", v))[0] for v in values]


def decode_base64_f32(text: str) -> list[float]:
    raw = base64.b64decode(text)
    assert len(raw) % 4 == 0, len(raw)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def floats(client: openai.OpenAI, text: str | list[str], model: str = "dummy-embedding", **kwargs) -> list[list[float]]:
    response = client.embeddings.create(model=model, input=text, encoding_format="float", **kwargs)
    return [item.embedding for item in response.data]


def test_float_embedding_shape(client: openai.OpenAI) -> None:
    response = client.embeddings.create(model="dummy-embedding", input="The quick brown fox", encoding_format="float")
    assert response.object == "list"
    assert response.model == "dummy-embedding"
    assert len(response.data) == 1
    item = response.data[0]
    assert item.object == "embedding"
    assert item.index == 0
    assert isinstance(item.embedding, list) and len(item.embedding) == DEFAULT_DIMENSIONS
    assert all(isinstance(v, float) and math.isfinite(v) for v in item.embedding)
    assert any(v != 0 for v in item.embedding)
    assert response.usage.prompt_tokens > 0
    assert response.usage.total_tokens >= response.usage.prompt_tokens


def test_sdk_default_base64_decodes_to_the_float_vector(client: openai.OpenAI) -> None:
    text = "Base64 is what the SDK asks for by default."
    expected = floats(client, text)[0]
    # No encoding_format: the SDK requests base64 and decodes it into floats itself.
    decoded = client.embeddings.create(model="dummy-embedding", input=text).data[0].embedding
    assert isinstance(decoded, list) and len(decoded) == len(expected)
    assert as_f32(decoded) == as_f32(expected)


def test_explicit_base64_is_little_endian_f32(client: openai.OpenAI) -> None:
    text = "explicit base64"
    expected = floats(client, text)[0]
    response = client.embeddings.create(model="dummy-embedding", input=text, encoding_format="base64")
    encoded = response.data[0].embedding
    assert isinstance(encoded, str), "an explicit base64 request returns the string untouched"
    assert decode_base64_f32(encoded) == as_f32(expected)


def test_wire_default_is_float(nimbus_server: kit.NimbusServer) -> None:
    url = f"{nimbus_server.api_base}/embeddings"
    plain = requests.post(url, json={"model": "dummy-embedding", "input": "wire"}, timeout=10)
    assert plain.status_code == 200, plain.text
    vector = plain.json()["data"][0]["embedding"]
    assert isinstance(vector, list) and len(vector) == DEFAULT_DIMENSIONS
    b64 = requests.post(url, json={"model": "dummy-embedding", "input": "wire", "encoding_format": "base64"}, timeout=10)
    assert b64.status_code == 200, b64.text
    assert decode_base64_f32(b64.json()["data"][0]["embedding"]) == as_f32(vector)


def test_vectors_are_deterministic_and_input_specific(client: openai.OpenAI) -> None:
    a1 = floats(client, "alpha")[0]
    a2 = floats(client, "alpha")[0]
    b = floats(client, "beta")[0]
    assert a1 == a2
    assert a1 != b


def test_batch_input_keeps_order(client: openai.OpenAI) -> None:
    texts = ["first text", "second text", "third text"]
    response = client.embeddings.create(model="dummy-embedding", input=texts, encoding_format="float")
    assert [item.index for item in response.data] == [0, 1, 2]
    for text, item in zip(texts, response.data):
        assert item.embedding == floats(client, text)[0]
    # Base64 (SDK default) for the batch gives the same vectors.
    decoded = client.embeddings.create(model="dummy-embedding", input=texts)
    assert [as_f32(item.embedding) for item in decoded.data] == [as_f32(item.embedding) for item in response.data]


@pytest.mark.parametrize("dimensions", [1, 8, 40, 256])
def test_dimensions_are_honoured(client: openai.OpenAI, dimensions: int) -> None:
    vector = floats(client, "dimensional", dimensions=dimensions)[0]
    assert len(vector) == dimensions
    decoded = client.embeddings.create(model="dummy-embedding", input="dimensional", dimensions=dimensions)
    assert len(decoded.data[0].embedding) == dimensions


def test_chat_model_dummy_also_embeds(client: openai.OpenAI) -> None:
    response = client.embeddings.create(model="dummy", input="chat model embedding", encoding_format="float")
    assert response.model == "dummy"
    assert len(response.data) == 1 and len(response.data[0].embedding) > 0


def test_empty_input_is_rejected(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.embeddings.create(model="dummy-embedding", input="")
    assert raised.value.param == "input"


def test_unknown_embedding_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.embeddings.create(model="text-embedding-unknown", input="x")
    assert raised.value.code == "model_not_found"
    assert raised.value.param == "model"


def test_failing_embedding_provider_is_502(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as raised:
        client.embeddings.create(model="dummy-error", input="x")
    assert raised.value.status_code == 502
    kit.error_envelope(raised.value.response)


def test_raw_response_has_request_id(client: openai.OpenAI) -> None:
    raw = client.embeddings.with_raw_response.create(model="dummy-embedding", input="id please")
    assert raw.headers.get("x-request-id")
    assert len(raw.parse().data) == 1
