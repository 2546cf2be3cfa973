//! One-off SQL over rows already in memory (`sluice state`: a query's
//! state, read from its checkpoint): any SELECT, not only what a streaming
//! query may be, run once over one table and collected.
//!
//! ```text
//!  rows (Arrow batches) ─► table `name` ─► sql, planned on a planning thread ─► result batches
//! ```
//!
//! The bounds of [`guard`] hold here too: the SQL is a user's, and is
//! planned as any query's is.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use datafusion::datasource::MemTable;
use futures::executor::block_on;

use crate::{SqlError, guard, register, session};

/// The result of [`query_rows`]: its schema (also when it has no rows)
/// and its rows.
#[derive(Debug, Clone)]
pub struct Answer {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
}

/// Runs the SELECT `sql` over `rows` (of `schema`), registered as the one
/// table `name`. SQL that does not parse or plan (an unknown column, a
/// statement other than SELECT) is [`SqlError::Invalid`] or
/// [`SqlError::Unsupported`], with DataFusion's message; planning takes at
/// most `budget`.
pub async fn query_rows(
    sql: &str,
    name: &str,
    schema: SchemaRef,
    rows: Vec<RecordBatch>,
    budget: Duration,
) -> Result<Answer, SqlError> {
    let (sql, name) = (sql.to_owned(), name.to_owned());
    let (ctx, plan) = guard::on_planning_thread(budget, move || {
        let ctx = session::context(None)?;
        let table = MemTable::try_new(schema, vec![rows]).map_err(SqlError::from_planning)?;
        register(&ctx, &name, Arc::new(table))?;
        let logical = block_on(session::select_plan(&ctx, &sql))?;
        let physical = block_on(ctx.state().create_physical_plan(&logical))
            .map_err(SqlError::from_planning)?;
        Ok((ctx, physical))
    })
    .await?;
    let schema = plan.schema();
    let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx())
        .await
        .map_err(SqlError::from_execution)?;
    Ok(Answer { schema, batches })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    fn rows() -> (SchemaRef, Vec<RecordBatch>) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, false),
            Field::new("n", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec!["a", "b", "c"])),
                Arc::new(Int64Array::from(vec![1, 2, 4])),
            ],
        )
        .unwrap();
        (schema, vec![batch])
    }

    async fn run(sql: &str) -> Result<Answer, SqlError> {
        let (schema, batches) = rows();
        query_rows(sql, "state", schema, batches, guard::DEFAULT_BUDGET).await
    }

    #[tokio::test]
    async fn a_select_runs_over_the_rows() {
        let a = run("SELECT count(*) AS keys, sum(n) AS total FROM state WHERE n > 1")
            .await
            .unwrap();
        assert_eq!(a.schema.field(0).name(), "keys");
        let b = &a.batches[0];
        let col = |i: usize| b.column(i).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!((col(0).value(0), col(1).value(0)), (2, 6));
        let sorted = run("SELECT k FROM state ORDER BY n DESC LIMIT 1")
            .await
            .unwrap();
        assert_eq!(
            sorted.batches.iter().map(|b| b.num_rows()).sum::<usize>(),
            1
        );
    }

    #[tokio::test]
    async fn bad_sql_is_named() {
        let e = run("SELECT nope FROM state").await.unwrap_err();
        assert!(
            matches!(e, SqlError::Invalid(_)) && e.to_string().contains("nope"),
            "{e}"
        );
        let e = run("SELEC 1").await.unwrap_err();
        assert!(e.to_string().contains("SELEC"), "{e}");
        let e = run("DROP TABLE state").await.unwrap_err();
        assert!(e.to_string().starts_with("sql: "), "{e}");
    }
}
