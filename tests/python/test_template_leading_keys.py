"""template.yaml's state-table access, per function, by record kind: every DynamoDB statement is
limited by `dynamodb:LeadingKeys` to the key prefixes (`{kind}#*`) of the kinds
`shared/src/app/table_access.rs` gives the function (as `docs/table-access.json`, which a Rust unit
test keeps current). GetItem and Query (on the `by_owner` index only, whose key `{kind}#{owner}`
starts with the kind too) reach what the function reads or writes; PutItem and DeleteItem only what
it writes. The same table limits each function's state store at run time (`ScopedState`), so a code
path reaching a kind its role lacks fails the Lambda tests that run it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nimbus_testkit as kit

TABLE_ACCESS = Path(__file__).resolve().parents[2] / "docs" / "table-access.json"
TABLE = {"Fn::GetAtt": ["NimbusStateTable", "Arn"]}
INDEX = {"Fn::Sub": "${NimbusStateTable.Arn}/index/by_owner"}
# The inference function only ever puts (conditional PutItem); the others also delete.
WRITE_ACTIONS = {
    "NimbusInferenceFunction": {"dynamodb:PutItem"},
    "NimbusFilesFunction": {"dynamodb:PutItem", "dynamodb:DeleteItem"},
    "NimbusBatchesFunction": {"dynamodb:PutItem", "dynamodb:DeleteItem"},
    "NimbusWorkerFunction": {"dynamodb:PutItem", "dynamodb:DeleteItem"},
    "NimbusPollerFunction": {"dynamodb:PutItem", "dynamodb:DeleteItem"},
}


def template() -> dict[str, Any]:
    from samcli.yamlhelper import yaml_parse  # noqa: PLC0415

    return yaml_parse(kit.TEMPLATE.read_text())


def table_access() -> dict[str, dict[str, list[str]]]:
    return json.loads(TABLE_ACCESS.read_text())


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def statements(function: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for policy in function["Properties"].get("Policies", []):
        if isinstance(policy, dict) and "Statement" in policy:
            found.extend(policy["Statement"])
        elif isinstance(policy, dict) and "Fn::If" in policy:
            _, when, otherwise = policy["Fn::If"]
            for branch in (when, otherwise):
                if isinstance(branch, dict) and "Statement" in branch:
                    found.extend(branch["Statement"])
        else:
            # A SAM policy template (e.g. DynamoDBCrudPolicy) would grant the whole table.
            raise AssertionError(f"a policy this test cannot read: {policy!r}")
    return found


def dynamodb_statements(function: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in statements(function) if any(str(a).startswith("dynamodb:") for a in as_list(s["Action"]))]


def leading_keys(statement: dict[str, Any]) -> set[str]:
    condition = statement.get("Condition") or {}
    assert set(condition) == {"ForAllValues:StringLike"}, statement
    (key,) = condition["ForAllValues:StringLike"]
    assert key == "dynamodb:LeadingKeys", statement
    return set(as_list(condition["ForAllValues:StringLike"][key]))


def prefixes(kinds: list[str] | set[str]) -> set[str]:
    return {f"{kind}#*" for kind in kinds}


def granted(function: dict[str, Any]) -> dict[str, tuple[set[str], list[Any]]]:
    """Each DynamoDB action → (the key patterns allowed, the resources), one statement per action."""
    actions: dict[str, tuple[set[str], list[Any]]] = {}
    for statement in dynamodb_statements(function):
        assert statement["Effect"] == "Allow", statement
        patterns = leading_keys(statement)
        for action in as_list(statement["Action"]):
            assert action not in actions, f"{action} granted twice: {statement}"
            actions[action] = (patterns, as_list(statement["Resource"]))
    return actions


def test_every_function_with_a_table_entry_is_in_the_template_and_no_other_reaches_the_table() -> None:
    resources = template()["Resources"]
    functions = {n: r for n, r in resources.items() if r["Type"] == "AWS::Serverless::Function"}
    access = table_access()
    assert set(access) == set(WRITE_ACTIONS) <= set(functions)
    for name, function in functions.items():
        if name not in access:
            assert dynamodb_statements(function) == [], name
    # No other resource (a standalone policy) grants DynamoDB actions.
    for name, resource in resources.items():
        if resource["Type"] in {"AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::IAM::Role"}:
            assert "dynamodb:" not in json.dumps(resource), name


def test_each_role_reaches_exactly_its_record_kinds() -> None:
    resources = template()["Resources"]
    for name, kinds in table_access().items():
        actions = granted(resources[name])
        readable = prefixes(set(kinds["reads"]) | set(kinds["writes"]))
        writable = prefixes(kinds["writes"])
        assert set(actions) == {"dynamodb:GetItem", "dynamodb:Query"} | WRITE_ACTIONS[name], (name, set(actions))
        assert actions["dynamodb:GetItem"] == (readable, [TABLE]), name
        # Listing is a Query on the owner index only (never the table: no Scan-like reads).
        assert actions["dynamodb:Query"] == (readable, [INDEX]), name
        for action in WRITE_ACTIONS[name]:
            assert actions[action] == (writable, [TABLE]), (name, action)


def test_the_internet_facing_function_cannot_read_webhook_secrets_or_write_keys() -> None:
    """The brief of issue #27 item 3, spelled out: whatever the table says, these stay true."""
    resources = template()["Resources"]
    inference = granted(resources["NimbusInferenceFunction"])
    for action, (patterns, _) in inference.items():
        assert not patterns & prefixes(["webhook_secret", "webhook_endpoint", "webhook_delivery"]), action
    for action in ("dynamodb:PutItem", "dynamodb:DeleteItem"):
        for name in table_access():
            patterns, _ = granted(resources[name]).get(action, (set(), []))
            # API keys are written by the `nimbus keys` CLI only (an operator's credentials).
            assert "api_key#*" not in patterns, (name, action)
            if name != "NimbusBatchesFunction":
                # Only the API that manages them (and revokes: the version bump) writes these.
                assert not patterns & prefixes(["webhook_secret", "webhook_endpoint", "revocation"]), (name, action)
    # Every function that authenticates requests reads the key records and the revocation version.
    for name in ("NimbusInferenceFunction", "NimbusFilesFunction", "NimbusBatchesFunction"):
        patterns, _ = granted(resources[name])["dynamodb:GetItem"]
        assert {"api_key#*", "revocation#*"} <= patterns, name


def test_no_pattern_reaches_past_its_kind() -> None:
    """`file#*` must not also match `file_x#…`: each pattern is a kind, `#`, then the wildcard."""
    for name, kinds in table_access().items():
        for kind in kinds["reads"] + kinds["writes"]:
            assert kind and kind.replace("_", "").isalnum() and kind.islower(), (name, kind)
