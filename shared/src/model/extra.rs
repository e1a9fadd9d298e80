//! `extra_body` and `extra_headers`: edits of a provider's wire request that the gateway applies
//! without understanding them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Set (or delete) the value at an RFC 6901 JSON pointer of the provider's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtraBodyEntry {
    pub pointer: String,
    pub edit: ExtraEdit,
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
}

/// Why an `extra_body` pointer could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtraBodyError {
    #[error("extra_body pointer `{0}` must be empty or start with `/`")]
    NotAPointer(String),
    #[error("extra_body pointer `{0}` goes through a value that is neither an object nor an array")]
    NotAContainer(String),
    #[error("extra_body pointer `{0}` names an array index that does not exist")]
    BadIndex(String),
}

/// Apply the entries in order. Missing objects on the way are created; `-` appends to an array;
/// deleting what is not there is not an error.
pub fn apply_extra_body(body: &mut Value, entries: &[ExtraBodyEntry]) -> Result<(), ExtraBodyError> {
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
        ExtraBodyEntry {
            pointer: pointer.into(),
            edit: ExtraEdit::Set(value),
        }
    }

    fn delete(pointer: &str) -> ExtraBodyEntry {
        ExtraBodyEntry {
            pointer: pointer.into(),
            edit: ExtraEdit::Delete,
        }
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
