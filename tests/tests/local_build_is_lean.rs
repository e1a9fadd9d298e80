//! `make run` builds `nimbus-local --no-default-features`: a cold build without the AWS SDKs the
//! local server does not use (docs/benchmarks.md §12). This fails if one creeps back in.

use std::process::Command;

/// The crates that made `make run`'s first build take minutes more (compile seconds in §12).
const HEAVY: &[&str] = &[
    "aws-sdk-dynamodb",
    "aws-sdk-eventbridge",
    "aws-sdk-s3",
    "aws-sdk-sqs",
    "aws-sdk-ssm",
    "aws-sdk-kms",
    "lambda_http",
    "lambda-extension",
];

fn tree(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args([
            "tree",
            "-p",
            "nimbus-local",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--offline",
        ])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

fn crates(tree: &str) -> Vec<&str> {
    tree.lines().filter_map(|line| line.split_whitespace().next()).collect()
}

#[test]
fn make_runs_build_leaves_the_aws_adapters_out() {
    let lean = tree(&["--no-default-features"]);
    let found: Vec<&str> = crates(&lean).into_iter().filter(|name| HEAVY.contains(name)).collect();
    assert!(found.is_empty(), "make run's build pulls in {found:?}");
    assert!(
        crates(&lean).contains(&"aws-sdk-sagemakerruntime"),
        "the SageMaker provider stays"
    );
}

#[test]
fn the_default_build_keeps_them_for_backend_aws() {
    let full = tree(&[]);
    for name in HEAVY {
        assert!(crates(&full).contains(name), "{name} missing from the default build");
    }
}
