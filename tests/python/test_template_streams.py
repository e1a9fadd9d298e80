"""template.yaml's rules for the streaming front and concurrency (issue #27 item 1), checked on the
template as written and on the template SAM expands it to:

- no function URL open to anyone (`AuthType: NONE`), and no public invoke permission;
- streams go through a REST API whose Lambda proxy integrations stream (`responseTransferMode:
  STREAM`, InvokeWithResponseStream) to the inference function, on every route the inference
  function serves behind the HTTP API (the streaming ones included), regional, within the
  function's timeout;
- that REST API's stage throttles every method, from parameters;
- every function has a reserved concurrency from a parameter, whose default bounds it, and the
  defaults deploy on an account with the default quota (1,000, of which 100 stay unreserved) and
  cover the worker's event sources;
- keys minted before keys carried a tag are refused unless the operator opts in.
"""

from __future__ import annotations

import functools

import re
from typing import Any

import test_hardening_template as hardening

FUNCTIONS = hardening.FUNCTIONS
STREAMING_ROUTES = {
    ("post", "/v1/chat/completions"),
    ("post", "/openai/v1/chat/completions"),
    ("post", "/inference"),
    ("post", "/invocations"),
    ("post", "/predictions/{model+}"),
}
DEFAULT_ACCOUNT_CONCURRENCY = 1000
MIN_UNRESERVED = 100
WORKER_EVENT_SOURCE_CAPS = [
    "WorkerMaxConcurrency",
    "AsyncP0MaxConcurrency",
    "AsyncP1MaxConcurrency",
    "AsyncP2MaxConcurrency",
]


@functools.cache
def template() -> dict[str, Any]:
    """Parsed once for this file: no test changes it."""
    return hardening.template()


def expanded() -> dict[str, Any]:
    return hardening.expanded()


def stream_api() -> dict[str, Any]:
    return template()["Resources"]["NimbusStreamApi"]


def rest_routes() -> dict[tuple[str, str], dict[str, Any]]:
    paths = stream_api()["Properties"]["DefinitionBody"]["paths"]
    return {
        (method, path): operation["x-amazon-apigateway-integration"]
        for path, operations in paths.items()
        for method, operation in operations.items()
    }


def default(name: str) -> int:
    return int(template()["Parameters"][name]["Default"])


def refs_in(value: Any) -> set[str]:
    """Every `Ref` and `!Sub ${Name}` (also `${Name.Attr}`) reachable in `value`."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "Ref" and isinstance(inner, str):
                found.add(inner)
            elif key == "Fn::Sub":
                text = inner if isinstance(inner, str) else inner[0]
                found |= {name.split(".")[0] for name in re.findall(r"\$\{([^}!]+)\}", text)}
                found |= refs_in(inner if isinstance(inner, list) else [])
            elif key == "Fn::GetAtt":
                found.add(inner[0] if isinstance(inner, list) else inner.split(".")[0])
            else:
                found |= refs_in(inner)
    elif isinstance(value, list):
        for inner in value:
            found |= refs_in(inner)
    return found


# --------------------------------------------------------------------------------------------
# No open door
# --------------------------------------------------------------------------------------------


def test_no_function_url_is_open_to_anyone() -> None:
    for name, resource in template()["Resources"].items():
        url = resource.get("Properties", {}).get("FunctionUrlConfig")
        assert url is None or url.get("AuthType") == "AWS_IAM", f"{name} has a public function URL: {url}"
    for name, resource in expanded()["Resources"].items():
        properties = resource.get("Properties", {})
        if resource["Type"] == "AWS::Lambda::Url":
            assert properties.get("AuthType") == "AWS_IAM", f"{name}: {properties}"
        if resource["Type"] == "AWS::Lambda::Permission":
            assert properties.get("Principal") != "*", f"{name} lets anyone invoke: {properties}"
            assert properties.get("FunctionUrlAuthType") != "NONE", f"{name}: {properties}"


def test_api_gateway_may_invoke_the_inference_function_for_the_stream_api_only() -> None:
    permission = template()["Resources"]["NimbusStreamApiInvokePermission"]["Properties"]
    assert permission["Action"] == "lambda:InvokeFunction"
    assert permission["Principal"] == "apigateway.amazonaws.com"
    assert refs_in(permission["FunctionName"]) == {"NimbusInferenceFunction"}
    assert "NimbusStreamApi" in refs_in(permission["SourceArn"])


# --------------------------------------------------------------------------------------------
# The streaming REST API
# --------------------------------------------------------------------------------------------


def test_every_rest_route_streams_from_the_inference_function() -> None:
    routes = rest_routes()
    assert STREAMING_ROUTES <= set(routes), f"missing streaming routes: {STREAMING_ROUTES - set(routes)}"
    timeout_ms = int(template()["Resources"]["NimbusInferenceFunction"]["Properties"]["Timeout"]) * 1000
    for route, integration in routes.items():
        assert integration["type"] == "aws_proxy", route
        assert integration["httpMethod"] == "POST", route
        assert integration["responseTransferMode"] == "STREAM", route
        uri = integration["uri"]["Fn::Sub"]
        assert uri.endswith(
            "lambda:path/2021-11-15/functions/${NimbusInferenceFunction.Arn}/response-streaming-invocations"
        ), (route, uri)
        assert 29_000 < integration["timeoutInMillis"] <= timeout_ms, route


def test_the_stream_api_serves_every_route_the_http_api_sends_to_the_inference_function() -> None:
    """A client can point its base URL at InferenceStreamingUrl for everything, as it could at the
    function URL before."""
    events = template()["Resources"]["NimbusInferenceFunction"]["Properties"]["Events"]
    http_routes = {
        (event["Properties"]["Method"].lower(), event["Properties"]["Path"])
        for event in events.values()
        if event["Type"] == "HttpApi"
    }
    assert STREAMING_ROUTES <= http_routes
    assert set(rest_routes()) == http_routes


def test_the_stream_api_is_regional_and_its_stage_throttles_every_method_from_parameters() -> None:
    properties = stream_api()["Properties"]
    assert properties["EndpointConfiguration"]["Type"] == "REGIONAL"
    stages = [
        resource["Properties"]
        for resource in expanded()["Resources"].values()
        if resource["Type"] == "AWS::ApiGateway::Stage"
        and refs_in(resource["Properties"]["RestApiId"]) == {"NimbusStreamApi"}
    ]
    assert len(stages) == 1, stages
    settings = stages[0]["MethodSettings"]
    everything = [s for s in settings if s["ResourcePath"] == "/*" and s["HttpMethod"] == "*"]
    assert len(everything) == 1, settings
    assert everything[0]["ThrottlingRateLimit"] == {"Ref": "StreamRateLimit"}
    assert everything[0]["ThrottlingBurstLimit"] == {"Ref": "StreamBurstLimit"}
    assert 0 < default("StreamRateLimit") <= default("StreamBurstLimit")


def test_the_streaming_url_output_is_the_stream_api_stage() -> None:
    output = template()["Outputs"]["InferenceStreamingUrl"]["Value"]
    assert refs_in(output) == {"NimbusStreamApi", "AWS::Region", "AWS::URLSuffix"}
    assert output["Fn::Sub"].endswith(f"/{stream_api()['Properties']['StageName']}/")


# --------------------------------------------------------------------------------------------
# Concurrency bounds
# --------------------------------------------------------------------------------------------


def reservation(function: str) -> tuple[str, str]:
    """The condition and parameter of a function's `ReservedConcurrentExecutions`."""
    value = template()["Resources"][function]["Properties"].get("ReservedConcurrentExecutions")
    assert value is not None, f"{function} has no ReservedConcurrentExecutions"
    condition, reserved, otherwise = value["Fn::If"]
    assert otherwise == {"Ref": "AWS::NoValue"}, value
    return condition, reserved["Ref"]


def test_every_function_has_a_reserved_concurrency_from_a_parameter_whose_default_bounds_it() -> None:
    functions = [name for name, r in template()["Resources"].items() if r["Type"] == "AWS::Serverless::Function"]
    assert sorted(functions) == sorted(FUNCTIONS)
    conditions = template()["Conditions"]
    for function in functions:
        condition, parameter = reservation(function)
        # -1 (and only -1) drops the reservation.
        assert conditions[condition] == {"Fn::Not": [{"Fn::Equals": [{"Ref": parameter}, "-1"]}]}, condition
        assert template()["Parameters"][parameter]["MinValue"] == -1
        assert default(parameter) >= 1, f"{parameter}: the default must bound {function}"
    for name, resource in expanded()["Resources"].items():
        if resource["Type"] == "AWS::Lambda::Function":
            assert "ReservedConcurrentExecutions" in resource["Properties"], name


def test_the_default_reservations_deploy_on_a_default_account_and_cover_the_worker_event_sources() -> None:
    total = sum(default(reservation(function)[1]) for function in FUNCTIONS)
    assert total <= DEFAULT_ACCOUNT_CONCURRENCY - MIN_UNRESERVED, total
    worker = default(reservation("NimbusWorkerFunction")[1])
    assert worker >= sum(default(cap) for cap in WORKER_EVENT_SOURCE_CAPS), worker
    # The event sources' caps are those parameters.
    sources = {
        refs_in(r["Properties"]["ScalingConfig"]["MaximumConcurrency"]).pop()
        for r in template()["Resources"].values()
        if r["Type"] == "AWS::Lambda::EventSourceMapping"
        and refs_in(r["Properties"]["FunctionName"]) == {"NimbusWorkerFunction"}
    }
    assert sources == set(WORKER_EVENT_SOURCE_CAPS)


# --------------------------------------------------------------------------------------------
# Keys minted before keys carried a tag
# --------------------------------------------------------------------------------------------


def test_untagged_keys_are_refused_unless_the_operator_opts_in() -> None:
    parameter = template()["Parameters"]["AcceptUntaggedKeys"]
    assert parameter["Default"] == "false"
    variables = template()["Globals"]["Function"]["Environment"]["Variables"]
    assert variables["NIMBUS_ACCEPT_UNTAGGED_KEYS"] == {"Ref": "AcceptUntaggedKeys"}
