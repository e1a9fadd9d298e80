//! The async API: submit, get, list, cancel, and bringing forward deliveries that waited for a
//! secret. Every request id and timestamp is minted here. A submission is checked against the
//! configuration alone ([`SubmissionCheck`]): the API runs no model.

use super::awaiting_secret;
use super::check::SubmissionCheck;
use super::error::AsyncError;
use super::lifecycle::expect_due_move;
use super::requests::AsyncRequests;
use super::stored::{output_key, AsyncStatus, ErrorEntry, StoredRequest, KIND};
use super::submit::parse_submission;
use super::wire::{AsyncRequestPage, AsyncRequestView};
use super::DUE_LANE;
use crate::jobs::JobMessage;
use crate::paging::{PageBounds, PageLimit};
use crate::ports::webhook_url::WebhookUrl;
use crate::ports::{AsyncRequestId, ListOrder, ListQuery, ProjectId, Record, StorageError};
use crate::records::LeaseUntil;
use crate::records::{decode, Loaded};
use crate::user_text::excerpt;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// Most deliveries brought forward per created secret (the rest keep their schedule).
const MAX_BROUGHT_FORWARD: usize = 1000;

/// How many requests a page of `GET /async_requests` lists: 1 to 100, 20 by default.
pub(crate) const ASYNC_PAGE: PageBounds = PageBounds::new(20, 100);

/// `GET /async_requests`' query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListAsyncRequests {
    pub limit: PageLimit,
    pub after: Option<String>,
    pub status: Option<String>,
}

impl Default for ListAsyncRequests {
    fn default() -> Self {
        Self {
            limit: ASYNC_PAGE.default_limit(),
            after: None,
            status: None,
        }
    }
}

/// What `DELETE /async_request/{id}` did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct CancelOutcome {
    pub request_id: String,
    pub canceled: bool,
    pub message: String,
}

/// The async API's handlers' side.
pub struct AsyncApi {
    requests: Arc<AsyncRequests>,
    /// Whether a submission's model exists and its `model_input` would be accepted.
    check: SubmissionCheck,
}

impl AsyncApi {
    pub fn new(requests: Arc<AsyncRequests>, check: SubmissionCheck) -> Self {
        Self { requests, check }
    }

    /// Accept a request: check it, store it `QUEUED`, schedule its expiry, and queue it at its
    /// priority. Returns its id.
    pub async fn submit(
        &self,
        project: &ProjectId,
        body: Map<String, Value>,
        path_model: Option<&str>,
    ) -> Result<String, AsyncError> {
        self.submit_by(project, None, body, path_model).await
    }

    /// [`Self::submit`] for the API key `key_id` (recorded: the request fails unrun with
    /// `API_KEY_REVOKED` if that key is revoked before it runs).
    pub async fn submit_by(
        &self,
        project: &ProjectId,
        key_id: Option<&str>,
        body: Map<String, Value>,
        path_model: Option<&str>,
    ) -> Result<String, AsyncError> {
        let submission = parse_submission(body, path_model)?;
        let check = &self.check;
        if !check.knows(submission.endpoint, &submission.model_id, &submission.model_input) {
            let field = match (path_model, submission.model_input.contains_key("function_name")) {
                (Some(_), _) => "model",
                (None, true) => "model_input.function_name",
                (None, false) if submission.model_input.contains_key("model_name") => "model_input.model_name",
                (None, false) => "model_input.model",
            };
            return Err(AsyncError::UnknownModel {
                field: field.to_owned(),
                model: submission.model_id,
            });
        }
        check
            .check(submission.endpoint, &submission.model_input)
            .map_err(|(field, message)| {
                let field = field.map_or_else(|| "model_input".to_owned(), |f| format!("model_input.{f}"));
                AsyncError::invalid(field, message)
            })?;
        let webhook_endpoint = match &submission.webhook_endpoint {
            None => None,
            Some(url) => Some(
                WebhookUrl::parse(url, &self.requests.settings.url_policy)
                    .map_err(|err| AsyncError::invalid("webhook_endpoint", err.to_string()))?,
            ),
        };
        let now = self.requests.now_ms();
        let request_id = self.requests.deps.ids.new_uuid().simple().to_string();
        let stored = StoredRequest {
            request_id: request_id.clone(),
            project: project.clone(),
            model_id: submission.model_id,
            endpoint: submission.endpoint,
            model_input: submission.model_input,
            priority: submission.priority,
            max_time_in_queue_s: submission.max_time_in_queue_s,
            retry: submission.retry,
            webhook_endpoint,
            status: AsyncStatus::Queued,
            created_at_ms: now,
            status_at_ms: now,
            started_at_ms: None,
            finished_at_ms: None,
            attempts: Vec::new(),
            lease_until_ms: LeaseUntil::NONE,
            next_run_at_ms: None,
            errors: Vec::new(),
            output_bytes: None,
            delivery: None,
            webhook_body_saved: false,
            due_version: Some(1),
            key_id: key_id.map(str::to_owned),
        };
        let record = crate::records::new_record(
            KIND.to_owned(),
            request_id.clone(),
            project.to_string(),
            now,
            Some(self.requests.expires_at_s(now)),
            &stored,
        )?;
        self.requests.deps.state.create(&record).await?;
        // The expiry check comes due when the request may wait no longer; a worker that finishes
        // it first clears it.
        if let Err(err) = self
            .requests
            .due
            .create(DUE_LANE, &request_id, stored.queue_deadline_ms())
            .await
        {
            self.requests.deps.state.delete(KIND, &request_id, None).await.ok();
            return Err(err.into());
        }
        let job = JobMessage::AsyncRun {
            request_id: AsyncRequestId::new(request_id.clone()),
        };
        if let Err(err) = self
            .requests
            .deps
            .queue
            .send_priority(&job.to_body(), stored.priority, Duration::ZERO)
            .await
        {
            // Not accepted: leave nothing behind that a worker or the scheduler would pick up.
            self.requests.deps.state.delete(KIND, &request_id, None).await.ok();
            self.requests.due.clear(DUE_LANE, &request_id).await.ok();
            return Err(err.into());
        }
        self.requests.count_status(AsyncStatus::Queued);
        Ok(request_id)
    }

    async fn load_owned(&self, project: &ProjectId, request_id: &str) -> Result<Loaded<StoredRequest>, AsyncError> {
        match Loaded::<StoredRequest>::get_owned(self.requests.deps.state.as_ref(), KIND, request_id, project).await? {
            Some(loaded) if !self.requests.is_past_retention(&loaded.record) => Ok(loaded),
            _ => Err(AsyncError::NotFound(request_id.to_owned())),
        }
    }

    /// One request's status, with its output when it has one: inline when small, else a link.
    pub async fn get(&self, project: &ProjectId, request_id: &str) -> Result<AsyncRequestView, AsyncError> {
        let loaded = self.load_owned(project, request_id).await?;
        let request = &loaded.body;
        let mut view = AsyncRequestView::of(request, loaded.record.expires_at);
        if let (Some(key), Some(bytes)) = (request.saved_output_key(), request.output_bytes) {
            if bytes <= self.requests.settings.inline_output_limit {
                view.output = self
                    .requests
                    .saved_output(&key)
                    .await?
                    .and_then(|body| serde_json::from_slice(&body).ok());
            } else {
                let filename = format!("{request_id}-output.json");
                // A time-limited link straight to the bytes where the store makes one (S3);
                // else this API's own route for them.
                let presigned = self
                    .requests
                    .deps
                    .blobs
                    .presign_get(&key, Duration::from_secs(3600), &filename)
                    .await?;
                view.output_url = Some(presigned.unwrap_or_else(|| format!("/async_request/{request_id}/output")));
            }
        }
        Ok(view)
    }

    /// The saved output of a request, as stored (for `GET /async_request/{id}/output`).
    pub async fn output(&self, project: &ProjectId, request_id: &str) -> Result<bytes::Bytes, AsyncError> {
        self.load_owned(project, request_id).await?;
        self.requests
            .saved_output(&output_key(project, request_id))
            .await?
            .ok_or_else(|| AsyncError::NotFound(request_id.to_owned()))
    }

    /// A page of the project's requests, newest first, optionally of one status.
    pub async fn list(&self, project: &ProjectId, query: &ListAsyncRequests) -> Result<AsyncRequestPage, AsyncError> {
        let limit = query.limit.get();
        let status = match query.status.as_deref() {
            None | Some("") => None,
            Some(text) => Some(AsyncStatus::parse(text).ok_or_else(|| {
                AsyncError::invalid(
                    "status",
                    format!(
                        "Unknown status `{}`: one of QUEUED, IN_PROGRESS, SUCCEEDED, FAILED, EXPIRED, CANCELED, WEBHOOK_FAILED.",
                        excerpt(text)
                    ),
                )
            })?),
        };
        let mut after = match &query.after {
            None => None,
            Some(id) => Some(self.load_owned(project, id).await?.record.cursor()),
        };
        let mut data = Vec::new();
        let mut has_more = false;
        // A status filter may skip many records: read pages until the page is full (bounded).
        for _ in 0..20 {
            let page = self
                .requests
                .deps
                .state
                .list_by_owner(&ListQuery {
                    kind: KIND.to_owned(),
                    owner: project.to_string(),
                    after: after.take(),
                    limit: limit + 1 - data.len().min(limit),
                    order: ListOrder::Desc,
                })
                .await?;
            after = page.records.last().map(Record::cursor);
            for record in &page.records {
                if self.requests.is_past_retention(record) {
                    continue;
                }
                let request: StoredRequest = decode(record)?;
                if status.is_some_and(|status| status != request.status) {
                    continue;
                }
                if data.len() == limit {
                    has_more = true;
                    break;
                }
                data.push(AsyncRequestView::of(&request, record.expires_at));
            }
            if has_more || !page.has_more {
                has_more = has_more || (page.has_more && data.len() == limit);
                break;
            }
        }
        Ok(AsyncRequestPage {
            object: "list",
            first_id: data.first().map(|view| view.request_id.clone()),
            last_id: data.last().map(|view| view.request_id.clone()),
            has_more,
            data,
        })
    }

    /// Cancel a request still `QUEUED`: it ends `CANCELED` and its webhook says so. Any other
    /// request is left alone (`canceled: false`, with the reason).
    pub async fn cancel(&self, project: &ProjectId, request_id: &str) -> Result<CancelOutcome, AsyncError> {
        for _ in 0..5 {
            let mut loaded = self.load_owned(project, request_id).await?;
            let status = loaded.body.status;
            if status != AsyncStatus::Queued {
                return Ok(CancelOutcome {
                    request_id: request_id.to_owned(),
                    canceled: false,
                    message: format!("Only QUEUED requests can be canceled; this one is {}.", status.as_str()),
                });
            }
            let now = self.requests.now_ms();
            loaded.body.conclude(
                AsyncStatus::Canceled,
                Some(ErrorEntry {
                    code: super::classify::ASYNC_REQUEST_CANCELED.to_owned(),
                    message: "The request was canceled before it ran.".to_owned(),
                }),
                None,
                now,
            );
            match loaded.save(self.requests.deps.state.as_ref()).await {
                Ok(()) => {
                    self.requests.count_status(AsyncStatus::Canceled);
                    self.requests.leave_waiting_list(&loaded.body).await;
                    self.requests.queue_first_delivery(&loaded.body, now).await?;
                    return Ok(CancelOutcome {
                        request_id: request_id.to_owned(),
                        canceled: true,
                        message: "The request was canceled.".to_owned(),
                    });
                }
                Err(StorageError::Conflict) => continue,
                Err(err) => return Err(err.into()),
            }
        }
        Err(StorageError::Conflict.into())
    }

    /// A secret was created for `project`: every delivery that waited for one is due now (queued
    /// at once). How many were.
    pub async fn secret_created(&self, project: &ProjectId) -> Result<u64, StorageError> {
        let lane = awaiting_secret::lane(project);
        let state = self.requests.deps.state.as_ref();
        let now = self.requests.now_ms();
        let mut brought = 0;
        for item in self.requests.due.due(&lane, i64::MAX, MAX_BROUGHT_FORWARD).await? {
            if let Some(mut loaded) = Loaded::<StoredRequest>::get(state, KIND, &item.target).await? {
                let pending = loaded.body.delivery_pending();
                if let Some(delivery) = loaded.body.delivery.as_mut().filter(|_| pending) {
                    delivery.next_attempt_at_ms = Some(now);
                    expect_due_move(&mut loaded.body);
                    match loaded.save(state).await {
                        Ok(()) => {
                            self.requests.schedule_next_look(&loaded.body, now).await?;
                            brought += 1;
                        }
                        // Changed meanwhile (an attempt was made): it keeps its own schedule.
                        Err(StorageError::Conflict) => {}
                        Err(err) => return Err(err),
                    }
                }
            }
            self.requests.due.clear(&lane, &item.target).await?;
        }
        Ok(brought)
    }
}
