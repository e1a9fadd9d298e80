//! `extra_body` and `extra_headers`: edits of a provider's wire request that the gateway applies
//! without understanding them.
//!
//! Entries come from three places, applied in this order so that later ones win (TensorZero's
//! precedence): a variant's configuration ([`ExtraPlacement::BeforeProviderConfig`]), the
//! provider's configuration, then the inference request ([`ExtraPlacement::AfterProviderConfig`]).
//! An entry scoped to a provider (`provider`) applies only when that provider handles the call.

use crate::user_text::excerpt;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a request's entry goes relative to the provider's configured entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExtraPlacement {
    /// Before the provider's configured entries, which override it (a variant's configuration).
    BeforeProviderConfig,
    /// After the provider's configured entries, overriding them (sent with the inference request).
    #[default]
    AfterProviderConfig,
}

impl ExtraPlacement {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// Set (or delete) the value at an RFC 6901 JSON pointer of the provider's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtraBodyEntry {
    pub pointer: String,
    pub edit: ExtraEdit,
    /// Only when the provider handling the call has this name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "ExtraPlacement::is_default")]
    pub placement: ExtraPlacement,
}

impl ExtraBodyEntry {
    /// Set `value` at `pointer`, for every provider, after the provider's configured entries.
    pub fn set(pointer: impl Into<String>, value: Value) -> Self {
        Self {
            pointer: pointer.into(),
            edit: ExtraEdit::Set(value),
            provider: None,
            placement: ExtraPlacement::default(),
        }
    }

    /// Delete what is at `pointer`, for every provider, after the provider's configured entries.
    pub fn delete(pointer: impl Into<String>) -> Self {
        Self {
            edit: ExtraEdit::Delete,
            ..Self::set(pointer, Value::Null)
        }
    }

    /// Only for the provider named `provider`.
    pub(crate) fn for_provider(mut self, provider: impl Into<String>) -> Self {
        self.provider = Some(provider.into());
        self
    }

    pub(crate) fn placed(mut self, placement: ExtraPlacement) -> Self {
        self.placement = placement;
        self
    }
}

/// What to do at a pointer or header name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExtraEdit {
    Set(Value),
    Delete,
}

/// Set (or remove) one HTTP header of the provider call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtraHeaderEntry {
    pub name: String,
    /// `None` removes the header.
    pub value: Option<String>,
    /// Only when the provider handling the call has this name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "ExtraPlacement::is_default")]
    pub placement: ExtraPlacement,
}

impl ExtraHeaderEntry {
    /// Set header `name` to `value`, for every provider, after the provider's configured headers.
    pub fn set(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            value: Some(value.into()),
            provider: None,
            placement: ExtraPlacement::default(),
        }
    }

    /// Remove header `name`, for every provider, after the provider's configured headers.
    pub fn delete(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            value: None,
            provider: None,
            placement: ExtraPlacement::default(),
        }
    }

    /// Only for the provider named `provider`.
    pub(crate) fn for_provider(mut self, provider: impl Into<String>) -> Self {
        self.provider = Some(provider.into());
        self
    }

    pub(crate) fn placed(mut self, placement: ExtraPlacement) -> Self {
        self.placement = placement;
        self
    }
}

/// An entry a request carries: scoped to a provider or not, placed before or after the
/// provider's configured entries.
pub(crate) trait ScopedExtra {
    fn provider(&self) -> Option<&str>;
    fn placement(&self) -> ExtraPlacement;
}

impl ScopedExtra for ExtraBodyEntry {
    fn provider(&self) -> Option<&str> {
        self.provider.as_deref()
    }
    fn placement(&self) -> ExtraPlacement {
        self.placement
    }
}

impl ScopedExtra for ExtraHeaderEntry {
    fn provider(&self) -> Option<&str> {
        self.provider.as_deref()
    }
    fn placement(&self) -> ExtraPlacement {
        self.placement
    }
}

/// The request's entries that apply to the provider named `provider` with this `placement`, in
/// request order. A provider applies `Before…`, then its own configured entries, then `After…`.
pub(crate) fn entries_for<'a, E: ScopedExtra>(
    entries: &'a [E],
    provider: &'a str,
    placement: ExtraPlacement,
) -> impl Iterator<Item = &'a E> + 'a {
    entries
        .iter()
        .filter(move |e| e.placement() == placement && e.provider().is_none_or(|p| p == provider))
}

/// Why an `extra_body` pointer could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtraBodyError {
    #[error("extra_body pointer `{}` must be empty or start with `/`", excerpt(.0))]
    NotAPointer(String),
    #[error(
        "extra_body pointer `{}` goes through a value that is neither an object nor an array",
        excerpt(.0)
    )]
    NotAContainer(String),
    #[error("extra_body pointer `{}` names an array index that does not exist", excerpt(.0))]
    BadIndex(String),
}

/// Why an `extra_headers` entry could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtraHeaderError {
    #[error("extra_headers name `{}` is not a valid HTTP header name", excerpt(.0))]
    InvalidName(String),
    #[error("extra_headers value of `{}` is not a valid HTTP header value", excerpt(.0))]
    InvalidValue(String),
}

/// Apply the entries in order to a request's headers: a value replaces every value of the header,
/// no value removes it.
pub(crate) fn apply_extra_headers<'a>(
    headers: &mut http::HeaderMap,
    entries: impl IntoIterator<Item = &'a ExtraHeaderEntry>,
) -> Result<(), ExtraHeaderError> {
    for entry in entries {
        let name = http::HeaderName::from_bytes(entry.name.as_bytes())
            .map_err(|_| ExtraHeaderError::InvalidName(entry.name.clone()))?;
        match &entry.value {
            Some(value) => {
                let value = http::HeaderValue::from_str(value)
                    .map_err(|_| ExtraHeaderError::InvalidValue(entry.name.clone()))?;
                headers.insert(name, value);
            }
            None => {
                headers.remove(name);
            }
        }
    }
    Ok(())
}

/// Apply the entries in order. Missing objects on the way are created; `-` appends to an array;
/// deleting what is not there is not an error.
pub(crate) fn apply_extra_body<'a>(
    body: &mut Value,
    entries: impl IntoIterator<Item = &'a ExtraBodyEntry>,
) -> Result<(), ExtraBodyError> {
    for entry in entries {
        apply_one(body, entry)?;
    }
    Ok(())
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn apply_one(body: &mut Value, entry: &ExtraBodyEntry) -> Result<(), ExtraBodyError> {
    let pointer = entry.pointer.as_str();
    if pointer.is_empty() {
        if let ExtraEdit::Set(value) = &entry.edit {
            *body = value.clone();
        }
        return Ok(());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(ExtraBodyError::NotAPointer(pointer.to_owned()));
    };
    let tokens: Vec<String> = rest.split('/').map(unescape).collect();
    let Some((last, parents)) = tokens.split_last() else {
        return Ok(());
    };
    let mut target = body;
    for token in parents {
        if target.is_null() && matches!(entry.edit, ExtraEdit::Set(_)) {
            *target = Value::Object(serde_json::Map::new());
        }
        target = match target {
            Value::Object(map) => match entry.edit {
                ExtraEdit::Set(_) => map.entry(token.clone()).or_insert(Value::Null),
                ExtraEdit::Delete => match map.get_mut(token) {
                    Some(next) => next,
                    None => return Ok(()),
                },
            },
            Value::Array(items) => {
                let index: usize = token
                    .parse()
                    .map_err(|_| ExtraBodyError::BadIndex(pointer.to_owned()))?;
                items
                    .get_mut(index)
                    .ok_or_else(|| ExtraBodyError::BadIndex(pointer.to_owned()))?
            }
            _ => return Err(ExtraBodyError::NotAContainer(pointer.to_owned())),
        };
    }
    if target.is_null() && matches!(entry.edit, ExtraEdit::Set(_)) {
        *target = Value::Object(serde_json::Map::new());
    }
    match (target, &entry.edit) {
        (Value::Object(map), ExtraEdit::Set(value)) => {
            map.insert(last.clone(), value.clone());
        }
        (Value::Object(map), ExtraEdit::Delete) => {
            map.remove(last);
        }
        (Value::Array(items), ExtraEdit::Set(value)) if last == "-" => items.push(value.clone()),
        (Value::Array(items), edit) => {
            let index: usize = last.parse().map_err(|_| ExtraBodyError::BadIndex(pointer.to_owned()))?;
            if index >= items.len() {
                return Err(ExtraBodyError::BadIndex(pointer.to_owned()));
            }
            match edit {
                ExtraEdit::Set(value) => items[index] = value.clone(),
                ExtraEdit::Delete => {
                    items.remove(index);
                }
            }
        }
        _ => return Err(ExtraBodyError::NotAContainer(pointer.to_owned())),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(pointer: &str, value: Value) -> ExtraBodyEntry {
        ExtraBodyEntry::set(pointer, value)
    }

    fn delete(pointer: &str) -> ExtraBodyEntry {
        ExtraBodyEntry::delete(pointer)
    }

    #[test]
    fn sets_nested_values_appends_and_deletes() {
        let mut body = json!({"a": {"b": 1}, "list": [1, 2], "gone": true});
        apply_extra_body(
            &mut body,
            &[
                set("/a/c/d", json!("x")),
                set("/list/-", json!(3)),
                set("/list/0", json!(0)),
                set("/we~1ird", json!(1)),
                delete("/gone"),
                delete("/never/there"),
            ],
        )
        .unwrap();
        assert_eq!(
            body,
            json!({"a": {"b": 1, "c": {"d": "x"}}, "list": [0, 2, 3], "we/ird": 1})
        );
    }

    #[test]
    fn bad_pointers_are_errors() {
        let mut body = json!({"s": "text", "list": []});
        assert!(apply_extra_body(&mut body, &[set("no-slash", json!(1))]).is_err());
        assert!(apply_extra_body(&mut body, &[set("/s/x", json!(1))]).is_err());
        assert!(apply_extra_body(&mut body, &[set("/list/4", json!(1))]).is_err());
    }
}
