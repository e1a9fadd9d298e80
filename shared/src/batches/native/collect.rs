//! Collecting a part whose provider side is over: read both of its provider batch's result
//! files (joined by `custom_id`: their order is arbitrary), turn each staged line into what it
//! became (answered, failed, or never run with the part's code), save the results as a segment
//! and count them, part and batch in one conditional write.

use super::stored::{PartState, StoredPart};
use super::NativeParts;
use crate::batches::chunk_run::parse_native_custom_id;
use crate::batches::lines::{BatchLine, LineKind, NativeAnswer};
use crate::batches::segment::put_results;
use crate::batches::segment::PendingSegment;
use crate::batches::stored::{chunk_id, Loaded, StoredBatch, StoredChunk, BATCH_KIND, CHUNK_KIND};
use crate::batches::{count_lines, BatchesError};
use crate::ports::StorageError;
use crate::providers::http_upstream::upstream_error_message;
use crate::providers::{CallContext, ProviderError};
use crate::records::LeaseUntil;
use bytes::Bytes;
use serde_json::Value;
use std::collections::HashMap;
use tokio::time::Instant;

/// The codes a provider's error file gives lines its batch never ran.
const PROVIDER_NOT_RUN_CODES: [&str; 2] = ["batch_cancelled", "batch_expired"];

/// What one result line of a provider batch says about its request.
fn answer_of(line: &Value) -> NativeAnswer {
    let response = line.get("response").filter(|r| r.is_object());
    if let Some(response) = response {
        let status = response
            .get("status_code")
            .and_then(Value::as_u64)
            .and_then(|s| u16::try_from(s).ok())
            .unwrap_or(500);
        let body = response.get("body").cloned().unwrap_or(Value::Null);
        if (200..300).contains(&status) {
            return NativeAnswer::Answered(body);
        }
        let message = upstream_error_message(&body).unwrap_or_else(|| format!("the provider answered {status}"));
        return NativeAnswer::Failed(ProviderError::Http {
            status,
            message,
            retry_after: None,
            body: body.is_object().then_some(body),
        });
    }
    let error = line.get("error");
    let text = |field: &str| {
        error
            .and_then(|e| e.get(field))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    NativeAnswer::NotRun {
        code: text("code").unwrap_or_else(|| "provider_error".to_owned()),
        message: text("message").unwrap_or_else(|| "The provider batch did not run this request.".to_owned()),
    }
}

/// The input lines of one chunk, read once while a part's lines of that chunk are mapped.
struct ChunkLines {
    index: Option<u32>,
    lines: Vec<Bytes>,
}

impl NativeParts {
    /// Collect and count an ended part (leased by the caller); it is left `Done`.
    pub(super) async fn collect_part(
        &self,
        batch: &StoredBatch,
        part: &mut Loaded<StoredPart>,
        ctx: CallContext<'_>,
        deadline: Instant,
    ) -> Result<(), BatchesError> {
        let end = part.body.end.clone().unwrap_or_else(|| {
            super::steps::end_without_results("provider_result_missing", "The provider batch returned no results.")
        });
        let target = self.part_target(&part.body);
        let mut results: HashMap<String, Value> = HashMap::new();
        for file_id in [&end.output_file_id, &end.error_file_id].into_iter().flatten() {
            let Some(target) = &target else { break };
            let download = target.api.file_content(file_id, ctx);
            let content = super::deadline::within(deadline, "a result file's download", download)
                .await?
                .map_err(super::steps::provider_failure)?;
            let Some(content) = content else {
                tracing::warn!(part = %part.body.reference(), file = %file_id, "a provider result file is gone; its lines are listed as missing");
                continue;
            };
            for line in crate::jsonl::line_bytes(&content) {
                let Ok(value) = serde_json::from_slice::<Value>(&line) else {
                    continue;
                };
                if let Some(id) = value.get("custom_id").and_then(Value::as_str) {
                    results.insert(id.to_owned(), value);
                }
            }
        }

        let kind = self.kinds.of(batch);
        let mut pending = PendingSegment::default();
        let mut not_run = 0;
        let mut chunk = ChunkLines {
            index: None,
            lines: Vec::new(),
        };
        for source in &part.body.sources {
            let blob = self.blobs.get(&source.key).await?;
            let skip = usize::try_from(source.skip).unwrap_or(usize::MAX);
            let take = usize::try_from(source.lines).unwrap_or(usize::MAX);
            for staged in crate::jsonl::line_bytes(&blob).iter().skip(skip).take(take) {
                let custom_id = crate::batches::lines::openai::staged_custom_id(staged).unwrap_or_default();
                let Some((chunk_index, line)) = parse_native_custom_id(&custom_id) else {
                    continue;
                };
                let original = self.input_line(batch, &mut chunk, chunk_index, line).await?;
                let unrun = || NativeAnswer::NotRun {
                    code: end.code.clone(),
                    message: end.message.clone(),
                };
                let answer = match results.remove(&custom_id).map(|result| answer_of(&result)) {
                    // The provider lists the lines its cancelled or expired batch never ran;
                    // the part's end says why from this batch's side (its cancel, its window).
                    Some(NativeAnswer::NotRun { code, .. }) if PROVIDER_NOT_RUN_CODES.contains(&code.as_str()) => {
                        unrun()
                    }
                    Some(answer) => answer,
                    None => unrun(),
                };
                // Only lines a cancel or the window stopped are "not run"; lines of a part the
                // provider refused or lost failed.
                if matches!(&answer, NativeAnswer::NotRun { code, .. } if PROVIDER_NOT_RUN_CODES.contains(&code.as_str()))
                {
                    not_run += 1;
                }
                pending.push(collect_line(kind.as_ref(), BatchLine::read(&original), answer).await?);
            }
        }
        self.save_part_result(batch, part, pending, not_run).await
    }

    /// Line `line` of chunk `index` of the batch's input.
    async fn input_line(
        &self,
        batch: &StoredBatch,
        chunk: &mut ChunkLines,
        index: u32,
        line: u64,
    ) -> Result<Bytes, BatchesError> {
        if chunk.index != Some(index) {
            let record = Loaded::<StoredChunk>::get(self.state.as_ref(), CHUNK_KIND, &chunk_id(&batch.batch.id, index))
                .await?
                .ok_or(StorageError::NotFound)?;
            let range = &record.body.range;
            let bytes = self
                .blobs
                .get_range(&batch.input_blob_key, range.start, range.end)
                .await?;
            chunk.lines = crate::jsonl::line_bytes(&bytes);
            chunk.index = Some(index);
        }
        let at = usize::try_from(line).unwrap_or(usize::MAX);
        Ok(chunk.lines.get(at).cloned().unwrap_or_default())
    }

    /// Save a part's results (blobs first) and count them: the part `Done` and the batch's
    /// counters (the provider's reported progress replaced by the real counts) in one write.
    async fn save_part_result(
        &self,
        batch: &StoredBatch,
        part: &mut Loaded<StoredPart>,
        pending: PendingSegment,
        not_run: u64,
    ) -> Result<(), BatchesError> {
        let token = self.ids.new_uuid().simple().to_string();
        let prefix = format!("{}/native/{:04}-{token}", batch.results_prefix(), part.body.index);
        let mut pending = pending;
        let segment = put_results(self.blobs.as_ref(), &prefix, &mut pending).await?;
        for _ in 0..50 {
            let Some(mut current) =
                Loaded::<StoredBatch>::get(self.state.as_ref(), BATCH_KIND, &batch.batch.id).await?
            else {
                return Ok(());
            };
            if current.body.sealed {
                return Ok(());
            }
            let reported = part.body.reported;
            let counts = &mut current.body.batch.request_counts;
            counts.completed = (counts.completed + segment.completed).saturating_sub(reported.completed);
            counts.failed = (counts.failed + segment.failed).saturating_sub(reported.failed);
            counts.not_run += not_run;
            current.body.batch.usage.add_usage(&segment.usage);
            current.body.native.parts_done += 1;
            part.body.state = PartState::Done;
            part.body.result = Some(segment.clone());
            part.body.lease_until_ms = LeaseUntil::NONE;
            let (part_record, part_version) = part.next()?;
            match self
                .state
                .update_all(&[(part_record.clone(), part_version), current.next()?])
                .await
            {
                Ok(()) => {
                    count_lines(self.metrics.as_ref(), "native", segment.completed, segment.failed, 0);
                    part.record = part_record;
                    self.forget_provider_files(part).await;
                    return Ok(());
                }
                Err(StorageError::Conflict) => {
                    // The batch moved (another part, a poll): read it again; a part someone
                    // else wrote is not ours to count.
                    let Some(fresh) =
                        Loaded::<StoredPart>::get(self.state.as_ref(), &part.record.kind, &part.record.id).await?
                    else {
                        return Ok(());
                    };
                    if fresh.body.state == PartState::Done {
                        return Ok(());
                    }
                    *part = Loaded {
                        body: StoredPart {
                            state: PartState::Ended,
                            ..fresh.body
                        },
                        record: fresh.record,
                    };
                    tokio::time::sleep(std::time::Duration::from_millis(5 + rand::random::<u64>() % 20)).await;
                }
                Err(err) => return Err(err.into()),
            }
        }
        Err(StorageError::Conflict.into())
    }

    /// The provider's copies of a counted part (input and result files) are no longer needed.
    async fn forget_provider_files(&self, part: &Loaded<StoredPart>) {
        let Some(target) = self.part_target(&part.body) else {
            return;
        };
        let Ok(credentials) = self.part_credentials(&part.body).await else {
            return;
        };
        let ctx = CallContext {
            credentials: &credentials,
        };
        let end = part.body.end.as_ref();
        let files = [
            part.body.file_id.as_ref(),
            end.and_then(|e| e.output_file_id.as_ref()),
            end.and_then(|e| e.error_file_id.as_ref()),
        ];
        for file_id in files.into_iter().flatten() {
            if let Err(error) = target.api.delete_file(file_id, ctx).await {
                tracing::warn!(file = %file_id, error = %error, "could not delete a provider batch file");
            }
        }
    }
}

/// What a staged line became.
async fn collect_line(
    kind: &dyn LineKind,
    original: BatchLine,
    answer: NativeAnswer,
) -> Result<crate::batches::lines::LineResult, BatchesError> {
    kind.native_result(original, answer).await
}
