//! Every generated instance is checked with an independent validator (the `jsonschema` crate,
//! formats included), for many seeds.

use super::*;
use serde_json::json;

fn assert_valid_for_seeds(schema: &Value) -> Vec<Value> {
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .unwrap_or_else(|e| panic!("bad test schema {schema}: {e}"));
    (0..64u64)
        .map(|seed| seed.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .map(|seed| {
            let instance = instance_for(schema, seed);
            let errors: Vec<String> = validator.iter_errors(&instance).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{instance} is not valid for {schema}: {errors:?}");
            instance
        })
        .collect()
}

#[test]
fn scalars_enums_and_consts() {
    for schema in [
        json!({"type": "string"}),
        json!({"type": "integer"}),
        json!({"type": "number"}),
        json!({"type": "boolean"}),
        json!({"type": "null"}),
        json!({"enum": ["red", "green", "blue"]}),
        json!({"type": "string", "enum": ["a", "b"]}),
        json!({"enum": [1, "two", null, {"three": 3}]}),
        json!({"const": "fixed"}),
        json!({"type": "string", "const": "only"}),
        json!({"type": ["string", "null"]}),
        json!({"type": ["null", "integer"]}),
        json!({"type": "string", "nullable": true}),
        json!({}),
        json!(true),
    ] {
        assert_valid_for_seeds(&schema);
    }
}

#[test]
fn enums_vary_with_the_seed_and_the_same_seed_gives_the_same_value() {
    let schema = json!({"enum": ["red", "green", "blue", "black"]});
    let values = assert_valid_for_seeds(&schema);
    let distinct: std::collections::HashSet<String> = values.iter().map(Value::to_string).collect();
    assert_eq!(distinct.len(), 4, "{distinct:?}");
    assert_eq!(instance_for(&schema, 7), instance_for(&schema, 7));
}

#[test]
fn strict_objects_get_every_property_and_nothing_else() {
    let schema = json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "nickname": {"type": ["string", "null"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "address": {
                "type": "object",
                "additionalProperties": false,
                "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["city", "zip"]
            }
        },
        "required": ["name", "age"]
    });
    for instance in assert_valid_for_seeds(&schema) {
        let object = instance.as_object().unwrap();
        for key in ["name", "age", "nickname", "tags", "address"] {
            assert!(
                object.contains_key(key),
                "optional properties are filled too: {instance}"
            );
        }
        assert!(
            instance["nickname"].is_string(),
            "a nullable property gets a value: {instance}"
        );
    }
}

#[test]
fn strings_honour_lengths_patterns_and_formats() {
    for schema in [
        json!({"type": "string", "minLength": 40}),
        json!({"type": "string", "maxLength": 3}),
        json!({"type": "string", "minLength": 2, "maxLength": 2}),
        json!({"type": "string", "pattern": "^[A-Z]{3}-\\d{4}$"}),
        json!({"type": "string", "pattern": "^(foo|bar)+$", "maxLength": 9}),
        json!({"type": "string", "pattern": "[a-f0-9]{8}"}),
        json!({"type": "string", "pattern": "^cost\\$[0-9]$"}),
        json!({"type": "string", "pattern": "^a\\$"}),
        json!({"type": "string", "pattern": "^.{3}\\d$"}),
    ] {
        assert_valid_for_seeds(&schema);
    }
    for format in [
        "date-time",
        "date",
        "time",
        "duration",
        "email",
        "idn-email",
        "hostname",
        "ipv4",
        "ipv6",
        "uri",
        "uri-reference",
        "iri",
        "uuid",
        "json-pointer",
        "relative-json-pointer",
        "regex",
        "uri-template",
    ] {
        assert_valid_for_seeds(&json!({"type": "string", "format": format}));
    }
}

#[test]
fn numbers_honour_bounds_and_multiples() {
    for schema in [
        json!({"type": "integer", "minimum": 5, "maximum": 5}),
        json!({"type": "integer", "minimum": -3, "maximum": 2}),
        json!({"type": "integer", "exclusiveMinimum": 10}),
        json!({"type": "integer", "exclusiveMaximum": -10}),
        json!({"type": "integer", "minimum": 1, "multipleOf": 7}),
        json!({"type": "integer", "minimum": 9_000_000_000_000_000_000u64}),
        json!({"type": "number", "minimum": 0.1, "maximum": 0.2}),
        json!({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}),
        json!({"type": "number", "exclusiveMinimum": 1.5}),
        json!({"type": "number", "maximum": -100.25}),
        json!({"type": "number", "multipleOf": 5, "minimum": 12}),
        // Fractional steps where no whole number fits the bounds (pydantic's `multiple_of=0.05`).
        json!({"type": "number", "minimum": 0.1, "maximum": 0.2, "multipleOf": 0.05}),
        json!({"type": "number", "minimum": 0.25, "maximum": 0.35, "multipleOf": 0.1}),
        json!({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1, "multipleOf": 0.5}),
        json!({"type": "number", "minimum": 3, "maximum": 4, "multipleOf": 0.25}),
        json!({"type": "integer", "minimum": 1, "maximum": 5, "multipleOf": 2.5}),
        json!({"minimum": 3, "maximum": 4}),
        json!({"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer",
               "minimum": 0, "exclusiveMinimum": true, "maximum": 2, "exclusiveMaximum": true}),
    ] {
        assert_valid_for_seeds(&schema);
    }
}

#[test]
fn arrays_honour_counts_uniqueness_and_tuples() {
    for schema in [
        json!({"type": "array", "items": {"type": "integer"}, "minItems": 5}),
        json!({"type": "array", "items": {"type": "integer"}, "maxItems": 1}),
        json!({"type": "array", "items": {"type": "string"}, "minItems": 0, "maxItems": 0}),
        json!({"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 3, "uniqueItems": true}),
        json!({"type": "array", "items": {"type": "boolean"}, "minItems": 2, "uniqueItems": true}),
        json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false}),
        json!({"type": "array", "prefixItems": [{"const": 1}], "items": {"type": "string"}, "minItems": 3}),
        json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "array",
               "items": [{"type": "string"}, {"type": "null"}], "additionalItems": false}),
        json!({"type": "array"}),
    ] {
        assert_valid_for_seeds(&schema);
    }
}

#[test]
fn unions_intersections_and_open_objects() {
    for schema in [
        json!({"anyOf": [{"type": "string", "format": "email"}, {"type": "null"}]}),
        json!({"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}}, "required": ["kind"],
                          "additionalProperties": false},
                         {"type": "object", "properties": {"kind": {"const": "b"}}, "required": ["kind"],
                          "additionalProperties": false}]}),
        json!({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                         {"properties": {"b": {"type": "string", "minLength": 3}}, "required": ["b"]}]}),
        json!({"type": "object", "minProperties": 3, "additionalProperties": {"type": "integer"}}),
        json!({"type": "object", "required": ["x"], "additionalProperties": {"type": "boolean"}}),
        json!({"type": "object", "properties": {"any": true, "none_allowed": {"type": "null"}}}),
        json!({"required": ["implied"], "properties": {"implied": {"maxLength": 2}}}),
    ] {
        assert_valid_for_seeds(&schema);
    }
}

/// What pydantic (through the OpenAI SDK's strict-schema conversion) sends for nested models,
/// enums, optionals, lists and literals.
#[test]
fn pydantic_style_schemas_with_defs() {
    let schema = json!({
        "$defs": {
            "Color": {"enum": ["red", "green"], "title": "Color", "type": "string"},
            "Address": {
                "type": "object", "title": "Address", "additionalProperties": false,
                "properties": {
                    "street": {"type": "string", "title": "Street"},
                    "country": {"type": "string", "const": "NO"}
                },
                "required": ["street", "country"]
            }
        },
        "type": "object", "title": "Person", "additionalProperties": false,
        "properties": {
            "name": {"type": "string", "title": "Name"},
            "favourite": {"$ref": "#/$defs/Color"},
            "home": {"$ref": "#/$defs/Address", "description": "Where they live"},
            "work": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}], "default": null},
            "born": {"type": "string", "format": "date"},
            "id": {"type": "string", "format": "uuid"},
            "mode": {"type": "string", "enum": ["fast", "slow"]},
            "scores": {"type": "array", "items": {"type": "number"}},
            "friends": {"type": "array", "items": {"$ref": "#/definitions/Friend"}}
        },
        "definitions": {
            "Friend": {"type": "object", "properties": {"alias": {"type": "string"}},
                       "required": ["alias"], "additionalProperties": false}
        },
        "required": ["name", "favourite", "home", "work", "born", "id", "mode", "scores", "friends"]
    });
    for instance in assert_valid_for_seeds(&schema) {
        assert!(instance["work"].is_object(), "the first branch is taken: {instance}");
        assert!(!instance["friends"].as_array().unwrap().is_empty(), "{instance}");
    }
}

#[test]
fn recursive_schemas_end() {
    let tree = json!({
        "$defs": {"Node": {
            "type": "object", "additionalProperties": false,
            "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
            "required": ["value", "children"]
        }},
        "$ref": "#/$defs/Node"
    });
    let list = json!({
        "$defs": {"Link": {
            "type": "object",
            "properties": {"label": {"type": "string"}, "next": {"anyOf": [{"$ref": "#/$defs/Link"}, {"type": "null"}]}},
            "required": ["label", "next"]
        }},
        "$ref": "#/$defs/Link"
    });
    let root_recursion = json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "parent": {"$ref": "#"}},
        "required": ["name"]
    });
    let nullable_recursion = json!({
        "$defs": {"N": {"type": ["object", "null"], "properties": {"n": {"$ref": "#/$defs/N"}}, "required": ["n"]}},
        "$ref": "#/$defs/N"
    });
    for schema in [tree, list, root_recursion, nullable_recursion] {
        let instances = assert_valid_for_seeds(&schema);
        assert!(instances[0].to_string().len() < 20_000, "{}", instances[0]);
    }
    // A schema that only loops ends too (with a value that cannot be valid: there is none).
    let endless = json!({"$defs": {"A": {"anyOf": [{"$ref": "#/$defs/A"}]}}, "$ref": "#/$defs/A"});
    let _ = instance_for(&endless, 1);
    let _ = instance_for(&json!({"$ref": "#"}), 1);
    let _ = instance_for(&json!({"$ref": "#/nowhere"}), 1);
}

#[test]
fn mixing_is_stable() {
    // The same value in every build: answers must not change between releases.
    assert_eq!(mix(1, b"abc"), 3_974_801_516_315_447_402);
    assert_ne!(mix(1, b"abc"), mix(2, b"abc"));
    assert_ne!(mix(1, b"abc"), mix(1, b"abd"));
    assert_ne!(mix(1, b""), mix(1, b"\0"));
}

#[test]
fn hostile_schemas_get_a_bounded_answer_quickly() {
    let wide: serde_json::Map<String, Value> = (0..50).map(|i| (format!("p{i}"), json!({"$ref": "#"}))).collect();
    let names: Vec<String> = wide.keys().cloned().collect();
    let wide_recursive = json!({"type": "object", "properties": wide, "required": names});
    let huge: serde_json::Map<String, Value> = (0..20_000).map(|i| (format!("p{i}"), json!({"$ref": "#"}))).collect();
    let huge_names: Vec<String> = huge.keys().cloned().collect();
    let huge_recursive = json!({"type": "object", "properties": huge, "required": huge_names});
    for schema in [
        wide_recursive,
        huge_recursive,
        json!({"type": "array", "items": {"type": "string"}, "minItems": 1_000_000_000u64}),
        json!({"type": "string", "minLength": 1_000_000_000u64}),
        json!({"type": "object", "minProperties": 1_000_000_000u64}),
        json!({"type": "string", "pattern": "(a{1000}){1000}"}),
        json!({"type": "string", "pattern": "((((){1000}){1000}){1000}){1000}"}),
        json!({"type": "string", "pattern": "a{4294967295}"}),
        json!({"type": "string", "pattern": "(a*){4294967295}"}),
        json!({"type": "string", "pattern": "(?=lookahead)x"}),
        json!({"type": "string", "pattern": "[unclosed"}),
    ] {
        let started = std::time::Instant::now();
        let instance = instance_for(&schema, 3);
        assert!(instance.to_string().len() < 2_000_000, "{schema}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{schema}");
    }
}

/// #26 C7: bounds and steps at the edges of `f64` are arithmetic on client numbers; none may
/// overflow (debug builds panic on integer overflow). The answer need not be valid (some of
/// these schemas have no integer at all), only an answer.
#[test]
fn extreme_numeric_bounds_do_not_overflow() {
    for schema in [
        json!({"type": "integer", "minimum": 1e308}),
        json!({"type": "integer", "maximum": -1e308}),
        json!({"type": "integer", "minimum": 1e308, "maximum": -1e308}),
        json!({"type": "integer", "minimum": -1e308, "maximum": 1e308}),
        json!({"type": "integer", "exclusiveMinimum": 1e308}),
        json!({"type": "integer", "exclusiveMaximum": -1e308}),
        json!({"type": "integer", "minimum": 1e308, "multipleOf": 1e300}),
        json!({"type": "integer", "maximum": -1e308, "multipleOf": 0.5}),
        json!({"type": "number", "multipleOf": 1e-300, "minimum": 1}),
        json!({"type": "number", "multipleOf": 1e-300, "maximum": -1}),
        json!({"type": "number", "multipleOf": 1e-300, "minimum": 1e308, "maximum": -1e308}),
        json!({"type": "number", "minimum": 1e308}),
        json!({"type": "number", "minimum": -1e308, "maximum": 1e308}),
        json!({"type": "number", "multipleOf": 1e308, "minimum": -1e308}),
        json!({"type": "object", "minProperties": 1e300}),
        json!({"type": "array", "minItems": 1e300, "uniqueItems": true, "items": {"enum": [1]}}),
    ] {
        for seed in [0, 7, u64::MAX] {
            let _ = instance_for(&schema, seed);
        }
    }
}

#[test]
fn a_small_multiple_above_a_minimum_stays_in_bounds() {
    let schema = json!({"type": "number", "multipleOf": 1e-300, "minimum": 1});
    let value = instance_for(&schema, 3);
    assert!(value.as_f64().is_some_and(|v| v >= 1.0), "{value}");
}
