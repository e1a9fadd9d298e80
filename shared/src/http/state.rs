//! The handlers' state, one per function: each Lambda builds only the services its routes use
//! (and so links only those); the local server builds all of them ([`AppState`]).

use super::PublicBaseUrl;
use crate::async_requests::AsyncApi;
use crate::auth::Authenticator;
use crate::batches::BatchApi;
use crate::files::FilesService;
use crate::inference::InferenceService;
use crate::lmi_api::LmiApi;
use crate::ports::{InferenceStore, MetricsSink};
use crate::tensorzero::dicl::DiclBuilder;
use crate::tensorzero::experiments::Experiments;
use crate::tensorzero::feedback::FeedbackService;
use crate::tensorzero::function_calls::FunctionService;
use crate::webhooks::{BatchWebhooks, WebhookEndpoints, WebhookSecrets};
use std::sync::Arc;

/// What every host's routes share: who may call, and where requests are measured (`GET /metrics`
/// reads it back where it keeps them).
#[derive(Clone)]
pub struct HostState {
    pub auth: Arc<Authenticator>,
    pub metrics: Arc<dyn MetricsSink>,
}

/// The inference function's handlers: chat completions, embeddings, models, `/inference`, the
/// TensorZero-style records and feedback, the LMI API.
#[derive(Clone)]
pub struct InferenceState {
    pub inference: Arc<InferenceService>,
    pub functions: Arc<FunctionService>,
    /// The stored inferences of `/inference` (read by the records routes).
    pub records: Arc<dyn InferenceStore>,
    /// `POST /feedback`.
    pub feedback: Arc<FeedbackService>,
    /// `GET /experiments/{function_name}`.
    pub experiments: Arc<Experiments>,
    /// `/invocations`, `/predictions/{model}`: the LMI API.
    pub lmi_api: Arc<LmiApi>,
    /// `POST /dicl/build`.
    pub dicl: Arc<DiclBuilder>,
}

/// The files function's handlers: `/v1/files`, `/v1/uploads`, `/v1/direct_uploads`.
#[derive(Clone)]
pub struct FilesState {
    pub files: Arc<FilesService>,
    pub settings: HttpSettings,
}

/// The batches function's handlers: `/v1/batches`, `/batch_inference`, `/async_predict`, the
/// webhook secrets and endpoints.
#[derive(Clone)]
pub struct BatchesState {
    pub batches: Arc<BatchApi>,
    pub async_requests: Arc<AsyncApi>,
    /// `/v1/webhook_secrets`.
    pub webhook_secrets: Arc<WebhookSecrets>,
    /// `/v1/webhook_endpoints`.
    pub webhook_endpoints: Arc<WebhookEndpoints>,
    /// `/v1/webhook_endpoints/{id}/deliveries`.
    pub batch_webhooks: Arc<BatchWebhooks>,
    pub settings: HttpSettings,
}

/// Every function's state: what the local server serves.
#[derive(Clone)]
pub struct AppState {
    pub host: HostState,
    pub inference: InferenceState,
    pub files: FilesState,
    pub batches: BatchesState,
}

/// Host-specific choices.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// File content larger than this is answered with a redirect to a presigned URL when the blob
    /// store offers one (a Lambda response must stay under 6 MB); smaller content streams through.
    pub inline_content_limit: u64,
    /// Where clients reach the gateway, for absolute URLs in responses (a direct upload's
    /// `upload_url` when the blob store cannot presign). `None` in Lambda unless configured: the
    /// Lambda host then supplies it per request from API Gateway's request context.
    pub public_url: Option<PublicBaseUrl>,
}
