"""Batch benchmarks, run by infra/bench/batch_bench.py (the command line; see its docstring).

- `common`: workload constants, process and machine-load helpers, the generated inputs and config.
- `validation`: part `validate`, input validation throughput and peak memory.
- `local_batch`: part `local`, a 50,000-line batch on the local server.
- `counting_proxy`: the HTTP proxy in front of moto that counts every AWS request by operation.
- `aws_requests`: parts `aws` and `aws-slow`, a batch on the Lambda path under the RIE.
- `pricing`: public on-demand prices and the cost of the counted requests and Lambda time.
- `render`: the Markdown section of docs/benchmarks.md, and splicing it into a document.

Only `local_batch` and `aws_requests` need the venv (tests/python/nimbus_testkit.py, the OpenAI SDK,
moto), and they import it when a part runs: rendering and splicing work with a plain `python3`.
"""
