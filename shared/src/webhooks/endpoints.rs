//! A project's webhook endpoints (`/v1/webhook_endpoints`, the shape of the OpenAI SDK's
//! `client.webhooks`): a URL, the batch event types it receives, and its own signing secret(s).
//! An endpoint's events are signed with its secret only (Standard Webhooks), so that the OpenAI
//! SDK's `client.webhooks.unwrap(body, headers, secret=…)` verifies them.
//!
//! The secrets are stored sealed (`sealed_secret`), opened only to sign a delivery; an endpoint
//! written before sealing is sealed when written again (a rotation) or listed.

use super::errors::WebhooksError;
use super::sealed_secret::{context, StoredSigningSecret};
use super::signing::SigningSecret;
use crate::paging::{PageBounds, PageLimit};
use crate::ports::webhook_url::{UrlPolicy, WebhookUrl};
use crate::ports::{Clock, CredentialSealer, IdSource, ProjectId, Record, SealError, StateStore, StorageError};
use crate::records::{decode, list_all, Loaded};
use crate::user_text::excerpt;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// How many endpoints, or deliveries of one, a page lists: 1 to 100, 20 by default.
pub(crate) const WEBHOOK_PAGE: PageBounds = PageBounds::new(20, 100);

pub(crate) const ENDPOINT_KIND: &str = "webhook_endpoint";
const ID_PREFIX: &str = "whep_";
const OBJECT: &str = "webhook_endpoint";

/// At most this many endpoints per project.
pub(crate) const MAX_ENDPOINTS: usize = 10;
const MAX_NAME_CHARS: usize = 256;

/// How long a rotated-out endpoint secret keeps signing when asked to.
pub(crate) const SECRET_OVERLAP_MS: i64 = 24 * 3600 * 1000;

/// The events an endpoint may subscribe to: a batch reached a terminal status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub enum BatchEventType {
    #[serde(rename = "batch.completed")]
    Completed,
    #[serde(rename = "batch.failed")]
    Failed,
    #[serde(rename = "batch.cancelled")]
    Cancelled,
    #[serde(rename = "batch.expired")]
    Expired,
}

impl BatchEventType {
    pub const ALL: [BatchEventType; 4] = [Self::Completed, Self::Failed, Self::Cancelled, Self::Expired];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "batch.completed",
            Self::Failed => "batch.failed",
            Self::Cancelled => "batch.cancelled",
            Self::Expired => "batch.expired",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|event| event.as_str() == text)
    }

    /// The event of a batch that ended with `status` (`completed`, `failed`, …).
    pub fn for_status(status: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|event| event.status() == status)
    }

    /// The batch status this event reports.
    pub fn status(self) -> &'static str {
        self.as_str().trim_start_matches("batch.")
    }
}

/// `POST /v1/webhook_endpoints`. `events` is accepted for `event_types`; `secret` (a `whsec_`
/// string) is generated when absent. Unknown fields are refused, as on the other new routes.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"url": "http://127.0.0.1:9/hooks", "event_types": ["batch.completed"]}))]
pub struct CreateEndpointRequest {
    pub url: String,
    #[serde(alias = "events")]
    pub event_types: Vec<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub secret: Option<String>,
}

/// One signing secret of an endpoint, newest first in [`StoredEndpoint::secrets`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
struct EndpointSecret {
    #[serde(flatten)]
    secret: StoredSigningSecret,
    expires_at_ms: Option<i64>,
}

/// What is stored for an endpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub(crate) struct StoredEndpoint {
    pub(crate) url: WebhookUrl,
    name: String,
    pub(crate) event_types: Vec<BatchEventType>,
    secrets: Vec<EndpointSecret>,
    created_at: i64,
    updated_at: i64,
}

impl StoredEndpoint {
    fn live_secrets(&self, now_ms: i64) -> impl Iterator<Item = &EndpointSecret> {
        self.secrets
            .iter()
            .filter(move |s| s.expires_at_ms.is_none_or(|at| at > now_ms))
    }

    /// The secrets of the endpoint `id` signing at `now_ms`, newest first, opened (ones that do
    /// not open are skipped and logged; an unavailable sealer is an error, retried).
    pub(crate) async fn signing_secrets(
        &self,
        sealer: &dyn CredentialSealer,
        id: &str,
        now_ms: i64,
    ) -> Result<Vec<SigningSecret>, StorageError> {
        let context = context(ENDPOINT_KIND, id);
        let mut secrets = Vec::new();
        for stored in self.live_secrets(now_ms) {
            match stored.secret.open(sealer, &context).await {
                Ok(secret) => secrets.push(secret),
                Err(SealError::Corrupt(reason)) => {
                    tracing::error!(endpoint = %id, %reason, "an endpoint's stored secret does not open; skipped");
                }
                Err(err) => return Err(err.into()),
            }
        }
        Ok(secrets)
    }

    /// Seal every secret stored in plain text (a record written before sealing).
    async fn seal_plain(&mut self, sealer: &dyn CredentialSealer, id: &str) -> Result<(), SealError> {
        let context = context(ENDPOINT_KIND, id);
        for stored in &mut self.secrets {
            stored.secret = stored.secret.sealed_for(sealer, &context).await?;
        }
        Ok(())
    }

    fn has_plain_secrets(&self) -> bool {
        self.secrets.iter().any(|s| s.secret.is_plain())
    }
}

/// An endpoint as shown (`WebhookEndpoint` in the OpenAI SDK): its secret only as a hint.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct WebhookEndpoint {
    pub id: String,
    pub object: &'static str,
    pub created_at: i64,
    pub updated_at: i64,
    pub name: String,
    pub url: String,
    pub event_types: Vec<BatchEventType>,
    pub signing_secret_hint: Option<String>,
}

/// A new endpoint: the only answer that shows its secret.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct CreatedEndpoint {
    #[serde(flatten)]
    pub endpoint: WebhookEndpoint,
    pub signing_secret: String,
}

#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct EndpointList {
    pub object: &'static str,
    pub data: Vec<WebhookEndpoint>,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    pub has_more: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct DeletedEndpoint {
    pub id: String,
    pub object: &'static str,
    pub deleted: bool,
}

/// Creates, lists, shows and deletes endpoints; finds the ones an event goes to.
pub struct WebhookEndpoints {
    state: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdSource>,
    policy: UrlPolicy,
    /// Seals the secrets at rest; opened only to sign.
    sealer: Arc<dyn CredentialSealer>,
}

fn not_found(id: &str) -> WebhooksError {
    WebhooksError::NotFound {
        what: "webhook endpoint",
        id: id.to_owned(),
    }
}

fn view(record: &Record, stored: &StoredEndpoint, now_ms: i64) -> WebhookEndpoint {
    WebhookEndpoint {
        id: record.id.clone(),
        object: OBJECT,
        created_at: stored.created_at,
        updated_at: stored.updated_at,
        name: stored.name.clone(),
        url: stored.url.as_str().to_owned(),
        event_types: stored.event_types.clone(),
        signing_secret_hint: stored.live_secrets(now_ms).next().and_then(|s| s.secret.masked()),
    }
}

/// The requested event types: known, at least one, each once (in the order given).
fn event_types(requested: &[String]) -> Result<Vec<BatchEventType>, WebhooksError> {
    if requested.is_empty() {
        return Err(WebhooksError::invalid(
            "Invalid 'event_types': name at least one event type.",
            "event_types",
        ));
    }
    let mut events = Vec::new();
    for text in requested {
        let event = BatchEventType::parse(text).ok_or_else(|| {
            let supported: Vec<_> = BatchEventType::ALL.iter().map(|e| e.as_str()).collect();
            WebhooksError::invalid(
                format!(
                    "Invalid 'event_types': '{}' is not supported. Supported: {}.",
                    excerpt(text),
                    supported.join(", ")
                ),
                "event_types",
            )
        })?;
        if !events.contains(&event) {
            events.push(event);
        }
    }
    Ok(events)
}

impl WebhookEndpoints {
    /// `policy` decides which URLs are accepted (plain-HTTP loopback only where it allows).
    pub fn new(
        state: Arc<dyn StateStore>,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdSource>,
        policy: UrlPolicy,
        sealer: Arc<dyn CredentialSealer>,
    ) -> Self {
        Self {
            state,
            clock,
            ids,
            policy,
            sealer,
        }
    }

    /// The sealer of the endpoints' secrets (the delivery runner opens them with it).
    pub(crate) fn sealer(&self) -> &dyn CredentialSealer {
        self.sealer.as_ref()
    }

    pub async fn create(
        &self,
        project: &ProjectId,
        request: CreateEndpointRequest,
    ) -> Result<CreatedEndpoint, WebhooksError> {
        let url = WebhookUrl::parse(&request.url, &self.policy)
            .map_err(|err| WebhooksError::invalid(format!("Invalid 'url': {err}"), "url"))?;
        let event_types = event_types(&request.event_types)?;
        let name = request.name.unwrap_or_default();
        if name.chars().count() > MAX_NAME_CHARS {
            return Err(WebhooksError::invalid(
                format!("Invalid 'name': at most {MAX_NAME_CHARS} characters."),
                "name",
            ));
        }
        let secret = match request.secret.as_deref() {
            None => SigningSecret::generate(),
            Some(text) => SigningSecret::parse(text).map_err(|_| {
                WebhooksError::invalid(
                    "Invalid 'secret': use 'whsec_' followed by the base64 of 24 to 64 random bytes.",
                    "secret",
                )
            })?,
        };
        // A soft limit: two creates at once may both pass.
        if list_all(self.state.as_ref(), ENDPOINT_KIND, project.as_str())
            .await?
            .len()
            >= MAX_ENDPOINTS
        {
            return Err(WebhooksError::LimitReached {
                message: format!("A project may have at most {MAX_ENDPOINTS} webhook endpoints; delete one first."),
            });
        }
        let now_ms = self.clock.now_unix_ms();
        let now_s = now_ms.div_euclid(1000);
        let id = self.ids.prefixed(ID_PREFIX);
        let stored = StoredEndpoint {
            url,
            name,
            event_types,
            secrets: vec![EndpointSecret {
                secret: StoredSigningSecret::seal(self.sealer(), &context(ENDPOINT_KIND, &id), &secret)
                    .await
                    .map_err(StorageError::from)?,
                expires_at_ms: None,
            }],
            created_at: now_s,
            updated_at: now_s,
        };
        let record = crate::records::new_record(ENDPOINT_KIND, id, project.to_string(), now_ms, None, &stored)?;
        self.state.create(&record).await?;
        Ok(CreatedEndpoint {
            endpoint: view(&record, &stored, now_ms),
            signing_secret: secret.as_str().to_owned(),
        })
    }

    /// The project's endpoints, newest first, `limit` (within [`WEBHOOK_PAGE`]) after the endpoint
    /// `after`.
    pub async fn list(
        &self,
        project: &ProjectId,
        after: Option<&str>,
        limit: PageLimit,
    ) -> Result<EndpointList, WebhooksError> {
        let limit = limit.get();
        let now_ms = self.clock.now_unix_ms();
        let mut all = self.of_project(project).await?;
        for (record, stored) in all.iter().filter(|(_, stored)| stored.has_plain_secrets()) {
            self.seal_plain(Loaded {
                record: record.clone(),
                body: stored.clone(),
            })
            .await?;
        }
        all.reverse();
        let start = match after {
            None => 0,
            Some(after) => {
                let position = all.iter().position(|(record, _)| record.id == after).ok_or_else(|| {
                    WebhooksError::invalid(
                        format!(
                            "Invalid 'after': '{}' is not an endpoint of this project.",
                            excerpt(after)
                        ),
                        "after",
                    )
                })?;
                position + 1
            }
        };
        let rest = all.get(start..).unwrap_or_default();
        let data: Vec<_> = rest
            .iter()
            .take(limit)
            .map(|(record, stored)| view(record, stored, now_ms))
            .collect();
        Ok(EndpointList {
            object: "list",
            first_id: data.first().map(|e| e.id.clone()),
            last_id: data.last().map(|e| e.id.clone()),
            has_more: rest.len() > data.len(),
            data,
        })
    }

    pub async fn get(&self, project: &ProjectId, id: &str) -> Result<WebhookEndpoint, WebhooksError> {
        let loaded = self.load(project, id).await?.ok_or_else(|| not_found(id))?;
        Ok(view(&loaded.record, &loaded.body, self.clock.now_unix_ms()))
    }

    /// Delete an endpoint: no new events go to it; deliveries not yet made are cancelled.
    pub async fn delete(&self, project: &ProjectId, id: &str) -> Result<DeletedEndpoint, WebhooksError> {
        if self.load(project, id).await?.is_none() || !self.state.delete(ENDPOINT_KIND, id, None).await? {
            return Err(not_found(id));
        }
        Ok(DeletedEndpoint {
            id: id.to_owned(),
            object: "webhook_endpoint.deleted",
            deleted: true,
        })
    }

    /// A new secret for the endpoint, shown once; the old one stops signing at once, or after
    /// 24 hours with `keep_old_for_24h` (both sign meanwhile).
    pub(crate) async fn rotate_secret(
        &self,
        project: &ProjectId,
        id: &str,
        keep_old_for_24h: bool,
    ) -> Result<CreatedEndpoint, WebhooksError> {
        let secret = SigningSecret::generate();
        let sealed = StoredSigningSecret::seal(self.sealer(), &context(ENDPOINT_KIND, id), &secret)
            .await
            .map_err(StorageError::from)?;
        for _ in 0..20 {
            let mut loaded = self.load(project, id).await?.ok_or_else(|| not_found(id))?;
            let now_ms = self.clock.now_unix_ms();
            let old_until = now_ms + SECRET_OVERLAP_MS;
            let body = &mut loaded.body;
            body.secrets.retain(|s| s.expires_at_ms.is_none_or(|at| at > now_ms));
            if keep_old_for_24h {
                for old in &mut body.secrets {
                    old.expires_at_ms = Some(old.expires_at_ms.map_or(old_until, |at| at.min(old_until)));
                }
            } else {
                body.secrets.clear();
            }
            body.secrets.insert(
                0,
                EndpointSecret {
                    secret: sealed.clone(),
                    expires_at_ms: None,
                },
            );
            // An endpoint written before sealing is sealed with this write.
            body.seal_plain(self.sealer(), id).await.map_err(StorageError::from)?;
            body.updated_at = now_ms.div_euclid(1000);
            match loaded.save(self.state.as_ref()).await {
                Ok(()) => {
                    return Ok(CreatedEndpoint {
                        endpoint: view(&loaded.record, &loaded.body, now_ms),
                        signing_secret: secret.as_str().to_owned(),
                    })
                }
                Err(StorageError::Conflict) => continue,
                Err(err) => return Err(err.into()),
            }
        }
        Err(StorageError::Conflict.into())
    }

    /// Seal the plain-text secrets of an endpoint written before sealing (one conditional write;
    /// an endpoint that changed meanwhile is left to its next write).
    async fn seal_plain(&self, mut loaded: Loaded<StoredEndpoint>) -> Result<(), StorageError> {
        let id = loaded.record.id.clone();
        loaded.body.seal_plain(self.sealer(), &id).await?;
        match loaded.save(self.state.as_ref()).await {
            Ok(()) | Err(StorageError::Conflict) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// The project's endpoints subscribed to `event`, oldest first.
    pub(crate) async fn subscribed(
        &self,
        project: &ProjectId,
        event: BatchEventType,
    ) -> Result<Vec<(Record, StoredEndpoint)>, StorageError> {
        let mut endpoints = self.of_project(project).await?;
        endpoints.retain(|(_, stored)| stored.event_types.contains(&event));
        Ok(endpoints)
    }

    /// An endpoint by id, any project (the delivery runner's view; `None` once deleted).
    pub(crate) async fn by_id(&self, id: &str) -> Result<Option<Loaded<StoredEndpoint>>, StorageError> {
        Loaded::get(self.state.as_ref(), ENDPOINT_KIND, id).await
    }

    /// An endpoint of `project` (`None` for another project's).
    pub(crate) async fn load(
        &self,
        project: &ProjectId,
        id: &str,
    ) -> Result<Option<Loaded<StoredEndpoint>>, StorageError> {
        Loaded::get_owned(self.state.as_ref(), ENDPOINT_KIND, id, project).await
    }

    async fn of_project(&self, project: &ProjectId) -> Result<Vec<(Record, StoredEndpoint)>, StorageError> {
        list_all(self.state.as_ref(), ENDPOINT_KIND, project.as_str())
            .await?
            .into_iter()
            .map(|record| decode(&record).map(|stored| (record, stored)))
            .collect()
    }
}

#[cfg(test)]
#[path = "endpoints_tests.rs"]
mod tests;
