//! The upstream's OpenAI Batch API (`/files`, `/batches`) as [`NativeBatchApi`]. Request lines
//! carry exactly the bodies of the synchronous calls, and output lines are read like their answers.

use super::{read_chat_answer, read_embeddings, OpenAiProvider};
use crate::model::{ModelRequest, ModelResponse};
use crate::openai::embeddings::EmbeddingRequest;
use crate::providers::native_batch::{NativeBatchApi, ProviderBatch, ProviderBatchStatus, ProviderCounts};
use crate::providers::{CallContext, Embeddings, ProviderError};
use async_trait::async_trait;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// Uploading an input file or downloading an output file may take this long (they reach 200 MB):
/// re-exported as `providers::openai::FILE_TRANSFER_TIMEOUT`; with the margin to save what the
/// step did it must fit the worker Lambda's timeout (a test reads template.yaml). The batch
/// engine also cuts each transfer at its invocation's own deadline.
pub(crate) const FILE_TRANSFER_TIMEOUT: Duration = Duration::from_secs(240);
/// Batches asked for per page when listing them (OpenAI's most).
const BATCH_PAGE_SIZE: u32 = 100;
/// A listing that has not ended after this many pages is not read further.
const MAX_LIST_PAGES: usize = 1_000;

/// A batch object as the upstream sends it.
#[derive(Deserialize)]
struct WireBatch {
    id: String,
    status: ProviderBatchStatus,
    #[serde(default)]
    request_counts: Option<ProviderCounts>,
    #[serde(default)]
    output_file_id: Option<String>,
    #[serde(default)]
    error_file_id: Option<String>,
    #[serde(default)]
    metadata: Option<BTreeMap<String, String>>,
    #[serde(default)]
    errors: Option<WireBatchErrors>,
    #[serde(default)]
    created_at: i64,
}

#[derive(Deserialize)]
struct WireBatchErrors {
    #[serde(default)]
    data: Vec<WireBatchError>,
}

#[derive(Deserialize)]
struct WireBatchError {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    line: Option<u64>,
}

impl WireBatchError {
    /// `code: message (line N)`, leaving out what the upstream did not say.
    fn describe(&self) -> String {
        let mut text = match (&self.code, &self.message) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            (Some(only), None) | (None, Some(only)) => only.clone(),
            (None, None) => "unknown error".to_owned(),
        };
        if let Some(line) = self.line {
            text.push_str(&format!(" (line {line})"));
        }
        text
    }
}

impl From<WireBatch> for ProviderBatch {
    fn from(wire: WireBatch) -> Self {
        Self {
            id: wire.id,
            status: wire.status,
            counts: wire.request_counts.unwrap_or_default(),
            output_file_id: wire.output_file_id,
            error_file_id: wire.error_file_id,
            metadata: wire.metadata.unwrap_or_default(),
            errors: wire
                .errors
                .map(|errors| errors.data.iter().map(WireBatchError::describe).collect())
                .unwrap_or_default(),
            created_at: wire.created_at,
        }
    }
}

/// A file object (only what is read of it).
#[derive(Deserialize)]
struct WireFile {
    id: String,
    #[serde(default)]
    filename: String,
}

/// One page of a listing.
#[derive(Deserialize)]
struct WirePage<T> {
    data: Vec<T>,
    #[serde(default)]
    has_more: bool,
}

impl OpenAiProvider {
    /// The URL of `collection/id/action…` under the API base, with `id` (the upstream's, or a
    /// stored one) escaped as one path segment.
    fn item_url(&self, collection: &str, id: &str, action: Option<&str>) -> Result<url::Url, ProviderError> {
        let mut url = url::Url::parse(&self.url(collection))
            .map_err(|e| ProviderError::Misconfigured(format!("api_base is not a URL: {e}")))?;
        url.path_segments_mut()
            .map_err(|()| ProviderError::Misconfigured("api_base cannot take a path".to_owned()))?
            .push(id)
            .extend(action);
        Ok(url)
    }

    /// Send `builder` (bounded by `timeout`) and read the 2xx answer's body as `T`.
    async fn call_json<T: DeserializeOwned>(
        &self,
        builder: reqwest::RequestBuilder,
        timeout: Duration,
        what: &str,
        ctx: CallContext<'_>,
    ) -> Result<T, ProviderError> {
        let bytes = self.call_bytes(builder, timeout, ctx).await?;
        serde_json::from_slice(&bytes).map_err(|e| ProviderError::InvalidResponse(format!("{what}: {e}")))
    }

    /// Send `builder` (bounded by `timeout`) and read the 2xx answer's body.
    async fn call_bytes(
        &self,
        builder: reqwest::RequestBuilder,
        timeout: Duration,
        ctx: CallContext<'_>,
    ) -> Result<Bytes, ProviderError> {
        let request = self.upstream.prepare(builder, Some(timeout), &[], ctx).await?;
        let response = self.upstream.send(request).await?;
        response
            .bytes()
            .await
            .map_err(|e| self.upstream.transport_error_within(&e, timeout))
    }

    /// The pages of a listing at `path` (with `query`), one `after` cursor at a time, until
    /// `visit` answers something or the listing ends.
    async fn search_listing<T, R>(
        &self,
        path: &str,
        query: &[(&str, String)],
        ctx: CallContext<'_>,
        mut visit: impl FnMut(T) -> Search<R> + Send,
    ) -> Result<Option<R>, ProviderError>
    where
        T: DeserializeOwned + Listed + Send,
        R: Send,
    {
        let mut after: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let mut builder = self.upstream.client.get(self.url(path)).query(query);
            if let Some(cursor) = &after {
                builder = builder.query(&[("after", cursor)]);
            }
            let page: WirePage<T> = self.call_json(builder, self.upstream.timeout, path, ctx).await?;
            let last = page.data.last().map(|item| item.id().to_owned());
            for item in page.data {
                match visit(item) {
                    Search::Found(found) => return Ok(Some(found)),
                    Search::Stop => return Ok(None),
                    Search::Next => {}
                }
            }
            match last {
                Some(last) if page.has_more && after.as_ref() != Some(&last) => after = Some(last),
                _ => return Ok(None),
            }
        }
        Err(ProviderError::InvalidResponse(format!(
            "the listing of {path} did not end after {MAX_LIST_PAGES} pages"
        )))
    }
}

/// What a listing search does after one item.
enum Search<R> {
    Found(R),
    Next,
    /// Nothing further in the listing can match.
    Stop,
}

/// An item of a listing, and its cursor.
trait Listed {
    fn id(&self) -> &str;
}

impl Listed for WireBatch {
    fn id(&self) -> &str {
        &self.id
    }
}

impl Listed for WireFile {
    fn id(&self) -> &str {
        &self.id
    }
}

/// A 404 as `None`.
fn found<T>(result: Result<T, ProviderError>) -> Result<Option<T>, ProviderError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(ProviderError::Http { status: 404, .. }) => Ok(None),
        Err(error) => Err(error),
    }
}

#[async_trait]
impl NativeBatchApi for OpenAiProvider {
    fn chat_body(&self, request: &ModelRequest) -> Result<Value, ProviderError> {
        self.upstream_chat_body(request, false)
    }

    fn embeddings_body(&self, request: &EmbeddingRequest) -> Result<Value, ProviderError> {
        Ok(self.upstream_embeddings_body(request))
    }

    fn chat_answer(&self, body: &Value) -> Result<ModelResponse, ProviderError> {
        read_chat_answer(body.to_string().as_bytes())
    }

    fn embeddings_answer(&self, body: &Value) -> Result<Embeddings, ProviderError> {
        read_embeddings(body.to_string().as_bytes())
    }

    async fn upload_file(&self, filename: &str, content: Bytes, ctx: CallContext<'_>) -> Result<String, ProviderError> {
        let length = content.len() as u64;
        let file = reqwest::multipart::Part::stream_with_length(content, length)
            .file_name(filename.to_owned())
            .mime_str("application/octet-stream")
            .map_err(|e| self.upstream.transport_error(&e))?;
        let form = reqwest::multipart::Form::new()
            .text("purpose", "batch")
            .part("file", file);
        let builder = self.upstream.client.post(self.url("files")).multipart(form);
        let file: WireFile = self.call_json(builder, FILE_TRANSFER_TIMEOUT, "file", ctx).await?;
        Ok(file.id)
    }

    async fn find_file(&self, filename: &str, ctx: CallContext<'_>) -> Result<Option<String>, ProviderError> {
        let query = [("purpose", "batch".to_owned())];
        self.search_listing("files", &query, ctx, |file: WireFile| {
            if file.filename == filename {
                Search::Found(file.id)
            } else {
                Search::Next
            }
        })
        .await
    }

    async fn create_batch(
        &self,
        input_file_id: &str,
        endpoint: &str,
        metadata: &BTreeMap<String, String>,
        idempotency_key: &str,
        ctx: CallContext<'_>,
    ) -> Result<ProviderBatch, ProviderError> {
        let mut body = json!({
            "input_file_id": input_file_id,
            "endpoint": endpoint,
            "completion_window": "24h",
        });
        if !metadata.is_empty() {
            body["metadata"] = json!(metadata);
        }
        let builder = self
            .upstream
            .client
            .post(self.url("batches"))
            .header("Idempotency-Key", idempotency_key)
            .json(&body);
        let batch: WireBatch = self.call_json(builder, self.upstream.timeout, "batch", ctx).await?;
        Ok(batch.into())
    }

    async fn find_batch(
        &self,
        key: &str,
        value: &str,
        created_after: i64,
        ctx: CallContext<'_>,
    ) -> Result<Option<ProviderBatch>, ProviderError> {
        let query = [("limit", BATCH_PAGE_SIZE.to_string())];
        self.search_listing("batches", &query, ctx, |batch: WireBatch| {
            if batch.created_at < created_after {
                Search::Stop
            } else if batch
                .metadata
                .as_ref()
                .and_then(|metadata| metadata.get(key))
                .is_some_and(|found| found == value)
            {
                Search::Found(batch.into())
            } else {
                Search::Next
            }
        })
        .await
    }

    async fn batch(&self, id: &str, ctx: CallContext<'_>) -> Result<Option<ProviderBatch>, ProviderError> {
        let builder = self.upstream.client.get(self.item_url("batches", id, None)?);
        let read = self.call_json::<WireBatch>(builder, self.upstream.timeout, "batch", ctx);
        found(read.await).map(|batch| batch.map(ProviderBatch::from))
    }

    async fn cancel_batch(&self, id: &str, ctx: CallContext<'_>) -> Result<Option<ProviderBatch>, ProviderError> {
        let builder = self.upstream.client.post(self.item_url("batches", id, Some("cancel"))?);
        let cancel = self.call_json::<WireBatch>(builder, self.upstream.timeout, "batch", ctx);
        match found(cancel.await) {
            Ok(batch) => Ok(batch.map(ProviderBatch::from)),
            // Refused, perhaps because the batch has ended: answer it as it ended.
            Err(
                refusal @ ProviderError::Http {
                    status: 400 | 409 | 422,
                    ..
                },
            ) => match self.batch(id, ctx).await? {
                Some(batch) if batch.status.is_terminal() || batch.status == ProviderBatchStatus::Cancelling => {
                    Ok(Some(batch))
                }
                Some(_) => Err(refusal),
                None => Ok(None),
            },
            Err(error) => Err(error),
        }
    }

    async fn file_content(&self, id: &str, ctx: CallContext<'_>) -> Result<Option<Bytes>, ProviderError> {
        // A redirect (e.g. to a presigned URL) is followed; reqwest drops `Authorization` when it
        // leads to another host.
        let builder = self.upstream.client.get(self.item_url("files", id, Some("content"))?);
        found(self.call_bytes(builder, FILE_TRANSFER_TIMEOUT, ctx).await)
    }

    async fn delete_file(&self, id: &str, ctx: CallContext<'_>) -> Result<(), ProviderError> {
        let builder = self.upstream.client.delete(self.item_url("files", id, None)?);
        found(self.call_bytes(builder, self.upstream.timeout, ctx).await).map(drop)
    }
}

#[cfg(test)]
#[path = "batch_api_tests.rs"]
mod tests;
