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

use rand::rngs::StdRng;
use rand::SeedableRng;
use regex_syntax::hir::{Hir, HirKind};
use serde_json::{Map, Number, Value};
use std::cell::Cell;

/// `$ref`s followed on one path before the generator answers minimal values.
const FULL_REF_DEPTH: u32 = 3;
/// Nesting beyond which the generator gives up (only reached by unsatisfiable schemas).
const MAX_DEPTH: u32 = 64;
/// Items in an array when the schema leaves the count free.
const DEFAULT_ITEMS: u64 = 2;
/// Values generated for one instance at most: a hostile schema (wide and recursive, or asking
/// for millions of items) gets a bounded answer, valid or not.
const MAX_VALUES: u32 = 20_000;
/// The longest string generated (a larger `minLength` is not met).
const MAX_STRING_CHARS: u64 = 65_536;
/// The longest match a `pattern` may have for the generator to use it.
const MAX_PATTERN_MATCH: u64 = 10_000;
/// Extra repetitions of an unbounded `*`, `+` or `{n,}` in a pattern.
const REPEAT: u32 = 8;

/// A value valid against `schema`, varied by `seed` where the schema leaves a choice.
pub fn instance_for(schema: &Value, seed: u64) -> Value {
    let generator = Generator {
        root: schema,
        budget: Cell::new(MAX_VALUES),
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
}

impl Generator<'_> {
    fn value(&self, schema: &Value, place: Place<'_>) -> Value {
        let Some(budget) = self.budget.get().checked_sub(1) else {
            return Value::Null;
        };
        self.budget.set(budget);
        if place.depth > MAX_DEPTH {
            return Value::Null;
        }
        let (schema, place) = self.flattened(schema, place);
        let Value::Object(schema) = &schema else {
            // `true` (anything) or `false` (nothing is valid).
            return match schema {
                Value::Bool(true) => Value::String(readable(place)),
                _ => Value::Null,
            };
        };
        if let Some(constant) = schema.get("const") {
            return constant.clone();
        }
        if let Some(options) = schema.get("enum").and_then(Value::as_array).filter(|v| !v.is_empty()) {
            return options[pick(place, options.len())].clone();
        }
        for keyword in ["anyOf", "oneOf"] {
            if let Some(branches) = schema.get(keyword).and_then(Value::as_array).filter(|v| !v.is_empty()) {
                let branch = branches[self.branch_index(branches, place)].clone();
                let mut rest = schema.clone();
                rest.remove(keyword);
                return self.value(&merged(rest, branch), place.deeper());
            }
        }
        match chosen_type(schema, place).as_deref() {
            Some("null") => Value::Null,
            Some("boolean") => Value::Bool(place.seed % 2 == 1),
            Some("integer") => integer(schema, place),
            Some("number") => number(schema, place),
            Some("string") => Value::String(string(schema, place)),
            Some("array") => self.array(schema, place),
            Some("object") => self.object(schema, place),
            // No type and nothing to infer one from: any value will do.
            _ => Value::String(readable(place)),
        }
    }

    /// The schema with `$ref` and `allOf` resolved into one object, and the place charged for
    /// each `$ref` followed.
    fn flattened<'p>(&self, schema: &Value, mut place: Place<'p>) -> (Value, Place<'p>) {
        let mut current = schema.clone();
        for _ in 0..MAX_DEPTH {
            if place.depth > MAX_DEPTH {
                break;
            }
            let Value::Object(map) = &mut current else {
                return (current, place);
            };
            if let Some(reference) = map.remove("$ref") {
                place.refs += 1;
                place.depth += 1;
                let target = reference.as_str().and_then(|r| self.resolve(r)).cloned();
                current = merged(std::mem::take(map), target.unwrap_or(Value::Bool(true)));
                continue;
            }
            if let Some(Value::Array(parts)) = map.remove("allOf") {
                let mut all = Value::Object(std::mem::take(map));
                for part in &parts {
                    let (part, _) = self.flattened(part, place.deeper());
                    all = match all {
                        Value::Object(base) => merged(base, part),
                        other => other,
                    };
                }
                current = all;
                continue;
            }
            return (current, place);
        }
        (Value::Bool(false), place)
    }

    /// A local reference (`#`, `#/$defs/Name`, any JSON pointer into the root schema).
    fn resolve(&self, reference: &str) -> Option<&Value> {
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
                item = self.value(item_schema, place.item(index + attempt * 1_000));
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
            if place.minimal() && !required.contains(&name.as_str()) {
                continue;
            }
            object.insert(name.clone(), self.value(property, place.child(name)));
        }
        for name in required {
            if !object.contains_key(name) {
                let property = extra_schema.unwrap_or(&any);
                object.insert(name.to_owned(), self.value(property, place.child(name)));
            }
        }
        let min = unsigned(schema, "minProperties").unwrap_or(0);
        if let Some(extra_schema) = extra_schema {
            let mut index = 0;
            while (object.len() as u64) < min && index < min + 16 && self.budget.get() > 0 {
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

fn unsigned(schema: &Map<String, Value>, key: &str) -> Option<u64> {
    schema.get(key).and_then(Value::as_f64).map(|v| v.max(0.0) as u64)
}

/// A numeric bound and whether it is exclusive.
type Bound = Option<(f64, bool)>;

/// Lower and upper numeric bounds (draft 4's boolean `exclusiveMinimum` too).
fn bounds(schema: &Map<String, Value>) -> (Bound, Bound) {
    let number = |key: &str| schema.get(key).and_then(Value::as_f64);
    let flag = |key: &str| schema.get(key) == Some(&Value::Bool(true));
    let lower = match (number("minimum"), number("exclusiveMinimum")) {
        (Some(min), Some(ex)) if ex >= min => Some((ex, true)),
        (Some(min), _) => Some((min, flag("exclusiveMinimum"))),
        (None, Some(ex)) => Some((ex, true)),
        (None, None) => None,
    };
    let upper = match (number("maximum"), number("exclusiveMaximum")) {
        (Some(max), Some(ex)) if ex <= max => Some((ex, true)),
        (Some(max), _) => Some((max, flag("exclusiveMaximum"))),
        (None, Some(ex)) => Some((ex, true)),
        (None, None) => None,
    };
    (lower, upper)
}

fn integer(schema: &Map<String, Value>, place: Place<'_>) -> Value {
    let (lower, upper) = bounds(schema);
    // Integer bounds, inclusive; i128 so no arithmetic below can overflow.
    let low = lower.map(|(v, exclusive)| {
        if exclusive {
            v.floor() as i128 + 1
        } else {
            v.ceil() as i128
        }
    });
    let high = upper.map(|(v, exclusive)| {
        if exclusive {
            v.ceil() as i128 - 1
        } else {
            v.floor() as i128
        }
    });
    let spread = i128::from(place.seed % 10);
    let mut value = match (low, high) {
        (Some(low), Some(high)) => low + spread.min((high - low).max(0)),
        (Some(low), None) => low + spread,
        (None, Some(high)) => high - spread,
        (None, None) => i128::from(place.seed % 100),
    };
    let step = schema.get("multipleOf").and_then(Value::as_f64).unwrap_or(1.0);
    if step >= 1.0 && step.fract() == 0.0 {
        let step = step as i128;
        value = value.div_euclid(step) * step;
        if low.is_some_and(|low| value < low) {
            value += step;
        }
    }
    let value = i64::try_from(value).unwrap_or(if value < 0 { i64::MIN } else { i64::MAX });
    Value::Number(Number::from(value))
}

fn number(schema: &Map<String, Value>, place: Place<'_>) -> Value {
    if schema.get("multipleOf").is_some() {
        // A whole multiple is exact in binary floating point; fractional steps are not.
        return integer(schema, place);
    }
    let (lower, upper) = bounds(schema);
    let fraction = (place.seed % 7 + 1) as f64 / 8.0;
    let value = match (lower, upper) {
        (Some((low, _)), Some((high, _))) if high > low => low + (high - low) * fraction,
        (Some((low, exclusive)), Some(_)) => low + if exclusive { 0.5 } else { 0.0 },
        (Some((low, _)), None) => low + 1.0 + (place.seed % 10) as f64 + 0.5,
        (None, Some((high, _))) => high - 1.0 - (place.seed % 10) as f64 - 0.5,
        (None, None) => (place.seed % 1000) as f64 / 10.0 + 0.5,
    };
    Number::from_f64(value).map_or(Value::Null, Value::Number)
}

fn string(schema: &Map<String, Value>, place: Place<'_>) -> String {
    let min = unsigned(schema, "minLength").unwrap_or(0).min(MAX_STRING_CHARS);
    let max = unsigned(schema, "maxLength");
    let fits = |text: &str| {
        let length = text.chars().count() as u64;
        length >= min && max.is_none_or(|max| length <= max)
    };
    if let Some(format) = schema.get("format").and_then(Value::as_str) {
        if let Some(text) = formatted(format, place.seed) {
            return text;
        }
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        if let Some(text) = matching(pattern, place.seed, &fits) {
            return text;
        }
    }
    let mut text = readable(place);
    let length = text.chars().count() as u64;
    if length < min {
        text.extend(std::iter::repeat_n('x', (min - length) as usize));
    }
    if let Some(max) = max {
        text = text.chars().take(max as usize).collect();
    }
    text
}

/// A short readable string: the property name (if any) and a few hex digits of the seed.
fn readable(place: Place<'_>) -> String {
    let name: String = place.name.chars().take(24).collect();
    let name = if name.is_empty() { "dummy".to_owned() } else { name };
    format!("{name}-{:04x}", place.seed & 0xffff)
}

/// A string matching `pattern` whose length `fits`, when the pattern is one the generator knows
/// and its matches are not huge.
fn matching(pattern: &str, seed: u64, fits: &dyn Fn(&str) -> bool) -> Option<String> {
    let hir = regex_syntax::Parser::new()
        .parse(&ascii_classes(unanchored(pattern)))
        .ok()?;
    if size_bound(&hir) > MAX_PATTERN_MATCH {
        return None;
    }
    let generator = rand_regex::Regex::with_hir(hir, REPEAT).ok()?;
    let mut rng = StdRng::seed_from_u64(seed);
    (0..32)
        .map(|_| rand::Rng::sample::<String, _>(&mut rng, &generator))
        .find(|text| fits(text))
}

/// An upper bound of the length a generated match can have, every part counting at least 1 (so
/// the bound also caps the repetition counts the generator multiplies).
fn size_bound(hir: &Hir) -> u64 {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => 1,
        HirKind::Literal(literal) => (literal.0.len() as u64).max(1),
        HirKind::Class(_) => 4,
        HirKind::Repetition(repetition) => {
            let upper = repetition.max.unwrap_or(repetition.min.saturating_add(REPEAT));
            u64::from(upper.max(1)).saturating_mul(size_bound(&repetition.sub))
        }
        HirKind::Capture(capture) => size_bound(&capture.sub),
        HirKind::Concat(parts) => parts.iter().map(size_bound).fold(0, u64::saturating_add),
        HirKind::Alternation(parts) => parts.iter().map(size_bound).max().unwrap_or(1),
    }
}

/// `\d`, `\w` and `\s` spelled as the ASCII sets they are in JSON Schema's (ECMA-262) patterns;
/// the Rust regex syntax would read them as Unicode classes.
fn ascii_classes(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut in_class = false;
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(next) = chars.next() else {
                    out.push(c);
                    break;
                };
                let set = match next {
                    'd' => Some("0-9"),
                    'w' => Some("A-Za-z0-9_"),
                    's' => Some(" \\t\\n\\r\\x0B\\x0C"),
                    _ => None,
                };
                match (set, in_class) {
                    (Some(set), true) => out.push_str(set),
                    (Some(set), false) => {
                        out.push('[');
                        out.push_str(set);
                        out.push(']');
                    }
                    (None, _) => {
                        out.push(c);
                        out.push(next);
                    }
                }
            }
            '[' => {
                in_class = true;
                out.push(c);
            }
            ']' => {
                in_class = false;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

/// The pattern without a leading `^` and a trailing `$`: JSON Schema patterns match anywhere, so
/// a whole match of the rest matches the anchored pattern too.
fn unanchored(pattern: &str) -> &str {
    let pattern = pattern.strip_prefix('^').unwrap_or(pattern);
    match pattern.strip_suffix('$') {
        Some(rest) if !rest.ends_with('\\') || rest.ends_with("\\\\") => rest,
        _ => pattern,
    }
}

/// A value of a well-known string `format`.
fn formatted(format: &str, seed: u64) -> Option<String> {
    let n = seed % 28;
    let hour = seed % 24;
    let minute = (seed / 24) % 60;
    Some(match format {
        "date-time" => format!("2024-{:02}-{:02}T{hour:02}:{minute:02}:00Z", n % 12 + 1, n + 1),
        "date" => format!("2024-{:02}-{:02}", n % 12 + 1, n + 1),
        "time" => format!("{hour:02}:{minute:02}:00Z"),
        "duration" => format!("P{}D", n + 1),
        "email" | "idn-email" => format!("user{n}@example.com"),
        "hostname" | "idn-hostname" => format!("host{n}.example.com"),
        "ipv4" => format!("192.0.2.{}", n + 1),
        "ipv6" => format!("2001:db8::{:x}", n + 1),
        "uri" | "iri" | "url" => format!("https://example.com/item/{n}"),
        "uri-reference" | "iri-reference" => format!("/item/{n}"),
        "uri-template" => "https://example.com/item/{id}".to_owned(),
        "json-pointer" => format!("/item/{n}"),
        "relative-json-pointer" => format!("0/item/{n}"),
        "regex" => "^[a-z]+$".to_owned(),
        "uuid" => {
            let mut bytes = [0u8; 16];
            bytes[..8].copy_from_slice(&seed.to_le_bytes());
            bytes[8..].copy_from_slice(&mix(seed, b"uuid").to_le_bytes());
            uuid::Builder::from_random_bytes(bytes).into_uuid().to_string()
        }
        _ => return None,
    })
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
