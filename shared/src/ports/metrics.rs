//! Metrics: named measurements with a few low-cardinality dimensions (never ids). In Lambda they
//! go out as CloudWatch embedded metric format lines in the logs; locally they are kept and read
//! at `GET /metrics` in Prometheus text format. Recording is a log line or a map update: nothing
//! on the hot path waits for it.

/// What a value measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MetricUnit {
    Count,
    Milliseconds,
}

impl MetricUnit {
    /// CloudWatch's name of the unit.
    pub(crate) fn cloudwatch_name(self) -> &'static str {
        match self {
            Self::Count => "Count",
            Self::Milliseconds => "Milliseconds",
        }
    }
}

/// One dimension: its name and value (e.g. `("route", "/v1/chat/completions")`).
pub(crate) type Dimension<'a> = (&'static str, &'a str);

/// Where measurements go.
pub trait MetricsSink: Send + Sync + std::fmt::Debug {
    /// Record `value` of metric `name` under `dimensions`: a count adds up, a duration is one
    /// observation.
    fn record(&self, name: &'static str, unit: MetricUnit, value: f64, dimensions: &[Dimension<'_>]);

    /// One timed event under `dimensions`: `count` goes up by one and `duration` observes the
    /// time since `started`.
    fn record_timed(
        &self,
        count: &'static str,
        duration: &'static str,
        started: std::time::Instant,
        dimensions: &[Dimension<'_>],
    ) {
        self.record(count, MetricUnit::Count, 1.0, dimensions);
        let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
        self.record(duration, MetricUnit::Milliseconds, elapsed_ms, dimensions);
    }

    /// The measurements so far in Prometheus text format, when this sink keeps them.
    fn prometheus_text(&self) -> Option<String> {
        None
    }
}

/// Measurements dropped (tests, tools).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMetrics;

impl MetricsSink for NoMetrics {
    fn record(&self, _name: &'static str, _unit: MetricUnit, _value: f64, _dimensions: &[Dimension<'_>]) {}
}

/// The HTTP status class of a status code (`2xx`, `4xx`, …): a dimension of few values.
pub(crate) fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}
