//! Backoff: the one formula for how long to wait before another attempt (truncated exponential),
//! and the ways its callers spread attempts out (jitter). Provider retries, `/inference` retries,
//! async request retries and webhook redeliveries all take their waits from here.

use std::time::Duration;

/// Truncated exponential backoff: `first`, doubled for each earlier retry, at most `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    pub first: Duration,
    pub cap: Duration,
}

impl Backoff {
    /// The wait before a retry that follows `earlier` retries (0 for the first retry).
    pub fn delay(&self, earlier: u32) -> Duration {
        self.first
            .saturating_mul(2u32.saturating_pow(earlier.min(31)))
            .min(self.cap)
    }
}

/// How a wait is spread, from a uniform `sample` in `[0, 1)` (values outside are clamped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Jitter {
    /// Half the wait plus a random part of the other half ("equal jitter").
    Equal,
    /// A random part of the whole wait ("full jitter").
    Full,
    /// The whole wait plus up to a tenth more (whole milliseconds).
    UpToATenthMore,
}

impl Jitter {
    pub fn apply(self, wait: Duration, sample: f64) -> Duration {
        let sample = if sample.is_nan() { 0.0 } else { sample.clamp(0.0, 1.0) };
        match self {
            Self::Equal => {
                let half = wait / 2;
                half + half.mul_f64(sample)
            }
            Self::Full => wait.mul_f64(sample),
            Self::UpToATenthMore => {
                let most_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX) / 10;
                // Each whole millisecond of 0..=most_ms equally likely.
                let extra = ((most_ms as f64 + 1.0) * sample) as u64;
                wait + Duration::from_millis(extra.min(most_ms))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn the_wait_doubles_per_retry_up_to_the_cap_and_never_overflows() {
        let backoff = Backoff {
            first: MS(100),
            cap: MS(1_000),
        };
        let waits: Vec<Duration> = (0..6).map(|earlier| backoff.delay(earlier)).collect();
        assert_eq!(waits, vec![MS(100), MS(200), MS(400), MS(800), MS(1_000), MS(1_000)]);
        assert_eq!(backoff.delay(u32::MAX), MS(1_000));
        let zero = Backoff {
            first: Duration::ZERO,
            cap: Duration::ZERO,
        };
        assert_eq!(zero.delay(3), Duration::ZERO);
    }

    #[test]
    fn each_jitter_stays_in_its_range() {
        let wait = MS(1_000);
        assert_eq!(Jitter::Equal.apply(wait, 0.0), MS(500));
        assert_eq!(Jitter::Equal.apply(wait, 1.0), MS(1_000));
        assert_eq!(Jitter::Full.apply(wait, 0.0), Duration::ZERO);
        assert_eq!(Jitter::Full.apply(wait, 0.5), MS(500));
        assert_eq!(Jitter::UpToATenthMore.apply(wait, 0.0), MS(1_000));
        assert_eq!(Jitter::UpToATenthMore.apply(wait, 0.999_999), MS(1_100));
        assert_eq!(Jitter::UpToATenthMore.apply(wait, f64::NAN), MS(1_000));
        assert_eq!(Jitter::Full.apply(wait, 7.0), MS(1_000), "clamped");
    }
}
