//! `sluice state`: SQL over a query's state, read straight from its
//! checkpoint, without a driver: the latest committed state version of
//! one of the query's state operators, as the table `state` (the
//! operator's key columns, then its values, under the query's own names
//! of its keys and aggregates). It reads a running query as
//! well as a stopped one: state files are create-only, and version N is
//! complete once `commits/N` exists.
//!
//! ```text
//!  --checkpoint-root ─► queries/<q>/ spec.json, input schemas ─► state operators (sluice_executor::inspect)
//!  commits/ ─► latest batch N ─► state/<operator>/…, version N ─► rows ─► --sql ─► table | --json
//! ```
//!
//! Which batch was read goes to stderr; the result alone to stdout.

use arrow_array::RecordBatch;
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::ArrowError;
use sluice_common::checkpoint::{Checkpoint, Log, QueryCheckpoint, query_location};
use sluice_common::state::StateStore;
use sluice_common::storage::Location;
use sluice_executor::ExecutorError;
use sluice_executor::inspect::{self, StateOperator};
use sluice_sql::{Answer, SqlError};

use crate::output;

/// The table the SQL reads.
const TABLE: &str = "state";

/// Reads of a version that retention removed under them (the query ran
/// on), each then read again at the newer commit.
const READS: usize = 3;

#[derive(Debug, clap::Args)]
pub struct StateArgs {
    /// The query, by name.
    pub query: String,
    /// A SELECT over the table `state`: the operator's key columns, then
    /// its value columns, named as the query names them (`SELECT * FROM
    /// state LIMIT 5` shows them).
    #[arg(long)]
    pub sql: String,
    /// The state operator; needed when the query has several.
    #[arg(long)]
    pub operator: Option<String>,
    /// The drivers' --checkpoint-root: a path, or an s3://, gs:// or az://
    /// URL (credentials from AWS_*, GOOGLE_*, AZURE_*, as the driver's).
    #[arg(long, env = "SLUICE_CHECKPOINT_ROOT")]
    pub checkpoint_root: String,
    /// Print the rows as a JSON array of objects.
    #[arg(long)]
    pub json: bool,
}

/// Why `sluice state` gives no answer.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("--checkpoint-root {root}: {reason}")]
    Root { root: String, reason: String },
    #[error(
        "no query {query:?} in the checkpoint at {root} (its queries: {})",
        list(known)
    )]
    NoQuery {
        query: String,
        root: String,
        known: Vec<String>,
    },
    #[error(
        "query {query} keeps no state: its SQL has no aggregation, join or top-N, and it has no dedup"
    )]
    NoState { query: String },
    #[error(
        "query {query} has several state operators; pick one with --operator: {}",
        list(known)
    )]
    Ambiguous { query: String, known: Vec<String> },
    #[error(
        "query {query} has no state operator {operator:?}; its state operators: {}",
        list(known)
    )]
    NoOperator {
        query: String,
        operator: String,
        known: Vec<String>,
    },
    #[error("query {query}: {error}")]
    Checkpoint {
        query: String,
        error: sluice_common::Error,
    },
    #[error("query {query}: cannot plan its state operators: {error}")]
    Plan {
        query: String,
        error: Box<ExecutorError>,
    },
    #[error("query {query}: cannot read the state of `{operator}`: {error}")]
    Read {
        query: String,
        operator: String,
        error: Box<ExecutorError>,
    },
    #[error("--sql over the state of {query}, operator `{operator}`: {error}")]
    Sql {
        query: String,
        operator: String,
        error: SqlError,
    },
    #[error("cannot print the result: {0}")]
    Print(ArrowError),
}

fn list(names: &[String]) -> String {
    match names {
        [] => "none".into(),
        names => names.join(", "),
    }
}

/// The `state` command.
pub async fn command(args: &StateArgs) -> anyhow::Result<u8> {
    let stores = crate::verify::stores();
    let root = checkpoint_root(&args.checkpoint_root)?;
    let cp = Checkpoint::open(&stores, &root).map_err(|e| StateError::Root {
        root: root.clone(),
        reason: e.to_string(),
    })?;
    let query = args.query.as_str();
    let qc = cp.query(query);
    let failed = |error| StateError::Checkpoint {
        query: query.to_string(),
        error,
    };
    let spec = match qc.metadata().await.map_err(failed)? {
        Some(_) => qc.spec().await.map_err(failed)?,
        None => None,
    };
    let Some(spec) = spec else {
        let known = cp.query_names().await.map_err(failed)?;
        let (query, root) = (query.to_string(), root);
        return Err(StateError::NoQuery { query, root, known }.into());
    };
    let planning = |error| StateError::Plan {
        query: query.to_string(),
        error: Box::new(error),
    };
    let inputs = inspect::inputs(&qc, &spec).await.map_err(planning)?;
    let ops = inspect::operators(&spec, &inputs).await.map_err(planning)?;
    let op = pick(query, ops, args.operator.as_deref())?;
    let store = StateStore::open(&stores, &query_location(&root, query)).map_err(failed)?;
    let lineage = inspect::lineage(&qc, &spec).await.map_err(planning)?;
    let (version, rows) = read_latest(&qc, &store, &op, &lineage).await?;
    let answer = sluice_sql::query_rows(
        &args.sql,
        TABLE,
        op.view.clone(),
        rows,
        sluice_sql::guard::DEFAULT_BUDGET,
    )
    .await
    .map_err(|error| StateError::Sql {
        query: query.to_string(),
        operator: op.name.clone(),
        error,
    })?;
    match version {
        Some(n) => eprintln!("state of query {query}, operator {}, at batch {n}", op.name),
        None => eprintln!("query {query} has committed no batch: its state is empty"),
    }
    let text = match args.json {
        true => json(&answer),
        false => text(&answer),
    };
    print!("{}", text.map_err(StateError::Print)?);
    Ok(0)
}

/// The checkpoint root as a location: URLs as given, paths made absolute.
/// A local root must exist: opening storage would otherwise create it.
fn checkpoint_root(root: &str) -> Result<String, StateError> {
    let bad = |reason: String| StateError::Root {
        root: root.to_string(),
        reason,
    };
    let location = match root.contains("://") {
        true => root.to_string(),
        false => std::path::absolute(root)
            .map_err(|e| bad(e.to_string()))?
            .to_string_lossy()
            .into_owned(),
    };
    match Location::parse(&location).map_err(bad)? {
        Location::Local(dir) if !dir.is_dir() => Err(bad("the directory does not exist".into())),
        _ => Ok(location),
    }
}

/// The operator `--operator` names, or the query's only one.
fn pick(
    query: &str,
    ops: Vec<StateOperator>,
    operator: Option<&str>,
) -> Result<StateOperator, StateError> {
    let names: Vec<String> = ops.iter().map(|o| o.name.clone()).collect();
    let at = pick_name(query, &names, operator)?;
    Ok(ops.into_iter().nth(at).expect("an index of ops"))
}

/// The index in `names` of the operator `operator` names, or of the
/// only one.
fn pick_name(query: &str, names: &[String], operator: Option<&str>) -> Result<usize, StateError> {
    let known = names.to_vec();
    let query = query.to_string();
    match operator {
        Some(name) => names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| StateError::NoOperator {
                query,
                operator: name.to_string(),
                known,
            }),
        None => match names.len() {
            1 => Ok(0),
            0 => Err(StateError::NoState { query }),
            _ => Err(StateError::Ambiguous { query, known }),
        },
    }
}

/// `op`'s state at the latest committed batch, and that batch (`None`,
/// and no rows, before the first commit). A version that retention
/// removes while it is read (the query ran on) is read again at the newer
/// commit.
async fn read_latest(
    qc: &QueryCheckpoint,
    store: &StateStore,
    op: &StateOperator,
    lineage: &inspect::Lineage,
) -> Result<(Option<u64>, Vec<RecordBatch>), StateError> {
    let failed = |error| StateError::Checkpoint {
        query: qc.name().to_string(),
        error,
    };
    let mut reads = 0;
    loop {
        let Some(version) = qc.latest(Log::Commits).await.map_err(failed)? else {
            return Ok((None, Vec::new()));
        };
        match inspect::read(store, op, version, lineage).await {
            Ok(rows) => return Ok((Some(version), rows)),
            Err(error) => {
                reads += 1;
                let latest = qc.latest(Log::Commits).await.map_err(failed)?;
                if reads == READS || latest == Some(version) {
                    return Err(StateError::Read {
                        query: qc.name().to_string(),
                        operator: op.name.clone(),
                        error: Box::new(error),
                    });
                }
            }
        }
    }
}

/// The rows under a header of the column names (see [`output::table`]).
fn text(answer: &Answer) -> Result<String, ArrowError> {
    let headers: Vec<&str> = answer
        .schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for batch in &answer.batches {
        let columns = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;
        for i in 0..batch.num_rows() {
            rows.push(columns.iter().map(|c| c.value(i).to_string()).collect());
        }
    }
    Ok(output::table(&headers, &rows))
}

/// The rows as one JSON array of objects, nulls included.
fn json(answer: &Answer) -> Result<String, ArrowError> {
    let mut w = arrow_json::WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, arrow_json::writer::JsonArray>(Vec::new());
    let batches: Vec<&RecordBatch> = answer.batches.iter().collect();
    w.write_batches(&batches)?;
    w.finish()?;
    let mut out = String::from_utf8_lossy(&w.into_inner()).into_owned();
    if out.is_empty() {
        out.push_str("[]");
    }
    out.push('\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    fn empty(schema: arrow_schema::SchemaRef) -> Answer {
        Answer {
            batches: vec![RecordBatch::new_empty(schema.clone())],
            schema,
        }
    }

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn the_operator_is_the_only_one_or_the_one_named() {
        assert_eq!(pick_name("q", &names(&["a"]), None).unwrap(), 0);
        assert_eq!(pick_name("q", &names(&["a", "b"]), Some("b")).unwrap(), 1);
        let e = pick_name("q", &names(&["a", "b"]), None).unwrap_err();
        assert!(e.to_string().ends_with("--operator: a, b"), "{e}");
        let e = pick_name("q", &names(&["a"]), Some("x"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no state operator \"x\"") && e.ends_with(": a"),
            "{e}"
        );
        let e = pick_name("q", &[], None).unwrap_err().to_string();
        assert!(e.starts_with("query q keeps no state"), "{e}");
    }

    #[test]
    fn rows_print_as_a_table_and_as_json() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("n", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec![Some("a"), None])),
                Arc::new(Int64Array::from(vec![1, 22])),
            ],
        )
        .unwrap();
        let answer = Answer {
            schema: schema.clone(),
            batches: vec![batch],
        };
        assert_eq!(text(&answer).unwrap(), "k     n\na     1\nNULL  22\n");
        assert_eq!(
            json(&answer).unwrap(),
            "[{\"k\":\"a\",\"n\":1},{\"k\":null,\"n\":22}]\n"
        );
        assert_eq!(text(&empty(schema.clone())).unwrap(), "k  n\n");
        assert_eq!(json(&empty(schema)).unwrap(), "[]\n");
    }

    #[test]
    fn a_local_root_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_str().unwrap();
        assert_eq!(checkpoint_root(root).unwrap(), root);
        let gone = dir.path().join("nothing");
        let e = checkpoint_root(gone.to_str().unwrap()).unwrap_err();
        assert!(
            e.to_string().ends_with("the directory does not exist"),
            "{e}"
        );
        assert!(!gone.exists());
    }
}
