use super::render::{rolling_answer, to_json};
use super::stream::{outputs_lines, token_lines, LastLine};
use super::*;
use crate::config::Config;
use crate::model::{
    ChunkBlock, ChunkChoice, ContentBlock, FinishReason, ModelChoice, ModelChunk, ModelResponse, ModelUsage,
};
use crate::providers::ProviderError;
use serde_json::json;

fn body(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => unreachable!("test bodies are objects"),
    }
}

fn parse(value: Value) -> Result<LmiRequest, LmiApiError> {
    LmiRequest::parse(body(value))
}

fn rolling(value: Value) -> RollingRequest {
    match parse(value).unwrap() {
        LmiRequest::Rolling(request) => *request,
        other => panic!("not rolling: {other:?}"),
    }
}

fn error_text(result: Result<LmiRequest, LmiApiError>) -> String {
    match result {
        Err(LmiApiError::Invalid(message)) => message,
        other => panic!("expected a validation error, got {other:?}"),
    }
}

#[test]
fn schemas_are_told_apart() {
    assert!(matches!(
        parse(json!({"messages": [{"role": "user", "content": "hi"}]})).unwrap(),
        LmiRequest::Chat(_)
    ));
    let one = rolling(json!({"inputs": "hi", "stream": true}));
    assert_eq!(one.inputs, Inputs::One("hi".into()));
    assert!(one.stream);
    let many = rolling(json!({"inputs": ["a", "b"]}));
    assert_eq!(many.inputs, Inputs::Many(vec!["a".into(), "b".into()]));
    assert!(!many.stream);
}

#[test]
fn bad_bodies_name_the_field() {
    assert!(error_text(parse(json!({"parameters": {}}))).contains("`inputs`"));
    assert!(error_text(parse(json!({"inputs": 3}))).contains("`inputs`"));
    assert!(error_text(parse(json!({"inputs": ["a", 2]}))).contains("`inputs[1]`"));
    assert!(error_text(parse(json!({"inputs": []}))).contains("empty"));
    assert!(error_text(parse(json!({"inputs": "a", "stream": "yes"}))).contains("`stream`"));
    assert!(error_text(parse(json!({"inputs": "a", "prompt": "x"}))).contains("`prompt`"));
    assert!(error_text(parse(json!({"inputs": "a", "parameters": []}))).contains("`parameters`"));
}

#[test]
fn parameters_map_to_the_neutral_request() {
    let request = rolling(json!({"inputs": "hi", "parameters": {
        "max_new_tokens": 5, "temperature": 0.5, "top_p": 0.9, "seed": 7,
        "stop_sequences": ["\n"], "details": true, "return_full_text": true,
        "top_k": 4, "repetition_penalty": 1.1, "presence_penalty": 0.2, "typical_p": null
    }}));
    let p = &request.parameters;
    assert!(p.details && p.return_full_text && !p.decoder_input_details);
    let model_request = p.model_request("m", "hi", false);
    assert_eq!(model_request.model, "m");
    assert_eq!(model_request.messages.len(), 1);
    assert_eq!(model_request.params.max_tokens, Some(5));
    assert_eq!(model_request.params.temperature, Some(0.5));
    assert_eq!(model_request.params.top_p, Some(0.9));
    assert_eq!(model_request.params.seed, Some(7));
    assert_eq!(model_request.params.presence_penalty, Some(0.2));
    assert_eq!(model_request.params.stop_sequences, vec!["\n".to_owned()]);
    let fields = &model_request.openai_pass_through.fields;
    assert_eq!(fields.get("top_k"), Some(&json!(4)));
    assert_eq!(fields.get("repetition_penalty"), Some(&json!(1.1)));
    assert!(!fields.contains_key("typical_p"), "a null is not sent");
    assert!(model_request.stream.is_none());
    assert!(
        model_request.raw_prompt,
        "an `inputs` prompt is already formatted: no chat template upstream"
    );
    assert!(p.model_request("m", "hi", true).raw_prompt);
    assert!(p.model_request("m", "hi", true).wants_stream_usage());
}

#[test]
fn do_sample_false_is_greedy_and_true_samples() {
    let greedy = rolling(json!({"inputs": "x", "parameters": {"do_sample": false, "temperature": 0.8}}));
    assert_eq!(greedy.parameters.sampling.temperature, Some(0.0));
    let sampled = rolling(json!({"inputs": "x", "parameters": {"do_sample": true, "temperature": 0.8}}));
    assert_eq!(sampled.parameters.sampling.temperature, Some(0.8));
    let sampled_by_default = rolling(json!({"inputs": "x", "parameters": {"do_sample": true}}));
    assert_eq!(
        sampled_by_default.parameters.sampling.temperature,
        Some(1.0),
        "LMI's default temperature, so that the upstream samples"
    );
    let unsaid = rolling(json!({"inputs": "x"}));
    assert_eq!(unsaid.parameters.sampling.temperature, None);
}

#[test]
fn bad_parameters_are_named() {
    for (parameters, named) in [
        (json!({"bogus": 1, "top_k": 2}), "`bogus`"),
        (json!({"max_new_tokens": 0}), "max_new_tokens"),
        (json!({"max_new_tokens": "ten"}), "max_new_tokens"),
        (json!({"temperature": -1}), "temperature"),
        (json!({"top_p": 1.5}), "top_p"),
        (json!({"details": "yes"}), "details"),
        (json!({"stop_sequences": [1]}), "stop_sequences"),
        (json!({"n": 0}), "parameters.n"),
        (json!({"stop": true}), "stop_sequences"),
    ] {
        let message = error_text(parse(json!({"inputs": "x", "parameters": parameters})));
        assert!(message.contains(named), "{parameters}: {message}");
    }
}

fn response(text: &str, finish: FinishReason, extra_choices: usize) -> ModelResponse {
    let choice = |index: u32, text: &str| ModelChoice {
        index,
        content: vec![ContentBlock::text_block(text)],
        finish_reason: Some(finish),
        logprobs: None,
    };
    let mut choices = vec![choice(0, text)];
    for index in 0..extra_choices {
        choices.push(choice(u32::try_from(index).unwrap() + 1, "other"));
    }
    ModelResponse {
        id: "x".into(),
        choices,
        usage: ModelUsage::new(2, 3),
        system_fingerprint: None,
        raw_response: None,
        raw_request: None,
        provider_name: String::new(),
        provider_type: String::new(),
    }
}

#[test]
fn rolling_answers_carry_details_only_when_asked() {
    let plain = GenerationParameters::default();
    assert_eq!(
        rolling_answer(&response("Hello", FinishReason::Stop, 0), "hi", &plain),
        json!({"generated_text": "Hello"})
    );
    let detailed = GenerationParameters {
        details: true,
        return_full_text: true,
        ..GenerationParameters::default()
    };
    assert_eq!(
        rolling_answer(&response(" there", FinishReason::Length, 0), "hi", &detailed),
        json!({"generated_text": "hi there", "details": {
            "finish_reason": "length", "generated_tokens": 3, "inputs": "hi"
        }})
    );
    let prefill = GenerationParameters {
        details: true,
        decoder_input_details: true,
        ..GenerationParameters::default()
    };
    let answer = rolling_answer(&response("a", FinishReason::StopSequence, 1), "hi", &prefill);
    assert!(
        answer["details"].get("prefill").is_none(),
        "no prefill rather than an empty one: {answer}"
    );
    assert_eq!(answer["details"]["finish_reason"], "stop_sequence");
    assert_eq!(answer["details"]["best_of_sequences"][0]["generated_text"], "other");
}

#[test]
fn every_sequence_has_its_generated_tokens() {
    let detailed = GenerationParameters {
        details: true,
        ..GenerationParameters::default()
    };
    // 3 output tokens in all, shared by "a" (1 char) and "other" (5 chars).
    let answer = rolling_answer(&response("a", FinishReason::Stop, 1), "hi", &detailed);
    let details = &answer["details"];
    assert_eq!(details["generated_tokens"], 1);
    assert_eq!(details["best_of_sequences"][0]["generated_tokens"], 2, "{answer}");
    let mut counted = response("a", FinishReason::Stop, 1);
    counted.choices[1].logprobs = Some(json!({"content": [{}, {}, {}, {}]}));
    let answer = rolling_answer(&counted, "hi", &detailed);
    assert_eq!(answer["details"]["best_of_sequences"][0]["generated_tokens"], 4);
}

fn text_chunk(text: &str) -> Result<ModelChunk, ProviderError> {
    Ok(ModelChunk {
        choices: vec![ChunkChoice {
            index: 0,
            content: vec![ChunkBlock::Text { text: text.into() }],
            ..ChunkChoice::default()
        }],
        ..ModelChunk::default()
    })
}

fn finish_chunk(finish: FinishReason) -> Result<ModelChunk, ProviderError> {
    Ok(ModelChunk {
        choices: vec![ChunkChoice {
            index: 0,
            finish_reason: Some(finish),
            ..ChunkChoice::default()
        }],
        usage: Some(ModelUsage::new(1, 2)),
        ..ModelChunk::default()
    })
}

async fn lines_of(stream: futures::stream::BoxStream<'static, Value>) -> Vec<Value> {
    stream.collect().await
}

#[tokio::test]
async fn token_lines_end_with_the_summary() {
    let upstream = futures::stream::iter(vec![
        text_chunk("Hello"),
        text_chunk(" world"),
        finish_chunk(FinishReason::Length),
    ])
    .boxed();
    let last_line = LastLine {
        return_full_text: true,
        details: true,
    };
    let lines = lines_of(token_lines(upstream, "Say".into(), last_line)).await;
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0], json!({"token": {"id": 0, "text": "Hello", "log_prob": 0.0}}));
    assert_eq!(lines[1]["token"]["text"], " world");
    assert_eq!(lines[1]["generated_text"], "SayHello world");
    assert_eq!(
        lines[1]["details"],
        json!({"finish_reason": "length", "generated_tokens": 2, "inputs": "Say"})
    );
}

#[tokio::test]
async fn a_failure_mid_stream_is_the_error_line() {
    let upstream = futures::stream::iter(vec![
        text_chunk("Hello"),
        Err(ProviderError::Connection("reset".into())),
        text_chunk("never"),
    ])
    .boxed();
    let lines = lines_of(token_lines(upstream, "p".into(), LastLine::default())).await;
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["token"]["text"], "Hello");
    assert_eq!(
        lines[1]["token"],
        json!({"id": -1, "text": "", "log_prob": -1, "special_token": true})
    );
    assert_eq!(lines[1]["details"]["finish_reason"], "error");
    assert_eq!(lines[1]["generated_text"], "");
}

#[tokio::test]
async fn an_empty_stream_still_ends_with_the_summary() {
    let upstream = futures::stream::iter(vec![finish_chunk(FinishReason::Stop)]).boxed();
    let with_details = LastLine {
        details: true,
        ..LastLine::default()
    };
    let lines = lines_of(token_lines(upstream, "p".into(), with_details)).await;
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["generated_text"], "");
    assert_eq!(lines[0]["details"]["finish_reason"], "eos_token");
}

#[tokio::test]
async fn stream_details_only_when_asked() {
    let upstream = futures::stream::iter(vec![text_chunk("Hi"), finish_chunk(FinishReason::Stop)]).boxed();
    let lines = lines_of(token_lines(upstream, "p".into(), LastLine::default())).await;
    assert_eq!(lines.len(), 1);
    assert_eq!(
        lines[0]["generated_text"], "Hi",
        "the last line always has generated_text"
    );
    assert!(lines[0].get("details").is_none(), "{}", lines[0]);
}

#[tokio::test]
async fn outputs_lines_keep_input_order() {
    let first = futures::stream::iter(vec![text_chunk("a1"), text_chunk("a2")]).boxed();
    let second = futures::stream::iter(vec![text_chunk("b1"), finish_chunk(FinishReason::Stop)]).boxed();
    let lines = lines_of(outputs_lines(vec![first, second])).await;
    assert_eq!(
        lines,
        vec![json!({"outputs": ["a1", "b1"]}), json!({"outputs": ["a2", ""]})]
    );
}

#[test]
fn default_model_must_route() {
    let ok = Config::from_toml(
        "[lmi_api]\ndefault_model = \"dummy::echo\"\ntgi_compat = true\noutput_formatter = \"sse\"\n",
    );
    let config = ok.unwrap();
    assert!(config.lmi_api.tgi_compat);
    assert_eq!(
        config.lmi_api.output_formatter,
        Some(crate::config::LmiOutputFormatter::Sse)
    );
    let err = Config::from_toml("[lmi_api]\ndefault_model = \"nope\"\n").unwrap_err();
    assert!(err.to_string().contains("lmi_api.default_model"), "{err}");
    assert!(Config::from_toml("[lmi_api]\noutput_formatter = \"xml\"\n").is_err());
}

/// A value whose serialization fails.
struct Unrenderable;

impl serde::Serialize for Unrenderable {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("cannot"))
    }
}

#[test]
fn an_unrenderable_answer_is_an_error_not_null() {
    match to_json(&Unrenderable) {
        Err(LmiApiError::Render(message)) => assert!(message.contains("cannot"), "{message}"),
        other => panic!("expected a render error, got {other:?}"),
    }
}
