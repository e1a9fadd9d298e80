"""A plain HTTP client for `/batch_inference` (TensorZero's client has no batch method): submit,
poll until the batch ends, fetch every inference (paged with the `limit`/`after` extension when
asked), and check what came back against what went in."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .common import TZ_FUNCTION, tz_inputs


def submit_body(count: int) -> dict[str, Any]:
    return {"function_name": TZ_FUNCTION, "inputs": tz_inputs(count)}


class BatchInferenceClient:
    """`POST /batch_inference` and `GET /batch_inference/{id}` on one server (or relay)."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 300):
        import requests  # noqa: PLC0415 - needs the venv

        self.base_url = base_url.rstrip("/")
        self.session = requests.Session()
        self.session.headers["authorization"] = f"Bearer {api_key}"
        self.timeout = timeout

    def submit(self, count: int) -> dict[str, Any]:
        response = self.session.post(f"{self.base_url}/batch_inference", json=submit_body(count), timeout=self.timeout)
        if response.status_code != 200:
            raise SystemExit(f"POST /batch_inference: {response.status_code} {response.text[:500]}")
        return response.json()

    def get(self, batch_id: str, **query: Any) -> tuple[dict[str, Any], int]:
        """One poll; the reply and its size in bytes."""
        response = self.session.get(f"{self.base_url}/batch_inference/{batch_id}", params=query, timeout=self.timeout)
        if response.status_code != 200:
            raise SystemExit(f"GET /batch_inference/{batch_id} {query}: {response.status_code} {response.text[:500]}")
        return response.json(), len(response.content)

    def poll_until_ended(
        self,
        batch_id: str,
        *,
        timeout: float,
        interval: float = 0.2,
        query: dict[str, Any] | None = None,
        between: Callable[[], None] | None = None,
        on_ended: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """Poll (with `query`) every `interval` s until the reply is not `pending`; `between` runs
        before each poll (the AWS part plays the schedule there), `on_ended` right after the poll
        that saw the end. Returns the last reply and the timings, from the call."""
        t0 = time.perf_counter()
        polls = 0
        while True:
            if between is not None:
                between()
            started = time.perf_counter()
            reply, size = self.get(batch_id, **(query or {}))
            polls += 1
            if reply.get("status") != "pending":
                if on_ended is not None:
                    on_ended()
                return {
                    "reply": reply,
                    "reply_bytes": size,
                    "polls": polls,
                    "ended_poll_started_s": started - t0,
                    "ended_poll_returned_s": time.perf_counter() - t0,
                }
            if time.perf_counter() - t0 > timeout:
                raise SystemExit(f"/batch_inference batch {batch_id} still pending after {timeout:.0f}s")
            time.sleep(interval)

    def fetch_rest(self, batch_id: str, first: dict[str, Any], limit: int) -> tuple[list[dict[str, Any]], int, int]:
        """The inferences of `first` (a page of `limit`) and of every page after it; with the
        number of pages and their bytes (beyond the first)."""
        inferences = list(first.get("inferences") or [])
        page = first
        pages = 1
        size = 0
        while page.get("has_more"):
            page, page_size = self.get(batch_id, limit=limit, after=page["next_after"])
            inferences += page.get("inferences") or []
            pages += 1
            size += page_size
        return inferences, pages, size


def check_inferences(created: dict[str, Any], reply: dict[str, Any], inferences: list[dict[str, Any]]) -> None:
    """Every input answered once, in input order, with the ids the submission gave."""
    if reply.get("status") != "completed":
        raise SystemExit(f"/batch_inference batch ended {reply.get('status')}: {str(reply)[:500]}")
    got = [i.get("inference_id") for i in inferences]
    if got != created["inference_ids"]:
        raise SystemExit(f"/batch_inference: {len(got)} inferences back for {len(created['inference_ids'])} inputs")
    episodes = [i.get("episode_id") for i in inferences]
    if episodes != created["episode_ids"]:
        raise SystemExit("/batch_inference: the episode ids back differ from the submission's")
    empty = [i["inference_id"] for i in inferences if not i.get("content")]
    if empty:
        raise SystemExit(f"/batch_inference: {len(empty)} inferences without content, e.g. {empty[0]}")

