#!/usr/bin/env python3
"""Batch benchmarks: input validation throughput and memory, a 50,000-line batch on the local
server, the AWS requests (and their cost) of a 50,000-line batch on the Lambda path, and a
10,000-input `/batch_inference` batch beside the same work through `/v1/batches`.

The parts, each bounded to a few minutes:

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
   public on-demand prices. `aws-slow`: the same with a 2 s model and 4,000 lines.
4. `tz-local`: on the local server as in 2, with a chat function `bench_batch` (system template) on
   `dummy-20ms`: a 10,000-input `POST /batch_inference` polled every 0.2 s until every inference is
   back, against the ideal; beside it the same 10,000 requests as a `/v1/batches` batch; records
   counted, peak RSS.
5. `tz-aws`: the same 10,000 inputs through the batches function on the stack of 3 (POST, pending
   polls, the results in pages), beside a 10,000-line `/v1/batches` batch: AWS requests and cost.

Parts 1-3 (and `aws-slow`) make the batches section of docs/benchmarks.md, between its BEGIN/END
markers (batchbench/render.py); 4-5 make subsection 4.5 between its own markers right after it
(batchbench/render_tz.py). A block is rewritten only when the results hold one of its parts, so a
run of `--parts tz-local,tz-aws` leaves the other section as it is; anything else in the file is
left alone. Raw results go to --results (parts not rerun are kept from it). The parts, the
counting proxy, pricing and rendering live in infra/bench/batchbench/.

    python infra/bench/batch_bench.py                       # all parts, release binaries
    python infra/bench/batch_bench.py --parts validate,local
    python infra/bench/batch_bench.py --parts tz-local,tz-aws
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
from batchbench.render_tz import BEGIN as TZ_BEGIN
from batchbench.render_tz import END as TZ_END
from batchbench.render_tz import PARTS as TZ_PARTS
from batchbench.render_tz import render_tz, splice_tz
from batchbench.tz_aws import part_tz_aws
from batchbench.tz_local import part_tz_local
from batchbench.validation import part_validate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache" / "nimbus" / "target"))
    parser.add_argument("--bin-dir", type=Path, default=target / "release")
    parser.add_argument("--parts", default="validate,local,aws,aws-slow,tz-local,tz-aws")
    parser.add_argument("--sizes", default="50,100,200", help="validation file sizes, MB")
    parser.add_argument("--validate-runs", type=int, default=3)
    parser.add_argument(
        "--quiet-wait", type=float, default=180, help="seconds to wait for an idle machine before each part"
    )
    parser.add_argument("--local-runs", type=int, default=3, help="50,000-line batches on the local server")
    parser.add_argument("--tz-runs", type=int, default=3, help="runs of each API in part tz-local")
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
        tz_section = extract(args.splice_from, TZ_BEGIN, TZ_END)
        if tz_section:
            splice_tz(args.doc, tz_section)
            log(f"kept the /batch_inference subsection of {args.splice_from} in {args.doc}")
        return 0
    if args.render_only:
        results = json.loads(args.results.read_text())
        ran = set(results["parts"])
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
        ran = {p.strip() for p in args.parts.split(",") if p.strip()}
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
                    elif name == "tz-local":
                        part = part_tz_local(args.bin_dir, scratch, args.timeout, args.tz_runs)
                    elif name == "tz-aws":
                        part = part_tz_aws(args.bin_dir, scratch, args.timeout, args.aws_workers)
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
                part["meta"] = {k: results["meta"][k] for k in ("measured_at", "commit")}
                results["parts"][name] = part
                # Saved after every part, so that a part that fails later loses nothing measured.
                args.results.parent.mkdir(parents=True, exist_ok=True)
                args.results.write_text(json.dumps(results, indent=1))
        finally:
            subprocess.run(["rm", "-rf", str(scratch)], check=False)
    # A section is rewritten only when one of its parts ran (or on --render-only, when it has results).
    if any(name not in TZ_PARTS for name in ran):
        section = render(results)
        splice(args.doc, section)
        log(f"wrote the batches section of {args.doc}")
        print(section)
    tz_section = render_tz(results)
    if tz_section and ran & set(TZ_PARTS):
        splice_tz(args.doc, tz_section)
        log(f"wrote the /batch_inference subsection of {args.doc}")
        print(tz_section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
