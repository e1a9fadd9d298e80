use super::*;
use crate::ports::ProjectId;
use crate::ports::UuidV7Ids;
use crate::webhooks::test_support::{memory_state, test_sealer, ManualClock};

fn service(allow_loopback_http: bool) -> (WebhookEndpoints, Arc<ManualClock>) {
    let clock = ManualClock::new();
    let endpoints = WebhookEndpoints::new(
        memory_state(),
        clock.clone(),
        Arc::new(UuidV7Ids),
        UrlPolicy { allow_loopback_http },
        test_sealer(),
    );
    (endpoints, clock)
}

/// The secrets of `loaded` signing at `now`, opened.
async fn signing(endpoints: &WebhookEndpoints, loaded: &Loaded<StoredEndpoint>, now: i64) -> Vec<String> {
    loaded
        .body
        .signing_secrets(endpoints.sealer(), &loaded.record.id, now)
        .await
        .unwrap()
        .iter()
        .map(|s| s.as_str().to_owned())
        .collect()
}

fn request(url: &str, events: &[&str]) -> CreateEndpointRequest {
    CreateEndpointRequest {
        url: url.to_owned(),
        event_types: events.iter().map(|e| (*e).to_owned()).collect(),
        name: Some("mine".into()),
        secret: None,
    }
}

fn param_of(err: WebhooksError) -> &'static str {
    match err {
        WebhooksError::Invalid { param, .. } => param,
        other => panic!("expected a 400, got {other:?}"),
    }
}

#[tokio::test]
async fn a_new_endpoint_shows_its_secret_once() {
    let (endpoints, _) = service(false);
    let created = endpoints
        .create(
            &ProjectId::new("p1"),
            request(
                "https://example.com/hook",
                &["batch.completed", "batch.failed", "batch.completed"],
            ),
        )
        .await
        .unwrap();
    let endpoint = &created.endpoint;
    assert!(endpoint.id.starts_with("whep_"));
    assert_eq!(endpoint.object, "webhook_endpoint");
    assert_eq!(endpoint.url, "https://example.com/hook");
    assert_eq!(endpoint.name, "mine");
    assert_eq!(
        endpoint.event_types,
        [BatchEventType::Completed, BatchEventType::Failed]
    );
    assert!(created.signing_secret.starts_with("whsec_"));
    let secret = SigningSecret::parse(&created.signing_secret).unwrap();
    assert_eq!(endpoint.signing_secret_hint, Some(secret.masked()));

    let shown = endpoints.get(&ProjectId::new("p1"), &endpoint.id).await.unwrap();
    assert_eq!(&shown, endpoint);
    let json = serde_json::to_value(&shown).unwrap();
    assert!(json.get("signing_secret").is_none());
    assert_eq!(
        json["event_types"],
        serde_json::json!(["batch.completed", "batch.failed"])
    );
}

#[tokio::test]
async fn a_given_secret_is_used_and_checked() {
    let (endpoints, _) = service(false);
    let secret = SigningSecret::generate();
    let mut given = request("https://example.com/hook", &["batch.completed"]);
    given.secret = Some(secret.as_str().to_owned());
    let created = endpoints.create(&ProjectId::new("p1"), given).await.unwrap();
    assert_eq!(created.signing_secret, secret.as_str());

    let mut bad = request("https://example.com/hook", &["batch.completed"]);
    bad.secret = Some("not-a-secret".into());
    assert_eq!(
        param_of(endpoints.create(&ProjectId::new("p1"), bad).await.unwrap_err()),
        "secret"
    );
}

#[tokio::test]
async fn bad_input_names_the_field() {
    let (strict, _) = service(false);
    for url in [
        "http://example.com/hook",
        "ftp://example.com",
        "not a url",
        "http://127.0.0.1:8080/hook",
    ] {
        let err = strict
            .create(&ProjectId::new("p1"), request(url, &["batch.completed"]))
            .await
            .unwrap_err();
        assert_eq!(param_of(err), "url", "{url}");
    }
    let err = strict
        .create(&ProjectId::new("p1"), request("https://example.com", &[]))
        .await
        .unwrap_err();
    assert_eq!(param_of(err), "event_types");
    let err = strict
        .create(
            &ProjectId::new("p1"),
            request("https://example.com", &["batch.completed", "response.completed"]),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("response.completed"), "{err}");
    assert_eq!(param_of(err), "event_types");
    let mut long_name = request("https://example.com", &["batch.completed"]);
    long_name.name = Some("n".repeat(MAX_NAME_CHARS + 1));
    assert_eq!(
        param_of(strict.create(&ProjectId::new("p1"), long_name).await.unwrap_err()),
        "name"
    );

    // Plain-HTTP loopback only where the policy allows it (the local server).
    let (local, _) = service(true);
    local
        .create(
            &ProjectId::new("p1"),
            request("http://127.0.0.1:8080/hook", &["batch.completed"]),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn endpoints_are_capped_per_project() {
    let (endpoints, _) = service(false);
    for _ in 0..MAX_ENDPOINTS {
        endpoints
            .create(
                &ProjectId::new("p1"),
                request("https://example.com", &["batch.completed"]),
            )
            .await
            .unwrap();
    }
    let err = endpoints
        .create(
            &ProjectId::new("p1"),
            request("https://example.com", &["batch.completed"]),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, WebhooksError::LimitReached { .. }), "{err:?}");
    endpoints
        .create(
            &ProjectId::new("p2"),
            request("https://example.com", &["batch.completed"]),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn lists_page_newest_first() {
    let (endpoints, clock) = service(false);
    let mut ids = Vec::new();
    for _ in 0..3 {
        let created = endpoints
            .create(
                &ProjectId::new("p1"),
                request("https://example.com", &["batch.completed"]),
            )
            .await
            .unwrap();
        ids.push(created.endpoint.id);
        clock.advance_ms(10);
    }
    ids.reverse();
    let first = endpoints
        .list(&ProjectId::new("p1"), None, WEBHOOK_PAGE.check(2).unwrap())
        .await
        .unwrap();
    assert_eq!(first.data.iter().map(|e| e.id.clone()).collect::<Vec<_>>(), ids[..2]);
    assert!(first.has_more);
    let rest = endpoints
        .list(
            &ProjectId::new("p1"),
            first.last_id.as_deref(),
            WEBHOOK_PAGE.check(2).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(rest.data.iter().map(|e| e.id.clone()).collect::<Vec<_>>(), ids[2..]);
    assert!(!rest.has_more);
    // A page of none cannot be asked for: `limit` is refused where it is read.
    assert!(WEBHOOK_PAGE.check(0).is_err());
    assert_eq!(
        param_of(
            endpoints
                .list(&ProjectId::new("p1"), Some("whep_x"), WEBHOOK_PAGE.check(2).unwrap())
                .await
                .unwrap_err()
        ),
        "after"
    );
}

#[tokio::test]
async fn another_projects_endpoint_is_not_found() {
    let (endpoints, _) = service(false);
    let created = endpoints
        .create(
            &ProjectId::new("p1"),
            request("https://example.com", &["batch.completed"]),
        )
        .await
        .unwrap();
    let id = &created.endpoint.id;
    assert!(endpoints
        .list(&ProjectId::new("p2"), None, WEBHOOK_PAGE.check(20).unwrap())
        .await
        .unwrap()
        .data
        .is_empty());
    for err in [
        endpoints.get(&ProjectId::new("p2"), id).await.unwrap_err(),
        endpoints.delete(&ProjectId::new("p2"), id).await.unwrap_err(),
        endpoints
            .rotate_secret(&ProjectId::new("p2"), id, false)
            .await
            .unwrap_err(),
    ] {
        assert!(matches!(err, WebhooksError::NotFound { .. }), "{err:?}");
    }
    assert!(endpoints.get(&ProjectId::new("p1"), id).await.is_ok());
    let deleted = endpoints.delete(&ProjectId::new("p1"), id).await.unwrap();
    assert_eq!(deleted.object, "webhook_endpoint.deleted");
    assert!(matches!(
        endpoints.get(&ProjectId::new("p1"), id).await.unwrap_err(),
        WebhooksError::NotFound { .. }
    ));
    assert!(matches!(
        endpoints.delete(&ProjectId::new("p1"), id).await.unwrap_err(),
        WebhooksError::NotFound { .. }
    ));
}

#[tokio::test]
async fn rotating_an_endpoint_secret_keeps_the_old_one_only_when_asked() {
    let (endpoints, clock) = service(false);
    let created = endpoints
        .create(
            &ProjectId::new("p1"),
            request("https://example.com", &["batch.completed"]),
        )
        .await
        .unwrap();
    let id = &created.endpoint.id;

    let kept = endpoints.rotate_secret(&ProjectId::new("p1"), id, true).await.unwrap();
    let now = clock.now_unix_ms();
    let loaded = endpoints.load(&ProjectId::new("p1"), id).await.unwrap().unwrap();
    assert_eq!(
        signing(&endpoints, &loaded, now).await,
        [kept.signing_secret.clone(), created.signing_secret.clone()]
    );
    assert_eq!(
        signing(&endpoints, &loaded, now + SECRET_OVERLAP_MS).await,
        [kept.signing_secret]
    );

    let replaced = endpoints.rotate_secret(&ProjectId::new("p1"), id, false).await.unwrap();
    let loaded = endpoints.load(&ProjectId::new("p1"), id).await.unwrap().unwrap();
    assert_eq!(signing(&endpoints, &loaded, now).await, [replaced.signing_secret]);
}

#[tokio::test]
async fn endpoint_secrets_are_stored_sealed_and_sign_as_created() {
    let (endpoints, clock) = service(false);
    let created = endpoints
        .create(
            &ProjectId::new("p1"),
            request("https://example.com", &["batch.completed"]),
        )
        .await
        .unwrap();
    let id = &created.endpoint.id;
    let rotated = endpoints.rotate_secret(&ProjectId::new("p1"), id, true).await.unwrap();
    let record = endpoints.state.get(ENDPOINT_KIND, id).await.unwrap().unwrap();
    let stored = record.body.to_string();
    for secret in [&created.signing_secret, &rotated.signing_secret] {
        assert!(!stored.contains(&secret["whsec_".len()..]), "{stored}");
    }
    assert!(stored.contains("\"sealed\""), "{stored}");
    let loaded = endpoints.load(&ProjectId::new("p1"), id).await.unwrap().unwrap();
    assert_eq!(
        signing(&endpoints, &loaded, clock.now_unix_ms()).await,
        [rotated.signing_secret.clone(), created.signing_secret.clone()]
    );
    // A sealed secret copied into another endpoint's record does not open there: skipped.
    let other = endpoints
        .create(
            &ProjectId::new("p1"),
            request("https://example.com", &["batch.completed"]),
        )
        .await
        .unwrap();
    let mut copied = endpoints
        .load(&ProjectId::new("p1"), &other.endpoint.id)
        .await
        .unwrap()
        .unwrap();
    copied.body.secrets = loaded.body.secrets.clone();
    assert!(signing(&endpoints, &copied, clock.now_unix_ms()).await.is_empty());
    assert_eq!(
        endpoints
            .get(&ProjectId::new("p1"), id)
            .await
            .unwrap()
            .signing_secret_hint,
        Some(SigningSecret::parse(&rotated.signing_secret).unwrap().masked())
    );
}

#[tokio::test]
async fn an_endpoint_stored_before_sealing_signs_and_is_sealed_when_listed() {
    let (endpoints, clock) = service(false);
    let created = endpoints
        .create(
            &ProjectId::new("p1"),
            request("https://example.com", &["batch.completed"]),
        )
        .await
        .unwrap();
    let id = &created.endpoint.id;
    // Rewrite the record as an older version stored it: the secret in plain text.
    let mut record = endpoints.state.get(ENDPOINT_KIND, id).await.unwrap().unwrap();
    record.body["secrets"] = serde_json::json!([{"secret": created.signing_secret, "expires_at_ms": null}]);
    record.version += 1;
    endpoints.state.update(&record, record.version - 1).await.unwrap();
    let loaded = endpoints.load(&ProjectId::new("p1"), id).await.unwrap().unwrap();
    assert_eq!(
        signing(&endpoints, &loaded, clock.now_unix_ms()).await,
        std::slice::from_ref(&created.signing_secret)
    );
    assert_eq!(
        endpoints
            .get(&ProjectId::new("p1"), id)
            .await
            .unwrap()
            .signing_secret_hint,
        created.endpoint.signing_secret_hint
    );
    endpoints
        .list(&ProjectId::new("p1"), None, WEBHOOK_PAGE.check(10).unwrap())
        .await
        .unwrap();
    let stored = endpoints
        .state
        .get(ENDPOINT_KIND, id)
        .await
        .unwrap()
        .unwrap()
        .body
        .to_string();
    assert!(!stored.contains(&created.signing_secret["whsec_".len()..]), "{stored}");
    let loaded = endpoints.load(&ProjectId::new("p1"), id).await.unwrap().unwrap();
    assert_eq!(
        signing(&endpoints, &loaded, clock.now_unix_ms()).await,
        [created.signing_secret]
    );
}
