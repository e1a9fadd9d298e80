//! Ports: the traits the domain talks to. Adapters (AWS and embedded) implement them.

pub mod after_response;
pub mod batch_events;
pub mod batch_item_id;
pub mod blob;
pub mod clock;
pub mod credential_sealer;
pub mod feedback_store;
pub mod ids;
pub mod inference_records;
pub mod inference_store;
pub mod jobs;
pub mod lmi_transport;
pub mod metrics;
pub mod model_cache;
pub mod project;
pub mod provider_call;
pub mod provider_secrets;
pub mod queue;
pub mod schedule_switch;
pub mod state;
pub mod webhook;
pub mod webhook_url;

pub use after_response::AfterResponse;
pub use batch_events::{BatchEventSink, NoBatchEvents};
pub use batch_item_id::{batch_base, BatchItemId, ItemIdKind, MAX_DERIVED_ITEMS};
pub use blob::{BlobStore, ByteStream, OneTimePut, PresignedPut};
pub use clock::{Clock, IdSource, OffsetClock, SystemClock, UuidV7Ids};
pub use credential_sealer::{
    check_sealable, decode_sealed, encode_sealed, open_json, seal_json, CredentialSealer, NoCredentialSealer,
    SealError, MAX_SEALED_PLAINTEXT,
};
pub use feedback_store::FeedbackStore;
pub use ids::{AsyncRequestId, BatchId, DeliveryId, FileId};
pub use inference_store::{BatchPage, InferencePage, InferenceStore};
pub use jobs::{JobHandler, JobOutcome, SoleWorkerGuard};
pub use metrics::{MetricUnit, MetricsSink, NoMetrics};
pub use model_cache::{CacheKey, CachedModelResponse, ModelCache};
pub use project::ProjectId;
pub(crate) use provider_secrets::check_parameter_name;
pub use provider_secrets::{CachedProviderSecrets, NoProviderSecrets, ProviderSecrets, SecretError, SecretValue};
pub use queue::{JobQueue, NoJobQueue, Priority, QueueMessage, UnknownPriority};
pub use schedule_switch::{ScheduleSwitch, SwitchError};
pub use state::{ListOrder, ListQuery, Page, Record, SortCursor, StateStore, MAX_UPDATE_ALL};
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
