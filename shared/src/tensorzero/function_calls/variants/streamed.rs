//! Streamed answers: a prepared model request streamed for real (a `chat_completion` variant, a
//! mixture's fuser), or a whole answer sent as one chunk (best-of-n, and a mixture whose fuser
//! was not called or failed), as TensorZero does.

use super::super::error::FunctionError;
use super::super::model_call::ModelCall;
use super::super::output::{FunctionOutput, OutputBlock};
use super::super::prepare::{PreparedCall, VariantPlan};
use super::super::service::{FunctionService, InferenceResult};
use super::super::stream::{ChunkBody, ChunkTranslator, ContentChunk, InferenceChunk, UsageReport};
use super::super::streaming::{function_chunks, StartedModelStream, StreamFinish};
use super::{total_usage, Attempt, FunctionChunks, RunError, VariantAnswer};
use futures::StreamExt;
use std::time::{Duration, Instant};
use uuid::Uuid;

impl FunctionService {
    /// Stream `prepared` (from the cache when it holds the answer): started once its first
    /// chunk has come within the variant's `ttft_ms`. `earlier_calls` (a mixture's candidates)
    /// are stored after the streamed call and their usage is reported with its.
    pub(crate) async fn stream_prepared(
        &self,
        attempt: &Attempt<'_>,
        plan: VariantPlan<'_>,
        prepared: PreparedCall,
        inference_id: Uuid,
        earlier_calls: Vec<ModelCall>,
    ) -> Result<FunctionChunks, RunError> {
        let call = attempt.call;
        let persistence = self.persistence();
        let mode = persistence.mode(call);
        let timeouts = plan
            .config
            .and_then(|c| c.timeouts.as_ref())
            .and_then(|t| t.streaming.clone())
            .unwrap_or_default();
        let started = Instant::now();
        let key = self.cache_key(attempt, &prepared, true);
        let cached = persistence.cached(&key, mode, call.cache_max_age_s).await;
        let started_stream = match &cached {
            Some(response) => StartedModelStream::from_cache(response),
            None => {
                self.start_stream(&prepared, call, timeouts.ttft_ms.map(Duration::from_millis))
                    .await?
            }
        };
        let translator = ChunkTranslator::new(
            inference_id,
            call.episode_id,
            plan.variant_name.to_owned(),
            plan.kind,
            &prepared.rules,
            cached.is_some(),
        )
        .with_earlier_usage(&total_usage(&earlier_calls));
        let deadline = timeouts
            .total_ms
            .map(|ms| tokio::time::Instant::from_std(started) + Duration::from_millis(ms));
        let finish = StreamFinish {
            persistence: persistence.clone(),
            project: attempt.project.clone(),
            call: call.clone(),
            prepared,
            inference_id,
            model_call_id: self.new_id(),
            function_name: plan.function_name.to_owned(),
            variant_name: plan.variant_name.to_owned(),
            kind: plan.kind,
            key,
            mode,
            cached: cached.is_some(),
            started,
            ttft: started.elapsed(),
            provider_name: started_stream.provider_name,
            raw_request: started_stream.raw_request,
            earlier_calls,
        };
        Ok(function_chunks(
            started_stream.first,
            started_stream.rest,
            translator,
            deadline,
            finish,
        ))
    }

    /// A whole answer recorded, then streamed as one chunk.
    pub(crate) fn simulated_stream(
        &self,
        attempt: &Attempt<'_>,
        plan: VariantPlan<'_>,
        inference_id: Uuid,
        answer: VariantAnswer,
        started: Instant,
    ) -> Result<FunctionChunks, RunError> {
        let result = self.finish(attempt, plan, inference_id, answer, started);
        Ok(futures::stream::iter([simulated_chunk(&result)]).boxed())
    }
}

/// The one chunk of a whole answer: every block (text and thought pieces numbered `0`, `1`, …;
/// tool calls keep their id), the summed usage and the finish reason. An unknown block cannot
/// be streamed: the stream fails.
pub(crate) fn simulated_chunk(result: &InferenceResult) -> Result<InferenceChunk, FunctionError> {
    let body = match &result.output {
        FunctionOutput::Chat(blocks) => {
            let mut content = Vec::with_capacity(blocks.len());
            let mut next_id = 0_usize;
            let mut piece_id = || {
                let id = next_id.to_string();
                next_id += 1;
                id
            };
            for block in blocks {
                content.push(match block {
                    OutputBlock::Text { text } => ContentChunk::Text {
                        id: piece_id(),
                        text: text.clone(),
                    },
                    OutputBlock::Thought { text, .. } => ContentChunk::Thought {
                        id: piece_id(),
                        text: text.clone(),
                    },
                    OutputBlock::ToolCall {
                        id,
                        raw_name,
                        raw_arguments,
                        ..
                    } => ContentChunk::ToolCall {
                        id: id.clone(),
                        raw_name: raw_name.clone(),
                        raw_arguments: raw_arguments.clone(),
                    },
                    OutputBlock::Unknown { .. } => {
                        return Err(FunctionError::StreamInterrupted(
                            "the answer holds an unknown content block, which cannot be streamed".to_owned(),
                        ))
                    }
                });
            }
            ChunkBody::Chat { content }
        }
        FunctionOutput::Json(output) => ChunkBody::Json {
            raw: output.raw.clone().unwrap_or_default(),
        },
    };
    Ok(InferenceChunk {
        inference_id: result.inference_id,
        episode_id: result.episode_id,
        variant_name: result.variant_name.clone(),
        body,
        usage: Some(UsageReport::from(&result.usage)),
        finish_reason: result.finish_reason,
    })
}
