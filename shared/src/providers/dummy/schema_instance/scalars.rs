//! Strings and numbers for [`super::instance_for`]: lengths, patterns, formats, bounds, multiples.

use super::{mix, unsigned};
use rand::rngs::StdRng;
use rand::SeedableRng;
use regex_syntax::hir::{Hir, HirKind};
use serde_json::{Map, Number, Value};

/// The longest string generated (a larger `minLength` is not met).
const MAX_STRING_CHARS: u64 = 65_536;
/// The longest match a `pattern` may have for the generator to use it.
const MAX_PATTERN_MATCH: u64 = 10_000;
/// Extra repetitions of an unbounded `*`, `+` or `{n,}` in a pattern.
const REPEAT: u32 = 8;

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

pub(super) fn integer(schema: &Map<String, Value>, seed: u64) -> Value {
    let (lower, upper) = bounds(schema);
    // Integer bounds, inclusive. The casts saturate (`1e308` is `i128::MAX`) and every step below
    // saturates, so no bound a client writes can overflow.
    let low = lower.map(|(v, exclusive)| {
        if exclusive {
            (v.floor() as i128).saturating_add(1)
        } else {
            v.ceil() as i128
        }
    });
    let high = upper.map(|(v, exclusive)| {
        if exclusive {
            (v.ceil() as i128).saturating_sub(1)
        } else {
            v.floor() as i128
        }
    });
    let spread = i128::from(seed % 10);
    let mut value = match (low, high) {
        (Some(low), Some(high)) => low.saturating_add(spread.min(high.saturating_sub(low).max(0))),
        (Some(low), None) => low.saturating_add(spread),
        (None, Some(high)) => high.saturating_sub(spread),
        (None, None) => i128::from(seed % 100),
    };
    let step = schema.get("multipleOf").and_then(Value::as_f64).unwrap_or(1.0);
    if step >= 1.0 && step.fract() == 0.0 {
        let step = (step as i128).max(1);
        value = value.div_euclid(step).saturating_mul(step);
        if low.is_some_and(|low| value < low) {
            value = value.saturating_add(step);
        }
    } else if let Some(multiple) = multiple_within(lower, upper, step, seed, true) {
        value = multiple.round() as i128;
    }
    let value = i64::try_from(value).unwrap_or(if value < 0 { i64::MIN } else { i64::MAX });
    Value::Number(Number::from(value))
}

pub(super) fn number(schema: &Map<String, Value>, seed: u64) -> Value {
    let (lower, upper) = bounds(schema);
    if let Some(step) = schema.get("multipleOf").and_then(Value::as_f64) {
        // A whole multiple is exact in binary floating point: prefer one when it fits the bounds.
        let whole = multiple_within(lower, upper, step, seed, true);
        return match whole.or_else(|| multiple_within(lower, upper, step, seed, false)) {
            Some(value) if value.fract() == 0.0 => integer(schema, seed),
            Some(value) => Number::from_f64(value).map_or(Value::Null, Value::Number),
            None => integer(schema, seed),
        };
    }
    let fraction = (seed % 7 + 1) as f64 / 8.0;
    let value = match (lower, upper) {
        (Some((low, _)), Some((high, _))) if high > low => low + (high - low) * fraction,
        (Some((low, exclusive)), Some(_)) => low + if exclusive { 0.5 } else { 0.0 },
        (Some((low, _)), None) => low + 1.0 + (seed % 10) as f64 + 0.5,
        (None, Some((high, _))) => high - 1.0 - (seed % 10) as f64 - 0.5,
        (None, None) => (seed % 1000) as f64 / 10.0 + 0.5,
    };
    Number::from_f64(value).map_or(Value::Null, Value::Number)
}

/// How many multiples of `step` are tried when looking for a whole one.
const MULTIPLE_SEARCH: i64 = 1000;

/// A multiple of `step` within the bounds (a whole number when `whole`), written with no more
/// decimals than `step` has, so validators that divide (`0.15 / 0.05`) see the decimal the schema
/// means; `None` when no such multiple exists (or none is found near the bounds).
fn multiple_within(lower: Bound, upper: Bound, step: f64, seed: u64, whole: bool) -> Option<f64> {
    if !(step.is_finite() && step > 0.0) {
        return None;
    }
    let decimals = decimals_of(step);
    let at = |k: i64| round_to(k as f64 * step, decimals);
    // Multiples are counted in `i64` (the casts saturate) with saturating steps: bounds far
    // beyond the step (`1e308`, or `1e-300` steps) cannot overflow.
    let first = lower.map(|(v, exclusive)| {
        let k = (v / step).ceil() as i64;
        if at(k) < v || (exclusive && at(k) <= v) {
            k.saturating_add(1)
        } else {
            k
        }
    });
    let last = upper.map(|(v, exclusive)| {
        let k = (v / step).floor() as i64;
        if at(k) > v || (exclusive && at(k) >= v) {
            k.saturating_sub(1)
        } else {
            k
        }
    });
    let spread = (seed % 10) as i64;
    let start = match (first, last) {
        (Some(first), Some(last)) if first > last => return None,
        (Some(first), Some(last)) => first.saturating_add(spread.min(last.saturating_sub(first))),
        (Some(first), None) => first.saturating_add(spread),
        (None, Some(last)) => last.saturating_sub(spread),
        (None, None) => spread,
    };
    let fits = |k: i64| first.is_none_or(|f| k >= f) && last.is_none_or(|l| k <= l);
    let is_whole = |value: f64| (value - value.round()).abs() < 1e-9;
    (0..MULTIPLE_SEARCH)
        .flat_map(|offset| [start.saturating_add(offset), start.saturating_sub(offset)])
        .filter(|k| fits(*k))
        .map(at)
        .find(|value| value.is_finite() && within(*value, lower, upper) && (!whole || is_whole(*value)))
}

/// Whether `value` is inside the bounds (a saturated multiple count can land outside them).
fn within(value: f64, lower: Bound, upper: Bound) -> bool {
    let above = lower.is_none_or(|(low, exclusive)| if exclusive { value > low } else { value >= low });
    let below = upper.is_none_or(|(high, exclusive)| if exclusive { value < high } else { value <= high });
    above && below
}

/// The decimals in the shortest decimal form of `value` (at most 15).
fn decimals_of(value: f64) -> i32 {
    let text = format!("{value}");
    match text.split_once('.') {
        Some((_, fraction)) => i32::try_from(fraction.len()).unwrap_or(15).min(15),
        None => 0,
    }
}

fn round_to(value: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (value * scale).round() / scale
}

/// A string for `schema`, padded to at most `max_bytes` (the instance's remaining budget).
pub(super) fn string(schema: &Map<String, Value>, name: &str, seed: u64, max_bytes: usize) -> String {
    let room = u64::try_from(max_bytes).unwrap_or(u64::MAX);
    let min = unsigned(schema, "minLength")
        .unwrap_or(0)
        .min(MAX_STRING_CHARS)
        .min(room);
    let max = unsigned(schema, "maxLength");
    let fits = |text: &str| {
        let length = text.chars().count() as u64;
        length >= min && max.is_none_or(|max| length <= max)
    };
    if let Some(format) = schema.get("format").and_then(Value::as_str) {
        if let Some(text) = formatted(format, seed) {
            return text;
        }
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        if let Some(text) = matching(pattern, seed, &fits) {
            return text;
        }
    }
    let mut text = readable(name, seed);
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
pub(super) fn readable(name: &str, seed: u64) -> String {
    let name: String = name.chars().take(24).collect();
    let name = if name.is_empty() { "dummy".to_owned() } else { name };
    format!("{name}-{:04x}", seed & 0xffff)
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
