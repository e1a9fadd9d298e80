//! JSON log lines captured in memory, each with the span it was written in, for the tests that
//! read what a job or a request logs.

use serde_json::Value;
use std::sync::{Arc, Mutex};
use tracing::subscriber::DefaultGuard;

/// Log lines written to a buffer.
#[derive(Clone, Default)]
pub struct Lines(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    /// Capture this thread's events up to `level` until the guard drops.
    pub fn capture(level: tracing::Level) -> (Self, DefaultGuard) {
        let lines = Self::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_max_level(level)
            .with_current_span(true)
            .with_writer(move || writer.clone())
            .finish();
        (lines, tracing::subscriber::set_default(subscriber))
    }

    /// Everything written so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }

    /// The first line whose message is `message`.
    pub fn with_message(&self, message: &str) -> Value {
        let text = self.text();
        text.lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .find(|line| line["fields"]["message"] == message)
            .unwrap_or_else(|| panic!("no line `{message}` in:\n{text}"))
    }
}
