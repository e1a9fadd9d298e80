"""Parts `aws` and `aws-slow`: moto behind the counting proxy, `nimbus-files`, `nimbus-batches`,
`nimbus-worker` and `nimbus-poller` under the Runtime Interface Emulator, this module playing the
SQS event source and the EventBridge schedule; one batch from direct upload to `completed`."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import (
    LINES,
    MEMORY_MB,
    MODEL,
    RESOURCES,
    TIMEOUT_S,
    SkipPart,
    count_lines,
    log,
    write_bench_config,
    write_input,
)
from .counting_proxy import CountingProxy

PROJECT = "bench"


class TimedLambda:
    """A function under the RIE whose invocations are timed (for GB-s)."""

    def __init__(self, function: Any, name: str):
        self.function = function
        self.name = name
        self.durations: list[float] = []
        self.lock = threading.Lock()

    def invoke(self, event: dict[str, Any], *, timeout: float = 120) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            return self.function.invoke(event, timeout=timeout)
        finally:
            with self.lock:
                self.durations.append(time.perf_counter() - start)

    def stop(self) -> None:
        self.function.stop()


def sqs_event(message: dict[str, Any], arn: str) -> dict[str, Any]:
    """The event Lambda's SQS event source sends for one message (BatchSize 1): the same builder
    the Lambda tests use, so the benchmark and the tests feed the worker alike."""
    from batch_lambda_kit import sqs_event as build  # noqa: PLC0415 - needs the venv (boto3, requests)

    return build(message, arn)


class EventSource:
    """Plays Lambda's SQS event source (BatchSize 1, ReportBatchItemFailures) with `len(workers)`
    concurrent worker instances. It talks to moto directly, not through the proxy: the event
    source's polling is not the function's doing. Its deletes are counted here."""

    def __init__(self, moto: Any, workers: list[TimedLambda]):
        self.moto = moto
        self.workers = workers
        self.arn = moto.client("sqs").get_queue_attributes(QueueUrl=moto.queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.invocations = Counter()  # job kind -> invocations
        self.job_seconds: dict[str, list[float]] = defaultdict(list)
        self.failures = 0
        self.receives_with_message = 0
        self.empty_receives = 0
        self.deletes = 0
        self.in_flight = 0
        self.errors: list[str] = []
        self.threads = [
            threading.Thread(target=self._loop, args=(w,), name=f"event-source-{i}", daemon=True)
            for i, w in enumerate(workers)
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def total_invocations(self) -> int:
        with self.lock:
            return sum(self.invocations.values())

    def busy(self) -> bool:
        with self.lock:
            return self.in_flight > 0

    def _loop(self, worker: TimedLambda) -> None:
        sqs = self.moto.client("sqs")
        while not self.stop_flag.is_set():
            try:
                messages = sqs.receive_message(
                    QueueUrl=self.moto.queue_url, MaxNumberOfMessages=1, WaitTimeSeconds=1, AttributeNames=["All"]
                ).get("Messages", [])
                if not messages:
                    with self.lock:
                        self.empty_receives += 1
                    continue
                message = messages[0]
                with self.lock:
                    self.receives_with_message += 1
                    self.in_flight += 1
                try:
                    started = time.perf_counter()
                    result = worker.invoke(sqs_event(message, self.arn), timeout=TIMEOUT_S["worker"] + 30)
                    failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
                    job = json.loads(message["Body"]).get("job", "?")
                    with self.lock:
                        self.job_seconds[job].append(time.perf_counter() - started)
                    if message["MessageId"] in failed:
                        with self.lock:
                            self.failures += 1
                    else:
                        sqs.delete_message(QueueUrl=self.moto.queue_url, ReceiptHandle=message["ReceiptHandle"])
                        with self.lock:
                            self.deletes += 1
                    with self.lock:
                        self.invocations[job] += 1
                finally:
                    with self.lock:
                        self.in_flight -= 1
            except Exception as err:  # noqa: BLE001 - reported at the end
                with self.lock:
                    self.errors.append(repr(err))
                time.sleep(0.5)

    def queue_empty(self) -> bool:
        attributes = self.moto.client("sqs").get_queue_attributes(
            QueueUrl=self.moto.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return all(int(v) == 0 for v in attributes.values())

    def stop(self) -> None:
        self.stop_flag.set()
        for thread in self.threads:
            thread.join(timeout=15)


class AwsStack:
    """moto (table, bucket, queue as template.yaml) behind the counting proxy, a key of project
    `bench`, the benchmark config with its files in S3, and `nimbus-files`, `nimbus-batches` (twice:
    `batches` takes the submissions, `status` the client's polls), `nimbus-poller` and
    `worker_instances` × `nimbus-worker` under the RIE, each signing with its own fake key; the
    HTTP functions behind API Gateway relays. Cold starts happen in `__init__` (phase `init`).
    `serialize_moto`: the proxy hands moto one request at a time (see `CountingProxy`)."""

    def __init__(
        self,
        bin_dir: Path,
        scratch: Path,
        worker_instances: int,
        *,
        serialize_moto: bool = False,
        edit_config: Callable[[str], str] | None = None,
        extra_env: dict[str, str] | None = None,
    ):
        import nimbus_testkit as kit

        os.environ["NIMBUS_BIN_DIR"] = str(bin_dir)
        missing = [b for _, b in RESOURCES.values() if not (bin_dir / b).is_file()]
        if missing:
            raise SkipPart(f"Lambda binaries missing in {bin_dir}: {', '.join(sorted(set(missing)))}")
        self.kit = kit
        self.worker_instances = worker_instances
        self.serialize_moto = serialize_moto
        self.edit_config = edit_config
        self.extra_env = extra_env or {}
        logs = scratch / "logs"
        self.started: list[Any] = []
        self.proxy: CountingProxy | None = None
        try:
            self._start(kit, scratch, logs)
        except BaseException:
            self.close()
            raise

    def _start(self, kit: Any, scratch: Path, logs: Path) -> None:
        moto = self.moto = kit.MotoServer(logs)
        self.started.append(moto)
        moto.create_resources()
        # The queue as template.yaml declares it (moto's default visibility timeout is 30 s, shorter
        # than a chunk with a slow model: SQS would hand the same chunk to a second worker).
        from samcli.yamlhelper import yaml_parse

        queue = yaml_parse(kit.TEMPLATE.read_text())["Resources"]["NimbusJobsQueue"]["Properties"]
        moto.client("sqs").set_queue_attributes(
            QueueUrl=moto.queue_url, Attributes={"VisibilityTimeout": str(queue["VisibilityTimeout"])}
        )
        self.key = kit.NimbusCli(kit.clean_env(moto.aws_env()), backend="aws").create_key(PROJECT, name="batch-bench")
        # The config as a deployment puts it: the TOML with its templates and schemas beside it.
        config = write_bench_config(scratch / "aws-config")
        if self.edit_config is not None:
            config.write_text(self.edit_config(config.read_text()))
        self.config_source = moto.put_config(config.stem, config.read_text(), config_dir=config.parent)

        access_keys = {f"AKIABENCH{name.upper()}": name for name in RESOURCES}
        proxy = self.proxy = CountingProxy(moto.port, access_keys, serialize=self.serialize_moto)
        by_name = {v: k for k, v in access_keys.items()}

        def start_function(name: str, instance: str = "") -> TimedLambda:
            resource, binary = RESOURCES[name]
            env = kit.clean_env(
                {
                    **kit.template_environment(resource),
                    **moto.aws_env(),
                    "AWS_ENDPOINT_URL": proxy.endpoint,
                    "AWS_ACCESS_KEY_ID": by_name[name],
                    "NIMBUS_CONFIG_SOURCE": self.config_source,
                    "AWS_LAMBDA_FUNCTION_NAME": resource,
                    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(MEMORY_MB["batches" if name == "status" else name]),
                    "AWS_LAMBDA_FUNCTION_TIMEOUT": str(TIMEOUT_S["batches" if name == "status" else name]),
                    "RUST_LOG": "warn",
                    **self.extra_env,
                }
            )
            function = kit.LambdaUnderRie(kit.binary(binary), env, logs, name=f"rie-bench-{name}{instance}")
            self.started.append(function)
            return TimedLambda(function, name)

        self.files = start_function("files")
        self.batches = start_function("batches")
        self.status = start_function("status")
        self.poller = start_function("poller")
        self.workers = [start_function("worker", f"-{i}") for i in range(self.worker_instances)]
        http_functions = (("files", self.files), ("batches", self.batches), ("status", self.status))
        self.relays = {name: kit.ApiGatewayRelay(fn) for name, fn in http_functions}
        self.started.extend(self.relays.values())
        self.clients = {
            name: kit.make_client(relay.api_base, self.key["api_key"], timeout=300)
            for name, relay in self.relays.items()
        }

        # Cold starts (each function reads its config from S3 once): one harmless call each, so
        # that init requests are not mixed with the batch's.
        proxy.phase = "init"
        self.clients["files"].files.list(limit=1)
        self.clients["batches"].batches.list(limit=1)
        self.clients["status"].batches.list(limit=1)
        self.poll_schedule()
        for worker in self.workers:
            worker.invoke(
                kit.replace_strings(
                    kit.load_event("worker-sqs-chunk.json"), "batch_REPLACE_WITH_BATCH_ID", "batch_none"
                ),
                timeout=330,
            )
        idle_start = len(proxy.entries)
        proxy.phase = "idle-poll"
        self.poll_schedule()
        self.idle_poll_entries = len(proxy.entries) - idle_start
        for fn in self.functions():
            fn.durations.clear()

    def functions(self) -> list[TimedLambda]:
        return [self.files, self.batches, self.status, self.poller, *self.workers]

    def poll_schedule(self) -> None:
        """One EventBridge-scheduled poller pass."""
        self.poller.invoke(self.kit.load_event("poller-scheduled.json"), timeout=330)

    def run_batch(self, poll: Callable[[], str], timeout: float, t0: float) -> dict[str, Any]:
        """Deliver jobs to the workers and play the schedule until `poll()` (the client's status
        poll, returning the batch's status) answers a terminal status; then let the last worker
        and poller pass finish. Requests meanwhile are in phase `batch`; times are from `t0` (a
        `perf_counter` just before the batch was created)."""
        kit = self.kit
        source = EventSource(self.moto, self.workers)
        source.start()
        assert self.proxy is not None
        self.proxy.phase = "batch"
        seen: dict[str, float] = {}
        poller_runs = 0
        last_poll_at = 0
        last_poll_time = time.monotonic()
        status_polls = 0
        order = ["validating", "in_progress", "finalizing", "completed"]
        try:
            while True:
                time.sleep(1.0)
                done_jobs = source.total_invocations()
                # The schedule: once a minute, or (to keep the run short) after every 10 worker runs.
                if done_jobs - last_poll_at >= 10 or time.monotonic() - last_poll_time >= 60:
                    last_poll_at = done_jobs
                    last_poll_time = time.monotonic()
                    self.poll_schedule()
                    poller_runs += 1
                status = poll()
                status_polls += 1
                now = time.perf_counter() - t0
                if status in order:
                    for s in order[: order.index(status) + 1]:
                        seen.setdefault(s, now)
                if status in kit.BATCH_TERMINAL_STATUSES:
                    seen.setdefault(status, now)
                    break
                if not source.busy() and source.queue_empty():
                    self.poll_schedule()
                    poller_runs += 1
                if now > timeout:
                    raise SystemExit(f"AWS-path batch not done in {timeout:.0f}s: {status}; {source.errors}")
            # The worker that finalized may still be cleaning up: wait for it, then one last poller pass.
            deadline = time.monotonic() + 60
            while (source.busy() or not source.queue_empty()) and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            source.stop()
        self.poll_schedule()
        poller_runs += 1
        return {
            "status": status,
            "batch_wall_s": time.perf_counter() - t0,
            "first_seen_s": seen,
            "status_polls": status_polls,
            "poller_runs": poller_runs,
            "worker_invocations": dict(source.invocations),
            "worker_seconds_by_job": dict(source.job_seconds),
            "worker_failures_reported": source.failures,
            "event_source": {
                "receives_with_message": source.receives_with_message,
                "empty_receives": source.empty_receives,
                "deletes": source.deletes,
            },
            "event_source_errors": source.errors[:5],
        }

    def durations(self) -> dict[str, list[float]]:
        return {
            name: [d for fn in fns for d in fn.durations]
            for name, fns in (
                ("files", [self.files]),
                ("batches", [self.batches]),
                ("status", [self.status]),
                ("poller", [self.poller]),
                ("worker", self.workers),
            )
        }

    def inference_records(self) -> int:
        """Inferences stored (read from moto directly, not counted): single records in the table,
        and the records in `/batch_inference` batches' pages in the bucket."""
        pages = self.moto.client("dynamodb").get_paginator("scan").paginate(
            TableName=self.moto.table,
            Select="COUNT",
            FilterExpression="begins_with(pk, :kind)",
            ExpressionAttributeValues={":kind": {"S": "inference#"}},
        )
        singles = sum(page["Count"] for page in pages)
        s3 = self.moto.client("s3")
        paged = 0
        for listing in s3.get_paginator("list_objects_v2").paginate(Bucket=self.moto.bucket, Prefix="inferences/"):
            for obj in listing.get("Contents", []):
                if "/batches/" in obj["Key"] and obj["Key"].endswith(".jsonl"):
                    body = s3.get_object(Bucket=self.moto.bucket, Key=obj["Key"])["Body"].read()
                    paged += sum(1 for line in body.splitlines() if line.strip())
        return singles + paged

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
        for process in reversed(self.started):
            with contextlib.suppress(Exception):
                process.stop()


def part_aws(
    bin_dir: Path,
    scratch: Path,
    timeout: float,
    worker_instances: int,
    *,
    lines: int = LINES,
    model: str = MODEL,
    system: str | None = None,
    serialize_moto: bool = False,
    edit_config: Callable[[str], str] | None = None,
    extra_env: dict[str, str] | None = None,
    watch: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """One `/v1/batches` batch of `lines` chat requests (after a `system` message when given) from
    a direct upload to `completed` and its output downloaded. `edit_config` rewrites the
    benchmark config, `extra_env` given to every function, `watch()` called with each status poll."""
    import requests

    stack = AwsStack(
        bin_dir, scratch, worker_instances, serialize_moto=serialize_moto, edit_config=edit_config, extra_env=extra_env
    )
    try:
        proxy, clients, key = stack.proxy, stack.clients, stack.key
        assert proxy is not None
        # Upload: a direct upload (POST /v1/direct_uploads, then PUT to the presigned URL).
        data = scratch / "input-aws.jsonl"
        size = write_input(data, lines=lines, size=None, model=model, system=system)
        proxy.phase = "upload"
        t_upload = time.perf_counter()
        answer = requests.post(
            f"{stack.relays['files'].api_base}/direct_uploads",
            headers={"authorization": f"Bearer {key['api_key']}"},
            json={"filename": "bench.jsonl", "purpose": "batch", "bytes": size},
            timeout=60,
        )
        answer.raise_for_status()
        target = answer.json()
        if not target["upload_url"].startswith(proxy.endpoint):
            raise SystemExit(f"the presigned URL does not go through the proxy: {target['upload_url']}")
        with data.open("rb") as f:
            put = requests.put(target["upload_url"], data=f, headers={"content-length": str(size)}, timeout=120)
        put.raise_for_status()
        file = clients["files"].files.retrieve(target["file"]["id"])
        upload_s = time.perf_counter() - t_upload
        if file.status != "processed":
            raise SystemExit(f"direct upload not processed: {file}")
        data.unlink()

        # The batch: create, then deliver jobs until completed.
        proxy.phase = "batch"
        t_create = time.perf_counter()
        batch = clients["batches"].batches.create(
            input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        create_s = time.perf_counter() - t_create
        last: dict[str, Any] = {}

        def poll() -> str:
            if watch is not None:
                watch()
            last["batch"] = clients["status"].batches.retrieve(batch.id)
            return last["batch"].status

        run = stack.run_batch(poll, timeout, t_create)
        current = last["batch"]
        proxy.phase = "download"
        if current.status != "completed" or current.request_counts.completed != lines:
            raise SystemExit(f"AWS-path batch ended wrong: {current.model_dump()}")
        t_download = time.perf_counter()
        with clients["files"].files.with_streaming_response.content(current.output_file_id) as response:
            output_lines = count_lines(response.iter_bytes(1024 * 1024))
        download_s = time.perf_counter() - t_download
        if output_lines != lines:
            raise SystemExit(f"AWS-path output has {output_lines} lines, not {lines}")
        proxy.phase = "done"

        result = {
            "lines": lines,
            "model": model,
            "input_bytes": size,
            "worker_instances": worker_instances,
            "upload_s": upload_s,
            "create_s": create_s,
            "batch_id": batch.id,
            "created_perf_s": t_create,
            "download_s": download_s,
            **run,
            "output_lines": output_lines,
            "request_counts": current.request_counts.model_dump(),
            "durations_s": stack.durations(),
            "entries": proxy.entries,
            "idle_poll_entries": stack.idle_poll_entries,
            "inference_records": stack.inference_records(),
            "config_source": stack.config_source,
            "serialized_moto": serialize_moto,
        }
        counted = sum(1 for e in proxy.entries if e["phase"] == "batch" and e["function"] != "status")
        log(
            f"aws ({lines} lines, {model}): completed in {result['batch_wall_s']:.1f}s with {worker_instances} "
            f"worker instances; {counted + run['event_source']['deletes']} requests"
        )
        return result
    finally:
        stack.close()
