//! OpenAI's limits on a request's `metadata` (chat completions, batches): at most 16 pairs, keys of
//! at most 64 characters, values of at most 512. One check; each layer words the problem in its own
//! error type.

/// The parameter every metadata problem names.
pub(crate) const PARAM: &str = "metadata";
pub(crate) const MAX_PAIRS: usize = 16;
pub(crate) const MAX_KEY_CHARS: usize = 64;
pub(crate) const MAX_VALUE_CHARS: usize = 512;

/// What is wrong with a `metadata` object; `key` is the client's key, not yet excerpted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MetadataProblem<'a> {
    /// More than [`MAX_PAIRS`] pairs.
    TooManyPairs { count: usize },
    /// A key longer than [`MAX_KEY_CHARS`] characters.
    KeyTooLong { key: &'a str, length: usize },
    /// A value longer than [`MAX_VALUE_CHARS`] characters.
    ValueTooLong { key: &'a str, length: usize },
}

/// The number of pairs is within [`MAX_PAIRS`].
pub(crate) fn check_pair_count(count: usize) -> Result<(), MetadataProblem<'static>> {
    if count > MAX_PAIRS {
        return Err(MetadataProblem::TooManyPairs { count });
    }
    Ok(())
}

/// One pair's key and value are within their lengths (the key is checked first).
pub(crate) fn check_pair<'a>(key: &'a str, value: &str) -> Result<(), MetadataProblem<'a>> {
    let length = key.chars().count();
    if length > MAX_KEY_CHARS {
        return Err(MetadataProblem::KeyTooLong { key, length });
    }
    let length = value.chars().count();
    if length > MAX_VALUE_CHARS {
        return Err(MetadataProblem::ValueTooLong { key, length });
    }
    Ok(())
}

/// Every limit over string pairs, in order: the count, then each pair.
pub(crate) fn check_pairs<'a>(
    pairs: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
) -> Result<(), MetadataProblem<'a>> {
    check_pair_count(pairs.len())?;
    for (key, value) in pairs {
        check_pair(key, value)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_inclusive_and_the_first_problem_wins() {
        let key = "k".repeat(MAX_KEY_CHARS);
        let value = "v".repeat(MAX_VALUE_CHARS);
        assert_eq!(check_pair(&key, &value), Ok(()));
        assert_eq!(check_pair_count(MAX_PAIRS), Ok(()));
        assert_eq!(
            check_pair_count(MAX_PAIRS + 1),
            Err(MetadataProblem::TooManyPairs { count: MAX_PAIRS + 1 })
        );
        let long_key = "é".repeat(MAX_KEY_CHARS + 1);
        assert_eq!(
            check_pair(&long_key, &"v".repeat(MAX_VALUE_CHARS + 1)),
            Err(MetadataProblem::KeyTooLong {
                key: &long_key,
                length: MAX_KEY_CHARS + 1
            })
        );
        assert_eq!(check_pairs([("k", value.as_str()), ("x", "vv")].into_iter()), Ok(()));
        let long_value = "v".repeat(MAX_VALUE_CHARS + 1);
        assert_eq!(
            check_pairs([("k", "v"), ("x", long_value.as_str())].into_iter()),
            Err(MetadataProblem::ValueTooLong {
                key: "x",
                length: MAX_VALUE_CHARS + 1
            })
        );
    }
}
