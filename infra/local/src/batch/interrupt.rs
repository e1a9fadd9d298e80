//! Ctrl-C for `nimbus batch`: the first stops what the command is doing (each command decides
//! what that leaves behind: never a cancelled batch); a second one exits at once.

use super::console::{CliError, Exit};
use std::future::Future;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Default)]
pub struct Interrupt {
    token: CancellationToken,
}

impl Interrupt {
    /// Listen for Ctrl-C from now on.
    pub fn listen() -> Self {
        let interrupt = Self::default();
        let token = interrupt.token.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                token.cancel();
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(i32::from(Exit::Interrupted.code()));
                }
            }
        });
        interrupt
    }

    pub fn happened(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Run `work` unless Ctrl-C comes first ([`CliError::Interrupted`]; `work` is dropped).
    pub async fn guard<T, E: Into<CliError>>(&self, work: impl Future<Output = Result<T, E>>) -> Result<T, CliError> {
        tokio::select! {
            result = work => result.map_err(Into::into),
            () = self.token.cancelled() => Err(CliError::Interrupted),
        }
    }

    #[cfg(test)]
    pub fn trigger(&self) {
        self.token.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn guarded_work_stops_when_interrupted() {
        let interrupt = Interrupt::default();
        assert_eq!(interrupt.guard(async { Ok::<_, CliError>(1) }).await.unwrap(), 1);
        interrupt.trigger();
        assert!(interrupt.happened());
        let never = std::future::pending::<Result<(), CliError>>();
        assert!(matches!(interrupt.guard(never).await, Err(CliError::Interrupted)));
    }
}
