//! Tag rules shared by `/inference` and `/feedback`: the `tensorzero::` namespace is TensorZero's
//! own, so only `internal` requests may set tags in it (TensorZero answers 400 otherwise).

use crate::user_text::excerpt;
use std::collections::BTreeMap;

/// Tags in this namespace are TensorZero's own.
pub(crate) const RESERVED_TAG_PREFIX: &str = "tensorzero::";

/// Why a request's tags are refused: the first reserved tag a non-internal request sets.
pub(crate) fn reserved_tag_error<V>(tags: &BTreeMap<String, V>, internal: bool) -> Option<String> {
    if internal {
        return None;
    }
    let tag = tags.keys().find(|tag| tag.starts_with(RESERVED_TAG_PREFIX))?;
    Some(format!(
        "Tag `{}` is reserved: tag names may not start with `{RESERVED_TAG_PREFIX}`.",
        excerpt(tag)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_internal_requests_set_reserved_tags() {
        let tags: BTreeMap<String, String> = [("tensorzero::x".to_owned(), "1".to_owned())].into();
        assert!(reserved_tag_error(&tags, false).is_some_and(|m| m.contains("tensorzero::x")));
        assert_eq!(reserved_tag_error(&tags, true), None);
        let plain: BTreeMap<String, String> = [("user".to_owned(), "1".to_owned())].into();
        assert_eq!(reserved_tag_error(&plain, false), None);
    }
}
