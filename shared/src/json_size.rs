//! The size of a JSON value as compact text, counted without building the text: what bounds on
//! client JSON (schema sizes, generated answers) measure.

use serde_json::Value;

/// The bytes of `value` as compact JSON.
pub(crate) fn json_len(value: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => counter.0,
        Err(_) => usize::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counts_compact_json() {
        let value = json!({"a": [1, "x"], "b": null});
        assert_eq!(json_len(&value), value.to_string().len());
    }
}
