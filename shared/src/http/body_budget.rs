//! A process-wide budget for the JSON bodies being held at once. A body and the JSON tree parsed
//! from it take many times its size in memory, so large bodies (up to the 10 MB limit) take
//! permits in proportion to their size and wait their turn, while small ones never wait. This
//! bounds the server's peak memory under a burst of large requests.
//!
//! Budget is taken for bytes that arrived, not for what a `Content-Length` promises: the first
//! [`SMALL_BODY_BYTES`] are free, and only a body that actually got that far reserves its whole
//! declared size (at once, so two bodies never hold part of the budget while waiting for more).
//! A client that declares 9 MB and stalls after a few bytes holds nothing; one that stalls later
//! gives its share back when the body times out (`body_deadline.rs`).

use axum::body::{Body, Bytes};
use bytes::BytesMut;
use futures::StreamExt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bodies smaller than this do not count against the budget.
pub(crate) const SMALL_BODY_BYTES: usize = 256 * 1024;
/// Bytes of large bodies held at once, across all requests (at least one body of the largest size).
pub(crate) const BUDGET_BYTES: usize = 16 * 1024 * 1024;
/// The longest a body waits for its share of the budget before the request is refused (503).
pub(crate) const BUDGET_WAIT: Duration = Duration::from_secs(30);

static BUDGET: LazyLock<Arc<Semaphore>> = LazyLock::new(|| Arc::new(Semaphore::new(BUDGET_BYTES)));

/// Held while a large body (and what was parsed from it) is alive; released on drop.
#[derive(Debug, Default)]
pub(crate) struct BodyPermit(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

impl BodyPermit {
    /// Bytes of the budget held.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.0.as_ref().map_or(0, OwnedSemaphorePermit::num_permits)
    }

    /// Hold `bytes` more, waiting at most [`BUDGET_WAIT`] for them.
    async fn grow(&mut self, bytes: usize) -> Result<(), BodyReadError> {
        let permits = u32::try_from(bytes).unwrap_or(u32::MAX);
        if permits == 0 {
            return Ok(());
        }
        let acquired = tokio::time::timeout(BUDGET_WAIT, Arc::clone(&BUDGET).acquire_many_owned(permits))
            .await
            .map_err(|_| BodyReadError::Busy)?;
        // The semaphore is never closed, so this only fails if it were; then do not limit.
        if let Ok(more) = acquired {
            match self.0.as_mut() {
                Some(held) => held.merge(more),
                None => self.0 = Some(more),
            }
        }
        Ok(())
    }
}

/// Why a body could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyReadError {
    #[error("the request body is larger than {0} bytes")]
    TooLarge(usize),
    #[error("the server is holding too many large request bodies; retry shortly")]
    Busy,
    #[error("could not read the request body: {0}")]
    Read(#[from] axum::Error),
}

/// Read `body` (at most `max_bytes`; `declared` is its `Content-Length`) while taking its share
/// of the budget as its bytes arrive: nothing below [`SMALL_BODY_BYTES`], then its whole
/// declared size (or `max_bytes` when unknown), growing only past what was declared.
pub(crate) async fn read_within_budget(
    body: Body,
    declared: Option<usize>,
    max_bytes: usize,
) -> Result<(Bytes, BodyPermit), BodyReadError> {
    if declared.is_some_and(|declared| declared > max_bytes) {
        return Err(BodyReadError::TooLarge(max_bytes));
    }
    let mut permit = BodyPermit::default();
    let mut held = 0;
    let mut buffer = BytesMut::with_capacity(declared.unwrap_or(0).min(SMALL_BODY_BYTES));
    let mut data = body.into_data_stream();
    while let Some(chunk) = data.next().await {
        let chunk = chunk.map_err(|err| {
            if over_route_limit(&err) {
                BodyReadError::TooLarge(max_bytes)
            } else {
                BodyReadError::Read(err)
            }
        })?;
        if buffer.len().saturating_add(chunk.len()) > max_bytes {
            return Err(BodyReadError::TooLarge(max_bytes));
        }
        buffer.extend_from_slice(&chunk);
        if buffer.len() >= SMALL_BODY_BYTES && held < buffer.len() {
            let share = declared
                .unwrap_or(max_bytes)
                .max(buffer.len())
                .min(max_bytes)
                .min(BUDGET_BYTES);
            permit.grow(share.saturating_sub(held)).await?;
            held = held.max(share);
        }
    }
    Ok((buffer.freeze(), permit))
}

/// Whether a body read failed on the route's own limit (axum's `DefaultBodyLimit`, applied by
/// `with_limited_body`).
fn over_route_limit(err: &axum::Error) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(cause) = current {
        if cause.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        current = cause.source();
    }
    false
}

#[cfg(test)]
mod tests {

    #[tokio::test]
    async fn a_routes_own_body_limit_is_too_large_not_a_read_error() {
        let request = axum::http::Request::builder().body(Body::from(vec![b'x'; 20])).unwrap();
        // DefaultBodyLimit is a layer: it sets the limit `with_limited_body` reads.
        let limited = tower::ServiceExt::oneshot(
            tower::Layer::layer(
                &axum::extract::DefaultBodyLimit::max(10),
                tower::service_fn(|req: axum::extract::Request| async move {
                    Ok::<_, std::convert::Infallible>(axum::RequestExt::with_limited_body(req).into_body())
                }),
            ),
            request,
        )
        .await
        .unwrap();
        let result = read_within_budget(limited, None, 1024).await;
        assert!(matches!(result, Err(BodyReadError::TooLarge(1024))), "{result:?}");
    }
    use super::*;

    fn body_of(chunks: Vec<Vec<u8>>, then_stall: bool) -> Body {
        let head = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
        if then_stall {
            Body::from_stream(head.chain(futures::stream::pending()))
        } else {
            Body::from_stream(head)
        }
    }

    const MAX: usize = 10 * 1024 * 1024;

    #[tokio::test]
    async fn small_bodies_never_wait_and_large_ones_share_the_budget() {
        let large = vec![0u8; SMALL_BODY_BYTES];
        let (_, first) = read_within_budget(
            body_of(vec![large.clone()], false),
            Some(BUDGET_BYTES - 1024),
            usize::MAX,
        )
        .await
        .unwrap();
        assert_eq!(first.bytes(), BUDGET_BYTES - 1024);
        // A small body passes while the budget is exhausted.
        let small = tokio::time::timeout(
            Duration::from_millis(100),
            read_within_budget(body_of(vec![vec![1; 1024]], false), Some(1024), MAX),
        )
        .await;
        assert!(small.is_ok_and(|read| read.is_ok_and(|(bytes, permit)| bytes.len() == 1024 && permit.bytes() == 0)));
        // An unknown length counts as the largest body once it is large: it waits for the first.
        let waiting = tokio::spawn(read_within_budget(body_of(vec![large], false), None, MAX));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert!(matches!(second, Ok(Ok(Ok((_, ref permit)))) if permit.bytes() == MAX));
    }

    #[tokio::test]
    async fn a_stalled_body_holds_no_budget_for_what_it_only_declared() {
        // Two bodies declare 9 MB each, send 17 bytes and stall: together they would exceed the
        // budget if it were taken by Content-Length.
        let stalled: Vec<_> = (0..2)
            .map(|_| {
                tokio::spawn(read_within_budget(
                    body_of(vec![vec![b'{'; 17]], true),
                    Some(9 << 20),
                    MAX,
                ))
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        // A well-formed 621 KB body is read at once.
        let whole = vec![b' '; 621 * 1024];
        let read = tokio::time::timeout(
            Duration::from_secs(2),
            read_within_budget(body_of(vec![whole], false), Some(621 * 1024), MAX),
        )
        .await;
        assert!(read.is_ok_and(
            |read| read.is_ok_and(|(bytes, permit)| bytes.len() == 621 * 1024 && permit.bytes() == 621 * 1024)
        ));
        for task in stalled {
            assert!(!task.is_finished());
            task.abort();
        }
    }

    #[tokio::test]
    async fn too_large_is_refused_by_declaration_or_by_count() {
        let declared = read_within_budget(body_of(vec![vec![0; 10]], false), Some(MAX + 1), MAX).await;
        assert!(matches!(declared, Err(BodyReadError::TooLarge(_))));
        let counted = read_within_budget(body_of(vec![vec![0; 600], vec![0; 600]], false), None, 1000).await;
        assert!(matches!(counted, Err(BodyReadError::TooLarge(1000))));
    }
}
