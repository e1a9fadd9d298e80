use super::*;
use bytes::Bytes;
use serde_json::json;

fn line(custom_id: &str, body: Value) -> String {
    json!({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}).to_string()
}

fn chat(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

/// The file split into chunks of `piece` bytes, so lines straddle chunk boundaries.
fn stream(text: &str, piece: usize) -> ByteStream {
    let pieces: Vec<Result<Bytes, StorageError>> = text
        .as_bytes()
        .chunks(piece.max(1))
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    futures::stream::iter(pieces).boxed()
}

async fn validate(text: &str, piece: usize, per_chunk: u64) -> ValidationReport {
    let known = |model: &str| model.starts_with("dummy");
    let limits = ChunkLimits {
        lines: per_chunk,
        bytes: u64::MAX,
    };
    validate_input(stream(text, piece), BatchEndpoint::ChatCompletions, &known, limits)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_valid_file_is_planned_into_byte_range_chunks() {
    let lines: Vec<String> = (0..7).map(|i| line(&format!("r{i}"), chat("dummy"))).collect();
    let text = format!("{}\n", lines.join("\n"));
    for piece in [1, 7, 64, 100_000] {
        let report = validate(&text, piece, 3).await;
        assert!(report.is_valid(), "{:?}", report.errors);
        assert_eq!(report.total_requests, 7);
        assert_eq!(report.chunks.iter().map(|c| c.lines).collect::<Vec<_>>(), vec![3, 3, 1]);
        // The byte ranges cover exactly the chunk's lines.
        let second = &report.chunks[1];
        let slice = &text.as_bytes()[second.start as usize..second.end as usize];
        let expected = format!("{}\n", lines[3..6].join("\n"));
        assert_eq!(std::str::from_utf8(slice).unwrap(), expected);
        assert_eq!(second.first_line, 4);
    }
}

#[tokio::test]
async fn every_bad_line_is_reported_with_its_code_and_1_based_line() {
    let text = [
        line("ok", chat("dummy")),
        "{not json".to_owned(),
        json!({"method": "POST", "url": "/v1/chat/completions", "body": chat("dummy")}).to_string(),
        json!({"custom_id": "u", "method": "POST", "url": "/v1/embeddings", "body": chat("dummy")}).to_string(),
        line("s", json!({"model": "dummy", "stream": true, "messages": []})),
        line("m", chat("gpt-unknown")),
        line("n", json!({"messages": []})),
        line("ok", chat("dummy")),
        line("x", json!({"model": "dummy"})),
    ]
    .join("\n");
    let report = validate(&text, 5, 100).await;
    let found: Vec<(&str, Option<u64>, Option<&str>)> = report
        .errors
        .iter()
        .map(|e| (e.code, e.line, e.param.as_deref()))
        .collect();
    assert_eq!(
        found,
        vec![
            ("invalid_json_line", Some(2), None),
            ("missing_required_parameter", Some(3), Some("custom_id")),
            ("invalid_url", Some(4), Some("url")),
            ("streaming_unsupported", Some(5), Some("body.stream")),
            ("model_not_found", Some(6), Some("body.model")),
            ("invalid_request", Some(7), Some("body.model")),
            ("duplicate_custom_id", Some(8), Some("custom_id")),
            ("invalid_request", Some(9), Some("body.messages")),
        ]
    );
}

#[tokio::test]
async fn blank_lines_crlf_and_a_missing_final_newline_are_fine() {
    let text = format!("{}\r\n\n{}", line("a", chat("dummy")), line("b", chat("dummy")));
    let report = validate(&text, 3, 10).await;
    assert!(report.is_valid(), "{:?}", report.errors);
    assert_eq!(report.total_requests, 2);
    assert_eq!(report.chunks[0].end, text.len() as u64);
}

#[tokio::test]
async fn empty_and_oversized_files_have_clear_codes() {
    assert_eq!(validate("\n \n", 4, 10).await.errors[0].code, "empty_file");
    let one = line("a", chat("dummy"));
    let many: String = (0..=MAX_REQUESTS)
        .map(|i| format!("{}\n", one.replace("\"a\"", &format!("\"{i}\""))))
        .collect();
    let report = validate(&many, 1 << 20, 1000).await;
    assert_eq!(report.errors.last().unwrap().code, "too_many_requests");
    assert_eq!(report.total_requests, MAX_REQUESTS as u64 + 1);
}

#[tokio::test]
async fn chunks_also_end_at_the_byte_limit() {
    let lines: Vec<String> = (0..6).map(|i| line(&format!("r{i}"), chat("dummy"))).collect();
    let text = format!("{}\n", lines.join("\n"));
    let one_line = lines[0].len() as u64 + 1;
    let known = |model: &str| model.starts_with("dummy");
    let limits = ChunkLimits {
        lines: 100,
        bytes: one_line * 2 + 1,
    };
    let report = validate_input(stream(&text, 64), BatchEndpoint::ChatCompletions, &known, limits)
        .await
        .unwrap();
    assert!(report.is_valid());
    assert_eq!(report.chunks.iter().map(|c| c.lines).collect::<Vec<_>>(), vec![2, 2, 2]);
    assert_eq!(report.chunks.last().unwrap().end, text.len() as u64);
}
