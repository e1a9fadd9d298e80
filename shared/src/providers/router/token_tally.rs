//! Tokens of a streamed answer: the usage chunk comes last (or never, when the client did not ask
//! for it), so the stream keeps the latest usage it passed on and counts it when it is dropped —
//! at its end, or when the client goes away.

use crate::model::ModelUsage;
use crate::ports::{MetricUnit, MetricsSink};
use crate::providers::ChunkStream;
use futures::StreamExt;
use std::sync::Arc;

/// Record `tokens` by model, provider and direction.
pub(super) fn record_tokens(metrics: &dyn MetricsSink, model: &str, provider: &str, input: u64, output: u64) {
    for (direction, tokens) in [("in", input), ("out", output)] {
        let dimensions = [("model", model), ("provider", provider), ("direction", direction)];
        metrics.record("tokens", MetricUnit::Count, tokens as f64, &dimensions);
    }
}

/// `chunks`, with the usage they carry counted once the stream is dropped.
pub(super) fn counting_tokens(chunks: ChunkStream, mut tally: TokenTally) -> ChunkStream {
    chunks
        .inspect(move |chunk| {
            if let Ok(usage) = chunk.as_ref().map(|chunk| chunk.usage.as_ref()) {
                tally.observe(usage);
            }
        })
        .boxed()
}

/// The latest usage a stream passed on, and where to count it.
pub(super) struct TokenTally {
    pub metrics: Arc<dyn MetricsSink>,
    pub model: String,
    pub provider: String,
    pub latest: Option<ModelUsage>,
}

impl TokenTally {
    fn observe(&mut self, usage: Option<&ModelUsage>) {
        if let Some(usage) = usage {
            self.latest = Some(usage.clone());
        }
    }
}

impl Drop for TokenTally {
    fn drop(&mut self) {
        if let Some(usage) = self.latest.take() {
            record_tokens(
                self.metrics.as_ref(),
                &self.model,
                &self.provider,
                usage.input_tokens,
                usage.output_tokens,
            );
        }
    }
}
