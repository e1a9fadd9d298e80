//! `nimbus check-config`: what a configuration defines, one line per model, function and variant.

use nimbus_shared::config::LoadedConfig;
use std::fmt::Write;

pub fn summary(loaded: &LoadedConfig) -> String {
    let mut out = String::new();
    for (name, model) in &loaded.config.models {
        let _ = writeln!(out, "model {name}: routing {}", model.routing.join(" -> "));
    }
    for (name, tool) in &loaded.config.tools {
        let _ = writeln!(out, "tool {name}: {}", tool.parameters);
    }
    for (name, metric) in &loaded.config.metrics {
        let _ = writeln!(
            out,
            "metric {name}: {:?} per {:?}, optimize {:?}",
            metric.kind, metric.level, metric.optimize
        );
    }
    for function in loaded.functions.functions() {
        let kind = format!("{:?}", function.config.kind).to_lowercase();
        let _ = writeln!(out, "function {} ({kind})", function.name);
        let policy = function.policy();
        for variant in function.variants() {
            let role = match policy.candidates().iter().find(|(n, _)| *n == variant.name) {
                Some((_, weight)) => format!("candidate, weight {weight}"),
                None if policy.fallbacks().contains(&variant.name) => "fallback".to_owned(),
                None => "pinned only".to_owned(),
            };
            let _ = writeln!(
                out,
                "  variant {}: model {} ({role})",
                variant.name, variant.config.model
            );
        }
    }
    out
}
