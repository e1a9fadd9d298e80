//! `nimbus-async-requests-bench`: the AWS requests one async request costs on its happy path.
//!
//! Runs `--requests` requests (model `dummy`, a webhook answered 200 by a stand-in transport, a
//! project with a webhook secret) through what the Lambda functions run — the async service's
//! submit (batches function), the SQS event source's receive and delete, the worker's job
//! dispatcher, and the poller's pass over the requests once their retention has passed — over the
//! embedded adapters wrapped in counters (`counting.rs`): one port call is one AWS request.
//! Prints one JSON object: the counts per request and phase, DynamoDB units, and the in-process
//! durations of the submit and the run.

mod counting;

use async_trait::async_trait;
use bytes::Bytes;
use clap::Parser;
use counting::{Counter, CountingBlobs, CountingQueue, CountingState, PhaseCounts};
use nimbus_shared::app::load_local_config;
use nimbus_shared::app::{
    async_api, embedded, inference_service, job_dispatcher, webhooks::webhook_secrets, WorkerParts,
};
use nimbus_shared::async_requests::AsyncDueWork;
use nimbus_shared::batches::BatchSettings;
use nimbus_shared::ports::ProjectId;
use nimbus_shared::ports::{OffsetClock, PostOutcome, SystemClock, WebhookTransport};
use nimbus_shared::scheduler::ScheduledTask;
use nimbus_shared::webhooks::WebhookUrl;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::error::Error;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PROJECT: &str = "bench";
const SUBMIT: &str = "submit (batches function)";
const EVENT_SOURCE: &str = "SQS event source";
const RUN: &str = "async_run (worker function)";
const PURGE: &str = "clean-up after retention (poller)";

#[derive(Parser)]
struct Args {
    /// Requests to run.
    #[arg(long, default_value_t = 200)]
    requests: usize,
    /// The configuration (its `dummy` model answers at once).
    #[arg(long, default_value = "infra/config/nimbus.toml")]
    config: PathBuf,
}

/// A webhook receiver that answers 200 to everything, without a network.
#[derive(Default)]
struct AcceptingTransport {
    posts: AtomicU64,
}

#[async_trait]
impl WebhookTransport for AcceptingTransport {
    async fn post(&self, _url: &WebhookUrl, _headers: &[(String, String)], _body: Bytes) -> PostOutcome {
        self.posts.fetch_add(1, Ordering::Relaxed);
        PostOutcome::Response {
            status: 200,
            retry_after: None,
        }
    }
}

fn submission(i: usize) -> Map<String, Value> {
    let body = json!({
        "model_input": {"model": "dummy", "messages": [{"role": "user", "content": format!("Say something about {i}.")}], "max_tokens": 16},
        "webhook_endpoint": "https://hooks.example.com/nimbus",
        "priority": 1,
    });
    match body {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn merge(into: &mut BTreeMap<&'static str, PhaseCounts>, from: BTreeMap<&'static str, PhaseCounts>) {
    for (phase, counts) in from {
        let entry = into.entry(phase).or_default();
        for (operation, calls) in counts.calls {
            *entry.calls.entry(operation).or_default() += calls;
        }
        entry.wru += counts.wru;
        entry.rru += counts.rru;
    }
}

fn total(counts: &BTreeMap<&'static str, PhaseCounts>) -> u64 {
    counts.values().flat_map(|c| c.calls.values()).sum()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let args = Args::parse();
    let requests = args.requests.max(2);
    let dir = std::env::temp_dir().join(format!("nimbus-async-requests-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let loaded = load_local_config(&args.config).await?;
    let counter = Counter::new();
    let mut adapters = embedded::adapters(&dir)?;
    adapters.state = Arc::new(CountingState {
        inner: adapters.state,
        counter: Arc::clone(&counter),
    });
    adapters.blobs = Arc::new(CountingBlobs {
        inner: adapters.blobs,
        counter: Arc::clone(&counter),
    });
    adapters.queue = Arc::new(CountingQueue {
        inner: adapters.queue,
        counter: Arc::clone(&counter),
    });
    let transport = Arc::new(AcceptingTransport::default());
    adapters.webhooks = Arc::clone(&transport) as Arc<dyn WebhookTransport>;
    let inference = inference_service(&loaded.config, &adapters)?;
    let settings = BatchSettings::from_config(&loaded.config);
    let parts = WorkerParts::new(&loaded, &adapters, Arc::clone(&inference), settings.clone());
    let project = ProjectId::new(PROJECT);
    webhook_secrets(&adapters).create(&project).await?;
    let dispatcher = job_dispatcher(&parts);
    let api = async_api(&loaded, &adapters);
    counter.take();

    let mut first = BTreeMap::new();
    let mut warm = BTreeMap::new();
    let (mut submit_time, mut run_time) = (Duration::ZERO, Duration::ZERO);
    for i in 0..requests {
        counter.set_phase(SUBMIT);
        let started = Instant::now();
        api.submit(&project, submission(i), None).await?;
        submit_time += started.elapsed();
        counter.set_phase(EVENT_SOURCE);
        let message = adapters
            .queue
            .receive(1, Duration::ZERO, Duration::from_secs(300))
            .await?
            .pop()
            .ok_or("the submitted request's job is not in the queue")?;
        counter.set_phase(RUN);
        let started = Instant::now();
        dispatcher
            .handle_until(&message.body, tokio::time::Instant::now() + Duration::from_secs(120))
            .await;
        run_time += started.elapsed();
        counter.set_phase(EVENT_SOURCE);
        adapters.queue.delete(&message.receipt).await?;
        let counts = counter.take();
        merge(if i == 0 { &mut first } else { &mut warm }, counts);
    }

    // The poller's pass once every request's retention has passed: each request and output goes.
    let retention_ms = i64::from(loaded.config.async_requests.retention_days) * 24 * 3600 * 1000;
    let mut later = adapters.clone();
    later.clock = Arc::new(OffsetClock {
        inner: SystemClock,
        offset_ms: retention_ms + 3600 * 1000,
    });
    let later_parts = WorkerParts::new(&loaded, &later, inference, settings);
    counter.set_phase(PURGE);
    let report = AsyncDueWork::new(Arc::clone(&later_parts.async_requests))
        .run(later.clock.now_unix_ms())
        .await?;
    let purge = counter.take();

    let warm_n = (requests - 1) as f64;
    let per = |counts: &PhaseCounts, n: f64| {
        let calls: BTreeMap<&str, f64> = counts.calls.iter().map(|(op, c)| (*op, *c as f64 / n)).collect();
        let total: f64 = calls.values().sum();
        (calls, total, counts.wru / n, counts.rru / n)
    };
    let mut by_phase = serde_json::Map::new();
    let mut all_calls: BTreeMap<&str, f64> = BTreeMap::new();
    let (mut sum, mut delivered, mut wru, mut rru) = (0.0, 0.0, 0.0, 0.0);
    let phases = warm
        .iter()
        .map(|(p, c)| (*p, c, warm_n))
        .chain(purge.iter().map(|(p, c)| (*p, c, requests as f64)));
    for (phase, counts, n) in phases {
        let (calls, phase_total, phase_wru, phase_rru) = per(counts, n);
        for (op, c) in &calls {
            *all_calls.entry(op).or_default() += c;
        }
        sum += phase_total;
        if phase != PURGE {
            delivered += phase_total;
        }
        wru += phase_wru;
        rru += phase_rru;
        by_phase.insert(phase.to_owned(), json!({"calls": calls, "total": phase_total}));
    }
    let out = json!({
        "requests": requests,
        "webhook_posts": transport.posts.load(Ordering::Relaxed),
        "first_request_total": total(&first),
        "first_request": first.iter().map(|(p, c)| (p.to_string(), json!(c.calls))).collect::<serde_json::Map<_, _>>(),
        "purge_report": report,
        "per_request": {
            "by_phase": by_phase,
            "calls": all_calls,
            "total": sum,
            "delivered": delivered,
            "wru": wru,
            "rru": rru,
            "submit_ms": submit_time.as_secs_f64() * 1000.0 / requests as f64,
            "run_ms": run_time.as_secs_f64() * 1000.0 / requests as f64,
        },
    });
    println!("{out}");
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
