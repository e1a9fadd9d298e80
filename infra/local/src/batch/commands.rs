//! The `nimbus batch` commands: each answers with one document (see [`Console::answer`]) and an
//! exit code.

use super::api_client::{id_of, BatchApi};
use super::console::{human_bytes, CliError, Console, Exit};
use super::interrupt::Interrupt;
use super::transfer::{self, with_suffix, Upload};
use super::watch::{self, Snapshot};
use super::{preflight, results, ResultsArgs, SubmitArgs};
use nimbus_shared::openai::batches::CreateBatchRequest;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

pub struct Context<'a> {
    pub api: &'a BatchApi,
    pub console: &'a Console,
    pub interrupt: &'a Interrupt,
}

fn batch_id(batch: &Value, api: &BatchApi) -> Result<String, CliError> {
    Ok(id_of(batch, &api.url(&["batches"]))?)
}

pub async fn submit(cx: &Context<'_>, args: SubmitArgs) -> Result<Exit, CliError> {
    let mut request = CreateBatchRequest {
        input_file_id: String::new(),
        endpoint: args.endpoint,
        completion_window: args.window,
        metadata: preflight::parse_metadata(&args.metadata)?,
        output_expires_after: None,
    };
    let endpoint = preflight::check_parameters(&request)?;
    let idempotency_key = match args.idempotency_key {
        Some(key) if nimbus_shared::idempotency::valid_key(&key) => key,
        Some(_) => {
            return Err(CliError::Invalid {
                message: format!(
                    "Invalid --idempotency-key: use 1 to {} printable ASCII characters.",
                    nimbus_shared::idempotency::MAX_KEY_LEN
                ),
                param: Some("Idempotency-Key".to_owned()),
                code: None,
            })
        }
        None => format!("nimbus-batch-{}", uuid::Uuid::now_v7()),
    };
    let checked = cx
        .interrupt
        .guard(preflight::check_input_file(cx.api, cx.console, &args.file, endpoint))
        .await?;
    let upload = Upload {
        path: &args.file,
        filename: &checked.filename,
        bytes: checked.bytes,
        md5: &checked.md5,
        part_size: args.part_size,
        idempotency_key: &idempotency_key,
    };
    let file = transfer::upload(cx.api, cx.console, cx.interrupt, &upload).await?;
    request.input_file_id = id_of(&file, &cx.api.url(&["files"]))?;
    cx.console.say(format!(
        "uploaded {} ({}) as {}",
        checked.filename,
        human_bytes(checked.bytes),
        request.input_file_id
    ));
    // Not interruptible: once the file is up, the batch is created and its id told.
    let batch = cx.api.create_batch(&request, &idempotency_key).await?;
    let id = batch_id(&batch, cx.api)?;
    cx.console.say(format!(
        "created {id}: {} requests to {}",
        checked.total_requests, request.endpoint
    ));
    if !args.watch || cx.interrupt.happened() {
        cx.console.say(format!("follow it with: nimbus batch watch {id}"));
        cx.console.answer(&batch, &id);
        return Ok(if cx.interrupt.happened() {
            Exit::Interrupted
        } else {
            Exit::Done
        });
    }
    if !cx.console.json {
        // The id first, so a script reading stdout has it even if watching is stopped.
        cx.console.answer(&batch, &id);
    }
    let (exit, last) = watch::watch(cx.api, cx.console, cx.interrupt, &id, args.poll.interval).await?;
    if cx.console.json {
        cx.console.answer(&if last.is_null() { batch } else { last }, "");
    }
    Ok(exit)
}

pub async fn watch(cx: &Context<'_>, id: &str, interval: Duration) -> Result<Exit, CliError> {
    let (exit, batch) = watch::watch(cx.api, cx.console, cx.interrupt, id, interval).await?;
    cx.console.answer(&batch, Snapshot::of(&batch).status);
    Ok(exit)
}

pub async fn results(cx: &Context<'_>, args: ResultsArgs) -> Result<Exit, CliError> {
    let batch = cx.interrupt.guard(cx.api.batch(&args.id)).await?;
    let snapshot = Snapshot::of(&batch);
    if !snapshot.has_ended() {
        return Err(CliError::NotEnded {
            id: args.id,
            status: snapshot.status,
        });
    }
    let file_of = |name: &str| batch.get(name).and_then(Value::as_str).map(str::to_owned);
    let (output_id, error_id) = (file_of("output_file_id"), file_of("error_file_id"));
    let order = args.in_input_order.as_deref();
    let lines = fetch(cx, output_id.as_deref(), &args.output, order, "output").await?;
    cx.console.say(format!(
        "{}: {lines} results{}",
        args.output.display(),
        if output_id.is_none() {
            " (the batch has no output file)"
        } else {
            ""
        }
    ));
    match (&args.errors, &error_id) {
        (Some(path), _) => {
            let lines = fetch(cx, error_id.as_deref(), path, order, "errors").await?;
            cx.console.say(format!("{}: {lines} failed requests", path.display()));
        }
        (None, Some(_)) if snapshot.counts.failed > 0 => cx.console.say(format!(
            "{} requests failed: add --errors ERR.jsonl to save them",
            snapshot.counts.failed
        )),
        (None, _) => {}
    }
    cx.console.answer(&batch, args.output.display());
    Ok(Exit::Done)
}

/// Write file `file_id` (none: an empty file) to `dest`, in `order`'s order if given; its lines.
async fn fetch(
    cx: &Context<'_>,
    file_id: Option<&str>,
    dest: &Path,
    order: Option<&Path>,
    label: &str,
) -> Result<u64, CliError> {
    let Some(file_id) = file_id else {
        tokio::fs::write(dest, b"").await.map_err(|e| CliError::io(dest, &e))?;
        return Ok(0);
    };
    let Some(input) = order else {
        return transfer::download(cx.api, cx.console, cx.interrupt, file_id, dest, label).await;
    };
    let unordered = with_suffix(dest, ".unordered");
    transfer::download(cx.api, cx.console, cx.interrupt, file_id, &unordered, label).await?;
    let (from, input, to) = (unordered.clone(), input.to_owned(), dest.to_owned());
    let reordered = tokio::task::spawn_blocking(move || results::reorder(&from, &input, &to))
        .await
        .map_err(|e| CliError::Unexpected(format!("the reordering stopped: {e}")));
    let _ = tokio::fs::remove_file(&unordered).await;
    let reordered = reordered??;
    if reordered.not_in_input > 0 {
        cx.console.say(format!(
            "{}: {} lines name a custom_id the input does not have (written last)",
            dest.display(),
            reordered.not_in_input
        ));
    }
    Ok(reordered.lines)
}

pub async fn list(cx: &Context<'_>, limit: u32, after: Option<String>, all: bool) -> Result<Exit, CliError> {
    let first = cx.interrupt.guard(cx.api.list_batches(limit, after.as_deref())).await?;
    let document = if all {
        let mut data = page_data(&first);
        let mut more = first.get("has_more").and_then(Value::as_bool) == Some(true);
        while more {
            let Some(last) = data
                .last()
                .and_then(|b| b.get("id"))
                .and_then(Value::as_str)
                .map(str::to_owned)
            else {
                break;
            };
            let page = cx.interrupt.guard(cx.api.list_batches(limit, Some(&last))).await?;
            let page_items = page_data(&page);
            more = page.get("has_more").and_then(Value::as_bool) == Some(true) && !page_items.is_empty();
            data.extend(page_items);
        }
        let id_at = |batch: Option<&Value>| batch.and_then(|b| b.get("id")).cloned();
        json!({"object": "list", "first_id": id_at(data.first()), "last_id": id_at(data.last()), "has_more": false, "data": data})
    } else {
        first
    };
    let data = page_data(&document);
    cx.console.answer(&document, table(&data));
    if !cx.console.json && document.get("has_more").and_then(Value::as_bool) == Some(true) {
        if let Some(last) = data.last().and_then(|b| b.get("id")).and_then(Value::as_str) {
            cx.console
                .say(format!("more: nimbus batch list --after {last} (or --all)"));
        }
    }
    Ok(Exit::Done)
}

fn page_data(page: &Value) -> Vec<Value> {
    page.get("data").and_then(Value::as_array).cloned().unwrap_or_default()
}

/// Batches as a table: id, status, ran/total, failed, not run (a cancel or expiry left them),
/// endpoint, created.
fn table(batches: &[Value]) -> String {
    let mut rows = vec![[
        "ID".to_owned(),
        "STATUS".to_owned(),
        "DONE/TOTAL".to_owned(),
        "FAILED".to_owned(),
        "NOT RUN".to_owned(),
        "ENDPOINT".to_owned(),
        "CREATED".to_owned(),
    ]];
    for batch in batches {
        let snapshot = Snapshot::of(batch);
        let text = |name: &str| batch.get(name).and_then(Value::as_str).unwrap_or("").to_owned();
        let created = batch
            .get("created_at")
            .and_then(Value::as_i64)
            .and_then(|seconds| jiff::Timestamp::from_second(seconds).ok())
            .map(|at| at.to_string())
            .unwrap_or_default();
        rows.push([
            text("id"),
            snapshot.status.clone(),
            format!("{}/{}", snapshot.done(), snapshot.counts.total),
            snapshot.failed().to_string(),
            snapshot.not_run().to_string(),
            text("endpoint"),
            created,
        ]);
    }
    let widths: Vec<usize> = (0..7)
        .map(|column| rows.iter().map(|row| row[column].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|row| {
            row.iter()
                .zip(&widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub async fn cancel(cx: &Context<'_>, id: &str) -> Result<Exit, CliError> {
    let batch = cx.interrupt.guard(cx.api.cancel_batch(id)).await?;
    let status = Snapshot::of(&batch).status;
    cx.console.say(format!(
        "{id} is {status}: requests not yet run will not run; finished results are kept"
    ));
    cx.console.answer(&batch, status);
    Ok(Exit::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_aligns_its_columns() {
        let batches = [
            json!({"id": "batch_1", "status": "in_progress", "endpoint": "/v1/chat/completions",
                   "created_at": 1_700_000_000, "request_counts": {"total": 10, "completed": 3, "failed": 1}}),
            json!({"id": "batch_22", "status": "completed", "endpoint": "/v1/embeddings", "created_at": 1_700_000_060}),
            json!({"id": "batch_3", "status": "cancelled", "endpoint": "/v1/embeddings", "created_at": 1_700_000_060,
                   "request_counts": {"total": 5000, "completed": 1200, "failed": 3810, "not_run": 3800}}),
        ];
        let text = table(&batches);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(
            lines[0].starts_with("ID        STATUS       DONE/TOTAL  FAILED  NOT RUN"),
            "{text}"
        );
        assert!(
            lines[1].starts_with("batch_1   in_progress  4/10        1       0"),
            "{text}"
        );
        assert!(lines[2].contains("2023-11-14T22:14:20Z"), "{text}");
        // A cancelled batch is not shown as done: what never ran is apart.
        assert!(
            lines[3].starts_with("batch_3   cancelled    1210/5000   10      3800"),
            "{text}"
        );
    }
}
