"""template.yaml's hardening rules (issue #27), each checked on the template as written and, where
SAM adds policies of its own, on the template SAM expands it to:

- the worker's SQS event sources are plain event source mappings: no role gets SAM's
  `AWSLambdaSQSQueueExecutionRole` (receive and delete on every queue of the account), and every SQS
  action is granted on the stack's own queues only, exactly (no `sqs:SendMessage*`, no SAM policy
  templates);
- the bucket refuses plain-http requests;
- the config bucket is read under the `ConfigReadPrefix` folder only;
- no action the code never calls is granted, and the clean-up of duplicate inference payloads may
  delete under `inferences/`;
- the HTTP API writes an access log to a log group whose retention is a parameter.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Any

import nimbus_testkit as kit

FUNCTIONS = [
    "NimbusInferenceFunction",
    "NimbusFilesFunction",
    "NimbusBatchesFunction",
    "NimbusWorkerFunction",
    "NimbusPollerFunction",
]
QUEUES = {"NimbusJobsQueue", "AsyncQueueP0", "AsyncQueueP1", "AsyncQueueP2"}
# The managed policies a function role may carry: logs, and X-Ray (Tracing: Active).
ALLOWED_MANAGED_POLICIES = {
    "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
    "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
}
SHARED_SRC = kit.TEMPLATE.parent / "shared" / "src"


def template() -> dict[str, Any]:
    from samcli.yamlhelper import yaml_parse  # noqa: PLC0415

    return yaml_parse(kit.TEMPLATE.read_text())


@functools.cache
def expanded() -> dict[str, Any]:
    """The template as SAM transforms it (what CloudFormation deploys), `ConfigSource` bundled."""
    from samtranslator.translator.transform import transform  # noqa: PLC0415

    class NoManagedPolicies:
        def load(self) -> dict[str, str]:
            return {}

    doc = template()
    for resource in doc["Resources"].values():
        if resource["Type"] == "AWS::Serverless::Function":
            resource["Properties"]["CodeUri"] = "s3://bucket/key"  # as `sam validate` does
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    return transform(doc, {}, NoManagedPolicies())


def function_statements(doc: dict[str, Any], function: str) -> list[dict[str, Any]]:
    """Every statement of a function's own policies (both branches of an `Fn::If`)."""
    found: list[dict[str, Any]] = []

    def visit(policy: Any) -> None:
        if isinstance(policy, dict) and "Statement" in policy:
            found.extend(policy["Statement"])
        elif isinstance(policy, dict) and "Fn::If" in policy:
            for branch in policy["Fn::If"][1:]:
                visit(branch)

    for policy in doc["Resources"][function]["Properties"].get("Policies", []):
        visit(policy)
    return found


def role_statements(doc: dict[str, Any], role: str) -> list[dict[str, Any]]:
    """Every statement of an expanded role's inline policies and of the stack's policies on it."""
    found: list[dict[str, Any]] = []

    def visit(policy: Any) -> None:
        if isinstance(policy, dict) and "PolicyDocument" in policy:
            found.extend(policy["PolicyDocument"]["Statement"])
        elif isinstance(policy, dict) and "Fn::If" in policy:
            for branch in policy["Fn::If"][1:]:
                visit(branch)

    for policy in doc["Resources"][role]["Properties"].get("Policies", []):
        visit(policy)
    for resource in doc["Resources"].values():
        if resource["Type"] == "AWS::IAM::Policy" and {"Ref": role} in resource["Properties"]["Roles"]:
            visit(resource["Properties"])
    return found


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def actions_of(statements: list[dict[str, Any]]) -> set[str]:
    return {action for statement in statements for action in as_list(statement["Action"])}


def get_att_target(value: Any) -> str | None:
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        target = value["Fn::GetAtt"]
        target = target if isinstance(target, list) else target.split(".")
        return f"{target[0]}.{target[1]}"
    return None


# --------------------------------------------------------------------------------------------
# 2. The worker's queues: an explicit, scoped role
# --------------------------------------------------------------------------------------------


def test_no_function_role_gets_a_managed_policy_beyond_logs_and_tracing() -> None:
    doc = expanded()
    for function in FUNCTIONS:
        role = doc["Resources"][f"{function}Role"]
        managed = set(role["Properties"].get("ManagedPolicyArns", []))
        assert managed <= ALLOWED_MANAGED_POLICIES, (function, managed - ALLOWED_MANAGED_POLICIES)
        assert not any("SQS" in arn for arn in managed), function


def test_the_worker_is_fed_by_event_source_mappings_of_its_own_queues() -> None:
    doc = template()
    worker = doc["Resources"]["NimbusWorkerFunction"]["Properties"]
    assert not any(event["Type"] == "SQS" for event in (worker.get("Events") or {}).values())
    for function in FUNCTIONS:
        events = doc["Resources"][function]["Properties"].get("Events") or {}
        assert not any(event["Type"] == "SQS" for event in events.values()), function
    mappings = [r["Properties"] for r in doc["Resources"].values() if r["Type"] == "AWS::Lambda::EventSourceMapping"]
    assert {get_att_target(m["EventSourceArn"]) for m in mappings} == {f"{q}.Arn" for q in QUEUES}
    assert all(m["FunctionName"] == {"Ref": "NimbusWorkerFunction"} for m in mappings)


def test_every_sqs_action_is_exact_and_on_the_stacks_own_queues() -> None:
    doc = expanded()
    for function in FUNCTIONS:
        for statement in role_statements(doc, f"{function}Role"):
            sqs_actions = [a for a in as_list(statement["Action"]) if a.startswith("sqs:")]
            if not sqs_actions:
                continue
            assert all("*" not in action for action in sqs_actions), (function, sqs_actions)
            targets = {get_att_target(resource) for resource in as_list(statement["Resource"])}
            assert targets <= {f"{q}.Arn" for q in QUEUES}, (function, statement["Resource"])
    # The worker receives from, deletes on and hands back exactly its four queues.
    worker = role_statements(doc, "NimbusWorkerFunctionRole")
    for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ChangeMessageVisibility"):
        granted = {
            get_att_target(resource)
            for statement in worker
            if action in as_list(statement["Action"])
            for resource in as_list(statement["Resource"])
        }
        assert granted == {f"{q}.Arn" for q in QUEUES}, (action, granted)
    # Only the worker receives or deletes messages.
    for function in FUNCTIONS:
        if function != "NimbusWorkerFunction":
            granted = actions_of(role_statements(doc, f"{function}Role"))
            assert not granted & {"sqs:ReceiveMessage", "sqs:DeleteMessage"}, function


def test_policies_are_explicit_statements_not_sam_policy_templates() -> None:
    doc = template()
    for function in FUNCTIONS:
        for policy in doc["Resources"][function]["Properties"].get("Policies", []):
            assert isinstance(policy, dict) and ("Statement" in policy or "Fn::If" in policy), (function, policy)


def test_no_role_is_granted_a_wildcard_action() -> None:
    doc = expanded()
    for function in FUNCTIONS:
        for action in actions_of(role_statements(doc, f"{function}Role")):
            assert "*" not in action, (function, action)


# --------------------------------------------------------------------------------------------
# 6. S3: TLS only
# --------------------------------------------------------------------------------------------


def test_the_bucket_refuses_plain_http() -> None:
    doc = template()
    policies = [
        r["Properties"]
        for r in doc["Resources"].values()
        if r["Type"] == "AWS::S3::BucketPolicy" and r["Properties"]["Bucket"] == {"Ref": "NimbusBucket"}
    ]
    assert len(policies) == 1, policies
    denials = [
        s
        for s in policies[0]["PolicyDocument"]["Statement"]
        if s["Effect"] == "Deny" and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
    ]
    assert len(denials) == 1, denials
    (deny,) = denials
    assert deny["Principal"] == "*" and deny["Action"] == "s3:*"
    resources = as_list(deny["Resource"])
    assert {"Fn::GetAtt": ["NimbusBucket", "Arn"]} in resources or {"Fn::GetAtt": "NimbusBucket.Arn"} in resources
    assert {"Fn::Sub": "${NimbusBucket.Arn}/*"} in resources


# --------------------------------------------------------------------------------------------
# 7. Scope
# --------------------------------------------------------------------------------------------


def test_the_config_bucket_is_read_under_the_prefix_parameter_only() -> None:
    doc = template()
    parameter = doc["Parameters"]["ConfigReadPrefix"]
    assert parameter["Default"] == ""  # as before the parameter: the whole bucket
    pattern = re.compile(parameter["AllowedPattern"])
    for good in ("", "config/", "nimbus/prod/"):
        assert pattern.fullmatch(good), good
    for bad in ("*", "config", "config/*", "a*/", "/", "../"):
        assert not pattern.fullmatch(bad), bad
    # The files function reads no configuration (it calls no model): no grant on the config bucket.
    files = function_statements(doc, "NimbusFilesFunction")
    assert "ConfigBucket" not in json.dumps(files)
    assert not [s for s in files if s.get("Sid") == "ReadConfigObject"]
    for function in (f for f in FUNCTIONS if f != "NimbusFilesFunction"):
        reads = [s for s in function_statements(doc, function) if s.get("Sid") == "ReadConfigObject"]
        assert len(reads) == 1, function
        (read,) = reads
        assert read["Action"] == "s3:GetObject", function
        text, _ = read["Resource"]["Fn::Sub"]
        assert text == "arn:${AWS::Partition}:s3:::${ConfigBucket}/${ConfigReadPrefix}*", function
        # Nothing else of the config bucket: no other statement names it.
        others = [s for s in function_statements(doc, function) if s is not read]
        assert "ConfigBucket" not in json.dumps(others), function


def test_actions_the_code_never_calls_are_not_granted() -> None:
    doc = template()
    never = {
        "NimbusInferenceFunction": {"dynamodb:BatchGetItem"},
        "NimbusFilesFunction": {"s3:ListMultipartUploadParts"},
        "NimbusWorkerFunction": {"dynamodb:ConditionCheckItem"},
        # It seals credentials at submit; the worker and the poller open them.
        "NimbusBatchesFunction": {"kms:Decrypt"},
    }
    for function, actions in never.items():
        granted = actions_of(function_statements(doc, function))
        assert not granted & actions, (function, granted & actions)


# The SDK calls (in shared/src, tests aside) that need each granted action: an action none of them
# is made for is granted in vain. The event source mappings poll with the worker's role, so
# receiving and reading queue attributes need no call of the code.
SDK_CALLS = {
    "dynamodb:GetItem": ["get_item"],
    "dynamodb:PutItem": ["put_item", "transact_write_items"],
    "dynamodb:DeleteItem": ["delete_item", "transact_write_items"],
    "dynamodb:Query": ["query"],
    "s3:GetObject": ["get_object", "head_object", "copy_object"],
    "s3:PutObject": ["put_object", "upload_part", "create_multipart_upload", "copy_object"],
    "s3:DeleteObject": ["delete_object", "delete_objects"],
    "s3:AbortMultipartUpload": ["abort_multipart_upload"],
    "s3:ListBucket": ["list_objects_v2", "head_object"],
    "sqs:SendMessage": ["send_message", "send_message_batch"],
    "sqs:ChangeMessageVisibility": ["change_message_visibility"],
    "sqs:DeleteMessage": ["delete_message"],
    "kms:Encrypt": ["encrypt"],
    "kms:Decrypt": ["decrypt"],
    "ssm:GetParameter": ["get_parameter"],
    "ssm:PutParameter": ["put_parameter"],
    "sagemaker:InvokeEndpoint": ["invoke_endpoint"],
    "sagemaker:InvokeEndpointWithResponseStream": ["invoke_endpoint_with_response_stream"],
    "events:EnableRule": ["enable_rule"],
    "events:DisableRule": ["disable_rule"],
}
POLLED_BY_THE_EVENT_SOURCE = {"sqs:ReceiveMessage", "sqs:GetQueueAttributes"}


def sdk_source() -> str:
    files = [p for p in SHARED_SRC.rglob("*.rs") if not p.name.endswith("_tests.rs") and p.name != "tests.rs"]
    return "\n".join(Path(p).read_text() for p in files)


def test_every_granted_action_is_one_the_code_calls() -> None:
    source = sdk_source()
    doc = expanded()
    for function in FUNCTIONS:
        for action in actions_of(role_statements(doc, f"{function}Role")):
            if action in POLLED_BY_THE_EVENT_SOURCE:
                assert function == "NimbusWorkerFunction", (function, action)
                continue
            assert action in SDK_CALLS, f"{function}: {action} is not an action this test knows"
            assert any(re.search(rf"\.{call}\(\)", source) for call in SDK_CALLS[action]), (
                f"{function}: {action} is granted but shared/src never calls {SDK_CALLS[action]}"
            )


def test_the_functions_that_write_inference_records_may_drop_a_duplicate_payload() -> None:
    doc = template()
    for function in ("NimbusInferenceFunction", "NimbusWorkerFunction"):
        deletes = [
            s
            for s in function_statements(doc, function)
            if "s3:DeleteObject" in as_list(s["Action"])
            and {"Fn::Sub": "${NimbusBucket.Arn}/inferences/*"} in as_list(s["Resource"])
        ]
        assert deletes, function


# --------------------------------------------------------------------------------------------
# 9. Observability of abuse
# --------------------------------------------------------------------------------------------


def test_the_http_api_writes_an_access_log_kept_for_a_parameter_of_days() -> None:
    doc = template()
    settings = doc["Resources"]["NimbusHttpApi"]["Properties"]["AccessLogSettings"]
    group = get_att_target(settings["DestinationArn"])
    assert group is not None and group.endswith(".Arn"), settings
    log_group = doc["Resources"][group.removesuffix(".Arn")]
    assert log_group["Type"] == "AWS::Logs::LogGroup"
    assert log_group["Properties"]["RetentionInDays"] == {"Ref": "AccessLogRetentionDays"}
    parameter = doc["Parameters"]["AccessLogRetentionDays"]
    assert parameter["Default"] in parameter["AllowedValues"]
    line = json.loads(settings["Format"])
    for field in ("requestId", "ip", "routeKey", "status", "responseLatencyMs"):
        assert field in line, field
    # No header, query string or body: no API key or token lands in the log.
    assert not re.search(r"header|querystring|authorization|body", settings["Format"], re.IGNORECASE)
    # SAM passes it to the $default stage.
    stages = [r for r in expanded()["Resources"].values() if r["Type"] == "AWS::ApiGatewayV2::Stage"]
    assert len(stages) == 1 and stages[0]["Properties"]["AccessLogSettings"] == settings


def test_the_streaming_api_writes_an_access_log_too() -> None:
    """REST access logs need the account's API Gateway CloudWatch role: by default the stack makes
    one (kept on delete, so the account setting never names a deleted role) and the API waits for
    the setting; `ApiGatewayLogRole=none` leaves the log out."""
    doc = template()
    parameter = doc["Parameters"]["ApiGatewayLogRole"]
    assert parameter["Default"] == "create" and set(parameter["AllowedValues"]) == {"create", "existing", "none"}
    assert doc["Conditions"]["StreamAccessLogOn"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "ApiGatewayLogRole"}, "none"]}]}
    assert doc["Conditions"]["CreateApiGatewayLogRole"] == {"Fn::Equals": [{"Ref": "ApiGatewayLogRole"}, "create"]}
    api = doc["Resources"]["NimbusStreamApi"]["Properties"]
    condition, settings, otherwise = api["AccessLogSetting"]["Fn::If"]
    assert (condition, otherwise) == ("StreamAccessLogOn", {"Ref": "AWS::NoValue"})
    assert settings["DestinationArn"] == {"Fn::GetAtt": ["NimbusStreamAccessLogGroup", "Arn"]}
    log_group = doc["Resources"]["NimbusStreamAccessLogGroup"]
    assert log_group["Condition"] == "StreamAccessLogOn"
    assert log_group["Properties"]["RetentionInDays"] == {"Ref": "AccessLogRetentionDays"}
    line = json.loads(settings["Format"])
    for field in ("requestId", "ip", "resourcePath", "status", "responseLatencyMs"):
        assert field in line, field
    assert not re.search(r"header|querystring|authorization|body", settings["Format"], re.IGNORECASE)
    role = doc["Resources"]["NimbusApiGatewayLogRole"]
    account = doc["Resources"]["NimbusApiGatewayAccount"]
    for resource in (role, account):
        assert resource["Condition"] == "CreateApiGatewayLogRole"
        assert resource["DeletionPolicy"] == "Retain" and resource["UpdateReplacePolicy"] == "Retain"
    assert account["Properties"]["CloudWatchRoleArn"] == {"Fn::GetAtt": ["NimbusApiGatewayLogRole", "Arn"]}
    assert role["Properties"]["ManagedPolicyArns"] == [
        {"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs"}
    ]
    # The API names the account setting, so CloudFormation creates the setting first.
    assert "${NimbusApiGatewayAccount}" in json.dumps(api["Description"])
    # SAM passes the log setting to the `stream` stage.
    stages = [r for r in expanded()["Resources"].values() if r["Type"] == "AWS::ApiGateway::Stage"]
    assert len(stages) == 1 and stages[0]["Properties"]["AccessLogSetting"] == api["AccessLogSetting"]


def test_every_queue_is_encrypted_at_rest_without_a_billed_key() -> None:
    queues = {n: r for n, r in template()["Resources"].items() if r["Type"] == "AWS::SQS::Queue"}
    assert set(queues) >= QUEUES
    for name, queue in queues.items():
        properties = queue["Properties"]
        assert properties.get("SqsManagedSseEnabled") is True, name
        assert "KmsMasterKeyId" not in properties, name


def test_the_streaming_api_stage_is_traced() -> None:
    assert template()["Resources"]["NimbusStreamApi"]["Properties"]["TracingEnabled"] is True
