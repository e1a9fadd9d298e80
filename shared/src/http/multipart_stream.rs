//! Feeding a multipart field into a `'static` byte stream without buffering it: the field's
//! chunks are pumped through a small channel while the consumer writes them to storage. Text
//! fields are read up to [`MAX_TEXT_FIELD_BYTES`] and no further.

use super::error::ApiError;
use crate::ports::{ByteStream, StorageError};
use crate::user_text::excerpt;
use axum::extract::multipart::{Field, MultipartError, MultipartRejection};
use futures::{Future, StreamExt};
use tokio_stream::wrappers::ReceiverStream;

pub(crate) fn multipart_error(err: &MultipartError) -> ApiError {
    if err.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::payload_too_large(format!("The upload is too large: {}", err.body_text()));
    }
    ApiError::invalid_request(format!("Malformed multipart body: {}", err.body_text())).with_code("invalid_multipart")
}

/// The longest multipart text field accepted (`purpose`, `expires_after[…]`, unknown fields).
pub(crate) const MAX_TEXT_FIELD_BYTES: usize = 64 * 1024;

/// The field's value as text, read chunk by chunk and refused (400 naming the field) as soon as
/// it passes [`MAX_TEXT_FIELD_BYTES`] or if it is not UTF-8.
pub(crate) async fn read_text_field(field: Field<'_>) -> Result<String, ApiError> {
    let name = field.name().unwrap_or_default().to_owned();
    let mut bytes = Vec::new();
    read_capped(field, |chunk| bytes.extend_from_slice(chunk)).await?;
    String::from_utf8(bytes).map_err(|_| {
        ApiError::invalid_request(format!("The multipart field '{}' is not valid UTF-8.", excerpt(&name)))
            .with_param(excerpt(&name))
    })
}

/// Read and discard a field the route does not use (within the same limit as a text field).
pub(crate) async fn skip_field(field: Field<'_>) -> Result<(), ApiError> {
    read_capped(field, |_| {}).await
}

/// Hand each chunk of `field` to `keep`, refusing a field longer than [`MAX_TEXT_FIELD_BYTES`].
async fn read_capped(mut field: Field<'_>, mut keep: impl FnMut(&[u8])) -> Result<(), ApiError> {
    let name = field.name().unwrap_or_default().to_owned();
    let mut read = 0;
    while let Some(chunk) = field.chunk().await.map_err(|e| multipart_error(&e))? {
        read += chunk.len();
        if read > MAX_TEXT_FIELD_BYTES {
            return Err(ApiError::invalid_request(format!(
                "The multipart field '{}' is too long: at most {MAX_TEXT_FIELD_BYTES} bytes.",
                excerpt(&name)
            ))
            .with_param(excerpt(&name))
            .with_code("field_too_long"));
        }
        keep(&chunk);
    }
    Ok(())
}

/// A request that is not `multipart/form-data` (or lacks a boundary): a 400 naming `param`.
pub(crate) fn multipart_rejection(rejection: &MultipartRejection, param: &str) -> ApiError {
    ApiError::invalid_request(format!(
        "Expected a multipart/form-data body with a '{param}' field: {}",
        rejection.body_text()
    ))
    .with_param(param)
    .with_code("invalid_multipart")
}

/// Run `consume` on the field's bytes as a stream; returns what `consume` returned, or an error if
/// the field itself could not be read.
pub(crate) async fn stream_field<T, F, Fut>(mut field: Field<'_>, consume: F) -> Result<T, ApiError>
where
    F: FnOnce(ByteStream) -> Fut,
    Fut: Future<Output = T>,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, StorageError>>(4);
    let consumer = consume(ReceiverStream::new(rx).boxed());
    let pump = async move {
        loop {
            match field.chunk().await {
                Ok(Some(chunk)) => {
                    if tx.send(Ok(chunk)).await.is_err() {
                        return Ok(());
                    }
                }
                Ok(None) => return Ok(()),
                Err(err) => {
                    let api_error = multipart_error(&err);
                    let _ = tx
                        .send(Err(StorageError::Invalid("the upload was cut short".into())))
                        .await;
                    return Err(api_error);
                }
            }
        }
    };
    let (result, pumped) = tokio::join!(consumer, pump);
    pumped?;
    Ok(result)
}
