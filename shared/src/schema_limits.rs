//! What one client-supplied JSON Schema may cost, checked before it is compiled: its size, its
//! nesting, its `$ref`s (a validator follows a `$ref` chain by recursion, so a long chain is a
//! deep stack), and the sizes of its `enum`s and `pattern`s. The walk is iterative: a schema
//! cannot overflow the stack while it is measured.

use crate::json_size::json_len;
use serde_json::Value;
use std::collections::HashMap;

/// The bounds of one schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SchemaLimits {
    /// Serialized size.
    pub max_bytes: usize,
    /// JSON values in the schema (objects, arrays, strings, numbers, ...).
    pub max_nodes: usize,
    /// Nesting of JSON objects and arrays.
    pub max_depth: usize,
    /// `$ref`, `$dynamicRef` and `$recursiveRef` keywords in all.
    pub max_refs: usize,
    /// `$ref`s followed one after the other (a local reference whose target holds another).
    pub max_ref_chain: usize,
    /// Values of one `enum`.
    pub max_enum_values: usize,
    /// Characters of one `pattern` (or `patternProperties` key).
    pub max_pattern_chars: usize,
}

/// The bounds every client schema is held to (`output_schema`, `output_schemas[i]`, tool
/// `parameters`, `response_format.json_schema.schema`): far above what structured-output schemas
/// use (OpenAI's strict mode allows 5,000 properties, 10 levels of nesting and 1,000 enum values).
pub(crate) const SCHEMA_LIMITS: SchemaLimits = SchemaLimits {
    max_bytes: 256 * 1024,
    max_nodes: 20_000,
    max_depth: 64,
    max_refs: 1_000,
    max_ref_chain: 32,
    max_enum_values: 1_000,
    max_pattern_chars: 1_000,
};

/// Why a schema is refused before it is compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SchemaLimitError {
    #[error("it is larger than {max} bytes")]
    TooLarge { max: usize },
    #[error("it has more than {max} values")]
    TooManyNodes { max: usize },
    #[error("it nests deeper than {max} levels")]
    TooDeep { max: usize },
    #[error("it has more than {max} `$ref`s")]
    TooManyRefs { max: usize },
    #[error("it has a chain of more than {max} `$ref`s (a `$ref` whose target holds another `$ref`, and so on)")]
    RefChainTooLong { max: usize },
    #[error("an `enum` at `{at}` has more than {max} values")]
    EnumTooLarge { at: String, max: usize },
    #[error("a pattern at `{at}` is longer than {max} characters")]
    PatternTooLong { at: String, max: usize },
}

impl SchemaLimits {
    /// Check `schema` against these bounds.
    pub fn check(&self, schema: &Value) -> Result<(), SchemaLimitError> {
        if json_len(schema) > self.max_bytes {
            return Err(SchemaLimitError::TooLarge { max: self.max_bytes });
        }
        let mut refs: Vec<(String, String)> = Vec::new();
        let mut nodes = 0usize;
        // (value, pointer to it, depth): the walk keeps its own stack.
        let mut stack: Vec<(&Value, String, usize)> = vec![(schema, String::new(), 0)];
        while let Some((value, pointer, depth)) = stack.pop() {
            nodes = nodes.saturating_add(1);
            if nodes > self.max_nodes {
                return Err(SchemaLimitError::TooManyNodes { max: self.max_nodes });
            }
            if depth > self.max_depth {
                return Err(SchemaLimitError::TooDeep { max: self.max_depth });
            }
            match value {
                Value::Object(map) => {
                    for (key, child) in map {
                        let at = format!("{pointer}/{}", escape(key));
                        self.check_keyword(key, child, &at, &mut refs, &pointer)?;
                        stack.push((child, at, depth.saturating_add(1)));
                    }
                }
                Value::Array(items) => {
                    for (index, child) in items.iter().enumerate() {
                        stack.push((child, format!("{pointer}/{index}"), depth.saturating_add(1)));
                    }
                }
                _ => {}
            }
        }
        if refs.len() > self.max_refs {
            return Err(SchemaLimitError::TooManyRefs { max: self.max_refs });
        }
        if longest_ref_chain(&refs) > self.max_ref_chain {
            return Err(SchemaLimitError::RefChainTooLong {
                max: self.max_ref_chain,
            });
        }
        Ok(())
    }

    fn check_keyword(
        &self,
        key: &str,
        value: &Value,
        at: &str,
        refs: &mut Vec<(String, String)>,
        holder: &str,
    ) -> Result<(), SchemaLimitError> {
        let bounded = |at: &str| crate::user_text::excerpt(at).into_owned();
        match (key, value) {
            ("$ref" | "$dynamicRef" | "$recursiveRef", Value::String(target)) => {
                refs.push((holder.to_owned(), target.clone()));
            }
            ("enum", Value::Array(values)) if values.len() > self.max_enum_values => {
                return Err(SchemaLimitError::EnumTooLarge {
                    at: bounded(at),
                    max: self.max_enum_values,
                });
            }
            ("pattern", Value::String(pattern)) if pattern.chars().count() > self.max_pattern_chars => {
                return Err(SchemaLimitError::PatternTooLong {
                    at: bounded(at),
                    max: self.max_pattern_chars,
                });
            }
            ("patternProperties", Value::Object(patterns))
                if patterns.keys().any(|p| p.chars().count() > self.max_pattern_chars) =>
            {
                return Err(SchemaLimitError::PatternTooLong {
                    at: bounded(at),
                    max: self.max_pattern_chars,
                });
            }
            _ => {}
        }
        Ok(())
    }
}

/// The longest chain of `$ref`s: a reference counts one, plus the longest chain of any reference
/// inside its target (local `#/…` pointers; `#` is the root). A reference that leads back into
/// itself (a recursive schema) ends its chain. Other references (anchors, `$id`s) count one each:
/// the total is bounded by `max_refs`.
fn longest_ref_chain(refs: &[(String, String)]) -> usize {
    // For each reference: the references inside its target.
    let targets: Vec<Option<&str>> = refs
        .iter()
        .map(|(_, target)| target.strip_prefix('#').filter(|p| p.is_empty() || p.starts_with('/')))
        .collect();
    let inside = |target: &str| -> Vec<usize> {
        let below = format!("{target}/");
        refs.iter()
            .enumerate()
            .filter(|(_, (holder, _))| target.is_empty() || holder == target || holder.starts_with(&below))
            .map(|(index, _)| index)
            .collect()
    };
    let successors: Vec<Vec<usize>> = targets.iter().map(|t| t.map(inside).unwrap_or_default()).collect();
    // Longest path by an iterative depth-first search; a reference on the current path is a
    // cycle and adds nothing.
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        New,
        OnPath,
        Done,
    }
    let mut state = vec![State::New; refs.len()];
    let mut length: HashMap<usize, usize> = HashMap::new();
    let mut best = 0;
    for start in 0..refs.len() {
        if state[start] != State::New {
            continue;
        }
        let mut path: Vec<(usize, usize)> = vec![(start, 0)];
        state[start] = State::OnPath;
        while let Some((node, next)) = path.last().copied() {
            if let Some(&child) = successors[node].get(next) {
                if let Some(top) = path.last_mut() {
                    top.1 = next.saturating_add(1);
                }
                if state[child] == State::New {
                    state[child] = State::OnPath;
                    path.push((child, 0));
                }
                continue;
            }
            let longest_child = successors[node]
                .iter()
                .filter(|c| state[**c] == State::Done)
                .filter_map(|c| length.get(c))
                .max()
                .copied()
                .unwrap_or(0);
            let own = longest_child.saturating_add(1);
            length.insert(node, own);
            best = best.max(own);
            state[node] = State::Done;
            path.pop();
        }
    }
    best
}

/// A JSON Pointer token (`~` and `/` escaped).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
#[path = "schema_limits_tests.rs"]
pub(crate) mod tests;
