//! `extra_body` and `extra_headers` entries as written in variant and provider configuration, their
//! checks, and their conversion into the model request's entries.

use super::ConfigError;
use crate::model::{self, ExtraPlacement};
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::fmt;
use std::marker::PhantomData;

/// Sets (`value`) or removes (`delete = true`) the member at an RFC 6901 `pointer` of the
/// provider request body.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExtraBodyEntry {
    pub pointer: String,
    #[serde(default)]
    pub value: Option<serde_json::Value>,
    #[serde(default)]
    pub delete: Option<bool>,
}

/// Sets (`value`) or removes (`delete = true`) a header of the provider request.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExtraHeaderEntry {
    pub name: String,
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub delete: Option<bool>,
}

impl ExtraBodyEntry {
    /// The model request's entry (applies to every provider), placed as given.
    pub(crate) fn to_model(&self, placement: ExtraPlacement) -> model::ExtraBodyEntry {
        let entry = match &self.value {
            Some(value) => model::ExtraBodyEntry::set(&self.pointer, value.clone()),
            None => model::ExtraBodyEntry::delete(&self.pointer),
        };
        entry.placed(placement)
    }
}

impl ExtraHeaderEntry {
    /// The model request's entry (applies to every provider), placed as given.
    pub(crate) fn to_model(&self, placement: ExtraPlacement) -> model::ExtraHeaderEntry {
        let entry = match &self.value {
            Some(value) => model::ExtraHeaderEntry::set(&self.name, value),
            None => model::ExtraHeaderEntry::delete(&self.name),
        };
        entry.placed(placement)
    }
}

/// A provider's `extra_body` array. Parse errors name `extra_body[i]` themselves: inside a
/// provider table (a tagged enum) the parser cannot report the path.
pub(crate) fn extra_body_array<'de, D>(deserializer: D) -> Result<Vec<ExtraBodyEntry>, D::Error>
where
    D: Deserializer<'de>,
{
    deserializer.deserialize_seq(EntriesVisitor(PhantomData))
}

/// A provider's `extra_headers`, in either form: a table `{ name = "value" }` (Nimbus's first
/// form) or TensorZero's array `[{ name, value | delete = true }]`. Table entries come out in name
/// order. Parse errors name the entry, as for [`extra_body_array`].
pub(crate) fn headers_table_or_array<'de, D>(deserializer: D) -> Result<Vec<ExtraHeaderEntry>, D::Error>
where
    D: Deserializer<'de>,
{
    deserializer.deserialize_any(EntriesVisitor(PhantomData))
}

/// An entry kind as a provider's configuration writes it.
trait ConfigEntry: Sized {
    /// The key of the entries.
    const KEY: &'static str;
    /// The forms the entries may take.
    const EXPECTING: &'static str;
    /// Whether the entries may be written as a table of names to values.
    const HAS_TABLE_FORM: bool;
    /// The entry a `name = "value"` table pair stands for, if the entries have that form.
    fn from_table_pair(name: String, value: String) -> Option<Self>;
}

impl ConfigEntry for ExtraBodyEntry {
    const KEY: &'static str = "extra_body";
    const EXPECTING: &'static str = "`extra_body` as an array of { pointer, value | delete = true }";
    const HAS_TABLE_FORM: bool = false;
    fn from_table_pair(_: String, _: String) -> Option<Self> {
        None
    }
}

impl ConfigEntry for ExtraHeaderEntry {
    const KEY: &'static str = "extra_headers";
    const EXPECTING: &'static str =
        "`extra_headers` as a table of header names to values, or an array of { name, value | delete = true }";
    const HAS_TABLE_FORM: bool = true;
    fn from_table_pair(name: String, value: String) -> Option<Self> {
        Some(Self {
            name,
            value: Some(value),
            delete: None,
        })
    }
}

/// Reads an array of entries (or a table of names to values), naming the entry in every parse
/// error.
struct EntriesVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de> + ConfigEntry> Visitor<'de> for EntriesVisitor<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut entries = Vec::new();
        loop {
            let index = entries.len();
            match seq.next_element::<T>() {
                Ok(Some(entry)) => entries.push(entry),
                Ok(None) => return Ok(entries),
                Err(e) => return Err(de::Error::custom(format_args!("{}[{index}]: {e}", T::KEY))),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        if !T::HAS_TABLE_FORM {
            return Err(de::Error::invalid_type(de::Unexpected::Map, &self));
        }
        let mut pairs = Vec::new();
        while let Some(name) = map.next_key::<String>()? {
            let value = map
                .next_value::<String>()
                .map_err(|e| de::Error::custom(format_args!("{}.{name}: {e}", T::KEY)))?;
            pairs.push((name, value));
        }
        pairs.sort();
        pairs
            .into_iter()
            .map(|(name, value)| {
                T::from_table_pair(name, value).ok_or_else(|| de::Error::invalid_type(de::Unexpected::Map, &self))
            })
            .collect()
    }
}

/// Every `extra_body` entry has a pointer and exactly one of `value` / `delete = true`.
pub(crate) fn check_extra_body(key: &str, entries: &[ExtraBodyEntry]) -> Result<(), ConfigError> {
    for (index, entry) in entries.iter().enumerate() {
        let entry_key = format!("{key}.extra_body[{index}]");
        if !entry.pointer.starts_with('/') {
            return Err(ConfigError::invalid(
                format!("{entry_key}.pointer"),
                "must be a JSON Pointer (RFC 6901) starting with `/`",
            ));
        }
        check_value_or_delete(&entry_key, entry.value.is_some(), entry.delete)?;
    }
    Ok(())
}

/// Every `extra_headers` entry is a valid header with exactly one of `value` / `delete = true`.
pub(crate) fn check_extra_headers(key: &str, entries: &[ExtraHeaderEntry]) -> Result<(), ConfigError> {
    for (index, entry) in entries.iter().enumerate() {
        let entry_key = format!("{key}.extra_headers[{index}]");
        if http::HeaderName::from_bytes(entry.name.as_bytes()).is_err() {
            return Err(ConfigError::invalid(
                format!("{entry_key}.name"),
                format!("`{}` is not a valid HTTP header name", entry.name),
            ));
        }
        if let Some(value) = &entry.value {
            if http::HeaderValue::from_str(value).is_err() {
                return Err(ConfigError::invalid(
                    format!("{entry_key}.value"),
                    "is not a valid HTTP header value",
                ));
            }
        }
        check_value_or_delete(&entry_key, entry.value.is_some(), entry.delete)?;
    }
    Ok(())
}

fn check_value_or_delete(key: &str, has_value: bool, delete: Option<bool>) -> Result<(), ConfigError> {
    match (has_value, delete) {
        (true, None) | (false, Some(true)) => Ok(()),
        _ => Err(ConfigError::invalid(
            key,
            "give exactly one of `value` or `delete = true`",
        )),
    }
}
