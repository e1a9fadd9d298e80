//! Dependencies point down: nothing below the HTTP layer imports it, and the batch engine talks to
//! ports, never to an adapter. Read from the source, so a new import breaks this test at once.

use std::fs;
use std::path::{Path, PathBuf};

fn shared_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/src")
}

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files
}

/// The lines of the files below `dir` that mention `module`, as `file:line: text`.
fn mentions(dir: &Path, module: &str, skip: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for file in rust_files(dir) {
        let relative = file.strip_prefix(shared_src()).unwrap().to_string_lossy().into_owned();
        if skip.iter().any(|prefix| relative.starts_with(prefix)) {
            continue;
        }
        let text = fs::read_to_string(&file).unwrap();
        for (number, line) in text.lines().enumerate() {
            if line.contains(module) {
                found.push(format!("{relative}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn nothing_below_the_http_layer_imports_it() {
    // `app/` wires the HTTP router into its hosts; `lib.rs` declares the module.
    let found = mentions(&shared_src(), "crate::http", &["http/", "app/", "lib.rs"]);
    assert!(found.is_empty(), "imports of the HTTP layer:\n{}", found.join("\n"));
}

#[test]
fn the_batch_engine_imports_no_adapter() {
    let found = mentions(&shared_src().join("batches"), "crate::adapters", &[]);
    assert!(found.is_empty(), "imports of an adapter:\n{}", found.join("\n"));
}
