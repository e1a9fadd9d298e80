//! A client of an OpenAI-compatible Files and Batch API: Nimbus's, or any other server's.
//!
//! Calls that create something carry an `Idempotency-Key` (servers that do not know the header
//! ignore it), so every call here is safe to retry: connection failures, 408, 429 and 5xx are
//! retried with backoff, honouring `Retry-After`.

use bytes::Bytes;
use nimbus_shared::openai::batches::CreateBatchRequest;
use nimbus_shared::user_text::error_chain;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;

/// Attempts per call (the first and three retries).
const ATTEMPTS: u32 = 4;
/// The first retry waits this long; each next one twice as long.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// A `Retry-After` longer than this is not waited for.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// A call that moves no file may take this long.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The server answered with an error.
    #[error("{message} (HTTP {status})")]
    Refused {
        status: u16,
        message: String,
        code: Option<String>,
        param: Option<String>,
    },
    /// No answer: connection refused, reset, timed out.
    #[error("could not reach {url}: {detail}")]
    Unreachable { url: String, detail: String },
    /// An answer that is not what the API promises.
    #[error("unexpected answer from {url}: {detail}")]
    Unexpected { url: String, detail: String },
    /// `--base-url` cannot be used.
    #[error("invalid base URL '{0}': it must be an http(s) URL such as http://127.0.0.1:3000/v1")]
    BadBaseUrl(String),
}

impl ApiError {
    /// The error as the `error` member of a `--json` document.
    pub fn to_json(&self) -> Value {
        match self {
            Self::Refused {
                status,
                message,
                code,
                param,
            } => json!({"message": message, "type": "api_error", "status": status, "code": code, "param": param}),
            Self::Unreachable { .. } => json!({"message": self.to_string(), "type": "connection_error"}),
            Self::Unexpected { .. } | Self::BadBaseUrl(_) => {
                json!({"message": self.to_string(), "type": "client_error"})
            }
        }
    }
}

/// An OpenAI error envelope (every field optional: servers differ).
#[derive(Deserialize, Default)]
struct ErrorEnvelope {
    #[serde(default)]
    error: Option<ErrorBody>,
}

#[derive(Deserialize, Default)]
struct ErrorBody {
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    code: Option<Value>,
    #[serde(default)]
    param: Option<String>,
}

/// `GET /models`' answer.
#[derive(Deserialize)]
struct ModelList {
    data: Vec<Value>,
}

/// The Files and Batch API at one base URL (`…/v1`).
#[derive(Clone)]
pub struct BatchApi {
    http: reqwest::Client,
    base: url::Url,
    api_key: Option<String>,
}

impl BatchApi {
    pub fn new(base_url: &str, api_key: Option<String>) -> Result<Self, ApiError> {
        let base = url::Url::parse(base_url)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https") && !url.cannot_be_a_base())
            .ok_or_else(|| ApiError::BadBaseUrl(base_url.to_owned()))?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(CALL_TIMEOUT)
            .user_agent(concat!("nimbus-batch/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ApiError::Unexpected {
                url: base_url.to_owned(),
                detail: format!("could not set up an HTTP client: {e}"),
            })?;
        Ok(Self {
            http,
            base,
            api_key: api_key.filter(|key| !key.is_empty()),
        })
    }

    /// `base/segments…`, each segment (ids among them) escaped as one path segment.
    pub fn url(&self, segments: &[&str]) -> url::Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    fn request(&self, method: Method, url: url::Url) -> RequestBuilder {
        let request = self.http.request(method, url);
        match &self.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// Send what `build` makes (afresh for each attempt) until an answer that is not worth
    /// retrying; a 2xx answer is returned, any other becomes [`ApiError::Refused`].
    pub async fn send(&self, build: impl Fn() -> RequestBuilder) -> Result<Response, ApiError> {
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 1;
        loop {
            let retries_left = attempt < ATTEMPTS;
            let request = build().build().map_err(|e| ApiError::Unexpected {
                url: self.base.to_string(),
                detail: format!("could not make the request: {}", error_chain(&e)),
            })?;
            let url = request.url().to_string();
            let wait = match self.http.execute(request).await {
                Ok(response) if response.status().is_success() => return Ok(response),
                Ok(response) if retries_left && retryable(response.status()) => {
                    retry_after(response.headers()).unwrap_or(backoff)
                }
                Ok(response) => return Err(refusal(response).await),
                Err(err) if retries_left && (err.is_connect() || err.is_timeout() || err.is_request()) => backoff,
                Err(err) => {
                    return Err(ApiError::Unreachable {
                        url,
                        detail: error_chain(&err),
                    })
                }
            };
            tokio::time::sleep(wait).await;
            backoff *= 2;
            attempt += 1;
        }
    }

    async fn json<T: DeserializeOwned>(&self, build: impl Fn() -> RequestBuilder) -> Result<T, ApiError> {
        let response = self.send(build).await?;
        let url = response.url().to_string();
        let body = response.bytes().await.map_err(|e| ApiError::Unreachable {
            url: url.clone(),
            detail: error_chain(&e),
        })?;
        serde_json::from_slice(&body).map_err(|e| ApiError::Unexpected {
            url,
            detail: format!("the body is not the JSON expected: {e}"),
        })
    }

    /// The ids of the models the server lists.
    pub async fn model_ids(&self) -> Result<Vec<String>, ApiError> {
        let page: ModelList = self.json(|| self.request(Method::GET, self.url(&["models"]))).await?;
        Ok(page
            .data
            .iter()
            .filter_map(|model| model.get("id").and_then(Value::as_str).map(str::to_owned))
            .collect())
    }

    /// `POST /files` with purpose `batch`: `body` is the multipart field `file`, made afresh for
    /// each attempt.
    pub async fn create_file(
        &self,
        filename: &str,
        idempotency_key: &str,
        body: impl Fn() -> reqwest::Body,
        bytes: u64,
    ) -> Result<Value, ApiError> {
        self.json(|| {
            let part = reqwest::multipart::Part::stream_with_length(body(), bytes).file_name(filename.to_owned());
            let form = reqwest::multipart::Form::new()
                .text("purpose", "batch")
                .part("file", part);
            self.request(Method::POST, self.url(&["files"]))
                .header("Idempotency-Key", idempotency_key)
                .timeout(transfer_timeout(bytes))
                .multipart(form)
        })
        .await
    }

    /// `POST /uploads`: an upload of `bytes` bytes to be sent in parts (with a key, a repeat
    /// answers with the first upload as it is now, perhaps completed).
    pub async fn create_upload(&self, filename: &str, bytes: u64, idempotency_key: &str) -> Result<Value, ApiError> {
        let body = json!({"filename": filename, "purpose": "batch", "bytes": bytes, "mime_type": "application/jsonl"});
        self.json(|| {
            self.request(Method::POST, self.url(&["uploads"]))
                .header("Idempotency-Key", idempotency_key)
                .json(&body)
        })
        .await
    }

    /// `POST /uploads/{id}/parts`: one part (the multipart field `data`, made afresh for each
    /// attempt); the part's id.
    pub async fn add_part(
        &self,
        upload_id: &str,
        body: impl Fn() -> reqwest::Body,
        bytes: u64,
    ) -> Result<String, ApiError> {
        let part: Value = self
            .json(|| {
                let data = reqwest::multipart::Part::stream_with_length(body(), bytes).file_name("part");
                self.request(Method::POST, self.url(&["uploads", upload_id, "parts"]))
                    .timeout(transfer_timeout(bytes))
                    .multipart(reqwest::multipart::Form::new().part("data", data))
            })
            .await?;
        id_of(&part, &self.url(&["uploads", upload_id, "parts"]))
    }

    /// `POST /uploads/{id}/complete`: the completed upload (its `file` is the new file).
    pub async fn complete_upload(
        &self,
        upload_id: &str,
        part_ids: &[String],
        md5: &str,
        idempotency_key: &str,
    ) -> Result<Value, ApiError> {
        let body = json!({"part_ids": part_ids, "md5": md5});
        self.json(|| {
            self.request(Method::POST, self.url(&["uploads", upload_id, "complete"]))
                .header("Idempotency-Key", idempotency_key)
                .json(&body)
        })
        .await
    }

    /// `POST /uploads/{id}/cancel`.
    pub async fn cancel_upload(&self, upload_id: &str) -> Result<Value, ApiError> {
        self.json(|| self.request(Method::POST, self.url(&["uploads", upload_id, "cancel"])))
            .await
    }

    /// `POST /batches`.
    pub async fn create_batch(&self, request: &CreateBatchRequest, idempotency_key: &str) -> Result<Value, ApiError> {
        self.json(|| {
            self.request(Method::POST, self.url(&["batches"]))
                .header("Idempotency-Key", idempotency_key)
                .json(request)
        })
        .await
    }

    /// `GET /batches/{id}`.
    pub async fn batch(&self, id: &str) -> Result<Value, ApiError> {
        self.json(|| self.request(Method::GET, self.url(&["batches", id])))
            .await
    }

    /// `GET /batches/{id}?live=true`: a Nimbus server adds what running chunks have not saved
    /// yet to the counts (other servers may refuse the parameter: see `watch`).
    pub async fn batch_live(&self, id: &str) -> Result<Value, ApiError> {
        self.json(|| {
            let mut url = self.url(&["batches", id]);
            url.query_pairs_mut().append_pair("live", "true");
            self.request(Method::GET, url)
        })
        .await
    }

    /// `GET /batches?limit=…&after=…`: one page.
    pub async fn list_batches(&self, limit: u32, after: Option<&str>) -> Result<Value, ApiError> {
        self.json(|| {
            let mut url = self.url(&["batches"]);
            url.query_pairs_mut().append_pair("limit", &limit.to_string());
            if let Some(after) = after {
                url.query_pairs_mut().append_pair("after", after);
            }
            self.request(Method::GET, url)
        })
        .await
    }

    /// `POST /batches/{id}/cancel`.
    pub async fn cancel_batch(&self, id: &str) -> Result<Value, ApiError> {
        self.json(|| self.request(Method::POST, self.url(&["batches", id, "cancel"])))
            .await
    }

    /// `GET /files/{id}/content`: the answer, whose body the caller streams.
    pub async fn file_content(&self, file_id: &str) -> Result<Response, ApiError> {
        self.send(|| {
            // A download's read timeout applies between chunks, not to the whole body.
            self.request(Method::GET, self.url(&["files", file_id, "content"]))
        })
        .await
    }
}

/// The `id` of an object the API returned.
pub fn id_of(object: &Value, url: &url::Url) -> Result<String, ApiError> {
    object
        .get("id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ApiError::Unexpected {
            url: url.to_string(),
            detail: "the object has no 'id'".to_owned(),
        })
}

/// A transfer of `bytes` may take this long: the call timeout plus one second per 256 KiB.
fn transfer_timeout(bytes: u64) -> Duration {
    CALL_TIMEOUT + Duration::from_secs(bytes / (256 * 1024))
}

fn retryable(status: StatusCode) -> bool {
    status == StatusCode::REQUEST_TIMEOUT || status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
}

/// `Retry-After` in seconds (an HTTP date is not worth parsing here), if short enough to wait.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: f64 = headers.get(RETRY_AFTER)?.to_str().ok()?.trim().parse().ok()?;
    let wait = Duration::try_from_secs_f64(seconds).ok()?;
    (wait <= MAX_RETRY_AFTER).then_some(wait)
}

/// An error answer as [`ApiError::Refused`], with the envelope's message when it has one.
async fn refusal(response: Response) -> ApiError {
    let status = response.status();
    let body: Bytes = response.bytes().await.unwrap_or_default();
    let envelope: ErrorEnvelope = serde_json::from_slice(&body).unwrap_or_default();
    let error = envelope.error.unwrap_or_default();
    let message = error.message.unwrap_or_else(|| {
        let text = String::from_utf8_lossy(&body);
        let text = text.trim();
        if text.is_empty() {
            status.canonical_reason().unwrap_or("error").to_owned()
        } else {
            nimbus_shared::user_text::excerpt(text).into_owned()
        }
    });
    ApiError::Refused {
        status: status.as_u16(),
        message,
        code: error.code.map(|code| match code {
            Value::String(text) => text,
            other => other.to_string(),
        }),
        param: error.param,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_escaped_as_one_path_segment_under_the_base() {
        let api = BatchApi::new("http://127.0.0.1:3000/v1/", None).unwrap();
        assert_eq!(
            api.url(&["batches", "a/b?c", "cancel"]).as_str(),
            "http://127.0.0.1:3000/v1/batches/a%2Fb%3Fc/cancel"
        );
        let api = BatchApi::new("https://example.test/openai/v1", None).unwrap();
        assert_eq!(api.url(&["files"]).as_str(), "https://example.test/openai/v1/files");
    }

    #[test]
    fn a_base_url_must_be_http() {
        for bad in ["", "127.0.0.1:3000", "ftp://x/v1", "mailto:a@b"] {
            assert!(
                matches!(BatchApi::new(bad, None), Err(ApiError::BadBaseUrl(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn retry_after_is_honoured_only_when_short() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, "2".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert(RETRY_AFTER, "3600".parse().unwrap());
        assert_eq!(retry_after(&headers), None);
        headers.insert(RETRY_AFTER, "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn only_timeouts_throttling_and_server_errors_are_retried() {
        for status in [408, 429, 500, 502, 503] {
            assert!(retryable(StatusCode::from_u16(status).unwrap()), "{status}");
        }
        for status in [400, 401, 403, 404, 409, 413, 422] {
            assert!(!retryable(StatusCode::from_u16(status).unwrap()), "{status}");
        }
    }
}
