"""The default stack bills nothing while idle (issue #28 item 4): every resource with a monthly fee
of its own — CloudWatch alarms, the dashboard, point-in-time recovery — exists only when its
parameter turns it on, and each such parameter defaults to off.
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
    tpl = template()
    conditional = {n for n, r in tpl["Resources"].items() if "Condition" in r}

    def refs(node: Any) -> set[str]:
        if isinstance(node, dict):
            found = set()
            for key, value in node.items():
                if key == "Ref" and isinstance(value, str):
                    found.add(value)
                elif key == "Fn::GetAtt":
                    found.add(value[0] if isinstance(value, list) else value.split(".")[0])
                elif key == "Fn::Sub":
                    text = value[0] if isinstance(value, list) else value
                    found |= {part.split("}")[0].split(".")[0] for part in text.split("${")[1:]}
                found |= refs(value)
            return found
        if isinstance(node, list):
            return set().union(*(refs(v) for v in node)) if node else set()
        return set()

    for section in ("Resources", "Outputs"):
        for name, body in tpl[section].items():
            if "Condition" in body:
                continue
            assert not (refs(body) & conditional), f"{section}.{name} refers to {refs(body) & conditional}"
