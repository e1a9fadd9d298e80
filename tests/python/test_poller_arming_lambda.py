"""The poller's every-minute rule is on only while there is due work (issue #28 item 4), through
the Lambda functions as deployed (`NIMBUS_POLLER_RULE`, under the RIE, on moto's EventBridge and
DynamoDB): an idle pass turns the rule off, a batch created through `nimbus-batches` turns it on,
the poller keeps it on while the batch runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import nimbus_testkit as kit
from batch_lambda_kit import Api, chat_line, invoke_poller, jsonl

RULE = "nimbus-poller-rie-test"


@pytest.fixture(scope="module")
def stack(logs_dir: Path, batch_lambda_factory: Callable[..., kit.LambdaUnderRie]) -> Iterator[dict[str, Any]]:
    moto = kit.MotoServer(logs_dir)
    try:
        moto.create_resources()
        events = moto.client("events")
        events.put_rule(Name=RULE, ScheduleExpression="rate(1 minute)", State="ENABLED")
        options = {"moto": moto, "extra_env": {"NIMBUS_POLLER_RULE": RULE}}
        files = batch_lambda_factory(
            "NimbusFilesFunction", "nimbus-files", memory="256", timeout="30", name="rie-arming-files", **options
        )
        batches = batch_lambda_factory(
            "NimbusBatchesFunction", "nimbus-batches", memory="256", timeout="30", name="rie-arming-batches", **options
        )
        poller = batch_lambda_factory(
            "NimbusPollerFunction", "nimbus-poller", memory="256", timeout="300", name="rie-arming-poller", **options
        )
        cli = kit.NimbusCli(kit.clean_env(moto.aws_env()), backend="aws")
        api_key = cli.create_key("arming", name="arming-tests")["api_key"]
        yield {"moto": moto, "events": events, "files": files, "batches": batches, "poller": poller, "key": api_key}
    finally:
        moto.stop()


def rule_state(stack: dict[str, Any]) -> str:
    return stack["events"].describe_rule(Name=RULE)["State"]


def test_idle_passes_turn_the_rule_off_and_a_new_batch_turns_it_on(stack: dict[str, Any]) -> None:
    report = invoke_poller(stack["poller"])
    assert report.get("schedule") == "off", report
    assert rule_state(stack) == "DISABLED"

    api = Api(stack["files"], stack["batches"], stack["key"])
    file = api.upload(jsonl([chat_line("a")]))
    api.create_ok(file["id"])
    assert rule_state(stack) == "ENABLED", "creating a batch armed the poller"
    report = invoke_poller(stack["poller"])
    assert report.get("schedule") == "on", report
    assert rule_state(stack) == "ENABLED"
