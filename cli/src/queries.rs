//! The queries that `local` and `bench` submit (a rate source into a jsonl
//! file sink, built as spec text like `sluice submit` sends), and the
//! helpers to submit them and wait on them and on the cluster.

use std::time::Duration;

use sluice_proto::{QueryStatus, SubmitRequest, SubmitResponse, WaitRequest};

use crate::client::{CliError, Client};
use crate::output::wait_exit_code;

/// A query over the rate source into a jsonl file sink.
#[derive(Debug, Clone)]
pub struct RateQuery {
    pub name: String,
    pub partitions: u32,
    pub rows_per_second: u64,
    pub total_rows: Option<u64>,
    pub trigger_ms: u64,
    pub max_rows_per_batch: Option<u64>,
    pub sink: String,
    /// The query's SQL over `input`; none runs `SELECT * FROM input`.
    pub sql: Option<String>,
    /// The sink's format: jsonl, csv or parquet.
    pub format: &'static str,
}

impl RateQuery {
    /// The spec as JSON text, as `sluice submit` would send it.
    pub fn spec_text(&self) -> String {
        let mut rate = serde_json::json!({
            "partitions": self.partitions,
            "rows_per_second": self.rows_per_second,
        });
        if let Some(t) = self.total_rows {
            rate["total_rows"] = t.into();
        }
        let mut spec = serde_json::json!({
            "name": self.name,
            "source": { "rate": rate },
            "trigger": { "interval_ms": self.trigger_ms },
            "sink": { "files": { "path": self.sink, "format": self.format } },
        });
        if let Some(sql) = &self.sql {
            spec["sql"] = sql.as_str().into();
        }
        if let Some(m) = self.max_rows_per_batch {
            spec["max_rows_per_batch"] = m.into();
        }
        spec.to_string()
    }

    /// The spec text with `fields` (a JSON object) set at its top level:
    /// a stateful query's `output_mode`, `watermark`, `state_partitions`.
    pub fn spec_text_with(&self, fields: serde_json::Value) -> String {
        let mut spec: serde_json::Value =
            serde_json::from_str(&self.spec_text()).unwrap_or_default();
        if let (Some(spec), serde_json::Value::Object(fields)) = (spec.as_object_mut(), fields) {
            spec.extend(fields);
        }
        spec.to_string()
    }
}

pub async fn submit(client: &mut Client, spec_text: &str) -> Result<SubmitResponse, CliError> {
    client
        .call(|mut rpc| {
            let spec_text = spec_text.to_string();
            async move {
                rpc.submit(SubmitRequest {
                    spec: None,
                    spec_text,
                })
                .await
            }
        })
        .await
}

/// Waits with the Wait RPC until `query` is terminal, at most `limit`.
pub async fn wait_terminal(
    client: &mut Client,
    query: &str,
    limit: Duration,
) -> anyhow::Result<QueryStatus> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let s = client
            .call_until(Some(deadline), |mut rpc| {
                let query = query.to_string();
                async move {
                    rpc.wait(WaitRequest {
                        query,
                        timeout_ms: 10_000,
                    })
                    .await
                }
            })
            .await?;
        if wait_exit_code(s.state).is_some() {
            return Ok(s);
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("query {query} did not finish within {} s", limit.as_secs());
        }
    }
}

/// Waits until the driver at the client's address answers and has at least
/// `n` executors attached.
pub async fn wait_for_executors(
    client: &mut Client,
    n: usize,
    limit: Duration,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let c = client
            .call_until(Some(deadline), |mut rpc| async move {
                rpc.cluster(sluice_proto::ClusterRequest {}).await
            })
            .await?;
        if c.executors.len() >= n {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "only {} of {n} executors attached within {limit:?}",
                c.executors.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_common::spec::QuerySpec;

    #[test]
    fn rate_queries_are_valid_specs() {
        let mut q = RateQuery {
            name: "bench-throughput".into(),
            partitions: 8,
            rows_per_second: 1_000_000_000_000,
            total_rows: Some(20_000_000),
            trigger_ms: 0,
            max_rows_per_batch: Some(4_000_000),
            sink: "/tmp/out".into(),
            sql: None,
            format: "jsonl",
        };
        let spec = QuerySpec::parse(&q.spec_text()).unwrap();
        spec.validate().unwrap();
        assert_eq!(spec.rate().unwrap().total_rows, Some(20_000_000));
        assert_eq!(spec.max_rows_per_batch, Some(4_000_000));
        q.total_rows = None;
        q.max_rows_per_batch = None;
        let spec = QuerySpec::parse(&q.spec_text()).unwrap();
        spec.validate().unwrap();
        assert_eq!(spec.rate().unwrap().total_rows, None);
    }

    #[test]
    fn stateful_fields_are_set_at_the_top_level() {
        let q = RateQuery {
            name: "bench-windowed".into(),
            partitions: 8,
            rows_per_second: 1000,
            total_rows: Some(30_000),
            trigger_ms: 0,
            max_rows_per_batch: None,
            sink: "/tmp/out".into(),
            sql: Some(
                "SELECT value % 10 AS k, count(*) AS n FROM input GROUP BY value % 10".into(),
            ),
            format: "jsonl",
        };
        let text = q.spec_text_with(serde_json::json!({
            "output_mode": "append",
            "watermark": {"column": "timestamp_ms", "delay_ms": 500},
        }));
        let spec = QuerySpec::parse(&text).unwrap();
        assert_eq!(
            spec.output_mode,
            Some(sluice_common::spec::OutputMode::Append)
        );
        assert_eq!(spec.watermark.as_ref().unwrap().delay_ms, 500);
        assert_eq!(spec.rate().unwrap().rows_per_second, 1000);
        assert_eq!(q.spec_text_with(serde_json::json!({})), q.spec_text());
    }
}
