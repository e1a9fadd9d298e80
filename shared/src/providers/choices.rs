//! `n` choices from a provider that answers one choice per call ([`ChoiceSupport::OnePerCall`]):
//! the request is sent `n` times without `n`, and the answers are joined: choices numbered
//! `0..n` in call order, usage summed over the calls (each call's prompt counts, since each was
//! billed).
//!
//! [`ChoiceSupport::OnePerCall`]: super::ChoiceSupport::OnePerCall

use super::{CallContext, ChatProvider, ChatStreamProvider, ChunkStream, ModelStream, ProviderError};
use crate::model::{ModelChunk, ModelRequest, ModelResponse, ModelUsage};
use futures::stream::SelectAll;
use futures::{StreamExt, TryStreamExt};
use std::sync::Arc;

/// Calls to one provider in flight at once for one request.
const CONCURRENT_CALLS: usize = 8;

/// The request as one call of the `n` sends it: without `n`.
pub(crate) fn one_choice_request(request: &ModelRequest) -> ModelRequest {
    let mut single = request.clone();
    single.params.n = None;
    single
}

/// `n` non-streamed answers joined into one completion with `n` choices.
pub(crate) async fn chat_n_times(
    chat: Arc<dyn ChatProvider>,
    request: &ModelRequest,
    ctx: CallContext<'_>,
    n: u32,
) -> Result<ModelResponse, ProviderError> {
    let single = one_choice_request(request);
    let answers = n_calls(n, || chat.chat(&single, ctx)).await?;
    joined(answers).ok_or_else(|| ProviderError::InvalidResponse("no choices were answered".to_owned()))
}

/// One completion from several: the first answer's fields (its `raw_request` stands for every
/// call, which all send the same body), each answer's first choice numbered in order, usage summed.
pub fn joined(answers: Vec<ModelResponse>) -> Option<ModelResponse> {
    let mut answers = answers.into_iter();
    let mut first = answers.next()?;
    first.choices.truncate(1);
    for answer in answers {
        first.usage = first.usage.summed(&answer.usage);
        first.choices.extend(answer.choices.into_iter().take(1));
    }
    for (index, choice) in first.choices.iter_mut().enumerate() {
        choice.index = u32::try_from(index).unwrap_or(u32::MAX);
    }
    Some(first)
}

/// `n` streams of one choice each, merged as they come into one stream of `n` choices; the first
/// call's `raw_request` stands for every call.
pub(crate) async fn stream_n_times(
    streaming: Arc<dyn ChatStreamProvider>,
    request: &ModelRequest,
    ctx: CallContext<'_>,
    n: u32,
) -> Result<ModelStream, ProviderError> {
    let single = one_choice_request(request);
    let streams = n_calls(n, || streaming.chat_stream(&single, ctx)).await?;
    let raw_request = streams.first().and_then(|s| s.raw_request.clone());
    let merged = merged_streams(streams.into_iter().map(|s| s.chunks).collect());
    Ok(ModelStream::new(merged).with_raw_request(raw_request))
}

/// `call` made `n` times, at most [`CONCURRENT_CALLS`] at once; the answers in call order.
async fn n_calls<T, Call>(n: u32, call: impl Fn() -> Call) -> Result<Vec<T>, ProviderError>
where
    Call: std::future::Future<Output = Result<T, ProviderError>>,
{
    futures::stream::iter(0..n)
        .map(|_| call())
        .buffered(CONCURRENT_CALLS)
        .try_collect()
        .await
}

/// Chunks of every stream as they arrive, the `i`-th stream's choices carrying index `i`; the
/// streams' usage is summed into one usage chunk at the end. An error ends the merged stream.
pub(crate) fn merged_streams(streams: Vec<ChunkStream>) -> ChunkStream {
    let indexed = streams.into_iter().enumerate().map(|(index, stream)| {
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        stream
            .map(move |item| {
                item.map(|mut chunk| {
                    for choice in &mut chunk.choices {
                        choice.index = index;
                    }
                    chunk
                })
            })
            .boxed()
    });
    let state = Merge {
        streams: futures::stream::select_all(indexed),
        usage: None,
        ended: false,
    };
    futures::stream::unfold(state, |mut state| async move {
        if state.ended {
            return None;
        }
        loop {
            match state.streams.next().await {
                Some(Ok(mut chunk)) => {
                    if let Some(usage) = chunk.usage.take() {
                        state.usage = Some(match &state.usage {
                            Some(total) => total.summed(&usage),
                            None => usage,
                        });
                    }
                    if !chunk.choices.is_empty() {
                        return Some((Ok(chunk), state));
                    }
                }
                Some(Err(err)) => {
                    state.ended = true;
                    return Some((Err(err), state));
                }
                None => {
                    state.ended = true;
                    let usage = state.usage.take()?;
                    return Some((Ok(usage_chunk(usage)), state));
                }
            }
        }
    })
    .boxed()
}

struct Merge {
    streams: SelectAll<ChunkStream>,
    usage: Option<ModelUsage>,
    ended: bool,
}

fn usage_chunk(usage: ModelUsage) -> ModelChunk {
    ModelChunk {
        usage: Some(usage),
        ..ModelChunk::default()
    }
}

#[cfg(test)]
mod tests;
