"""template.yaml's SageMaker permissions, expanded the way CloudFormation's LanguageExtensions
transform expands them (SAM CLI's own implementation), for a few values of `SageMakerEndpointNames`:
exactly the two invoke actions on exactly the named endpoints, on the functions that call models,
and nothing at all without names.
"""

from __future__ import annotations

from typing import Any

import pytest

import nimbus_testkit as kit

INVOKE_ACTIONS = ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"]
ARN_PREFIX = "arn:${AWS::Partition}:sagemaker:${AWS::Region}:${AWS::AccountId}:endpoint/"


def expanded(names: list[str]) -> dict[str, Any]:
    from samcli.lib.cfn_language_extensions.api import process_template  # noqa: PLC0415
    from samcli.yamlhelper import yaml_parse  # noqa: PLC0415

    template = yaml_parse(kit.TEMPLATE.read_text())
    return process_template(template, parameter_values={"SageMakerEndpointNames": names})


def condition_holds(template: dict[str, Any], name: str) -> bool:
    """The value of a condition made of Fn::Not / Fn::Equals over resolved strings."""

    def evaluate(expression: Any) -> bool:
        if "Fn::Not" in expression:
            return not evaluate(expression["Fn::Not"][0])
        if "Fn::Equals" in expression:
            left, right = expression["Fn::Equals"]
            assert isinstance(left, str) and isinstance(right, str), expression
            return left == right
        raise AssertionError(f"unexpected condition {expression}")

    return evaluate(template["Conditions"][name])


def deployed_sagemaker_statements(template: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(resource, statement) of every statement naming a SageMaker action in a resource that
    CloudFormation creates (its condition, if any, holds)."""
    found = []
    for name, resource in template["Resources"].items():
        condition = resource.get("Condition")
        if condition and not condition_holds(template, condition):
            continue
        if "sagemaker:" not in repr(resource):
            continue
        properties = resource["Properties"]
        assert resource["Type"] == "AWS::IAM::Policy", (name, resource["Type"])
        found.extend((name, statement) for statement in properties["PolicyDocument"]["Statement"])
    return found


def test_without_endpoint_names_no_function_may_call_sagemaker() -> None:
    template = expanded([""])
    assert deployed_sagemaker_statements(template) == []
    # Nor does any function's inline policy list mention SageMaker.
    for name, resource in template["Resources"].items():
        if resource.get("Type") == "AWS::Serverless::Function":
            assert "sagemaker" not in repr(resource["Properties"].get("Policies", [])).lower(), name


@pytest.mark.parametrize("names", [["chat-llama3"], ["chat-llama3", "embedding-bge", "tgi-compat-7b"]])
def test_each_named_endpoint_may_be_invoked_by_the_model_calling_functions_only(names: list[str]) -> None:
    template = expanded(names)
    statements = deployed_sagemaker_statements(template)
    assert sorted(statement["Resource"] for _, statement in statements) == sorted(ARN_PREFIX + n for n in names)
    for resource_name, statement in statements:
        assert statement["Effect"] == "Allow"
        assert sorted(statement["Action"]) == INVOKE_ACTIONS
        roles = template["Resources"][resource_name]["Properties"]["Roles"]
        assert roles == [{"Ref": "NimbusInferenceFunctionRole"}, {"Ref": "NimbusWorkerFunctionRole"}]
    # The roles named are the ones SAM generates for those two functions.
    for function in ("NimbusInferenceFunction", "NimbusWorkerFunction"):
        assert template["Resources"][function]["Type"] == "AWS::Serverless::Function"
        assert "Role" not in template["Resources"][function]["Properties"], function
