"""Process harness for the Python tests: the local `nimbus` server and CLI, a moto server with the
Nimbus AWS resources, and the `nimbus-inference` Lambda binary under the Runtime Interface Emulator.

Every process is started in its own session (process group) with its output in a log file, is
registered so a failing test can show its log, and is stopped (SIGTERM, then SIGKILL to the whole
group) by the fixture that started it, by an `atexit` hook as a backstop, and by the kernel if
pytest itself dies (PR_SET_PDEATHSIG on Linux).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable

import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = REPO_ROOT / "infra" / "config" / "nimbus.toml"
EVENTS_DIR = REPO_ROOT / "infra" / "events"
PLACEHOLDER_KEY = "nmb_REPLACE_WITH_YOUR_KEY"

RIE_INVOKE_PATH = "/2015-03-31/functions/function/invocations"

# Dummy credentials for moto; never real ones.
AWS_REGION = "us-east-1"
AWS_TEST_ACCESS_KEY = "testing"
AWS_TEST_SECRET_KEY = "testing"


class HarnessError(RuntimeError):
    """A helper process could not be started or did not become ready."""


# --------------------------------------------------------------------------------------------
# Binaries
# --------------------------------------------------------------------------------------------


def bin_dir() -> Path:
    """`NIMBUS_BIN_DIR`, else `$CARGO_TARGET_DIR/debug`, else `<repo>/target/debug`."""
    explicit = os.environ.get("NIMBUS_BIN_DIR")
    if explicit:
        path = Path(explicit)
    else:
        target = os.environ.get("CARGO_TARGET_DIR")
        path = Path(target) / "debug" if target else REPO_ROOT / "target" / "debug"
    if not path.is_absolute():
        path = REPO_ROOT / path
    return path


def binary(name: str) -> Path:
    path = bin_dir() / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise HarnessError(
            f"binary `{name}` not found at {path}. Build it first "
            f"(cargo build -p nimbus-local -p nimbus-inference -p nimbus-files) or point NIMBUS_BIN_DIR at the directory holding it."
        )
    return path


def rie_binary() -> Path:
    """The Lambda Runtime Interface Emulator shipped inside the aws-sam-cli package."""
    try:
        import samcli  # noqa: PLC0415 - imported lazily: only the Lambda tests need it
    except ImportError as err:  # pragma: no cover - depends on the venv
        raise HarnessError("aws-sam-cli is not installed (pip install -r infra/requirements-dev.txt)") from err
    path = Path(os.path.dirname(samcli.__file__)) / "local" / "rapid" / "aws-lambda-rie-x86_64"
    if not path.is_file():
        raise HarnessError(f"Runtime Interface Emulator not found at {path}")
    if not os.access(path, os.X_OK):
        # pip does not always keep the executable bit on package data.
        path.chmod(path.stat().st_mode | 0o111)
    return path


def moto_server_command(host: str, port: int) -> list[str]:
    """`NIMBUS_MOTO_SERVER` if set, else the `moto_server` beside this Python, on PATH, or `-m moto.server`."""
    explicit = os.environ.get("NIMBUS_MOTO_SERVER")
    if explicit:
        if not Path(explicit).is_file():
            raise HarnessError(f"NIMBUS_MOTO_SERVER={explicit} does not exist (pip install -r infra/requirements-dev.txt)")
        return [explicit, "-H", host, "-p", str(port)]
    script = Path(sys.executable).parent / "moto_server"
    if script.is_file():
        return [str(script), "-H", host, "-p", str(port)]
    found = shutil.which("moto_server")
    if found:
        return [found, "-H", host, "-p", str(port)]
    return [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)]


# --------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


_LIVE: list["ManagedProcess"] = []
_LIVE_LOCK = threading.Lock()


class ManagedProcess:
    """A child process in its own process group, logging to a file."""

    def __init__(self, name: str, argv: list[str], *, env: dict[str, str], cwd: Path, log_path: Path):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab", buffering=0)  # noqa: SIM115 - closed in stop()
        self._log.write(f"$ {' '.join(argv)}\n".encode())
        self.proc = subprocess.Popen(  # noqa: S603 - argv built by the harness
            argv,
            env=env,
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509
        )
        with _LIVE_LOCK:
            _LIVE.append(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_text(self, max_chars: int = 6000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "<no log>"
        return text if len(text) <= max_chars else "…" + text[-max_chars:]

    def ensure_alive(self) -> None:
        if not self.alive():
            raise HarnessError(f"{self.name} exited with status {self.proc.returncode}; log:\n{self.log_text()}")

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM the process group, then SIGKILL it; idempotent."""
        try:
            if self.alive():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    pass
            # Whatever is left in the group (e.g. the RIE's runtime child) is killed too.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout)
        finally:
            with contextlib.suppress(Exception):
                self._log.close()
            with _LIVE_LOCK:
                if self in _LIVE:
                    _LIVE.remove(self)


def live_processes() -> list[ManagedProcess]:
    with _LIVE_LOCK:
        return list(_LIVE)


@atexit.register
def _stop_everything() -> None:
    for process in reversed(live_processes()):
        with contextlib.suppress(Exception):
            process.stop(timeout=2.0)


def wait_until(
    check: Callable[[], bool], *, timeout: float, what: str, process: ManagedProcess | None = None, interval: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if process is not None:
            process.ensure_alive()
        try:
            if check():
                return
        except Exception as err:  # noqa: BLE001 - any failure means "not ready yet"
            last_error = err
        time.sleep(interval)
    log = f"\nlog of {process.name}:\n{process.log_text()}" if process else ""
    raise HarnessError(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_error!r}){log}")


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without AWS_*/NIMBUS_* settings (so a developer's own AWS
    profile or a stray NIMBUS_* variable can never leak into a test), plus `extra`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not (k.startswith("AWS_") or k.startswith("NIMBUS_") or k in {"PORT", "OPENAI_API_KEY", "OPENAI_BASE_URL"})
    }
    env.setdefault("RUST_LOG", "info")
    env.setdefault("RUST_BACKTRACE", "1")
    if extra:
        env.update(extra)
    return env


# --------------------------------------------------------------------------------------------
# `nimbus` CLI and local server
# --------------------------------------------------------------------------------------------


class NimbusCli:
    """`nimbus keys …` against one data directory (embedded) or one DynamoDB table (aws)."""

    def __init__(self, env: dict[str, str], *, backend: str = "embedded"):
        self.env = env
        self.backend = backend

    def run(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        argv = [str(binary("nimbus")), *args]
        result = subprocess.run(  # noqa: S603
            argv, env=self.env, cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise HarnessError(
                f"`{' '.join(argv)}` exited {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
            )
        return result

    def _keys(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("keys", *args, "--backend", self.backend, check=check)

    @staticmethod
    def _json_lines(stdout: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in stdout.splitlines() if line.strip()]

    def create_key(self, project: str, name: str | None = None) -> dict[str, Any]:
        args = ["create", "--project", project]
        if name is not None:
            args += ["--name", name]
        result = self._keys(*args)
        lines = self._json_lines(result.stdout)
        if len(lines) != 1:
            raise HarnessError(f"`nimbus keys create` should print exactly one JSON line, got:\n{result.stdout}")
        return lines[0]

    def revoke_key(self, key_id: str) -> subprocess.CompletedProcess[str]:
        return self._keys("revoke", key_id)

    def list_keys(self) -> list[dict[str, Any]]:
        return self._json_lines(self._keys("list").stdout)

    def sweep(self, data_dir: Path, *, as_of: int | None = None) -> dict[str, Any]:
        """`nimbus sweep --data-dir DIR [--as-of T]`: the janitor's due tasks once; its JSON report."""
        args = ["sweep", "--data-dir", str(data_dir)]
        if as_of is not None:
            args += ["--as-of", str(as_of)]
        lines = self._json_lines(self.run(*args).stdout)
        if len(lines) != 1:
            raise HarnessError(f"`nimbus sweep` should print exactly one JSON line, got: {lines!r}")
        return lines[0]

    def poll(self, data_dir: Path, *, as_of: int | None = None) -> dict[str, Any]:
        """`nimbus poll --data-dir DIR [--as-of T]`: one scheduler pass; its JSON report."""
        args = ["poll", "--data-dir", str(data_dir), "--config", str(DEFAULT_CONFIG)]
        if as_of is not None:
            args += ["--as-of", str(as_of)]
        lines = self._json_lines(self.run(*args).stdout)
        if len(lines) != 1:
            raise HarnessError(f"`nimbus poll` should print exactly one JSON line, got: {lines!r}")
        return lines[0]


class NimbusServer:
    """`nimbus serve` on a free loopback port with its own data directory."""

    def __init__(
        self,
        data_dir: Path,
        log_dir: Path,
        *,
        config: Path | None = DEFAULT_CONFIG,
        bind: str = "127.0.0.1",
        name: str = "nimbus-serve",
        extra_env: dict[str, str] | None = None,
        cwd: Path = REPO_ROOT,
    ):
        """`config=None` leaves NIMBUS_CONFIG unset (the server's default: infra/config/nimbus.toml
        under `cwd`, else the one built into the binary); `extra_env` adds variables to the server's
        environment (e.g. NIMBUS_SCHEDULE_INTERVAL_SECS); `cwd` is where it starts (the repo root)."""
        self.data_dir = data_dir
        self.config = config or DEFAULT_CONFIG
        self.port = free_port()
        self.env = clean_env({"PORT": str(self.port), "NIMBUS_BIND": bind, "NIMBUS_DATA_DIR": str(data_dir)})
        if config is not None:
            self.env["NIMBUS_CONFIG"] = str(config)
        if extra_env:
            self.env.update(extra_env)
        self.cli = NimbusCli(clean_env({"NIMBUS_DATA_DIR": str(data_dir)}))
        data_dir.mkdir(parents=True, exist_ok=True)
        self.process = ManagedProcess(
            f"{name} (:{self.port})",
            [str(binary("nimbus")), "serve"],
            env=self.env,
            cwd=cwd,
            log_path=log_dir / f"{name}-{self.port}.log",
        )
        try:
            wait_until(self._healthy, timeout=60, what=f"{name} /health", process=self.process)
        except BaseException:
            self.process.stop()
            raise

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        return f"{self.base_url}/v1"

    def _healthy(self) -> bool:
        response = requests.get(f"{self.base_url}/health", timeout=2)
        return response.status_code == 200

    def stop(self) -> None:
        self.process.stop()


# --------------------------------------------------------------------------------------------
# moto
# --------------------------------------------------------------------------------------------


class MotoServer:
    """`moto_server` on a free loopback port, with the Nimbus table, bucket and queue."""

    def __init__(self, log_dir: Path):
        self.port = free_port()
        self.process = ManagedProcess(
            f"moto_server (:{self.port})",
            moto_server_command("127.0.0.1", self.port),
            env=clean_env(),
            cwd=REPO_ROOT,
            log_path=log_dir / f"moto-{self.port}.log",
        )
        try:
            wait_until(self._ready, timeout=60, what="moto_server", process=self.process, interval=0.2)
        except BaseException:
            self.process.stop()
            raise
        suffix = uuid.uuid4().hex[:8]
        self.table = f"nimbus-state-{suffix}"
        self.bucket = f"nimbus-bucket-{suffix}"
        self.queue_name = f"nimbus-jobs-{suffix}"
        self.queue_url = ""
        # The async priority queues (AsyncQueueP0..P2 in template.yaml), by priority level.
        self.async_queue_names = {level: f"nimbus-async-p{level}-{suffix}" for level in range(3)}
        self.async_queue_urls: dict[int, str] = {}
        # The stack's NimbusSealingKey (credentials and webhook secrets are sealed with it).
        self.sealing_key_id = ""

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _ready(self) -> bool:
        return requests.get(f"{self.endpoint}/moto-api/", timeout=2).status_code < 500

    def client(self, service: str):
        import boto3  # noqa: PLC0415 - boto3 is slow to import; only the AWS tests need it

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=AWS_REGION,
            aws_access_key_id=AWS_TEST_ACCESS_KEY,
            aws_secret_access_key=AWS_TEST_SECRET_KEY,
        )

    def create_resources(self) -> None:
        """The same table, bucket and queue shapes as template.yaml."""
        dynamodb = self.client("dynamodb")
        dynamodb.create_table(
            TableName=self.table,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "owner_key", "AttributeType": "S"},
                {"AttributeName": "sort_key", "AttributeType": "S"},
            ],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "by_owner",
                    "KeySchema": [
                        {"AttributeName": "owner_key", "KeyType": "HASH"},
                        {"AttributeName": "sort_key", "KeyType": "RANGE"},
                    ],
                    # As the template's default (OwnerIndexProjection INCLUDE): no bodies.
                    "Projection": {
                        "ProjectionType": "INCLUDE",
                        "NonKeyAttributes": ["kind", "id", "owner", "created_at_ms", "version", "expires_at"],
                    },
                }
            ],
        )
        dynamodb.get_waiter("table_exists").wait(TableName=self.table, WaiterConfig={"Delay": 0.2, "MaxAttempts": 50})
        dynamodb.update_time_to_live(
            TableName=self.table, TimeToLiveSpecification={"AttributeName": "expires_at", "Enabled": True}
        )
        self.client("s3").create_bucket(Bucket=self.bucket)
        sqs = self.client("sqs")
        self.queue_url = sqs.create_queue(QueueName=self.queue_name)["QueueUrl"]
        for level, name in self.async_queue_names.items():
            self.async_queue_urls[level] = sqs.create_queue(QueueName=name)["QueueUrl"]
        created = self.client("kms").create_key(Description="nimbus sealing (test)")
        self.sealing_key_id = created["KeyMetadata"]["KeyId"]

    def aws_env(self) -> dict[str, str]:
        """What the Lambda function and `nimbus keys --backend aws` need to reach moto."""
        return {
            "AWS_REGION": AWS_REGION,
            "AWS_DEFAULT_REGION": AWS_REGION,
            "AWS_ACCESS_KEY_ID": AWS_TEST_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": AWS_TEST_SECRET_KEY,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
            # Keep a developer's ~/.aws out of the picture.
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "NIMBUS_TABLE": self.table,
            "NIMBUS_BUCKET": self.bucket,
            "NIMBUS_JOBS_QUEUE_URL": self.queue_url,
            **{f"NIMBUS_ASYNC_QUEUE_URL_P{level}": url for level, url in self.async_queue_urls.items()},
            **({"NIMBUS_SEALING_KEY_ID": self.sealing_key_id} if self.sealing_key_id else {}),
        }

    def put_config(self, name: str, config: str, *, config_dir: Path = DEFAULT_CONFIG.parent) -> str:
        """Store `config` as `config/<name>.toml` in the bucket, with the files of `config_dir`
        (by default the default config's templates and schemas) beside it, as a deployment puts
        them; return its `NIMBUS_CONFIG_SOURCE` (`s3://…`)."""
        s3 = self.client("s3")
        for path in config_dir.rglob("*"):
            if path.is_file() and path.suffix != ".toml":
                key = f"config/{path.relative_to(config_dir).as_posix()}"
                s3.put_object(Bucket=self.bucket, Key=key, Body=path.read_bytes())
        key = f"config/{name}.toml"
        s3.put_object(Bucket=self.bucket, Key=key, Body=config.encode())
        return f"s3://{self.bucket}/{key}"

    def stop(self) -> None:
        self.process.stop()


# --------------------------------------------------------------------------------------------
# Lambda under the Runtime Interface Emulator
# --------------------------------------------------------------------------------------------


TEMPLATE = REPO_ROOT / "template.yaml"


def template_environment(function: str, *, globals_if_missing: bool = False) -> dict[str, str]:
    """The environment template.yaml gives `function` (Globals merged with its own), as far as it
    can be known locally: literal values, and `!Ref`s to parameters resolved to their defaults.
    References to resources (table, bucket, queue) are left out: the harness supplies those.
    With `globals_if_missing`, a function the template does not declare gets the Globals alone."""
    from samcli.yamlhelper import yaml_parse  # noqa: PLC0415 - parses CloudFormation's short tags

    template = yaml_parse(TEMPLATE.read_text())
    parameters = template.get("Parameters") or {}
    merged: dict[str, Any] = {}
    global_env = (((template.get("Globals") or {}).get("Function") or {}).get("Environment") or {}).get("Variables")
    resource = (template.get("Resources") or {}).get(function)
    if resource is None and not globals_if_missing:
        raise HarnessError(f"template.yaml declares no resource `{function}`")
    own_env = (((resource or {}).get("Properties") or {}).get("Environment") or {}).get("Variables")
    merged.update(global_env or {})
    merged.update(own_env or {})
    env: dict[str, str] = {}
    for name, value in merged.items():
        if isinstance(value, (str, int, float, bool)):
            env[name] = str(value).lower() if isinstance(value, bool) else str(value)
        elif isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in parameters:
            default = parameters[value["Ref"]].get("Default")
            if default is not None:
                env[name] = str(default)
    return env


class LambdaUnderRie:
    """The RIE on a free loopback port, running `bootstrap` as a custom runtime."""

    def __init__(self, bootstrap: Path, env: dict[str, str], log_dir: Path, *, name: str = "rie"):
        self.port = free_port()
        self.runtime_api_port = free_port()
        argv = [
            str(rie_binary()),
            "--runtime-interface-emulator-address",
            f"127.0.0.1:{self.port}",
            "--runtime-api-address",
            f"127.0.0.1:{self.runtime_api_port}",
            "--log-level",
            "info",
            str(bootstrap),
        ]
        self.process = ManagedProcess(
            f"{name} (:{self.port})", argv, env=env, cwd=REPO_ROOT, log_path=log_dir / f"{name}-{self.port}.log"
        )
        try:
            wait_until(self._listening, timeout=30, what="the RIE to listen", process=self.process)
        except BaseException:
            self.process.stop()
            raise

    @property
    def invoke_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{RIE_INVOKE_PATH}"

    def _listening(self) -> bool:
        with contextlib.closing(socket.create_connection(("127.0.0.1", self.port), timeout=1)):
            return True

    def invoke_raw(self, event: dict[str, Any], *, timeout: float = 120) -> bytes:
        """Invoke once; return the function's result as bytes (this RIE buffers streamed results:
        they arrive whole, in the streaming format, see `split_streamed_response`)."""
        self.process.ensure_alive()
        response = requests.post(self.invoke_url, json=event, timeout=timeout)
        if response.status_code != 200:
            raise HarnessError(
                f"RIE invocation failed: HTTP {response.status_code}: {response.text}\nlog:\n{self.process.log_text()}"
            )
        return response.content

    def invoke(self, event: dict[str, Any], *, timeout: float = 120) -> dict[str, Any]:
        """Invoke once; return the function's result (the API Gateway proxy response)."""
        raw = self.invoke_raw(event, timeout=timeout)
        try:
            result = json.loads(raw)
        except ValueError as err:
            raise HarnessError(f"function result is not JSON: {raw[:500]!r}") from err
        if isinstance(result, dict) and "errorType" in result and "statusCode" not in result:
            raise HarnessError(f"function raised {result}\nlog:\n{self.process.log_text()}")
        return result

    def stop(self) -> None:
        self.process.stop()


def cargo_lambda_binary() -> Path:
    """`cargo-lambda` from the pinned tools (beside this Python, or on PATH)."""
    beside = Path(sys.executable).parent / "cargo-lambda"
    found = str(beside) if beside.is_file() else shutil.which("cargo-lambda")
    if not found:
        raise HarnessError("cargo-lambda is not installed (pip install -r infra/requirements-dev.txt)")
    return Path(found)


class CargoLambdaEmulator:
    """`cargo lambda watch --only-lambda-apis`: cargo-lambda's Lambda Runtime API and invoke
    endpoint, with no build. Unlike the RIE it hands a streamed result to the invoker as it comes
    (prelude decoded into the HTTP status and headers). A function binary is started against it
    with `start_function`; cargo-lambda calls a function started that way `_`."""

    FUNCTION = "_"

    def __init__(self, log_dir: Path, *, name: str = "cargo-lambda"):
        self.port = free_port()
        self.log_dir = log_dir
        argv = [
            str(cargo_lambda_binary()),
            "lambda",
            "watch",
            "--only-lambda-apis",
            "--ignore-changes",
            "--invoke-address",
            "127.0.0.1",
            "--invoke-port",
            str(self.port),
        ]
        # It reads the workspace's `cargo metadata`; it builds nothing with --only-lambda-apis.
        self.process = ManagedProcess(
            f"{name} (:{self.port})", argv, env=clean_env(), cwd=REPO_ROOT, log_path=log_dir / f"{name}-{self.port}.log"
        )
        self.functions: list[ManagedProcess] = []
        try:
            wait_until(self._listening, timeout=60, what="cargo lambda watch to listen", process=self.process)
        except BaseException:
            self.stop()
            raise

    def _listening(self) -> bool:
        with contextlib.closing(socket.create_connection(("127.0.0.1", self.port), timeout=1)):
            return True

    @property
    def runtime_api(self) -> str:
        return f"http://127.0.0.1:{self.port}/.rt"

    @property
    def invoke_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/2015-03-31/functions/{self.FUNCTION}/invocations"

    def start_function(self, bootstrap: Path, env: dict[str, str], *, name: str) -> ManagedProcess:
        """Run `bootstrap` against this emulator's Runtime API (it polls for events at once)."""
        lambda_env = {
            **env,
            "AWS_LAMBDA_RUNTIME_API": self.runtime_api,
            "AWS_LAMBDA_FUNCTION_NAME": self.FUNCTION,
            "AWS_LAMBDA_FUNCTION_VERSION": "1",
        }
        lambda_env.setdefault("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        process = ManagedProcess(name, [str(bootstrap)], env=lambda_env, cwd=REPO_ROOT, log_path=self.log_dir / f"{name}.log")
        self.functions.append(process)
        return process

    def stop(self) -> None:
        for process in self.functions:
            process.stop()
        self.process.stop()


# Shared request pieces.

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
    },
}


def user(text: str) -> list[dict[str, Any]]:
    """A one-message conversation."""
    return [{"role": "user", "content": text}]


def make_client(base_url: str, api_key: str = "unused-local-key", **kwargs: Any):
    """The real OpenAI SDK for `base_url`; no retries unless asked, so failures show at once."""
    import openai  # noqa: PLC0415

    kwargs.setdefault("max_retries", 0)
    kwargs.setdefault("timeout", 30.0)
    return openai.OpenAI(base_url=base_url, api_key=api_key, **kwargs)


def error_envelope(response: requests.Response | Any) -> dict[str, Any]:
    """The `error` object of an OpenAI error response, checked to carry all four keys."""
    body = response.json()
    assert isinstance(body, dict) and set(body) == {"error"}, f"not an error envelope: {body!r}"
    error = body["error"]
    assert set(error) >= {"message", "type", "param", "code"}, f"error lacks keys: {error!r}"
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["type"], str) and error["type"], error
    return error


# --------------------------------------------------------------------------------------------
# Event files and proxy responses
# --------------------------------------------------------------------------------------------


def event_files(pattern: str = "inference-*.json") -> list[Path]:
    """Event files of one function: `inference-*.json` (the default) or e.g. `files-*.json`."""
    return sorted(EVENTS_DIR.glob(pattern))


def load_event(name: str) -> dict[str, Any]:
    return json.loads((EVENTS_DIR / name).read_text())


def replace_strings(value: Any, old: str, new: str) -> Any:
    """`value` with `old` replaced by `new` in every string (keys and values), recursively."""
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [replace_strings(v, old, new) for v in value]
    if isinstance(value, dict):
        return {replace_strings(k, old, new): replace_strings(v, old, new) for k, v in value.items()}
    return value


def with_api_key(event: dict[str, Any], api_key: str) -> dict[str, Any]:
    return replace_strings(event, PLACEHOLDER_KEY, api_key)


def without_authorization(event: dict[str, Any]) -> dict[str, Any]:
    event = json.loads(json.dumps(event))
    for field in ("headers", "multiValueHeaders"):
        if isinstance(event.get(field), dict):
            event[field] = {k: v for k, v in event[field].items() if k.lower() != "authorization"}
    return event


def with_body(event: dict[str, Any], body: dict[str, Any] | str) -> dict[str, Any]:
    """A copy of `event` with another JSON body (content-length kept consistent)."""
    event = json.loads(json.dumps(event))
    text = body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
    event["body"] = text
    event["isBase64Encoded"] = False
    for field in ("headers", "multiValueHeaders"):
        headers = event.get(field)
        if not isinstance(headers, dict):
            continue
        for name in list(headers):
            if name.lower() == "content-length":
                length = str(len(text.encode()))
                headers[name] = [length] if isinstance(headers[name], list) else length
    return event


def check_http_api_event(event: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """Assert what every HTTP API (payload 2.0) event file here shares: lower-case headers, the
    placeholder key, a request context matching the path, a query string matching its parameters.
    Returns the headers and the request context."""
    assert event["version"] == "2.0"
    assert event["routeKey"] == "$default"
    headers = event["headers"]
    assert all(h == h.lower() for h in headers), "HTTP API v2 header names are lower case"
    assert headers.get("authorization") == f"Bearer {PLACEHOLDER_KEY}"
    context = event["requestContext"]
    assert context["http"]["path"] == event["rawPath"]
    assert context["routeKey"] == "$default" and context["stage"] == "$default"
    query = event.get("queryStringParameters") or {}
    assert event["rawQueryString"] == "&".join(f"{k}={v}" for k, v in query.items())
    return headers, context


def response_headers(result: dict[str, Any]) -> dict[str, str]:
    """Lower-cased headers of a proxy response (`headers` and `multiValueHeaders` merged)."""
    headers: dict[str, str] = {}
    for name, values in (result.get("multiValueHeaders") or {}).items():
        if values:
            headers[name.lower()] = ",".join(values)
    for name, value in (result.get("headers") or {}).items():
        headers[name.lower()] = value
    return headers


def response_body_text(result: dict[str, Any]) -> str:
    import base64  # noqa: PLC0415
    import gzip  # noqa: PLC0415

    body = result.get("body") or ""
    if not result.get("isBase64Encoded"):
        return body
    raw = base64.b64decode(body)
    if response_headers(result).get("content-encoding") == "gzip":
        raw = gzip.decompress(raw)
    return raw.decode()


# Lambda's HTTP streaming format (a function URL in RESPONSE_STREAM mode, API Gateway REST
# streaming): a JSON prelude, eight NUL bytes, then the body.
STREAM_PRELUDE_SEPARATOR = b"\0" * 8


def split_streamed_response(raw: bytes) -> tuple[dict[str, Any], bytes]:
    """The prelude (`statusCode`, `headers`, `cookies`) and the body of a streamed result."""
    prelude, separator, body = raw.partition(STREAM_PRELUDE_SEPARATOR)
    if not separator:
        raise HarnessError(f"not a streamed result (no prelude separator): {raw[:300]!r}")
    try:
        return json.loads(prelude), body
    except ValueError as err:
        raise HarnessError(f"the streamed result's prelude is not JSON: {prelude[:300]!r}") from err


def parse_sse(text: str) -> tuple[list[dict[str, Any]], bool]:
    """`data:` events of an SSE body as JSON objects, and whether it ended with `[DONE]`."""
    events: list[dict[str, Any]] = []
    done = False
    for block in text.replace("\r\n", "\n").split("\n\n"):
        data_lines = [line[len("data:") :].lstrip() for line in block.split("\n") if line.startswith("data:")]
        if not data_lines:
            continue
        data = "\n".join(data_lines)
        if data == "[DONE]":
            done = True
            continue
        if done:
            raise AssertionError(f"event after [DONE]: {data!r}")
        events.append(json.loads(data))
    return events, done


def describe_logs(processes: Iterable[ManagedProcess]) -> str:
    return "\n\n".join(f"===== {p.name} =====\n{p.log_text()}" for p in processes)


# --------------------------------------------------------------------------------------------
# Files and uploads
# --------------------------------------------------------------------------------------------

MULTIPART_BOUNDARY = "nimbus-test-boundary-7d9f3a"


def multipart_body(
    fields: list[tuple[str, str | tuple[str, bytes, str]]], *, boundary: str = MULTIPART_BOUNDARY
) -> tuple[bytes, str]:
    """A multipart/form-data body with the fields in exactly the given order, and its content-type.
    A field's value is text, or `(filename, content, content_type)` for a file."""
    out = bytearray()
    for name, value in fields:
        out += f"--{boundary}\r\n".encode()
        if isinstance(value, tuple):
            filename, content, content_type = value
            out += f'Content-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'.encode()
            out += f"Content-Type: {content_type}\r\n\r\n".encode()
            out += content
        else:
            out += f'Content-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
            out += value.encode()
        out += b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


def write_random_file(path: Path, size: int, *, chunk: int = 4 * 1024 * 1024) -> tuple[str, str]:
    """Fill `path` with `size` random bytes, one chunk in memory at a time; return (sha256, md5) hex."""
    import hashlib  # noqa: PLC0415

    sha256, md5 = hashlib.sha256(), hashlib.md5()  # noqa: S324 - md5 is what the Uploads API checks
    with open(path, "wb") as out:
        left = size
        while left:
            block = os.urandom(min(chunk, left))
            sha256.update(block)
            md5.update(block)
            out.write(block)
            left -= len(block)
    return sha256.hexdigest(), md5.hexdigest()


def sha256_of_chunks(chunks: Iterable[bytes]) -> tuple[str, int]:
    """sha256 hex and length of a stream of byte chunks (consumed once)."""
    import hashlib  # noqa: PLC0415

    digest = hashlib.sha256()
    total = 0
    for block in chunks:
        digest.update(block)
        total += len(block)
    return digest.hexdigest(), total


TEXT_CONTENT_TYPES = ("application/json", "text/")


def read_request_body(handler: Any) -> bytes:
    """The whole body of the request `handler` (an http.server handler) is serving."""
    if "chunked" in (handler.headers.get("transfer-encoding") or "").lower():
        raw = b""
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return raw
            raw += handler.rfile.read(size)
            handler.rfile.readline()
    length = int(handler.headers.get("content-length") or 0)
    return handler.rfile.read(length) if length else b""


def http_event_for(handler: Any, raw: bytes, *, domain_name: str | None = None, account_id: str = "123456789012") -> dict[str, Any]:
    """The payload 2.0 event API Gateway's HTTP API (or, with a `*.lambda-url.*` `domain_name`, a
    function URL) makes of the request `handler` serves: lower-case headers, binary bodies
    base64-encoded. The domain defaults to the request's `host`."""
    import base64  # noqa: PLC0415
    from urllib.parse import parse_qsl, urlsplit  # noqa: PLC0415

    url = urlsplit(handler.path)
    headers: dict[str, str] = {}
    for name, value in handler.headers.items():
        key = name.lower()
        if key == "transfer-encoding":
            continue
        headers[key] = f"{headers[key]},{value}" if key in headers else value
    domain_name = domain_name or headers.get("host", "127.0.0.1")
    content_type = headers.get("content-type", "")
    binary = bool(raw) and not content_type.startswith(TEXT_CONTENT_TYPES)
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": url.path,
        "rawQueryString": url.query,
        "headers": headers,
        "requestContext": {
            "accountId": account_id,
            "apiId": "relay",
            "domainName": domain_name,
            "domainPrefix": domain_name.split(".")[0],
            "http": {
                "method": handler.command,
                "path": url.path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": headers.get("user-agent", ""),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime()),
            "timeEpoch": int(time.time() * 1000),
        },
        "isBase64Encoded": binary,
    }
    if url.query:
        query: dict[str, str] = {}
        for key, value in parse_qsl(url.query, keep_blank_values=True):
            query[key] = f"{query[key]},{value}" if key in query else value
        event["queryStringParameters"] = query
    if raw:
        event["body"] = base64.b64encode(raw).decode() if binary else raw.decode()
    return event


class _LoopbackRelay:
    """A threaded loopback HTTP server whose handler class calls `relay(handler)` for every request."""

    def __init__(self, relay: Callable[[Any], None], name: str):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: PLC0415

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep pytest output clean
                pass

            def _relay(self) -> None:
                relay(self)

            do_GET = do_POST = do_PUT = do_DELETE = _relay  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name=name, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        return f"{self.base_url}/v1"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class ApiGatewayRelay(_LoopbackRelay):
    """A loopback HTTP server that turns each request into an HTTP API (payload 2.0) event for a
    function under the RIE and relays the proxy response back, as API Gateway would: binary
    bodies base64-encoded, lower-case headers. Lets the OpenAI SDK talk to a Lambda function."""

    def __init__(self, function: LambdaUnderRie):
        self.function = function
        self._invoke_lock = threading.Lock()
        super().__init__(self._relay, "api-gateway-relay")

    def _relay(self, handler: Any) -> None:
        import base64  # noqa: PLC0415

        event = http_event_for(handler, read_request_body(handler))
        with self._invoke_lock:
            result = self.function.invoke(event)
        body = result.get("body") or ""
        payload = base64.b64decode(body) if result.get("isBase64Encoded") else body.encode()
        handler.send_response(int(result.get("statusCode", 502)))
        for name, value in response_headers(result).items():
            if name not in {"content-length", "transfer-encoding", "connection"}:
                handler.send_header(name, value)
        handler.send_header("content-length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)


class FunctionUrlRelay(_LoopbackRelay):
    """A loopback HTTP server standing in for a function URL in RESPONSE_STREAM mode: each request
    becomes a function URL event for `emulator`'s function, and the answer is relayed back chunk
    by chunk as the emulator hands it over. `response_modes` records, per request, the response
    mode the function answered in (`streaming`, or None for a buffered answer)."""

    DOMAIN = "relay0function0url.lambda-url.us-east-1.on.aws"
    HOP_BY_HOP = {"content-length", "transfer-encoding", "connection", "keep-alive"}

    def __init__(self, emulator: CargoLambdaEmulator):
        self.emulator = emulator
        self.response_modes: list[str | None] = []
        super().__init__(self._relay, "function-url-relay")

    def event_for(self, handler: Any, raw: bytes) -> dict[str, Any]:
        return http_event_for(handler, raw, domain_name=self.DOMAIN, account_id="anonymous")

    def _relay(self, handler: Any) -> None:
        event = self.event_for(handler, read_request_body(handler))
        with requests.post(self.emulator.invoke_url, json=event, stream=True, timeout=120) as answer:
            mode = answer.headers.get("lambda-runtime-function-response-mode")
            self.response_modes.append(mode)
            handler.send_response(answer.status_code)
            for name, value in answer.headers.items():
                if name.lower() not in self.HOP_BY_HOP and not name.lower().startswith("lambda-runtime-"):
                    handler.send_header(name, value)
            handler.send_header("transfer-encoding", "chunked")
            handler.end_headers()
            try:
                for chunk in answer.iter_content(chunk_size=None):
                    if chunk:
                        handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        handler.wfile.flush()
                handler.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                handler.close_connection = True  # the client went away mid-stream


class StreamingRestApiRelay(FunctionUrlRelay):
    """A loopback HTTP server standing in for the stack's streaming REST API (stage `STAGE`, Lambda
    proxy integrations with `responseTransferMode: STREAM`): each request becomes a REST (payload
    1.0) proxy event, and the answer is relayed back chunk by chunk as the emulator hands it over.
    Clients use `api_base` (the stage is in the path, as on the deployed API)."""

    STAGE = "stream"
    DOMAIN = "relay0rest0api.execute-api.us-east-1.amazonaws.com"

    @property
    def api_base(self) -> str:
        return f"{self.base_url}/{self.STAGE}/v1"

    def event_for(self, handler: Any, raw: bytes) -> dict[str, Any]:
        return rest_event_for(handler, raw, stage=self.STAGE, domain_name=self.DOMAIN)


def rest_event_for(handler: Any, raw: bytes, *, stage: str, domain_name: str) -> dict[str, Any]:
    """The REST API (payload 1.0) proxy event API Gateway makes of the request `handler` serves,
    whose path starts with `/<stage>`: headers as sent (and multi-valued), binary bodies
    base64-encoded."""
    import base64  # noqa: PLC0415
    from urllib.parse import parse_qsl, urlsplit  # noqa: PLC0415

    url = urlsplit(handler.path)
    path = url.path.removeprefix(f"/{stage}") or "/"
    headers: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    for name, value in handler.headers.items():
        if name.lower() == "transfer-encoding":
            continue
        headers[name] = value
        multi.setdefault(name, []).append(value)
    content_type = (handler.headers.get("content-type") or "").lower()
    binary = bool(raw) and not content_type.startswith(TEXT_CONTENT_TYPES)
    query = parse_qsl(url.query, keep_blank_values=True)
    return {
        "resource": path,
        "path": path,
        "httpMethod": handler.command,
        "headers": headers,
        "multiValueHeaders": multi,
        "queryStringParameters": dict(query) or None,
        "multiValueQueryStringParameters": {k: [v for key, v in query if key == k] for k, _ in query} or None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": domain_name.split(".")[0],
            "domainName": domain_name,
            "domainPrefix": domain_name.split(".")[0],
            "httpMethod": handler.command,
            "identity": {"sourceIp": "127.0.0.1", "userAgent": handler.headers.get("user-agent", "")},
            "path": f"/{stage}{path}",
            "protocol": "HTTP/1.1",
            "requestId": str(uuid.uuid4()),
            "requestTimeEpoch": int(time.time() * 1000),
            "resourcePath": path,
            "stage": stage,
        },
        "body": (base64.b64encode(raw).decode() if binary else raw.decode()) if raw else None,
        "isBase64Encoded": binary,
    }


# --------------------------------------------------------------------------------------------
# Batches
# --------------------------------------------------------------------------------------------

# What a server that runs batches in tests needs: the poller every second (expiry, recovery) and
# completion windows in seconds (e.g. "3s") so expiry can be tested.
BATCH_SERVER_ENV = {"NIMBUS_SCHEDULE_INTERVAL_SECS": "1", "NIMBUS_ALLOW_SHORT_COMPLETION_WINDOWS": "1"}


def batch_server_fixtures(name: str) -> tuple[Any, Any]:
    """A module's `server` (`nimbus serve` named `name`, with `BATCH_SERVER_ENV`) and `sdk` (the real
    OpenAI SDK on it) fixtures, both module-scoped. Bind both at module level:
    `server, sdk = kit.batch_server_fixtures("nimbus-…")`."""
    import pytest  # noqa: PLC0415

    @pytest.fixture(scope="module", name="server")
    def server(server_factory: Callable[..., NimbusServer]) -> NimbusServer:
        return server_factory(name, extra_env=BATCH_SERVER_ENV)

    @pytest.fixture(scope="module", name="sdk")
    def sdk(server: NimbusServer) -> Any:
        with make_client(server.api_base) as client:
            yield client

    return server, sdk


BATCH_TERMINAL_STATUSES = frozenset({"completed", "failed", "expired", "cancelled"})
BATCH_KEYS = {
    "id",
    "object",
    "endpoint",
    "errors",
    "input_file_id",
    "completion_window",
    "status",
    "output_file_id",
    "error_file_id",
    "created_at",
    "in_progress_at",
    "expires_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
    "request_counts",
    "metadata",
    "usage",
}


def chat_line(custom_id: str, text: str = "Hello", *, model: str = "dummy", **body: Any) -> dict[str, Any]:
    """One request line of a `/v1/chat/completions` batch input file."""
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": model, "messages": user(text), **body},
    }


def embedding_line(
    custom_id: str, text: str | list[str], *, model: str = "dummy-embedding", **body: Any
) -> dict[str, Any]:
    """One request line of a `/v1/embeddings` batch input file."""
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/embeddings",
        "body": {"model": model, "input": text, **body},
    }


def jsonl(lines: Iterable[dict[str, Any] | str | bytes]) -> bytes:
    """A JSONL file: dicts as compact JSON, str/bytes lines as they are; each line ends with a newline."""
    out = bytearray()
    for line in lines:
        if isinstance(line, dict):
            out += json.dumps(line, separators=(",", ":")).encode()
        elif isinstance(line, str):
            out += line.encode()
        else:
            out += line
        out += b"\n"
    return bytes(out)


def upload_batch_input(
    client: Any, lines: Iterable[dict[str, Any] | str | bytes] | bytes, *, filename: str = "batch-input.jsonl"
) -> Any:
    """Upload `lines` (or raw bytes) as a `batch` file; return the FileObject."""
    content = lines if isinstance(lines, bytes) else jsonl(lines)
    return client.files.create(file=(filename, content), purpose="batch")


def wait_for_batch(
    client: Any,
    batch_id: str,
    *,
    until: Callable[[Any], bool] | None = None,
    timeout: float = 30.0,
    interval: float = 0.2,
) -> Any:
    """Poll `client.batches.retrieve` every `interval` s until `until(batch)` (default: the status is
    terminal); return that Batch. On timeout raise AssertionError with the last Batch seen."""
    until = until or (lambda batch: batch.status in BATCH_TERMINAL_STATUSES)
    deadline = time.monotonic() + timeout
    while True:
        batch = client.batches.retrieve(batch_id)
        if until(batch):
            return batch
        if time.monotonic() >= deadline:
            raise AssertionError(f"batch {batch_id} not there within {timeout:.0f}s; last: {batch.model_dump()!r}")
        time.sleep(interval)


def read_jsonl_file(client: Any, file_id: str | None) -> list[dict[str, Any]]:
    """The lines of a JSONL file fetched with `client.files.content` ([] for None)."""
    if file_id is None:
        return []
    text = client.files.content(file_id).read().decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def batch_results(client: Any, batch: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(output lines, error lines) of a finished batch."""
    return read_jsonl_file(client, batch.output_file_id), read_jsonl_file(client, batch.error_file_id)
