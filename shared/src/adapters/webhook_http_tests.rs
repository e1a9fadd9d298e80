use super::*;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap as AxumHeaders, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use std::convert::Infallible;
use std::sync::Mutex;

const STRICT: UrlPolicy = UrlPolicy {
    allow_loopback_http: false,
};
const DEV: UrlPolicy = UrlPolicy {
    allow_loopback_http: true,
};

/// Requests the fake receiver got: (path, headers, body).
type Seen = Arc<Mutex<Vec<(String, AxumHeaders, Bytes)>>>;

async fn record(State(seen): State<Seen>, uri: axum::http::Uri, headers: AxumHeaders, body: Bytes) -> StatusCode {
    seen.lock().unwrap().push((uri.path().to_owned(), headers, body));
    StatusCode::OK
}

async fn receiver() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let app = Router::new()
        .route("/ok", post(record))
        .route(
            "/redirect",
            post(|| async { (StatusCode::FOUND, [("location", "/ok")]) }),
        )
        .route("/gone", post(|| async { StatusCode::GONE }))
        .route(
            "/busy",
            post(|| async { (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "7")]) }),
        )
        .route(
            "/unavailable",
            post(|| async {
                let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(120));
                (StatusCode::SERVICE_UNAVAILABLE, [("retry-after", later)]).into_response()
            }),
        )
        .route("/error", post(|| async { StatusCode::INTERNAL_SERVER_ERROR }))
        .route(
            "/slow",
            post(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                StatusCode::OK
            }),
        )
        .route(
            "/endless",
            post(|| async {
                let chunks = futures::stream::repeat_with(|| Ok::<_, Infallible>(Bytes::from(vec![b'x'; 8192])));
                Response::new(Body::from_stream(chunks))
            }),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("127.0.0.1:{port}"), seen)
}

fn url(text: &str) -> WebhookUrl {
    // Deserializing checks only the syntax, so tests can hand the transport URLs its checks refuse.
    serde_json::from_value(serde_json::Value::String(text.to_owned())).unwrap()
}

fn transport(policy: UrlPolicy) -> HttpWebhookTransport {
    HttpWebhookTransport::with_timeout(policy, Duration::from_secs(2)).unwrap()
}

async fn post_to(transport: &HttpWebhookTransport, target: &str) -> PostOutcome {
    transport.post(&url(target), &[], Bytes::from_static(b"{}")).await
}

#[tokio::test]
async fn posts_the_exact_bytes_and_headers_and_reports_the_status() {
    let (host, seen) = receiver().await;
    let body = Bytes::from_static(b"{\"a\":  1,\n\"b\":\"\xc3\xa9\"}");
    let headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("webhook-id".to_owned(), "msg_1".to_owned()),
    ];
    let outcome = transport(DEV)
        .post(&url(&format!("http://{host}/ok")), &headers, body.clone())
        .await;
    assert_eq!(
        outcome,
        PostOutcome::Response {
            status: 200,
            retry_after: None
        }
    );
    let seen = seen.lock().unwrap();
    let (_, got_headers, got_body) = &seen[0];
    assert_eq!(got_body, &body);
    assert_eq!(got_headers["webhook-id"], "msg_1");
    assert_eq!(got_headers["content-type"], "application/json");
}

#[tokio::test]
async fn redirects_are_reported_not_followed() {
    let (host, seen) = receiver().await;
    let outcome = post_to(&transport(DEV), &format!("http://{host}/redirect")).await;
    assert_eq!(
        outcome,
        PostOutcome::Response {
            status: 302,
            retry_after: None
        }
    );
    assert!(seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn error_statuses_and_retry_after_are_reported() {
    let (host, _) = receiver().await;
    let transport = transport(DEV);
    assert_eq!(
        post_to(&transport, &format!("http://{host}/gone")).await,
        PostOutcome::Response {
            status: 410,
            retry_after: None
        }
    );
    assert_eq!(
        post_to(&transport, &format!("http://{host}/busy")).await,
        PostOutcome::Response {
            status: 429,
            retry_after: Some(Duration::from_secs(7))
        }
    );
    assert_eq!(
        post_to(&transport, &format!("http://{host}/error")).await,
        PostOutcome::Response {
            status: 500,
            retry_after: None
        }
    );
    match post_to(&transport, &format!("http://{host}/unavailable")).await {
        PostOutcome::Response {
            status: 503,
            retry_after: Some(delay),
        } => {
            assert!(
                delay > Duration::from_secs(100) && delay <= Duration::from_secs(120),
                "{delay:?}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_slow_receiver_times_out() {
    let (host, _) = receiver().await;
    let quick = HttpWebhookTransport::with_timeout(DEV, Duration::from_millis(300)).unwrap();
    match post_to(&quick, &format!("http://{host}/slow")).await {
        PostOutcome::Failed {
            timed_out: true,
            reason,
        } => assert_eq!(reason, UNREACHABLE),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_endless_response_body_is_read_only_up_to_the_cap() {
    let (host, _) = receiver().await;
    // Reading on would only end at the request deadline (a minute here), long after the check's.
    let patient = HttpWebhookTransport::with_timeout(DEV, Duration::from_secs(60)).unwrap();
    let target = format!("http://{host}/endless");
    let posted = post_to(&patient, &target);
    let outcome = tokio::time::timeout(Duration::from_secs(20), posted).await;
    assert_eq!(
        outcome,
        Ok(PostOutcome::Response {
            status: 200,
            retry_after: None
        })
    );
}

#[tokio::test]
async fn a_closed_port_is_a_connection_failure_without_the_url() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    match post_to(&transport(DEV), &format!("http://127.0.0.1:{port}/hook?token=s3cret")).await {
        PostOutcome::Failed {
            timed_out: false,
            reason,
        } => assert_eq!(reason, UNREACHABLE),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn unreachable_destinations_all_get_the_same_reason() {
    // A closed port, a port that accepts and says nothing (the time runs out), one that closes at
    // once, and a name that does not resolve: a tenant learns none of that, and never a host or port.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let hanging_up = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hanging_up_port = hanging_up.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((socket, _)) = hanging_up.accept().await {
            drop(socket);
        }
    });
    let quick = HttpWebhookTransport::with_timeout(DEV, Duration::from_millis(500)).unwrap();
    for target in [
        format!("http://127.0.0.1:{closed_port}/"),
        format!("http://127.0.0.1:{silent_port}/"),
        format!("http://127.0.0.1:{hanging_up_port}/"),
        "https://nimbus-no-such-host.localhost:9/".to_owned(),
    ] {
        match post_to(&quick, &target).await {
            PostOutcome::Failed { reason, .. } => assert_eq!(reason, UNREACHABLE, "{target}"),
            other => panic!("{target}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn forbidden_addresses_are_refused_without_connecting() {
    let strict = transport(STRICT);
    let dev = transport(DEV);
    for (transport, target) in [
        (&strict, "https://10.0.0.1/hook"),
        (&dev, "https://10.0.0.1/hook"),
        (&strict, "https://169.254.169.254/latest/meta-data/"),
        (&dev, "http://169.254.169.254/latest/meta-data/"),
        (&strict, "https://[::ffff:127.0.0.1]/hook"),
        (&strict, "https://[fd00:ec2::254]/hook"),
        (&strict, "https://localhost/hook"),
        (&strict, "http://127.0.0.1/hook"),
    ] {
        match post_to(transport, target).await {
            PostOutcome::Refused { .. } => {}
            other => panic!("{target}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_host_name_resolving_to_loopback_is_refused_at_resolution() {
    let (host, seen) = receiver().await;
    let port = host.rsplit(':').next().unwrap();
    let target = format!("http://localhost:{port}/ok");
    // The URL check lets `localhost` through, so only the resolver stands in the way.
    let resolver_strict = HttpWebhookTransport::build(DEV, STRICT, Duration::from_secs(2)).unwrap();
    match post_to(&resolver_strict, &target).await {
        PostOutcome::Refused { reason } => {
            // The address it resolves to is not told.
            assert_eq!(reason, FORBIDDEN_DESTINATION);
        }
        other => panic!("{other:?}"),
    }
    assert!(seen.lock().unwrap().is_empty());
    // Allowed, the same name connects to the checked address and keeps its Host header.
    assert_eq!(
        post_to(&transport(DEV), &target).await,
        PostOutcome::Response {
            status: 200,
            retry_after: None
        }
    );
    assert_eq!(seen.lock().unwrap()[0].1["host"], format!("localhost:{port}"));
}

#[test]
fn retry_after_reads_seconds_and_http_dates() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let with = |value: &str| {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_str(value).unwrap());
        retry_after(&headers, now)
    };
    assert_eq!(with("120"), Some(Duration::from_secs(120)));
    assert_eq!(with(" 0 "), Some(Duration::ZERO));
    assert_eq!(
        with(&httpdate::fmt_http_date(now + Duration::from_secs(90))),
        Some(Duration::from_secs(90))
    );
    assert_eq!(
        with(&httpdate::fmt_http_date(now - Duration::from_secs(90))),
        Some(Duration::ZERO)
    );
    assert_eq!(with("soon"), None);
    assert_eq!(with("-5"), None);
    assert_eq!(retry_after(&HeaderMap::new(), now), None);
}
