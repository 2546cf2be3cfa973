//! What the web UI shows, as plain data: built from the driver's state by
//! pure functions, serialized to JSON by the handlers and the event stream.

use serde::Serialize;
use sluice_common::checkpoint::ProgressRecord;
use sluice_common::spec::{DEFAULT_SQL, QuerySpec};
use sluice_proto as pb;

use crate::query::entry::{QueryEntry, RecentError};

/// The page header and the cluster page: who leads, the executors, and a
/// line per query.
#[derive(Debug, Clone, Serialize)]
pub struct Overview {
    pub driver_id: String,
    /// `leader`, `standby` or `starting`.
    pub role: &'static str,
    /// The epoch this driver leads in (leader only).
    pub epoch: Option<u64>,
    /// The leader's gRPC address and web UI, when known.
    pub leader: Option<String>,
    pub leader_ui: Option<String>,
    /// This driver's own UI URL.
    pub ui: Option<String>,
    pub standbys: Vec<String>,
    pub executors: Vec<ExecutorView>,
    pub queries: Vec<QuerySummary>,
    /// The caller's role: what the page may offer (`admin` may stop).
    pub access: &'static str,
    pub now_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecutorView {
    pub id: String,
    pub slots: u32,
    pub running_tasks: u32,
    pub heartbeat_age_ms: u64,
    pub conflict: String,
}

impl From<&pb::ExecutorInfo> for ExecutorView {
    fn from(e: &pb::ExecutorInfo) -> Self {
        ExecutorView {
            id: e.id.clone(),
            slots: e.slots,
            running_tasks: e.running_tasks,
            heartbeat_age_ms: e.heartbeat_age_ms,
            conflict: e.conflict.clone(),
        }
    }
}

/// One query's line on the queries page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuerySummary {
    pub name: String,
    pub id: String,
    pub state: &'static str,
    pub epoch: u64,
    /// The last committed batch, -1 before the first.
    pub last_batch: i64,
    pub committed_rows: u64,
    /// From the last batch's progress (0 before the first).
    pub input_rows_per_second: f64,
    pub processed_rows_per_second: f64,
    pub last_batch_ms: u64,
    pub error: String,
}

/// A query's page, apart from its progress records.
#[derive(Debug, Clone, Serialize)]
pub struct QueryDetail {
    #[serde(flatten)]
    pub summary: QuerySummary,
    /// The spec as YAML, or why it is missing.
    pub spec: String,
    pub sql: String,
    /// Whether the spec declares a watermark: the page charts its lag.
    pub watermark: bool,
    pub errors: Vec<RecentError>,
}

/// New progress records of one query. `reset` is true on the first
/// message of a stream: the records replace what the page holds.
#[derive(Debug, Clone, Serialize)]
pub struct ProgressUpdate {
    pub query: String,
    pub reset: bool,
    pub records: Vec<ProgressRecord>,
}

pub fn summary(entry: &QueryEntry, last: Option<&pb::BatchProgress>) -> QuerySummary {
    let v = entry.view();
    QuerySummary {
        name: entry.name.clone(),
        id: entry.id.clone(),
        state: v.state.as_str(),
        epoch: entry.epoch,
        last_batch: v.last_committed_batch,
        committed_rows: v.committed_rows,
        input_rows_per_second: last.map_or(0.0, |p| p.input_rows_per_second),
        processed_rows_per_second: last.map_or(0.0, |p| p.processed_rows_per_second),
        last_batch_ms: last.and_then(|p| p.duration_ms).map_or(0, |d| d.total),
        error: v.error,
    }
}

pub fn detail(entry: &QueryEntry, last: Option<&pb::BatchProgress>) -> QueryDetail {
    let (spec, sql, watermark) = match &entry.spec {
        Some(s) => (
            spec_yaml(s),
            s.sql.clone().unwrap_or_else(|| DEFAULT_SQL.to_string()),
            s.watermark.is_some(),
        ),
        None => (
            "(the checkpoint's spec.json could not be read)".to_string(),
            String::new(),
            false,
        ),
    };
    QueryDetail {
        summary: summary(entry, last),
        spec,
        sql,
        watermark,
        errors: entry.recent_errors(),
    }
}

fn spec_yaml(spec: &QuerySpec) -> String {
    serde_yaml_ng::to_string(spec).unwrap_or_else(|e| format!("(the spec cannot be shown: {e})"))
}

pub fn records(progress: &[pb::BatchProgress]) -> Vec<ProgressRecord> {
    progress.iter().map(ProgressRecord::from_proto).collect()
}
