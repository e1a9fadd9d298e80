"""template.yaml's sealing key with `Sealing=kms`: a rotated KMS key the account administers, named
to the batches, worker and poller functions (`NIMBUS_SEALING_KEY_ID`), which alone may use it (the
batches function to encrypt only, the worker and poller to decrypt too), and only under an
encryption context. (The default, a Parameter Store data key, is test_idle_cost_template.py's.)
"""

from __future__ import annotations

from typing import Any

import nimbus_testkit as kit

KEY = "NimbusSealingKey"
SEALING_FUNCTIONS = ["NimbusBatchesFunction", "NimbusWorkerFunction", "NimbusPollerFunction"]
# The batches function only seals (at submit); the worker and the poller call the providers with
# the credentials, so they open them too.
KMS_ACTIONS = {
    "NimbusBatchesFunction": ["kms:Encrypt"],
    "NimbusWorkerFunction": ["kms:Decrypt", "kms:Encrypt"],
    "NimbusPollerFunction": ["kms:Decrypt", "kms:Encrypt"],
}


def template() -> dict[str, Any]:
    from samcli.yamlhelper import yaml_parse  # noqa: PLC0415

    return yaml_parse(kit.TEMPLATE.read_text())


def statements(function: dict[str, Any]) -> list[dict[str, Any]]:
    """The function's statements, taking the `Sealing=kms` branch of any `Fn::If` on it."""
    found = []
    for policy in function["Properties"].get("Policies", []):
        if isinstance(policy, dict) and "Fn::If" in policy and policy["Fn::If"][0] == "SealWithKms":
            policy = policy["Fn::If"][1]
        if isinstance(policy, dict) and "Statement" in policy:
            found.extend(policy["Statement"])
    return found


def kms_statements(function: dict[str, Any]) -> list[dict[str, Any]]:
    return [statement for statement in statements(function) if "kms:" in repr(statement.get("Action"))]


def test_the_sealing_key_is_rotated_and_administered_by_the_account() -> None:
    key = template()["Resources"][KEY]
    assert key["Type"] == "AWS::KMS::Key"
    assert key["Condition"] == "SealWithKms"
    properties = key["Properties"]
    assert properties["EnableKeyRotation"] is True
    assert properties.get("KeySpec", "SYMMETRIC_DEFAULT") == "SYMMETRIC_DEFAULT"
    assert properties.get("KeyUsage", "ENCRYPT_DECRYPT") == "ENCRYPT_DECRYPT"
    (admin,) = properties["KeyPolicy"]["Statement"]
    assert admin["Effect"] == "Allow"
    assert admin["Principal"] == {"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}}
    assert admin["Action"] == "kms:*"


def test_only_the_functions_that_seal_may_use_the_key_and_only_to_seal_and_open() -> None:
    doc = template()
    functions = {
        name: resource
        for name, resource in doc["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }
    assert set(SEALING_FUNCTIONS) <= set(functions)
    for name, function in functions.items():
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        found = kms_statements(function)
        if name not in SEALING_FUNCTIONS:
            assert "NIMBUS_SEALING_KEY_ID" not in variables, name
            assert found == [], name
            continue
        assert variables["NIMBUS_SEALING_KEY_ID"] == {"Fn::If": ["SealWithKms", {"Ref": KEY}, ""]}, name
        assert len(found) == 1, (name, found)
        (statement,) = found
        assert statement["Effect"] == "Allow"
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        assert sorted(actions) == KMS_ACTIONS[name], name
        assert statement["Resource"] == {"Fn::GetAtt": [KEY, "Arn"]}, name
        # Sealed values are bound to their record: no call without the encryption context.
        assert statement["Condition"] == {"Null": {"kms:EncryptionContext:nimbus": "false"}}, name
    # No other resource grants KMS actions (the key policy aside).
    for name, resource in doc["Resources"].items():
        if name != KEY and resource["Type"] != "AWS::Serverless::Function":
            assert "kms:" not in repr(resource), name
