#!/usr/bin/env python3
"""Batch benchmarks: input validation throughput and memory, a 50,000-line batch on the local
server, and the AWS requests (and their cost) of a 50,000-line batch on the Lambda path.

Three parts, each bounded to a few minutes:

1. `validate`: `nimbus-validate-bench` (infra/bench/src/validate_bench.rs) streams generated JSONL
   files of 50, 100 and 200 MB (50,000 lines each) from disk through the engine's
   `validate_input`, as the `validate` job does; MB/s and peak RSS (VmHWM) per size.
2. `local`: a release `nimbus serve` (fresh data dir, poller every second) with a copy of
   infra/config/nimbus.toml plus a model `dummy-20ms` (20 ms per answer); a 50,000-line chat batch
   uploaded and created with the OpenAI SDK and polled every 0.2 s; wall time against the ideal
   lines × 20 ms ÷ (NIMBUS_BATCH_WORKERS × line_concurrency).
3. `aws`: moto behind a counting HTTP proxy (every request the Lambda binaries make goes through it
   and is counted per service and operation); `nimbus-files`, `nimbus-batches`, `nimbus-worker` and
   `nimbus-poller` under the Runtime Interface Emulator as tests/python/test_batches_lambda_*.py
   runs them; this script plays the SQS event source and the EventBridge schedule. The same
   50,000-line batch goes in by a direct upload and runs to `completed`; the counts are priced at
   public on-demand prices.

The section is written into docs/benchmarks.md between the BEGIN/END markers (batchbench/render.py;
anything else in the file is left alone; without markers it is appended). Raw results go to --results.
The parts, the counting proxy, pricing and rendering live in infra/bench/batchbench/.

    python infra/bench/batch_bench.py                       # all three parts, release binaries
    python infra/bench/batch_bench.py --parts validate,local
    python infra/bench/batch_bench.py --render-only --results ~/.cache/nimbus/bench/batches.json
    python infra/bench/batch_bench.py --splice-from OLD.md  # put OLD.md's section back into --doc
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from batchbench.aws_requests import part_aws
from batchbench.common import REPO, SLOW_LINES, SLOW_MODEL, MachineLoad, SkipPart, log, wait_for_quiet
from batchbench.local_batch import part_local
from batchbench.render import extract, render, splice
from batchbench.validation import part_validate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache" / "nimbus" / "target"))
    parser.add_argument("--bin-dir", type=Path, default=target / "release")
    parser.add_argument("--parts", default="validate,local,aws,aws-slow")
    parser.add_argument("--sizes", default="50,100,200", help="validation file sizes, MB")
    parser.add_argument("--validate-runs", type=int, default=3)
    parser.add_argument(
        "--quiet-wait", type=float, default=180, help="seconds to wait for an idle machine before each part"
    )
    parser.add_argument("--local-runs", type=int, default=3, help="50,000-line batches on the local server")
    parser.add_argument("--aws-workers", type=int, default=4, help="worker instances the event source runs at once")
    parser.add_argument("--timeout", type=float, default=240, help="seconds per batch run")
    parser.add_argument("--doc", type=Path, default=REPO / "docs" / "benchmarks.md")
    parser.add_argument(
        "--results", type=Path, default=Path.home() / ".cache" / "nimbus" / "bench" / "batches.json"
    )
    parser.add_argument("--render-only", action="store_true", help="re-render the section from --results")
    parser.add_argument("--splice-from", type=Path, help="copy the section of this document into --doc")
    args = parser.parse_args()

    if args.splice_from:
        section = extract(args.splice_from)
        if section:
            splice(args.doc, section)
            log(f"kept the batches section of {args.splice_from} in {args.doc}")
        return 0
    if args.render_only:
        results = json.loads(args.results.read_text())
    else:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=REPO).returncode != 0
        rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
        results = {
            "meta": {
                "measured_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                "nproc": os.cpu_count(),
                "rustc": rustc or "rustc unknown",
                "commit": (commit.stdout.strip() or "unknown") + (" + uncommitted changes" if dirty else ""),
                "results_path": str(args.results).replace(str(Path.home()), "~"),
            },
            "parts": {},
        }
        # Keep the parts not rerun this time.
        if args.results.exists():
            with contextlib.suppress(ValueError, KeyError):
                results["parts"].update(json.loads(args.results.read_text())["parts"])
        scratch = Path(tempfile.mkdtemp(prefix="nimbus-batch-bench-"))
        try:
            for name in [p.strip() for p in args.parts.split(",") if p.strip()]:
                waited = wait_for_quiet(args.quiet_wait)
                log(f"part {name}" + (f" (after waiting {waited:.0f}s for a quiet machine)" if waited else ""))
                started = time.perf_counter()
                load = MachineLoad()
                try:
                    if name == "validate":
                        part = part_validate(
                            args.bin_dir, scratch, [int(s) for s in args.sizes.split(",")], args.validate_runs
                        )
                    elif name == "local":
                        part = part_local(args.bin_dir, scratch, args.timeout, args.local_runs)
                    elif name == "aws":
                        part = part_aws(args.bin_dir, scratch, args.timeout, args.aws_workers)
                    elif name == "aws-slow":
                        part = part_aws(
                            args.bin_dir,
                            scratch,
                            args.timeout,
                            args.aws_workers,
                            lines=SLOW_LINES,
                            model=SLOW_MODEL,
                        )
                    else:
                        raise SystemExit(f"unknown part {name}")
                except SkipPart as skip:
                    log(f"part {name} skipped: {skip}")
                    part = {"skipped": str(skip)}
                part["elapsed_s"] = time.perf_counter() - started
                part["other_cpu_s"] = load.other_cpu_s()
                part["quiet_waited_s"] = waited
                results["parts"][name] = part
        finally:
            subprocess.run(["rm", "-rf", str(scratch)], check=False)
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(results, indent=1))
    section = render(results)
    splice(args.doc, section)
    log(f"wrote the batches section of {args.doc}")
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
