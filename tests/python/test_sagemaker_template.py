"""template.yaml's SageMaker permissions for a few values of `SageMakerEndpointArns`: exactly the two
invoke actions on exactly the listed endpoints, on the functions that call models, and nothing at all
without ARNs.
"""

from __future__ import annotations

from typing import Any

import pytest

import nimbus_testkit as kit

INVOKE_ACTIONS = ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"]
PARAMETER = "SageMakerEndpointArns"


def template() -> dict[str, Any]:
    from samcli.yamlhelper import yaml_parse  # noqa: PLC0415

    return yaml_parse(kit.TEMPLATE.read_text())


def resolve(expression: Any, arns: list[str]) -> Any:
    """The value of the intrinsic functions the SageMaker parts use, with the parameter set."""
    if isinstance(expression, dict):
        if expression == {"Ref": PARAMETER}:
            return arns
        if "Fn::Not" in expression:
            return not resolve(expression["Fn::Not"][0], arns)
        if "Fn::Equals" in expression:
            left, right = (resolve(side, arns) for side in expression["Fn::Equals"])
            return left == right
        if "Fn::Join" in expression:
            delimiter, values = expression["Fn::Join"]
            return delimiter.join(resolve(values, arns))
    return expression


def deployed_sagemaker_statements(doc: dict[str, Any], arns: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """(resource, statement) of every statement naming a SageMaker action in a resource that
    CloudFormation creates (its condition, if any, holds)."""
    found = []
    for name, resource in doc["Resources"].items():
        condition = resource.get("Condition")
        if condition and not resolve(doc["Conditions"][condition], arns):
            continue
        if "sagemaker:" not in repr(resource):
            continue
        assert resource["Type"] == "AWS::IAM::Policy", (name, resource["Type"])
        found.extend((name, statement) for statement in resource["Properties"]["PolicyDocument"]["Statement"])
    return found


def test_without_endpoint_arns_no_function_may_call_sagemaker() -> None:
    doc = template()
    assert doc["Parameters"][PARAMETER]["Default"] == ""
    assert deployed_sagemaker_statements(doc, [""]) == []
    for name, resource in doc["Resources"].items():
        if resource.get("Type") == "AWS::Serverless::Function":
            assert "sagemaker" not in repr(resource["Properties"].get("Policies", [])).lower(), name


@pytest.mark.parametrize(
    "arns",
    [
        ["arn:aws:sagemaker:us-east-1:123456789012:endpoint/chat-llama3"],
        [
            "arn:aws:sagemaker:us-east-1:123456789012:endpoint/chat-llama3",
            "arn:aws:sagemaker:eu-west-1:123456789012:endpoint/embedding-bge",
        ],
    ],
)
def test_each_listed_endpoint_may_be_invoked_by_the_model_calling_functions_only(arns: list[str]) -> None:
    doc = template()
    statements = deployed_sagemaker_statements(doc, arns)
    assert len(statements) == 1
    resource_name, statement = statements[0]
    assert statement["Effect"] == "Allow"
    assert sorted(statement["Action"]) == INVOKE_ACTIONS
    assert resolve(statement["Resource"], arns) == arns
    roles = doc["Resources"][resource_name]["Properties"]["Roles"]
    assert roles == [{"Ref": "NimbusInferenceFunctionRole"}, {"Ref": "NimbusWorkerFunctionRole"}]
    for function in ("NimbusInferenceFunction", "NimbusWorkerFunction"):
        assert doc["Resources"][function]["Type"] == "AWS::Serverless::Function"
        assert "Role" not in doc["Resources"][function]["Properties"], function
