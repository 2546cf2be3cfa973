//! The `nexmark` scenario: each Nexmark query (`--query q0|..|all`) over
//! `--events` events of the `nexmark` source into the discard sink, from
//! submit to FINISHED on the in-process cluster, as Flink's and
//! RisingWave's Nexmark runs measure: events of all kinds per second, and
//! per core, the process's CPU seconds (driver and executor, read from
//! `/proc/self/stat`) rather than the machine's core count.
//!
//! The source paces events at `--events-per-second` (10 M, the rate of
//! Flink's Nexmark setup), which is also the rate of their event time;
//! Sluice reads them slower than that, so every batch finds events
//! waiting. A query over bids alone generates only the bids (Flink's
//! source generates every event and its query filters them), so both
//! events and the table rows read are reported. Queries the engine cannot
//! express are listed with the feature each needs.

use std::io::Write;

use anyhow::Context;
use serde_json::{Value, json};
use sluice_common::nexmark;
use sluice_common::spec::NexmarkSpec;
use tokio_util::sync::CancellationToken;

pub use sluice_nexmark_queries as queries;

use queries::{Mode, Query, Runs};

use super::args::{BenchArgs, NexmarkInput, cores, workdir};
use super::cluster::{self, Run};
use sluice_cli::stats::{Summary, round3};

/// The source partitions of each table.
const PARTITIONS: u32 = 4;

/// Rows of each file the scenario writes for `--input files` or `jsonl`.
const FILE_ROWS: u64 = 1_000_000;

/// Rows of q13's static side input.
const SIDE_INPUT_ROWS: u64 = 10_000;

pub async fn run(args: &BenchArgs, shutdown: &CancellationToken) -> anyhow::Result<(Value, u8)> {
    let chosen: Vec<&Query> = match args.query.as_str() {
        "all" => queries::QUERIES.iter().collect(),
        name => vec![
            queries::find(name)
                .with_context(|| format!("no Nexmark query {name:?}; expected q0 .. q22 or all"))?,
        ],
    };
    let mut results = Vec::new();
    let mut failed = false;
    for q in chosen {
        let mut figures = match &q.plan {
            Err(needs) => json!({"what": q.what, "runs": false, "needs": needs}),
            // A query that fails (its state past the executor's bound, say)
            // is reported, and the others still run.
            Ok(plan) => match one(args, q.name, plan, shutdown).await {
                Ok(mut f) => {
                    f["what"] = q.what.into();
                    f
                }
                Err(e) => {
                    failed = true;
                    json!({"what": q.what, "sql": plan.sql, "failed": format!("{e:#}")})
                }
            },
        };
        figures["query"] = q.name.into();
        results.push(figures);
    }
    let figures = json!({
        "scenario": "nexmark",
        "cores": cores(),
        "events": args.events,
        "events_per_second_source": args.events_per_second,
        "input": match args.input {
            NexmarkInput::Nexmark => "nexmark",
            NexmarkInput::Files => "files",
            NexmarkInput::Jsonl => "jsonl",
        },
        "partitions": PARTITIONS,
        "max_rows_per_batch": args.max_rows_per_batch,
        "trigger_ms": 0,
        "sink": "discard",
        "executors": 1,
        "slots": cluster::SLOTS,
        "queries": results,
    });
    Ok((figures, u8::from(failed)))
}

/// The source of `table` with the run's settings.
fn source(args: &BenchArgs, table: &str) -> anyhow::Result<NexmarkSpec> {
    let spec = json!({
        "table": table,
        "events_per_second": args.events_per_second,
        "total_events": args.events,
        "partitions": PARTITIONS,
    });
    Ok(serde_json::from_value(spec)?)
}

/// Runs one query; returns its figures.
async fn one(
    args: &BenchArgs,
    name: &str,
    plan: &Runs,
    shutdown: &CancellationToken,
) -> anyhow::Result<Value> {
    let (dir, root, _out) = workdir()?;
    let query = format!("nexmark-{name}");
    let mut sources = serde_json::Map::new();
    let mut rows_read = 0;
    for table in plan.tables {
        let s = source(args, table)?;
        rows_read += nexmark::total_rows(&s).unwrap_or(0);
        let source = match args.input {
            NexmarkInput::Nexmark => json!({ "nexmark": s }),
            NexmarkInput::Files | NexmarkInput::Jsonl => files(args, &s)?,
        };
        sources.insert(table.to_string(), source);
    }
    let mut spec = json!({
        "name": query,
        "sources": sources,
        "trigger": {"interval_ms": 0},
        "max_rows_per_batch": args.max_rows_per_batch,
        "sink": {"discard": {}},
        "sql": plan.sql,
        "max_state_bytes": args.max_state_bytes,
    });
    match plan.mode {
        Mode::Update => spec["output_mode"] = "update".into(),
        // With watermarks, an aggregation emits each window once.
        Mode::Append if plan.watermarks => spec["output_mode"] = "append".into(),
        Mode::Append => {}
    }
    if plan.watermarks {
        let w = json!({"column": nexmark::EVENT_TIME, "delay_ms": 0});
        spec["watermarks"] = plan
            .tables
            .iter()
            .map(|t| (t.to_string(), w.clone()))
            .collect();
    }
    if plan.side_input {
        spec["tables"] = json!({"side_input": side_input(dir.path())?});
    }
    let inputs = match files_dir(args) {
        None => Vec::new(),
        Some((dir, _)) => vec![
            std::path::absolute(dir)?
                .to_str()
                .context("files dir is not UTF-8")?
                .to_string(),
        ],
    };
    let memory = cluster::Memory {
        state_bytes: args.max_state_bytes,
        task_bytes: args.max_task_memory_bytes,
        state_memory_bytes: args.state_memory_bytes,
    };
    let (c, client) = cluster::start_reading(&root, &inputs, memory, shutdown).await?;
    let cpu = cpu_seconds()?;
    let run = cluster::run_query(c, client, &query, &spec.to_string()).await?;
    let cpu = cpu_seconds()? - cpu;
    let read: u64 = run.batches.values().map(|p| p.num_input_rows).sum();
    anyhow::ensure!(
        read == rows_read,
        "{name} read {read} rows; {} events hold {rows_read} (files of other --events?)",
        args.events
    );
    let mut figures = rates(args, &run, cpu, rows_read);
    figures["input"] = match files_dir(args) {
        None => "nexmark source".into(),
        Some((_, format)) => format!(
            "{} files, {} a batch",
            format.as_str(),
            args.files_per_batch
        )
        .into(),
    };
    figures["sql"] = plan.sql.into();
    if let Some(d) = plan.differs {
        figures["differs"] = d.into();
    }
    Ok(figures)
}

/// A run's figures: events per second and per core, batches, output.
fn rates(args: &BenchArgs, run: &Run, cpu: f64, rows_read: u64) -> Value {
    let batches = run.batches.values();
    let batch_ms: Vec<f64> = batches
        .clone()
        .map(|p| p.duration_ms.unwrap_or_default().total as f64)
        .collect();
    let events = args.events as f64;
    json!({
        "seconds": round3(run.seconds),
        "cpu_seconds": round3(cpu),
        "events_per_second": (events / run.seconds).round(),
        "events_per_second_per_core": (events / cpu.max(1e-9)).round(),
        "rows_read": rows_read,
        "rows_per_second_per_core": (rows_read as f64 / cpu.max(1e-9)).round(),
        "batches": run.status.last_committed_batch + 1,
        "batch_ms": Summary::of(&batch_ms).map_or(Value::Null, |s| s.to_json()),
        "output_rows": batches.clone().map(|p| p.num_output_rows).sum::<u64>(),
        "output_bytes": batches.clone().map(|p| p.sink_bytes).sum::<u64>(),
        "peak_state_rows": batches.clone().map(|p| p.state_rows_total).max(),
        "peak_state_bytes": batches.map(|p| p.state_bytes).max(),
    })
}

/// The folder of the input's files and their format; `None` for the
/// nexmark source.
fn files_dir(args: &BenchArgs) -> Option<(&std::path::Path, FileFormat)> {
    match args.input {
        NexmarkInput::Nexmark => None,
        NexmarkInput::Files => Some((&args.files_dir, FileFormat::Parquet)),
        NexmarkInput::Jsonl => Some((&args.jsonl_dir, FileFormat::Jsonl)),
    }
}

/// The input's file formats.
#[derive(Debug, Clone, Copy)]
enum FileFormat {
    Parquet,
    Jsonl,
}

impl FileFormat {
    fn as_str(self) -> &'static str {
        match self {
            FileFormat::Parquet => "parquet",
            FileFormat::Jsonl => "jsonl",
        }
    }
}

/// The file source over the files of `spec`'s table under the input's
/// folder, written first when missing (before the clock starts). Parquet
/// files carry their schema; jsonl files are read with the table's.
fn files(args: &BenchArgs, spec: &NexmarkSpec) -> anyhow::Result<Value> {
    let (root, format) = files_dir(args).context("a file input")?;
    let dir = root.join(spec.table.as_str());
    if !dir.exists() {
        let sink = match format {
            FileFormat::Parquet => sluice_proto::SinkFormat::Parquet,
            FileFormat::Jsonl => sluice_proto::SinkFormat::Jsonl,
        };
        sluice_cli::nexmark::write_table(spec, sink, &dir, FILE_ROWS)?;
    }
    let dir = std::path::absolute(&dir)?;
    let count = std::fs::read_dir(&dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == format.as_str()))
        })
        .count();
    let mut files = json!({
        "path": dir.to_str().context("files dir is not UTF-8")?,
        "format": format.as_str(),
        "total_files": count,
        "max_files_per_batch": args.files_per_batch,
    });
    match format {
        FileFormat::Parquet => files["infer"] = true.into(),
        FileFormat::Jsonl => files["schema"] = columns(&nexmark::schema(spec.table))?,
    }
    Ok(json!({ "files": files }))
}

/// `schema` as a file source's `schema:` list.
fn columns(schema: &arrow_schema::Schema) -> anyhow::Result<Value> {
    use arrow_schema::DataType;
    let column = |f: &arrow_schema::Field| -> anyhow::Result<Value> {
        let ty = match f.data_type() {
            DataType::Int64 => "bigint",
            DataType::Utf8 => "string",
            DataType::Timestamp(_, _) => "timestamp",
            other => anyhow::bail!("no file schema type for {other}"),
        };
        Ok(json!({"name": f.name(), "type": ty}))
    };
    schema.fields().iter().map(|f| column(f)).collect()
}

/// q13's side input, `key` 0..10 000 and a `value` string, as a CSV file
/// under `dir`; returns its static table spec.
fn side_input(dir: &std::path::Path) -> anyhow::Result<Value> {
    let tables = dir.join("side_input");
    std::fs::create_dir_all(&tables)?;
    let path = tables.join("side_input.csv");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path)?);
    writeln!(w, "key,value")?;
    for k in 0..SIDE_INPUT_ROWS {
        writeln!(w, "{k},value-{k}")?;
    }
    w.flush()?;
    Ok(json!({
        "path": tables.to_str().context("temp path is not UTF-8")?,
        "format": "csv",
        "schema": [{"name": "key", "type": "bigint"}, {"name": "value", "type": "string"}],
    }))
}

/// This process's CPU seconds so far, user and system, over all its
/// threads: fields 14 and 15 of `/proc/self/stat`, in clock ticks.
fn cpu_seconds() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").context("cannot read /proc/self/stat")?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("/proc/self/stat has no command name")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| -> anyhow::Result<f64> {
        Ok(fields
            .get(i)
            .context("/proc/self/stat is short")?
            .parse::<u64>()? as f64)
    };
    // `rest` starts at field 3: utime is field 14, stime 15.
    let ticks = tick(11)? + tick(12)?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)?.context("no CLK_TCK")? as f64;
    Ok(ticks / hz)
}
