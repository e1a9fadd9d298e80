//! Text for messages we send back or log: what a client sent, quoted as a short prefix only (so
//! an oversized value cannot make an error as large as the request), and errors with their causes.

use std::borrow::Cow;

/// An error and its sources, `: `-joined (HTTP and AWS SDK errors keep the cause out of their
/// own message).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        message.push_str(": ");
        message.push_str(&inner.to_string());
        source = inner.source();
    }
    message
}

/// The most characters of a client's value that a message quotes.
pub(crate) const MAX_QUOTED_CHARS: usize = 64;

/// `value` as it may appear in a message: whole when short, else its first
/// [`MAX_QUOTED_CHARS`] characters followed by `…` and the full length in bytes.
pub fn excerpt(value: &str) -> Cow<'_, str> {
    match value.char_indices().nth(MAX_QUOTED_CHARS) {
        None => Cow::Borrowed(value),
        Some((cut, _)) => Cow::Owned(format!("{}… ({} bytes)", &value[..cut], value.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("request failed")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn an_error_chain_names_every_cause() {
        let err = Outer(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "connection refused",
        ));
        assert_eq!(error_chain(&err), "request failed: connection refused");
        assert_eq!(error_chain(&err.0), "connection refused");
    }

    #[test]
    fn short_values_are_quoted_whole() {
        assert_eq!(excerpt("gpt-4o-mini"), "gpt-4o-mini");
        let exactly = "x".repeat(MAX_QUOTED_CHARS);
        assert_eq!(excerpt(&exactly), exactly);
    }

    #[test]
    fn long_values_are_cut_to_a_prefix_with_their_length() {
        let long = "m".repeat(1_000_000);
        let quoted = excerpt(&long);
        assert!(quoted.len() < 100, "{}", quoted.len());
        assert!(quoted.starts_with(&"m".repeat(MAX_QUOTED_CHARS)));
        assert!(quoted.ends_with("(1000000 bytes)"));
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        let long = "é".repeat(200);
        let quoted = excerpt(&long);
        assert!(quoted.starts_with(&"é".repeat(MAX_QUOTED_CHARS)));
    }
}
