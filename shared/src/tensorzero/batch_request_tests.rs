use super::*;
use crate::ports::inference_records::InferenceRecord;
use crate::ports::ProjectId;
use std::collections::BTreeSet;
use std::sync::Arc;

const CONFIG: &str = r#"
[gateway.retries]
max_retries = 0

[models.good]
routing = ["d"]
[models.good.providers.d]
type = "dummy"

[functions.chat]
type = "chat"
[functions.chat.variants.a]
type = "chat_completion"
model = "good"
temperature = 0.9
max_tokens = 100

[functions.pair]
type = "chat"
[functions.pair.variants.left]
type = "chat_completion"
model = "good"
[functions.pair.variants.right]
type = "chat_completion"
model = "dummy::other"

[functions.extract]
type = "json"
[functions.extract.variants.only]
type = "chat_completion"
model = "good"
"#;

fn service() -> Arc<FunctionService> {
    crate::tensorzero::function_calls::tests::service_for(CONFIG).0
}

fn inputs(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"messages": [{"role": "user", "content": format!("item {i}")}]}))
        .collect()
}

fn request(function: &str, n: usize) -> BatchInferenceRequest {
    BatchInferenceRequest {
        function_name: Some(function.to_owned()),
        inputs: Some(inputs(n)),
        ..BatchInferenceRequest::default()
    }
}

fn invalid_message(result: Result<PlannedBatch, FunctionError>) -> String {
    match result {
        Err(FunctionError::InvalidRequest(message)) => message,
        other => panic!("expected a bad request: {other:?}"),
    }
}

/// The `/inference` body of each planned item.
fn bodies(planned: &PlannedBatch) -> Vec<Value> {
    planned
        .items
        .iter()
        .map(|item| {
            let line: Value = serde_json::from_str(&item.line).unwrap();
            assert_eq!(line["inference_id"], item.inference_id.to_string());
            line["request"].clone()
        })
        .collect()
}

// Per-item lists ----------------------------------------------------------------------------------

#[test]
fn every_per_item_list_of_the_wrong_length_is_refused_naming_it_and_both_lengths() {
    let service = service();
    let cases: Vec<(&str, SetList)> = vec![
        ("episode_ids", Box::new(|r| r.episode_ids = one())),
        ("tags", Box::new(|r| r.tags = one())),
        ("output_schemas", Box::new(|r| r.output_schemas = one())),
        ("additional_tools", Box::new(|r| r.additional_tools = one())),
        ("allowed_tools", Box::new(|r| r.allowed_tools = one())),
        ("tool_choice", Box::new(|r| r.tool_choice = one())),
        ("parallel_tool_calls", Box::new(|r| r.parallel_tool_calls = one())),
        (
            "params.chat_completion.temperature",
            Box::new(|r| chat(r).temperature = one()),
        ),
        (
            "params.chat_completion.max_tokens",
            Box::new(|r| chat(r).max_tokens = one()),
        ),
        ("params.chat_completion.seed", Box::new(|r| chat(r).seed = one())),
        ("params.chat_completion.top_p", Box::new(|r| chat(r).top_p = one())),
        (
            "params.chat_completion.presence_penalty",
            Box::new(|r| chat(r).presence_penalty = one()),
        ),
        (
            "params.chat_completion.frequency_penalty",
            Box::new(|r| chat(r).frequency_penalty = one()),
        ),
    ];
    for (field, set) in cases {
        let mut r = request("chat", 2);
        set(&mut r);
        assert_eq!(
            invalid_message(service.checks().plan_batch(r)),
            format!("`{field}` has 1 entries but `inputs` has 2: every per-item list must be as long as `inputs`"),
        );
    }
}

/// Sets one per-item list of a request.
type SetList = Box<dyn Fn(&mut BatchInferenceRequest)>;

/// A per-item list of one entry (null).
fn one<T>() -> Option<Vec<Option<T>>> {
    Some(vec![None])
}

fn chat(request: &mut BatchInferenceRequest) -> &mut BatchChatParams {
    &mut request.params.get_or_insert_with(BatchParams::default).chat_completion
}

#[test]
fn per_item_values_land_in_their_own_item_and_nulls_leave_the_key_out() {
    let service = service();
    let mut r = request("chat", 3);
    let params = chat(&mut r);
    params.temperature = Some(vec![Some(0.1), None, Some(0.3)]);
    params.max_tokens = Some(vec![None, Some(5), None]);
    params.seed = Some(vec![Some(7), None, None]);
    params.top_p = Some(vec![None, None, Some(0.5)]);
    params.presence_penalty = Some(vec![Some(0.2), None, None]);
    params.frequency_penalty = Some(vec![None, Some(0.4), None]);
    r.tags = Some(vec![
        Some(BTreeMap::from([("who".to_owned(), "zero".to_owned())])),
        None,
        Some(BTreeMap::from([("who".to_owned(), "two".to_owned())])),
    ]);
    let tool = json!({"name": "lookup", "description": "Look up", "parameters": {"type": "object"}});
    r.additional_tools = Some(vec![None, Some(vec![tool.clone()]), None]);
    // allowed_tools names configured tools only: an empty list allows none of them.
    r.allowed_tools = Some(vec![None, Some(vec![]), None]);
    r.tool_choice = Some(vec![None, Some(json!("required")), None]);
    r.parallel_tool_calls = Some(vec![None, Some(false), None]);
    let planned = service.checks().plan_batch(r).unwrap();
    let bodies = bodies(&planned);
    let chat_params: Vec<Value> = bodies.iter().map(|b| b["params"]["chat_completion"].clone()).collect();
    assert_eq!(
        chat_params,
        [
            json!({"temperature": 0.1, "seed": 7, "presence_penalty": 0.2}),
            json!({"max_tokens": 5, "frequency_penalty": 0.4}),
            json!({"temperature": 0.3, "top_p": 0.5}),
        ]
    );
    assert_eq!(bodies[0]["tags"], json!({"who": "zero"}));
    assert!(bodies[1].get("tags").is_none());
    assert_eq!(bodies[2]["tags"], json!({"who": "two"}));
    for key in [
        "additional_tools",
        "allowed_tools",
        "tool_choice",
        "parallel_tool_calls",
    ] {
        assert!(bodies[0].get(key).is_none() && bodies[2].get(key).is_none(), "{key}");
    }
    assert_eq!(bodies[1]["additional_tools"], json!([tool]));
    assert_eq!(bodies[1]["allowed_tools"], json!([]));
    assert_eq!(bodies[1]["tool_choice"], json!("required"));
    assert_eq!(bodies[1]["parallel_tool_calls"], json!(false));
    for (at, body) in bodies.iter().enumerate() {
        assert_eq!(body["function_name"], "chat");
        assert_eq!(body["variant_name"], "a", "the batch's variant is pinned on every item");
        assert_eq!(body["cache_options"], json!({"enabled": "off"}));
        assert_eq!(body["input"], inputs(3)[at]);
        assert_eq!(body["episode_id"], planned.items[at].episode_id.to_string());
    }
}

#[test]
fn output_schemas_go_to_their_own_item() {
    let service = service();
    let mut r = request("extract", 2);
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    r.output_schemas = Some(vec![None, Some(schema.clone())]);
    let bodies = bodies(&service.checks().plan_batch(r).unwrap());
    assert!(bodies[0].get("output_schema").is_none());
    assert_eq!(bodies[1]["output_schema"], schema);
}

/// Run every planned item (the dummy model answers): the records they store.
async fn run_all(service: &FunctionService, planned: &PlannedBatch) -> Vec<InferenceRecord> {
    let mut records = Vec::new();
    for item in &planned.items {
        let (ids, outcome) = service
            .run_batch_line(
                &ProjectId::new("p"),
                serde_json::from_str(&item.line).ok(),
                &planned.credentials,
            )
            .await;
        let ids = ids.unwrap();
        assert_eq!((ids.inference_id, ids.episode_id), (item.inference_id, item.episode_id));
        let record = outcome.unwrap();
        assert_eq!(record.inference_id, item.inference_id);
        records.push(record);
    }
    records
}

#[tokio::test]
async fn a_null_param_keeps_the_variants_value_and_a_given_one_beats_it() {
    let service = service();
    let mut r = request("chat", 2);
    chat(&mut r).temperature = Some(vec![Some(0.2), None]);
    chat(&mut r).max_tokens = Some(vec![None, Some(7)]);
    r.tags = Some(vec![None, Some(BTreeMap::from([("k".to_owned(), "v".to_owned())]))]);
    let planned = service.checks().plan_batch(r).unwrap();
    let records = run_all(&service, &planned).await;
    let params: Vec<&Value> = records.iter().map(|r| &r.inference_params["chat_completion"]).collect();
    assert_eq!(params[0]["temperature"], 0.2);
    assert_eq!(params[0]["max_tokens"], 100, "the variant's max_tokens");
    assert_eq!(params[1]["temperature"], 0.9, "the variant's temperature");
    assert_eq!(params[1]["max_tokens"], 7);
    assert!(records[0].tags.is_empty());
    assert_eq!(records[1].tags, BTreeMap::from([("k".to_owned(), "v".to_owned())]));
    assert!(records.iter().all(|r| r.variant_name == "a"));
}

#[tokio::test]
async fn an_unreadable_stored_line_fails_its_item_without_a_panic() {
    let service = service();
    let (ids, outcome) = service
        .run_batch_line(
            &ProjectId::new("p"),
            serde_json::from_slice(b"{not json").ok(),
            &HashMap::new(),
        )
        .await;
    assert!(ids.is_none());
    assert!(
        matches!(outcome, Err(FunctionError::InvalidRequest(m)) if m.starts_with("the stored batch item cannot be read"))
    );
}

// Ids ---------------------------------------------------------------------------------------------

#[test]
fn episode_ids_are_kept_where_given_and_minted_where_null() {
    let service = service();
    let given = Uuid::now_v7();
    let mut r = request("chat", 3);
    r.episode_ids = Some(vec![None, Some(given.to_string()), None]);
    let planned = service.checks().plan_batch(r).unwrap();
    let episodes: Vec<Uuid> = planned.items.iter().map(|i| i.episode_id).collect();
    assert_eq!(episodes[1], given);
    assert_ne!(episodes[0], episodes[2]);
    assert!(episodes.iter().all(|e| e.get_version_num() == 7));
    let inference_ids: BTreeSet<Uuid> = planned.items.iter().map(|i| i.inference_id).collect();
    assert_eq!(inference_ids.len(), 3, "one fresh inference id per item");
    assert!(inference_ids.iter().all(|id| id.get_version_num() == 7));
    for item in &planned.items {
        let ids = item_ids(&serde_json::from_str(&item.line).unwrap()).unwrap();
        assert_eq!((ids.inference_id, ids.episode_id), (item.inference_id, item.episode_id));
    }
}

#[test]
fn a_bad_episode_id_is_refused_naming_its_index() {
    let service = service();
    let mut r = request("chat", 2);
    r.episode_ids = Some(vec![None, Some("nope".to_owned())]);
    let message = invalid_message(service.checks().plan_batch(r));
    assert!(
        message.starts_with("`episode_ids[1]` is not a valid episode id"),
        "{message}"
    );
}

#[test]
fn item_ids_reads_only_item_lines() {
    assert_eq!(item_ids(&json!({})), None);
    assert_eq!(item_ids(&json!("not an item")), None);
    let (inference_id, episode_id) = (Uuid::now_v7(), Uuid::now_v7());
    let line = json!({"inference_id": inference_id, "request": {"episode_id": episode_id, "input": {}}}).to_string();
    assert_eq!(
        item_ids(&serde_json::from_str(&line).unwrap()),
        Some(ItemIds {
            inference_id,
            episode_id
        })
    );
}

// Each item checked ---------------------------------------------------------------------------------

#[test]
fn an_invalid_input_is_refused_naming_its_index() {
    let service = service();
    let mut r = request("chat", 3);
    r.inputs.as_mut().unwrap()[2] = json!({"messages": [{"role": "robot", "content": "x"}]});
    let message = invalid_message(service.checks().plan_batch(r));
    assert!(message.starts_with("Input at index 2 failed validation: "), "{message}");

    let mut r = request("chat", 3);
    r.allowed_tools = Some(vec![None, Some(vec!["missing_tool".to_owned()]), None]);
    let message = invalid_message(service.checks().plan_batch(r));
    assert!(message.starts_with("Input at index 1 failed validation: "), "{message}");
    assert!(message.contains("missing_tool"), "{message}");
}

#[test]
fn an_invalid_output_schema_is_refused_naming_its_index() {
    let service = service();
    let mut r = request("extract", 2);
    r.output_schemas = Some(vec![Some(json!({"type": "nonsense"})), None]);
    let message = invalid_message(service.checks().plan_batch(r));
    assert!(message.starts_with("Input at index 0 failed validation: "), "{message}");
}

// What a batch cannot do ----------------------------------------------------------------------------

#[test]
fn streaming_dryrun_cache_and_model_name_are_refused_naming_the_field() {
    let service = service();
    let refused = |set: &dyn Fn(&mut BatchInferenceRequest), field: &str| {
        let mut r = request("chat", 1);
        set(&mut r);
        let message = invalid_message(service.checks().plan_batch(r));
        assert!(message.starts_with(&format!("`{field}` is not supported")), "{message}");
    };
    refused(&|r| r.stream = Some(true), "stream");
    refused(&|r| r.dryrun = Some(true), "dryrun");
    refused(&|r| r.cache_options = Some(json!({"enabled": "on"})), "cache_options");
    refused(&|r| r.model_name = Some(json!("good")), "model_name");
    // Set to what a batch does anyway, they pass.
    let mut r = request("chat", 1);
    r.stream = Some(false);
    r.dryrun = Some(false);
    r.cache_options = Some(json!({"enabled": "off"}));
    r.model_name = Some(Value::Null);
    assert!(service.checks().plan_batch(r).is_ok());
}

#[test]
fn missing_or_empty_inputs_and_a_missing_function_are_bad_requests() {
    let service = service();
    let mut r = request("chat", 1);
    r.inputs = Some(vec![]);
    assert_eq!(
        invalid_message(service.checks().plan_batch(r)),
        "`inputs` must not be empty"
    );
    let mut r = request("chat", 1);
    r.inputs = None;
    assert_eq!(
        invalid_message(service.checks().plan_batch(r)),
        "missing field `inputs`"
    );
    let mut r = request("chat", 1);
    r.function_name = None;
    assert_eq!(
        invalid_message(service.checks().plan_batch(r)),
        "missing field `function_name`"
    );
}

#[test]
fn unknown_functions_and_variants_are_not_found() {
    let service = service();
    assert!(matches!(
        service.checks().plan_batch(request("nope", 1)),
        Err(FunctionError::UnknownFunction(name)) if name == "nope"
    ));
    let mut r = request("pair", 1);
    r.variant_name = Some("middle".to_owned());
    assert!(matches!(
        service.checks().plan_batch(r),
        Err(FunctionError::UnknownVariant { .. })
    ));
}

#[test]
fn a_pinned_variant_runs_the_whole_batch() {
    let service = service();
    for pinned in ["left", "right"] {
        let mut r = request("pair", 4);
        r.variant_name = Some(pinned.to_owned());
        let planned = service.checks().plan_batch(r).unwrap();
        assert_eq!(planned.variant.name, pinned);
        assert!(bodies(&planned).iter().all(|b| b["variant_name"] == pinned));
    }
    let mut r = request("pair", 1);
    r.variant_name = Some("right".to_owned());
    assert_eq!(service.checks().plan_batch(r).unwrap().variant.model, "dummy::other");
}
