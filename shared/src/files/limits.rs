//! Size limits and expiry rules from the OpenAI contract.

use super::FilesError;
use crate::openai::files::{ExpiresAfter, FilePurpose};
use crate::user_text::excerpt;

const MIB: u64 = 1024 * 1024;
/// Batch input files: 200 MB.
pub(crate) const MAX_BATCH_FILE_BYTES: u64 = 200 * MIB;
/// Any other file: 512 MB.
pub(crate) const MAX_FILE_BYTES: u64 = 512 * MIB;
/// One upload part: 64 MB (API Gateway limits a Lambda request to far less).
pub const MAX_PART_BYTES: u64 = 64 * MIB;
/// Batch files expire after 30 days unless told otherwise.
pub(crate) const BATCH_FILE_DEFAULT_TTL_S: i64 = 30 * 24 * 3600;
pub(crate) const MIN_EXPIRES_AFTER_S: i64 = 3600;
pub(crate) const MAX_EXPIRES_AFTER_S: i64 = 2_592_000;
/// Uploads expire an hour after creation.
pub(crate) const UPLOAD_TTL_S: i64 = 3600;

pub(crate) fn max_bytes_for(purpose: FilePurpose) -> u64 {
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

/// A new file's name and size: what the server refuses before it takes any bytes (and what
/// `nimbus batch submit` checks before it sends any).
pub fn check_new_file(filename: &str, purpose: FilePurpose, bytes: u64) -> Result<(), FilesError> {
    check_filename(filename, purpose)?;
    if bytes > max_bytes_for(purpose) {
        return Err(too_large(purpose));
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

/// The request field an expiry policy came in, which names the parameter in its errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExpiryField {
    /// `expires_after` of a file or upload (multipart names: `expires_after[anchor]`).
    FileExpiresAfter,
    /// `output_expires_after` of a batch: the policy of its output and error files.
    BatchOutputExpiresAfter,
}

impl ExpiryField {
    fn name(self) -> &'static str {
        match self {
            Self::FileExpiresAfter => "expires_after",
            Self::BatchOutputExpiresAfter => "output_expires_after",
        }
    }

    fn anchor_param(self) -> &'static str {
        match self {
            Self::FileExpiresAfter => "expires_after[anchor]",
            Self::BatchOutputExpiresAfter => "output_expires_after.anchor",
        }
    }

    fn seconds_param(self) -> &'static str {
        match self {
            Self::FileExpiresAfter => "expires_after[seconds]",
            Self::BatchOutputExpiresAfter => "output_expires_after.seconds",
        }
    }
}

/// Check an expiry policy (anchor `created_at`, 3600..=2592000 s): the seconds after the anchor.
pub(crate) fn check_expires_after(after: &ExpiresAfter, field: ExpiryField) -> Result<i64, FilesError> {
    let name = field.name();
    if after.anchor != "created_at" {
        return Err(FilesError::invalid(
            format!(
                "Invalid {name} anchor '{}': only 'created_at' is supported.",
                excerpt(&after.anchor)
            ),
            field.anchor_param(),
        ));
    }
    if !(MIN_EXPIRES_AFTER_S..=MAX_EXPIRES_AFTER_S).contains(&after.seconds) {
        return Err(FilesError::invalid(
            format!(
                "Invalid {name} seconds {}: expected {MIN_EXPIRES_AFTER_S} to {MAX_EXPIRES_AFTER_S}.",
                after.seconds
            ),
            field.seconds_param(),
        ));
    }
    Ok(after.seconds)
}

/// `expires_at` for a new file: `expires_after` if given (anchor `created_at`, 3600..2592000 s),
/// else 30 days for batch files and never for others.
pub(crate) fn expires_at(
    created_at: i64,
    purpose: FilePurpose,
    expires_after: Option<ExpiresAfter>,
) -> Result<Option<i64>, FilesError> {
    match expires_after {
        Some(after) => Ok(Some(
            created_at + check_expires_after(&after, ExpiryField::FileExpiresAfter)?,
        )),
        None if purpose == FilePurpose::Batch => Ok(Some(created_at + BATCH_FILE_DEFAULT_TTL_S)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(anchor: &str, seconds: i64) -> ExpiresAfter {
        ExpiresAfter {
            anchor: anchor.into(),
            seconds,
        }
    }

    fn param_of(result: Result<i64, FilesError>) -> Option<String> {
        match result {
            Err(FilesError::Invalid { param, .. }) => param,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn one_expiry_rule_names_the_field_it_came_in() {
        for field in [ExpiryField::FileExpiresAfter, ExpiryField::BatchOutputExpiresAfter] {
            assert_eq!(check_expires_after(&policy("created_at", 3600), field).unwrap(), 3600);
            assert_eq!(
                check_expires_after(&policy("created_at", 2_592_000), field).unwrap(),
                2_592_000
            );
        }
        let batch = ExpiryField::BatchOutputExpiresAfter;
        for seconds in [3599, 2_592_001, 0, -1] {
            let param = param_of(check_expires_after(&policy("created_at", seconds), batch));
            assert_eq!(param.as_deref(), Some("output_expires_after.seconds"), "{seconds}");
        }
        let param = param_of(check_expires_after(&policy("last_access", 3600), batch));
        assert_eq!(param.as_deref(), Some("output_expires_after.anchor"));
        let param = param_of(check_expires_after(&policy("x", 3600), ExpiryField::FileExpiresAfter));
        assert_eq!(param.as_deref(), Some("expires_after[anchor]"));
        // A long anchor is quoted only in part.
        let long = "a".repeat(10_000);
        let Err(FilesError::Invalid { message, .. }) = check_expires_after(&policy(&long, 3600), batch) else {
            panic!("a long anchor is refused");
        };
        assert!(message.len() < 300, "{message}");
    }
}
