//! A started model stream as function chunks: translated piece by piece, accumulated, and — once
//! it has ended — its cache entry and record written after the response.

use super::error::FunctionError;
use super::model_call::ModelCall;
use super::output::function_output;
use super::persist::{Finished, InferencePersistence};
use super::prepare::PreparedCall;
use super::stream::{ChunkTranslator, InferenceChunk};
use super::validate::InferenceCall;
use super::variants::total_usage;
use crate::config::functions::FunctionKind;
use crate::model::{ChunkAccumulator, ModelChunk, ModelResponse};
use crate::ports::{CacheKey, ProjectId};
use crate::providers::synthetic_stream::stream_from_response;
use crate::providers::ChunkStream;
use futures::stream::BoxStream;
use futures::StreamExt;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// A model stream that has produced its first chunk.
pub(super) struct StartedModelStream {
    pub first: Option<ModelChunk>,
    pub rest: ChunkStream,
    pub provider_name: String,
    pub raw_request: Option<String>,
}

impl StartedModelStream {
    /// A cached answer, streamed.
    pub(crate) fn from_cache(response: &ModelResponse) -> Self {
        Self {
            first: None,
            rest: stream_from_response(response, true),
            provider_name: response.provider_name.clone(),
            raw_request: response.raw_request.clone(),
        }
    }
}

/// What a finished stream leaves behind: its cache entry and record.
pub(super) struct StreamFinish {
    pub persistence: InferencePersistence,
    pub project: ProjectId,
    pub call: InferenceCall,
    pub prepared: PreparedCall,
    pub inference_id: Uuid,
    pub model_call_id: Uuid,
    pub function_name: String,
    pub variant_name: String,
    pub kind: FunctionKind,
    pub key: CacheKey,
    pub mode: crate::config::CacheMode,
    pub cached: bool,
    pub started: Instant,
    pub ttft: Duration,
    pub provider_name: String,
    pub raw_request: Option<String>,
    /// Model calls made before the stream (a mixture's candidates): stored after the streamed
    /// call, their usage added to its.
    pub earlier_calls: Vec<ModelCall>,
}

impl StreamFinish {
    fn finish(self, accumulator: ChunkAccumulator) {
        let mut response = accumulator.finish(self.model_call_id.to_string());
        response.provider_name = self.provider_name;
        response.raw_request = self.raw_request;
        if !self.cached {
            self.persistence.remember(self.key, self.mode, &response);
        }
        let choice = response.choices.first();
        let output = function_output(self.kind, choice, &self.prepared.rules);
        let finish_reason = choice.and_then(|c| c.finish_reason);
        let processing_time = self.started.elapsed();
        let model_call = ModelCall {
            id: self.model_call_id,
            model: self.prepared.request.model.clone(),
            provider: response.provider_name.clone(),
            response,
            latency: processing_time,
            ttft: Some(self.ttft),
            cached: self.cached,
        };
        let mut model_calls = vec![model_call];
        model_calls.extend(self.earlier_calls);
        let usage = total_usage(&model_calls);
        self.persistence.record(Finished {
            project: &self.project,
            call: &self.call,
            prepared: &self.prepared,
            inference_id: self.inference_id,
            function_name: &self.function_name,
            variant_name: &self.variant_name,
            kind: self.kind,
            output: &output,
            usage: &usage,
            finish_reason,
            model_calls: &model_calls,
            auxiliary_content: &[],
            processing_time,
        });
    }
}

struct StreamState {
    first: Option<ModelChunk>,
    rest: ChunkStream,
    translator: ChunkTranslator,
    accumulator: ChunkAccumulator,
    deadline: Option<tokio::time::Instant>,
    finish: Option<StreamFinish>,
    done: bool,
}

/// The function chunks of a started model stream, ending at the model's end (then its record
/// and cache entry are written), an error, or the total deadline.
pub(super) fn function_chunks(
    first: Option<ModelChunk>,
    rest: ChunkStream,
    translator: ChunkTranslator,
    deadline: Option<tokio::time::Instant>,
    finish: StreamFinish,
) -> BoxStream<'static, Result<InferenceChunk, FunctionError>> {
    let state = StreamState {
        first,
        rest,
        translator,
        accumulator: ChunkAccumulator::default(),
        deadline,
        finish: Some(finish),
        done: false,
    };
    futures::stream::unfold(state, |mut state| async move {
        loop {
            if state.done {
                return None;
            }
            let next = match state.first.take() {
                Some(first) => Some(Ok(first)),
                None => match state.deadline {
                    Some(deadline) => match tokio::time::timeout_at(deadline, state.rest.next()).await {
                        Ok(next) => next,
                        Err(_) => {
                            state.done = true;
                            return Some((
                                Err(FunctionError::StreamInterrupted(
                                    "the variant's streaming timeout passed".to_owned(),
                                )),
                                state,
                            ));
                        }
                    },
                    None => state.rest.next().await,
                },
            };
            match next {
                None => {
                    if let Some(finish) = state.finish.take() {
                        finish.finish(std::mem::take(&mut state.accumulator));
                    }
                    return None;
                }
                Some(Ok(chunk)) => {
                    state.accumulator.push(&chunk);
                    if let Some(out) = state.translator.translate(&chunk) {
                        return Some((Ok(out), state));
                    }
                }
                Some(Err(error)) => {
                    state.done = true;
                    return Some((Err(FunctionError::StreamInterrupted(error.to_string())), state));
                }
            }
        }
    })
    .boxed()
}
