//! `[batches]`: how the batch engine splits and runs input files.

use super::ConfigError;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BatchesConfig {
    /// Requests per chunk (one queue message, one worker run).
    #[serde(default = "default_lines_per_chunk")]
    pub lines_per_chunk: u64,
    /// A chunk also ends before it would span more input bytes than this.
    #[serde(default = "default_max_chunk_bytes")]
    pub max_chunk_bytes: u64,
    /// Requests of one chunk in flight at once (per worker).
    #[serde(default = "default_line_concurrency")]
    pub line_concurrency: usize,
    /// Results are saved (and progress counted) at least this often while a chunk runs.
    #[serde(default = "default_checkpoint_interval_ms")]
    pub checkpoint_interval_ms: u64,
}

fn default_lines_per_chunk() -> u64 {
    1000
}
fn default_max_chunk_bytes() -> u64 {
    8 * 1024 * 1024
}
fn default_line_concurrency() -> usize {
    16
}
fn default_checkpoint_interval_ms() -> u64 {
    10_000
}

impl Default for BatchesConfig {
    fn default() -> Self {
        Self {
            lines_per_chunk: default_lines_per_chunk(),
            max_chunk_bytes: default_max_chunk_bytes(),
            line_concurrency: default_line_concurrency(),
            checkpoint_interval_ms: default_checkpoint_interval_ms(),
        }
    }
}

impl BatchesConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=50_000).contains(&self.lines_per_chunk) {
            return Err(ConfigError::invalid(
                "batches.lines_per_chunk",
                "must be between 1 and 50000",
            ));
        }
        if !(1024 * 1024..=64 * 1024 * 1024).contains(&self.max_chunk_bytes) {
            return Err(ConfigError::invalid(
                "batches.max_chunk_bytes",
                "must be between 1 MiB and 64 MiB",
            ));
        }
        if !(1..=1024).contains(&self.line_concurrency) {
            return Err(ConfigError::invalid(
                "batches.line_concurrency",
                "must be between 1 and 1024",
            ));
        }
        if !(100..=600_000).contains(&self.checkpoint_interval_ms) {
            return Err(ConfigError::invalid(
                "batches.checkpoint_interval_ms",
                "must be between 100 and 600000",
            ));
        }
        Ok(())
    }
}
