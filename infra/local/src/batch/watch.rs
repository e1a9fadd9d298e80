//! `nimbus batch watch`: poll a batch until it ends. On a terminal, a live bar (status, elapsed,
//! completed/failed of total, rate, ETA); elsewhere a plain line whenever something moved (and
//! at least once a minute). Ctrl-C stops watching and leaves the batch running.

use super::api_client::{ApiError, BatchApi};
use super::console::{style, CliError, Console, Exit};
use super::interrupt::Interrupt;
use indicatif::{ProgressBar, ProgressDrawTarget};
use nimbus_shared::openai::batches::{BatchStatus, RequestCounts};
use serde::Deserialize;
use serde_json::Value;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The rate is measured over this much of the latest progress.
const RATE_WINDOW: Duration = Duration::from_secs(60);
/// Without a change, a plain line is still written this often.
const HEARTBEAT: Duration = Duration::from_secs(60);
/// Polls that fail one after the other (each after its own retries) before watching gives up.
const MAX_FAILED_POLLS: u32 = 10;

/// What a poll tells: the status as the server wrote it (another server may have its own), and
/// the counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub status: String,
    pub counts: RequestCounts,
    /// `created_at` (Unix seconds), when the server gave it.
    pub created_at: Option<i64>,
}

impl Snapshot {
    pub fn of(batch: &Value) -> Self {
        Self {
            status: batch
                .get("status")
                .and_then(Value::as_str)
                .unwrap_or("unknown")
                .to_owned(),
            counts: batch
                .get("request_counts")
                .and_then(|counts| RequestCounts::deserialize(counts).ok())
                .unwrap_or_default(),
            created_at: batch.get("created_at").and_then(Value::as_i64),
        }
    }

    /// The status, if it is one the Batch API defines.
    pub fn known_status(&self) -> Option<BatchStatus> {
        BatchStatus::deserialize(Value::from(self.status.as_str())).ok()
    }

    /// Requests that ran (completed, or failed while running).
    pub fn done(&self) -> u64 {
        self.counts.completed + self.failed()
    }

    /// Requests that failed while running.
    pub fn failed(&self) -> u64 {
        self.counts.failed.saturating_sub(self.counts.not_run)
    }

    /// Requests that never ran: Nimbus says how many of `failed` they are (`not_run`); a
    /// server that counts them nowhere leaves them out of `completed + failed` once the batch
    /// ended cancelled or expired.
    pub fn not_run(&self) -> u64 {
        let ended_early = matches!(self.known_status(), Some(BatchStatus::Cancelled | BatchStatus::Expired));
        let uncounted = self
            .counts
            .total
            .saturating_sub(self.counts.completed + self.counts.failed);
        self.counts.not_run + if ended_early { uncounted } else { 0 }
    }

    /// Still checking the input: the total is not known yet.
    pub fn validating(&self) -> bool {
        self.known_status() == Some(BatchStatus::Validating) || (self.counts.total == 0 && !self.has_ended())
    }

    /// Time since the batch was created (zero when unknown or in the future).
    pub fn age(&self) -> Duration {
        let now = jiff::Timestamp::now().as_second();
        self.created_at
            .map(|created| Duration::from_secs(u64::try_from(now - created).unwrap_or(0)))
            .unwrap_or_default()
    }

    pub fn has_ended(&self) -> bool {
        self.known_status().is_some_and(BatchStatus::is_terminal)
    }
}

/// Requests done per second over the latest [`RATE_WINDOW`].
#[derive(Default)]
pub struct RateWindow {
    samples: VecDeque<(Instant, u64)>,
}

impl RateWindow {
    pub fn record(&mut self, at: Instant, done: u64) {
        self.samples.push_back((at, done));
        while self.samples.len() > 2
            && self
                .samples
                .front()
                .is_some_and(|(t, _)| at.duration_since(*t) > RATE_WINDOW)
        {
            self.samples.pop_front();
        }
    }

    /// `None` until progress was seen across at least a second.
    pub fn per_second(&self) -> Option<f64> {
        let (first_at, first) = self.samples.front()?;
        let (last_at, last) = self.samples.back()?;
        let seconds = last_at.duration_since(*first_at).as_secs_f64();
        (seconds >= 1.0 && last > first).then(|| (last - first) as f64 / seconds)
    }
}

/// `45s`, `3m 07s`, `2h 05m`.
pub fn short_duration(seconds: f64) -> String {
    let seconds = seconds.max(0.0).round() as u64;
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m {:02}s", seconds / 60, seconds % 60),
        _ => format!("{}h {:02}m", seconds / 3600, seconds % 3600 / 60),
    }
}

/// `completed 118 · failed 2 · 12.3/s · ETA 1m 11s` (rate and ETA once known; `· not run N`
/// for requests a cancel or expiry left; `validating the input` before the total is known).
pub fn progress_text(snapshot: &Snapshot, rate: Option<f64>) -> String {
    if snapshot.validating() {
        return "validating the input".to_owned();
    }
    let mut text = format!("completed {} · failed {}", snapshot.counts.completed, snapshot.failed());
    let not_run = snapshot.not_run();
    if not_run > 0 {
        text.push_str(&format!(" · not run {not_run}"));
    }
    if let Some(rate) = rate.filter(|_| !snapshot.has_ended()) {
        text.push_str(&format!(" · {rate:.1}/s"));
        let remaining = snapshot.counts.total.saturating_sub(snapshot.done() + not_run);
        if remaining > 0 {
            text.push_str(&format!(" · ETA {}", short_duration(remaining as f64 / rate)));
        }
    }
    text
}

/// One plain progress line: `<time> <id> <status> <done>/<total> completed … failed …`.
pub fn plain_line(id: &str, snapshot: &Snapshot, rate: Option<f64>) -> String {
    format!(
        "{} {id} {} {}/{} {}",
        jiff::Timestamp::now()
            .round(jiff::Unit::Second)
            .unwrap_or_else(|_| jiff::Timestamp::now()),
        snapshot.status,
        snapshot.done(),
        snapshot.counts.total,
        progress_text(snapshot, rate)
    )
}

/// How progress is shown.
enum Display {
    Bar(ProgressBar),
    Lines { last: Option<(Snapshot, Instant)> },
}

/// The bar once the total is known.
const BAR_STYLE: &str = "{spinner:.green} {prefix:.bold} [{elapsed_precise}] [{bar:30.cyan/blue}] {pos}/{len} {msg}";
/// Before it is (validating): a spinner, no bar (a bar of 0/0 would be drawn full).
const SPINNER_STYLE: &str = "{spinner:.green} {prefix:.bold} [{elapsed_precise}] {msg}";

impl Display {
    fn new(console: &Console) -> Self {
        if console.interactive {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(style(SPINNER_STYLE));
            bar.enable_steady_tick(Duration::from_millis(120));
            Self::Bar(bar)
        } else {
            Self::Lines { last: None }
        }
    }

    fn show(&mut self, id: &str, snapshot: &Snapshot, rate: Option<f64>, first: bool) {
        match self {
            Self::Bar(bar) => {
                bar.set_prefix(snapshot.status.clone());
                if snapshot.validating() {
                    bar.unset_length();
                } else {
                    if bar.length().is_none() {
                        bar.set_style(style(BAR_STYLE));
                    }
                    bar.set_length(snapshot.counts.total);
                    bar.set_position(snapshot.done());
                }
                if first {
                    // Progress made before watching began is not this rate's; the time is the
                    // batch's, since it was created (watching again does not restart it).
                    bar.reset_eta();
                    bar.set_elapsed(snapshot.age());
                }
                bar.set_message(progress_text(snapshot, rate));
            }
            Self::Lines { last } => {
                let now = Instant::now();
                let due = match last {
                    None => true,
                    Some((seen, at)) => seen != snapshot || now.duration_since(*at) >= HEARTBEAT,
                };
                if due {
                    eprintln!("{}", plain_line(id, snapshot, rate));
                    *last = Some((snapshot.clone(), now));
                }
            }
        }
    }

    /// A message above the bar (which is drawn again below it), or a line of its own.
    fn note(&self, console: &Console, text: &str) {
        match self {
            Self::Bar(bar) => bar.suspend(|| console.say(text)),
            Self::Lines { .. } => console.say(text),
        }
    }

    fn end(&self) {
        if let Self::Bar(bar) = self {
            bar.finish();
        }
    }

    fn abandon(&self) {
        if let Self::Bar(bar) = self {
            bar.abandon();
        }
    }

    /// Ctrl-C: the bar stays as last drawn. indicatif keeps the cursor at the end of the
    /// full-width bar line, so the terminal's echoed `^C` wrapped to the next line: a redraw would
    /// land there and leave a stale copy above. The line under the cursor (the `^C`, or the bar
    /// itself when the signal came without an echo) is cleared for the message that follows.
    fn stop(&self) {
        if let Self::Bar(bar) = self {
            bar.disable_steady_tick();
            bar.set_draw_target(ProgressDrawTarget::hidden());
            eprint!("\r\x1b[2K");
        }
    }
}

/// Watch batch `id` until it ends: its exit code and last object. Ctrl-C answers
/// [`Exit::Interrupted`] with the last object seen; the batch goes on.
pub async fn watch(
    api: &BatchApi,
    console: &Console,
    interrupt: &Interrupt,
    id: &str,
    interval: Duration,
) -> Result<(Exit, Value), CliError> {
    let mut last: Option<Value> = None;
    let mut display = Display::new(console);
    if !console.interactive {
        console.say(format!("watching {id} (Ctrl-C stops watching; the batch goes on)"));
    }
    let polled = interrupt
        .guard(poll_until_ended(api, console, id, interval, &mut display, &mut last))
        .await;
    match polled {
        Ok(()) => {
            display.end();
            let batch = last.ok_or_else(|| CliError::Unexpected(format!("no answer for batch {id}")))?;
            for line in summary(&batch) {
                console.say(line);
            }
            Ok((Exit::for_status(Snapshot::of(&batch).known_status()), batch))
        }
        Err(CliError::Interrupted) => {
            display.stop();
            let seen = last
                .as_ref()
                .map(|batch| {
                    let snapshot = Snapshot::of(batch);
                    format!(
                        " at {}/{} ({})",
                        snapshot.done(),
                        snapshot.counts.total,
                        snapshot.status
                    )
                })
                .unwrap_or_default();
            console.say(format!(
                "stopped watching{seen}; batch {id} goes on (nimbus batch watch {id} to see it again)"
            ));
            Ok((Exit::Interrupted, last.unwrap_or(Value::Null)))
        }
        Err(err) => {
            display.abandon();
            Err(err)
        }
    }
}

async fn poll_until_ended(
    api: &BatchApi,
    console: &Console,
    id: &str,
    interval: Duration,
    display: &mut Display,
    last: &mut Option<Value>,
) -> Result<(), CliError> {
    let mut rate = RateWindow::default();
    let mut failed_polls = 0;
    // Live counts (a Nimbus extension) until the server says it does not know the parameter.
    let mut live = true;
    loop {
        let polled = if live {
            api.batch_live(id).await
        } else {
            api.batch(id).await
        };
        match polled {
            Ok(batch) => {
                failed_polls = 0;
                let snapshot = Snapshot::of(&batch);
                rate.record(Instant::now(), snapshot.done());
                display.show(id, &snapshot, rate.per_second(), last.is_none());
                *last = Some(batch);
                if snapshot.has_ended() {
                    return Ok(());
                }
            }
            Err(ApiError::Refused { status: 400, .. }) if live => {
                live = false;
                continue;
            }
            // Not found, unauthorized…: polling again will not change it.
            Err(err @ ApiError::Refused { status, .. }) if status < 500 => return Err(err.into()),
            Err(err) => {
                failed_polls += 1;
                if failed_polls >= MAX_FAILED_POLLS {
                    return Err(err.into());
                }
                display.note(console, &format!("could not poll ({err}); trying again"));
            }
        }
        tokio::time::sleep(interval).await;
    }
}

/// What to tell about a batch that ended: counts, files, and for a refused input its problems.
pub fn summary(batch: &Value) -> Vec<String> {
    let snapshot = Snapshot::of(batch);
    let id = batch.get("id").and_then(Value::as_str).unwrap_or("?");
    let not_run = match snapshot.not_run() {
        0 => String::new(),
        n => format!(", {n} not run"),
    };
    let mut lines = vec![format!(
        "{id} {}: {} of {} requests completed, {} failed{not_run}",
        snapshot.status,
        snapshot.counts.completed,
        snapshot.counts.total,
        snapshot.failed()
    )];
    if let Some(errors) = batch.pointer("/errors/data").and_then(Value::as_array) {
        for error in errors.iter().take(50) {
            let text = |name: &str| error.get(name).and_then(Value::as_str).unwrap_or("");
            let line = error
                .get("line")
                .and_then(Value::as_u64)
                .map(|line| format!("line {line}: "))
                .unwrap_or_default();
            lines.push(format!("  {line}{}: {}", text("code"), text("message")));
        }
        if errors.len() > 50 {
            lines.push(format!("  … and {} more (--json lists them all)", errors.len() - 50));
        }
    }
    let has_output = batch.get("output_file_id").is_some_and(Value::is_string);
    let has_errors = batch.get("error_file_id").is_some_and(Value::is_string);
    if has_output || has_errors {
        let errors = if has_errors { " --errors errors.jsonl" } else { "" };
        lines.push(format!("results: nimbus batch results {id} -o results.jsonl{errors}"));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_snapshot_reads_status_and_counts() {
        let batch = json!({"status": "in_progress", "request_counts": {"total": 10, "completed": 6, "failed": 1}});
        let snapshot = Snapshot::of(&batch);
        assert_eq!(snapshot.done(), 7);
        assert!(!snapshot.has_ended());
        let ended = Snapshot::of(&json!({"status": "expired"}));
        assert!(ended.has_ended());
        assert_eq!(ended.counts.total, 0);
        // A status another server made up is shown, never taken for an end.
        let other = Snapshot::of(&json!({"status": "queued_upstream"}));
        assert_eq!((other.known_status(), other.has_ended()), (None, false));
    }

    #[test]
    fn the_rate_is_measured_over_the_latest_minute() {
        let start = Instant::now();
        let mut window = RateWindow::default();
        window.record(start, 0);
        assert_eq!(window.per_second(), None);
        window.record(start + Duration::from_secs(10), 100);
        assert_eq!(window.per_second(), Some(10.0));
        // Two minutes later, only the latest minute counts: 60 more in 60 s.
        window.record(start + Duration::from_secs(70), 160);
        window.record(start + Duration::from_secs(130), 220);
        assert_eq!(window.per_second(), Some(1.0));
    }

    #[test]
    fn progress_text_has_rate_and_eta_once_known() {
        let snapshot = Snapshot {
            status: "in_progress".to_owned(),
            counts: RequestCounts {
                total: 1000,
                completed: 118,
                failed: 2,
                not_run: 0,
            },
            created_at: None,
        };
        assert_eq!(progress_text(&snapshot, None), "completed 118 · failed 2");
        assert_eq!(
            progress_text(&snapshot, Some(12.0)),
            "completed 118 · failed 2 · 12.0/s · ETA 1m 13s"
        );
        let ended = Snapshot {
            status: "completed".to_owned(),
            ..snapshot
        };
        assert_eq!(progress_text(&ended, Some(12.0)), "completed 118 · failed 2");
    }

    #[test]
    fn durations_are_short() {
        assert_eq!(short_duration(44.6), "45s");
        assert_eq!(short_duration(187.0), "3m 07s");
        assert_eq!(short_duration(7500.0), "2h 05m");
        assert_eq!(short_duration(-3.0), "0s");
    }

    #[test]
    fn a_refused_input_is_summarized_with_its_lines() {
        let batch = json!({
            "id": "batch_1", "status": "failed",
            "errors": {"object": "list", "data": [{"code": "invalid_json_line", "message": "bad", "line": 4}]},
            "output_file_id": null, "error_file_id": null
        });
        let lines = summary(&batch);
        assert_eq!(lines[0], "batch_1 failed: 0 of 0 requests completed, 0 failed");
        assert_eq!(lines[1], "  line 4: invalid_json_line: bad");
        assert_eq!(lines.len(), 2);
        let done =
            json!({"id": "batch_2", "status": "completed", "output_file_id": "file-1", "error_file_id": "file-2"});
        assert_eq!(
            summary(&done).last().unwrap(),
            "results: nimbus batch results batch_2 -o results.jsonl --errors errors.jsonl"
        );
    }

    #[test]
    fn lines_that_never_ran_are_not_run_not_failed() {
        // Nimbus: `failed` includes them, `not_run` says how many.
        let nimbus = Snapshot::of(&json!({"status": "cancelled",
            "request_counts": {"total": 5000, "completed": 1200, "failed": 3810, "not_run": 3800}}));
        assert_eq!((nimbus.done(), nimbus.failed(), nimbus.not_run()), (1210, 10, 3800));
        assert_eq!(
            progress_text(&nimbus, Some(3.0)),
            "completed 1200 · failed 10 · not run 3800"
        );
        assert_eq!(
            summary(&json!({"id": "batch_1", "status": "cancelled",
                "request_counts": {"total": 5000, "completed": 1200, "failed": 3810, "not_run": 3800}}))[0],
            "batch_1 cancelled: 1200 of 5000 requests completed, 10 failed, 3800 not run"
        );
        // A server that counts them nowhere.
        let other = Snapshot::of(&json!({"status": "expired",
            "request_counts": {"total": 100, "completed": 40, "failed": 2}}));
        assert_eq!((other.done(), other.failed(), other.not_run()), (42, 2, 58));
        // Still running: the rest is to come, not "not run".
        let running = Snapshot::of(&json!({"status": "cancelling",
            "request_counts": {"total": 100, "completed": 40, "failed": 2}}));
        assert_eq!(running.not_run(), 0);
    }

    #[test]
    fn a_validating_batch_has_no_counts_to_show() {
        let validating =
            Snapshot::of(&json!({"status": "validating", "request_counts": {"total": 0, "completed": 0, "failed": 0}}));
        assert!(validating.validating());
        assert_eq!(progress_text(&validating, None), "validating the input");
        let running = Snapshot::of(
            &json!({"status": "in_progress", "request_counts": {"total": 4, "completed": 0, "failed": 0}}),
        );
        assert!(!running.validating());
        // An input without requests ends failed; it is not "validating".
        assert!(!Snapshot::of(&json!({"status": "failed"})).validating());
    }

    #[test]
    fn the_age_runs_from_the_batchs_creation() {
        let now = jiff::Timestamp::now().as_second();
        let snapshot = Snapshot::of(&json!({"status": "in_progress", "created_at": now - 125}));
        assert!((125..=127).contains(&snapshot.age().as_secs()), "{:?}", snapshot.age());
        assert_eq!(Snapshot::of(&json!({"status": "in_progress"})).age(), Duration::ZERO);
        assert_eq!(
            Snapshot::of(&json!({"status": "in_progress", "created_at": now + 60})).age(),
            Duration::ZERO
        );
    }
}
