//! JSON Schemas of functions and tools, compiled once at start-up.

use crate::user_text::excerpt;
use serde_json::Value;
use std::fmt;

/// A schema and its compiled validator.
pub struct CompiledSchema {
    value: Value,
    validator: jsonschema::Validator,
}

/// Why a value does not match a schema. Names the place in the value and the schema rule; never
/// quotes the value itself (it comes from a client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the value at `{}` fails the schema rule `{schema_path}` ({keyword})", excerpt(.instance_path))]
pub struct SchemaViolation {
    /// JSON Pointer into the checked value (`""` for the whole value).
    pub instance_path: String,
    /// JSON Pointer into the schema to the rule that failed.
    pub schema_path: String,
    /// The failed keyword (`type`, `required`, ...).
    pub keyword: String,
}

/// Why a schema does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a valid JSON Schema: {0}")]
pub struct SchemaCompileError(pub String);

impl CompiledSchema {
    pub fn compile(value: Value) -> Result<Self, SchemaCompileError> {
        let validator = jsonschema::validator_for(&value).map_err(|e| SchemaCompileError(e.to_string()))?;
        Ok(Self { value, validator })
    }

    /// Parse JSON text, then [`Self::compile`].
    pub fn from_json_text(text: &str) -> Result<Self, SchemaCompileError> {
        let value = serde_json::from_str(text).map_err(|e| SchemaCompileError(format!("not JSON: {e}")))?;
        Self::compile(value)
    }

    /// The schema as written (what providers are sent).
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// Check `instance`, reporting the first violation.
    pub fn validate(&self, instance: &Value) -> Result<(), SchemaViolation> {
        self.validator.validate(instance).map_err(|error| SchemaViolation {
            instance_path: error.instance_path().as_str().to_owned(),
            schema_path: error.schema_path().as_str().to_owned(),
            keyword: error.kind().keyword().to_owned(),
        })
    }
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
