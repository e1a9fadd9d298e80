//! Adaptive experiments over the embedded adapters: episode bindings, counted feedback, the
//! poller task, and a simulated experiment converging on the better variant.

use super::*;
use crate::adapters::embedded::{FileBlobStore, SqliteStateStore};
use crate::adapters::records::{RecordRetention, StateFeedbackStore, StateInferenceStore};
use crate::config::experimentation::tests::BASE;
use crate::config::Config;
use crate::ports::inference_records::{FunctionType, TokenUsage};
use crate::ports::{FeedbackStore, StateStore, UuidV7Ids};
use crate::scheduler::ScheduledTask;
use crate::tensorzero::feedback::{FeedbackRequest, FeedbackService};
use serde_json::json;
use std::sync::atomic::{AtomicI64, Ordering};

struct TestClock(AtomicI64);

impl Clock for TestClock {
    fn now_unix_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// [`BASE`] with an experiment on `f` (fallback `c`) and one on an episode-level metric for `g`.
const EXPERIMENTS: &str = r#"
[metrics.solved]
type = "float"
level = "episode"
optimize = "max"
[functions.f.experimentation]
type = "adaptive"
metric = "good"
candidate_variants = ["a", "b"]
fallback_variants = ["c"]
min_samples_per_variant = 5
update_period_s = 1
[functions.g]
type = "chat"
[functions.g.variants.x]
type = "chat_completion"
model = "m"
[functions.g.variants.y]
type = "chat_completion"
model = "m"
[functions.g.experimentation]
type = "adaptive"
metric = "solved"
candidate_variants = ["x", "y"]
"#;

fn config_text() -> String {
    format!("{BASE}{EXPERIMENTS}")
}

struct Fixture {
    clock: Arc<TestClock>,
    functions: FunctionSet,
    store: ExperimentStore,
    experiments: Experiments,
    updates: ExperimentUpdates,
    feedback: FeedbackService,
    inferences: Arc<StateInferenceStore>,
    _dir: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let config = Config::from_toml(&config_text()).unwrap();
    let functions = FunctionSet::compile(&config, &BTreeMap::new()).unwrap();
    let clock = Arc::new(TestClock(AtomicI64::new(1_750_000_000_000)));
    let state: Arc<dyn StateStore> = Arc::new(SqliteStateStore::in_memory().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let blobs: Arc<dyn crate::ports::BlobStore> = Arc::new(FileBlobStore::open(dir.path()).unwrap());
    let retention = RecordRetention::new(0, Arc::clone(&clock) as Arc<dyn Clock>);
    let inferences = Arc::new(StateInferenceStore::new(
        Arc::clone(&state),
        Arc::clone(&blobs),
        retention.clone(),
    ));
    let feedback_store = Arc::new(StateFeedbackStore::new(Arc::clone(&state), blobs, retention));
    let store = ExperimentStore::new(state, None);
    let counting = ExperimentFeedback::new(store.clone(), functions.experiments());
    let feedback = FeedbackService::new(
        config.metrics.clone(),
        Arc::clone(&inferences) as Arc<dyn InferenceStore>,
        feedback_store as Arc<dyn FeedbackStore>,
        Arc::clone(&clock) as Arc<dyn Clock>,
        Arc::new(UuidV7Ids),
    )
    .with_experiments(Arc::new(counting));
    Fixture {
        experiments: Experiments::new(store.clone(), Arc::clone(&clock) as Arc<dyn Clock>, &functions),
        updates: ExperimentUpdates::new(store.clone(), functions.experiments().to_vec()),
        clock,
        functions,
        store,
        feedback,
        inferences,
        _dir: dir,
    }
}

impl Fixture {
    fn function(&self, name: &str) -> &Function {
        self.functions.function(name).unwrap()
    }

    /// Store an inference of `function` by `variant` in `episode`; its id.
    async fn inference(&self, project: &ProjectId, function: &str, variant: &str, episode: Uuid) -> Uuid {
        let record = InferenceRecord {
            project: project.clone(),
            inference_id: Uuid::now_v7(),
            episode_id: episode,
            function_name: function.into(),
            variant_name: variant.into(),
            function_type: FunctionType::Chat,
            input: json!({"messages": []}),
            output: json!([]),
            tags: BTreeMap::new(),
            tool_params: None,
            output_schema: None,
            inference_params: json!({}),
            processing_time_ms: 1,
            ttft_ms: None,
            usage: TokenUsage::default(),
            finish_reason: None,
            cached: false,
            created_at: String::new(),
            timestamp: 0,
            model_calls: vec![],
        };
        self.inferences.put(&record).await.unwrap();
        record.inference_id
    }

    async fn give(&self, project: &ProjectId, body: serde_json::Value) {
        let request: FeedbackRequest = serde_json::from_value(body).unwrap();
        self.feedback.submit(project, request).await.unwrap();
    }

    async fn values(&self, function: &str, metric: &str, variant: &str) -> Vec<f64> {
        let now = self.clock.now_unix_ms();
        self.store
            .latest_values((function, metric, variant), 10_000, now)
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn the_first_binding_of_an_episode_wins_per_project() {
    let f = fixture();
    let (one, two) = (ProjectId::new("one"), ProjectId::new("two"));
    let episode = Uuid::now_v7();
    assert_eq!(f.store.bind_episode(&one, "f", episode, "a", 1).await.unwrap(), "a");
    assert_eq!(f.store.bind_episode(&one, "f", episode, "b", 2).await.unwrap(), "a");
    assert_eq!(f.store.bind_episode(&two, "f", episode, "b", 3).await.unwrap(), "b");
    assert_eq!(f.store.bind_episode(&one, "g", episode, "x", 4).await.unwrap(), "x");
}

#[tokio::test]
async fn an_episode_keeps_its_variant_and_new_episodes_go_round_robin_in_the_nursery() {
    let f = fixture();
    let project = ProjectId::new("p");
    let function = f.function("f");
    let episode = Uuid::now_v7();
    let first = f
        .experiments
        .episode_variant(&project, function, episode)
        .await
        .unwrap();
    for _ in 0..10 {
        assert_eq!(
            f.experiments
                .episode_variant(&project, function, episode)
                .await
                .unwrap(),
            first
        );
    }
    let mut fresh = Vec::new();
    for _ in 0..4 {
        fresh.push(
            f.experiments
                .episode_variant(&project, function, Uuid::now_v7())
                .await
                .unwrap(),
        );
    }
    // The sticky calls took no turn; new episodes alternate.
    assert_ne!(fresh[0], fresh[1]);
    assert_eq!(fresh[0], fresh[2]);
    assert_eq!(fresh[1], fresh[3]);
    // A function without an adaptive experiment has no binding.
    let config = Config::from_toml(
        &config_text()
            .replace("type = \"adaptive\"\nmetric = \"good\"", "type = \"static\"")
            .replace("min_samples_per_variant = 5\nupdate_period_s = 1\n", ""),
    )
    .unwrap();
    let plain = FunctionSet::compile(&config, &BTreeMap::new()).unwrap();
    assert!(f
        .experiments
        .episode_variant(&project, plain.function("f").unwrap(), episode)
        .await
        .is_none());
}

#[tokio::test]
async fn inference_feedback_counts_for_its_variant_and_episode_feedback_only_for_one_variant_episodes() {
    let f = fixture();
    let project = ProjectId::new("p");
    let episode = Uuid::now_v7();
    let id = f.inference(&project, "f", "a", episode).await;
    f.give(
        &project,
        json!({"metric_name": "good", "inference_id": id, "value": true}),
    )
    .await;
    f.give(
        &project,
        json!({"metric_name": "good", "inference_id": id, "value": false}),
    )
    .await;
    assert_eq!(f.values("f", "good", "a").await, [0.0, 1.0], "newest first");
    // A dry run or a comment counts nothing.
    f.give(
        &project,
        json!({"metric_name": "good", "inference_id": id, "value": true, "dryrun": true}),
    )
    .await;
    f.give(
        &project,
        json!({"metric_name": "comment", "inference_id": id, "value": "nice"}),
    )
    .await;
    assert_eq!(f.values("f", "good", "a").await.len(), 2);

    // Episode level: g's inferences in the episode all used x (f's do not matter here).
    let single = Uuid::now_v7();
    f.inference(&project, "g", "x", single).await;
    f.inference(&project, "g", "x", single).await;
    f.inference(&project, "f", "b", single).await;
    f.give(
        &project,
        json!({"metric_name": "solved", "episode_id": single, "value": 0.75}),
    )
    .await;
    assert_eq!(f.values("g", "solved", "x").await, [0.75]);
    // An episode where g used two variants is left out.
    let mixed = Uuid::now_v7();
    f.inference(&project, "g", "x", mixed).await;
    f.inference(&project, "g", "y", mixed).await;
    f.give(
        &project,
        json!({"metric_name": "solved", "episode_id": mixed, "value": 1.0}),
    )
    .await;
    assert_eq!(f.values("g", "solved", "x").await, [0.75]);
    assert!(f.values("g", "solved", "y").await.is_empty());
}

#[tokio::test]
async fn the_task_reads_the_latest_rows_per_variant_and_runs_once_per_period() {
    let f = fixture();
    let project = ProjectId::new("p");
    for n in 0..8 {
        let now = f.clock.now_unix_ms() + n;
        f.store
            .observe(
                &project,
                ("f", "good", "a"),
                Uuid::now_v7(),
                f64::from((n as u8).is_multiple_of(2)),
                now,
            )
            .await
            .unwrap();
    }
    let now = f.clock.now_unix_ms() + 100;
    let latest = f.store.latest_values(("f", "good", "a"), 3, now).await.unwrap();
    assert_eq!(latest, [0.0, 1.0, 0.0], "the newest three, newest first");
    let report = f.updates.run(now).await.unwrap();
    assert_eq!(report["updated"], json!(2));
    let stored = f.store.load("f").await.unwrap().unwrap();
    assert_eq!(stored.variants[0].count, 8);
    assert_eq!(
        stored.decision,
        Decision::Nursery {
            nursery: vec!["a".into(), "b".into()]
        }
    );
    // Not again within the period; again after it.
    assert_eq!(f.updates.run(now + 500).await.unwrap()["updated"], json!(0));
    assert_eq!(f.updates.next_due().await.unwrap(), Some(now + 1000));
    // g's period is the default 300 s.
    assert_eq!(f.updates.run(now + 1000).await.unwrap()["updated"], json!(1));
}

/// A deterministic stream of numbers in [0, 1).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[tokio::test]
async fn simulated_feedback_converges_on_the_better_variant() {
    let f = fixture();
    let project = ProjectId::new("p");
    let function = f.function("f");
    let mut rng = Lcg(7);
    let mut served = BTreeMap::<String, u32>::new();
    let mut winner = None;
    for round in 0..200 {
        for _ in 0..10 {
            let episode = Uuid::now_v7();
            let variant = f
                .experiments
                .episode_variant(&project, function, episode)
                .await
                .unwrap();
            *served.entry(variant.clone()).or_default() += 1;
            let id = f.inference(&project, "f", &variant, episode).await;
            let good = rng.next() < if variant == "a" { 0.9 } else { 0.3 };
            f.give(
                &project,
                json!({"metric_name": "good", "inference_id": id, "value": good}),
            )
            .await;
        }
        f.clock.0.fetch_add(1_000, Ordering::SeqCst);
        f.updates.run(f.clock.now_unix_ms()).await.unwrap();
        let stored = f.store.load("f").await.unwrap().unwrap();
        if let Some(name) = stored.decision.winner() {
            winner = Some((name.to_owned(), round));
            break;
        }
    }
    let (winner, round) = winner.expect("the experiment stops");
    assert_eq!(winner, "a", "served {served:?}");
    assert!(round < 50, "stopped only after {round} rounds");
    // Once the (cached) decision is read again, every new episode gets the winner.
    f.clock.0.fetch_add(1_000, Ordering::SeqCst);
    for _ in 0..20 {
        let variant = f
            .experiments
            .episode_variant(&project, function, Uuid::now_v7())
            .await
            .unwrap();
        assert_eq!(variant, "a");
    }
    let report = f.experiments.report(function).await.unwrap().unwrap();
    assert_eq!(report.winner.as_deref(), Some("a"));
    assert_eq!(report.probabilities, BTreeMap::from([("a".to_owned(), 1.0)]));
    assert!(report.variants[0].mean > report.variants[1].mean);
}
