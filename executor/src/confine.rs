//! The executor's own check of where a task reads and writes
//! (`--allowed-paths`): every file of its source and of its static tables,
//! and its sink, must be under this executor's allowed paths, with local
//! symbolic links followed.
//!
//! ```text
//!  TaskAssignment ─► targets (field, place) ─► spawn_blocking(resolve + compare)
//!        ok ─► the task runs      refused ─► PathNotAllowed (FATAL: the query fails)
//! ```
//!
//! The driver checked the spec at submit, against its own list. This
//! catches what changed since (a link that appeared in a source directory
//! or where the sink goes) and a driver whose list is wider than this
//! executor's. Without `--allowed-paths` an executor does not confine, but
//! it always refuses a sink that overlaps the driver's checkpoint root once
//! its symbolic links are followed.

use sluice_common::storage::{AllowedPaths, overlap_resolved};
use sluice_proto::{FilesTask, TaskAssignment, task_source};

use crate::error::ExecutorError;

/// One place a task touches: a file under an input root, or the sink.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    field: String,
    root: String,
    /// A file under `root`; `None` for the root itself (the sink).
    file: Option<String>,
}

/// Every place `task` reads or writes, named by the spec field it comes
/// from (`source.files.path` or `sources.<table>.files.path`,
/// `tables.<name>.path`, `sink.files.path`).
fn targets(task: &TaskAssignment) -> Vec<Target> {
    let mut out = Vec::new();
    let mut files = |field: String, f: &FilesTask| {
        let mut paths: Vec<&str> = f.ranges.iter().map(|r| r.path.as_str()).collect();
        paths.dedup();
        out.extend(paths.into_iter().map(|p| Target {
            field: field.clone(),
            root: f.root.clone(),
            file: Some(p.to_string()),
        }));
    };
    if let Some(source) = &task.source
        && let Some(task_source::Kind::Files(f)) = &source.kind
    {
        let field = match source.table.as_str() {
            "" | "input" => "source.files.path".to_string(),
            t => format!("sources.{t}.files.path"),
        };
        files(field, f);
    }
    for t in task.plan.iter().flat_map(|p| &p.tables) {
        if let Some(f) = &t.files {
            files(format!("tables.{}.path", t.name), f);
        }
    }
    if let Some(path) = task.sink.as_ref().and_then(crate::sink::files_path) {
        out.push(Target {
            field: "sink.files.path".into(),
            root: path.to_string(),
            file: None,
        });
    }
    out
}

/// Refuses `task` when a place it reads or writes is outside `allowed`
/// (`None`: this executor does not confine). Reads the disk, off the
/// async threads.
pub async fn check(
    task: &TaskAssignment,
    allowed: Option<&AllowedPaths>,
) -> Result<(), ExecutorError> {
    let overlap = sink_overlap(task);
    let Some(allowed) = allowed.cloned() else {
        return tokio::task::spawn_blocking(overlap)
            .await
            .map_err(|e| ExecutorError::TaskPanicked(format!("the check of the sink: {e}")))?;
    };
    let targets = targets(task);
    tokio::task::spawn_blocking(move || {
        overlap()?;
        for t in &targets {
            match &t.file {
                Some(file) => allowed.check_file_resolved(&t.field, &t.root, file),
                None => allowed.check_resolved(&t.field, &t.root),
            }
            .map_err(ExecutorError::PathNotAllowed)?;
        }
        Ok(())
    })
    .await
    .map_err(|e| ExecutorError::TaskPanicked(format!("the check of the task's paths: {e}")))?
}

/// Refuses a task whose sink overlaps the driver's checkpoint root with
/// its symbolic links followed (a link made after submit), whether or not
/// this executor confines: its files would land in the checkpoint. Runs
/// on a blocking thread.
fn sink_overlap(task: &TaskAssignment) -> impl FnOnce() -> Result<(), ExecutorError> + use<> {
    let root = task.checkpoint_root.clone();
    let sink = task
        .sink
        .as_ref()
        .and_then(crate::sink::files_path)
        .unwrap_or_default()
        .to_string();
    move || {
        if root.is_empty() || sink.is_empty() || !overlap_resolved(&sink, &root) {
            return Ok(());
        }
        Err(ExecutorError::PathNotAllowed(format!(
            "sink.files.path: {sink} overlaps the checkpoint root {root} once its symbolic links are followed"
        )))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use sluice_proto::{
        FileRange, FilesTaskSink, TablePlan, TaskPlan, TaskSink, TaskSource, task_sink,
    };

    use super::*;

    fn files(root: &str, paths: &[&str]) -> FilesTask {
        FilesTask {
            root: root.into(),
            ranges: paths
                .iter()
                .map(|p| FileRange {
                    path: p.to_string(),
                    size: 2,
                    start: 0,
                    end: 2,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn task(source: &str, file: &str, table: &str, sink: &str) -> TaskAssignment {
        TaskAssignment {
            source: Some(TaskSource {
                kind: Some(task_source::Kind::Files(files(source, &[file, file]))),
                table: String::new(),
            }),
            plan: Some(TaskPlan {
                tables: vec![TablePlan {
                    name: "cities".into(),
                    files: Some(files(table, &["c.csv"])),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            sink: Some(TaskSink {
                kind: Some(task_sink::Kind::Files(FilesTaskSink {
                    path: sink.into(),
                    ..Default::default()
                })),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_task_names_its_source_files_tables_and_sink() {
        let t = targets(&task("/in", "a.jsonl", "/t", "/out"));
        let named: Vec<(&str, &str, Option<&str>)> = t
            .iter()
            .map(|t| (t.field.as_str(), t.root.as_str(), t.file.as_deref()))
            .collect();
        assert_eq!(
            named,
            [
                ("source.files.path", "/in", Some("a.jsonl")),
                ("tables.cities.path", "/t", Some("c.csv")),
                ("sink.files.path", "/out", None),
            ]
        );
    }

    #[tokio::test]
    async fn a_task_outside_the_allowed_paths_is_refused_and_not_retried() {
        let dir = tempfile::tempdir().unwrap();
        let (ok, outside) = (dir.path().join("ok"), dir.path().join("outside"));
        std::fs::create_dir_all(ok.join("in")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let p = |p: &std::path::Path| p.to_str().unwrap().to_string();
        let allowed = AllowedPaths::parse(&[p(&ok)]).unwrap();
        let (input, out) = (p(&ok.join("in")), p(&ok.join("out")));
        let good = task(&input, "a.jsonl", &input, &out);
        check(&good, Some(&allowed)).await.unwrap();
        check(&task("/in", "a", "/t", "/o"), None).await.unwrap();

        symlink(outside.join("secret.jsonl"), ok.join("in/b.jsonl")).unwrap();
        for (t, field, named) in [
            (
                task(&input, "b.jsonl", &input, &out),
                "source.files.path",
                "b.jsonl",
            ),
            (
                task(&input, "a.jsonl", &p(&outside), &out),
                "tables.cities.path",
                "c.csv",
            ),
            (
                task(&input, "a.jsonl", &input, &p(&outside)),
                "sink.files.path",
                "outside",
            ),
        ] {
            let err = check(&t, Some(&allowed)).await.unwrap_err();
            assert!(matches!(err, ExecutorError::PathNotAllowed(_)), "{err:?}");
            assert!(!err.is_retryable(), "{err}");
            let message = err.to_string();
            assert!(
                message.contains(field)
                    && message.contains(named)
                    && message.contains(&allowed.to_string()),
                "{message}"
            );
        }
    }
}
