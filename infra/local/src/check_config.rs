//! `nimbus check-config`: what a configuration defines, one line per model, function and variant.

use nimbus_shared::app::LoadedConfig;
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
        let described = format!(
            "{:?} per {:?}, optimize {:?}",
            metric.kind, metric.level, metric.optimize
        );
        let _ = writeln!(out, "metric {name}: {}", described.to_lowercase());
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
            let candidates = variant.definition.candidates();
            let runs = if candidates.is_empty() {
                format!("model {}", variant.config.model)
            } else {
                format!(
                    "{} of {}, then model {}",
                    variant.definition.type_name(),
                    candidates.join(", "),
                    variant.config.model
                )
            };
            let _ = writeln!(out, "  variant {}: {runs} ({role})", variant.name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::summary;
    use nimbus_shared::app::load_local_config;
    use std::path::Path;

    #[tokio::test]
    async fn the_default_config_lists_functions_and_variants() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/nimbus.toml");
        let text = summary(&load_local_config(&path).await.unwrap());
        for line in [
            "model dummy: routing dummy",
            "tool get_weather: tools/get_weather.json",
            "metric email_sent: boolean per episode, optimize max",
            "function draft_email (chat)",
            "  variant formal: model dummy (candidate, weight 0.7)",
            "  variant careful: model dummy-fallback (fallback)",
            "function extract_contact (json)",
            "  variant backup: model dummy-slow (fallback)",
        ] {
            assert!(text.lines().any(|l| l == line), "missing `{line}` in:\n{text}");
        }
    }
}
