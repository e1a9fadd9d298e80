//! A deterministic JSON value that validates against a JSON Schema: what the dummy model answers
//! for `response_format: {"type": "json_schema"}` and writes as tool-call arguments.
//!
//! Covers what structured-output schemas use (OpenAI strict mode, pydantic, zod): `type` (one or
//! several, `nullable`), `const`, `enum`, `properties`/`required` (every property is filled, as
//! strict mode requires), `additionalProperties`, `minProperties`, `items`/`prefixItems`,
//! `minItems`/`maxItems`/`uniqueItems`, string lengths, `pattern`, common `format`s, numeric bounds
//! and `multipleOf`, `anyOf`/`oneOf` (first branch), `allOf` (merged), and local `$ref`s (`#/$defs/…`,
//! `#/definitions/…`). Recursive schemas are bounded: past a few nested `$ref`s the generator
//! answers the smallest valid value (required properties only, `minItems` items, a `null` branch).

mod scalars;

use crate::json_size::json_len;
use scalars::{integer, number, readable, string};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::cell::Cell;

/// `$ref`s followed on one path before the generator answers minimal values.
const FULL_REF_DEPTH: u32 = 3;
/// Nesting beyond which the generator gives up (only reached by unsatisfiable schemas).
const MAX_DEPTH: u32 = 64;
/// Items in an array when the schema leaves the count free.
const DEFAULT_ITEMS: u64 = 2;
/// Values generated for one instance at most: a hostile schema (wide and recursive, or asking
/// for millions of items) gets a bounded answer, valid or not. Large schemas get fewer (work is
/// about values × schema size), never fewer than `MIN_VALUES`.
const MAX_VALUES: u32 = 20_000;
const MIN_VALUES: u32 = 200;
const MAX_WORK_BYTES: usize = 64 * 1024 * 1024;
/// The size of one instance at most (as JSON text, roughly): past it strings get no padding and
/// `const`/`enum` values are no longer copied, so a schema that asks for 20,000 strings of
/// 65,536 characters, or 20,000 copies of a large `const`, gets a bounded answer.
const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// Keywords that say nothing about validity, so they need not be merged into a `$ref`'s target.
const ANNOTATIONS: [&str; 8] = [
    "title",
    "description",
    "default",
    "examples",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// A value valid against `schema`, varied by `seed` where the schema leaves a choice.
pub(crate) fn instance_for(schema: &Value, seed: u64) -> Value {
    let size = json_len(schema).max(1);
    let budget = u32::try_from(MAX_WORK_BYTES / size).unwrap_or(MAX_VALUES);
    let generator = Generator {
        root: schema,
        budget: Cell::new(budget.clamp(MIN_VALUES, MAX_VALUES)),
        bytes: Cell::new(MAX_OUTPUT_BYTES),
    };
    generator.value(schema, Place::root(seed))
}

/// Where in the instance the generator is.
#[derive(Debug, Clone, Copy)]
struct Place<'a> {
    seed: u64,
    depth: u32,
    refs: u32,
    /// The property the value belongs to, used to make strings readable.
    name: &'a str,
}

impl<'a> Place<'a> {
    fn root(seed: u64) -> Self {
        Self {
            seed,
            depth: 0,
            refs: 0,
            name: "",
        }
    }

    fn child(self, name: &'a str) -> Self {
        Self {
            seed: mix(self.seed, name.as_bytes()),
            depth: self.depth + 1,
            name,
            ..self
        }
    }

    fn item(self, index: u64) -> Self {
        Self {
            seed: mix(self.seed, &index.to_le_bytes()),
            depth: self.depth + 1,
            ..self
        }
    }

    fn deeper(self) -> Self {
        Self {
            depth: self.depth + 1,
            ..self
        }
    }

    /// Past the `$ref` budget: answer the smallest valid values so recursion ends.
    fn minimal(self) -> bool {
        self.refs >= FULL_REF_DEPTH
    }
}

struct Generator<'r> {
    root: &'r Value,
    /// Values that may still be generated.
    budget: Cell<u32>,
    /// Bytes the instance may still grow by.
    bytes: Cell<usize>,
}

impl<'r> Generator<'r> {
    fn value(&self, schema: &Value, place: Place<'_>) -> Value {
        let Some(budget) = self.budget.get().checked_sub(1) else {
            return Value::Null;
        };
        self.budget.set(budget);
        if place.depth > MAX_DEPTH {
            return Value::Null;
        }
        let (schema, place) = self.flattened(schema, place);
        let Value::Object(schema) = schema.as_ref() else {
            // `true` (anything) or `false` (nothing is valid).
            return match schema.as_ref() {
                Value::Bool(true) => Value::String(readable(place.name, place.seed)),
                _ => Value::Null,
            };
        };
        if let Some(constant) = schema.get("const") {
            return self.copied(constant);
        }
        if let Some(options) = schema.get("enum").and_then(Value::as_array).filter(|v| !v.is_empty()) {
            return self.copied(&options[pick(place, options.len())]);
        }
        for keyword in ["anyOf", "oneOf"] {
            if let Some(branches) = schema.get(keyword).and_then(Value::as_array).filter(|v| !v.is_empty()) {
                let branch = &branches[self.branch_index(branches, place)];
                let siblings = schema
                    .keys()
                    .any(|k| k != keyword && !ANNOTATIONS.contains(&k.as_str()));
                if !siblings {
                    return self.value(branch, place.deeper());
                }
                let mut rest = schema.clone();
                rest.remove(keyword);
                return self.value(&merged(rest, branch.clone()), place.deeper());
            }
        }
        match chosen_type(schema, place).as_deref() {
            Some("null") => Value::Null,
            Some("boolean") => Value::Bool(place.seed % 2 == 1),
            Some("integer") => integer(schema, place.seed),
            Some("number") => number(schema, place.seed),
            Some("string") => {
                let text = string(schema, place.name, place.seed, self.bytes.get());
                self.charge(text.len());
                Value::String(text)
            }
            Some("array") => self.array(schema, place),
            Some("object") => self.object(schema, place),
            // No type and nothing to infer one from: any value will do.
            _ => Value::String(readable(place.name, place.seed)),
        }
    }

    /// A copy of a schema's value (`const`, `enum`) while the output budget lasts, else `null`.
    fn copied(&self, value: &Value) -> Value {
        let size = json_len(value);
        if size > self.bytes.get() {
            return Value::Null;
        }
        self.charge(size);
        value.clone()
    }

    fn charge(&self, bytes: usize) {
        self.bytes.set(self.bytes.get().saturating_sub(bytes));
    }

    /// The schema with `$ref` and `allOf` resolved into one object, and the place charged for
    /// each `$ref` followed. A plain `$ref` is borrowed, not copied.
    fn flattened<'s, 'p>(&self, schema: &'s Value, mut place: Place<'p>) -> (Cow<'s, Value>, Place<'p>)
    where
        'r: 's,
    {
        let mut current = Cow::Borrowed(schema);
        for _ in 0..MAX_DEPTH {
            if place.depth > MAX_DEPTH {
                break;
            }
            let Value::Object(map) = current.as_ref() else {
                return (current, place);
            };
            if let Some(reference) = map.get("$ref") {
                place.refs += 1;
                place.depth += 1;
                let target = reference.as_str().and_then(|r| self.resolve(r));
                let siblings = map.keys().any(|k| k != "$ref" && !ANNOTATIONS.contains(&k.as_str()));
                current = match (target, siblings) {
                    (Some(target), false) => Cow::Borrowed(target),
                    (target, _) => {
                        let mut rest = map.clone();
                        rest.remove("$ref");
                        Cow::Owned(merged(rest, target.cloned().unwrap_or(Value::Bool(true))))
                    }
                };
                continue;
            }
            if let Some(Value::Array(parts)) = map.get("allOf") {
                let mut all = map.clone();
                all.remove("allOf");
                let mut all = Value::Object(all);
                for part in parts {
                    let (part, _) = self.flattened(part, place.deeper());
                    all = match all {
                        Value::Object(base) => merged(base, part.into_owned()),
                        other => other,
                    };
                }
                current = Cow::Owned(all);
                continue;
            }
            return (current, place);
        }
        (Cow::Owned(Value::Bool(false)), place)
    }

    /// A local reference (`#`, `#/$defs/Name`, any JSON pointer into the root schema).
    fn resolve(&self, reference: &str) -> Option<&'r Value> {
        let pointer = reference.strip_prefix('#')?;
        self.root.pointer(pointer)
    }

    /// The first branch, or when recursion must end the first one that ends it.
    fn branch_index(&self, branches: &[Value], place: Place<'_>) -> usize {
        if !place.minimal() {
            return 0;
        }
        let is_null = |b: &Value| b.get("type").and_then(Value::as_str) == Some("null");
        let no_ref = |b: &Value| b.get("$ref").is_none();
        branches
            .iter()
            .position(is_null)
            .or_else(|| branches.iter().position(no_ref))
            .unwrap_or(0)
    }

    fn array(&self, schema: &Map<String, Value>, place: Place<'_>) -> Value {
        let min = unsigned(schema, "minItems").unwrap_or(0);
        let max = unsigned(schema, "maxItems");
        let prefix: &[Value] = match (schema.get("prefixItems"), schema.get("items")) {
            (Some(Value::Array(prefix)), _) | (None, Some(Value::Array(prefix))) => prefix,
            _ => &[],
        };
        let rest = match schema.get("prefixItems") {
            Some(_) => schema.get("items"),
            None if matches!(schema.get("items"), Some(Value::Array(_))) => schema.get("additionalItems"),
            None => schema.get("items"),
        };
        let mut count = if place.minimal() { min } else { min.max(DEFAULT_ITEMS) };
        if rest == Some(&Value::Bool(false)) {
            count = count.min(prefix.len() as u64);
        }
        if let Some(max) = max {
            count = count.min(max);
        }
        let any = Value::Bool(true);
        let unique = schema.get("uniqueItems") == Some(&Value::Bool(true));
        let mut items: Vec<Value> = Vec::new();
        for index in 0..count {
            if self.budget.get() == 0 {
                break;
            }
            let item_schema = usize::try_from(index)
                .ok()
                .and_then(|i| prefix.get(i))
                .or(rest)
                .unwrap_or(&any);
            let mut item = self.value(item_schema, place.item(index));
            // Distinct items for `uniqueItems`: other seeds until one differs.
            let mut attempt = 0;
            while unique && items.contains(&item) && attempt < 16 {
                attempt += 1;
                item = self.value(item_schema, place.item(index.saturating_add(attempt * 1_000)));
            }
            if unique && items.contains(&item) {
                break;
            }
            items.push(item);
        }
        Value::Array(items)
    }

    fn object(&self, schema: &Map<String, Value>, place: Place<'_>) -> Value {
        let empty = Map::new();
        let properties = schema.get("properties").and_then(Value::as_object).unwrap_or(&empty);
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let additional = schema.get("additionalProperties");
        let any = Value::Bool(true);
        let extra_schema = match additional {
            Some(Value::Bool(false)) => None,
            Some(schema @ Value::Object(_)) => Some(schema),
            _ => Some(&any),
        };
        let mut object = Map::new();
        for (name, property) in properties {
            if self.budget.get() == 0 {
                break;
            }
            if place.minimal() && !required.contains(&name.as_str()) {
                continue;
            }
            object.insert(name.clone(), self.value(property, place.child(name)));
        }
        for name in required {
            if self.budget.get() > 0 && !object.contains_key(name) {
                let property = extra_schema.unwrap_or(&any);
                object.insert(name.to_owned(), self.value(property, place.child(name)));
            }
        }
        let min = unsigned(schema, "minProperties").unwrap_or(0);
        if let Some(extra_schema) = extra_schema {
            let mut index = 0;
            while (object.len() as u64) < min && index < min.saturating_add(16) && self.budget.get() > 0 {
                let name = format!("extra_{index}");
                index += 1;
                if !object.contains_key(&name) {
                    let value = self.value(extra_schema, place.child(&name));
                    object.insert(name, value);
                }
            }
        }
        Value::Object(object)
    }
}

/// `base` with the keywords of `extra` added: `properties` and `required` are united, otherwise
/// `base` wins. `true` adds nothing; `false` makes the whole schema `false`.
fn merged(mut base: Map<String, Value>, extra: Value) -> Value {
    let extra = match extra {
        Value::Object(extra) => extra,
        Value::Bool(false) => return Value::Bool(false),
        _ => return Value::Object(base),
    };
    for (key, value) in extra {
        match (key.as_str(), base.get_mut(&key)) {
            ("properties", Some(Value::Object(properties))) => {
                if let Value::Object(more) = value {
                    for (name, schema) in more {
                        properties.entry(name).or_insert(schema);
                    }
                }
            }
            ("required", Some(Value::Array(required))) => {
                for name in value.as_array().into_iter().flatten() {
                    if !required.contains(name) {
                        required.push(name.clone());
                    }
                }
            }
            (_, Some(_)) => {}
            (_, None) => {
                base.insert(key, value);
            }
        }
    }
    Value::Object(base)
}

/// The type to produce: the declared one (the first non-null of several, or `null` when
/// recursion must end), else the one the keywords imply.
fn chosen_type(schema: &Map<String, Value>, place: Place<'_>) -> Option<String> {
    let mut types: Vec<&str> = match schema.get("type") {
        Some(Value::String(single)) => vec![single.as_str()],
        Some(Value::Array(several)) => several.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if schema.get("nullable") == Some(&Value::Bool(true)) {
        types.push("null");
    }
    if types.is_empty() {
        let has = |keys: &[&str]| keys.iter().any(|k| schema.contains_key(*k));
        return if has(&["properties", "required", "additionalProperties", "minProperties"]) {
            Some("object".into())
        } else if has(&["items", "prefixItems", "minItems", "maxItems"]) {
            Some("array".into())
        } else if has(&["minLength", "maxLength", "pattern", "format"]) {
            Some("string".into())
        } else if has(&[
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "multipleOf",
        ]) {
            Some("number".into())
        } else {
            None
        };
    }
    if place.minimal() && types.contains(&"null") {
        return Some("null".into());
    }
    types
        .iter()
        .find(|t| **t != "null")
        .or(types.first())
        .map(|t| (*t).to_owned())
}

pub(super) fn unsigned(schema: &Map<String, Value>, key: &str) -> Option<u64> {
    schema.get(key).and_then(Value::as_f64).map(|v| v.max(0.0) as u64)
}

/// An index below `len` chosen by the seed (the first when recursion must end).
fn pick(place: Place<'_>, len: usize) -> usize {
    if place.minimal() || len == 0 {
        return 0;
    }
    usize::try_from(place.seed % len as u64).unwrap_or(0)
}

/// Mix bytes into a seed (SplitMix64 steps): stable across platforms and releases.
pub fn mix(seed: u64, bytes: &[u8]) -> u64 {
    let mut state = seed ^ 0x6a09_e667_f3bc_c908;
    for chunk in bytes.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        state = splitmix(state ^ u64::from_le_bytes(word));
    }
    splitmix(state ^ bytes.len() as u64)
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests;
