//! The scale settings a deployment passes in the environment (the template's parameters of the
//! same meaning), checked at start-up: `NIMBUS_RECORD_RETENTION_DAYS` and
//! `NIMBUS_DUE_INDEX_SHARDS`. Unset, each has its default.

use crate::adapters::records::{DEFAULT_RECORD_RETENTION_DAYS, MAX_RECORD_RETENTION_DAYS};
use crate::scheduler::{DEFAULT_DUE_INDEX_SHARDS, MAX_DUE_INDEX_SHARDS};
use std::ops::RangeInclusive;

/// `name`'s whole number in `range`, or `default` when unset or empty.
fn number_from_env(name: &str, range: RangeInclusive<u32>, default: u32, unit: &str) -> Result<u32, String> {
    match std::env::var(name) {
        Ok(value) if !value.trim().is_empty() => match value.trim().parse::<u32>() {
            Ok(number) if range.contains(&number) => Ok(number),
            _ => Err(format!(
                "{name}: a whole number of {unit} from {} to {}, not {value:?}",
                range.start(),
                range.end()
            )),
        },
        _ => Ok(default),
    }
}

/// Days inference and feedback records are kept, 0 = forever (`RecordRetentionDays`, whose number
/// the bucket's lifecycle rules use too).
pub(crate) fn record_retention_days_from_env() -> Result<u32, String> {
    number_from_env(
        "NIMBUS_RECORD_RETENTION_DAYS",
        0..=MAX_RECORD_RETENTION_DAYS,
        DEFAULT_RECORD_RETENTION_DAYS,
        "days (0 keeps records forever)",
    )
}

/// Shards of each due-work lane (`DueIndexShards`).
pub(crate) fn due_index_shards_from_env() -> Result<u32, String> {
    number_from_env(
        "NIMBUS_DUE_INDEX_SHARDS",
        1..=MAX_DUE_INDEX_SHARDS,
        DEFAULT_DUE_INDEX_SHARDS,
        "shards",
    )
}
