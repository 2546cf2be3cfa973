//! Prometheus metrics of one driver process, served at `/metrics`.

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use crate::error::DriverError;

fn failed(what: &str) -> impl Fn(prometheus::Error) -> DriverError + '_ {
    move |e| DriverError::Internal(format!("metric {what}: {e}"))
}

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
    /// Defines and registers every metric. A definition or registration
    /// that fails (a duplicate name, say) fails the driver's start.
    pub fn new() -> Result<Self, DriverError> {
        let registry =
            Registry::new_custom(Some("sluice".into()), None).map_err(failed("registry"))?;
        let buckets = prometheus::exponential_buckets(0.001, 2.0, 16).map_err(failed("buckets"))?;
        let m = Metrics {
            batches_committed: IntCounterVec::new(
                Opts::new("batches_committed_total", "Micro-batches committed"),
                &["query"],
            )
            .map_err(failed("definition"))?,
            rows_committed: IntCounterVec::new(
                Opts::new("rows_committed_total", "Rows committed to sinks"),
                &["query"],
            )
            .map_err(failed("definition"))?,
            batch_seconds: Histogram::with_opts(
                HistogramOpts::new("batch_duration_seconds", "From planning to commit")
                    .buckets(buckets),
            )
            .map_err(failed("definition"))?,
            task_failures: IntCounterVec::new(
                Opts::new("task_failures_total", "Task attempts that did not succeed"),
                &["kind"],
            )
            .map_err(failed("definition"))?,
            executors: IntGauge::new("executors", "Executors attached")
                .map_err(failed("definition"))?,
            is_leader: IntGauge::new("is_leader", "1 on the leader")
                .map_err(failed("definition"))?,
            epoch: IntGauge::new("epoch", "The leader epoch this driver holds")
                .map_err(failed("definition"))?,
            queries: IntGaugeVec::new(Opts::new("queries", "Queries by state"), &["state"])
                .map_err(failed("definition"))?,
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
            let name = c
                .desc()
                .first()
                .map_or_else(String::new, |d| d.fq_name.clone());
            m.registry.register(c).map_err(failed(&name))?;
        }
        Ok(m)
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> Result<String, DriverError> {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .map_err(failed("encoding"))?;
        String::from_utf8(buf).map_err(|e| DriverError::Internal(format!("metrics text: {e}")))
    }
}
