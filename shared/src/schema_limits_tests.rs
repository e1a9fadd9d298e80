use super::*;
use serde_json::{json, Map};

/// `{"$defs": {"d0": {"$ref": "#/$defs/d1"}, …, "dN": {"type": "object"}}, "$ref": "#/$defs/d0"}`
pub(crate) fn ref_chain(links: usize) -> Value {
    let mut defs = Map::new();
    for i in 0..links {
        defs.insert(format!("d{i}"), json!({"$ref": format!("#/$defs/d{}", i + 1)}));
    }
    defs.insert(format!("d{links}"), json!({"type": "object"}));
    json!({"$defs": defs, "$ref": "#/$defs/d0"})
}

fn nested(depth: usize) -> Value {
    let mut schema = json!({"type": "string"});
    for _ in 0..depth {
        schema = json!({"type": "object", "properties": {"a": schema}});
    }
    schema
}

#[test]
fn ordinary_schemas_pass() {
    for schema in [
        json!({}),
        json!(true),
        json!({"type": "object", "properties": {"name": {"type": "string", "pattern": "^[a-z]+$"}}}),
        ref_chain(8),
        nested(10),
        // Recursive through properties: a cycle, not a chain.
        json!({"$defs": {"node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}, "$ref": "#/$defs/node"}),
        json!({"type": "array", "items": {"$ref": "#"}}),
    ] {
        assert_eq!(SCHEMA_LIMITS.check(&schema), Ok(()), "{schema}");
    }
}

#[test]
fn the_three_thousand_ref_chain_is_refused() {
    let schema = ref_chain(3_000);
    assert!(serde_json::to_string(&schema).unwrap().len() < SCHEMA_LIMITS.max_bytes);
    assert_eq!(
        SCHEMA_LIMITS.check(&schema),
        Err(SchemaLimitError::TooManyRefs { max: 1_000 })
    );
}

#[test]
fn a_ref_chain_past_the_bound_is_refused() {
    assert_eq!(SCHEMA_LIMITS.check(&ref_chain(SCHEMA_LIMITS.max_ref_chain - 1)), Ok(()));
    assert_eq!(
        SCHEMA_LIMITS.check(&ref_chain(SCHEMA_LIMITS.max_ref_chain + 1)),
        Err(SchemaLimitError::RefChainTooLong { max: 32 })
    );
    // Through nested targets too: d{i} holds the reference deeper inside.
    let mut defs = Map::new();
    for i in 0..40 {
        defs.insert(
            format!("d{i}"),
            json!({"allOf": [{"not": {"$ref": format!("#/$defs/d{}", i + 1)}}]}),
        );
    }
    defs.insert("d40".into(), json!({}));
    let schema = json!({"$defs": defs, "$ref": "#/$defs/d0"});
    assert!(matches!(
        SCHEMA_LIMITS.check(&schema),
        Err(SchemaLimitError::RefChainTooLong { .. })
    ));
}

#[test]
fn size_nodes_depth_enums_and_patterns_are_bounded() {
    let big = json!({"description": "x".repeat(300 * 1024)});
    assert_eq!(
        SCHEMA_LIMITS.check(&big),
        Err(SchemaLimitError::TooLarge { max: 256 * 1024 })
    );
    let many: Vec<Value> = (0..30_000).map(|_| json!(1)).collect();
    assert_eq!(
        SCHEMA_LIMITS.check(&json!({"examples": many})),
        Err(SchemaLimitError::TooManyNodes { max: 20_000 })
    );
    assert_eq!(
        SCHEMA_LIMITS.check(&nested(40)),
        Err(SchemaLimitError::TooDeep { max: 64 })
    );
    let values: Vec<Value> = (0..1_001).map(|i| json!(i)).collect();
    let error = SCHEMA_LIMITS
        .check(&json!({"properties": {"a": {"enum": values}}}))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "an `enum` at `/properties/a/enum` has more than 1000 values"
    );
    let pattern = "a".repeat(1_001);
    assert!(matches!(
        SCHEMA_LIMITS.check(&json!({"pattern": pattern})),
        Err(SchemaLimitError::PatternTooLong { .. })
    ));
    assert!(matches!(
        SCHEMA_LIMITS.check(&json!({"patternProperties": {pattern: {}}})),
        Err(SchemaLimitError::PatternTooLong { .. })
    ));
}

#[test]
fn measuring_a_hostile_schema_is_quick() {
    let mut defs = Map::new();
    for i in 0..999 {
        defs.insert(format!("d{i}"), json!({"$ref": "#/$defs/d0"}));
    }
    let started = std::time::Instant::now();
    let _ = SCHEMA_LIMITS.check(&json!({"$defs": defs}));
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}
