use super::*;
use crate::tensorzero::function_calls::{OutputBlock, UsageReport};
use serde_json::{json, Value};

fn items(n: usize) -> Vec<ItemIds> {
    (0..n)
        .map(|_| ItemIds {
            inference_id: Uuid::now_v7(),
            episode_id: Uuid::now_v7(),
        })
        .collect()
}

fn query() -> PollQuery {
    PollQuery::default()
}

// page() -------------------------------------------------------------------------------------------

#[test]
fn a_poll_without_paging_covers_every_item() {
    let items = items(5);
    assert_eq!(page(&items, query()).unwrap(), 0..5);
}

#[test]
fn after_starts_right_past_its_item() {
    let items = items(5);
    let after = |at: usize| PollQuery {
        after: Some(items[at].inference_id),
        ..query()
    };
    assert_eq!(page(&items, after(0)).unwrap(), 1..5);
    assert_eq!(page(&items, after(2)).unwrap(), 3..5);
    assert_eq!(page(&items, after(4)).unwrap(), 5..5, "after the last item: nothing");
}

#[test]
fn after_an_id_not_in_the_batch_is_a_bad_request() {
    let items = items(3);
    let stranger = Uuid::now_v7();
    let err = page(
        &items,
        PollQuery {
            after: Some(stranger),
            ..query()
        },
    )
    .unwrap_err();
    let BatchInferenceError::Function(FunctionError::InvalidRequest(message)) = err else {
        panic!("{err:?}");
    };
    assert_eq!(
        message,
        format!("`after` is not an inference of this batch: {stranger}")
    );
}

#[test]
fn limit_caps_the_page_and_stops_at_the_end() {
    let items = items(5);
    let limit = |limit: usize, after: Option<usize>| PollQuery {
        limit: Some(limit),
        after: after.map(|at| items[at].inference_id),
        ..query()
    };
    assert_eq!(page(&items, limit(2, None)).unwrap(), 0..2);
    assert_eq!(page(&items, limit(2, Some(1))).unwrap(), 2..4);
    assert_eq!(page(&items, limit(2, Some(3))).unwrap(), 4..5);
    assert_eq!(page(&items, limit(9, None)).unwrap(), 0..5);
    assert_eq!(page(&items, limit(usize::MAX, Some(0))).unwrap(), 1..5, "no overflow");
}

#[test]
fn a_single_inference_covers_just_its_item() {
    let items = items(4);
    for (at, item) in items.iter().enumerate() {
        let single = PollQuery {
            inference_id: Some(item.inference_id),
            ..query()
        };
        assert_eq!(page(&items, single).unwrap(), at..at + 1);
    }
}

// ended_reply(): statuses and shapes ---------------------------------------------------------------

fn reply(inference_id: Uuid) -> InferenceReply {
    InferenceReply {
        inference_id,
        episode_id: Uuid::now_v7(),
        variant_name: "v".into(),
        content: Some(vec![OutputBlock::Text { text: "hi".into() }]),
        output: None,
        usage: UsageReport {
            input_tokens: 3,
            output_tokens: 1,
        },
        finish_reason: None,
        original_response: None,
        raw_response: None,
        raw_usage: None,
    }
}

fn failure(inference_id: Uuid) -> ItemResult {
    ItemResult {
        inference_id: Some(inference_id),
        episode_id: Some(Uuid::now_v7()),
        error: Some("All variants failed with errors: v: boom".into()),
        code: None,
    }
}

fn found(inferences: Vec<InferenceReply>, failed: Vec<ItemResult>) -> Found {
    Found {
        inferences,
        failed,
        has_more: false,
        last: None,
    }
}

fn json_of(poll: &BatchInferencePoll) -> Value {
    serde_json::to_value(poll).unwrap()
}

fn keys(value: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    keys
}

#[test]
fn a_completed_batch_with_inferences_is_completed_with_batch_id_and_inferences_only() {
    let batch_id = Uuid::now_v7();
    let ok = Uuid::now_v7();
    let poll = ended_reply(
        batch_id,
        BatchStatus::Completed,
        1,
        query(),
        found(vec![reply(ok)], vec![failure(Uuid::now_v7())]),
    );
    assert_eq!(poll.status, PollStatus::Completed);
    let value = json_of(&poll);
    assert_eq!(keys(&value), ["batch_id", "inferences", "status"]);
    assert_eq!(value["status"], "completed");
    assert_eq!(value["batch_id"], batch_id.to_string());
    assert_eq!(value["inferences"][0]["inference_id"], ok.to_string());
}

#[test]
fn a_completed_batch_without_any_inference_is_exactly_failed() {
    let failed = ended_reply(
        Uuid::now_v7(),
        BatchStatus::Completed,
        0,
        query(),
        found(vec![], vec![failure(Uuid::now_v7())]),
    );
    assert_eq!(json_of(&failed), json!({"status": "failed"}));
}

#[test]
fn an_expired_failed_or_cancelled_batch_is_exactly_failed_as_tensorzero_maps_it() {
    for status in [BatchStatus::Failed, BatchStatus::Expired, BatchStatus::Cancelled] {
        let poll = ended_reply(
            Uuid::now_v7(),
            status,
            2,
            query(),
            found(vec![reply(Uuid::now_v7())], vec![]),
        );
        assert_eq!(json_of(&poll), json!({"status": "failed"}), "{status:?}");
    }
}

#[test]
fn a_single_item_that_failed_is_failed_in_a_completed_batch() {
    let id = Uuid::now_v7();
    let single = PollQuery {
        inference_id: Some(id),
        ..query()
    };
    let failed = ended_reply(
        Uuid::now_v7(),
        BatchStatus::Completed,
        5,
        single,
        found(vec![], vec![failure(id)]),
    );
    assert_eq!(json_of(&failed), json!({"status": "failed"}));
    let succeeded = ended_reply(
        Uuid::now_v7(),
        BatchStatus::Completed,
        5,
        single,
        found(vec![reply(id)], vec![]),
    );
    assert_eq!(succeeded.status, PollStatus::Completed);
    assert_eq!(succeeded.inferences.unwrap().len(), 1);
}

#[test]
fn include_failures_lists_them_even_on_a_failed_batch() {
    let batch_id = Uuid::now_v7();
    let id = Uuid::now_v7();
    let asked = PollQuery {
        include_failures: true,
        ..query()
    };
    let poll = ended_reply(
        batch_id,
        BatchStatus::Completed,
        0,
        asked,
        found(vec![], vec![failure(id)]),
    );
    let value = json_of(&poll);
    assert_eq!(keys(&value), ["batch_id", "failed_inferences", "inferences", "status"]);
    assert_eq!(value["status"], "failed");
    assert_eq!(value["inferences"], json!([]));
    assert_eq!(value["failed_inferences"][0]["inference_id"], id.to_string());
    assert!(value["failed_inferences"][0].get("code").is_none(), "{value}");
}

#[test]
fn a_page_says_whether_more_follow_and_where_to_go_on() {
    let last = Uuid::now_v7();
    let paged = PollQuery {
        limit: Some(1),
        ..query()
    };
    let more = Found {
        has_more: true,
        last: Some(last),
        ..found(vec![reply(last)], vec![])
    };
    let value = json_of(&ended_reply(Uuid::now_v7(), BatchStatus::Completed, 3, paged, more));
    assert_eq!(
        keys(&value),
        ["batch_id", "has_more", "inferences", "next_after", "status"]
    );
    assert_eq!(
        (value["has_more"].clone(), value["next_after"].clone()),
        (json!(true), json!(last.to_string()))
    );

    let end = Found {
        has_more: false,
        last: Some(last),
        ..found(vec![reply(last)], vec![])
    };
    let value = json_of(&ended_reply(Uuid::now_v7(), BatchStatus::Completed, 3, paged, end));
    assert_eq!(value["has_more"], false);
    assert!(value.get("next_after").is_none(), "no next page: {value}");

    // A page of a failed batch still carries its (empty) inferences and the paging keys.
    let value = json_of(&ended_reply(
        Uuid::now_v7(),
        BatchStatus::Expired,
        0,
        paged,
        found(vec![], vec![]),
    ));
    assert_eq!(value["status"], "failed");
    assert_eq!(keys(&value), ["batch_id", "has_more", "inferences", "status"]);
}
