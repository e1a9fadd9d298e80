//! DICL lookup time in memory (docs/benchmarks.md, "DICL lookup"): an example set of `--examples`
//! embeddings of `--dimensions` each (deterministic pseudo-random vectors), then `--lookups`
//! queries of the `k` nearest by cosine distance, each timed alone; prints the percentiles as one
//! JSON object. Also times what a refresh costs: decoding the stored set (JSON, base64 vectors) and
//! building the index. `cargo run --release -p nimbus-bench --bin nimbus-dicl-bench`.

use clap::Parser;
use nimbus_shared::tensorzero::dicl::{DiclExample, ExampleIndex};
use serde_json::json;
use std::time::{Duration, Instant};
use uuid::Uuid;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 10_000)]
    examples: usize,
    /// 1536: OpenAI's text-embedding-3-small.
    #[arg(long, default_value_t = 1536)]
    dimensions: usize,
    #[arg(long, default_value_t = 10)]
    k: usize,
    #[arg(long, default_value_t = 2_000)]
    lookups: usize,
}

/// xorshift64*: reproducible vectors without a dependency.
struct Numbers(u64);

impl Numbers {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        (bits as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn vector(&mut self, dimensions: usize) -> Vec<f32> {
        (0..dimensions).map(|_| self.next()).collect()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut numbers = Numbers(0x9E37_79B9_7F4A_7C15);
    let examples: Vec<DiclExample> = (0..args.examples)
        .map(|i| DiclExample {
            inference_id: Uuid::from_u128(i as u128),
            input: format!(r#"{{"messages":[{{"role":"user","content":[{{"type":"text","text":"question {i}"}}]}}]}}"#),
            output: json!([{"type": "text", "text": format!("answer {i}")}]),
            embedding: numbers.vector(args.dimensions),
        })
        .collect();
    let stored = serde_json::to_vec(&examples)?;
    let started = Instant::now();
    let decoded: Vec<DiclExample> = serde_json::from_slice(&stored)?;
    let decode = started.elapsed();
    let started = Instant::now();
    let index = ExampleIndex::new(decoded);
    let build = started.elapsed();
    let queries: Vec<Vec<f32>> = (0..args.lookups).map(|_| numbers.vector(args.dimensions)).collect();
    let mut found = 0;
    for query in queries.iter().take(50) {
        found += index.nearest(query, args.k, None).len();
    }
    let mut times = Vec::with_capacity(args.lookups);
    for query in &queries {
        let started = Instant::now();
        found += index.nearest(query, args.k, None).len();
        times.push(started.elapsed());
    }
    times.sort_unstable();
    println!(
        "{}",
        json!({
            "examples": args.examples,
            "dimensions": args.dimensions,
            "k": args.k,
            "lookups": args.lookups,
            "lookup_ms": {
                "p50": percentile(&times, 0.50),
                "p90": percentile(&times, 0.90),
                "p99": percentile(&times, 0.99),
                "max": percentile(&times, 1.0),
            },
            "stored_set_mb": stored.len() as f64 / 1e6,
            "decode_ms": decode.as_secs_f64() * 1000.0,
            "index_build_ms": build.as_secs_f64() * 1000.0,
            "neighbours_found": found,
        })
    );
    Ok(())
}
