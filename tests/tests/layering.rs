//! Dependencies point down, and errors are typed. `docs/architecture.md` ("Layers") writes the
//! order of the top-level modules of `shared/src`; this test reads every `crate::…` path in their
//! code (tests aside) and fails on an import of a module in the same or a higher layer, on a loop
//! between files, and on a module the order does not place. A new import that breaks the order
//! fails here at once. It also fails on a `Result<_, String>` in any crate's code.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The layers of `shared/src`, top to bottom. A module may import modules of lower layers only.
const LAYERS: &[(&str, &[&str])] = &[
    ("wiring", &["app"]),
    ("adapters", &["adapters"]),
    ("surfaces", &["http"]),
    ("surface logic", &["lmi_api"]),
    ("queued work", &["batches", "async_requests"]),
    ("webhooks and files", &["webhooks", "files"]),
    ("surface errors", &["surface_errors"]),
    ("tensorzero", &["tensorzero"]),
    ("inference", &["inference"]),
    (
        "domain mechanisms",
        &["auth", "model_slots", "idempotency", "scheduler"],
    ),
    ("jobs", &["jobs"]),
    ("providers", &["providers"]),
    ("openai wire", &["openai"]),
    ("config", &["config"]),
    ("records", &["records"]),
    ("ports", &["ports"]),
    ("model", &["model"]),
    ("limits", &["schema_limits", "paging"]),
    (
        "mechanisms",
        &["backoff", "user_text", "json_size", "jsonl", "mac", "telemetry"],
    ),
];

/// Imports against the order that are still to be removed (issue #29). The list only shrinks: an
/// entry that no longer occurs fails the test too, so that it is taken off.
const KNOWN: &[(&str, &str)] = &[];

fn shared_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/src")
}

/// Every non-test `.rs` file below `dir`, relative to `shared/src`.
fn rust_files(dir: &Path, into: &mut Vec<String>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" {
                rust_files(&path, into);
            }
        } else if name.ends_with(".rs") && !is_test_file(&name) {
            into.push(path.strip_prefix(shared_src()).unwrap().to_string_lossy().into_owned());
        }
    }
}

fn is_test_file(name: &str) -> bool {
    name.ends_with("tests.rs") || name == "test_support.rs"
}

/// The source with comments removed and the insides of string and char literals blanked, so that
/// neither a URL in a string nor a path in a comment counts as an import.
fn code_only(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_char_before(&chars, i) {
            // A raw string: r"…", r#"…"#, …
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{7f}') or a lifetime ('a).
            if next == Some('\\') {
                let mut j = i + 2;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// `code` without the items marked `#[cfg(test)]` (a `mod x;`, a `use …;`, or a braced item).
fn without_test_items(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        let semicolon = item.find(';');
        let brace = item.find('{');
        let end = match (semicolon, brace) {
            (Some(s), Some(b)) if s < b => s + 1,
            (Some(s), None) => s + 1,
            (_, Some(b)) => matching_brace(item, b) + 1,
            (None, None) => item.len(),
        };
        rest = &item[end.min(item.len())..];
    }
    out.push_str(rest);
    out
}

fn matching_brace(text: &str, open: usize) -> usize {
    let mut depth = 0;
    for (i, c) in text.char_indices().skip_while(|(i, _)| *i < open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    text.len()
}

/// Every path a file names through `crate::`, with `use crate::{a::b, c::{d, e}}` groups expanded
/// (`a::b`, `c::d`, `c::e`), as `::`-separated segments.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        paths.extend(expand(rest));
    }
    paths.retain(|p| !p.is_empty());
    paths
}

/// The paths at the start of `text`: `a::b::C` is one, `{a::b, c::{d, e}}` is three.
fn expand(text: &str) -> Vec<Vec<String>> {
    let text = text.trim_start();
    if let Some(group) = text.strip_prefix('{') {
        let end = matching_brace(text, 0);
        return split_top_level(&group[..end.saturating_sub(1)])
            .iter()
            .flat_map(|item| expand(item))
            .collect();
    }
    let mut prefix = Vec::new();
    let mut rest = text;
    loop {
        let ident: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if ident.is_empty() {
            break;
        }
        rest = &rest[ident.len()..];
        prefix.push(ident);
        match rest.trim_start().strip_prefix("::") {
            Some(after) if after.trim_start().starts_with('{') => {
                return expand(after)
                    .into_iter()
                    .map(|tail| prefix.iter().cloned().chain(tail).collect())
                    .collect();
            }
            Some(after) => rest = after.trim_start(),
            None => break,
        }
    }
    vec![prefix]
}

fn split_top_level(group: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut depth = 0;
    let mut current = String::new();
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    items.push(current);
    items
}

fn top_module(file: &str) -> String {
    let first = file.split('/').next().unwrap();
    first.strip_suffix(".rs").unwrap_or(first).to_owned()
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, modules)| modules.contains(&module))
}

struct Source {
    file: String,
    code: String,
}

fn sources() -> Vec<Source> {
    let mut files = Vec::new();
    rust_files(&shared_src(), &mut files);
    files
        .into_iter()
        .filter(|f| f != "lib.rs")
        .map(|file| {
            let text = fs::read_to_string(shared_src().join(&file)).unwrap();
            let code = without_test_items(&code_only(&text));
            Source { file, code }
        })
        .collect()
}

/// `(importing module, imported module)` → the files that import it that way.
fn module_imports(sources: &[Source]) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut imports: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for source in sources {
        let from = top_module(&source.file);
        for path in crate_paths(&source.code) {
            if path[0] != from {
                imports
                    .entry((from.clone(), path[0].clone()))
                    .or_default()
                    .insert(source.file.clone());
            }
        }
    }
    imports
}

#[test]
fn every_module_has_a_layer() {
    let unplaced: BTreeSet<String> = sources()
        .iter()
        .map(|s| top_module(&s.file))
        .filter(|m| layer_of(m).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules the layer order does not place: {unplaced:?}"
    );
}

#[test]
fn imports_point_down() {
    let mut upward = Vec::new();
    let mut known_seen = BTreeSet::new();
    for ((from, to), files) in module_imports(&sources()) {
        let (Some(from_layer), Some(to_layer)) = (layer_of(&from), layer_of(&to)) else {
            continue;
        };
        if to_layer > from_layer {
            continue;
        }
        if KNOWN.contains(&(from.as_str(), to.as_str())) {
            known_seen.insert((from.clone(), to.clone()));
            continue;
        }
        let files: Vec<&str> = files.iter().map(String::as_str).collect();
        upward.push(format!(
            "{from} ({}) imports {to} ({}) in {}",
            LAYERS[from_layer].0,
            LAYERS[to_layer].0,
            files.join(", ")
        ));
    }
    assert!(
        upward.is_empty(),
        "imports against the layer order:\n{}",
        upward.join("\n")
    );
    let gone: Vec<_> = KNOWN
        .iter()
        .filter(|(from, to)| !known_seen.contains(&((*from).to_owned(), (*to).to_owned())))
        .collect();
    assert!(
        gone.is_empty(),
        "known upward imports that are gone (take them off KNOWN): {gone:?}"
    );
}

/// Adapters implement ports: past the ports, the types those carry and the mechanisms below them,
/// they see only the configuration (which says what to connect to).
#[test]
fn adapters_import_only_ports_and_below() {
    let lowest_allowed = layer_of("config").unwrap();
    let found: Vec<String> = module_imports(&sources())
        .into_iter()
        .filter(|((from, to), _)| from == "adapters" && layer_of(to).is_some_and(|layer| layer < lowest_allowed))
        .map(|((_, to), files)| format!("adapters import {to} in {files:?}"))
        .collect();
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The file a `crate::` path lands in: the longest prefix of its segments that names a file.
fn file_of(path: &[String], files: &BTreeSet<String>) -> Option<String> {
    for len in (1..=path.len()).rev() {
        let stem = path[..len].join("/");
        for candidate in [format!("{stem}.rs"), format!("{stem}/mod.rs")] {
            if files.contains(&candidate) {
                return Some(candidate);
            }
        }
    }
    None
}

/// A module's face (`mod.rs`, or `x.rs` beside a folder `x/`) declares and re-exports its children;
/// only the files behind it count for loops.
fn is_face(file: &str, files: &BTreeSet<String>) -> bool {
    file.ends_with("mod.rs")
        || files
            .iter()
            .any(|f| f.starts_with(&format!("{}/", file.trim_end_matches(".rs"))))
}

/// The module path of a file (`a/b/mod.rs` and `a/b.rs` → `a`, `b`).
fn module_path(file: &str) -> Vec<String> {
    let trimmed = file.trim_end_matches(".rs").trim_end_matches("/mod");
    trimmed.split('/').map(str::to_owned).collect()
}

/// Paths named through `super::` and `self::`, made absolute.
fn relative_paths(code: &str, file: &str) -> Vec<Vec<String>> {
    let here = module_path(file);
    let mut paths = Vec::new();
    for (prefix, up) in [("super::", 1usize), ("self::", 0usize)] {
        let mut rest = code;
        while let Some(at) = rest.find(prefix) {
            let before = rest[..at].chars().last();
            rest = &rest[at + prefix.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut up = up;
            let mut tail = rest;
            while let Some(after) = tail.strip_prefix("super::") {
                up += 1;
                tail = after;
            }
            if up > here.len() {
                continue;
            }
            let base = &here[..here.len() - up];
            for tail in expand(tail) {
                paths.push(base.iter().cloned().chain(tail).collect());
            }
        }
    }
    paths
}

#[test]
fn no_file_loops() {
    let sources = sources();
    let files: BTreeSet<String> = sources.iter().map(|s| s.file.clone()).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for source in &sources {
        if is_face(&source.file, &files) {
            continue;
        }
        let mut paths = crate_paths(&source.code);
        paths.extend(relative_paths(&source.code, &source.file));
        for path in paths {
            if let Some(target) = file_of(&path, &files) {
                if target != source.file && !is_face(&target, &files) {
                    edges.entry(source.file.clone()).or_default().insert(target);
                }
            }
        }
    }
    let loops = cycles(&edges);
    assert!(loops.is_empty(), "files that import each other:\n{}", loops.join("\n"));
}

/// The strongly connected components of more than one file (Tarjan's algorithm), each written
/// as its files.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<String>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, node: &'a str) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on_stack.insert(node);
            if let Some(targets) = self.edges.get(node) {
                for target in targets {
                    let target = target.as_str();
                    if !self.index.contains_key(target) {
                        self.visit(target);
                        let low = self.low[node].min(self.low[target]);
                        self.low.insert(node, low);
                    } else if self.on_stack.contains(target) {
                        let low = self.low[node].min(self.index[target]);
                        self.low.insert(node, low);
                    }
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    component.push(top);
                    if top == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component.join(" ⇄ "));
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in edges.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.found
}

#[test]
fn the_scanner_reads_what_it_should() {
    let code = code_only(
        "use crate::{a::b, c::{d, e}};\n// crate::comment\nlet s = \"crate::string\";\nfn f<'x>() -> crate::f::G {}\n#[cfg(test)]\nmod tests { use crate::hidden; }\n",
    );
    let code = without_test_items(&code);
    let paths: Vec<String> = crate_paths(&code).iter().map(|p| p.join("::")).collect();
    assert_eq!(paths, ["a::b", "c::d", "c::e", "f::G"].map(String::from));
    let relative: Vec<String> = relative_paths("use super::x::Y; use self::z;", "m/n/k.rs")
        .iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(relative, ["m::n::x::Y", "m::n::k::z"].map(String::from));
}

/// The error type of every `Result<T, E>` the code names (tests aside): the text after the last
/// top-level comma of its arguments.
fn result_error_types(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("Result<") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "Result<".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let mut depth = 1;
        let mut last_comma = None;
        let mut end = None;
        for (i, c) in rest.char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(i);
                        break;
                    }
                }
                ',' if depth == 1 => last_comma = Some(i),
                _ => {}
            }
        }
        if let (Some(comma), Some(end)) = (last_comma, end) {
            found.push(rest[comma + 1..end].trim().to_owned());
        }
    }
    found
}

/// Errors are typed: no `Result<_, String>` in the crates' code (the guide's rule).
#[test]
fn no_result_has_a_string_error() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut offending = Vec::new();
    for dir in ["shared/src", "functions", "infra/local/src", "infra/bench/src"] {
        let mut files = Vec::new();
        collect_rs(&root.join(dir), &mut files);
        for file in files {
            let code = without_test_items(&code_only(&fs::read_to_string(&file).unwrap()));
            if result_error_types(&code).iter().any(|error| error == "String") {
                offending.push(file.strip_prefix(&root).unwrap().display().to_string());
            }
        }
    }
    assert!(offending.is_empty(), "Result<_, String> in: {offending:?}");
    assert_eq!(
        result_error_types("fn f() -> Result<HashMap<String, String>, Error> {} fn g() -> Result<(), String>"),
        ["Error", "String"]
    );
}

fn collect_rs(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" && name != "target" {
                collect_rs(&path, into);
            }
        } else if name.ends_with(".rs") && !is_test_file(&name) {
            into.push(path);
        }
    }
}
