"""template.yaml's alarms and dashboard (issue #14): every function's errors and throttles, every
dead-letter queue not empty, every job queue's oldest message, and the provider error rate from
the functions' own EMF metrics; each tells the optional SNS topic; one dashboard of the main
figures, whose metrics exist as the functions write them.
"""

from __future__ import annotations

import json
import re
from typing import Any

import nimbus_testkit as kit

FUNCTIONS = [
    "NimbusInferenceFunction",
    "NimbusFilesFunction",
    "NimbusBatchesFunction",
    "NimbusWorkerFunction",
    "NimbusPollerFunction",
]


def template() -> dict[str, Any]:
    from samcli.yamlhelper import yaml_parse  # noqa: PLC0415

    return yaml_parse(kit.TEMPLATE.read_text())


def resources_of(kind: str) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in template()["Resources"].items() if r["Type"] == kind}


def alarms_on(namespace: str, metric: str) -> list[dict[str, Any]]:
    return [
        a["Properties"]
        for a in resources_of("AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("Namespace") == namespace and a["Properties"].get("MetricName") == metric
    ]


def dimension_refs(alarm: dict[str, Any]) -> set[str]:
    refs = set()
    for dimension in alarm["Dimensions"]:
        value = dimension["Value"]
        refs.add(value.get("Ref") or value["Fn::GetAtt"][0])
    return refs


def test_every_function_has_an_errors_and_a_throttles_alarm() -> None:
    for metric in ("Errors", "Throttles"):
        alarms = alarms_on("AWS/Lambda", metric)
        assert {ref for a in alarms for ref in dimension_refs(a)} == set(FUNCTIONS), metric
        for alarm in alarms:
            assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")


def test_every_dead_letter_queue_and_every_job_queue_is_watched() -> None:
    queues = resources_of("AWS::SQS::Queue")
    dead_letter = {name for name in queues if name.endswith("DeadLetterQueue")}
    job_queues = set(queues) - dead_letter
    assert len(dead_letter) == 4 and len(job_queues) == 4
    not_empty = alarms_on("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    assert {ref for a in not_empty for ref in dimension_refs(a)} == dead_letter
    oldest = alarms_on("AWS/SQS", "ApproximateAgeOfOldestMessage")
    assert {ref for a in oldest for ref in dimension_refs(a)} == job_queues
    assert all(a["Threshold"] == {"Ref": "QueueAgeAlarmSeconds"} for a in oldest)


def test_the_provider_error_rate_reads_the_metric_the_functions_write() -> None:
    alarm = template()["Resources"]["NimbusProviderErrorRateAlarm"]["Properties"]
    stats = [m["MetricStat"]["Metric"] for m in alarm["Metrics"] if "MetricStat" in m]
    assert {(m["Namespace"], m["MetricName"]) for m in stats} == {("Nimbus", "provider_calls")}
    assert {m["Dimensions"][0]["Value"] for m in stats} == {"ok", "error", "retryable_error"}
    assert all(m["Dimensions"][0]["Name"] == "outcome" and len(m["Dimensions"]) == 1 for m in stats)
    assert alarm["Threshold"] == {"Ref": "ProviderErrorRateThreshold"}
    # What the functions write: provider_calls also aggregated by outcome alone.
    from_emf = kit_emf_dimension_sets()
    assert ["outcome"] in from_emf and ["status_class"] in from_emf


def kit_emf_dimension_sets() -> list[list[str]]:
    """The single-dimension sets the EMF adapter adds (read from its source)."""
    source = (kit.REPO_ROOT / "shared" / "src" / "adapters" / "aws" / "emf_metrics.rs").read_text()
    match = re.search(r"const AGGREGATED: \[&str; \d+\] = \[([^\]]*)\];", source)
    assert match, "AGGREGATED not found"
    return [[name.strip().strip('"')] for name in match.group(1).split(",")]


def test_every_alarm_tells_the_topic_when_one_is_given() -> None:
    parsed = template()
    assert parsed["Parameters"]["AlarmTopicArn"]["Default"] == ""
    assert parsed["Conditions"]["HasAlarmTopic"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmTopicArn"}, ""]}]}
    alarms = resources_of("AWS::CloudWatch::Alarm")
    assert len(alarms) == 2 * len(FUNCTIONS) + 4 + 4 + 1
    expected = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}
    for name, alarm in alarms.items():
        assert alarm["Properties"]["AlarmActions"] == expected, name
        assert alarm["Properties"]["OKActions"] == expected, name
        assert alarm["Properties"]["TreatMissingData"] == "notBreaching", name


def test_the_dashboard_shows_the_main_figures() -> None:
    dashboard = template()["Resources"]["NimbusDashboard"]["Properties"]
    body = dashboard["DashboardBody"]["Fn::Sub"]
    # Substitute every ${…} with a placeholder: what is left must be the dashboard's JSON.
    parsed = json.loads(re.sub(r"\$\{[^}]+\}", "x", body))
    titles = [w["properties"]["title"] for w in parsed["widgets"]]
    assert titles == [
        "Invocations by function",
        "Errors and throttles",
        "HTTP requests by status class",
        "Provider calls by outcome",
        "Oldest job message (s)",
        "Dead-letter queue depth",
    ]
    metrics = {tuple(m[:2]) for w in parsed["widgets"] for m in w["properties"]["metrics"]}
    assert ("Nimbus", "http_requests") in metrics and ("Nimbus", "provider_calls") in metrics
    for function in FUNCTIONS:
        assert f"${{{function}}}" in body, function


def test_every_function_is_traced_by_x_ray() -> None:
    parsed = template()
    assert parsed["Globals"]["Function"]["Tracing"] == "Active"
    for function in FUNCTIONS:
        assert parsed["Resources"][function]["Properties"].get("Tracing", "Active") == "Active", function
