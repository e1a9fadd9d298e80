//! Metrics as CloudWatch embedded metric format (EMF) lines on stdout: Lambda sends them to
//! CloudWatch Logs, which turns each into a metric, with no API call from the function. One line
//! per measurement, its dimensions plus the function's name (and the outcome or status class
//! alone, as a second set, where the metric has one).

use crate::ports::metrics::{Dimension, MetricUnit, MetricsSink};
use crate::ports::{Clock, SystemClock};
use serde_json::{json, Map, Value};
use std::io::Write as _;

/// The CloudWatch namespace of every Nimbus metric.
pub(crate) const NAMESPACE: &str = "Nimbus";

/// Dimensions each metric is also aggregated by alone (a second dimension set), so alarms and the
/// dashboard can read, say, every provider call by outcome without listing models and providers.
const AGGREGATED: [&str; 2] = ["outcome", "status_class"];

/// Writes EMF lines to stdout.
#[derive(Debug, Clone)]
pub struct EmfMetrics {
    /// The Lambda function's name, a dimension of every metric.
    function: String,
}

impl EmfMetrics {
    /// Inside Lambda, EMF lines for the function named by `AWS_LAMBDA_FUNCTION_NAME`; elsewhere
    /// (the `nimbus` command on the AWS backend, whose stdout is its output) nothing.
    #[cfg(feature = "aws")]
    pub(crate) fn for_lambda() -> std::sync::Arc<dyn MetricsSink> {
        match std::env::var("AWS_LAMBDA_FUNCTION_NAME") {
            Ok(function) => std::sync::Arc::new(Self::for_function(function)),
            Err(_) => std::sync::Arc::new(crate::ports::NoMetrics),
        }
    }

    /// EMF lines for `function`, wherever this runs (the overhead benchmark's local server).
    pub fn for_function(function: impl Into<String>) -> Self {
        Self {
            function: function.into(),
        }
    }
}

/// One EMF line (without its newline).
pub(crate) fn emf_line(
    function: &str,
    name: &str,
    unit: MetricUnit,
    value: f64,
    dimensions: &[Dimension<'_>],
    timestamp_ms: i64,
) -> String {
    let mut names = vec![Value::from("function")];
    names.extend(dimensions.iter().map(|(key, _)| Value::from(*key)));
    let mut sets = vec![Value::Array(names)];
    sets.extend(
        dimensions
            .iter()
            .filter(|(key, _)| AGGREGATED.contains(key))
            .map(|(key, _)| json!([key])),
    );
    let mut line = Map::new();
    line.insert(
        "_aws".to_owned(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": sets,
                "Metrics": [{"Name": name, "Unit": unit.cloudwatch_name()}],
            }],
        }),
    );
    line.insert("function".to_owned(), Value::from(function));
    for (key, dimension) in dimensions {
        line.insert((*key).to_owned(), Value::from(*dimension));
    }
    line.insert(name.to_owned(), json!(value));
    Value::Object(line).to_string()
}

impl MetricsSink for EmfMetrics {
    fn record(&self, name: &'static str, unit: MetricUnit, value: f64, dimensions: &[Dimension<'_>]) {
        let line = emf_line(&self.function, name, unit, value, dimensions, SystemClock.now_unix_ms());
        let mut out = std::io::stdout().lock();
        // A lost metric line is not worth failing a request for.
        let _ = writeln!(out, "{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_what_cloudwatch_reads_as_a_metric() {
        let line = emf_line(
            "NimbusInferenceFunction",
            "http_requests",
            MetricUnit::Count,
            1.0,
            &[("route", "/v1/models"), ("status_class", "2xx")],
            1_700_000_000_000,
        );
        let value: Value = serde_json::from_str(&line).unwrap();
        let aws = &value["_aws"];
        assert_eq!(aws["Timestamp"], 1_700_000_000_000i64);
        let directive = &aws["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], NAMESPACE);
        assert_eq!(
            directive["Dimensions"],
            json!([["function", "route", "status_class"], ["status_class"]]),
            "the full set, and the status class alone for alarms and the dashboard"
        );
        assert_eq!(
            directive["Metrics"],
            json!([{"Name": "http_requests", "Unit": "Count"}])
        );
        // Every dimension and the metric itself are top-level members of the same line.
        assert_eq!(value["function"], "NimbusInferenceFunction");
        assert_eq!(value["route"], "/v1/models");
        assert_eq!(value["status_class"], "2xx");
        assert_eq!(value["http_requests"], 1.0);
        assert!(!line.contains('\n'));
    }
}
