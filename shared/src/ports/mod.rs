//! Ports: the traits the domain talks to. Adapters (AWS and embedded) implement them.

pub mod after_response;
pub(crate) mod batch_events;
pub(crate) mod batch_item_id;
pub mod blob;
pub mod clock;
pub(crate) mod credential_sealer;
pub mod feedback_store;
pub mod ids;
pub mod inference_records;
pub(crate) mod inference_store;
pub mod jobs;
pub(crate) mod lmi_transport;
pub mod metrics;
pub(crate) mod model_cache;
pub mod project;
pub(crate) mod provider_call;
pub(crate) mod provider_secrets;
pub mod queue;
pub(crate) mod schedule_switch;
pub mod state;
pub mod webhook;
pub(crate) mod webhook_url;

pub(crate) use after_response::AfterResponse;
pub(crate) use batch_events::BatchEventSink;
pub use batch_item_id::{batch_base, BatchItemId, ItemIdKind};
pub use blob::{BlobStore, ByteStream, OneTimePut, PresignedPut};
pub(crate) use clock::IdSource;
pub use clock::{Clock, OffsetClock, SystemClock, UuidV7Ids};
pub(crate) use credential_sealer::{check_sealable, decode_sealed, encode_sealed, NoCredentialSealer};
pub use credential_sealer::{open_json, seal_json, CredentialSealer, SealError, MAX_SEALED_PLAINTEXT};
pub use feedback_store::FeedbackStore;
pub(crate) use ids::FileId;
pub use ids::{AsyncRequestId, BatchId, DeliveryId};
pub use inference_store::InferenceStore;
pub(crate) use inference_store::{BatchPage, InferencePage};
pub use jobs::{JobHandler, JobOutcome, SoleWorkerGuard};
pub(crate) use metrics::MetricUnit;
pub use metrics::{MetricsSink, NoMetrics};
pub use model_cache::{CacheKey, CachedModelResponse, ModelCache};
pub use project::ProjectId;
pub(crate) use provider_secrets::check_parameter_name;
pub(crate) use provider_secrets::{CachedProviderSecrets, NoProviderSecrets};
pub use provider_secrets::{ProviderSecrets, SecretError, SecretValue};
#[cfg(feature = "aws")]
pub(crate) use queue::NoJobQueue;
pub use queue::{JobQueue, Priority, QueueMessage};
pub(crate) use schedule_switch::{ScheduleSwitch, SwitchError};
pub use state::{ListOrder, ListQuery, Page, Record, SortCursor, StateStore};
pub use webhook::{PostOutcome, WebhookTransport};

/// Failures of any storage-like port (blobs, state, queue).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum StorageError {
    /// The object or record does not exist.
    #[error("not found")]
    NotFound,
    /// A conditional write lost: the record exists already, or its version moved on.
    #[error("conditional write conflict")]
    Conflict,
    /// The caller passed a key or value the store cannot hold.
    #[error("invalid storage key or value: {0}")]
    Invalid(String),
    /// The backend failed (I/O, network, service error).
    #[error("storage backend error: {0}")]
    Backend(String),
}
