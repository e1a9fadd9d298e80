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
    /// A running chunk saves its results (and counts them) once this many are pending, so the
    /// saves of a batch grow with its lines, not with how long its model takes. Unset: a chunk's
    /// lines (`lines_per_chunk`), i.e. one save per chunk unless the time bound comes first.
    #[serde(default)]
    pub checkpoint_lines: Option<u64>,
    /// ...but at most once per this many milliseconds (and at least every 30× this).
    #[serde(default = "default_checkpoint_interval_ms")]
    pub checkpoint_interval_ms: u64,
    /// Provider-native batches: the shortest gap between two polls of one provider batch.
    #[serde(default = "default_native_poll_interval_ms")]
    pub native_poll_interval_ms: u64,
    /// The longest gap the polls back off to while a provider batch shows no progress.
    #[serde(default = "default_native_poll_max_interval_ms")]
    pub native_poll_max_interval_ms: u64,
    /// Request lines per provider input file (the OpenAI Batch API takes at most 50,000).
    #[serde(default = "default_native_max_lines")]
    pub native_max_lines: u64,
    /// Bytes per provider input file (the OpenAI Batch API takes at most 200 MB).
    #[serde(default = "default_native_max_bytes")]
    pub native_max_bytes: u64,
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
fn default_native_poll_interval_ms() -> u64 {
    60_000
}
fn default_native_poll_max_interval_ms() -> u64 {
    300_000
}
/// The OpenAI Batch API's limits on one input file.
pub(crate) const NATIVE_MAX_LINES: u64 = 50_000;
pub(crate) const NATIVE_MAX_BYTES: u64 = 200_000_000;
fn default_native_max_lines() -> u64 {
    NATIVE_MAX_LINES
}
fn default_native_max_bytes() -> u64 {
    NATIVE_MAX_BYTES
}

impl Default for BatchesConfig {
    fn default() -> Self {
        Self {
            lines_per_chunk: default_lines_per_chunk(),
            max_chunk_bytes: default_max_chunk_bytes(),
            line_concurrency: default_line_concurrency(),
            checkpoint_lines: None,
            checkpoint_interval_ms: default_checkpoint_interval_ms(),
            native_poll_interval_ms: default_native_poll_interval_ms(),
            native_poll_max_interval_ms: default_native_poll_max_interval_ms(),
            native_max_lines: default_native_max_lines(),
            native_max_bytes: default_native_max_bytes(),
        }
    }
}

impl BatchesConfig {
    /// Results pending before a running chunk saves them: `checkpoint_lines`, by default a
    /// whole chunk.
    pub fn checkpoint_lines(&self) -> u64 {
        self.checkpoint_lines.unwrap_or(self.lines_per_chunk)
    }

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
        if self
            .checkpoint_lines
            .is_some_and(|lines| !(1..=50_000).contains(&lines))
        {
            return Err(ConfigError::invalid(
                "batches.checkpoint_lines",
                "must be between 1 and 50000",
            ));
        }
        if !(100..=600_000).contains(&self.checkpoint_interval_ms) {
            return Err(ConfigError::invalid(
                "batches.checkpoint_interval_ms",
                "must be between 100 and 600000",
            ));
        }
        if !(100..=3_600_000).contains(&self.native_poll_interval_ms) {
            return Err(ConfigError::invalid(
                "batches.native_poll_interval_ms",
                "must be between 100 and 3600000",
            ));
        }
        if !(self.native_poll_interval_ms..=86_400_000).contains(&self.native_poll_max_interval_ms) {
            return Err(ConfigError::invalid(
                "batches.native_poll_max_interval_ms",
                "must be at least batches.native_poll_interval_ms and at most 86400000",
            ));
        }
        if !(1..=NATIVE_MAX_LINES).contains(&self.native_max_lines) {
            return Err(ConfigError::invalid(
                "batches.native_max_lines",
                format!("must be between 1 and {NATIVE_MAX_LINES}"),
            ));
        }
        if !(1024..=NATIVE_MAX_BYTES).contains(&self.native_max_bytes) {
            return Err(ConfigError::invalid(
                "batches.native_max_bytes",
                format!("must be between 1024 and {NATIVE_MAX_BYTES}"),
            ));
        }
        Ok(())
    }
}
