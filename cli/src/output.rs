//! Rendering of proto messages for people and for scripts: JSON objects
//! (built by hand with `serde_json::json!`, since the proto types have no
//! `Serialize`), `key: value` text, one-line progress and aligned tables.
//! Everything here is a pure function.

use serde_json::{Value, json};
use sluice_proto::{BatchProgress, ClusterInfo, QueryState, QueryStatus};

pub use sluice_proto::state_name;

pub fn progress_json(p: &BatchProgress) -> Value {
    let d = p.duration_ms.unwrap_or_default();
    json!({
        "id": p.id,
        "name": p.name,
        "batch_id": p.batch_id,
        "num_input_rows": p.num_input_rows,
        "input_rows_per_second": p.input_rows_per_second,
        "processed_rows_per_second": p.processed_rows_per_second,
        "duration_ms": {
            "latest_offset": d.latest_offset,
            "wal_commit": d.wal_commit,
            "execution": d.execution,
            "sink_commit": d.sink_commit,
            "commit": d.commit,
            "total": d.total,
            "map": d.map,
            "reduce": d.reduce,
        },
        "state_rows_total": p.state_rows_total,
        "state_bytes": p.state_bytes,
        "watermark_ms": p.watermark_ms,
        "rows_dropped_by_watermark": p.rows_dropped_by_watermark,
        "rows_without_event_time": p.rows_without_event_time,
        "state_rebuild": p.state_rebuild.map(|r| json!({
            "partitions": r.partitions,
            "partitions_read": r.partitions_read,
            "rows": r.rows,
            "duration_ms": r.duration_ms,
        })),
        "timestamp_ms": p.timestamp_ms,
        "epoch": p.epoch,
        "skipped_before": p.skipped_before,
        "bad_records": p.bad_records,
        "records_lost": p.records_lost,
        "partitions": p.partitions.iter().map(|t| json!({
            "topic": t.topic,
            "partition": t.partition,
            "start_offset": t.start_offset,
            "end_offset": t.end_offset,
            "latest_offset": t.latest_offset,
            "lag": t.lag,
        })).collect::<Vec<_>>(),
    })
}

/// A Kafka source's partitions after a batch, compactly:
/// `events/0 end 120 lag 0, events/1 end 98 lag 2`.
pub fn partitions_text(p: &BatchProgress) -> String {
    p.partitions
        .iter()
        .map(|t| {
            format!(
                "{}/{} end {} lag {}",
                t.topic, t.partition, t.end_offset, t.lag
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One compact line per committed batch.
pub fn progress_line(p: &BatchProgress) -> String {
    let d = p.duration_ms.unwrap_or_default();
    let mut bad = if p.bad_records > 0 {
        format!("  bad records {}", p.bad_records)
    } else {
        String::new()
    };
    if p.state_bytes > 0 {
        bad.push_str(&format!(
            "  state {} rows {}",
            p.state_rows_total,
            human_bytes(p.state_bytes)
        ));
    }
    if let Some(w) = p.watermark_ms {
        bad.push_str(&format!("  watermark {w}"));
    }
    if p.rows_dropped_by_watermark > 0 {
        bad.push_str(&format!("  late {}", p.rows_dropped_by_watermark));
    }
    if p.rows_without_event_time > 0 {
        bad.push_str(&format!("  no event time {}", p.rows_without_event_time));
    }
    if let Some(r) = &p.state_rebuild {
        bad.push_str(&format!(
            "  rebuilt {} state partitions from {} in {} ms",
            r.partitions, r.partitions_read, r.duration_ms
        ));
    }
    if !p.partitions.is_empty() {
        let lag: i64 = p.partitions.iter().map(|t| t.lag).sum();
        bad.push_str(&format!("  lag {lag}"));
    }
    if p.records_lost > 0 {
        bad.push_str(&format!("  lost {}", p.records_lost));
    }
    format!(
        "{} batch {:>6}  rows {:>9}  in {:>12.1} rows/s  processed {:>12.1} rows/s  \
         total {:>5} ms (offsets {}, wal {}, exec {}, sink {}, commit {})  epoch {}{bad}",
        p.name,
        p.batch_id,
        p.num_input_rows,
        p.input_rows_per_second,
        p.processed_rows_per_second,
        d.total,
        d.latest_offset,
        d.wal_commit,
        d.execution,
        d.sink_commit,
        d.commit,
        p.epoch,
    )
}

/// The column header of [`progress_row`], for a terminal view.
pub const PROGRESS_HEADER: &str =
    " BATCH       ROWS   INPUT ROWS/S  PROCESSED ROWS/S  TOTAL MS   EXEC MS  EPOCH";

/// One right-aligned row per committed batch, under [`PROGRESS_HEADER`].
pub fn progress_row(p: &BatchProgress) -> String {
    let d = p.duration_ms.unwrap_or_default();
    format!(
        "{:>6} {:>10} {:>14.1} {:>17.1} {:>9} {:>9} {:>6}",
        p.batch_id,
        p.num_input_rows,
        p.input_rows_per_second,
        p.processed_rows_per_second,
        d.total,
        d.execution,
        p.epoch,
    )
}

fn spec_json(s: &QueryStatus) -> Option<Value> {
    let spec = s.spec.as_ref()?;
    let spec = sluice_common::spec::QuerySpec::try_from(spec).ok()?;
    serde_json::to_value(&spec).ok()
}

pub fn status_json(s: &QueryStatus) -> Value {
    let mut v = json!({
        "id": s.id,
        "name": s.name,
        "state": state_name(s.state),
        "last_committed_batch": s.last_committed_batch,
        "error": s.error,
        "committed_rows": s.committed_rows,
        "epoch": s.epoch,
    });
    if let Some(p) = &s.latest_progress {
        v["latest_progress"] = progress_json(p);
    }
    if let Some(r) = &s.rebuilding {
        v["rebuilding"] = json!({
            "batch_id": r.batch_id,
            "generation": r.generation,
            "partitions": r.partitions,
            "from_generation": r.from_generation,
            "from_partitions": r.from_partitions,
            "elapsed_ms": r.elapsed_ms,
        });
    }
    if let Some(spec) = spec_json(s) {
        v["spec"] = spec;
    }
    v
}

/// What a batch that rebuilds the state after a rescale is doing.
pub fn rebuilding_text(r: &sluice_proto::StateRebuilding) -> String {
    format!(
        "batch {} rebuilds the {} state partitions of generation {} from the {} of generation {} \
         ({} ms so far)",
        r.batch_id, r.partitions, r.generation, r.from_partitions, r.from_generation, r.elapsed_ms
    )
}

/// `key: value` lines.
pub fn status_text(s: &QueryStatus) -> String {
    let mut out = format!(
        "id: {}\nname: {}\nstate: {}\nlast_committed_batch: {}\ncommitted_rows: {}\nepoch: {}\nerror: {}\n",
        s.id,
        s.name,
        state_name(s.state),
        s.last_committed_batch,
        s.committed_rows,
        s.epoch,
        s.error,
    );
    if let Some(r) = &s.rebuilding {
        out.push_str(&format!("rebuilding: {}\n", rebuilding_text(r)));
    }
    if let Some(p) = &s.latest_progress {
        if p.state_bytes > 0 {
            out.push_str(&format!(
                "state_size: {} rows, {} ({} bytes)\n",
                p.state_rows_total,
                human_bytes(p.state_bytes),
                p.state_bytes
            ));
        }
        if let Some(w) = p.watermark_ms {
            out.push_str(&format!("watermark_ms: {w}\n"));
        }
        out.push_str(&format!("latest_progress: {}\n", progress_line(p)));
    }
    if let Some(spec) = spec_json(s) {
        out.push_str(&format!("spec: {spec}\n"));
    }
    out
}

/// A byte count for people: `512 B`, `3.2 KiB`, `1.5 GiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// The `list` table: NAME ID STATE LAST_BATCH ERROR.
pub fn list_table(queries: &[QueryStatus]) -> String {
    let rows: Vec<Vec<String>> = queries
        .iter()
        .map(|q| {
            vec![
                q.name.clone(),
                q.id.clone(),
                state_name(q.state).to_string(),
                q.last_committed_batch.to_string(),
                one_line(&q.error),
            ]
        })
        .collect();
    table(&["NAME", "ID", "STATE", "LAST_BATCH", "ERROR"], &rows)
}

pub fn cluster_json(c: &ClusterInfo) -> Value {
    let executors: Vec<Value> = c
        .executors
        .iter()
        .map(|e| {
            json!({
                "id": e.id,
                "slots": e.slots,
                "running_tasks": e.running_tasks,
                "heartbeat_age_ms": e.heartbeat_age_ms,
                "incarnation": e.incarnation,
                "conflict": e.conflict,
            })
        })
        .collect();
    json!({
        "leader": c.leader,
        "driver_id": c.driver_id,
        "epoch": c.epoch,
        "standbys": c.standbys,
        "executors": executors,
    })
}

pub fn cluster_text(c: &ClusterInfo) -> String {
    let standbys = if c.standbys.is_empty() {
        "-".to_string()
    } else {
        c.standbys.join(", ")
    };
    let rows: Vec<Vec<String>> = c
        .executors
        .iter()
        .map(|e| {
            vec![
                e.id.clone(),
                e.slots.to_string(),
                e.running_tasks.to_string(),
                e.heartbeat_age_ms.to_string(),
                if e.conflict.is_empty() {
                    "-".to_string()
                } else {
                    one_line(&e.conflict)
                },
            ]
        })
        .collect();
    format!(
        "leader: {} ({})\nepoch: {}\nstandbys: {}\nexecutors: {}\n{}",
        c.leader,
        c.driver_id,
        c.epoch,
        standbys,
        c.executors.len(),
        table(
            &[
                "EXECUTOR",
                "SLOTS",
                "RUNNING",
                "HEARTBEAT_AGE_MS",
                "CONFLICT"
            ],
            &rows
        ),
    )
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let last = row.len().saturating_sub(1);
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == last {
                    c.clone()
                } else {
                    format!("{c:<width$}", width = widths.get(i).copied().unwrap_or(0))
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The exit code of `wait` for a state: 0 for FINISHED or STOPPED, 1 for
/// FAILED, `None` while the query still runs.
pub fn wait_exit_code(state: i32) -> Option<u8> {
    match QueryState::try_from(state) {
        Ok(QueryState::Finished | QueryState::Stopped) => Some(0),
        Ok(QueryState::Failed) => Some(1),
        Ok(QueryState::Running | QueryState::Unspecified) | Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_exit_codes() {
        assert_eq!(wait_exit_code(QueryState::Finished as i32), Some(0));
        assert_eq!(wait_exit_code(QueryState::Stopped as i32), Some(0));
        assert_eq!(wait_exit_code(QueryState::Failed as i32), Some(1));
        assert_eq!(wait_exit_code(QueryState::Running as i32), None);
        assert_eq!(wait_exit_code(QueryState::Unspecified as i32), None);
        assert_eq!(wait_exit_code(42), None);
    }
    use sluice_proto::Durations;
    use sluice_proto::QueryState;

    fn status() -> QueryStatus {
        QueryStatus {
            id: "0b7c".into(),
            name: "demo".into(),
            state: QueryState::Running as i32,
            last_committed_batch: -1,
            error: String::new(),
            spec: None,
            epoch: 3,
            committed_rows: 0,
            latest_progress: None,
            rebuilding: None,
        }
    }

    #[test]
    fn status_json_has_the_fixed_fields() {
        let v = status_json(&status());
        assert_eq!(v["id"], "0b7c");
        assert_eq!(v["name"], "demo");
        assert_eq!(v["state"], "RUNNING");
        assert_eq!(v["last_committed_batch"], -1);
        assert_eq!(v["error"], "");
        assert_eq!(v["epoch"], 3);
        assert_eq!(v["committed_rows"], 0);
        assert!(v.get("latest_progress").is_none());

        let mut s = status();
        s.state = QueryState::Failed as i32;
        s.error = "boom".into();
        s.last_committed_batch = 7;
        s.latest_progress = Some(BatchProgress {
            batch_id: 7,
            num_input_rows: 10,
            duration_ms: Some(Durations {
                total: 4,
                ..Default::default()
            }),
            ..Default::default()
        });
        let v = status_json(&s);
        assert_eq!(v["state"], "FAILED");
        assert_eq!(v["error"], "boom");
        assert_eq!(v["last_committed_batch"], 7);
        assert_eq!(v["latest_progress"]["batch_id"], 7);
        assert_eq!(v["latest_progress"]["duration_ms"]["total"], 4);
        assert!(status_text(&s).contains("state: FAILED\n"));
    }

    #[test]
    fn status_shows_the_state_size_and_watermark_of_a_stateful_query() {
        let mut s = status();
        let text = status_text(&s);
        assert!(!text.contains("state_size:"), "{text}");
        s.latest_progress = Some(BatchProgress {
            state_rows_total: 1000,
            state_bytes: 3 * 1024 * 1024 / 2,
            watermark_ms: Some(1_700_000_000_000),
            ..Default::default()
        });
        let text = status_text(&s);
        assert!(
            text.contains("state_size: 1000 rows, 1.5 MiB (1572864 bytes)"),
            "{text}"
        );
        assert!(text.contains("watermark_ms: 1700000000000"), "{text}");
        assert_eq!(
            progress_json(s.latest_progress.as_ref().unwrap())["state_rows_total"],
            1000
        );
        assert_eq!(human_bytes(512), "512 B");
    }

    #[test]
    fn status_shows_a_state_rebuild_while_it_runs() {
        let mut s = status();
        assert!(!status_text(&s).contains("rebuilding:"));
        assert!(status_json(&s).get("rebuilding").is_none());
        s.rebuilding = Some(sluice_proto::StateRebuilding {
            batch_id: 8,
            generation: 6,
            partitions: 5,
            from_generation: 0,
            from_partitions: 4,
            elapsed_ms: 1200,
        });
        let text = status_text(&s);
        assert!(
            text.contains(
                "rebuilding: batch 8 rebuilds the 5 state partitions of generation 6 from the 4 \
                 of generation 0 (1200 ms so far)"
            ),
            "{text}"
        );
        assert_eq!(status_json(&s)["rebuilding"]["from_partitions"], 4);
    }

    #[test]
    fn states_have_short_names() {
        assert_eq!(state_name(QueryState::Finished as i32), "FINISHED");
        assert_eq!(state_name(QueryState::Stopped as i32), "STOPPED");
        assert_eq!(state_name(99), "UNSPECIFIED");
    }

    #[test]
    fn a_progress_line_names_skipped_bad_records_only_when_there_are_some() {
        let mut p = BatchProgress {
            name: "q".into(),
            ..Default::default()
        };
        assert!(!progress_line(&p).contains("bad records"));
        p.bad_records = 3;
        assert!(
            progress_line(&p).ends_with("bad records 3"),
            "{}",
            progress_line(&p)
        );
        assert_eq!(progress_json(&p)["bad_records"], 3);
    }

    #[test]
    fn kafka_progress_shows_each_partitions_end_and_lag() {
        let part = |partition, end_offset, latest_offset| sluice_proto::PartitionProgress {
            topic: "events".into(),
            partition,
            start_offset: 0,
            end_offset,
            latest_offset,
            lag: latest_offset - end_offset,
        };
        let p = BatchProgress {
            name: "q".into(),
            records_lost: 4,
            partitions: vec![part(0, 120, 120), part(1, 98, 100)],
            ..Default::default()
        };
        assert!(
            progress_line(&p).ends_with("lag 2  lost 4"),
            "{}",
            progress_line(&p)
        );
        assert_eq!(
            partitions_text(&p),
            "events/0 end 120 lag 0, events/1 end 98 lag 2"
        );
        let json = progress_json(&p);
        assert_eq!(json["partitions"][1]["lag"], 2);
        assert_eq!(json["records_lost"], 4);
    }

    #[test]
    fn progress_rows_line_up_under_the_header() {
        let p = BatchProgress {
            batch_id: 12,
            num_input_rows: 4000,
            input_rows_per_second: 1000.0,
            processed_rows_per_second: 250_000.25,
            duration_ms: Some(Durations {
                total: 16,
                execution: 9,
                ..Default::default()
            }),
            epoch: 3,
            ..Default::default()
        };
        let row = progress_row(&p);
        assert_eq!(row.len(), PROGRESS_HEADER.len(), "{row}");
        // Each value ends where its column's name ends.
        for (name, value) in [
            ("BATCH", "12"),
            ("ROWS", "4000"),
            ("INPUT ROWS/S", "1000.0"),
            ("PROCESSED ROWS/S", "250000.2"),
            ("TOTAL MS", "16"),
            ("EXEC MS", "9"),
            ("EPOCH", "3"),
        ] {
            let end = PROGRESS_HEADER.find(name).unwrap() + name.len();
            assert_eq!(&row[end - value.len()..end], value, "{name} in {row}");
        }
    }

    #[test]
    fn tables_align() {
        let t = table(
            &["NAME", "ID"],
            &[
                vec!["a-long-name".into(), "1".into()],
                vec!["b".into(), "2".into()],
            ],
        );
        assert_eq!(t, "NAME         ID\na-long-name  1\nb            2\n");
        let l = list_table(&[status()]);
        assert!(
            l.starts_with("NAME  ID    STATE    LAST_BATCH  ERROR\n"),
            "{l}"
        );
    }
}
