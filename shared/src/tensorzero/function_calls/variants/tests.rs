//! The variant types: the judge's and fuser's requests, parsing the judge, random picks, summed
//! usage, chain-of-thought wrapping, and whole runs over dummy models (stored model calls in
//! order, lone survivors, failing judges and fusers, streaming).

use super::super::model_call::ModelCall;
use super::super::output::{FunctionOutput, JsonOutput, OutputBlock};
use super::super::prepare::PreparedCall;
use super::super::stream::{ChunkBody, ContentChunk};
use super::super::tests::{call, service_for, stored};
use super::*;
use crate::model::{ModelChoice, ModelResponse, ModelUsage};
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;
use uuid::Uuid;

/// The variants under test, beside the function layer's test configuration (models `good`,
/// `bad`).
const VARIANTS: &str = r#"
[functions.chat]
type = "chat"
[functions.chat.variants.a]
type = "chat_completion"
model = "good"
[functions.chat.variants.b]
type = "chat_completion"
model = "dummy::other"
[functions.chat.variants.broken]
type = "chat_completion"
model = "bad"
[functions.chat.variants.bon]
type = "experimental_best_of_n_sampling"
candidates = ["a", "b", "a"]
evaluator = { model = "good" }
[functions.chat.variants.bon_tool]
type = "experimental_best_of_n_sampling"
candidates = ["a", "b"]
evaluator = { model = "good", json_mode = "tool" }
[functions.chat.variants.lone]
type = "experimental_best_of_n_sampling"
candidates = ["a", "broken"]
evaluator = { model = "good" }
[functions.chat.variants.none_left]
type = "experimental_best_of_n_sampling"
candidates = ["broken", "broken"]
evaluator = { model = "good" }
[functions.chat.variants.bad_judge]
type = "experimental_best_of_n_sampling"
candidates = ["a", "b"]
evaluator = { model = "bad" }
[functions.chat.variants.mon]
type = "experimental_mixture_of_n"
candidates = ["a", "b"]
fuser = { model = "good" }
[functions.chat.variants.bad_fuser]
type = "experimental_mixture_of_n"
candidates = ["a", "b"]
fuser = { model = "bad" }

[functions.json]
type = "json"
[functions.json.variants.plain]
type = "chat_completion"
model = "good"
[functions.json.variants.cot]
type = "experimental_chain_of_thought"
model = "good"
json_mode = "strict"
"#;

fn config() -> String {
    format!("{}\n{VARIANTS}", super::super::tests::CONFIG)
}

fn pinned(function: &str, variant: &str) -> Value {
    json!({
        "function_name": function,
        "variant_name": variant,
        "input": {"system": "Be brief.", "messages": [{"role": "user", "content": "hello"}]},
    })
}

fn model_call(model: &str, input: u64, output: u64, cached: bool, raw: &str) -> ModelCall {
    ModelCall {
        id: Uuid::now_v7(),
        model: model.to_owned(),
        provider: "p".to_owned(),
        response: ModelResponse {
            usage: ModelUsage::new(input, output),
            raw_response: Some(raw.to_owned()),
            ..response(Vec::new())
        },
        latency: Duration::ZERO,
        ttft: None,
        cached,
    }
}

fn answer(output: FunctionOutput, calls: Vec<ModelCall>) -> VariantAnswer {
    VariantAnswer {
        output,
        auxiliary_content: Vec::new(),
        finish_reason: None,
        original_response: calls.first().and_then(|c| c.response.raw_response.clone()),
        model_calls: calls,
        prepared: PreparedCall {
            request: crate::model::ModelRequest::default(),
            rules: Default::default(),
        },
    }
}

fn text(text: &str) -> FunctionOutput {
    FunctionOutput::Chat(vec![OutputBlock::Text { text: text.to_owned() }])
}

fn response(content: Vec<crate::model::ContentBlock>) -> ModelResponse {
    ModelResponse {
        id: String::new(),
        choices: vec![ModelChoice {
            index: 0,
            content,
            finish_reason: None,
            logprobs: None,
        }],
        usage: ModelUsage::default(),
        system_fingerprint: None,
        raw_response: None,
        raw_request: None,
        provider_name: String::new(),
        provider_type: String::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// Pure pieces
// ---------------------------------------------------------------------------------------------

#[test]
fn usage_is_summed_over_every_call_and_cache_hits_count_zero() {
    let calls = [
        model_call("a", 3, 4, false, ""),
        model_call("b", 100, 100, true, ""),
        model_call("judge", 5, 6, false, ""),
    ];
    assert_eq!(total_usage(&calls), ModelUsage::new(8, 10));
    assert_eq!(total_usage(&[]), ModelUsage::default());
}

#[test]
fn the_judge_reads_answer_choice_from_the_first_text_or_tool_arguments() {
    use crate::model::ContentBlock;
    let parse = |blocks| best_of_n::answer_choice(&response(blocks));
    let text = |t: &str| ContentBlock::text_block(t.to_owned());
    assert_eq!(parse(vec![text(r#"{"thinking": "x", "answer_choice": 2}"#)]), Some(2));
    let thought = ContentBlock::Thought {
        text: "hmm".into(),
        signature: None,
    };
    assert_eq!(
        parse(vec![thought, text(r#"{"thinking": "", "answer_choice": 1}"#)]),
        Some(1),
        "thoughts are skipped"
    );
    let tool = ContentBlock::ToolCall {
        id: "1".into(),
        name: "respond".into(),
        arguments: r#"{"thinking": "", "answer_choice": 0}"#.into(),
    };
    assert_eq!(parse(vec![tool]), Some(0));
    for unusable in [
        r#"{"thinking": "", "answer_choice": 1.0}"#,
        r#"{"thinking": "", "answer_choice": -1}"#,
        r#"{"thinking": ""}"#,
        r#"{"answer_choice": "1"}"#,
        "not json",
    ] {
        assert_eq!(parse(vec![text(unusable)]), None, "{unusable}");
    }
    assert_eq!(parse(Vec::new()), None);
}

#[test]
fn the_chosen_candidate_comes_first_then_the_others_then_the_judge() {
    let candidates = vec![
        answer(text("zero"), vec![model_call("a", 1, 1, false, "raw-a")]),
        answer(text("one"), vec![model_call("b", 1, 1, false, "raw-b")]),
        answer(text("two"), vec![model_call("c", 1, 1, false, "raw-c")]),
    ];
    let judge = model_call("judge", 1, 1, false, "raw-judge");
    let chosen = best_of_n::chosen(candidates.clone(), 1, Some(judge));
    assert_eq!(chosen.output, text("one"));
    let order: Vec<&str> = chosen.model_calls.iter().map(|c| c.model.as_str()).collect();
    assert_eq!(order, ["b", "a", "c", "judge"]);
    assert_eq!(chosen.original_response.as_deref(), Some("raw-judge"));
    let unjudged = best_of_n::chosen(candidates, 0, None);
    assert_eq!(
        unjudged.original_response, None,
        "no judge answer, no original_response"
    );
}

#[test]
fn a_random_pick_is_some_candidate_without_original_response() {
    for _ in 0..20 {
        let candidates = vec![
            answer(text("zero"), vec![model_call("a", 1, 1, false, "raw-a")]),
            answer(text("one"), vec![model_call("b", 1, 1, false, "raw-b")]),
        ];
        let picked = mixture_of_n::random_pick(candidates);
        assert!(picked.output == text("zero") || picked.output == text("one"));
        assert_eq!(picked.model_calls.len(), 2);
        assert_eq!(picked.original_response, None);
    }
    let seen: std::collections::BTreeSet<usize> = (0..200).map(|_| candidates::random_index(3)).collect();
    assert_eq!(seen, [0, 1, 2].into_iter().collect(), "uniform over every index");
}

#[test]
fn candidates_are_rendered_as_content_json_or_raw_and_unparsed_json_is_left_out() {
    let chat = answer(text("hi"), Vec::new());
    assert_eq!(
        candidates::rendered(&chat).as_deref(),
        Some(r#"[{"type":"text","text":"hi"}]"#)
    );
    let parsed = answer(
        FunctionOutput::Json(JsonOutput {
            raw: Some(r#"{"a":1}"#.into()),
            parsed: Some(json!({"a": 1})),
        }),
        Vec::new(),
    );
    let unparsed = answer(
        FunctionOutput::Json(JsonOutput {
            raw: Some("nope".into()),
            parsed: None,
        }),
        Vec::new(),
    );
    assert_eq!(candidates::rendered(&parsed).as_deref(), Some(r#"{"a":1}"#));
    assert_eq!(candidates::rendered(&unparsed), None);
    let readable = candidates::readable(&[unparsed, parsed]);
    assert_eq!(
        readable,
        vec![(1, r#"{"a":1}"#.to_owned())],
        "indices map back to all candidates"
    );
}

#[test]
fn the_judges_and_fusers_prompts_have_tensorzeros_structure() {
    let system = best_of_n::judge_system(Some("Be brief.".into()), 2);
    assert!(system.contains("Be brief."), "{system}");
    assert!(
        system.contains("`thinking`") && system.contains("`answer_choice`"),
        "{system}"
    );
    assert!(system.contains("from 0 to 2"), "{system}");
    assert!(!best_of_n::judge_system(None, 1).contains("below"));
    let listed = best_of_n::judge_candidates(&["first", "second"]);
    assert!(listed.contains("0: first\n------\n1: second\n------\n"), "{listed}");
    let fuser = mixture_of_n::fuser_system(Some("Be brief.".into()));
    assert!(
        fuser.contains("Be brief.") && fuser.contains("candidate answers"),
        "{fuser}"
    );
    let listed = mixture_of_n::fuser_candidates(&["first", "second"]);
    assert!(listed.contains("0:\nfirst\n------\n1:\nsecond\n------\n"), "{listed}");
}

#[test]
fn the_judge_request_is_a_json_call_with_the_judges_schema_and_its_own_parameters() {
    let (service, _) = service_for(&config());
    let mut body = pinned("chat", "bon");
    body["params"] = json!({"chat_completion": {"temperature": 1.5, "json_mode": "off"}});
    body["extra_headers"] = json!([{"name": "x-a", "value": "1"}]);
    let call = call(&service, body);
    let judge_call = best_of_n::judge_call(&call).unwrap();
    assert_eq!(judge_call.params, Default::default());
    assert!(judge_call.extra_headers.is_empty());
    let function = service.functions().function("chat").unwrap();
    let variant = function.variant("bon").unwrap();
    let plan = VariantPlan::for_variant(function, variant);
    let prepared = best_of_n::judge_request(service.functions(), plan, &judge_call, &["x", "y"]).unwrap();
    let request = serde_json::to_value(&prepared.request).unwrap();
    let text = request.to_string();
    assert!(text.contains("answer_choice") && text.contains("thinking"), "{text}");
    assert_eq!(
        prepared.request.params.temperature, None,
        "request params do not reach the judge"
    );
    assert_eq!(
        prepared.request.messages.len(),
        2,
        "the conversation, then the candidates"
    );
    assert!(prepared.request.system.as_deref().unwrap().contains("Be brief."));
    assert!(matches!(
        prepared.request.output,
        crate::model::OutputMode::JsonSchema { .. }
    ));
}

#[test]
fn a_judge_in_tool_mode_answers_through_the_respond_tool() {
    let (service, _) = service_for(&config());
    let call = call(&service, pinned("chat", "bon_tool"));
    let judge_call = best_of_n::judge_call(&call).unwrap();
    let function = service.functions().function("chat").unwrap();
    let plan = VariantPlan::for_variant(function, function.variant("bon_tool").unwrap());
    let prepared = best_of_n::judge_request(service.functions(), plan, &judge_call, &["x", "y"]).unwrap();
    let [tool] = prepared.request.tools.as_slice() else {
        panic!("one tool: {:?}", prepared.request.tools)
    };
    assert_eq!(tool.name, "respond");
    assert_eq!(
        tool.parameters.as_ref().unwrap()["required"],
        json!(["thinking", "answer_choice"])
    );
    assert_eq!(
        prepared.request.tool_choice,
        Some(crate::model::ToolChoice::Specific("respond".into()))
    );
}

#[test]
fn chain_of_thought_wraps_the_schema_and_unwraps_the_answer() {
    let wrapped = chain_of_thought::wrapped_schema(json!({"type": "object"}));
    assert_eq!(wrapped["required"], json!(["thinking", "response"]));
    assert_eq!(wrapped["properties"]["response"], json!({"type": "object"}));
    assert_eq!(wrapped["additionalProperties"], json!(false));
    let mut answered = answer(
        FunctionOutput::Json(JsonOutput {
            raw: Some(r#"{"thinking":"because","response":{"a":1}}"#.into()),
            parsed: Some(json!({"thinking": "because", "response": {"a": 1}})),
        }),
        Vec::new(),
    );
    chain_of_thought::unwrap_thinking(&mut answered);
    assert_eq!(
        answered.output,
        FunctionOutput::Json(JsonOutput {
            raw: Some(r#"{"a":1}"#.into()),
            parsed: Some(json!({"a": 1})),
        })
    );
    assert_eq!(
        answered.auxiliary_content,
        vec![OutputBlock::Thought {
            text: "because".into(),
            signature: None
        }]
    );
    let unparsed = FunctionOutput::Json(JsonOutput {
        raw: Some("{oops".into()),
        parsed: None,
    });
    let mut passing = answer(unparsed.clone(), Vec::new());
    chain_of_thought::unwrap_thinking(&mut passing);
    assert_eq!(passing.output, unparsed, "an answer that did not parse passes through");
    assert!(passing.auxiliary_content.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Whole runs over dummy models
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn best_of_n_stores_every_candidate_and_the_judge_and_sums_their_usage() {
    let (service, records) = service_for(&config());
    let project = ProjectId::new("p");
    let mut body = pinned("chat", "bon");
    body["params"] = json!({"chat_completion": {"max_tokens": 1}});
    let result = service.infer(&project, &call(&service, body)).await.unwrap();
    assert_eq!(result.variant_name, "bon");
    assert_eq!(result.model_calls.len(), 4, "three candidates and the judge");
    assert_eq!(result.usage, total_usage(&result.model_calls));
    let last = result.model_calls.last().unwrap();
    assert_eq!(last.model, "good", "the judge is stored last");
    assert!(last
        .response
        .raw_request
        .as_deref()
        .unwrap_or_default()
        .contains("answer_choice"));
    for candidate in &result.model_calls[..3] {
        let raw = candidate.response.raw_request.as_deref().unwrap_or_default();
        assert!(
            !raw.contains("\"max_tokens\":1"),
            "request params do not reach candidates: {raw}"
        );
    }
    let record = stored(&records, result.inference_id).await;
    assert_eq!(record.model_calls.len(), 4);
    let ids: Vec<Uuid> = record.model_calls.iter().map(|c| c.id).collect();
    let expected: Vec<Uuid> = result.model_calls.iter().map(|c| c.id).collect();
    assert_eq!(ids, expected);
    assert_eq!(record.usage.input_tokens, result.usage.input_tokens);
}

#[tokio::test]
async fn repeated_candidates_get_their_own_cache_entries() {
    let (service, _) = service_for(&config());
    let project = ProjectId::new("p");
    let mut body = pinned("chat", "bon");
    body["cache_options"] = json!({"enabled": "on"});
    let first = service.infer(&project, &call(&service, body.clone())).await.unwrap();
    assert!(
        first.model_calls.iter().all(|c| !c.cached),
        "candidates a and a are not one entry"
    );
    let mut all_cached = false;
    for _ in 0..200 {
        let again = service.infer(&project, &call(&service, body.clone())).await.unwrap();
        if again.model_calls.iter().all(|c| c.cached) {
            assert_eq!(again.usage, ModelUsage::default(), "cache hits count zero");
            all_cached = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(all_cached, "the candidates and the judge were never all cached");
}

#[tokio::test]
async fn a_lone_survivor_is_returned_without_a_judge_and_none_left_fails() {
    let (service, _) = service_for(&config());
    let project = ProjectId::new("p");
    let lone = service
        .infer(&project, &call(&service, pinned("chat", "lone")))
        .await
        .unwrap();
    assert_eq!(lone.model_calls.len(), 1, "no judge call");
    assert_eq!(lone.variant_name, "lone");
    assert_eq!(
        lone.original_response, lone.model_calls[0].response.raw_response,
        "the survivor keeps its own original_response"
    );
    let error = service
        .infer(&project, &call(&service, pinned("chat", "none_left")))
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(text.contains("all candidates failed"), "{text}");
}

#[tokio::test]
async fn a_failing_judge_or_fuser_means_a_random_candidate() {
    let (service, _) = service_for(&config());
    let project = ProjectId::new("p");
    for variant in ["bad_judge", "bad_fuser"] {
        let result = service
            .infer(&project, &call(&service, pinned("chat", variant)))
            .await
            .unwrap();
        assert_eq!(result.model_calls.len(), 2, "{variant}: the two candidates only");
        assert_eq!(result.original_response, None, "{variant}");
        let FunctionOutput::Chat(blocks) = &result.output else {
            panic!("chat output")
        };
        let produced: Vec<String> = result
            .model_calls
            .iter()
            .filter_map(|c| c.response.choices.first())
            .map(|c| format!("{:?}", c.content))
            .collect();
        assert!(!blocks.is_empty() && produced.len() == 2, "{variant}");
    }
}

#[tokio::test]
async fn mixture_of_n_answers_with_the_fuser_stored_first() {
    let (service, records) = service_for(&config());
    let project = ProjectId::new("p");
    let result = service
        .infer(&project, &call(&service, pinned("chat", "mon")))
        .await
        .unwrap();
    assert_eq!(result.model_calls.len(), 3);
    let fuser = &result.model_calls[0];
    let fuser_request = fuser.response.raw_request.as_deref().unwrap_or_default();
    assert!(
        fuser_request.contains("------"),
        "the fuser reads the candidates: {fuser_request}"
    );
    assert_eq!(result.original_response, fuser.response.raw_response);
    let record = stored(&records, result.inference_id).await;
    assert_eq!(record.model_calls[0].id, fuser.id);
    assert_eq!(record.usage.output_tokens, result.usage.output_tokens);
}

#[tokio::test]
async fn best_of_n_streams_one_chunk_and_mixture_of_n_streams_the_fuser() {
    let (service, records) = service_for(&config());
    let project = ProjectId::new("p");
    for variant in ["bon", "mon"] {
        let mut body = pinned("chat", variant);
        body["stream"] = json!(true);
        let stream = service.infer_stream(&project, &call(&service, body)).await.unwrap();
        let chunks: Vec<_> = stream.chunks.collect().await;
        let chunks: Vec<_> = chunks.into_iter().map(Result::unwrap).collect();
        if variant == "bon" {
            assert_eq!(chunks.len(), 1, "best-of-n is one chunk");
        } else {
            assert!(chunks.len() > 1, "the fuser streams for real");
        }
        let last = chunks.last().unwrap();
        let usage = chunks.iter().find_map(|c| c.usage).expect("usage chunk");
        let record = stored(&records, stream.inference_id).await;
        assert_eq!(
            record.model_calls.len(),
            if variant == "bon" { 4 } else { 3 },
            "{variant}"
        );
        assert_eq!(usage.input_tokens, record.usage.input_tokens, "{variant}: summed usage");
        assert_eq!(last.variant_name, variant);
        let texts: Vec<&ContentChunk> = chunks
            .iter()
            .flat_map(|c| match &c.body {
                ChunkBody::Chat { content } => content.iter().collect::<Vec<_>>(),
                ChunkBody::Json { .. } => Vec::new(),
            })
            .collect();
        assert!(!texts.is_empty(), "{variant}");
    }
}

#[tokio::test]
async fn chain_of_thought_returns_the_response_and_stores_the_thinking() {
    let (service, records) = service_for(&config());
    let project = ProjectId::new("p");
    let result = service
        .infer(&project, &call(&service, pinned("json", "cot")))
        .await
        .unwrap();
    let FunctionOutput::Json(output) = &result.output else {
        panic!("json output")
    };
    assert!(output.parsed.is_some(), "{output:?}");
    assert!(
        !output.raw.as_deref().unwrap_or_default().contains("thinking"),
        "{output:?}"
    );
    let sent = result.model_calls[0]
        .response
        .raw_request
        .as_deref()
        .unwrap_or_default();
    assert!(
        sent.contains("thinking") && sent.contains("response"),
        "the wrapped schema: {sent}"
    );
    let record = stored(&records, result.inference_id).await;
    assert_eq!(record.output["auxiliary_content"][0]["type"], "thought");
    assert_eq!(record.output_schema, Some(json!({})), "the original schema is stored");
    let reply = serde_json::to_value(super::super::InferenceReply::new(&result, Default::default())).unwrap();
    assert!(reply["output"].get("auxiliary_content").is_none(), "{reply}");
}

#[tokio::test]
async fn chain_of_thought_does_not_stream_and_ensembles_refuse_batches() {
    let (service, _) = service_for(&config());
    let project = ProjectId::new("p");
    let mut body = pinned("json", "cot");
    body["stream"] = json!(true);
    let Err(error) = service.infer_stream(&project, &call(&service, body)).await else {
        panic!("streaming a chain of thought must fail")
    };
    assert!(error.to_string().contains("do not support streaming"), "{error}");
    for variant in ["bon", "mon"] {
        let error = service
            .checks()
            .batch_variant("chat", Some(variant), Uuid::now_v7())
            .unwrap_err();
        assert!(matches!(error, FunctionError::InvalidRequest(_)), "{error:?}");
        assert!(error.to_string().contains("batch inference"), "{error}");
    }
}
