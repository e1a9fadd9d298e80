//! Moving files with a byte progress bar: an input file up (one request when it fits a part, else
//! the Uploads API in parts), and output files down (to `DEST.part`, renamed when complete).

use super::api_client::{id_of, BatchApi};
use super::console::{human_bytes, CliError, Console};
use super::interrupt::Interrupt;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use indicatif::ProgressBar;
use md5::{Digest, Md5};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

/// Parts in flight at once.
const PARTS_IN_FLIGHT: usize = 3;
/// Bodies are sent in slices of this size, so the bar moves while a part is on its way.
const SLICE_BYTES: usize = 64 * 1024;

/// The bytes of one request body counted onto a shared bar. A retry sends the body again: its
/// earlier count is taken back first, so the bar never runs past what arrived.
#[derive(Clone)]
struct CountedBody {
    data: Bytes,
    bar: ProgressBar,
    sent: Arc<AtomicU64>,
}

impl CountedBody {
    fn new(data: Bytes, bar: &ProgressBar) -> Self {
        Self {
            data,
            bar: bar.clone(),
            sent: Arc::new(AtomicU64::new(0)),
        }
    }

    fn body(&self) -> reqwest::Body {
        reqwest::Body::wrap_stream(self.slices())
    }

    /// The body as slices, counted as they are taken.
    fn slices(&self) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
        self.bar.dec(self.sent.swap(0, Ordering::SeqCst));
        let (bar, sent) = (self.bar.clone(), self.sent.clone());
        let data = self.data.clone();
        let slices = (0..data.len()).step_by(SLICE_BYTES).map(move |start| {
            let slice = data.slice(start..(start + SLICE_BYTES).min(data.len()));
            bar.inc(slice.len() as u64);
            sent.fetch_add(slice.len() as u64, Ordering::SeqCst);
            Ok::<Bytes, std::io::Error>(slice)
        });
        futures::stream::iter(slices)
    }
}

/// What to upload: a checked input file.
pub struct Upload<'a> {
    pub path: &'a Path,
    pub filename: &'a str,
    pub bytes: u64,
    /// The MD5 of the bytes that were checked: the server compares it with what it assembled.
    pub md5: &'a str,
    pub part_size: u64,
    pub idempotency_key: &'a str,
}

/// Upload the file; the new file object.
pub async fn upload(
    api: &BatchApi,
    console: &Console,
    interrupt: &Interrupt,
    upload: &Upload<'_>,
) -> Result<Value, CliError> {
    let parts = upload.bytes.div_ceil(upload.part_size).max(1);
    if !console.interactive {
        console.say(format!(
            "uploading {} ({}){}",
            upload.path.display(),
            human_bytes(upload.bytes),
            if parts > 1 {
                format!(" in {parts} parts")
            } else {
                String::new()
            }
        ));
    }
    let bar = console.bytes_bar(Some(upload.bytes), "uploading");
    let file = if parts == 1 {
        interrupt.guard(upload_whole(api, upload, &bar)).await
    } else {
        upload_in_parts(api, interrupt, upload, parts, &bar).await
    };
    bar.finish_and_clear();
    file
}

async fn upload_whole(api: &BatchApi, upload: &Upload<'_>, bar: &ProgressBar) -> Result<Value, CliError> {
    let data = Bytes::from(
        tokio::fs::read(upload.path)
            .await
            .map_err(|e| CliError::io(upload.path, &e))?,
    );
    if hex::encode(Md5::digest(&data)) != upload.md5 {
        return Err(changed_since_checked(upload.path));
    }
    let body = CountedBody::new(data, bar);
    Ok(api
        .create_file(upload.filename, upload.idempotency_key, || body.body(), upload.bytes)
        .await?)
}

fn changed_since_checked(path: &Path) -> CliError {
    CliError::Io {
        path: path.display().to_string(),
        detail: "the file changed after it was checked; nothing was created".to_owned(),
    }
}

/// The Uploads API: create, parts (a few at once, in order), complete with the checked MD5. An
/// upload that fails or is interrupted is cancelled, so its parts do not linger.
async fn upload_in_parts(
    api: &BatchApi,
    interrupt: &Interrupt,
    upload: &Upload<'_>,
    parts: u64,
    bar: &ProgressBar,
) -> Result<Value, CliError> {
    let created = reusable_upload(api, upload).await?;
    let upload_id = id_of(&created, &api.url(&["uploads"]))?;
    if let Some(file) = completed_file(&created) {
        // A repeated submit: the first one uploaded it all already.
        bar.inc(upload.bytes);
        return Ok(file);
    }
    let sent = interrupt.guard(async {
        let part_ids: Vec<String> = futures::stream::iter(0..parts)
            .map(|index| send_part(api, upload, &upload_id, index, bar))
            .buffered(PARTS_IN_FLIGHT)
            .try_collect()
            .await?;
        let key = derived_key(upload.idempotency_key, &format!("complete/{upload_id}"));
        let completed = api.complete_upload(&upload_id, &part_ids, upload.md5, &key).await?;
        completed_file(&completed)
            .ok_or_else(|| CliError::Unexpected(format!("upload {upload_id} completed without a 'file'")))
    });
    match sent.await {
        Ok(file) => Ok(file),
        Err(err) => {
            // Best effort: an upload left pending expires on its own within the hour.
            let _ = api.cancel_upload(&upload_id).await;
            Err(match err {
                CliError::Api(api_err) if matches!(&api_err, super::api_client::ApiError::Refused { param: Some(p), .. } if p == "md5") => {
                    changed_since_checked(upload.path)
                }
                other => other,
            })
        }
    }
}

/// The most uploads a repeated submit walks past (cancelled or expired ones) to find its own.
const MAX_DEAD_UPLOADS: usize = 8;

/// `POST /uploads` under a key derived from the submit's key and the checked bytes' MD5, so a
/// repeated submit of the same file finds the first one's upload (perhaps completed). An upload
/// that was cancelled or expired is passed by: the next key names it, so every repeat walks the
/// same chain to the same live upload.
async fn reusable_upload(api: &BatchApi, upload: &Upload<'_>) -> Result<Value, CliError> {
    let mut step = format!("upload/{}", upload.md5);
    for _ in 0..MAX_DEAD_UPLOADS {
        let key = derived_key(upload.idempotency_key, &step);
        let created = api.create_upload(upload.filename, upload.bytes, &key).await?;
        match created.get("status").and_then(Value::as_str) {
            Some("cancelled" | "expired") => {
                let dead = id_of(&created, &api.url(&["uploads"]))?;
                step = format!("upload/{}/after/{dead}", upload.md5);
            }
            _ => return Ok(created),
        }
    }
    Err(CliError::Unexpected(format!(
        "{MAX_DEAD_UPLOADS} uploads under this --idempotency-key were cancelled or expired; use another key"
    )))
}

/// The file of a completed upload.
fn completed_file(upload: &Value) -> Option<Value> {
    (upload.get("status").and_then(Value::as_str) == Some("completed"))
        .then(|| upload.get("file").filter(|file| file.is_object()).cloned())
        .flatten()
}

/// The key of one step of a submit, derived from the submit's key (whose MD5 stands in for it
/// when the two would not fit one `Idempotency-Key`).
fn derived_key(key: &str, step: &str) -> String {
    let joined = format!("{key}/{step}");
    if joined.len() <= nimbus_shared::idempotency::MAX_KEY_LEN {
        joined
    } else {
        format!("{}/{step}", hex::encode(Md5::digest(key.as_bytes())))
    }
}

async fn send_part(
    api: &BatchApi,
    upload: &Upload<'_>,
    upload_id: &str,
    index: u64,
    bar: &ProgressBar,
) -> Result<String, CliError> {
    let start = index * upload.part_size;
    let len = upload.part_size.min(upload.bytes - start);
    let mut file = tokio::fs::File::open(upload.path)
        .await
        .map_err(|e| CliError::io(upload.path, &e))?;
    file.seek(std::io::SeekFrom::Start(start))
        .await
        .map_err(|e| CliError::io(upload.path, &e))?;
    let size = usize::try_from(len).map_err(|_| CliError::Unexpected(format!("a part of {len} bytes")))?;
    let mut data = vec![0; size];
    file.read_exact(&mut data)
        .await
        .map_err(|e| CliError::io(upload.path, &e))?;
    let body = CountedBody::new(Bytes::from(data), bar);
    Ok(api.add_part(upload_id, || body.body(), len).await?)
}

/// A file being written as `DEST.part`, removed unless it is finished.
struct PartialFile {
    partial: PathBuf,
    finished: bool,
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        if !self.finished {
            let _ = std::fs::remove_file(&self.partial);
        }
    }
}

/// Counts the non-blank lines of a stream as it passes.
#[derive(Default)]
struct LineCounter {
    lines: u64,
    open_line_has_text: bool,
}

impl LineCounter {
    fn feed(&mut self, bytes: &[u8]) {
        for byte in bytes {
            if *byte == b'\n' {
                self.lines += u64::from(std::mem::take(&mut self.open_line_has_text));
            } else if !byte.is_ascii_whitespace() {
                self.open_line_has_text = true;
            }
        }
    }

    fn finish(self) -> u64 {
        self.lines + u64::from(self.open_line_has_text)
    }
}

/// Download a file's content to `dest`; its non-blank lines, counted on the way.
pub async fn download(
    api: &BatchApi,
    console: &Console,
    interrupt: &Interrupt,
    file_id: &str,
    dest: &Path,
    label: &str,
) -> Result<u64, CliError> {
    let mut partial = PartialFile {
        partial: with_suffix(dest, ".part"),
        finished: false,
    };
    let lines = interrupt
        .guard(async {
            let response = api.file_content(file_id).await?;
            let bar = console.bytes_bar(response.content_length(), label);
            let mut out = tokio::fs::File::create(&partial.partial)
                .await
                .map_err(|e| CliError::io(&partial.partial, &e))?;
            let mut body = response.bytes_stream();
            let mut lines = LineCounter::default();
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| {
                    CliError::Api(super::api_client::ApiError::Unreachable {
                        url: api.url(&["files", file_id, "content"]).to_string(),
                        detail: e.to_string(),
                    })
                })?;
                out.write_all(&chunk)
                    .await
                    .map_err(|e| CliError::io(&partial.partial, &e))?;
                lines.feed(&chunk);
                bar.inc(chunk.len() as u64);
            }
            out.sync_all().await.map_err(|e| CliError::io(&partial.partial, &e))?;
            bar.finish_and_clear();
            Ok::<_, CliError>(lines.finish())
        })
        .await?;
    tokio::fs::rename(&partial.partial, dest)
        .await
        .map_err(|e| CliError::io(dest, &e))?;
    partial.finished = true;
    Ok(lines)
}

/// `path` with `suffix` added to its file name.
pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_resent_body_takes_back_its_earlier_count() {
        let bar = ProgressBar::hidden();
        bar.set_length(200_000);
        let body = CountedBody::new(Bytes::from(vec![b'x'; 200_000]), &bar);
        let collect = |body: &CountedBody| {
            body.slices().try_fold(Vec::new(), |mut all, slice| async move {
                all.extend_from_slice(&slice);
                Ok(all)
            })
        };
        let first = collect(&body).await.unwrap();
        assert_eq!(first.len(), 200_000);
        assert_eq!(bar.position(), 200_000);
        // The retry: the count starts again from what the other bodies sent.
        let second = collect(&body).await.unwrap();
        assert_eq!(second, first);
        assert_eq!(bar.position(), 200_000);
    }

    #[test]
    fn lines_are_counted_across_chunks_and_blank_ones_are_not() {
        let mut counter = LineCounter::default();
        for chunk in [&b"{\"a\":1}\n{\"b"[..], b"\":2}\r\n\n  \n{\"c\":3}"] {
            counter.feed(chunk);
        }
        assert_eq!(counter.finish(), 3);
        let mut ended = LineCounter::default();
        ended.feed(b"x\n");
        assert_eq!(ended.finish(), 1);
        assert_eq!(LineCounter::default().finish(), 0);
    }

    #[test]
    fn partial_downloads_sit_beside_their_destination() {
        assert_eq!(
            with_suffix(Path::new("out/results.jsonl"), ".part"),
            PathBuf::from("out/results.jsonl.part")
        );
    }
}
