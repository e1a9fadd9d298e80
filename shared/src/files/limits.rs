//! Size limits and expiry rules from the OpenAI contract.

use super::FilesError;
use crate::openai::files::{ExpiresAfter, FilePurpose};

const MIB: u64 = 1024 * 1024;
/// Batch input files: 200 MB.
pub const MAX_BATCH_FILE_BYTES: u64 = 200 * MIB;
/// Any other file: 512 MB.
pub const MAX_FILE_BYTES: u64 = 512 * MIB;
/// One upload part: 64 MB (API Gateway limits a Lambda request to far less).
pub const MAX_PART_BYTES: u64 = 64 * MIB;
/// Batch files expire after 30 days unless told otherwise.
pub const BATCH_FILE_DEFAULT_TTL_S: i64 = 30 * 24 * 3600;
pub const MIN_EXPIRES_AFTER_S: i64 = 3600;
pub const MAX_EXPIRES_AFTER_S: i64 = 2_592_000;
/// Uploads expire an hour after creation.
pub const UPLOAD_TTL_S: i64 = 3600;

pub fn max_bytes_for(purpose: FilePurpose) -> u64 {
    match purpose {
        FilePurpose::Batch => MAX_BATCH_FILE_BYTES,
        _ => MAX_FILE_BYTES,
    }
}

pub(crate) fn parse_purpose(text: &str) -> Result<FilePurpose, FilesError> {
    FilePurpose::parse_uploadable(text).ok_or_else(|| {
        FilesError::invalid(
            format!(
                "'{}' is not one of [{}] - 'purpose'",
                crate::user_text::excerpt(text),
                FilePurpose::UPLOADABLE
            ),
            "purpose",
        )
    })
}

pub(crate) fn check_filename(filename: &str, purpose: FilePurpose) -> Result<(), FilesError> {
    if filename.trim().is_empty() || filename.len() > 512 || filename.contains(['/', '\\', '\0']) {
        return Err(FilesError::invalid(
            "A file needs a plain file name (no path), at most 512 characters.",
            "file",
        ));
    }
    if purpose == FilePurpose::Batch && !filename.to_ascii_lowercase().ends_with(".jsonl") {
        return Err(FilesError::invalid(
            "Invalid file format for Batch API. Must be .jsonl",
            "file",
        ));
    }
    Ok(())
}

pub(crate) fn too_large(purpose: FilePurpose) -> FilesError {
    let max = max_bytes_for(purpose);
    FilesError::TooLarge {
        message: format!(
            "File is too large: files with purpose '{}' may be at most {} MB.",
            purpose.as_str(),
            max / MIB
        ),
    }
}

/// `expires_at` for a new file: `expires_after` if given (anchor `created_at`, 3600..2592000 s),
/// else 30 days for batch files and never for others.
pub(crate) fn expires_at(
    created_at: i64,
    purpose: FilePurpose,
    expires_after: Option<ExpiresAfter>,
) -> Result<Option<i64>, FilesError> {
    match expires_after {
        Some(after) => {
            if after.anchor != "created_at" {
                return Err(FilesError::invalid(
                    format!(
                        "Invalid expires_after anchor '{}': only 'created_at' is supported.",
                        after.anchor
                    ),
                    "expires_after[anchor]",
                ));
            }
            if !(MIN_EXPIRES_AFTER_S..=MAX_EXPIRES_AFTER_S).contains(&after.seconds) {
                return Err(FilesError::invalid(
                    format!(
                        "Invalid expires_after seconds {}: expected {MIN_EXPIRES_AFTER_S} to {MAX_EXPIRES_AFTER_S}.",
                        after.seconds
                    ),
                    "expires_after[seconds]",
                ));
            }
            Ok(Some(created_at + after.seconds))
        }
        None if purpose == FilePurpose::Batch => Ok(Some(created_at + BATCH_FILE_DEFAULT_TTL_S)),
        None => Ok(None),
    }
}
