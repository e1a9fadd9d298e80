//! Episode ids: minted as UUIDv7 when absent; checked as TensorZero checks them when given.

use uuid::Uuid;

/// The earliest episode timestamp TensorZero accepts (2020-01-23).
const EARLIEST_EPISODE_S: u64 = 1_579_751_960;

/// Why a client's episode id was refused (each a 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EpisodeIdError {
    #[error("Invalid Episode ID: Failed to parse UUID as v7: {0}")]
    NotAUuid(String),
    #[error("Invalid Episode ID: Version must be 7, got {0}")]
    WrongVersion(usize),
    #[error("Invalid Episode ID: Timestamp is too early")]
    TooEarly,
    #[error("Invalid Episode ID: Timestamp is in the future")]
    InTheFuture,
}

/// Check a client's episode id against the clock (`now_ms`).
pub(crate) fn parse_episode_id(text: &str, now_ms: i64) -> Result<Uuid, EpisodeIdError> {
    let id = Uuid::parse_str(text).map_err(|e| EpisodeIdError::NotAUuid(e.to_string()))?;
    let version = id.get_version_num();
    if version != 7 {
        return Err(EpisodeIdError::WrongVersion(version));
    }
    let Some(timestamp) = id.get_timestamp() else {
        return Err(EpisodeIdError::NotAUuid("the id carries no timestamp".to_owned()));
    };
    let (seconds, _) = timestamp.to_unix();
    if seconds < EARLIEST_EPISODE_S {
        return Err(EpisodeIdError::TooEarly);
    }
    // A second of slack for clocks that disagree slightly.
    let now_s = u64::try_from(now_ms.max(0) / 1000).unwrap_or(0) + 1;
    if seconds > now_s {
        return Err(EpisodeIdError::InTheFuture);
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW_MS: i64 = 1_790_000_000_000;

    fn v7_at(seconds: u64) -> String {
        Uuid::new_v7(uuid::Timestamp::from_unix(uuid::NoContext, seconds, 0)).to_string()
    }

    #[test]
    fn accepts_a_recent_v7_and_refuses_the_rest() {
        assert!(parse_episode_id(&v7_at(1_780_000_000), NOW_MS).is_ok());
        assert_eq!(
            parse_episode_id(&Uuid::new_v4().to_string(), NOW_MS),
            Err(EpisodeIdError::WrongVersion(4))
        );
        assert_eq!(
            parse_episode_id(&v7_at(1_000_000_000), NOW_MS),
            Err(EpisodeIdError::TooEarly)
        );
        assert_eq!(
            parse_episode_id(&v7_at(1_800_000_000), NOW_MS),
            Err(EpisodeIdError::InTheFuture)
        );
        assert!(matches!(
            parse_episode_id("nope", NOW_MS),
            Err(EpisodeIdError::NotAUuid(_))
        ));
        assert_eq!(
            EpisodeIdError::WrongVersion(4).to_string(),
            "Invalid Episode ID: Version must be 7, got 4"
        );
    }
}
