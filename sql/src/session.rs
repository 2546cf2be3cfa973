//! The one DataFusion session configuration, and planning under it.
//!
//! Invariant (docs/design-notes.md, 3, determinism): the output of a task, its rows
//! and their order, is a pure function of the SQL and the input. Everything
//! that could make DataFusion reorder rows is off: one target partition, no
//! repartitioning of joins, aggregations, windows, sorts or scans, no round
//! robin. Output batches are re-chunked to a fixed size, which keeps their
//! order.

use datafusion::execution::SessionStateBuilder;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::logical_expr::LogicalPlan;
use datafusion::optimizer::Optimizer;
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};

use crate::support::{self, Shape};
use crate::{SqlError, guard};

/// Rows per output batch.
pub const BATCH_ROWS: usize = 8192;

/// DataFusion's optimizer rules that Sluice leaves out.
/// - `count(DISTINCT x)` stays one aggregation, whose state (the distinct
///   values of each group) merges across batches; DataFusion's rewrite
///   into two nested aggregations would not.
/// - A plan keeps its scan of the stream even when it can tell that no row
///   passes (`WHERE false`, a join on a false condition): a stateful
///   query's aggregation must stay over the stream, where its map and
///   reduce stages split it, and every task reads its whole input (see
///   `input`).
const OFF: [&str; 5] = [
    "single_distinct_aggregation_to_group_by",
    "eliminate_filter",
    "eliminate_join",
    "eliminate_limit",
    "propagate_empty_relation",
];

/// A fresh context with Sluice's settings, whose operators hold at most
/// `memory` bytes (a memory pool of its own; `None`: unbounded). Nothing
/// else creates one.
pub fn context(memory: Option<usize>) -> Result<SessionContext, SqlError> {
    let config = SessionConfig::new()
        .with_target_partitions(1)
        .with_batch_size(BATCH_ROWS)
        .with_repartition_joins(false)
        .with_repartition_aggregations(false)
        .with_repartition_windows(false)
        .with_repartition_sorts(false)
        .with_repartition_file_scans(false)
        .with_round_robin_repartition(false)
        .with_coalesce_batches(true)
        .with_information_schema(false);
    let rules = Optimizer::new()
        .rules
        .into_iter()
        .filter(|r| !OFF.contains(&r.name()))
        .collect();
    let mut runtime = RuntimeEnvBuilder::new();
    if let Some(bytes) = memory {
        runtime = runtime.with_memory_limit(bytes, 1.0);
    }
    let runtime = runtime.build_arc().map_err(SqlError::from_planning)?;
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .with_optimizer_rules(rules)
        .build();
    let ctx = SessionContext::new_with_state(state);
    for f in crate::window::functions() {
        ctx.register_udf(f);
    }
    ctx.register_udf(crate::session_window::function());
    crate::bounded::register(&ctx);
    crate::to_char::register(&ctx);
    Ok(ctx)
}

/// Plans `sql` in `ctx` (unoptimized) and refuses anything but a query
/// over the stream tables `streams` that Sluice runs, a window call whose
/// lengths cannot run ([`crate::window_check`]), or a query beyond the
/// bounds of [`guard`]. Runs on a planning thread
/// ([`guard::on_planning_thread`]).
pub async fn logical_plan(
    ctx: &SessionContext,
    sql: &str,
    streams: &[String],
) -> Result<(LogicalPlan, Shape), SqlError> {
    let plan = select_plan(ctx, sql).await?;
    let shape = support::check(&plan, streams)?;
    crate::window_check::check(&plan)?;
    let pool = ctx.runtime_env().memory_pool.clone();
    let plan = crate::window::expand_sliding(plan, pool).map_err(SqlError::from_planning)?;
    Ok((plan, shape))
}

/// Plans `sql` in `ctx` (unoptimized) and refuses anything but a SELECT,
/// or one beyond the bounds of [`guard`]: any query over `ctx`'s tables,
/// streaming or not. Runs on a planning thread.
pub async fn select_plan(ctx: &SessionContext, sql: &str) -> Result<LogicalPlan, SqlError> {
    guard::check_tokens(sql)?;
    let state = ctx.state();
    let dialect = state.config().options().sql_parser.dialect;
    let statement = state
        .sql_to_statement(sql, &dialect)
        .map_err(|e| with_end_position(SqlError::from_planning(e), sql))?;
    guard::check_depth(&statement)?;
    let plan = state
        .statement_to_plan(statement)
        .await
        .map_err(|e| with_end_position(SqlError::from_planning(e), sql))?;
    SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false)
        .verify_plan(&plan)
        .map_err(|e| SqlError::Unsupported {
            construct: "a statement other than SELECT".into(),
            reason: e.strip_backtrace(),
        })?;
    Ok(plan)
}

/// A parse error at the end of the query carries no position from the
/// parser ("found: EOF"): add the position of the end.
fn with_end_position(e: SqlError, sql: &str) -> SqlError {
    match e {
        SqlError::Invalid(m) if m.contains("found: EOF") && !m.contains("Line:") => {
            let line = sql.lines().count().max(1);
            let column = sql.lines().last().map_or(0, |l| l.chars().count()) + 1;
            SqlError::Invalid(format!(
                "{m} at the end of the query, Line: {line}, Column: {column}"
            ))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parse_error_at_the_end_names_the_end() {
        let e = with_end_position(
            SqlError::Invalid("ParserError(\"Expected: an expression, found: EOF\")".into()),
            "SELECT a\nFROM input WHERE",
        );
        assert!(
            e.to_string()
                .ends_with("at the end of the query, Line: 2, Column: 17"),
            "{e}"
        );
    }
}
