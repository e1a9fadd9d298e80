//! The records ports (`InferenceStore`, `ModelCache`, `FeedbackStore`) implemented once, over the
//! two storage ports: small records in the [`StateStore`](crate::ports::StateStore), and the
//! payload of any record whose JSON exceeds [`SPILL_THRESHOLD_BYTES`] in the
//! [`BlobStore`](crate::ports::BlobStore) with its key in the state record (a DynamoDB item holds
//! at most 400 KB). So both adapter sets get them: DynamoDB + S3 in Lambda, SQLite + files
//! locally. They sit beside `aws` and `embedded` because they are adapters too — of the records
//! ports onto the storage ports — and never see a backend's types.
//!
//! | kind | id | owner | blob when large |
//! |---|---|---|---|
//! | `inference` | `{project}/{inference_id}` | `{project}/{episode_id}` | `inferences/{project}/{inference_id}/{write}.json` (one key per write: a duplicate put never replaces the payload of the record that stays) |
//! | `model_cache` | the key's digest | the digest | `cache/{project}/{digest}.json` |
//! | `function_inference` | `{project}/{inference_id}` | `{project}/{function_name}` | — (no body: an index that lists a function's inferences, for DICL builds) |
//! | `feedback` | `{project}/{feedback_id}` | `{project}/{target_id}` | `feedback/{project}/{feedback_id}.json` |
//!
//! A `/batch_inference` batch's records are not single items: they are kept in pages of blobs
//! (`inferences/{project}/batches/{batch}/page-NNNNNN.jsonl`, and `pages.json` naming each page's
//! span of items), written once when the batch ends; an item's id says its batch and position, so
//! `get` and the episode lookups find them there (`batch_pages.rs`).
//!
//! Inference and feedback records expire (`expires_at`, the TTL) after the record retention
//! (`retention.rs`); their blobs and the batch pages by the bucket's lifecycle rules.
//!
//! `created_at_ms` is the UUIDv7 time of the inference or feedback id (so a listing cursor is
//! computed from an id alone), or a cache entry's creation time.

mod batch_pages;
mod cache;
mod feedback;
mod inferences;
mod payload;
mod retention;

pub use cache::StateModelCache;
pub use feedback::StateFeedbackStore;
pub use inferences::StateInferenceStore;
pub use payload::SPILL_THRESHOLD_BYTES;
pub use retention::RecordRetention;
pub(crate) use retention::{DEFAULT_RECORD_RETENTION_DAYS, MAX_RECORD_RETENTION_DAYS};
