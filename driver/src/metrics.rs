//! Prometheus metrics of one driver process, served at `/metrics`.

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

const STATIC: &str = "static metric definitions are valid";

/// Every metric the driver exports. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub batches_committed: IntCounterVec,
    pub rows_committed: IntCounterVec,
    pub batch_seconds: Histogram,
    pub task_failures: IntCounterVec,
    pub executors: IntGauge,
    pub is_leader: IntGauge,
    pub epoch: IntGauge,
    pub queries: IntGaugeVec,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new_custom(Some("sluice".into()), None).unwrap_or_default();
        let m = Metrics {
            batches_committed: IntCounterVec::new(
                Opts::new("batches_committed_total", "Micro-batches committed"),
                &["query"],
            )
            .expect(STATIC),
            rows_committed: IntCounterVec::new(
                Opts::new("rows_committed_total", "Rows committed to sinks"),
                &["query"],
            )
            .expect(STATIC),
            batch_seconds: Histogram::with_opts(
                HistogramOpts::new("batch_duration_seconds", "From planning to commit")
                    .buckets(prometheus::exponential_buckets(0.001, 2.0, 16).unwrap_or_default()),
            )
            .expect(STATIC),
            task_failures: IntCounterVec::new(
                Opts::new("task_failures_total", "Task attempts that did not succeed"),
                &["kind"],
            )
            .expect(STATIC),
            executors: IntGauge::new("executors", "Executors attached").expect(STATIC),
            is_leader: IntGauge::new("is_leader", "1 on the leader").expect(STATIC),
            epoch: IntGauge::new("epoch", "The leader epoch this driver holds").expect(STATIC),
            queries: IntGaugeVec::new(Opts::new("queries", "Queries by state"), &["state"])
                .expect(STATIC),
            registry,
        };
        let collectors: [Box<dyn prometheus::core::Collector>; 8] = [
            Box::new(m.batches_committed.clone()),
            Box::new(m.rows_committed.clone()),
            Box::new(m.batch_seconds.clone()),
            Box::new(m.task_failures.clone()),
            Box::new(m.executors.clone()),
            Box::new(m.is_leader.clone()),
            Box::new(m.epoch.clone()),
            Box::new(m.queries.clone()),
        ];
        for c in collectors {
            let _ = m.registry.register(c);
        }
        m
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
