"""Fixtures for the SDK-compatibility and Lambda tests.

- `nimbus_server`: `nimbus serve` (open: loopback, no keys) on a free port with a fresh data dir.
- `keyed_server`: a second server whose data dir already holds an API key (auth required).
- `server_factory`: more servers with fresh data dirs, e.g. to create keys while one runs.
- `moto`: `moto_server` (or `NIMBUS_MOTO_SERVER`) with the Nimbus table/bucket/queue; `aws_api_key`: a key created with
  `nimbus keys create --backend aws`; `inference_lambda`: `nimbus-inference` under the RIE, with
  the environment template.yaml gives the function plus the moto resources; `files_lambda`: the
  same for `nimbus-files`; `batches_lambda`, `worker_lambda`, `poller_lambda`: the same for
  `nimbus-batches`, `nimbus-worker` and `nimbus-poller` (`batch_lambda_factory` starts more);
  `api`, `source` (module scope): the batch path's HTTP side with the `aws_api_key` key and the
  stand-in SQS event source and EventBridge schedule (`Api`, `EventSource` of batch_lambda_kit.py).
- `tz_upstream`, `tz_server`, `tz`: a recording OpenAI-compatible upstream (mock_upstream.py), a server
  whose config is the default one plus tensorzero_config/test_functions.toml (functions on that
  upstream, failing and slow variants), and the real `tensorzero` client in HTTP mode on it.

Binaries come from `NIMBUS_BIN_DIR` (default `$CARGO_TARGET_DIR/debug`, else `target/debug`).
Every process a fixture starts is stopped by that fixture, even when a test fails.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import nimbus_testkit as kit
import tensorzero_kit as tzk
from batch_lambda_kit import Api, EventSource
from mock_upstream import RecordingUpstream


def pytest_configure(config: pytest.Config) -> None:
    # A SIGTERM (e.g. a CI timeout) should unwind like Ctrl-C so fixtures stop their processes.
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):

        def _interrupt(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt(f"signal {signum}")

        signal.signal(signal.SIGTERM, _interrupt)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        processes = kit.live_processes()
        if processes:
            report.sections.append(("helper process logs (tail)", kit.describe_logs(processes)))


def _started(factory: Callable[[], Any]) -> Any:
    """Run a harness constructor, turning a harness failure into a test error with its message."""
    try:
        return factory()
    except kit.HarnessError as err:
        pytest.fail(str(err), pytrace=False)


@pytest.fixture(scope="session")
def logs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("process-logs")


# --------------------------------------------------------------------------------------------
# Local server
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def nimbus_server(tmp_path_factory: pytest.TempPathFactory, logs_dir: Path) -> Iterator[kit.NimbusServer]:
    """An open server: bound to loopback, no API keys."""
    server = _started(lambda: kit.NimbusServer(tmp_path_factory.mktemp("data-open"), logs_dir, name="nimbus-open"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def server_factory(tmp_path_factory: pytest.TempPathFactory, logs_dir: Path) -> Iterator[Callable[..., kit.NimbusServer]]:
    """`start(name, before_start=None, data_dir=None, **server_options)`: another server. It gets a
    fresh data dir unless `data_dir` is given; `before_start(cli)` runs `nimbus keys …` against
    that data dir before the server starts; `server_options` go to `NimbusServer` (e.g. `bind`)."""
    servers: list[kit.NimbusServer] = []

    def start(
        name: str = "nimbus-extra",
        before_start: Callable[[kit.NimbusCli], None] | None = None,
        data_dir: Path | None = None,
        **server_options: Any,
    ) -> kit.NimbusServer:
        data_dir = data_dir or tmp_path_factory.mktemp(f"data-{name}")
        if before_start is not None:
            _started(lambda: before_start(kit.NimbusCli(kit.clean_env({"NIMBUS_DATA_DIR": str(data_dir)}))))
        server = _started(lambda: kit.NimbusServer(data_dir, logs_dir, name=name, **server_options))
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


@pytest.fixture(scope="session")
def keyed_server(server_factory: Callable[..., kit.NimbusServer]) -> tuple[kit.NimbusServer, dict[str, Any]]:
    """A server whose data dir held a key before it started, so every /v1 request needs a key."""
    created: dict[str, Any] = {}

    def create(cli: kit.NimbusCli) -> None:
        created.update(cli.create_key("sdk-tests", name="primary"))

    server = server_factory("nimbus-keyed", before_start=create)
    return server, created


@pytest.fixture(scope="session")
def client(nimbus_server: kit.NimbusServer) -> Iterator[openai.OpenAI]:
    """The real OpenAI SDK pointed at the open server (no retries: failures show at once)."""
    sdk = kit.make_client(nimbus_server.api_base)
    try:
        yield sdk
    finally:
        sdk.close()


# --------------------------------------------------------------------------------------------
# AWS emulation and the Lambda function
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def moto(logs_dir: Path) -> Iterator[kit.MotoServer]:
    server = _started(lambda: kit.MotoServer(logs_dir))
    try:
        server.create_resources()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def aws_cli(moto: kit.MotoServer) -> kit.NimbusCli:
    """`nimbus keys … --backend aws` against the moto table."""
    return kit.NimbusCli(kit.clean_env(moto.aws_env()), backend="aws")


@pytest.fixture(scope="session")
def aws_api_key(aws_cli: kit.NimbusCli) -> dict[str, Any]:
    return _started(lambda: aws_cli.create_key("demo", name="lambda-rie-tests"))


@pytest.fixture(scope="session")
def inference_lambda(moto: kit.MotoServer, logs_dir: Path) -> Iterator[kit.LambdaUnderRie]:
    # What template.yaml sets (literals and parameter defaults), then the moto resources.
    template_env = _started(lambda: kit.template_environment("NimbusInferenceFunction"))
    env = kit.clean_env(
        {
            **template_env,
            **moto.aws_env(),
            "NIMBUS_CONFIG_SOURCE": "bundled",
            "AWS_LAMBDA_FUNCTION_NAME": "NimbusInferenceFunction",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
            "AWS_LAMBDA_FUNCTION_TIMEOUT": "60",
        }
    )
    function = _started(lambda: kit.LambdaUnderRie(kit.binary("nimbus-inference"), env, logs_dir, name="rie-inference"))
    try:
        yield function
    finally:
        function.stop()


@pytest.fixture(scope="session")
def files_lambda(moto: kit.MotoServer, logs_dir: Path) -> Iterator[kit.LambdaUnderRie]:
    """`nimbus-files` under the RIE against the moto table and bucket. Its environment is what
    template.yaml gives NimbusFilesFunction (or only the Globals while the template lacks it)."""
    template_env = _started(lambda: kit.template_environment("NimbusFilesFunction", globals_if_missing=True))
    env = kit.clean_env(
        {
            **template_env,
            **moto.aws_env(),
            "NIMBUS_CONFIG_SOURCE": "bundled",
            "AWS_LAMBDA_FUNCTION_NAME": "NimbusFilesFunction",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
            "AWS_LAMBDA_FUNCTION_TIMEOUT": "60",
        }
    )
    function = _started(lambda: kit.LambdaUnderRie(kit.binary("nimbus-files"), env, logs_dir, name="rie-files"))
    try:
        yield function
    finally:
        function.stop()


def _batch_function(
    moto: kit.MotoServer,
    logs_dir: Path,
    resource: str,
    binary: str,
    *,
    memory: str,
    timeout: str,
    name: str,
    extra_env: dict[str, str] | None = None,
) -> kit.LambdaUnderRie:
    """`binary` under the RIE with the environment template.yaml gives `resource` (literals and
    parameter defaults), the moto resources, the bundled config and the Lambda sizing variables."""
    template_env = _started(lambda: kit.template_environment(resource))
    env = kit.clean_env(
        {
            **template_env,
            **moto.aws_env(),
            "NIMBUS_CONFIG_SOURCE": "bundled",
            "AWS_LAMBDA_FUNCTION_NAME": resource,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": memory,
            # The RIE gives each invocation this many seconds (the context's deadline).
            "AWS_LAMBDA_FUNCTION_TIMEOUT": timeout,
            **(extra_env or {}),
        }
    )
    return _started(lambda: kit.LambdaUnderRie(kit.binary(binary), env, logs_dir, name=name))


@pytest.fixture(scope="session")
def batch_lambda_factory(moto: kit.MotoServer, logs_dir: Path) -> Iterator[Callable[..., kit.LambdaUnderRie]]:
    session_moto = moto
    """`start(resource, binary, *, memory, timeout, name, extra_env=None, moto=None)`: another
    function under the RIE against the session's moto resources (or those of `moto`), e.g. a worker
    with another config; stopped at the end of the session at the latest."""
    functions: list[kit.LambdaUnderRie] = []

    def start(
        resource: str, binary: str, *, moto: kit.MotoServer | None = None, **options: Any
    ) -> kit.LambdaUnderRie:
        function = _batch_function(moto or session_moto, logs_dir, resource, binary, **options)
        functions.append(function)
        return function

    try:
        yield start
    finally:
        for function in functions:
            function.stop()


@pytest.fixture(scope="session")
def batches_lambda(moto: kit.MotoServer, logs_dir: Path) -> Iterator[kit.LambdaUnderRie]:
    """`nimbus-batches` under the RIE (`/v1/batches` and `/batch_inference`), as template.yaml declares
    NimbusBatchesFunction, against the moto table, bucket and queue."""
    function = _batch_function(
        moto, logs_dir, "NimbusBatchesFunction", "nimbus-batches", memory="256", timeout="30", name="rie-batches"
    )
    try:
        yield function
    finally:
        function.stop()


@pytest.fixture(scope="session")
def worker_lambda(moto: kit.MotoServer, logs_dir: Path) -> Iterator[kit.LambdaUnderRie]:
    """`nimbus-worker` under the RIE: invoked with SQS events (the tests play the event source)."""
    function = _batch_function(
        moto, logs_dir, "NimbusWorkerFunction", "nimbus-worker", memory="512", timeout="300", name="rie-worker"
    )
    try:
        yield function
    finally:
        function.stop()


@pytest.fixture(scope="session")
def poller_lambda(moto: kit.MotoServer, logs_dir: Path) -> Iterator[kit.LambdaUnderRie]:
    """`nimbus-poller` under the RIE: invoked with a scheduled event (moto fires no schedules)."""
    function = _batch_function(
        moto, logs_dir, "NimbusPollerFunction", "nimbus-poller", memory="256", timeout="300", name="rie-poller"
    )
    try:
        yield function
    finally:
        function.stop()


# --------------------------------------------------------------------------------------------
# The batch path as the tests drive it
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api(files_lambda: kit.LambdaUnderRie, batches_lambda: kit.LambdaUnderRie, aws_api_key: dict[str, Any]) -> Api:
    return Api(files_lambda, batches_lambda, aws_api_key["api_key"])


@pytest.fixture(scope="module")
def source(moto: kit.MotoServer, worker_lambda: kit.LambdaUnderRie, poller_lambda: kit.LambdaUnderRie) -> EventSource:
    return EventSource(moto, worker_lambda, poller_lambda)


# --------------------------------------------------------------------------------------------
# TensorZero's `/inference` with the real `tensorzero` client
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def tz_upstream() -> Iterator[RecordingUpstream]:
    upstream = RecordingUpstream()
    try:
        yield upstream
    finally:
        upstream.stop()


@pytest.fixture(scope="session")
def tz_server(
    tz_upstream: RecordingUpstream, server_factory: Callable[..., kit.NimbusServer], tmp_path_factory: pytest.TempPathFactory
) -> kit.NimbusServer:
    """A server on a copy of the default config directory with the test functions appended."""
    config = tzk.write_test_config(tmp_path_factory.mktemp("tz-config"), tz_upstream.api_base)
    return server_factory("nimbus-tensorzero", config=config)


@pytest.fixture(scope="session")
def tz(tz_server: kit.NimbusServer) -> Iterator[Any]:
    """The real `tensorzero` client in HTTP mode, pointed at `tz_server`'s root."""
    from tensorzero import TensorZeroGateway  # noqa: PLC0415 - only these tests need it

    with TensorZeroGateway.build_http(gateway_url=tz_server.base_url, timeout=30) as client:
        yield client
