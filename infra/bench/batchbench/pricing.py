"""Public on-demand prices and what the counted requests and the functions' Lambda time cost."""

from __future__ import annotations

import math
from typing import Any

from .common import MEMORY_MB

# Public on-demand prices (us-east-1), in dollars.
PRICES = {
    "s3_put_per_1k": 0.005,  # PUT, COPY, POST, LIST
    "s3_get_per_1k": 0.0004,  # GET, HEAD and all other requests
    "ddb_wru_per_m": 0.625,
    "ddb_rru_per_m": 0.125,
    "sqs_per_m": 0.40,
    "lambda_gb_s": 0.0000166667,  # x86_64
    "lambda_req_per_m": 0.20,
    "apigw_http_per_m": 1.00,
}

S3_FREE = {"DeleteObject", "AbortMultipartUpload"}  # DELETE and CANCEL requests are free
S3_PUT_CLASS = {
    "PutObject",
    "CopyObject",
    "UploadPart",
    "UploadPartCopy",
    "CreateMultipartUpload",
    "CompleteMultipartUpload",
    "ListObjectsV2",
    "ListObjects",
    "ListMultipartUploads",
    "ListParts",
    "DeleteObjects",  # a POST: priced as one here, to stay on the safe side
}


def price_entries(entries: list[dict[str, Any]], extra_sqs: int = 0) -> dict[str, Any]:
    s3_put = sum(1 for e in entries if e["service"] == "S3" and e["operation"] in S3_PUT_CLASS)
    s3_free = sum(1 for e in entries if e["service"] == "S3" and e["operation"] in S3_FREE)
    s3_get = sum(1 for e in entries if e["service"] == "S3") - s3_put - s3_free
    wru = sum(e["wru"] for e in entries)
    rru = sum(e["rru"] for e in entries)
    sqs = sum(1 for e in entries if e["service"] == "SQS") + extra_sqs
    cost = {
        "s3": s3_put / 1000 * PRICES["s3_put_per_1k"] + s3_get / 1000 * PRICES["s3_get_per_1k"],
        "dynamodb": wru / 1e6 * PRICES["ddb_wru_per_m"] + rru / 1e6 * PRICES["ddb_rru_per_m"],
        "sqs": sqs / 1e6 * PRICES["sqs_per_m"],
    }
    return {
        "s3_put_class": s3_put,
        "s3_get_class": s3_get,
        "s3_free": s3_free,
        "wru": wru,
        "rru": rru,
        "sqs": sqs,
        "cost": cost,
        "total": sum(cost.values()),
    }


def lambda_cost(part: dict[str, Any]) -> dict[str, Any]:
    rows = {}
    for name, durations in part["durations_s"].items():
        memory = MEMORY_MB["batches" if name == "status" else name]
        gb_s = sum(math.ceil(d * 1000) / 1000 for d in durations) * memory / 1024
        rows[name] = {
            "invocations": len(durations),
            "seconds": sum(durations),
            "memory_mb": memory,
            "gb_s": gb_s,
            "cost": gb_s * PRICES["lambda_gb_s"] + len(durations) / 1e6 * PRICES["lambda_req_per_m"],
        }
    return rows
