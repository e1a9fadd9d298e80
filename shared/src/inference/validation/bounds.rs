//! Range and size checks with OpenAI's error codes (`integer_below_min_value`,
//! `array_above_max_length`, …); every error names its parameter.

use crate::inference::InferenceError;
use crate::user_text::excerpt;
use std::fmt::Display;

pub(super) fn integer_in(name: &str, value: i64, min: i64, max: Option<i64>) -> Result<(), InferenceError> {
    if value < min {
        return Err(InferenceError::invalid(
            format!(
                "Invalid '{name}': integer below minimum value. Expected a value >= {min}, but got {value} instead."
            ),
            name,
            "integer_below_min_value",
        ));
    }
    match max {
        Some(max) if value > max => Err(InferenceError::invalid(
            format!(
                "Invalid '{name}': integer above maximum value. Expected a value <= {max}, but got {value} instead."
            ),
            name,
            "integer_above_max_value",
        )),
        _ => Ok(()),
    }
}

pub(super) fn decimal_in(name: &str, value: f64, min: f64, max: f64) -> Result<(), InferenceError> {
    // A float prints without exponent (1e300 is 301 digits): quote a prefix.
    let shown = value.to_string();
    let value_shown = excerpt(&shown);
    if value < min {
        return Err(InferenceError::invalid(
            format!(
                "Invalid '{name}': decimal below minimum value. Expected a value >= {min}, but got {value_shown} instead."
            ),
            name,
            "decimal_below_min_value",
        ));
    }
    if value > max {
        return Err(InferenceError::invalid(
            format!(
                "Invalid '{name}': decimal above maximum value. Expected a value <= {max}, but got {value_shown} instead."
            ),
            name,
            "decimal_above_max_value",
        ));
    }
    Ok(())
}

pub(super) fn array_at_most(name: &str, length: usize, max: usize) -> Result<(), InferenceError> {
    if length > max {
        return Err(InferenceError::invalid(
            format!(
                "Invalid '{name}': array too long. Expected an array with at most {max} items, but got {length} instead."
            ),
            name,
            "array_above_max_length",
        ));
    }
    Ok(())
}

pub(super) fn array_not_empty(name: &str, length: usize) -> Result<(), InferenceError> {
    if length == 0 {
        return Err(InferenceError::invalid(
            format!("Invalid '{name}': empty array. Expected an array with at least 1 item."),
            name,
            "empty_array",
        ));
    }
    Ok(())
}

pub(super) fn object_at_most(name: &str, properties: usize, max: usize) -> Result<(), InferenceError> {
    if properties > max {
        return Err(too_many_properties(name, properties, max));
    }
    Ok(())
}

/// `object_above_max_properties`: the object `name` has more than `max` properties.
pub(super) fn too_many_properties(name: &str, properties: usize, max: usize) -> InferenceError {
    InferenceError::invalid(
        format!(
            "Invalid '{name}': too many properties. Expected an object with at most {max} properties, but got {properties} instead."
        ),
        name,
        "object_above_max_properties",
    )
}

/// `string_above_max_length`: `what` (within `name`) has `length` characters, more than `max`.
pub(super) fn string_too_long(name: &str, what: impl Display, length: usize, max: usize) -> InferenceError {
    InferenceError::invalid(
        format!(
            "Invalid '{name}': string too long. Expected {what} to have at most {max} characters, but it has {length}."
        ),
        name,
        "string_above_max_length",
    )
}

/// `"the key 'k'"`, quoting at most a prefix of the client's key.
pub(super) fn key_named(key: &str) -> String {
    format!("the key '{}'", excerpt(key))
}
