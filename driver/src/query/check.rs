//! What a query's SQL must give at submit, beside its spec: it plans as
//! every task will, its stateful operators can feed each other as they
//! do, its watermarks name timestamp columns, its output mode fits it,
//! `state_ttl_ms` has an operator to apply to, and the sink's
//! `partition_by` names output columns. A query that cannot run is
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
) -> Result<(), DriverError> {
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
    check_chain(spec, &checked)?;
    check_ttl(spec, &checked)?;
    check_event_time(spec, streams, &checked)?;
    for op in &checked.ops {
        if let Some(join) = &op.join {
            join::check(spec, join, op.consumer.is_none())?;
        }
    }
    check_partition_by(spec, &checked.output)?;
    check_kafka_columns(spec, &checked.output)
}

/// Each operator that feeds another can feed it as it does.
fn check_chain(spec: &QuerySpec, checked: &sluice_sql::Checked) -> Result<(), DriverError> {
    for i in 0..checked.ops.len() {
        feed(spec, &checked.ops, i)
            .map_err(|why| DriverError::Invalid(format!("field `sql`: {why}")))?;
    }
    Ok(())
}

/// What operator `i` of `ops` does with changes (see [`Feed::Changes`]):
/// emits them to the aggregation it feeds, reads them from the ones that
/// feed it, or neither. An operator that feeds another as it cannot is
/// `Invalid`; one that would both emit and read, which [`feed`] refuses
/// for the query's check, is an internal error.
pub(super) fn changes(
    spec: &QuerySpec,
    ops: &[sluice_sql::OpInfo],
    i: usize,
) -> Result<sluice_proto::Changes, DriverError> {
    use sluice_proto::Changes;
    let flow = |i| feed(spec, ops, i).map_err(DriverError::Invalid);
    let emits = flow(i)? == Feed::Changes;
    let mut reads = false;
    for (j, o) in ops.iter().enumerate() {
        if o.consumer.is_some_and(|(c, _)| c == i) && flow(j)? == Feed::Changes {
            reads = true;
        }
    }
    match (emits, reads) {
        (false, false) => Ok(Changes::None),
        (true, false) => Ok(Changes::Emit),
        (false, true) => Ok(Changes::Read),
        (true, true) => Err(DriverError::Internal(format!(
            "operator `{}` both reads and emits changes, which the query's check refuses",
            ops[i].name
        ))),
    }
}

/// Whether the keys of operator `op`, which does `changes` with changes,
/// leave its state when idle for the spec's `state_ttl_ms`: an
/// aggregation without a window that neither emits nor reads changes
/// (each state row is one group, replaced whole when it changes), and a
/// join of streams without an event-time bound (whose buffered rows the
/// watermark never evicts). Every other operator's state is bounded by
/// the watermark, or holds rows that changes are retracted from (a
/// forgotten row would make a later retraction wrong).
pub(super) fn expires(op: &sluice_sql::OpInfo, changes: sluice_proto::Changes) -> bool {
    use sluice_sql::Kind;
    match op.kind {
        Kind::Aggregate => !op.windowed && !op.session && changes == sluice_proto::Changes::None,
        Kind::Join => op.join.as_ref().is_none_or(|j| j.bound.is_none()),
        Kind::TopN => false,
    }
}

/// A spec with `state_ttl_ms` has an operator it applies to ([`expires`]).
fn check_ttl(spec: &QuerySpec, checked: &sluice_sql::Checked) -> Result<(), DriverError> {
    let Some(ttl) = spec.state_ttl_ms else {
        return Ok(());
    };
    for (i, op) in checked.ops.iter().enumerate() {
        if expires(op, changes(spec, &checked.ops, i)?) {
            return Ok(());
        }
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

/// How an operator's output flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Feed {
    /// To the sink, as the query's output mode says.
    Sink,
    /// To the next operator, each row once, final: a join's rows, or the
    /// groups of event-time windows the watermark closes (append).
    Final,
    /// To the next aggregation as changes: each changed group's old row
    /// retracted and its new one added (update and complete modes).
    Changes,
}

/// How operator `i` of `ops` feeds the next one, or why it cannot
/// (naming both operators, and the mode where it decides). An
/// aggregation without a window, or a top-N, changes its rows with
/// every batch: only an aggregation that is last can take those changes.
pub(super) fn feed(spec: &QuerySpec, ops: &[sluice_sql::OpInfo], i: usize) -> Result<Feed, String> {
    use sluice_sql::Kind;
    let op = &ops[i];
    let Some((n, _)) = op.consumer else {
        return Ok(Feed::Sink);
    };
    let next = &ops[n];
    let feeds = format!("`{}` feeds `{}`", op.name, next.name);
    let mode = OutputMode::effective(spec.output_mode, true);
    let window = "group by an event-time window (window, hop, date_bin or session_window) with a watermark on its column";
    match op.kind {
        Kind::Join => Ok(Feed::Final),
        Kind::Aggregate if op.windowed && spec.has_watermark() => Ok(Feed::Final),
        Kind::Aggregate if op.session => Err(format!(
            "the session-window aggregation {feeds}, so it emits each session once, when the watermark passes its end: the query needs a watermark"
        )),
        Kind::Aggregate if mode == OutputMode::Append => Err(format!(
            "the aggregation {feeds}, so in append mode it must emit each group once, final: {window}; without one its groups change with every batch (update and complete modes let an aggregation take those changes)"
        )),
        Kind::Aggregate if next.kind != Kind::Aggregate => Err(format!(
            "the aggregation {feeds}: its groups change with every batch, and only an aggregation can take a group's changes (its old row retracted, its new one added): {window}"
        )),
        Kind::Aggregate if next.session => Err(format!(
            "the aggregation {feeds}: its groups change with every batch, and an aggregation by session windows cannot take a group's changes: {window}"
        )),
        Kind::Aggregate if next.consumer.is_some() => Err(format!(
            "the aggregation {feeds}: its groups change with every batch, so `{}` reads its changes, and an aggregation that reads changes must be the last stateful operator",
            next.name
        )),
        Kind::Aggregate => Ok(Feed::Changes),
        Kind::TopN => Err(format!(
            "the top-N {feeds}, but a top-N's ranks change as rows arrive: it can only be the last stateful operator"
        )),
    }
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

/// The Kafka sink's `key` names an output column of a scalar type, and a
/// `raw` sink has a `value` column of bytes or text.
fn check_kafka_columns(spec: &QuerySpec, output: &SchemaRef) -> Result<(), DriverError> {
    let sluice_common::spec::SinkSpec::Kafka(sink) = &spec.sink else {
        return Ok(());
    };
    let names = || {
        let names: Vec<&str> = output.fields().iter().map(|f| f.name().as_str()).collect();
        names.join(", ")
    };
    if let Some(key) = &sink.key {
        let Ok(field) = output.field_with_name(key) else {
            return Err(DriverError::Invalid(format!(
                "sink.kafka.key: {key:?} is not an output column of the query; its columns are {}",
                names()
            )));
        };
        if field.data_type().is_nested() {
            return Err(DriverError::Invalid(format!(
                "sink.kafka.key: column {key:?} is {}, not a scalar type",
                field.data_type()
            )));
        }
    }
    if sink.format == sluice_common::spec::SinkRecordFormat::Raw {
        use arrow_schema::DataType::*;
        match output.field_with_name("value").map(|f| f.data_type()) {
            Ok(Binary | LargeBinary | BinaryView | Utf8 | LargeUtf8 | Utf8View) => {}
            Ok(t) => {
                return Err(DriverError::Invalid(format!(
                    "sink.kafka.format: raw writes the `value` column's bytes, but it is {t}; \
                     cast it to a string or binary, or use format json"
                )));
            }
            Err(_) => {
                return Err(DriverError::Invalid(format!(
                    "sink.kafka.format: raw writes the `value` column, which the query does not \
                     have; its columns are {}",
                    names()
                )));
            }
        }
    }
    Ok(())
}

/// The sink's `partition_by` names output columns, and leaves at least
/// one for the files.
fn check_partition_by(spec: &QuerySpec, output: &SchemaRef) -> Result<(), DriverError> {
    let sluice_common::spec::SinkSpec::Files(sink) = &spec.sink else {
        return Ok(());
    };
    for (i, c) in sink.partition_by.iter().enumerate() {
        let Ok(field) = output.field_with_name(c) else {
            let names: Vec<&str> = output.fields().iter().map(|f| f.name().as_str()).collect();
            return Err(DriverError::Invalid(format!(
                "sink.files.partition_by[{i}]: {c:?} is not an output column of the query; its columns are {}",
                names.join(", ")
            )));
        };
        if field.data_type().is_nested() {
            return Err(DriverError::Invalid(format!(
                "sink.files.partition_by[{i}]: column {c:?} is {}, not a scalar type",
                field.data_type()
            )));
        }
    }
    if !sink.partition_by.is_empty() && sink.partition_by.len() >= output.fields().len() {
        return Err(DriverError::Invalid(
            "sink.files.partition_by: names every output column; the files need at least one"
                .into(),
        ));
    }
    Ok(())
}
