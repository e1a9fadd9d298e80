//! `/batch_inference` batches on the [`Harness`]: the configuration giving each scripted model a
//! chat function, submitting and polling through the batch API, and the exactly-once checks on
//! a finished batch (every inference stored once, answered once in the polls, counted once).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::batch_assertions::assert_cleaned_up;
use crate::batch_harness::{project, tokens_for, Harness};
use nimbus_shared::app::LoadedConfig;
use nimbus_shared::batches::{BatchInferenceCreated, BatchInferencePoll, PollQuery, PollStatus};
use nimbus_shared::config::Config;
use nimbus_shared::openai::batches::{BatchObject, BatchStatus, RequestCounts};
use nimbus_shared::ports::inference_records::InferenceRecord;
use nimbus_shared::ports::StateStore;
use nimbus_shared::tensorzero::batch_request::BatchInferenceRequest;
use nimbus_shared::tensorzero::function_calls::{InferenceReply, OutputBlock};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use uuid::Uuid;

/// The one variant of every harness function.
pub const VARIANT: &str = "only";

/// The chat function whose one variant calls `model`.
pub fn function_for(model: &str) -> String {
    format!("chat_{model}")
}

/// A configuration with, for each model, the model (the harness routes it to its scripted
/// provider; the configured provider only satisfies validation) and its chat function.
pub fn config_for(models: &[&str]) -> LoadedConfig {
    let mut toml = String::new();
    for model in models {
        let function = function_for(model);
        writeln!(
            toml,
            r#"
[models."{model}"]
routing = ["p"]
[models."{model}".providers.p]
type = "dummy"

[functions."{function}"]
type = "chat"
[functions."{function}".variants.{VARIANT}]
type = "chat_completion"
model = "{model}"
"#
        )
        .unwrap();
    }
    Config::from_toml(&toml)
        .and_then(LoadedConfig::without_files)
        .expect("the harness configuration compiles")
}

/// A submitted `/batch_inference` batch and the message contents of its items, in input order.
#[derive(Debug, Clone)]
pub struct SubmittedBatch {
    pub created: BatchInferenceCreated,
    pub contents: Vec<String>,
    /// The episode every item was given, if one was.
    pub episode: Option<Uuid>,
}

impl SubmittedBatch {
    pub fn id(&self) -> Uuid {
        self.created.batch_id
    }

    /// Inference ids of the items whose model call succeeds (contents not `fail-…`), in order.
    pub fn succeeding(&self) -> Vec<Uuid> {
        self.ids_where(|content| !content.starts_with("fail-"))
    }

    pub fn failing(&self) -> Vec<Uuid> {
        self.ids_where(|content| content.starts_with("fail-"))
    }

    fn ids_where(&self, keep: impl Fn(&str) -> bool) -> Vec<Uuid> {
        self.contents
            .iter()
            .zip(&self.created.inference_ids)
            .filter(|(content, _)| keep(content))
            .map(|(_, id)| *id)
            .collect()
    }

    fn content_of(&self, inference_id: Uuid) -> &str {
        let at = self
            .created
            .inference_ids
            .iter()
            .position(|id| *id == inference_id)
            .unwrap();
        &self.contents[at]
    }
}

/// One input per content: a single user message with that content.
pub fn inputs_for(contents: &[String]) -> Vec<Value> {
    contents
        .iter()
        .map(|content| json!({"messages": [{"role": "user", "content": content}]}))
        .collect()
}

/// The text of a chat reply.
pub fn reply_text(reply: &InferenceReply) -> String {
    let blocks = reply.content.as_ref().expect("a chat reply has content");
    let value = serde_json::to_value::<&Vec<OutputBlock>>(blocks).unwrap();
    value
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|block| block["text"].as_str())
        .collect()
}

impl Harness {
    /// Submit one item per content to `function` (all in `episode` when given).
    pub async fn submit_inference(&self, function: &str, contents: &[String], episode: Option<Uuid>) -> SubmittedBatch {
        let request = BatchInferenceRequest {
            function_name: Some(function.to_owned()),
            inputs: Some(inputs_for(contents)),
            episode_ids: episode.map(|e| vec![Some(e.to_string()); contents.len()]),
            ..BatchInferenceRequest::default()
        };
        let created = self.api.submit_batch_inference(&project(), request).await.unwrap();
        assert_eq!(created.inference_ids.len(), contents.len());
        SubmittedBatch {
            created,
            contents: contents.to_vec(),
            episode,
        }
    }

    pub async fn poll(&self, batch_id: Uuid, query: PollQuery) -> BatchInferencePoll {
        self.api
            .poll_batch_inference(&project(), batch_id, query)
            .await
            .unwrap()
    }

    /// The batch object of a `/batch_inference` batch, as stored (it is not a `/v1/batches` one).
    pub async fn inference_batch(&self, batch_id: Uuid) -> BatchObject {
        let record = self.state.get("batch", &batch_id.to_string()).await.unwrap().unwrap();
        serde_json::from_value(record.body["batch"].clone()).unwrap()
    }

    /// Drain, and insist the batch then is in a terminal status.
    pub async fn run_inference_to_end(&self, batch_id: Uuid) -> BatchObject {
        self.drain(std::time::Duration::from_secs(20)).await;
        let batch = self.inference_batch(batch_id).await;
        assert!(batch.status.is_terminal(), "batch ended {:?}", batch.status);
        batch
    }

    /// Every stored inference of `episode`, in creation order.
    pub async fn episode_records(&self, episode: Uuid) -> Vec<InferenceRecord> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let page = self.records.list_episode(&project(), episode, after, 7).await.unwrap();
            after = page.records.last().map(|r| r.inference_id);
            all.extend(page.records);
            if !page.has_more {
                return all;
            }
        }
    }
}

/// A `/batch_inference` batch that completed with every inference exactly once: each succeeding
/// item has one stored record, answered once (in input order) by the batch poll, the pages and
/// its own poll; each failing item has no record and is reported failed once; the counters and
/// usage are those of the stored records; the engine left nothing behind.
pub async fn assert_each_inference_once(h: &Harness, batch: &SubmittedBatch) {
    let stored = h.inference_batch(batch.id()).await;
    assert_eq!(stored.status, BatchStatus::Completed, "{stored:?}");
    let succeeding = batch.succeeding();
    let failing = batch.failing();

    // The records: one per succeeding item, none for a failing one.
    let mut records = BTreeMap::new();
    for (at, id) in batch.created.inference_ids.iter().enumerate() {
        let record = h.records.get(&project(), *id).await.unwrap();
        if succeeding.contains(id) {
            let record = record.unwrap_or_else(|| panic!("no record for item {at}"));
            assert_eq!(record.episode_id, batch.created.episode_ids[at]);
            assert_eq!(record.variant_name, VARIANT);
            records.insert(*id, record);
        } else {
            assert!(record.is_none(), "a record for failed item {at}");
        }
    }
    if let Some(episode) = batch.episode {
        let listed: Vec<Uuid> = h
            .episode_records(episode)
            .await
            .iter()
            .map(|r| r.inference_id)
            .collect();
        assert_eq!(listed, succeeding, "the episode holds each inference once, in order");
    }

    // Counters and usage: exactly the stored records'.
    assert_eq!(
        stored.request_counts,
        RequestCounts {
            total: batch.contents.len() as u64,
            completed: succeeding.len() as u64,
            failed: failing.len() as u64,
            not_run: stored.request_counts.not_run,
        }
    );
    let (input, output) = records.values().fold((0, 0), |(i, o), r| {
        (i + r.usage.input_tokens, o + r.usage.output_tokens)
    });
    assert_eq!(
        (stored.usage.input_tokens, stored.usage.output_tokens),
        (input, output),
        "the batch's usage is its records' usage"
    );

    // The poll: every succeeding item once, in input order, as stored; every failure once.
    let all = PollQuery {
        include_failures: true,
        ..PollQuery::default()
    };
    let poll = h.poll(batch.id(), all).await;
    let expected_status = if succeeding.is_empty() {
        PollStatus::Failed
    } else {
        PollStatus::Completed
    };
    assert_eq!(poll.status, expected_status);
    let inferences = poll.inferences.clone().unwrap();
    let answered: Vec<Uuid> = inferences.iter().map(|r| r.inference_id).collect();
    assert_eq!(
        answered, succeeding,
        "each succeeding item answered once, in input order"
    );
    for reply in &inferences {
        let content = batch.content_of(reply.inference_id);
        assert_eq!(
            reply_text(reply),
            format!("echo:{content}"),
            "the answer is its own item's"
        );
        assert_eq!(
            reply,
            &InferenceReply::from_record(&records[&reply.inference_id]).unwrap()
        );
        assert_eq!(reply.usage.input_tokens, tokens_for(content).0);
    }
    let failed = poll.failed_inferences.clone().unwrap();
    let reported: Vec<Uuid> = failed.iter().map(|f| f.inference_id.unwrap()).collect();
    assert_eq!(reported, failing, "each failing item reported once, in input order");
    for failure in &failed {
        assert!(failure.error.is_some() && failure.code.is_none(), "{failure:?}");
    }

    // Paged, the same items once each.
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = h
            .poll(
                batch.id(),
                PollQuery {
                    after,
                    limit: Some(4),
                    ..PollQuery::default()
                },
            )
            .await;
        paged.extend(page.inferences.unwrap().into_iter().map(|r| r.inference_id));
        if !page.has_more.unwrap() {
            break;
        }
        after = page.next_after;
    }
    assert_eq!(paged, succeeding, "the pages hold each inference once");

    // Each item on its own.
    for id in &batch.created.inference_ids {
        let single = h
            .poll(
                batch.id(),
                PollQuery {
                    inference_id: Some(*id),
                    ..PollQuery::default()
                },
            )
            .await;
        if succeeding.contains(id) {
            assert_eq!(single.status, PollStatus::Completed);
            let replies = single.inferences.unwrap();
            assert_eq!(replies.len(), 1);
            assert_eq!(replies[0].inference_id, *id);
        } else {
            assert_eq!(single.status, PollStatus::Failed);
        }
    }
    assert_cleaned_up(h, &batch.id().to_string()).await;
}
