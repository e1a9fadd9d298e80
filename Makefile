# Nimbus — the two commands: `make run` (local gateway on http://127.0.0.1:3000) and `make test`.
# Everything else here is what those two need, plus deploy and benchmark helpers.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# Build outputs and tools live outside the clone, so a fresh clone on the same machine reuses them.
NIMBUS_CACHE ?= $(HOME)/.cache/nimbus
export CARGO_TARGET_DIR ?= $(NIMBUS_CACHE)/target
VENV ?= $(NIMBUS_CACHE)/venv
PYTHON ?= python3
REQUIREMENTS := infra/requirements-dev.txt
DEPLOY_REQUIREMENTS := infra/requirements-deploy.txt
VENV_STAMP := $(VENV)/.installed-$(shell cat $(REQUIREMENTS) $(DEPLOY_REQUIREMENTS) 2>/dev/null | sha256sum | cut -c1-16)
# The deploy tools alone (SAM CLI, cargo-lambda, zig), for `make deploy` without the test toolchain.
DEPLOY_VENV ?= $(NIMBUS_CACHE)/deploy-venv
# The Lambda (release, cross-built) target directory, apart from the debug one.
LAMBDA_TARGET_DIR ?= $(NIMBUS_CACHE)/target-lambda
DEPLOY_VENV_STAMP := $(DEPLOY_VENV)/.installed-$(shell sha256sum $(DEPLOY_REQUIREMENTS) 2>/dev/null | cut -c1-16)

export PATH := $(VENV)/bin:$(PATH)
export NIMBUS_BIN_DIR ?= $(CARGO_TARGET_DIR)/debug
export NIMBUS_MOTO_SERVER ?= $(VENV)/bin/moto_server
export AWS_DEFAULT_REGION ?= us-east-1
export SAM_CLI_TELEMETRY := 0

PORT ?= 3000

.PHONY: help run install deploy deploy-deps destroy build test test-deps terminal-tools check-format lint test-rust test-python sam-validate sam-build bench bench-batches bench-memory bench-inference bench-async bench-lmi bench-native bench-metrics bench-bootstrap openapi fmt clean

help:
	@echo "make run        start the gateway locally on http://127.0.0.1:$(PORT) (embedded stack in .data/)"
	@echo "make test       install pinned test tools, then run every test"
	@echo "make install    put the \`nimbus\` command on PATH (cargo install into ~/.cargo/bin)"
	@echo "make deploy     build the functions and deploy the stack to AWS (guided the first time)"
	@echo "make destroy    delete the deployed stack (the bucket is kept: it holds your data)"
	@echo "make sam-build  build the Lambda functions with SAM (release, cargo-lambda)"
	@echo "make bench      run the benchmarks and rewrite docs/benchmarks.md"
	@echo "make bench-batches  run only the batch benchmarks (their section of docs/benchmarks.md)"
	@echo "make bench-memory   the local server's memory across repeated hostile runs (its section of docs/benchmarks.md)"
	@echo "make bench-inference  /inference overhead beside /v1/chat/completions, records on vs dryrun (its section)"
	@echo "make bench-lmi      LMI provider overhead beside the OpenAI-compatible provider's (its section)"
	@echo "make bench-native   provider-native batch: AWS and provider requests of a 50,000-line batch (section 9)"
	@echo "make bench-metrics  metrics overhead: p99 with metrics off, Prometheus and EMF (section 10)"
	@echo "make bench-bootstrap  make run from an empty cargo cache: seconds to the first answer (section 12)"
	@echo "make openapi        regenerate docs/openapi.json from the handlers"
	@echo "make bench-async    async inference: submit and webhook latency, priority, AWS requests per request (its section)"

# Open (no key needed, project `default`) until the first API key is ever created; announced at
# start-up. NIMBUS_AUTH=required make run starts closed.
# Built without the AWS adapters (`--backend aws`), most of a cold build's time; `make install`
# builds the full binary.
run:
	cargo build -p nimbus-local --no-default-features
	PORT=$(PORT) NIMBUS_AUTH=$${NIMBUS_AUTH:-open} $(CARGO_TARGET_DIR)/debug/nimbus serve

build:
	cargo build --workspace --all-targets

# `nimbus` (server, keys, batch CLI) on PATH: ~/.cargo/bin, where rustup puts cargo itself.
install:
	cargo install --locked --path infra/local --root $${CARGO_INSTALL_ROOT:-$(HOME)/.cargo}
	@echo "installed: $$(command -v nimbus || echo "$${CARGO_INSTALL_ROOT:-$(HOME)/.cargo}/bin/nimbus (add its folder to PATH)")"

# --- Deploy to AWS -------------------------------------------------------------------------------
# Needs AWS credentials (any way boto3 finds them: env, ~/.aws, SSO) and a region. The first deploy
# asks its questions (`sam deploy --guided`) and saves the answers in samconfig.toml; later ones
# reuse them. The stack's outputs (API URL, streaming URL, names) are printed at the end.
deploy-deps: $(DEPLOY_VENV_STAMP)
$(DEPLOY_VENV_STAMP): $(DEPLOY_REQUIREMENTS)
	rm -rf $(DEPLOY_VENV)
	$(PYTHON) -m venv $(DEPLOY_VENV)
	$(DEPLOY_VENV)/bin/pip install --quiet --disable-pip-version-check --upgrade pip==24.3.1
	$(DEPLOY_VENV)/bin/pip install --quiet --disable-pip-version-check -r $(DEPLOY_REQUIREMENTS)
	touch $@

deploy: deploy-deps
	@$(DEPLOY_VENV)/bin/python infra/deploy/whoami.py
	PATH=$(DEPLOY_VENV)/bin:$$PATH CARGO_TARGET_DIR=$(LAMBDA_TARGET_DIR) sam build --template template.yaml
	if [ -f samconfig.toml ]; then PATH=$(DEPLOY_VENV)/bin:$$PATH sam deploy; \
	else PATH=$(DEPLOY_VENV)/bin:$$PATH sam deploy --guided --capabilities CAPABILITY_IAM; fi
	@echo "first key: NIMBUS_BACKEND=aws NIMBUS_TABLE=<StateTableName above> nimbus keys create --project default --name me"

destroy: deploy-deps
	PATH=$(DEPLOY_VENV)/bin:$$PATH sam delete

# Pinned Python tools (openai SDK, moto, SAM CLI, cargo-lambda) in a venv keyed by the pins, and
# tmux, which gives `nimbus batch`'s progress bar a real terminal in its tests.
test-deps: $(VENV_STAMP) terminal-tools

# Debian's tmux, at the pinned version when the archive still has it.
TMUX_VERSION ?= 3.3a-3
terminal-tools:
	@command -v tmux >/dev/null || { \
		echo "installing tmux $(TMUX_VERSION) for the terminal tests"; \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update -qq && \
		{ $$SUDO apt-get install -y -qq tmux=$(TMUX_VERSION) || $$SUDO apt-get install -y -qq tmux; }; }
$(VENV_STAMP): $(REQUIREMENTS)
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --upgrade pip==24.3.1
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r $(REQUIREMENTS)
	touch $@

check-format:
	cargo fmt --all -- --check

lint:
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy -p nimbus-local --no-default-features --all-targets -- -D warnings
	# The functions alone, as `cargo lambda` may build one: nimbus-shared with the `aws` feature only.
	cargo clippy -p nimbus-inference -p nimbus-files -p nimbus-batches -p nimbus-worker -p nimbus-poller -- -D warnings

# The binaries first: integration tests start the mocks and the server from the target directory.
test-rust: test-deps
	cargo build --workspace --bins
	cargo test --workspace --all-targets

test-python: test-deps
	cargo build --workspace --bins
	# The functions again as `sam build` builds them (their own features: no OpenAPI document, no
	# SQLite), so the Lambda tests run the routes and wiring that deploy.
	cargo build -p nimbus-inference -p nimbus-files -p nimbus-batches -p nimbus-worker -p nimbus-poller
	$(VENV)/bin/python -m pytest tests/python -q

sam-validate: test-deps
	sam validate --lint --template template.yaml

test: test-deps check-format lint test-rust test-python sam-validate

# Release build of every function as SAM does it for `sam deploy` (needs cargo-lambda + zig from the venv).
sam-build: test-deps
	CARGO_TARGET_DIR=$(LAMBDA_TARGET_DIR) sam build --template template.yaml

bench: test-deps
	bash infra/bench/run-benchmarks.sh

# Batch benchmarks only: validation throughput, a 50,000-line batch locally, AWS requests per batch,
# 10,000-input /batch_inference beside /v1/batches (locally and on the AWS path).
bench-batches: test-deps
	cargo build --release -p nimbus-inference -p nimbus-files -p nimbus-batches -p nimbus-worker -p nimbus-poller
	cargo build --release -p nimbus-local -p nimbus-bench
	$(VENV)/bin/python infra/bench/batch_bench.py --bin-dir $(CARGO_TARGET_DIR)/release

# The local server's memory across repeated hostile runs (the debug build `make run` starts).
bench-memory: test-deps
	cargo build -p nimbus-local
	$(VENV)/bin/python infra/bench/hostile_memory.py --nimbus $(CARGO_TARGET_DIR)/debug/nimbus --runs 5 --settle 12 --doc docs/benchmarks.md

# `/inference` beside `/v1/chat/completions` on the same mock, records stored vs dryrun (section 6).
bench-inference:
	bash infra/bench/inference_bench.sh

# Async inference (section 7): submit and submit → webhook latency, priority with one worker, AWS
# requests and cost per async request (counted port calls).
bench-async: test-deps
	cargo build --release -p nimbus-local -p nimbus-bench
	$(VENV)/bin/python infra/bench/async_bench.py --bin-dir $(CARGO_TARGET_DIR)/release

# LMI provider overhead (section 8): a model on nimbus-mock-lmi beside one on nimbus-mock-openai,
# each mock also measured directly.
bench-lmi:
	bash infra/bench/lmi_bench.sh

# Provider-native batch: AWS and provider requests of a 50,000-line native batch (section 9).
bench-native: test-deps
	cargo build --release -p nimbus-files -p nimbus-batches -p nimbus-worker -p nimbus-poller
	cargo build --release -p nimbus-local
	$(VENV)/bin/python infra/bench/native_batch_bench.py --bin-dir $(CARGO_TARGET_DIR)/release

# Metrics overhead (section 10): p99 with metrics dropped, kept (Prometheus) and written as EMF.
bench-metrics:
	bash infra/bench/metrics_bench.sh

# `make run` on an empty cargo cache and target directory: seconds to the first answer (section 12).
bench-bootstrap:
	bash infra/bench/bootstrap_bench.sh

# The checked-in OpenAPI document, regenerated from the handlers (a test fails while it is stale).
openapi:
	cargo run --quiet -p nimbus-local -- openapi > docs/openapi.json.new
	mv docs/openapi.json.new docs/openapi.json

fmt:
	cargo fmt --all

clean:
	rm -rf .aws-sam .data
