//! Blobs in one S3 bucket.

use super::describe_sdk_error;
use crate::ports::blob::validate_key;
use crate::ports::{BlobStore, ByteStream, StorageError};
use async_trait::async_trait;
use aws_sdk_s3::primitives::ByteStream as S3ByteStream;
use bytes::Bytes;
use futures::StreamExt;

/// Blob store in the S3 bucket `bucket`.
#[derive(Debug, Clone)]
pub struct S3BlobStore {
    client: aws_sdk_s3::Client,
    bucket: String,
}

impl S3BlobStore {
    /// Path-style addressing is forced whenever a custom endpoint is configured (moto, MinIO).
    pub fn new(sdk_config: &aws_config::SdkConfig, bucket: impl Into<String>) -> Self {
        let mut builder = aws_sdk_s3::config::Builder::from(sdk_config);
        if sdk_config.endpoint_url().is_some() {
            builder = builder.force_path_style(true);
        }
        Self {
            client: aws_sdk_s3::Client::from_conf(builder.build()),
            bucket: bucket.into(),
        }
    }

    pub fn client(&self) -> &aws_sdk_s3::Client {
        &self.client
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }
}

fn backend<E, R>(err: &aws_sdk_s3::error::SdkError<E, R>) -> StorageError
where
    E: std::error::Error + 'static,
    R: std::fmt::Debug,
{
    StorageError::Backend(describe_sdk_error(err))
}

#[async_trait]
impl BlobStore for S3BlobStore {
    async fn put(&self, key: &str, body: Bytes) -> Result<(), StorageError> {
        validate_key(key)?;
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(S3ByteStream::from(body))
            .send()
            .await
            .map_err(|e| backend(&e))?;
        Ok(())
    }

    async fn get(&self, key: &str) -> Result<Bytes, StorageError> {
        validate_key(key)?;
        let output = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| match e.as_service_error() {
                Some(service) if service.is_no_such_key() => StorageError::NotFound,
                _ => backend(&e),
            })?;
        let data = output
            .body
            .collect()
            .await
            .map_err(|e| StorageError::Backend(e.to_string()))?;
        Ok(data.into_bytes())
    }

    async fn get_range(&self, key: &str, start: u64, end: u64) -> Result<Bytes, StorageError> {
        validate_key(key)?;
        if start >= end {
            return Ok(Bytes::new());
        }
        let result = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .range(format!("bytes={start}-{}", end - 1))
            .send()
            .await;
        let output = match result {
            Ok(output) => output,
            Err(e) => {
                if let Some(service) = e.as_service_error() {
                    if service.is_no_such_key() {
                        return Err(StorageError::NotFound);
                    }
                }
                if e.raw_response().map(|r| r.status().as_u16()) == Some(416) {
                    return Ok(Bytes::new());
                }
                return Err(backend(&e));
            }
        };
        let data = output
            .body
            .collect()
            .await
            .map_err(|e| StorageError::Backend(e.to_string()))?;
        Ok(data.into_bytes())
    }

    async fn get_stream(&self, key: &str) -> Result<ByteStream, StorageError> {
        validate_key(key)?;
        let output = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| match e.as_service_error() {
                Some(service) if service.is_no_such_key() => StorageError::NotFound,
                _ => backend(&e),
            })?;
        let body = output.body;
        let stream = futures::stream::unfold(body, |mut body| async move {
            match body.next().await {
                Some(Ok(chunk)) => Some((Ok(chunk), body)),
                Some(Err(err)) => Some((Err(StorageError::Backend(err.to_string())), body)),
                None => None,
            }
        });
        Ok(stream.boxed())
    }

    async fn size(&self, key: &str) -> Result<Option<u64>, StorageError> {
        validate_key(key)?;
        match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(output) => Ok(Some(
                output
                    .content_length()
                    .and_then(|n| u64::try_from(n).ok())
                    .unwrap_or(0),
            )),
            Err(e) => match e.as_service_error() {
                Some(service) if service.is_not_found() => Ok(None),
                _ if e.raw_response().map(|r| r.status().as_u16()) == Some(404) => Ok(None),
                _ => Err(backend(&e)),
            },
        }
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        validate_key(key)?;
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| backend(&e))?;
        Ok(())
    }
}
