//! Prometheus metrics of one driver process, served at `/metrics`, every
//! name prefixed `sluice_`. Series of a query carry a `query` label.
//!
//! Most are updated where the event happens (a batch commits, a task
//! attempt ends, an executor is lost, an election is won). A few are read
//! at scrape time from the driver's state: the queries' states, the
//! executors and slots, the lease's age and the checkpoint's bytes.

use prometheus::core::Collector;
use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use sluice_proto as pb;

use crate::error::DriverError;

fn failed(what: &str) -> impl Fn(prometheus::Error) -> DriverError + '_ {
    move |e| DriverError::Internal(format!("metric {what}: {e}"))
}

/// The `kind` label of a failed task attempt: its error kind, or `lost`
/// when its executor was lost.
pub fn failure_kind(kind: Option<pb::ErrorKind>) -> &'static str {
    match kind {
        None => "lost",
        Some(pb::ErrorKind::Retryable | pb::ErrorKind::Unspecified) => "retryable",
        Some(pb::ErrorKind::Storage) => "storage",
        Some(pb::ErrorKind::Fatal) => "fatal",
        Some(pb::ErrorKind::StaleEpoch) => "stale_epoch",
    }
}

const FAILURE_KINDS: [&str; 5] = ["lost", "retryable", "storage", "fatal", "stale_epoch"];

/// Why a standby became leader: the leader's lease expired, its process
/// was found gone (its port refused connections) and its lease revoked,
/// or it resigned (a SIGTERM handover).
pub const TAKEOVER_CAUSES: [&str; 3] = ["lease_expired", "leader_refused", "resigned"];

/// Every metric the driver exports. Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub batches_committed: IntCounterVec,
    pub input_rows: IntCounterVec,
    pub output_rows: IntCounterVec,
    pub bad_records: IntCounterVec,
    pub records_lost: IntCounterVec,
    pub kafka_lag: IntGaugeVec,
    pub rows_dropped_by_watermark: IntCounterVec,
    pub sink_bytes: IntCounterVec,
    pub kafka_transactions: IntCounterVec,
    pub kafka_transaction_longest_ms: IntGaugeVec,
    pub task_attempts: IntCounterVec,
    pub task_retries: IntCounterVec,
    pub task_failures: IntCounterVec,
    pub batch_seconds: HistogramVec,
    pub phase_seconds: HistogramVec,
    pub task_seconds: HistogramVec,
    pub state_rows: IntGaugeVec,
    pub state_bytes: IntGaugeVec,
    pub watermark_ms: IntGaugeVec,
    pub query_state: IntGaugeVec,
    pub queries: IntGaugeVec,
    pub executors: IntGauge,
    pub slots: IntGauge,
    pub slots_in_use: IntGauge,
    pub executors_lost: IntCounter,
    pub elections_won: IntCounter,
    pub failovers: IntCounter,
    pub takeovers: IntCounterVec,
    pub death_detection_seconds: Histogram,
    pub fast_failover_armed: IntGauge,
    pub checkpoint_bytes: IntCounter,
    pub lease_age_seconds: Gauge,
    pub is_leader: IntGauge,
    pub epoch: IntGauge,
}

/// Defines metrics on one registry: a definition or registration that
/// fails (a duplicate name, say) fails the driver's start.
struct Define {
    registry: Registry,
    buckets: Vec<f64>,
}

impl Define {
    fn add<C: Collector + Clone + 'static>(&self, name: &str, c: C) -> Result<C, DriverError> {
        self.registry
            .register(Box::new(c.clone()))
            .map_err(failed(name))?;
        Ok(c)
    }

    fn counters(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<IntCounterVec, DriverError> {
        let c = IntCounterVec::new(Opts::new(name, help), labels).map_err(failed(name))?;
        self.add(name, c)
    }

    fn counter(&self, name: &str, help: &str) -> Result<IntCounter, DriverError> {
        let c = IntCounter::new(name, help).map_err(failed(name))?;
        self.add(name, c)
    }

    fn gauges(&self, name: &str, help: &str, labels: &[&str]) -> Result<IntGaugeVec, DriverError> {
        let g = IntGaugeVec::new(Opts::new(name, help), labels).map_err(failed(name))?;
        self.add(name, g)
    }

    fn gauge(&self, name: &str, help: &str) -> Result<IntGauge, DriverError> {
        let g = IntGauge::new(name, help).map_err(failed(name))?;
        self.add(name, g)
    }

    fn histogram(&self, name: &str, help: &str) -> Result<Histogram, DriverError> {
        let opts = HistogramOpts::new(name, help).buckets(self.buckets.clone());
        let h = Histogram::with_opts(opts).map_err(failed(name))?;
        self.add(name, h)
    }

    fn histograms(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<HistogramVec, DriverError> {
        let opts = HistogramOpts::new(name, help).buckets(self.buckets.clone());
        let h = HistogramVec::new(opts, labels).map_err(failed(name))?;
        self.add(name, h)
    }
}

impl Metrics {
    pub fn new() -> Result<Self, DriverError> {
        let d = Define {
            registry: Registry::new_custom(Some("sluice".into()), None)
                .map_err(failed("registry"))?,
            // 1 ms to about 33 s.
            buckets: prometheus::exponential_buckets(0.001, 2.0, 16).map_err(failed("buckets"))?,
        };
        let q = &["query"];
        Ok(Metrics {
            batches_committed: d.counters("batches_committed_total", "Micro-batches committed", q)?,
            input_rows: d.counters("input_rows_total", "Rows read from sources by committed batches", q)?,
            output_rows: d.counters("output_rows_total", "Rows committed to sinks", q)?,
            bad_records: d.counters("bad_records_total", "Input records skipped as malformed", q)?,
            records_lost: d.counters(
                "records_lost_total",
                "Source records skipped because they were gone (fail_on_data_loss: false)",
                q,
            )?,
            kafka_lag: d.gauges(
                "kafka_lag_records",
                "A Kafka partition's latest offset minus the end of the last committed batch",
                &["query", "topic", "partition"],
            )?,
            rows_dropped_by_watermark: d.counters(
                "rows_dropped_by_watermark_total",
                "Input rows dropped as later than the watermark",
                q,
            )?,
            sink_bytes: d.counters(
                "sink_bytes_written_total",
                "Bytes committed to sinks (files; Kafka records' keys and values)",
                q,
            )?,
            kafka_transactions: d.counters(
                "kafka_transactions_total",
                "A Kafka sink's transactions: committed with their batch, or aborted (left by failed task attempts)",
                &["query", "outcome"],
            )?,
            kafka_transaction_longest_ms: d.gauges(
                "kafka_transaction_longest_ms",
                "The longest a transaction of the last committed batch was open, from its task's first record to the driver's commit",
                q,
            )?,
            task_attempts: d.counters("task_attempts_total", "Task attempts started", &["query", "stage"])?,
            task_retries: d.counters(
                "task_retries_total",
                "Task attempts started again after one failed or its executor was lost",
                &["query", "stage"],
            )?,
            task_failures: d.counters(
                "task_failures_total",
                "Task attempts that did not succeed, by error kind (lost: the executor was lost)",
                &["query", "kind"],
            )?,
            batch_seconds: d.histograms("batch_duration_seconds", "From planning to commit", q)?,
            phase_seconds: d.histograms(
                "batch_phase_duration_seconds",
                "Each phase of a batch (map and reduce are within execution)",
                &["query", "phase"],
            )?,
            task_seconds: d.histograms(
                "task_duration_seconds",
                "Successful task attempts, as the executor timed them",
                &["query", "stage"],
            )?,
            state_rows: d.gauges("state_rows", "Rows in a stateful query's state", q)?,
            state_bytes: d.gauges("state_bytes", "In-memory bytes of a stateful query's state", q)?,
            watermark_ms: d.gauges("watermark_ms", "A query's watermark, in ms since the epoch", q)?,
            query_state: d.gauges("query_state", "1 for each query's current state", &["query", "state"])?,
            queries: d.gauges("queries", "Queries by state", &["state"])?,
            executors: d.gauge("executors", "Executors attached")?,
            slots: d.gauge("slots", "Task slots of the attached executors")?,
            slots_in_use: d.gauge("slots_in_use", "Task slots running a task")?,
            executors_lost: d.counter("executors_lost_total", "Executors detached or timed out")?,
            elections_won: d.counter("leader_elections_won_total", "Terms this driver began as leader")?,
            failovers: d.counter(
                "failovers_total",
                "Terms that took over running queries from an earlier epoch (a failover or a restart)",
            )?,
            takeovers: {
                let t = d.counters(
                    "takeovers_total",
                    "Terms this driver began by taking over from another leader, by cause",
                    &["cause"],
                )?;
                for cause in TAKEOVER_CAUSES {
                    t.with_label_values(&[cause]);
                }
                t
            },
            death_detection_seconds: d.histogram(
                "leader_death_detection_seconds",
                "From the break of the leader's stream to the refusal that confirmed its process gone",
            )?,
            fast_failover_armed: d.gauge(
                "fast_failover_armed",
                "1 on a standby that holds a stream to the leader it saw in the election",
            )?,
            checkpoint_bytes: d.counter(
                "checkpoint_bytes_written_total",
                "Bytes of checkpoint records this driver wrote",
            )?,
            lease_age_seconds: d.add(
                "leader_lease_age_seconds",
                Gauge::new(
                    "leader_lease_age_seconds",
                    "Time since the leader's lease was last renewed (0 on a standby)",
                )
                .map_err(failed("leader_lease_age_seconds"))?,
            )?,
            is_leader: d.gauge("is_leader", "1 on the leader")?,
            epoch: d.gauge("epoch", "The leader epoch this driver holds")?,
            registry: d.registry,
        })
    }

    /// Creates `query`'s counters at zero, so that they are exported (and
    /// `rate()` works) before the first batch, retry or failure.
    pub fn query_started(&self, query: &str) {
        for c in [
            &self.batches_committed,
            &self.input_rows,
            &self.output_rows,
            &self.bad_records,
            &self.records_lost,
            &self.rows_dropped_by_watermark,
            &self.sink_bytes,
        ] {
            c.with_label_values(&[query]);
        }
        for stage in ["map", "reduce"] {
            self.task_attempts.with_label_values(&[query, stage]);
            self.task_retries.with_label_values(&[query, stage]);
        }
        for kind in FAILURE_KINDS {
            self.task_failures.with_label_values(&[query, kind]);
        }
    }

    /// Records committed batch `p` of `query`: `output_rows` rows in sink
    /// files of `sink_bytes` bytes.
    pub fn batch_committed(
        &self,
        query: &str,
        p: &pb::BatchProgress,
        output_rows: u64,
        sink_bytes: u64,
    ) {
        let q = &[query];
        self.batches_committed.with_label_values(q).inc();
        self.input_rows
            .with_label_values(q)
            .inc_by(p.num_input_rows);
        self.output_rows.with_label_values(q).inc_by(output_rows);
        self.bad_records.with_label_values(q).inc_by(p.bad_records);
        self.records_lost
            .with_label_values(q)
            .inc_by(p.records_lost);
        for t in &p.partitions {
            let partition = t.partition.to_string();
            self.kafka_lag
                .with_label_values(&[query, t.topic.as_str(), partition.as_str()])
                .set(t.lag);
        }
        self.rows_dropped_by_watermark
            .with_label_values(q)
            .inc_by(p.rows_dropped_by_watermark);
        self.sink_bytes.with_label_values(q).inc_by(sink_bytes);
        if let Some(t) = &p.kafka_transactions {
            self.kafka_transactions
                .with_label_values(&[query, "committed"])
                .inc_by(t.committed);
            self.kafka_transactions
                .with_label_values(&[query, "aborted"])
                .inc_by(t.aborted);
            self.kafka_transaction_longest_ms
                .with_label_values(q)
                .set(t.longest_ms as i64);
        }
        self.state_rows
            .with_label_values(q)
            .set(p.state_rows_total as i64);
        self.state_bytes
            .with_label_values(q)
            .set(p.state_bytes as i64);
        // The batch that ends a bounded input keeps the gauge at the last
        // event-time watermark rather than at the end of time.
        if let Some(w) = p
            .watermark_ms
            .filter(|&w| w != crate::watermark::END_OF_TIME)
        {
            self.watermark_ms.with_label_values(q).set(w);
        }
        let d = p.duration_ms.unwrap_or_default();
        let secs = |ms: u64| ms as f64 / 1000.0;
        self.batch_seconds
            .with_label_values(q)
            .observe(secs(d.total));
        for (phase, ms) in [
            ("latest_offset", d.latest_offset),
            ("wal_commit", d.wal_commit),
            ("execution", d.execution),
            ("sink_commit", d.sink_commit),
            ("commit", d.commit),
            ("map", d.map),
            ("reduce", d.reduce),
        ] {
            self.phase_seconds
                .with_label_values(&[query, phase])
                .observe(secs(ms));
        }
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
