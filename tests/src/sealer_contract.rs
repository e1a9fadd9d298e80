//! The credential sealer's contract, run on the local key file (tests/embedded_adapters.rs) and on
//! KMS (tests/aws_adapters_moto.rs). Each function panics (test failure) on a violation.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use nimbus_shared::ports::ProjectId;
use nimbus_shared::ports::{open_json, seal_json, CredentialSealer, SealError, MAX_SEALED_PLAINTEXT};
use std::collections::HashMap;

/// Every behaviour below, in turn.
pub async fn sealer_honours_the_contract(sealer: &dyn CredentialSealer) {
    round_trip(sealer).await;
    another_context_does_not_open(sealer).await;
    tampered_values_do_not_open(sealer).await;
    two_seals_of_the_same_plaintext_differ(sealer).await;
}

/// Bytes and credential maps come back as sealed; the sealed text is printable and hides them.
pub async fn round_trip(sealer: &dyn CredentialSealer) {
    let plaintext = b"sk-live-0123456789 \x00\xff any bytes";
    let sealed = sealer.seal("batch-1", plaintext).await.unwrap();
    assert!(sealed.chars().all(|c| c.is_ascii_graphic()), "{sealed}");
    assert!(!sealed.contains("sk-live"), "{sealed}");
    assert_eq!(sealer.open("batch-1", &sealed).await.unwrap(), plaintext);

    let largest = vec![7u8; MAX_SEALED_PLAINTEXT];
    let sealed = sealer.seal("batch-1", &largest).await.unwrap();
    assert_eq!(sealer.open("batch-1", &sealed).await.unwrap(), largest);
    for size in [0, MAX_SEALED_PLAINTEXT + 1] {
        let err = sealer.seal("batch-1", &vec![7u8; size]).await.unwrap_err();
        assert!(matches!(err, SealError::Unavailable(_)), "{size} bytes: {err:?}");
    }

    let credentials = HashMap::from([
        ("openai_api_key".to_owned(), "sk-test-1".to_owned()),
        ("anthropic_api_key".to_owned(), "sk-ant-2".to_owned()),
    ]);
    let sealed = seal_json(sealer, "batch-2", &credentials).await.unwrap();
    assert_eq!(open_json(sealer, "batch-2", &sealed).await.unwrap(), credentials);
}

/// A value bound to one context does not open under another.
pub async fn another_context_does_not_open(sealer: &dyn CredentialSealer) {
    let sealed = sealer.seal("batch-a", b"secret").await.unwrap();
    for other in ["batch-b", "batch-a ", "", "BATCH-A"] {
        let err = sealer.open(other, &sealed).await.unwrap_err();
        assert!(matches!(err, SealError::Corrupt(_)), "{other:?}: {err:?}");
    }
    assert_eq!(sealer.open("batch-a", &sealed).await.unwrap(), b"secret");
}

/// Changing the value (a flipped bit in the ciphertext or at the end, a cut, a foreign prefix,
/// garbage) is detected.
pub async fn tampered_values_do_not_open(sealer: &dyn CredentialSealer) {
    let plaintext = b"a longer secret value";
    let sealed = sealer.seal("batch-t", plaintext).await.unwrap();
    let (prefix, encoded) = sealed.split_once('.').unwrap();
    let bytes = BASE64.decode(encoded).unwrap();
    let reseal = |bytes: &[u8]| format!("{prefix}.{}", BASE64.encode(bytes));

    let mut tampered = Vec::new();
    // Both bytes are authenticated in every adapter's layout (within the ciphertext or its tag).
    for index in [bytes.len() - 1, bytes.len() - plaintext.len() + 1] {
        let mut flipped = bytes.clone();
        flipped[index] ^= 0x01;
        tampered.push(reseal(&flipped));
    }
    tampered.push(reseal(&bytes[..bytes.len() - 1]));
    tampered.push(format!("x{sealed}"));
    tampered.push(format!("{prefix}.not base64!"));
    tampered.push(String::new());
    for value in tampered {
        let err = sealer.open("batch-t", &value).await.unwrap_err();
        assert!(matches!(err, SealError::Corrupt(_)), "{value}: {err:?}");
    }
    assert_eq!(sealer.open("batch-t", &sealed).await.unwrap(), plaintext);
}

/// Sealing is randomized: equal plaintexts give different values (both open).
pub async fn two_seals_of_the_same_plaintext_differ(sealer: &dyn CredentialSealer) {
    let first = sealer.seal("batch-r", b"same").await.unwrap();
    let second = sealer.seal("batch-r", b"same").await.unwrap();
    assert_ne!(first, second);
    assert_eq!(sealer.open("batch-r", &first).await.unwrap(), b"same");
    assert_eq!(sealer.open("batch-r", &second).await.unwrap(), b"same");
}

/// Webhook signing secrets and endpoint secrets over `state` and `sealer`: stored sealed (the record
/// holds neither secret), opened by another instance (its own cache) to the very secret created,
/// so a receiver's signatures are unchanged.
pub async fn webhook_secrets_are_sealed_at_rest(
    state: std::sync::Arc<dyn nimbus_shared::ports::StateStore>,
    sealer: std::sync::Arc<dyn CredentialSealer>,
) {
    use nimbus_shared::ports::{SystemClock, UuidV7Ids};
    use nimbus_shared::webhooks::{
        standard_signature, CreateEndpointRequest, SecretSource, SigningSecret, UrlPolicy, WebhookEndpoints,
        WebhookSecrets,
    };
    use std::sync::Arc;
    let secrets = |state: &Arc<dyn nimbus_shared::ports::StateStore>| {
        WebhookSecrets::new(
            Arc::clone(state),
            Arc::new(SystemClock),
            Arc::new(UuidV7Ids),
            Arc::clone(&sealer),
        )
    };
    let created = secrets(&state).create(&ProjectId::new("sealed-project")).await.unwrap();
    let record = state.get("webhook_secret", &created.id).await.unwrap().unwrap();
    let stored = record.body.to_string();
    assert!(!stored.contains(&created.secret["whsec_".len()..]), "{stored}");
    let signing = secrets(&state)
        .signing_secrets(&ProjectId::new("sealed-project"))
        .await
        .unwrap();
    let body = br#"{"data":1}"#;
    let created_secret = SigningSecret::parse(&created.secret).unwrap();
    assert_eq!(
        standard_signature(&signing, "msg_x", 1_700_000_000, body),
        standard_signature(&[created_secret], "msg_x", 1_700_000_000, body)
    );

    let endpoints = WebhookEndpoints::new(
        Arc::clone(&state),
        Arc::new(SystemClock),
        Arc::new(UuidV7Ids),
        UrlPolicy::default(),
        Arc::clone(&sealer),
    );
    let endpoint = endpoints
        .create(
            &ProjectId::new("sealed-project"),
            CreateEndpointRequest {
                url: "https://hooks.example.com/x".into(),
                event_types: vec!["batch.completed".into()],
                name: None,
                secret: None,
            },
        )
        .await
        .unwrap();
    let record = state
        .get("webhook_endpoint", &endpoint.endpoint.id)
        .await
        .unwrap()
        .unwrap();
    let stored = record.body.to_string();
    assert!(!stored.contains(&endpoint.signing_secret["whsec_".len()..]), "{stored}");
    assert_eq!(
        endpoints
            .get(&ProjectId::new("sealed-project"), &endpoint.endpoint.id)
            .await
            .unwrap()
            .signing_secret_hint,
        Some(SigningSecret::parse(&endpoint.signing_secret).unwrap().masked())
    );
}
