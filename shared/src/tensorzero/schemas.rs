//! JSON Schemas of functions and tools (compiled once at start-up) and of requests
//! (`output_schema`, tool `parameters`): bounded by [`SCHEMA_LIMITS`] before they are compiled,
//! with bounded regular expressions, and validated on a thread whose stack is known to hold the
//! deepest validation those bounds allow.

use crate::schema_limits::{SchemaLimitError, SCHEMA_LIMITS};
use crate::user_text::excerpt;
use jsonschema::error::ValidationErrorKind;
use jsonschema::PatternOptions;
use serde_json::Value;
use std::fmt;

/// Compiled size of one `pattern`'s regular expression (and of its lazy DFA cache).
const REGEX_SIZE_LIMIT: usize = 1024 * 1024;
/// Backtracking steps of one `pattern` match (fancy-regex's default is 1,000,000).
const REGEX_BACKTRACK_LIMIT: usize = 100_000;
/// Nesting of a value that is validated: deeper values are refused before the validator sees
/// them (the JSON parser stops at 128 levels already).
const MAX_INSTANCE_DEPTH: usize = 128;
/// The stack of the thread that validates: the deepest recursion [`SCHEMA_LIMITS`] and
/// [`MAX_INSTANCE_DEPTH`] allow uses a fraction of it, in debug builds too.
const VALIDATION_STACK_BYTES: usize = 64 * 1024 * 1024;
/// A validation this small in schema and value runs on the caller's thread.
const INLINE_NODES: usize = 2_000;

/// A schema and its compiled validator.
pub struct CompiledSchema {
    value: Value,
    validator: jsonschema::Validator,
    /// JSON values in `value` (what a validation may walk per level of the instance).
    nodes: usize,
}

/// Why a value does not match a schema. Names the place in the value and the schema rule; never
/// quotes the value itself (it comes from a client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} fails the schema rule `{}` ({keyword}){}", place(.instance_path), excerpt(.schema_path), detail(.property.as_deref(), .keyword))]
pub struct SchemaViolation {
    /// JSON Pointer into the checked value (`""` for the whole value).
    pub instance_path: String,
    /// JSON Pointer into the schema to the rule that failed.
    pub schema_path: String,
    /// The failed keyword (`type`, `required`, ...).
    pub keyword: String,
    /// The property the rule names, when it names one: the missing one (`required`), the first
    /// unexpected one (`additionalProperties`).
    pub property: Option<String>,
}

fn place(instance_path: &str) -> String {
    if instance_path.is_empty() {
        "the value".to_owned()
    } else {
        format!("the value at `{}`", excerpt(instance_path))
    }
}

fn detail(property: Option<&str>, keyword: &str) -> String {
    match (property, keyword) {
        (Some(name), "required") => format!(": property `{}` is missing", excerpt(name)),
        (Some(name), _) => format!(": property `{}` is not allowed", excerpt(name)),
        (None, _) => String::new(),
    }
}

/// Why a schema does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a valid JSON Schema: {0}")]
pub struct SchemaCompileError(pub String);

impl From<SchemaLimitError> for SchemaCompileError {
    fn from(error: SchemaLimitError) -> Self {
        Self(format!("the schema is too large: {error}"))
    }
}

impl CompiledSchema {
    /// Check `value` against [`SCHEMA_LIMITS`], then compile it (on the validation thread: the
    /// compiler recurses over the schema too).
    pub fn compile(value: Value) -> Result<Self, SchemaCompileError> {
        SCHEMA_LIMITS.check(&value)?;
        Self::compile_unchecked(value)
    }

    /// [`Self::compile`] without [`SCHEMA_LIMITS`] (the tests of the validation thread).
    fn compile_unchecked(value: Value) -> Result<Self, SchemaCompileError> {
        let nodes = node_count(&value);
        let build = |value: &Value| {
            jsonschema::options()
                .with_pattern_options(
                    PatternOptions::fancy_regex()
                        .size_limit(REGEX_SIZE_LIMIT)
                        .dfa_size_limit(REGEX_SIZE_LIMIT)
                        .backtrack_limit(REGEX_BACKTRACK_LIMIT),
                )
                .build(value)
                .map_err(|e| SchemaCompileError(excerpt(&e.to_string()).into_owned()))
        };
        let validator = if nodes <= INLINE_NODES {
            build(&value)?
        } else {
            on_validation_thread(|| build(&value))
                .unwrap_or_else(|| Err(SchemaCompileError("the schema could not be compiled".into())))?
        };
        Ok(Self {
            value,
            validator,
            nodes,
        })
    }

    /// Parse JSON text, then [`Self::compile`].
    pub(crate) fn from_json_text(text: &str) -> Result<Self, SchemaCompileError> {
        let value = serde_json::from_str(text).map_err(|e| SchemaCompileError(format!("not JSON: {e}")))?;
        Self::compile(value)
    }

    /// The schema as written (what providers are sent).
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// Check `instance`, reporting the first violation. A value nested deeper than
    /// [`MAX_INSTANCE_DEPTH`] is a violation (`maxDepth`) without being walked; large schemas
    /// and values are validated on a thread with a large stack.
    pub fn validate(&self, instance: &Value) -> Result<(), SchemaViolation> {
        let (depth, instance_nodes) = shape(instance);
        if depth > MAX_INSTANCE_DEPTH {
            return Err(SchemaViolation {
                instance_path: String::new(),
                schema_path: String::new(),
                keyword: format!("nesting deeper than {MAX_INSTANCE_DEPTH} levels"),
                property: None,
            });
        }
        let check = || self.validator.validate(instance).map_err(|error| violation(&error));
        if self.nodes.saturating_add(instance_nodes) <= INLINE_NODES && depth <= 16 {
            return check();
        }
        on_validation_thread(check).unwrap_or_else(|| {
            Err(SchemaViolation {
                instance_path: String::new(),
                schema_path: String::new(),
                keyword: "validation could not run".into(),
                property: None,
            })
        })
    }
}

fn violation(error: &jsonschema::ValidationError<'_>) -> SchemaViolation {
    let property = match error.kind() {
        ValidationErrorKind::Required { property } => {
            Some(property.as_str().map_or_else(|| property.to_string(), str::to_owned))
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => unexpected.first().cloned(),
        _ => None,
    };
    SchemaViolation {
        instance_path: error.instance_path().as_str().to_owned(),
        schema_path: error.schema_path().as_str().to_owned(),
        keyword: error.kind().keyword().to_owned(),
        property,
    }
}

/// Run `work` on a scoped thread with [`VALIDATION_STACK_BYTES`] of stack (reserved address
/// space; only what is used is touched). `None` when the thread cannot start or `work` panics.
fn on_validation_thread<T: Send>(work: impl FnOnce() -> T + Send) -> Option<T> {
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("schema-validation".into())
            .stack_size(VALIDATION_STACK_BYTES)
            .spawn_scoped(scope, work);
        match handle {
            Ok(handle) => handle.join().ok(),
            Err(error) => {
                tracing::error!(%error, "could not start a schema validation thread");
                None
            }
        }
    })
}

/// JSON values in `value`, counted without recursion.
fn node_count(value: &Value) -> usize {
    shape(value).1
}

/// The nesting depth of `value` and its JSON values, counted without recursion.
fn shape(value: &Value) -> (usize, usize) {
    let mut deepest = 0;
    let mut nodes = 0usize;
    let mut stack = vec![(value, 0usize)];
    while let Some((value, depth)) = stack.pop() {
        nodes = nodes.saturating_add(1);
        deepest = deepest.max(depth);
        match value {
            Value::Object(map) => stack.extend(map.values().map(|v| (v, depth.saturating_add(1)))),
            Value::Array(items) => stack.extend(items.iter().map(|v| (v, depth.saturating_add(1)))),
            _ => {}
        }
    }
    (deepest, nodes)
}

impl fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledSchema")
            .field("value", &self.value)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn validates_and_names_the_failing_place_without_quoting_the_value() {
        let schema = CompiledSchema::compile(json!({
            "type": "object",
            "properties": {"age": {"type": "integer"}},
            "required": ["age"],
            "additionalProperties": false
        }))
        .unwrap();
        assert!(schema.validate(&json!({"age": 3})).is_ok());
        let violation = schema.validate(&json!({"age": "secret-value"})).unwrap_err();
        assert_eq!(violation.instance_path, "/age");
        assert_eq!(violation.keyword, "type");
        assert!(!violation.to_string().contains("secret-value"), "{violation}");
        assert_eq!(schema.validate(&json!({})).unwrap_err().keyword, "required");
    }

    /// #26 C5: a `$ref` chain is followed by recursion. One far past the bounds (so far that
    /// it overflows a 2 MiB stack inline) still only answers, on the validation thread.
    #[test]
    fn validation_runs_on_a_thread_with_a_known_large_stack() {
        let chain = crate::schema_limits::tests::ref_chain(10_000);
        assert!(CompiledSchema::compile(chain.clone()).is_err());
        let schema = CompiledSchema::compile_unchecked(chain).unwrap();
        let outcome = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || {
                schema.validate(&json!({})).unwrap();
                schema.validate(&json!(null)).unwrap_err()
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(outcome.keyword, "type");
    }

    #[test]
    fn a_value_nested_too_deep_is_a_violation_without_being_walked() {
        let schema = CompiledSchema::compile(json!({"type": "array", "items": {"$ref": "#"}})).unwrap();
        let mut value = json!([]);
        for _ in 0..200 {
            value = json!([value]);
        }
        let violation = schema.validate(&value).unwrap_err();
        assert!(violation.to_string().contains("nesting deeper than 128"), "{violation}");
    }

    #[test]
    fn required_and_unexpected_properties_are_named_and_bounded() {
        let schema = CompiledSchema::compile(json!({
            "type": "object",
            "properties": {"a": {"type": "object", "properties": {"inner": {}}, "required": ["inner"], "additionalProperties": false}},
            "required": ["a"]
        }))
        .unwrap();
        let missing = schema.validate(&json!({})).unwrap_err();
        assert_eq!(
            missing.to_string(),
            "the value fails the schema rule `/required` (required): property `a` is missing"
        );
        let long = "x".repeat(500);
        let unexpected = schema
            .validate(&json!({"a": {"inner": 1, long.clone(): 1}}))
            .unwrap_err();
        let text = unexpected.to_string();
        assert!(text.starts_with("the value at `/a` fails"), "{text}");
        assert!(text.contains("is not allowed") && text.len() < 300, "{text}");
    }

    #[test]
    fn patterns_have_a_size_limit() {
        assert!(CompiledSchema::compile(json!({"pattern": "(a{1000}){1000}"})).is_err());
        assert!(CompiledSchema::compile(json!({"pattern": "^[a-z]{1,20}$"})).is_ok());
    }

    #[test]
    fn compile_errors_are_reported() {
        assert!(CompiledSchema::compile(json!({"type": 12})).is_err());
        assert!(CompiledSchema::from_json_text("{not json")
            .unwrap_err()
            .0
            .contains("not JSON"));
        assert!(CompiledSchema::compile(json!({}))
            .unwrap()
            .validate(&json!([1]))
            .is_ok());
    }
}
