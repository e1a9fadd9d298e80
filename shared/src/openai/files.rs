//! `/v1/files` and `/v1/uploads` wire types.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a file is for. Upload purposes can be sent by clients; `batch_output` is written by Nimbus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FilePurpose {
    Assistants,
    Batch,
    #[serde(rename = "fine-tune")]
    FineTune,
    Vision,
    UserData,
    Evals,
    BatchOutput,
}

impl FilePurpose {
    pub(crate) const UPLOADABLE: &'static str = "assistants, batch, fine-tune, vision, user_data, evals";

    /// Parse a purpose a client may upload with.
    pub(crate) fn parse_uploadable(text: &str) -> Option<Self> {
        match text {
            "assistants" => Some(Self::Assistants),
            "batch" => Some(Self::Batch),
            "fine-tune" => Some(Self::FineTune),
            "vision" => Some(Self::Vision),
            "user_data" => Some(Self::UserData),
            "evals" => Some(Self::Evals),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Assistants => "assistants",
            Self::Batch => "batch",
            Self::FineTune => "fine-tune",
            Self::Vision => "vision",
            Self::UserData => "user_data",
            Self::Evals => "evals",
            Self::BatchOutput => "batch_output",
        }
    }
}

/// A file as the API returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FileObject {
    pub id: String,
    pub object: String,
    pub bytes: u64,
    pub created_at: i64,
    pub filename: String,
    pub purpose: FilePurpose,
    /// `uploaded` (bytes not yet landed, direct uploads), `processed`, or `error`.
    pub status: String,
    pub expires_at: Option<i64>,
    pub status_details: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct FileList {
    pub object: &'static str,
    pub data: Vec<FileObject>,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    pub has_more: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct FileDeleted {
    pub id: String,
    pub object: &'static str,
    pub deleted: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize, utoipa::ToSchema)]
pub struct CreateUploadRequest {
    pub filename: String,
    pub purpose: String,
    pub bytes: u64,
    pub mime_type: String,
    #[serde(default)]
    pub expires_after: Option<ExpiresAfter>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExpiresAfter {
    pub anchor: String,
    pub seconds: i64,
}

#[derive(Debug, Clone, PartialEq, Deserialize, utoipa::ToSchema)]
pub(crate) struct CompleteUploadRequest {
    pub part_ids: Vec<String>,
    #[serde(default)]
    pub md5: Option<String>,
}

/// An upload as the API returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UploadObject {
    pub id: String,
    pub object: String,
    pub bytes: u64,
    pub created_at: i64,
    pub filename: String,
    pub purpose: FilePurpose,
    /// `pending`, `completed`, `cancelled` or `expired`.
    pub status: String,
    pub expires_at: i64,
    pub file: Option<FileObject>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub(crate) struct UploadPart {
    pub id: String,
    pub object: String,
    pub created_at: i64,
    pub upload_id: String,
}

/// A presigned (or local) URL the client PUTs the bytes to, skipping the API for the payload.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub(crate) struct DirectUpload {
    pub object: &'static str,
    pub file: FileObject,
    pub upload_url: String,
    pub method: &'static str,
    /// Headers the PUT must carry exactly as given (they are signed into `upload_url`), besides
    /// the `Content-Length` every HTTP client sends: `If-None-Match: *` (the URL stores the bytes
    /// once and cannot replace them) and, when `sha256` was declared, `x-amz-checksum-sha256`.
    /// Empty locally.
    pub upload_headers: BTreeMap<String, String>,
    pub expires_at: i64,
}

#[derive(Debug, Clone, PartialEq, Deserialize, utoipa::ToSchema)]
pub(crate) struct CreateDirectUploadRequest {
    pub filename: String,
    pub purpose: String,
    pub bytes: u64,
    /// The bytes' SHA-256 as 64 hex digits (`sha256sum`): the upload is refused unless the bytes
    /// match it (in AWS the checksum is signed into the URL and S3 checks it).
    #[serde(default)]
    pub sha256: Option<String>,
    #[serde(default)]
    pub expires_after: Option<ExpiresAfter>,
}
