"""template.yaml's limits at scale (issue #27 item 10), each a parameter whose number the code and
the README agree on:

- `HttpApiAnswerDeadlineSeconds` (28): the functions answer a non-streamed request through the
  HTTP API with their own 504 before API Gateway's 30 s integration cut;
- `RecordRetentionDays` (90, 0 = forever): inference and feedback records carry it as the state
  table's one TTL attribute (`expires_at`), and the bucket's lifecycle rules expire their blobs under
  `inferences/` (the `/batch_inference` pages too) and `feedback/` after the same number of days;
- `DueIndexShards` (4): each due-work lane is spread over that many partitions of `by_owner`;
- the `by_owner` index projects only what its queries read (every attribute but the body), unless
  `OwnerIndexProjection` keeps an existing stack's `ALL`.
"""

from __future__ import annotations

import re
from typing import Any

import nimbus_testkit as kit

ROOT = kit.TEMPLATE.parent
SHARED_SRC = ROOT / "shared" / "src"


def template() -> dict[str, Any]:
    from samcli.yamlhelper import yaml_parse  # noqa: PLC0415

    return yaml_parse(kit.TEMPLATE.read_text())


def parameter(name: str) -> dict[str, Any]:
    return template()["Parameters"][name]


def global_env() -> dict[str, Any]:
    return template()["Globals"]["Function"]["Environment"]["Variables"]


def rust_const(path: str, name: str) -> str:
    """The value text of `const NAME… = value;` in a Rust file of shared/src."""
    text = (SHARED_SRC / path).read_text()
    found = re.search(rf"const {name}: [^=]+= ([^;]+);", text)
    assert found, f"{name} not found in {path}"
    return found.group(1).strip()


def table() -> dict[str, Any]:
    return template()["Resources"]["NimbusStateTable"]["Properties"]


def lifecycle_rules() -> list[Any]:
    return template()["Resources"]["NimbusBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]


def conditional_rule(prefix: str) -> dict[str, Any]:
    """The lifecycle rule on `prefix`, present unless records are kept forever."""
    for rule in lifecycle_rules():
        if isinstance(rule, dict) and "Fn::If" in rule:
            condition, when_true, when_false = rule["Fn::If"]
            if isinstance(when_false, dict) and when_false.get("Prefix") == prefix:
                assert condition == "KeepRecordsForever"
                assert when_true == {"Ref": "AWS::NoValue"}
                return when_false
    raise AssertionError(f"no conditional lifecycle rule on {prefix}")


def test_the_http_api_answer_deadline_is_a_parameter_below_the_30_second_cut() -> None:
    deadline = parameter("HttpApiAnswerDeadlineSeconds")
    assert deadline["Type"] == "Number"
    assert deadline["Default"] == 28
    assert deadline["MaxValue"] < 30
    assert global_env()["NIMBUS_HTTP_API_ANSWER_DEADLINE_SECS"] == {"Ref": "HttpApiAnswerDeadlineSeconds"}
    code_default = rust_const("app/http_api_deadline.rs", "DEFAULT_HTTP_API_ANSWER_DEADLINE")
    assert code_default == "Duration::from_secs(28)"
    # Every HTTP API route keeps API Gateway's own 30 s limit above the function's deadline.
    for function in ("NimbusInferenceFunction", "NimbusFilesFunction", "NimbusBatchesFunction"):
        events = template()["Resources"][function]["Properties"]["Events"]
        for event in events.values():
            if event["Type"] == "HttpApi":
                assert event["Properties"]["TimeoutInMillis"] > deadline["Default"] * 1000


def test_inference_and_feedback_records_expire_by_the_tables_one_ttl_attribute() -> None:
    retention = parameter("RecordRetentionDays")
    assert (retention["Type"], retention["Default"], retention["MinValue"]) == ("Number", 90, 0)
    assert global_env()["NIMBUS_RECORD_RETENTION_DAYS"] == {"Ref": "RecordRetentionDays"}
    assert rust_const("adapters/records/retention.rs", "DEFAULT_RECORD_RETENTION_DAYS") == "90"
    assert retention["MaxValue"] == int(rust_const("adapters/records/retention.rs", "MAX_RECORD_RETENTION_DAYS"))
    # DynamoDB has one TTL attribute per table: the one the state store writes `expires_at` to.
    assert table()["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert '"expires_at".into(), AttributeValue::N' in (SHARED_SRC / "adapters/aws/dynamodb_state.rs").read_text()
    assert template()["Conditions"]["KeepRecordsForever"] == {"Fn::Equals": [{"Ref": "RecordRetentionDays"}, 0]}


def test_record_blobs_and_batch_pages_expire_after_the_same_days() -> None:
    for prefix in ("inferences/", "feedback/"):
        rule = conditional_rule(prefix)
        assert rule["Status"] == "Enabled"
        assert rule["ExpirationInDays"] == {"Ref": "RecordRetentionDays"}
    # The /batch_inference pages live under inferences/ (so the same rule expires them).
    pages = (SHARED_SRC / "adapters/records/batch_pages.rs").read_text()
    assert 'format!("inferences/{project}/batches/' in pages
    payloads = (SHARED_SRC / "adapters/records/inferences.rs").read_text()
    assert 'format!("inferences/{project}/' in payloads
    feedback = (SHARED_SRC / "adapters/records/feedback.rs").read_text()
    assert 'format!("feedback/{project}/' in feedback
    # No other rule touches those prefixes.
    plain = [rule for rule in lifecycle_rules() if isinstance(rule, dict) and "Prefix" in rule]
    assert not [rule for rule in plain if rule["Prefix"] in ("inferences/", "feedback/")]


def test_the_owner_index_projects_every_attribute_but_the_body() -> None:
    (index,) = table()["GlobalSecondaryIndexes"]
    assert index["IndexName"] == "by_owner"
    condition, when_all, when_include = index["Projection"]["Fn::If"]
    assert condition == "OwnerIndexProjectsAll"
    assert when_all == {"ProjectionType": "ALL"}
    assert when_include["ProjectionType"] == "INCLUDE"
    code = (SHARED_SRC / "adapters/aws/dynamodb_state.rs").read_text()
    listed = re.search(r"OWNER_INDEX_ATTRIBUTES: \[&str; \d+\] = \[([^\]]+)\]", code)
    assert listed
    in_code = [name.strip().strip('"') for name in listed.group(1).split(",")]
    assert sorted(when_include["NonKeyAttributes"]) == sorted(in_code)
    assert "body" not in when_include["NonKeyAttributes"]
    projection = parameter("OwnerIndexProjection")
    assert projection["Default"] == "INCLUDE"
    assert sorted(projection["AllowedValues"]) == ["ALL", "INCLUDE"]
    assert template()["Conditions"]["OwnerIndexProjectsAll"] == {
        "Fn::Equals": [{"Ref": "OwnerIndexProjection"}, "ALL"]
    }


def test_the_due_index_shard_count_is_a_parameter_the_code_agrees_with() -> None:
    shards = parameter("DueIndexShards")
    assert (shards["Type"], shards["Default"], shards["MinValue"]) == ("Number", 4, 1)
    assert global_env()["NIMBUS_DUE_INDEX_SHARDS"] == {"Ref": "DueIndexShards"}
    assert rust_const("scheduler/due_index.rs", "DEFAULT_DUE_INDEX_SHARDS") == "4"
    assert shards["MaxValue"] == int(rust_const("scheduler/due_index.rs", "MAX_DUE_INDEX_SHARDS"))


def test_the_readme_lists_each_limit_with_its_number_and_parameter() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Limits", 1)[1].split("\n## ", 1)[0]
    for name, number in (
        ("HttpApiAnswerDeadlineSeconds", "28"),
        ("RecordRetentionDays", "90"),
        ("DueIndexShards", "4"),
        ("OwnerIndexProjection", "INCLUDE"),
    ):
        bullet = next((item for item in section.split("\n- ") if name in item), None)
        assert bullet, f"README's Limits do not name {name}"
        assert number in bullet, f"README's {name} item lacks {number}"
