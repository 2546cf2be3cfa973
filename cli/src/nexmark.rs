//! `sluice nexmark generate`: writes the rows of one Nexmark table to
//! files, exactly the rows the `nexmark` source produces for the same
//! settings, in row order, so that other engines and oracles read the same
//! events. Files are encoded as the file sink encodes them and written
//! under a temporary name, then renamed into place.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::json;
use sluice_common::nexmark;
use sluice_common::spec::{NexmarkSpec, NexmarkTable};
use sluice_proto::SinkFormat;

#[derive(Debug, clap::Subcommand)]
pub enum NexmarkCommand {
    /// Write the rows of one Nexmark table among the first `--events`
    /// events into files under `--out`; prints a JSON summary.
    Generate(GenerateArgs),
}

#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    /// Events of all kinds; the table holds its share.
    #[arg(long)]
    pub events: u64,
    /// person, auction or bid.
    #[arg(long, value_parser = parse_table)]
    pub table: NexmarkTable,
    /// jsonl, csv or parquet.
    #[arg(long, default_value = "parquet", value_parser = parse_format)]
    pub format: SinkFormat,
    /// The directory to write into (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// Rows per file.
    #[arg(long, default_value_t = 1_000_000)]
    pub rows_per_file: u64,
    /// The source's `events_per_second`: it sets the event times.
    #[arg(long, default_value_t = 10_000_000)]
    pub events_per_second: u64,
    /// The source's generator settings, as JSON (`{"active_people": 500}`):
    /// any of `base_time_ms`, `active_people`, `in_flight_auctions`, the
    /// three `*_proportion`s, the three `avg_*_byte_size`s and the four
    /// `hot_*_ratio`s.
    #[arg(long, default_value = "{}")]
    pub settings: String,
}

fn parse_table(s: &str) -> Result<NexmarkTable, String> {
    NexmarkTable::parse(s).ok_or_else(|| format!("{s:?}: expected person, auction or bid"))
}

fn parse_format(s: &str) -> Result<SinkFormat, String> {
    match s {
        "jsonl" => Ok(SinkFormat::Jsonl),
        "csv" => Ok(SinkFormat::Csv),
        "parquet" => Ok(SinkFormat::Parquet),
        _ => Err(format!("{s:?}: expected jsonl, csv or parquet")),
    }
}

pub fn command(cmd: NexmarkCommand) -> anyhow::Result<u8> {
    match cmd {
        NexmarkCommand::Generate(args) => generate(&args).map(|()| 0),
    }
}

/// The source spec of `args`: the settings a query's `nexmark` source
/// would have, in one partition (partitions divide rows, never change them).
fn spec(args: &GenerateArgs) -> anyhow::Result<NexmarkSpec> {
    let mut settings: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&args.settings).context("--settings is not a JSON object")?;
    for fixed in ["table", "events_per_second", "total_events", "partitions"] {
        anyhow::ensure!(
            !settings.contains_key(fixed),
            "--settings: {fixed} has its own flag"
        );
    }
    settings.insert("table".into(), args.table.as_str().into());
    settings.insert("events_per_second".into(), args.events_per_second.into());
    settings.insert("total_events".into(), args.events.into());
    settings.insert("partitions".into(), 1.into());
    let spec: NexmarkSpec = serde_json::from_value(settings.into()).context("--settings")?;
    spec.validate("nexmark")?;
    Ok(spec)
}

fn generate(args: &GenerateArgs) -> anyhow::Result<()> {
    let spec = spec(args)?;
    let written = write_table(&spec, args.format, &args.out, args.rows_per_file)?;
    let summary = json!({
        "table": spec.table.as_str(),
        "events": args.events,
        "rows": written.rows,
        "files": written.files,
        "bytes": written.bytes,
        "format": sluice_executor::sink_extension(args.format),
        "schema": nexmark::schema(spec.table).fields().iter()
            .map(|f| json!({"name": f.name(), "type": f.data_type().to_string()}))
            .collect::<Vec<_>>(),
    });
    println!("{summary}");
    Ok(())
}

/// What [`write_table`] wrote.
pub struct Written {
    pub rows: u64,
    pub files: u64,
    pub bytes: u64,
}

/// Writes the rows of the spec's table among its `total_events` into
/// files of `rows_per_file` rows under `out` (created if missing).
pub fn write_table(
    spec: &NexmarkSpec,
    format: SinkFormat,
    out: &Path,
    rows_per_file: u64,
) -> anyhow::Result<Written> {
    anyhow::ensure!(rows_per_file > 0, "--rows-per-file must be at least 1");
    // Rows in order: partitions divide rows, never change them.
    let spec = &NexmarkSpec {
        partitions: 1,
        ..spec.clone()
    };
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let rows = nexmark::total_rows(spec).unwrap_or(0);
    let (mut files, mut bytes) = (0u64, 0u64);
    for (i, start) in (0..rows).step_by(rows_per_file as usize).enumerate() {
        let end = (start + rows_per_file).min(rows);
        let ext = sluice_executor::sink_extension(format);
        let name = format!("{}-{i:05}.{ext}", spec.table.as_str());
        bytes += write_file(&out.join(name), spec, format, start, end)?;
        files += 1;
    }
    Ok(Written { rows, files, bytes })
}

/// Writes rows `[start, end)` into `path`; returns its bytes.
fn write_file(
    path: &Path,
    spec: &NexmarkSpec,
    format: SinkFormat,
    start: u64,
    end: u64,
) -> anyhow::Result<u64> {
    let dir = path.parent().context("a file has a directory")?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot write into {}", dir.display()))?;
    let mut encoder = sluice_executor::sink_encoder(format, nexmark::schema(spec.table))?;
    let mut bytes = 0u64;
    let columns = nexmark::all_columns(spec.table);
    for chunk in nexmark::chunks(spec, 0, (start, end), &columns) {
        let data = encoder.encode(&chunk?)?;
        bytes += data.len() as u64;
        tmp.write_all(&data)?;
    }
    let tail = encoder.finish()?;
    bytes += tail.len() as u64;
    tmp.write_all(&tail)?;
    tmp.as_file().sync_all()?;
    // Readable as any written file is, not private as a temporary file.
    tmp.as_file()
        .set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    tmp.persist(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(bytes)
}
