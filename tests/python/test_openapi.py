"""The OpenAPI 3.1 document (issue #14): served at `GET /openapi.json`, equal to the checked-in
`docs/openapi.json`, routed by the SAM template operation for operation, and checked against the
running local server by `schemathesis`: property-based requests to every operation, with real ids
seeded for the ones that read a resource. Acceptance: no 5xx, every status documented, every
response body and content type as the document says.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import nimbus_testkit as kit

REPO = Path(__file__).resolve().parents[2]
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


@pytest.fixture(scope="module")
def fuzzed_server(server_factory: Callable[..., kit.NimbusServer]) -> kit.NimbusServer:
    """A server of its own: the fuzzer creates and deletes a great many things."""
    return server_factory("nimbus-openapi")


def document_of(server: kit.NimbusServer) -> dict[str, Any]:
    answer = httpx.get(f"{server.base_url}/openapi.json", timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/json"
    return answer.json()


def test_the_served_document_is_the_checked_in_one(fuzzed_server: kit.NimbusServer) -> None:
    served = document_of(fuzzed_server)
    assert served == json.loads((REPO / "docs" / "openapi.json").read_text())
    assert served["openapi"].startswith("3.1")


def test_the_template_routes_every_documented_operation(fuzzed_server: kit.NimbusServer) -> None:
    """API Gateway routes exactly the documented operations (only `/metrics` stays local)."""
    from samcli.yamlhelper import yaml_parse  # noqa: PLC0415

    template = yaml_parse(kit.TEMPLATE.read_text())
    routed = set()
    for resource in template["Resources"].values():
        for event in (resource.get("Properties", {}).get("Events") or {}).values():
            if event.get("Type") == "HttpApi":
                path = event["Properties"]["Path"].replace("+}", "}")
                routed.add((event["Properties"]["Method"].upper(), path))
    documented = {
        (method.upper(), path)
        for path, item in document_of(fuzzed_server)["paths"].items()
        for method in item
        if method in {"get", "post", "put", "delete"}
    }
    assert documented - routed == {("GET", "/metrics")}
    assert routed - documented == set()


def seed(server: kit.NimbusServer) -> dict[str, str]:
    """Real resources for the operations that read one: each path parameter's value, an `id` under
    the collection it names (`/v1/files/{id}` → a file's id)."""
    http = httpx.Client(base_url=server.base_url, timeout=30)
    line = json.dumps(kit.chat_line("seed-1")).encode() + b"\n"
    file = http.post("/v1/files", files={"file": ("seed.jsonl", io.BytesIO(line))}, data={"purpose": "batch"}).json()
    batch = http.post(
        "/v1/batches",
        json={"input_file_id": file["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"},
    ).json()
    upload = http.post(
        "/v1/uploads", json={"purpose": "batch", "filename": "u.jsonl", "bytes": len(line), "mime_type": "text/jsonl"}
    ).json()
    endpoint = http.post(
        "/v1/webhook_endpoints", json={"url": "http://127.0.0.1:9/hooks", "event_types": ["batch.completed"]}
    ).json()
    secret = http.post("/v1/webhook_secrets").json()
    inference = http.post("/inference", json={"model_name": "dummy", "input": {"messages": kit.user("seed")}}).json()
    request = http.post("/async_predict", json={"model_input": {"model": "dummy", "messages": kit.user("seed")}}).json()
    tz_batch = http.post(
        "/batch_inference", json={"function_name": "weather_assistant", "inputs": [{"messages": kit.user("seed")}]}
    ).json()
    http.close()
    for created in (file, batch, upload, endpoint, secret, inference, request, tz_batch):
        assert "error" not in created, created
    return {
        "/v1/files/{id}": file["id"],
        "/v1/batches/{id}": batch["id"],
        "/v1/uploads/{id}": upload["id"],
        "/v1/webhook_endpoints/{id}": endpoint["id"],
        "/v1/webhook_secrets/{id}": secret["id"],
        "request_id": request["request_id"],
        "model": "dummy",
        "inference_id": inference["inference_id"],
        "episode_id": inference["episode_id"],
        "batch_id": tz_batch["batch_id"],
        # A function of the default config (its experiment is static).
        "function_name": "weather_assistant",
        # Under /batch_inference/{batch_id}, an item of that batch.
        "/batch_inference/{batch_id}/inference/{inference_id}": tz_batch["inference_ids"][0],
    }


def parameters_of(path: str, seeded: dict[str, str]) -> dict[str, str]:
    """The seeded value of each of `path`'s parameters: by the path up to it, else by its name."""
    values = {}
    for match in re.finditer(r"\{(\w+)\}", path):
        up_to = path[: match.end()]
        values[match.group(1)] = seeded.get(up_to, seeded.get(match.group(1)))
    assert None not in values.values(), f"{path}: no seeded value for {values}"
    return values


def test_schemathesis_finds_no_server_error_and_no_nonconforming_response(
    fuzzed_server: kit.NimbusServer, tmp_path: Path
) -> None:
    seeded = seed(fuzzed_server)
    config = ["generation.max-examples = 25", ""]
    for path in document_of(fuzzed_server)["paths"]:
        if "{" not in path:
            continue
        values = ", ".join(f'"path.{name}" = "{value}"' for name, value in parameters_of(path, seeded).items())
        config += ["[[operations]]", f'include-path = "{path}"', f"parameters = {{ {values} }}", ""]
    config_file = tmp_path / "schemathesis.toml"
    config_file.write_text("\n".join(config))
    command = [
        shutil.which("schemathesis") or str(Path(sys.executable).with_name("schemathesis")),
        "--config-file",
        str(config_file),
        "run",
        f"{fuzzed_server.base_url}/openapi.json",
        "--checks",
        CHECKS,
        # The coverage phase is left out: its generator crashes on this document (a schemathesis
        # defect, not a finding); examples, fuzzing and the link-following stateful phase run.
        "--phases",
        "examples,fuzzing,stateful",
        "--seed",
        "20261123",
        "--workers",
        "2",
        "--no-color",
    ]
    run = subprocess.run(
        command, capture_output=True, text=True, timeout=900, cwd=tmp_path, env={**os.environ, "NO_COLOR": "1"}
    )
    report = run.stdout + run.stderr
    print(report)
    assert run.returncode == 0, report
    assert " passed" in report and "failed" not in report.split("SUMMARY")[-1], report
