"""What a batch's result files promise, with the real OpenAI SDK on the local server:

- `output_expires_after` on `batches.create` (the SDK's keyword) sets the output and error files'
  `expires_at` (file creation + seconds) and is checked like a file's `expires_after` (400 naming
  `output_expires_after.seconds` / `.anchor`). That the files then disappear (API and bytes) is
  tested in Rust: tests/tests/batch_output_expiry.rs, with a clock that moves.
- An error-file line of a request the provider failed records the provider's own status and error
  body (`dummy-error`: HTTP 500), with the gateway's verdict next to it in `response.gateway_error`.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

import nimbus_testkit as kit

CHAT = "/v1/chat/completions"
ERROR_KEYS = {"message", "type", "param", "code"}
DUMMY_ERROR_MESSAGE = "dummy provider `failing` failed as configured (HTTP 500)"


server, sdk = kit.batch_server_fixtures("nimbus-batch-output")


def run_batch(sdk: openai.OpenAI, lines: list[dict[str, Any]], **create: Any) -> Any:
    input_file = kit.upload_batch_input(sdk, lines)
    batch = sdk.batches.create(input_file_id=input_file.id, endpoint=CHAT, completion_window="24h", **create)
    done = kit.wait_for_batch(sdk, batch.id)
    assert done.status == "completed", done
    return done


MIXED_LINES = [
    kit.chat_line("ok", "fine"),
    kit.chat_line("bad", "fails", model="dummy-error"),
]


# --------------------------------------------------------------------------------------------
# output_expires_after
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seconds", [3600, 2_592_000])
def test_output_expires_after_sets_the_result_files_expiry(sdk: openai.OpenAI, seconds: int) -> None:
    batch = run_batch(sdk, MIXED_LINES, output_expires_after={"anchor": "created_at", "seconds": seconds})
    assert batch.output_file_id and batch.error_file_id, batch
    for file_id in (batch.output_file_id, batch.error_file_id):
        file = sdk.files.retrieve(file_id)
        assert file.purpose == "batch_output", file
        # The anchor is the file's creation, not the batch's.
        assert file.created_at >= batch.created_at, (file, batch)
        assert file.expires_at == file.created_at + seconds, file
        listed = {f.id: f for f in sdk.files.list(purpose="batch_output")}
        assert listed[file_id].expires_at == file.expires_at
    # The Batch object does not echo the policy (neither does OpenAI's).
    assert "output_expires_after" not in sdk.batches.retrieve(batch.id).model_dump()


def test_without_output_expires_after_result_files_do_not_expire(sdk: openai.OpenAI) -> None:
    batch = run_batch(sdk, MIXED_LINES)
    for file_id in (batch.output_file_id, batch.error_file_id):
        assert sdk.files.retrieve(file_id).expires_at is None


@pytest.mark.parametrize(
    ("policy", "param"),
    [
        pytest.param({"anchor": "created_at", "seconds": 3599}, "output_expires_after.seconds", id="3599s"),
        pytest.param({"anchor": "created_at", "seconds": 2_592_001}, "output_expires_after.seconds", id="2592001s"),
        pytest.param({"anchor": "created_at", "seconds": 0}, "output_expires_after.seconds", id="0s"),
        pytest.param({"anchor": "completed_at", "seconds": 3600}, "output_expires_after.anchor", id="wrong-anchor"),
        pytest.param({"anchor": "created_at", "seconds": "3600"}, "output_expires_after.seconds", id="string-seconds"),
        pytest.param({"anchor": "created_at", "seconds": 3600.5}, "output_expires_after.seconds", id="float-seconds"),
        pytest.param({"anchor": 1, "seconds": 3600}, "output_expires_after.anchor", id="number-anchor"),
        pytest.param({"anchor": "created_at"}, "output_expires_after.seconds", id="missing-seconds"),
        pytest.param({"seconds": 3600}, "output_expires_after.anchor", id="missing-anchor"),
        pytest.param(3600, "output_expires_after", id="not-an-object"),
    ],
)
def test_bad_output_expires_after_is_400_naming_the_field(sdk: openai.OpenAI, policy: Any, param: str) -> None:
    input_file = kit.upload_batch_input(sdk, [kit.chat_line("x", "Hi")])
    before = [b.id for b in sdk.batches.list(limit=100)]
    with pytest.raises(openai.BadRequestError) as raised:
        sdk.batches.create(
            input_file_id=input_file.id,
            endpoint=CHAT,
            completion_window="24h",
            output_expires_after=policy,
        )
    error = kit.error_envelope(raised.value.response)
    assert error["param"] == param, error
    assert error["type"] == "invalid_request_error", error
    assert [b.id for b in sdk.batches.list(limit=100)] == before, "a refused create left a batch behind"


# --------------------------------------------------------------------------------------------
# Error lines: what the provider said
# --------------------------------------------------------------------------------------------


def test_error_lines_record_the_provider_status_and_body(sdk: openai.OpenAI) -> None:
    lines = [
        kit.chat_line("ok", "fine"),
        kit.chat_line("bad-1", "fails", model="dummy-error"),
        kit.chat_line("fallback", "second provider answers", model="dummy-fallback"),
        kit.chat_line("bad-2", "fails too", model="dummy-error"),
    ]
    batch = run_batch(sdk, lines)
    assert batch.request_counts.model_dump() == {"total": 4, "completed": 2, "failed": 2}, batch
    output, errors = kit.batch_results(sdk, batch)
    assert {line["custom_id"] for line in output} == {"ok", "fallback"}
    assert {line["custom_id"] for line in errors} == {"bad-1", "bad-2"}
    for line in errors:
        assert set(line) == {"id", "custom_id", "response", "error"}, line
        assert line["error"] is None, line
        response = line["response"]
        # What the provider answered (after the gateway's retries): its status and its body.
        assert response["status_code"] == 500, line
        assert response["request_id"].startswith("req_"), line
        assert response["body"] == {
            "error": {"message": DUMMY_ERROR_MESSAGE, "type": "server_error", "param": None, "code": None}
        }, line
        # The gateway's own verdict, as the synchronous API would answer it.
        gateway = response["gateway_error"]
        assert set(gateway) == ERROR_KEYS, line
        assert gateway["code"] == "provider_error", line
        assert gateway["type"] == "server_error", line
        assert "All providers for model `dummy-error` failed" in gateway["message"], line
        assert "failing (3 attempts)" in gateway["message"], line

    # The synchronous API keeps answering 502 for the same failure.
    with pytest.raises(openai.InternalServerError) as raised:
        sdk.with_options(max_retries=0).chat.completions.create(model="dummy-error", messages=kit.user("fails"))
    assert raised.value.status_code == 502
    assert kit.error_envelope(raised.value.response)["code"] == "provider_error"
