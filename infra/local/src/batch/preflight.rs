//! `nimbus batch submit` checks what the server would check, before it sends a byte: the batch's
//! parameters and the input file's name and size (the server's own functions), then every line of
//! the file (the server's own validator, against the models the server lists).

use super::api_client::BatchApi;
use super::console::{human_bytes, CliError, Console};
use futures::StreamExt;
use nimbus_shared::batches::input_validation::{validate_input, BatchEndpoint, ChunkLimits, ValidationReport};
use nimbus_shared::batches::{check_create_request, BatchesError};
use nimbus_shared::files::{check_new_file, md5_tapped, FilesError};
use nimbus_shared::openai::batches::CreateBatchRequest;
use nimbus_shared::openai::files::FilePurpose;
use nimbus_shared::ports::StorageError;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// What the checks found good.
pub struct Checked {
    pub filename: String,
    pub bytes: u64,
    pub total_requests: u64,
    /// The hex MD5 of the bytes checked (the server compares it with what it assembles).
    pub md5: String,
}

/// `k=v` pairs as metadata; a key given twice is refused.
pub fn parse_metadata(pairs: &[String]) -> Result<Option<BTreeMap<String, serde_json::Value>>, CliError> {
    if pairs.is_empty() {
        return Ok(None);
    }
    let mut metadata = BTreeMap::new();
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(invalid(
                format!("Invalid --metadata '{pair}': expected KEY=VALUE."),
                "metadata",
            ));
        };
        if metadata
            .insert(key.to_owned(), serde_json::Value::from(value))
            .is_some()
        {
            return Err(invalid(format!("--metadata key '{key}' is given twice."), "metadata"));
        }
    }
    Ok(Some(metadata))
}

fn invalid(message: String, param: &str) -> CliError {
    CliError::Invalid {
        message,
        param: Some(param.to_owned()),
        code: Some("invalid_value".to_owned()),
    }
}

/// The batch's parameters, as the server checks them (production rules: no second-long windows).
pub fn check_parameters(request: &CreateBatchRequest) -> Result<BatchEndpoint, CliError> {
    check_create_request(request, false)
        .map(|checked| checked.endpoint)
        .map_err(|err| match err {
            BatchesError::Invalid { message, param, code } => CliError::Invalid {
                message,
                param,
                code: code.map(str::to_owned),
            },
            other => CliError::Unexpected(other.to_string()),
        })
}

/// The input file's name and size, then its lines; errors list every problem with its line.
pub async fn check_input_file(
    api: &BatchApi,
    console: &Console,
    path: &Path,
    endpoint: BatchEndpoint,
) -> Result<Checked, CliError> {
    let filename = path
        .file_name()
        .and_then(|name| name.to_str())
        .ok_or_else(|| CliError::Unexpected(format!("{}: not a file name", path.display())))?
        .to_owned();
    let bytes = tokio::fs::metadata(path)
        .await
        .map_err(|e| CliError::io(path, &e))?
        .len();
    check_new_file(&filename, FilePurpose::Batch, bytes).map_err(|err| {
        let (message, param) = match err {
            FilesError::Invalid { message, param } => (message, param),
            other => (other.to_string(), Some("file".to_owned())),
        };
        CliError::Invalid {
            message: format!("{}: {message}", path.display()),
            param,
            code: None,
        }
    })?;
    let known_models = match api.model_ids().await {
        Ok(ids) => Some(ids.into_iter().collect::<HashSet<_>>()),
        Err(err) => {
            console.say(format!(
                "note: could not list the server's models ({err}); the server checks the model names"
            ));
            None
        }
    };
    // `provider::model` shorthands route without being listed: the server judges those.
    let model_exists = |model: &str| {
        known_models
            .as_ref()
            .is_none_or(|known| known.contains(model) || model.contains("::"))
    };
    let bar = console.bytes_bar(Some(bytes), "checking");
    let file = tokio::fs::File::open(path).await.map_err(|e| CliError::io(path, &e))?;
    let ticking = bar.clone();
    let (stream, digest) = md5_tapped(
        tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024)
            .map(move |chunk| {
                let chunk = chunk.map_err(|e| StorageError::Backend(e.to_string()))?;
                ticking.inc(chunk.len() as u64);
                Ok(chunk)
            })
            .boxed(),
    );
    let whole_file = ChunkLimits {
        lines: u64::MAX,
        bytes: u64::MAX,
    };
    let report: ValidationReport = validate_input(stream, endpoint, &model_exists, whole_file)
        .await
        .map_err(|e| CliError::Io {
            path: path.display().to_string(),
            detail: e.to_string(),
        })?;
    bar.finish_and_clear();
    if !report.is_valid() {
        return Err(CliError::InputFile {
            path: path.display().to_string(),
            errors: report.errors,
        });
    }
    console.say(format!(
        "{}: {} requests, {}: checked",
        path.display(),
        report.total_requests,
        human_bytes(bytes)
    ));
    Ok(Checked {
        filename,
        bytes,
        total_requests: report.total_requests,
        md5: digest.hex(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_pairs_split_at_the_first_equals_sign() {
        let metadata = parse_metadata(&["team=search".to_owned(), "query=a=b".to_owned()])
            .unwrap()
            .unwrap();
        assert_eq!(metadata["team"], "search");
        assert_eq!(metadata["query"], "a=b");
        assert_eq!(parse_metadata(&[]).unwrap(), None);
    }

    #[test]
    fn metadata_without_equals_or_given_twice_is_refused() {
        for bad in [vec!["novalue".to_owned()], vec!["k=1".to_owned(), "k=2".to_owned()]] {
            assert!(matches!(
                parse_metadata(&bad),
                Err(CliError::Invalid { param: Some(p), .. }) if p == "metadata"
            ));
        }
    }

    fn request(endpoint: &str, window: &str) -> CreateBatchRequest {
        CreateBatchRequest {
            input_file_id: String::new(),
            endpoint: endpoint.to_owned(),
            completion_window: window.to_owned(),
            metadata: None,
            output_expires_after: None,
        }
    }

    #[test]
    fn parameters_get_the_servers_messages() {
        assert_eq!(
            check_parameters(&request("/v1/embeddings", "48h")).unwrap(),
            BatchEndpoint::Embeddings
        );
        let Err(CliError::Invalid { message, param, .. }) = check_parameters(&request("/v1/completions", "24h")) else {
            panic!("an unknown endpoint is refused");
        };
        assert_eq!(param.as_deref(), Some("endpoint"));
        assert!(message.starts_with("Invalid 'endpoint'"), "{message}");
        // Second-long windows are for tests of the server only.
        let Err(CliError::Invalid { param, .. }) = check_parameters(&request("/v1/chat/completions", "60s")) else {
            panic!("a 60 s window is refused");
        };
        assert_eq!(param.as_deref(), Some("completion_window"));
    }
}
