//! Blobs in one S3 bucket.

use super::describe_sdk_error;
use crate::ports::blob::validate_key;
use crate::ports::{BlobStore, ByteStream, OneTimePut, PresignedPut, StorageError};
use async_trait::async_trait;
use aws_sdk_s3::primitives::ByteStream as S3ByteStream;
use base64::prelude::{Engine as _, BASE64_STANDARD};
use bytes::Bytes;
use futures::StreamExt;
use std::time::Duration;

/// Parts of a streamed upload: S3 needs at least 5 MiB for every part but the last.
const MULTIPART_PART_BYTES: usize = 8 * 1024 * 1024;

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

    async fn put_stream(&self, key: &str, mut body: ByteStream) -> Result<u64, StorageError> {
        validate_key(key)?;
        let mut buffer = bytes::BytesMut::with_capacity(MULTIPART_PART_BYTES);
        let mut total: u64 = 0;
        // Small objects: one PUT.
        while buffer.len() < MULTIPART_PART_BYTES {
            match body.next().await {
                Some(chunk) => {
                    let chunk = chunk?;
                    total += chunk.len() as u64;
                    buffer.extend_from_slice(&chunk);
                }
                None => {
                    self.put(key, buffer.freeze()).await?;
                    return Ok(total);
                }
            }
        }
        let upload = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| backend(&e))?;
        let upload_id = upload
            .upload_id()
            .ok_or_else(|| StorageError::Backend("S3 returned no multipart upload id".into()))?
            .to_owned();
        let result = self.stream_parts(key, &upload_id, buffer, &mut body, &mut total).await;
        if let Err(err) = result {
            let _ = self
                .client
                .abort_multipart_upload()
                .bucket(&self.bucket)
                .key(key)
                .upload_id(&upload_id)
                .send()
                .await;
            return Err(err);
        }
        Ok(total)
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
        match self.client.head_object().bucket(&self.bucket).key(key).send().await {
            Ok(output) => Ok(Some(
                output.content_length().and_then(|n| u64::try_from(n).ok()).unwrap_or(0),
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

    async fn delete_prefix(&self, prefix: &str) -> Result<u64, StorageError> {
        validate_key(prefix)?;
        let mut deleted = 0;
        let mut token: Option<String> = None;
        loop {
            let page = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(format!("{prefix}/"))
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| backend(&e))?;
            let keys: Vec<String> = page
                .contents()
                .iter()
                .filter_map(|o| o.key().map(str::to_owned))
                .collect();
            if !keys.is_empty() {
                let objects = keys
                    .iter()
                    .map(|k| aws_sdk_s3::types::ObjectIdentifier::builder().key(k).build())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| StorageError::Backend(e.to_string()))?;
                let delete = aws_sdk_s3::types::Delete::builder()
                    .set_objects(Some(objects))
                    .quiet(true)
                    .build()
                    .map_err(|e| StorageError::Backend(e.to_string()))?;
                self.client
                    .delete_objects()
                    .bucket(&self.bucket)
                    .delete(delete)
                    .send()
                    .await
                    .map_err(|e| backend(&e))?;
                deleted += keys.len() as u64;
            }
            match page.next_continuation_token() {
                Some(next) if page.is_truncated() == Some(true) => token = Some(next.to_owned()),
                _ => return Ok(deleted),
            }
        }
    }

    async fn presign_get(&self, key: &str, ttl: Duration, filename: &str) -> Result<Option<String>, StorageError> {
        validate_key(key)?;
        let config = aws_sdk_s3::presigning::PresigningConfig::expires_in(ttl)
            .map_err(|e| StorageError::Invalid(e.to_string()))?;
        let safe_name: String = filename
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || ".-_".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let request = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .response_content_disposition(format!("attachment; filename=\"{safe_name}\""))
            .presigned(config)
            .await
            .map_err(|e| backend(&e))?;
        Ok(Some(request.uri().to_owned()))
    }

    async fn presign_put(
        &self,
        key: &str,
        ttl: Duration,
        put: &OneTimePut,
    ) -> Result<Option<PresignedPut>, StorageError> {
        validate_key(key)?;
        let config = aws_sdk_s3::presigning::PresigningConfig::expires_in(ttl)
            .map_err(|e| StorageError::Invalid(e.to_string()))?;
        let bytes = put.bytes;
        let length = i64::try_from(bytes).map_err(|_| StorageError::Invalid(format!("{bytes} bytes is too large")))?;
        // Signed headers, so S3 answers 403 to a PUT that leaves one out or changes it:
        // Content-Length (no other size), `If-None-Match: *` (412 once an object is there, so the
        // URL cannot replace bytes already checked), and the declared SHA-256 (400 to other bytes).
        let request = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_length(length)
            .if_none_match("*")
            .set_checksum_sha256(put.sha256.map(|digest| BASE64_STANDARD.encode(digest)))
            .presigned(config)
            .await
            .map_err(|e| backend(&e))?;
        let headers = request
            .headers()
            .filter(|(name, _)| !name.eq_ignore_ascii_case("content-length") && !name.eq_ignore_ascii_case("host"))
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect();
        Ok(Some(PresignedPut {
            url: request.uri().to_owned(),
            headers,
        }))
    }
}

impl S3BlobStore {
    async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        number: i32,
        body: Bytes,
    ) -> Result<aws_sdk_s3::types::CompletedPart, StorageError> {
        let output = self
            .client
            .upload_part()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .part_number(number)
            .body(S3ByteStream::from(body))
            .send()
            .await
            .map_err(|e| backend(&e))?;
        Ok(aws_sdk_s3::types::CompletedPart::builder()
            .part_number(number)
            .set_e_tag(output.e_tag().map(str::to_owned))
            .build())
    }

    async fn stream_parts(
        &self,
        key: &str,
        upload_id: &str,
        mut buffer: bytes::BytesMut,
        body: &mut ByteStream,
        total: &mut u64,
    ) -> Result<(), StorageError> {
        let mut parts = Vec::new();
        let mut number = 1;
        loop {
            let next = body.next().await;
            let finished = next.is_none();
            if let Some(chunk) = next {
                let chunk = chunk?;
                *total += chunk.len() as u64;
                buffer.extend_from_slice(&chunk);
            }
            while buffer.len() >= MULTIPART_PART_BYTES || (finished && !buffer.is_empty()) {
                let take = buffer.len().min(MULTIPART_PART_BYTES);
                let part = buffer.split_to(take).freeze();
                parts.push(self.upload_part(key, upload_id, number, part).await?);
                number += 1;
            }
            if finished {
                break;
            }
        }
        self.client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .multipart_upload(
                aws_sdk_s3::types::CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| backend(&e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region, SharedCredentialsProvider};

    fn store() -> S3BlobStore {
        let config = aws_config::SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
                "AKIDEXAMPLE",
                "secret",
                None,
                None,
                "test",
            )))
            .build();
        S3BlobStore::new(&config, "nimbus-bucket")
    }

    fn query(url: &str, name: &str) -> Option<String> {
        url::Url::parse(url)
            .ok()?
            .query_pairs()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    }

    #[tokio::test]
    async fn a_presigned_put_signs_the_declared_length_and_refuses_to_overwrite() {
        let put = OneTimePut {
            bytes: 734_003_200,
            sha256: None,
        };
        let presigned = store()
            .presign_put("projects/p/files/direct", Duration::from_secs(300), &put)
            .await
            .unwrap()
            .unwrap();
        let url = &presigned.url;
        let signed = query(url, "X-Amz-SignedHeaders").unwrap();
        for header in ["content-length", "if-none-match"] {
            assert!(signed.split(';').any(|signed| signed == header), "{header}: {signed}");
        }
        assert!(query(url, "X-Amz-Signature").is_some(), "{url}");
        // The length is a signed header, not in the URL: a client sends it as Content-Length.
        assert!(!url.contains("734003200"), "{url}");
        assert_eq!(presigned.headers, vec![("if-none-match".to_owned(), "*".to_owned())]);
    }

    #[tokio::test]
    async fn a_presigned_put_signs_the_declared_checksum() {
        let put = OneTimePut {
            bytes: 3,
            sha256: Some([7; 32]),
        };
        let presigned = store()
            .presign_put("projects/p/files/direct", Duration::from_secs(300), &put)
            .await
            .unwrap()
            .unwrap();
        let signed = query(&presigned.url, "X-Amz-SignedHeaders").unwrap();
        assert!(
            signed.split(';').any(|header| header == "x-amz-checksum-sha256"),
            "{signed}"
        );
        let checksum = presigned
            .headers
            .iter()
            .find(|(name, _)| name == "x-amz-checksum-sha256")
            .map(|(_, value)| value.clone());
        assert_eq!(checksum, Some(BASE64_STANDARD.encode([7u8; 32])));
    }
}
