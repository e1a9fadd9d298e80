//! The scale settings a deployment passes in the environment (the template's parameters of the
//! same meaning), checked at start-up: `NIMBUS_RECORD_RETENTION_DAYS` and
//! `NIMBUS_DUE_INDEX_SHARDS`, and the HTTP API's answer deadline (`app::http_api_deadline`).
//! Unset, each has its default.

use crate::adapters::records::{DEFAULT_RECORD_RETENTION_DAYS, MAX_RECORD_RETENTION_DAYS};
use crate::scheduler::{DEFAULT_DUE_INDEX_SHARDS, MAX_DUE_INDEX_SHARDS};
use std::ops::RangeInclusive;

/// A setting that is not a whole number in its range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}: a whole number of {unit} from {min} to {max}, not {value:?}")]
pub struct LimitSettingError {
    name: &'static str,
    unit: &'static str,
    min: u32,
    max: u32,
    value: String,
}

/// `name`'s whole number in `range`, or `default` when unset or empty.
pub(crate) fn number_from_env(
    name: &'static str,
    range: RangeInclusive<u32>,
    default: u32,
    unit: &'static str,
) -> Result<u32, LimitSettingError> {
    match std::env::var(name) {
        Ok(value) if !value.trim().is_empty() => match value.trim().parse::<u32>() {
            Ok(number) if range.contains(&number) => Ok(number),
            _ => Err(LimitSettingError {
                name,
                unit,
                min: *range.start(),
                max: *range.end(),
                value,
            }),
        },
        _ => Ok(default),
    }
}

/// Days inference and feedback records are kept, 0 = forever (`RecordRetentionDays`, whose number
/// the bucket's lifecycle rules use too).
pub(crate) fn record_retention_days_from_env() -> Result<u32, LimitSettingError> {
    number_from_env(
        "NIMBUS_RECORD_RETENTION_DAYS",
        0..=MAX_RECORD_RETENTION_DAYS,
        DEFAULT_RECORD_RETENTION_DAYS,
        "days (0 keeps records forever)",
    )
}

/// Shards of each due-work lane (`DueIndexShards`).
pub(crate) fn due_index_shards_from_env() -> Result<u32, LimitSettingError> {
    number_from_env(
        "NIMBUS_DUE_INDEX_SHARDS",
        1..=MAX_DUE_INDEX_SHARDS,
        DEFAULT_DUE_INDEX_SHARDS,
        "shards",
    )
}
