//! The `limit` of every listing: read from the query once, as a whole number within the listing's
//! bounds. Each surface states a refusal its own way (OpenAI's codes, TensorZero's and Baseten's
//! messages); the rule is this one.

use crate::user_text::excerpt;

/// How many items a page of one listing may hold, and how many when the client does not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageBounds {
    pub default: usize,
    pub max: usize,
}

/// A page size within its listing's bounds: only [`PageBounds`] makes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLimit(usize);

impl PageLimit {
    pub fn get(self) -> usize {
        self.0
    }
}

/// Why a `limit` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("Invalid 'limit': '{0}' is not an integer.")]
    NotAnInteger(String),
    #[error("Invalid 'limit': integer below minimum value. Expected a value >= 1, but got {0} instead.")]
    BelowMinimum(i128),
    #[error("Invalid 'limit': integer above maximum value. Expected a value <= {max}, but got {got} instead.")]
    AboveMaximum { got: i128, max: usize },
}

impl LimitError {
    /// OpenAI's code for the refusal.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotAnInteger(_) => "invalid_type",
            Self::BelowMinimum(_) => "integer_below_min_value",
            Self::AboveMaximum { .. } => "integer_above_max_value",
        }
    }
}

impl PageBounds {
    pub const fn new(default: usize, max: usize) -> Self {
        Self { default, max }
    }

    /// The page size when the client names none.
    pub const fn default_limit(self) -> PageLimit {
        PageLimit(self.default)
    }

    /// The `limit` a client sent, as its text (`None`: not sent, the default).
    pub fn parse(self, text: Option<&str>) -> Result<PageLimit, LimitError> {
        let Some(text) = text else {
            return Ok(self.default_limit());
        };
        let value: i128 = text
            .trim()
            .parse()
            .map_err(|_| LimitError::NotAnInteger(excerpt(text).into_owned()))?;
        self.within(value)
    }

    /// A `limit` a client sent as a number.
    pub fn check(self, limit: usize) -> Result<PageLimit, LimitError> {
        self.within(i128::try_from(limit).unwrap_or(i128::MAX))
    }

    fn within(self, value: i128) -> Result<PageLimit, LimitError> {
        if value < 1 {
            return Err(LimitError::BelowMinimum(value));
        }
        match usize::try_from(value) {
            Ok(limit) if limit <= self.max => Ok(PageLimit(limit)),
            _ => Err(LimitError::AboveMaximum {
                got: value,
                max: self.max,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: PageBounds = PageBounds::new(20, 100);

    #[test]
    fn a_limit_is_a_whole_number_within_bounds_or_the_default() {
        assert_eq!(BOUNDS.parse(None).unwrap().get(), 20);
        assert_eq!(BOUNDS.parse(Some(" 7 ")).unwrap().get(), 7);
        assert_eq!(BOUNDS.parse(Some("100")).unwrap().get(), 100);
        assert_eq!(BOUNDS.check(1).unwrap().get(), 1);
    }

    #[test]
    fn refusals_say_why_with_openais_codes() {
        let cases = [
            ("x", "invalid_type"),
            ("1.5", "invalid_type"),
            ("0", "integer_below_min_value"),
            ("-1", "integer_below_min_value"),
            ("101", "integer_above_max_value"),
            ("99999999999999999999", "integer_above_max_value"),
        ];
        for (text, code) in cases {
            let error = BOUNDS.parse(Some(text)).unwrap_err();
            assert_eq!(error.code(), code, "{text}");
            assert!(error.to_string().starts_with("Invalid 'limit'"), "{error}");
        }
        assert_eq!(BOUNDS.check(0).unwrap_err().code(), "integer_below_min_value");
        assert_eq!(BOUNDS.check(usize::MAX).unwrap_err().code(), "integer_above_max_value");
    }
}
