//! Metrics kept in memory and rendered in Prometheus text format (the local server's
//! `GET /metrics`): counts as `nimbus_<name>_total` counters, durations as histograms in seconds
//! (`nimbus_<name>_seconds_bucket`, `_sum`, `_count`).

use crate::ports::metrics::{Dimension, MetricUnit, MetricsSink};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};

/// Upper bounds of the duration buckets, in seconds.
const BUCKETS_S: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct SeriesKey {
    name: &'static str,
    unit: MetricUnit,
    labels: Vec<(&'static str, String)>,
}

#[derive(Debug, Default)]
struct Series {
    sum: f64,
    count: u64,
    /// Observations at or under each bucket's bound (durations only).
    buckets: [u64; BUCKETS_S.len()],
}

/// The in-memory registry.
#[derive(Debug, Default)]
pub struct PrometheusMetrics {
    series: Mutex<BTreeMap<SeriesKey, Series>>,
}

impl PrometheusMetrics {
    pub fn new() -> Self {
        Self::default()
    }

    fn render(&self) -> String {
        let series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        let mut text = String::new();
        let mut last_name = "";
        for (key, value) in series.iter() {
            let (metric, kind) = match key.unit {
                MetricUnit::Count => (format!("nimbus_{}_total", key.name), "counter"),
                MetricUnit::Milliseconds => (format!("nimbus_{}_seconds", key.name), "histogram"),
            };
            if key.name != last_name {
                let _ = writeln!(text, "# TYPE {metric} {kind}");
                last_name = key.name;
            }
            let labels = label_text(&key.labels, None);
            match key.unit {
                MetricUnit::Count => {
                    let _ = writeln!(text, "{metric}{labels} {}", value.sum);
                }
                MetricUnit::Milliseconds => {
                    for (bound, count) in BUCKETS_S.iter().zip(value.buckets) {
                        let le = label_text(&key.labels, Some(&bound.to_string()));
                        let _ = writeln!(text, "{metric}_bucket{le} {count}");
                    }
                    let inf = label_text(&key.labels, Some("+Inf"));
                    let _ = writeln!(text, "{metric}_bucket{inf} {}", value.count);
                    let _ = writeln!(text, "{metric}_sum{labels} {}", value.sum);
                    let _ = writeln!(text, "{metric}_count{labels} {}", value.count);
                }
            }
        }
        text
    }
}

/// `{a="x",b="y"}` (with `le` last when given); empty without labels.
fn label_text(labels: &[(&'static str, String)], le: Option<&str>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(name, value)| format!("{name}=\"{}\"", escape(value)))
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

/// A label value as Prometheus text needs it: backslash, quote and newline escaped.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

impl MetricsSink for PrometheusMetrics {
    fn record(&self, name: &'static str, unit: MetricUnit, value: f64, dimensions: &[Dimension<'_>]) {
        let mut labels: Vec<(&'static str, String)> = dimensions.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        labels.sort();
        let key = SeriesKey { name, unit, labels };
        let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = series.entry(key).or_default();
        match unit {
            MetricUnit::Count => entry.sum += value,
            MetricUnit::Milliseconds => {
                let seconds = value / 1000.0;
                entry.sum += seconds;
                entry.count += 1;
                for (bound, count) in BUCKETS_S.iter().zip(entry.buckets.iter_mut()) {
                    if seconds <= *bound {
                        *count += 1;
                    }
                }
            }
        }
    }

    fn prometheus_text(&self) -> Option<String> {
        Some(self.render())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_and_durations_fill_cumulative_buckets() {
        let metrics = PrometheusMetrics::new();
        let dims = [("route", "/v1/models"), ("status_class", "2xx")];
        metrics.record("http_requests", MetricUnit::Count, 1.0, &dims);
        metrics.record("http_requests", MetricUnit::Count, 1.0, &dims);
        metrics.record("http_request_duration", MetricUnit::Milliseconds, 3.0, &dims);
        metrics.record("http_request_duration", MetricUnit::Milliseconds, 200.0, &dims);
        let text = metrics.prometheus_text().unwrap();
        assert!(text.contains("# TYPE nimbus_http_requests_total counter\n"), "{text}");
        assert!(
            text.contains("nimbus_http_requests_total{route=\"/v1/models\",status_class=\"2xx\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE nimbus_http_request_duration_seconds histogram\n"),
            "{text}"
        );
        assert!(text.contains("le=\"0.0025\"} 0\n"), "{text}");
        assert!(text.contains("le=\"0.005\"} 1\n"), "{text}");
        assert!(text.contains("le=\"0.25\"} 2\n"), "{text}");
        assert!(text.contains("le=\"+Inf\"} 2\n"), "{text}");
        assert!(
            text.contains("_count{route=\"/v1/models\",status_class=\"2xx\"} 2\n"),
            "{text}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let metrics = PrometheusMetrics::new();
        metrics.record("x", MetricUnit::Count, 1.0, &[("model", "a\"b\\c\nd")]);
        let text = metrics.prometheus_text().unwrap();
        assert!(text.contains(r#"nimbus_x_total{model="a\"b\\c\nd"} 1"#), "{text}");
    }
}
