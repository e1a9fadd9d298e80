//! Deadlines of the native steps. A step runs inside a function invocation (the worker Lambda,
//! or a local worker task with its `max_run`), so each provider call that moves a file is
//! bounded by the time left in that invocation, less a margin to record what the step did; a
//! part is not started at all when too little is left (the job is retried at once instead).
//! The provider's own transfer timeout (`providers::openai::FILE_TRANSFER_TIMEOUT`) is a
//! second, static bound; `tests` below check both against the functions in template.yaml.

use crate::batches::BatchesError;
use crate::providers::ProviderError;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// Kept free before the invocation's deadline to save the part's state after a provider call.
pub(crate) const STEP_MARGIN: Duration = Duration::from_secs(20);
/// A provider call is not started with less than this left for it.
pub(crate) const MIN_STEP: Duration = Duration::from_secs(10);

/// The time a provider call may take before `deadline`: `None` when too little is left.
pub(crate) fn step_budget(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())?
        .checked_sub(STEP_MARGIN)
        .filter(|left| *left >= MIN_STEP)
}

/// Run the provider call `call` (`what` names it) within the budget `deadline` leaves; a call
/// still running then is dropped and the step fails for now (it is tried again, and each step
/// finds what a call cut short left at the provider: the file by its name, the batch by its
/// metadata).
pub(crate) async fn within<T>(
    deadline: Instant,
    what: &str,
    call: impl Future<Output = Result<T, ProviderError>>,
) -> Result<Result<T, ProviderError>, BatchesError> {
    let Some(budget) = step_budget(deadline) else {
        return Err(out_of_time(what));
    };
    tokio::time::timeout(budget, call).await.map_err(|_| out_of_time(what))
}

fn out_of_time(what: &str) -> BatchesError {
    BatchesError::Provider(format!(
        "{what}: not finished within the invocation's deadline; it is tried again"
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    /// `Timeout:` of `function` in template.yaml, in seconds.
    fn function_timeout(function: &str) -> Duration {
        let template = include_str!("../../../../template.yaml");
        let header = format!("  {function}:");
        let line = template
            .lines()
            .skip_while(|line| *line != header)
            .skip(1)
            // The function's block ends at the next resource (two spaces, then its name).
            .take_while(|line| line.is_empty() || line.starts_with("   "))
            .find(|line| line.trim_start().starts_with("Timeout:"))
            .unwrap_or_else(|| panic!("{function} has a Timeout in template.yaml"));
        let seconds: u64 = line.trim_start()["Timeout:".len()..].trim().parse().unwrap();
        Duration::from_secs(seconds)
    }

    #[test]
    fn every_native_step_deadline_fits_the_functions_that_run_it() {
        // The worker runs the `native` job (uploads, downloads); the poller polls.
        for function in ["NimbusWorkerFunction", "NimbusPollerFunction"] {
            let timeout = function_timeout(function);
            let transfer = crate::providers::openai::FILE_TRANSFER_TIMEOUT;
            assert!(
                transfer + STEP_MARGIN <= timeout,
                "a file transfer may take {transfer:?} (+ {STEP_MARGIN:?} to save) but {function} stops after {timeout:?}"
            );
            assert!(MIN_STEP + STEP_MARGIN < timeout);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_is_cut_at_the_invocations_deadline_less_the_margin() {
        let deadline = Instant::now() + Duration::from_secs(300);
        let started = Instant::now();
        let never = std::future::pending::<Result<(), ProviderError>>();
        let result = within(deadline, "upload", never).await;
        assert!(matches!(result, Err(BatchesError::Provider(_))));
        assert_eq!(started.elapsed(), Duration::from_secs(300) - STEP_MARGIN);
    }

    #[tokio::test(start_paused = true)]
    async fn no_call_starts_when_too_little_is_left() {
        let deadline = Instant::now() + STEP_MARGIN + MIN_STEP - Duration::from_secs(1);
        assert!(step_budget(deadline).is_none());
        let result = within(deadline, "upload", async { Ok::<_, ProviderError>(()) }).await;
        assert!(result.is_err());
        assert!(step_budget(Instant::now() + Duration::from_secs(60)).is_some());
    }
}
