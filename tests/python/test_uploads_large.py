"""A 200 MB file through the SDK's `upload_file_chunked` (4 MiB parts, MD5 checked by the server),
downloaded again as a stream and compared by SHA-256. Nothing large is held in memory: the file is
written in chunks and both sides are hashed while streaming."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import openai
import pytest

import nimbus_testkit as kit

MIB = 1024 * 1024
SIZE = 200 * MIB
PART = 4 * MIB


def test_upload_file_chunked_200_mb(nimbus_server: kit.NimbusServer, client: openai.OpenAI, tmp_path: Path) -> None:
    # The source file, the parts and the assembled file exist at once: about three times SIZE.
    for where in {tmp_path, nimbus_server.data_dir}:
        free = shutil.disk_usage(where).free
        if free < 3 * SIZE + 100 * MIB:
            pytest.skip(f"only {free // MIB} MiB free under {where}; this test needs about {3 * SIZE // MIB} MiB")
    path = tmp_path / "two-hundred.bin"
    started = time.monotonic()
    sha256, md5 = kit.write_random_file(path, SIZE)
    written = time.monotonic()
    sdk = client.with_options(timeout=120.0)
    upload = sdk.uploads.upload_file_chunked(
        file=path, mime_type="application/octet-stream", purpose="assistants", part_size=PART, md5=md5
    )
    uploaded = time.monotonic()
    try:
        assert upload.status == "completed", upload
        assert upload.bytes == SIZE
        assert upload.file is not None
        assert upload.file.bytes == SIZE
        assert upload.file.filename == "two-hundred.bin"
        assert upload.file.status == "processed"
        assert sdk.files.retrieve(upload.file.id).bytes == SIZE
        with sdk.files.with_streaming_response.content(upload.file.id) as response:
            assert response.http_response.status_code == 200
            got_sha256, got_size = kit.sha256_of_chunks(response.iter_bytes(MIB))
        assert got_size == SIZE
        assert got_sha256 == sha256, "the downloaded bytes differ from the uploaded ones"
    finally:
        path.unlink(missing_ok=True)
        if upload.file is not None:
            sdk.files.delete(upload.file.id)
    downloaded = time.monotonic()
    print(
        f"200 MB: write {written - started:.1f}s, upload {uploaded - written:.1f}s "
        f"({SIZE // PART} parts), download+hash {downloaded - uploaded:.1f}s"
    )
