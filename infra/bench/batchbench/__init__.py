"""Batch benchmarks, run by infra/bench/batch_bench.py (the command line; see its docstring).

- `common`: workload constants, process and machine-load helpers, the generated inputs and config.
- `validation`: part `validate`, input validation throughput and peak memory.
- `local_batch`: part `local`, a 50,000-line batch on the local server.
- `counting_proxy`: the HTTP proxy in front of moto that counts every AWS request by operation.
- `aws_requests`: parts `aws` and `aws-slow`, a batch on the Lambda path under the RIE.
- `pricing`: public on-demand prices and the cost of the counted requests and Lambda time.
- `tz_client`: a plain HTTP client for `/batch_inference` (submit, poll, pages, checks).
- `tz_local`: part `tz-local`, a 10,000-input `/batch_inference` batch beside `/v1/batches` locally.
- `tz_aws`: part `tz-aws`, the same on the Lambda path (the stack of `aws_requests`).
- `render`: the Markdown section of docs/benchmarks.md, and splicing it into a document.
- `render_tz`: subsection 4.5 (`/batch_inference`), in its own markers after that section.

Only the parts that run batches (`local_batch`, `aws_requests`, `tz_*`) need the venv (tests/python/nimbus_testkit.py, the OpenAI SDK,
moto), and they import it when a part runs: rendering and splicing work with a plain `python3`.
"""
