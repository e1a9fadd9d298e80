"""The default stack bills nothing while idle (issue #28 item 4): every resource with a monthly fee
of its own — CloudWatch alarms, the dashboard, point-in-time recovery, a customer-managed KMS
key — exists only when its parameter turns it on, and each such parameter defaults to off.
"""

from __future__ import annotations

from typing import Any

import nimbus_testkit as kit

# Resource types billed per month merely by existing (list prices; alarms beyond the free 10,
# dashboards beyond the free 3 — a stack cannot know what else the account has, so none is free).
BILLED_WHILE_IDLE = {"AWS::CloudWatch::Alarm", "AWS::CloudWatch::Dashboard"}


def template() -> dict[str, Any]:
    from samcli.yamlhelper import yaml_parse  # noqa: PLC0415

    return yaml_parse(kit.TEMPLATE.read_text())


def condition_is_parameter_on(tpl: dict[str, Any], condition: str, parameter: str) -> bool:
    return tpl["Conditions"][condition] == {"Fn::Equals": [{"Ref": parameter}, "on"]}


def test_monitoring_resources_exist_only_when_monitoring_is_on() -> None:
    tpl = template()
    billed = {n: r for n, r in tpl["Resources"].items() if r["Type"] in BILLED_WHILE_IDLE}
    assert len(billed) >= 20, "the alarms and the dashboard are still defined"
    for name, resource in billed.items():
        assert resource.get("Condition") == "MonitoringOn", name
    assert condition_is_parameter_on(tpl, "MonitoringOn", "Monitoring")
    assert tpl["Parameters"]["Monitoring"]["Default"] == "off"
    # An output naming a conditional resource must carry the same condition.
    assert tpl["Outputs"]["DashboardName"].get("Condition") == "MonitoringOn"


def test_point_in_time_recovery_is_a_parameter_off_by_default() -> None:
    tpl = template()
    table = tpl["Resources"]["NimbusStateTable"]["Properties"]
    assert table["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] == {
        "Fn::If": ["PointInTimeRecoveryOn", True, False]
    }
    assert condition_is_parameter_on(tpl, "PointInTimeRecoveryOn", "PointInTimeRecovery")
    assert tpl["Parameters"]["PointInTimeRecovery"]["Default"] == "off"


def test_no_output_or_resource_refers_to_a_conditional_resource_unconditionally() -> None:
    """A reference to a resource that exists only under condition C is made only where C holds: in
    a resource or output with that condition, or in the true branch of an `Fn::If` on C."""
    tpl = template()
    condition_of = {n: r["Condition"] for n, r in tpl["Resources"].items() if "Condition" in r}

    def bad_refs(node: Any, holds: frozenset[str]) -> set[str]:
        if isinstance(node, list):
            return set().union(set(), *(bad_refs(v, holds) for v in node))
        if not isinstance(node, dict):
            return set()
        found: set[str] = set()
        for key, value in node.items():
            names: list[str] = []
            if key == "Fn::If":
                condition, when_true, when_false = value
                found |= bad_refs(when_true, holds | {condition}) | bad_refs(when_false, holds)
                continue
            if key == "Ref" and isinstance(value, str):
                names = [value]
            elif key == "Fn::GetAtt":
                names = [value[0] if isinstance(value, list) else value.split(".")[0]]
            elif key == "Fn::Sub":
                text = value[0] if isinstance(value, list) else value
                names = [part.split("}")[0].split(".")[0] for part in text.split("${")[1:]]
            found |= {n for n in names if n in condition_of and condition_of[n] not in holds}
            found |= bad_refs(value, holds)
        return found

    for section in ("Resources", "Outputs"):
        for name, body in tpl[section].items():
            holds = frozenset({body["Condition"]}) if "Condition" in body else frozenset()
            assert not bad_refs(body, holds), f"{section}.{name} refers to {bad_refs(body, holds)}"


def test_sealing_needs_no_billed_key_by_default() -> None:
    """The KMS key (a monthly fee) exists only with Sealing=kms; by default the functions that seal
    read and make their data key in one SSM parameter of the stack, and nothing else of SSM."""
    tpl = template()
    assert tpl["Parameters"]["Sealing"]["Default"] == "parameter-store"
    assert tpl["Resources"]["NimbusSealingKey"]["Condition"] == "SealWithKms"
    assert tpl["Conditions"]["SealWithKms"] == {"Fn::Equals": [{"Ref": "Sealing"}, "kms"]}
    sealing = []
    for name, resource in tpl["Resources"].items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        env = resource["Properties"].get("Environment", {}).get("Variables", {})
        policies = resource["Properties"].get("Policies", [])
        ifs = [p["Fn::If"] for p in policies if isinstance(p, dict) and "Fn::If" in p and p["Fn::If"][0] == "SealWithKms"]
        if "NIMBUS_SEALING_KEY_PARAMETER" not in env:
            assert not ifs, name
            continue
        sealing.append(name)
        assert env["NIMBUS_SEALING_KEY_PARAMETER"] == {"Fn::Sub": "/nimbus/${AWS::StackName}/sealing-key"}
        assert env["NIMBUS_SEALING_KEY_ID"] == {"Fn::If": ["SealWithKms", {"Ref": "NimbusSealingKey"}, ""]}
        assert len(ifs) == 1, name
        (statement,) = ifs[0][2]["Statement"]
        assert set(statement["Action"]) == {"ssm:GetParameter", "ssm:PutParameter"}, name
        assert statement["Resource"] == {
            "Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter/nimbus/${AWS::StackName}/sealing-key"
        }, name
    assert {"NimbusBatchesFunction", "NimbusWorkerFunction", "NimbusPollerFunction"} <= set(sealing)


def test_the_internet_facing_function_may_never_read_the_sealing_key() -> None:
    """The provider-key grant (`ProviderKeyParameterPrefix`, `/nimbus/` by default) covers the
    sealing key's parameter too: the inference role denies it explicitly."""
    tpl = template()
    statements = [
        statement
        for policy in tpl["Resources"]["NimbusInferenceFunction"]["Properties"]["Policies"]
        if isinstance(policy, dict) and "Statement" in policy
        for statement in policy["Statement"]
    ]
    denied = [s for s in statements if s.get("Effect") == "Deny"]
    assert denied == [
        {
            "Sid": "NeverReadTheSealingKey",
            "Effect": "Deny",
            "Action": "ssm:GetParameter",
            "Resource": {
                "Fn::Sub": "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter/nimbus/${AWS::StackName}/sealing-key"
            },
        }
    ]
    assert tpl["Parameters"]["ProviderKeyParameterPrefix"]["Default"] == "/nimbus/"


STACK_UUID = {"StackUuid": {"Fn::Select": [2, {"Fn::Split": ["/", {"Ref": "AWS::StackId"}]}]}}
RULE_NAME = {"Fn::Sub": ["nimbus-poller-${StackUuid}", STACK_UUID]}
RULE_ARN = {
    "Fn::Sub": ["arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}:rule/nimbus-poller-${StackUuid}", STACK_UUID]
}


def test_the_every_minute_pass_is_armed_only_while_there_is_work() -> None:
    """The poller's every-minute rule has the name every function is given (NIMBUS_POLLER_RULE),
    so the functions that write due work can turn it on and the poller off; an hourly heartbeat
    rule, always on, turns it back on for work coming due (scheduler::Arming)."""
    from test_hardening_template import expanded  # noqa: PLC0415

    tpl = template()
    env = tpl["Globals"]["Function"]["Environment"]["Variables"]
    assert env["NIMBUS_POLLER_RULE"] == RULE_NAME
    events = tpl["Resources"]["NimbusPollerFunction"]["Properties"]["Events"]
    assert events["EveryMinute"]["Properties"]["Schedule"] == "rate(1 minute)"
    assert events["EveryMinute"]["Properties"]["Name"] == RULE_NAME
    assert events["Hourly"]["Properties"]["Schedule"] == "rate(1 hour)"
    assert "Enabled" not in events["Hourly"]["Properties"] and "State" not in events["Hourly"]["Properties"]
    rules = {
        r["Properties"]["ScheduleExpression"]: r
        for r in expanded()["Resources"].values()
        if r["Type"] == "AWS::Events::Rule"
    }
    assert set(rules) == {"rate(1 minute)", "rate(1 hour)"}, "exactly the two poller rules"
    assert rules["rate(1 minute)"]["Properties"]["Name"] == RULE_NAME


def test_only_the_functions_that_write_due_work_may_switch_the_rule_and_only_that_rule() -> None:
    from test_hardening_template import function_statements  # noqa: PLC0415

    doc = template()
    allowed = {
        "NimbusFilesFunction": {"events:EnableRule"},
        "NimbusBatchesFunction": {"events:EnableRule"},
        "NimbusWorkerFunction": {"events:EnableRule"},
        "NimbusPollerFunction": {"events:EnableRule", "events:DisableRule"},
        "NimbusInferenceFunction": set(),
    }
    for function, actions in allowed.items():
        granted: set[str] = set()
        for statement in function_statements(doc, function):
            action = statement["Action"]
            events_actions = {a for a in (action if isinstance(action, list) else [action]) if a.startswith("events:")}
            if events_actions:
                assert statement["Effect"] == "Allow"
                assert statement["Resource"] == RULE_ARN, (function, statement)
                granted |= events_actions
        assert granted == actions, function
