//! What a query's SQL must give at submit, beside its spec: it plans as
//! every task will, its stateful operators can feed each other as they
//! do (`sluice_plan::plan`), its watermarks name timestamp columns, its output mode fits it,
//! `state_ttl_ms` has an operator to apply to, and the sink suits its
//! output columns (`crate::sink::check_output`). A query that cannot run is
//! refused, naming why.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_schema::SchemaRef;
use sluice_common::checkpoint::TableSchema;
use sluice_common::spec::{OutputMode, QuerySpec};

use super::join;
use crate::error::DriverError;

/// Plans the query's SQL over its input tables, as every task will: a
/// query that cannot run is refused at submit, naming why.
pub(super) async fn check_sql(
    spec: &QuerySpec,
    streams: &[(String, SchemaRef)],
    tables: &BTreeMap<String, TableSchema>,
    budget: std::time::Duration,
) -> Result<SchemaRef, DriverError> {
    let tables: Vec<(String, SchemaRef)> = tables
        .iter()
        .map(|(n, t)| (n.clone(), Arc::new(t.schema.clone())))
        .collect();
    let checked = sluice_sql::check(spec.sql(), streams, &tables, budget)
        .await
        .map_err(|e| match e {
            sluice_sql::SqlError::Busy(_) => DriverError::Busy(format!("field `sql`: {e}")),
            sluice_sql::SqlError::Panicked(_) => DriverError::Internal(format!("field `sql`: {e}")),
            e => DriverError::Invalid(format!("field `sql`: {e}")),
        })?;
    let ops = sluice_plan::plan(spec, &checked).map_err(|e| match e {
        sluice_plan::PlanError::Invalid(why) => DriverError::Invalid(format!("field `sql`: {why}")),
        sluice_plan::PlanError::Internal(why) => DriverError::Internal(why),
    })?;
    check_ttl(spec, &ops)?;
    check_event_time(spec, streams, &checked)?;
    for op in &checked.ops {
        if let Some(join) = &op.join {
            join::check(spec, join, op.consumer.is_none())?;
        }
    }
    let mode = OutputMode::effective(spec.output_mode, !ops.is_empty());
    crate::sink::check_output(spec, &checked.output, mode)?;
    Ok(checked.output)
}

/// A spec with `state_ttl_ms` has an operator it applies to, one of
/// `ops` whose keys expire ([`sluice_plan::StatefulOp::ttl`]).
fn check_ttl(spec: &QuerySpec, ops: &[sluice_plan::StatefulOp]) -> Result<(), DriverError> {
    let Some(ttl) = spec.state_ttl_ms else {
        return Ok(());
    };
    if ops.iter().any(|op| op.ttl) {
        return Ok(());
    }
    let dedup = match spec.dedup {
        Some(_) => " (dedup forgets a key by its own within_ms)",
        None => "",
    };
    Err(DriverError::Invalid(format!(
        "state_ttl_ms: {ttl} applies to aggregations without a window (that feed no other \
         aggregation and read none's changes) and to joins of streams without an event-time \
         bound; this query has none{dedup}"
    )))
}

/// Each watermark names a timestamp column of its input table.
fn check_watermarks(spec: &QuerySpec, streams: &[(String, SchemaRef)]) -> Result<(), DriverError> {
    for (input, (_, schema)) in spec.inputs().iter().zip(streams) {
        let Some(w) = input.watermark else { continue };
        let field = match spec.source {
            Some(_) => "watermark.column".to_string(),
            None => format!("watermarks.{}.column", input.name),
        };
        let Ok(column) = schema.field_with_name(&w.column) else {
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            return Err(DriverError::Invalid(format!(
                "{field}: {:?} is not a column of {}; its columns are {}",
                w.column,
                input.name,
                names.join(", ")
            )));
        };
        if !matches!(column.data_type(), arrow_schema::DataType::Timestamp(_, _)) {
            return Err(DriverError::Invalid(format!(
                "{field}: {:?} is {}, not a timestamp",
                w.column,
                column.data_type()
            )));
        }
    }
    Ok(())
}

/// The watermarks name timestamp columns, and the output mode fits the
/// query, as in Spark: `complete` needs an aggregation, and `append` of an
/// aggregation needs a watermark and an event-time window over its
/// column, without which no group is ever final.
fn check_event_time(
    spec: &QuerySpec,
    streams: &[(String, SchemaRef)],
    checked: &sluice_sql::Checked,
) -> Result<(), DriverError> {
    check_watermarks(spec, streams)?;
    let stateful = checked.keys.is_some() || checked.top_n.is_some();
    if let Some(d) = &spec.dedup {
        check_dedup(spec, d, checked)?;
    }
    match spec.output_mode {
        Some(OutputMode::Complete) if !stateful => Err(DriverError::Invalid(
            "output_mode: complete needs an aggregation (GROUP BY or SELECT DISTINCT) or a top-N; this query keeps no state".into(),
        )),
        Some(OutputMode::Append) if checked.ops.len() > 1 => append_of_chain(spec, checked),
        Some(OutputMode::Append) if stateful => {
            let columns: Vec<&str> = spec
                .inputs()
                .iter()
                .filter_map(|i| Some(i.watermark?.column.as_str()))
                .collect();
            let window = checked.window.as_deref();
            // The window's column, when an input's watermark is over it.
            let watermark = window
                .filter(|c| columns.contains(c))
                .or(columns.first().copied());
            match (watermark, window) {
                (Some(w), Some(c)) if w == c => Ok(()),
                (None, _) => Err(DriverError::Invalid(
                    "output_mode: append needs a watermark (watermark: {column, delay_ms}) and an event-time window in GROUP BY (or a top-N's PARTITION BY), so that a group is emitted once, when it is final; use update or complete".into(),
                )),
                (Some(w), None) => Err(DriverError::Invalid(format!(
                    "output_mode: append needs GROUP BY window({w}, ...) (or hop, or date_bin; or in a top-N's PARTITION BY) over the watermark column, so that a group is emitted once, when the watermark passes its end"
                ))),
                (Some(w), Some(c)) => Err(DriverError::Invalid(format!(
                    "output_mode: append needs the window over the watermark column {w:?}, not {c:?}"
                ))),
            }
        }
        _ => Ok(()),
    }
}

/// Append mode of operators that feed each other: the last one emits each
/// row once, final: a join, or a group of an event-time window (its key
/// the window of the operator that feeds it) that the watermark closes.
fn append_of_chain(spec: &QuerySpec, checked: &sluice_sql::Checked) -> Result<(), DriverError> {
    let last = checked.ops.last().expect("a chain has operators");
    match last.kind {
        sluice_sql::Kind::Join => Ok(()),
        _ if last.windowed && spec.has_watermark() => Ok(()),
        _ => Err(DriverError::Invalid(format!(
            "output_mode: append needs the last stateful operator, `{}`, to group by an event-time window (window, hop, date_bin or session_window, or the window column of the operator feeding it) with a watermark, so that a group is emitted once, when the watermark passes its end",
            last.name
        ))),
    }
}

/// A deduplicating query is stateless SQL whose output has the key
/// columns and the watermark column; it emits each row once (append).
fn check_dedup(
    spec: &QuerySpec,
    dedup: &sluice_common::spec::DedupSpec,
    checked: &sluice_sql::Checked,
) -> Result<(), DriverError> {
    if !checked.ops.is_empty() {
        return Err(DriverError::Invalid(
            "dedup: the query has a stateful operator (an aggregation, a join of streams or a top-N); dedup removes duplicate rows of a query without one (use SELECT DISTINCT to deduplicate groups)".into(),
        ));
    }
    let names: Vec<&str> = checked
        .output
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    for (i, c) in dedup.columns.iter().enumerate() {
        if !names.contains(&c.as_str()) {
            return Err(DriverError::Invalid(format!(
                "dedup.columns[{i}]: {c:?} is not an output column of the query; its columns are {}",
                names.join(", ")
            )));
        }
    }
    if let Some(w) = &spec.watermark
        && !names.contains(&w.column.as_str())
    {
        return Err(DriverError::Invalid(format!(
            "dedup: the watermark column {:?} must be an output column of the query, which gives each key its event time; its columns are {}",
            w.column,
            names.join(", ")
        )));
    }
    if matches!(spec.output_mode, Some(m) if m != OutputMode::Append) {
        return Err(DriverError::Invalid(
            "output_mode: dedup emits each row once, in append mode".into(),
        ));
    }
    Ok(())
}
