"""Part `validate`: `nimbus-validate-bench` streams generated JSONL files from disk through the
engine's `validate_input`; MB/s and peak RSS per file size."""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path
from typing import Any

from .common import LINES, SkipPart, log, write_input


def part_validate(bin_dir: Path, scratch: Path, sizes_mb: list[int], runs: int) -> dict[str, Any]:
    binary = bin_dir / "nimbus-validate-bench"
    if not binary.is_file():
        raise SkipPart(f"{binary} is missing (cargo build --release -p nimbus-bench)")
    store = scratch / "validate-store"
    (store / "objects").mkdir(parents=True, exist_ok=True)
    rows = []
    for size_mb in sizes_mb:
        key = f"input-{size_mb}mb.jsonl"
        path = store / "objects" / key
        size = write_input(path, lines=LINES, size=size_mb * 1_000_000, model="dummy")
        samples = []
        for _ in range(runs):
            out = subprocess.run(
                [str(binary), "--store", str(store), "--key", key, "--models", "dummy"],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            )
            sample = json.loads(out.stdout)
            if sample["lines"] != LINES or sample["errors"] or sample["bytes"] != size:
                raise SystemExit(f"validation of {key} went wrong: {sample}")
            samples.append(sample)
        path.unlink()
        rows.append(
            {
                "size_mb": size_mb,
                "bytes": size,
                "lines": LINES,
                "chunks": samples[0]["chunks"],
                "runs": runs,
                "mb_per_s": [s["mb_per_s"] for s in samples],
                "seconds": [s["seconds"] for s in samples],
                "rss_before_kb": max(s["rss_before_kb"] for s in samples),
                "peak_rss_kb": [s["peak_rss_kb"] for s in samples],
            }
        )
        log(
            f"validate {size_mb} MB: {statistics.median(rows[-1]['mb_per_s']):.0f} MB/s, "
            f"peak {max(rows[-1]['peak_rss_kb']) / 1024:.1f} MiB"
        )
    return {"rows": rows}
