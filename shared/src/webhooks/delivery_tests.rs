use super::*;
use crate::webhooks::UrlPolicy;
use async_trait::async_trait;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::VecDeque;
use std::sync::Mutex;

const NOW: i64 = 1_750_000_000_123;
const BODY: &str = "{\"type\":\"async.completed\",  \"data\":{\"text\":\"h\u{e9}llo\"}}";

/// One recorded call: the URL, the headers and the body.
type Call = (String, Vec<(String, String)>, Bytes);

/// Answers with the queued outcomes in turn (200 when none are left) and records every call.
#[derive(Default)]
struct FakeTransport {
    outcomes: Mutex<VecDeque<PostOutcome>>,
    calls: Mutex<Vec<Call>>,
}

impl FakeTransport {
    fn answering(outcomes: impl IntoIterator<Item = PostOutcome>) -> Self {
        Self {
            outcomes: Mutex::new(outcomes.into_iter().collect()),
            calls: Mutex::default(),
        }
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl WebhookTransport for FakeTransport {
    async fn post(&self, url: &WebhookUrl, headers: &[(String, String)], body: Bytes) -> PostOutcome {
        self.calls
            .lock()
            .unwrap()
            .push((url.to_string(), headers.to_vec(), body));
        self.outcomes.lock().unwrap().pop_front().unwrap_or(status(200))
    }
}

fn status(status: u16) -> PostOutcome {
    PostOutcome::Response {
        status,
        retry_after: None,
    }
}

fn timed_out() -> PostOutcome {
    PostOutcome::Failed {
        reason: "the request timed out".into(),
        timed_out: true,
    }
}

fn delivery(style: SignatureStyle) -> Delivery {
    let url = WebhookUrl::parse("https://hooks.example.com/in", &UrlPolicy::default()).unwrap();
    Delivery::new("msg_01".into(), url, BODY.into(), style, Some("req-9".into()), NOW)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

fn secret(text: &str) -> SigningSecret {
    SigningSecret::parse(text).unwrap()
}

#[tokio::test]
async fn a_2xx_succeeds_on_the_first_attempt() {
    let transport = FakeTransport::answering([status(204)]);
    let mut delivery = delivery(SignatureStyle::Standard);
    assert_eq!(delivery.next_attempt_at_ms, Some(NOW));
    assert_eq!(delivery.attempt(&transport, &[], NOW).await, DeliveryState::Succeeded);
    assert!(delivery.is_final());
    assert_eq!(delivery.next_attempt_at_ms, None);
    assert_eq!(delivery.attempts.len(), 1);
    assert_eq!(delivery.attempts[0].status, Some(204));
    assert_eq!(delivery.attempts[0].error, None);
    assert_eq!(delivery.attempts[0].at_ms, NOW);
    // A final delivery sends nothing more.
    assert_eq!(
        delivery.attempt(&transport, &[], NOW + 1).await,
        DeliveryState::Succeeded
    );
    assert_eq!(transport.calls().len(), 1);
}

#[tokio::test]
async fn gone_other_4xx_and_redirects_fail_at_once() {
    for code in [410, 404, 400, 301, 302, 307] {
        let transport = FakeTransport::answering([status(code)]);
        let mut delivery = delivery(SignatureStyle::Standard);
        assert_eq!(
            delivery.attempt(&transport, &[], NOW).await,
            DeliveryState::Failed,
            "{code}"
        );
        assert_eq!(delivery.next_attempt_at_ms, None, "{code}");
        assert_eq!(delivery.attempts[0].status, Some(code));
        assert!(delivery.attempts[0]
            .error
            .as_deref()
            .unwrap()
            .contains(&code.to_string()));
    }
}

#[tokio::test]
async fn retryable_outcomes_are_retried_until_a_success() {
    let refused = PostOutcome::Refused {
        reason: "the webhook host 'x' resolves to 10.0.0.1".into(),
    };
    let failed = PostOutcome::Failed {
        reason: "could not connect: connection refused".into(),
        timed_out: false,
    };
    let transport = FakeTransport::answering([status(500), timed_out(), refused, failed, status(429), status(503)]);
    let mut delivery = delivery(SignatureStyle::Standard);
    let mut now = NOW;
    for _ in 0..6 {
        assert_eq!(delivery.attempt(&transport, &[], now).await, DeliveryState::Pending);
        now = delivery.next_attempt_at_ms.unwrap();
    }
    assert_eq!(delivery.attempt(&transport, &[], now).await, DeliveryState::Succeeded);
    let errors: Vec<_> = delivery.attempts.iter().map(|a| a.error.clone()).collect();
    assert_eq!(errors[1].as_deref(), Some("the request timed out"));
    assert!(errors[2].as_deref().unwrap().starts_with("refused: "));
    assert_eq!(
        delivery.attempts.iter().map(|a| a.status).collect::<Vec<_>>(),
        [Some(500), None, None, None, Some(429), Some(503), Some(200)]
    );
}

#[tokio::test]
async fn the_schedule_waits_longer_each_time_then_fails_after_the_last_retry() {
    let transport = FakeTransport::answering(std::iter::repeat_n(status(502), MAX_ATTEMPTS));
    let mut delivery = delivery(SignatureStyle::Standard);
    let mut now = NOW;
    for delay in RETRY_DELAYS {
        assert_eq!(delivery.attempt(&transport, &[], now).await, DeliveryState::Pending);
        let next = delivery.next_attempt_at_ms.unwrap();
        let base = i64::try_from(delay.as_millis()).unwrap();
        assert!(
            next >= now + base && next <= now + base + base / 10,
            "{delay:?}: waited {}",
            next - now
        );
        now = next;
    }
    assert_eq!(delivery.attempt(&transport, &[], now).await, DeliveryState::Failed);
    assert_eq!(delivery.attempts.len(), 8);
    assert_eq!(delivery.next_attempt_at_ms, None);
    assert_eq!(delivery.attempt(&transport, &[], now + 1).await, DeliveryState::Failed);
    assert_eq!(transport.calls().len(), 8);
}

#[tokio::test]
async fn retry_after_is_honoured_when_later_than_the_schedule_and_capped() {
    let asking = |seconds| PostOutcome::Response {
        status: 429,
        retry_after: Some(Duration::from_secs(seconds)),
    };
    let transport = FakeTransport::answering([asking(3600)]);
    let mut later = delivery(SignatureStyle::Standard);
    later.attempt(&transport, &[], NOW).await;
    assert_eq!(later.next_attempt_at_ms, Some(NOW + 3_600_000));

    let transport = FakeTransport::answering([asking(1)]);
    let mut sooner = delivery(SignatureStyle::Standard);
    sooner.attempt(&transport, &[], NOW).await;
    let next = sooner.next_attempt_at_ms.unwrap();
    assert!((NOW + 10_000..=NOW + 11_000).contains(&next), "{}", next - NOW);

    let transport = FakeTransport::answering([PostOutcome::Response {
        status: 503,
        retry_after: Some(Duration::from_secs(30 * 24 * 3600)),
    }]);
    let mut greedy = delivery(SignatureStyle::Standard);
    greedy.attempt(&transport, &[], NOW).await;
    assert_eq!(greedy.next_attempt_at_ms, Some(NOW + 24 * 3_600_000));
}

#[tokio::test]
async fn every_attempt_sends_the_same_id_and_body_with_its_own_timestamp() {
    let transport = FakeTransport::answering([status(500), status(500), status(200)]);
    let mut delivery = delivery(SignatureStyle::Standard);
    let secrets = [SigningSecret::generate()];
    for now in [NOW, NOW + 11_000, NOW + 400_000] {
        delivery.attempt(&transport, &secrets, now).await;
    }
    let calls = transport.calls();
    assert_eq!(calls.len(), 3);
    let timestamps: Vec<_> = calls
        .iter()
        .map(|(_, h, _)| header(h, "webhook-timestamp").unwrap().to_owned())
        .collect();
    assert_eq!(timestamps, ["1750000000", "1750000011", "1750000400"]);
    for (url, headers, body) in &calls {
        assert_eq!(url, "https://hooks.example.com/in");
        assert_eq!(header(headers, "webhook-id"), Some("msg_01"));
        assert_eq!(header(headers, "content-type"), Some("application/json"));
        assert_eq!(header(headers, "user-agent"), Some("Nimbus-Webhooks/1"));
        assert_eq!(body.as_ref(), BODY.as_bytes());
    }
    assert_ne!(
        header(&calls[0].1, "webhook-signature"),
        header(&calls[1].1, "webhook-signature")
    );
}

/// A receiver's check of `webhook-signature`, written from the Standard Webhooks recipe.
fn standard_receiver_accepts(secret_text: &str, headers: &[(String, String)], body: &[u8]) -> bool {
    let key = STANDARD.decode(secret_text.strip_prefix("whsec_").unwrap()).unwrap();
    let id = header(headers, "webhook-id").unwrap();
    let timestamp = header(headers, "webhook-timestamp").unwrap();
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    let expected = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
    header(headers, "webhook-signature")
        .unwrap()
        .split(' ')
        .any(|signature| signature == expected)
}

/// A receiver's check of `X-BASETEN-SIGNATURE`: hex HMAC of the body keyed by the secret's bytes.
fn baseten_receiver_accepts(secret_text: &str, headers: &[(String, String)], body: &[u8]) -> bool {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret_text.as_bytes()).unwrap();
    mac.update(body);
    let expected = hex::encode(mac.finalize().into_bytes());
    header(headers, "x-baseten-signature")
        .unwrap()
        .split(',')
        .filter_map(|item| item.strip_prefix("v1="))
        .any(|signature| signature == expected)
}

#[tokio::test]
async fn signed_headers_pass_both_receiver_recipes_for_every_secret() {
    let old = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let new = SigningSecret::generate();
    let secrets = [new.clone(), secret(old)];
    let transport = FakeTransport::default();
    let mut delivery = delivery(SignatureStyle::StandardAndBaseten);
    delivery.attempt(&transport, &secrets, NOW).await;
    let (_, headers, body) = transport.calls().remove(0);
    for secret_text in [new.as_str(), old] {
        assert!(standard_receiver_accepts(secret_text, &headers, &body), "{headers:?}");
        assert!(baseten_receiver_accepts(secret_text, &headers, &body), "{headers:?}");
    }
    assert!(!standard_receiver_accepts(
        "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        &headers,
        &body
    ));
    assert!(!baseten_receiver_accepts(
        "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        &headers,
        &body
    ));
    assert_eq!(header(&headers, "webhook-signature").unwrap().split(' ').count(), 2);
    assert_eq!(header(&headers, "x-baseten-request-id"), Some("req-9"));
}

#[tokio::test]
async fn without_secrets_nothing_is_signed_and_standard_style_has_no_baseten_headers() {
    let transport = FakeTransport::default();
    let mut unsigned = delivery(SignatureStyle::StandardAndBaseten);
    unsigned.attempt(&transport, &[], NOW).await;
    let mut standard = delivery(SignatureStyle::Standard);
    standard.attempt(&transport, &[SigningSecret::generate()], NOW).await;
    let calls = transport.calls();
    let unsigned_headers = &calls[0].1;
    assert_eq!(header(unsigned_headers, "webhook-signature"), None);
    assert_eq!(header(unsigned_headers, "x-baseten-signature"), None);
    assert_eq!(header(unsigned_headers, "x-baseten-request-id"), Some("req-9"));
    assert_eq!(header(unsigned_headers, "webhook-id"), Some("msg_01"));
    let standard_headers = &calls[1].1;
    assert!(header(standard_headers, "webhook-signature").is_some());
    assert_eq!(header(standard_headers, "x-baseten-signature"), None);
    assert_eq!(header(standard_headers, "x-baseten-request-id"), None);
}

#[tokio::test]
async fn cancel_stops_a_pending_delivery_only() {
    let mut pending = delivery(SignatureStyle::Standard);
    pending.cancel();
    assert_eq!(
        (pending.state, pending.next_attempt_at_ms),
        (DeliveryState::Canceled, None)
    );
    let transport = FakeTransport::default();
    assert_eq!(pending.attempt(&transport, &[], NOW).await, DeliveryState::Canceled);
    assert!(transport.calls().is_empty());
    let mut done = delivery(SignatureStyle::Standard);
    done.attempt(&transport, &[], NOW).await;
    done.cancel();
    assert_eq!(done.state, DeliveryState::Succeeded);
}

#[test]
fn deliveries_round_trip_through_json_with_screaming_states() {
    let delivery = delivery(SignatureStyle::StandardAndBaseten);
    let json = serde_json::to_value(&delivery).unwrap();
    assert_eq!(json["state"], "PENDING");
    assert_eq!(json["style"], "StandardAndBaseten");
    assert_eq!(json["url"], "https://hooks.example.com/in");
    assert_eq!(serde_json::from_value::<Delivery>(json).unwrap(), delivery);
}
