//! What `nimbus batch` shows: the document a command answers with on stdout (a batch id, or with
//! `--json` the batch object or list), and everything else — messages, progress bars, periodic
//! lines — on stderr. Errors, and the exit codes scripts can tell apart.

use super::api_client::ApiError;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use nimbus_shared::batches::input_validation::LineError;
use nimbus_shared::openai::batches::BatchStatus;
use serde_json::{json, Value};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

/// How a command ended, as its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done; for a watched batch, it `completed` (some of its requests may have failed).
    Done,
    /// The command could not do its work (bad input file, refused call, no connection, I/O).
    Failed,
    /// The watched batch ended `failed` (its input was refused).
    BatchFailed,
    /// The watched batch ended `expired`.
    BatchExpired,
    /// The watched batch ended `cancelled`.
    BatchCancelled,
    /// Ctrl-C: the command stopped; the batch, if created, goes on.
    Interrupted,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Self::Done => 0,
            Self::Failed => 1,
            Self::BatchFailed => 3,
            Self::BatchExpired => 4,
            Self::BatchCancelled => 5,
            Self::Interrupted => 130,
        }
    }

    /// The exit code of a watched batch that reached `status`.
    pub fn for_status(status: Option<BatchStatus>) -> Self {
        match status {
            Some(BatchStatus::Failed) => Self::BatchFailed,
            Some(BatchStatus::Expired) => Self::BatchExpired,
            Some(BatchStatus::Cancelled) => Self::BatchCancelled,
            _ => Self::Done,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code())
    }
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Api(#[from] ApiError),
    /// A parameter the server would refuse, found before anything was sent.
    #[error("{message}")]
    Invalid {
        message: String,
        param: Option<String>,
        code: Option<String>,
    },
    /// The input file fails the server's checks; nothing was uploaded.
    #[error("{path}: {} problem(s) found; nothing was uploaded", .errors.len())]
    InputFile { path: String, errors: Vec<LineError> },
    #[error("{path}: {detail}")]
    Io { path: String, detail: String },
    /// The batch has not ended, so it has no results yet.
    #[error("batch {id} is still {status}; its results come when it ends (nimbus batch watch {id})")]
    NotEnded { id: String, status: String },
    /// The API answered with an object that lacks what the command needs.
    #[error("{0}")]
    Unexpected(String),
    /// Ctrl-C.
    #[error("interrupted")]
    Interrupted,
}

impl CliError {
    pub fn io(path: &std::path::Path, err: &std::io::Error) -> Self {
        Self::Io {
            path: path.display().to_string(),
            detail: err.to_string(),
        }
    }

    /// The `error` member of the `--json` document of a failed command.
    pub fn to_json(&self) -> Value {
        match self {
            Self::Api(err) => err.to_json(),
            Self::Invalid { message, param, code } => {
                json!({"message": message, "type": "invalid_request_error", "param": param, "code": code})
            }
            Self::InputFile { errors, .. } => {
                json!({"message": self.to_string(), "type": "invalid_input_file", "errors": errors})
            }
            Self::Io { .. } => json!({"message": self.to_string(), "type": "io_error"}),
            Self::NotEnded { status, .. } => {
                json!({"message": self.to_string(), "type": "batch_not_ended", "status": status})
            }
            Self::Unexpected(_) => json!({"message": self.to_string(), "type": "client_error"}),
            Self::Interrupted => json!({"message": self.to_string(), "type": "interrupted"}),
        }
    }
}

/// At most this many of an input file's problems are listed on stderr (`--json` has them all).
const LISTED_PROBLEMS: usize = 50;

/// Where a command writes.
pub struct Console {
    pub json: bool,
    /// stderr is a terminal: progress is drawn as bars, else written as plain lines.
    pub interactive: bool,
}

impl Console {
    pub fn new(json: bool) -> Self {
        Self {
            json,
            interactive: std::io::stderr().is_terminal(),
        }
    }

    /// A message for the person at the terminal (stderr, whatever the mode).
    pub fn say(&self, text: impl std::fmt::Display) {
        eprintln!("{text}");
    }

    /// The command's answer: with `--json` the document, else `plain` (one line), on stdout.
    pub fn answer(&self, document: &Value, plain: impl std::fmt::Display) {
        if self.json {
            print_document(document);
        } else {
            println!("{plain}");
        }
    }

    /// A failed command: its error on stderr, and with `--json` as `{"error": …}` on stdout.
    pub fn failure(&self, err: &CliError) {
        if let CliError::InputFile { path, errors } = err {
            for problem in errors.iter().take(LISTED_PROBLEMS) {
                self.say(describe_problem(path, problem));
            }
            if errors.len() > LISTED_PROBLEMS {
                self.say(format!(
                    "… and {} more (--json lists them all)",
                    errors.len() - LISTED_PROBLEMS
                ));
            }
        }
        self.say(format!("error: {err}"));
        if self.json {
            print_document(&json!({"error": err.to_json()}));
        }
    }

    /// A bar counting `total` bytes (a counter when the total is unknown), labelled; hidden when
    /// stderr is not a terminal.
    pub fn bytes_bar(&self, total: Option<u64>, label: &str) -> ProgressBar {
        if !self.interactive {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr());
        bar.set_style(style(if total.is_some() {
            "{prefix:>10.bold} [{bar:32.cyan/blue}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}"
        } else {
            "{prefix:>10.bold} {spinner} {bytes} {binary_bytes_per_sec}"
        }));
        bar.set_prefix(label.to_owned());
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    }
}

/// One JSON document on stdout, pretty-printed.
fn print_document(document: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(document).unwrap_or_else(|_| document.to_string())
    );
}

/// A progress style from a template known to parse (the default style otherwise).
pub fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .map(|style| style.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar())
}

/// `FILE:LINE: code: message`, as compilers print problems (no line for file-wide ones).
pub fn describe_problem(path: &str, problem: &LineError) -> String {
    match problem.line {
        Some(line) => format!("{path}:{line}: {}: {}", problem.code, problem.message),
        None => format!("{path}: {}: {}", problem.code, problem.message),
    }
}

/// `12.3 MiB`-style sizes for messages.
pub fn human_bytes(bytes: u64) -> String {
    indicatif::BinaryBytes(bytes).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_tell_the_final_statuses_apart() {
        assert_eq!(Exit::for_status(Some(BatchStatus::Completed)).code(), 0);
        assert_eq!(Exit::for_status(Some(BatchStatus::Failed)).code(), 3);
        assert_eq!(Exit::for_status(Some(BatchStatus::Expired)).code(), 4);
        assert_eq!(Exit::for_status(Some(BatchStatus::Cancelled)).code(), 5);
        assert_eq!(Exit::Failed.code(), 1);
        assert_eq!(Exit::Interrupted.code(), 130);
    }

    #[test]
    fn problems_read_like_compiler_messages() {
        let problem = LineError {
            code: "invalid_json_line",
            message: "This line is not parseable as valid JSON.".to_owned(),
            param: None,
            line: Some(7),
        };
        assert_eq!(
            describe_problem("in.jsonl", &problem),
            "in.jsonl:7: invalid_json_line: This line is not parseable as valid JSON."
        );
        let whole_file = LineError { line: None, ..problem };
        assert!(describe_problem("in.jsonl", &whole_file).starts_with("in.jsonl: invalid_json_line"));
    }

    #[test]
    fn failures_as_json_keep_the_line_numbers() {
        let err = CliError::InputFile {
            path: "in.jsonl".to_owned(),
            errors: vec![LineError {
                code: "duplicate_custom_id",
                message: "dup".to_owned(),
                param: Some("custom_id".to_owned()),
                line: Some(3),
            }],
        };
        let json = err.to_json();
        assert_eq!(json["type"], "invalid_input_file");
        assert_eq!(json["errors"][0]["line"], 3);
        assert_eq!(json["errors"][0]["param"], "custom_id");
    }
}
