//! Paths confined to operator-allowed prefixes (`--allowed-paths`), with
//! real driver and executor processes:
//! - a sink, a source or a table outside the driver's prefixes is refused
//!   at submit with `INVALID_ARGUMENT`, naming the field and the prefixes;
//! - so is one inside them whose symbolic link leads outside, when the
//!   link exists at submit;
//! - a link that appears after submit is caught by the driver, which checks
//!   each file it discovers, and by a confining executor: the query turns
//!   FAILED naming the file, and nothing of it reaches the sink;
//! - an executor whose own `--allowed-paths` is narrower refuses the task;
//! - a driver with no `--allowed-paths` allows only the directory that
//!   holds its checkpoint root, and says so in its log;
//! - a bad prefix stops either binary at start, naming the flag.
//!
//! A sink that overlaps the checkpoint root or another query's sink is
//! refused too, whatever the prefixes: `robust_submit.rs` asserts both.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sluice_tests::{
    Cluster, Driver, DriverOpts, Executor, ExecutorOpts, QueryState, READY_TIMEOUT, Spec,
    files_under, query_dir,
};
use tonic::Code;

/// `<root>/allowed` (the driver's prefix) and `<root>/outside`, created.
fn dirs(cluster: &Cluster) -> (PathBuf, PathBuf) {
    let (allowed, outside) = (
        cluster.root().join("allowed"),
        cluster.root().join("outside"),
    );
    for d in [&allowed, &outside] {
        std::fs::create_dir_all(d).unwrap();
    }
    (allowed, outside)
}

fn allow(prefixes: &[&Path]) -> Vec<String> {
    let list: Vec<String> = prefixes.iter().map(|p| p.display().to_string()).collect();
    vec!["--allowed-paths".into(), list.join(",")]
}

/// A driver allowing `driver` and, unless `None`, an executor allowing
/// `executor`; returns them with the driver's address.
async fn start(
    cluster: &Cluster,
    driver: &Path,
    executor: Option<&Path>,
) -> (Driver, Option<Executor>, String) {
    let d = cluster.start_driver_with(DriverOpts {
        extra_args: allow(&[driver]),
        ..DriverOpts::default()
    });
    d.wait_ready(READY_TIMEOUT).await;
    let addr = d.addr().to_string();
    let e = executor.map(|prefix| {
        let opts = ExecutorOpts {
            extra_args: allow(&[prefix]),
            ..ExecutorOpts::default()
        };
        cluster.start_executor_with(&addr, opts)
    });
    (d, e, addr)
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// A jsonl file source at `dir` into `sink`, one file per batch, up to
/// `total_files`, with `tables` (YAML) added.
fn files_spec(name: &str, dir: &Path, sink: &Path, total_files: u64, tables: &str) -> String {
    format!(
        "name: {name}\nsource:\n  files:\n    path: {:?}\n    format: jsonl\n    schema:\n      - {{name: id, type: bigint}}\n      - {{name: tag, type: string}}\n    max_files_per_batch: 1\n    total_files: {total_files}\ntrigger:\n  interval_ms: 0\nsink:\n  files:\n    path: {:?}\n{tables}",
        s(dir),
        s(sink)
    )
}

/// A static table `cities` at `path` (csv).
fn table(path: &Path) -> String {
    format!(
        "tables:\n  cities:\n    path: {:?}\n    format: csv\n    schema:\n      - {{name: name, type: string}}\n",
        s(path)
    )
}

/// Writes jsonl rows tagged `tag` under a hidden name, then into place.
fn write_rows(dir: &Path, name: &str, tag: &str) {
    let text: String = (0..3)
        .map(|i| format!("{{\"id\":{i},\"tag\":\"{tag}\"}}\n"))
        .collect();
    let tmp = dir.join(format!(".{name}"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

/// The text of every part file under `sink` (not the manifests).
fn sink_text(sink: &Path) -> String {
    files_under(sink)
        .into_iter()
        .filter(|f| !f.components().any(|c| c.as_os_str() == "_sluice"))
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect()
}

/// Submits `spec` and expects `INVALID_ARGUMENT` whose message holds every
/// one of `words`; the query left nothing in the checkpoint.
async fn refused(cluster: &Cluster, drivers: &str, name: &str, spec: &str, words: &[&str]) {
    let err = cluster
        .client(drivers)
        .submit(spec)
        .await
        .expect_err(&format!("{name} must be refused"));
    assert_eq!(err.code(), Code::InvalidArgument, "{name}: {err:?}");
    for w in words {
        assert!(err.message().contains(w), "{name}: no {w:?} in {err:?}");
    }
    assert!(
        !query_dir(&cluster.checkpoint_root(), name).exists(),
        "{name}: the refused query left a checkpoint"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn places_outside_the_allowed_prefixes_are_refused_naming_the_field() {
    let cluster = Cluster::new("paths-outside");
    let (allowed, outside) = dirs(&cluster);
    let (_driver, _executor, drivers) = start(&cluster, &allowed, Some(&allowed)).await;
    let prefixes = format!("[{}]", s(&allowed));
    let (input, outside_input) = (allowed.join("in"), outside.join("in"));
    for d in [&input, &outside_input] {
        std::fs::create_dir_all(d).unwrap();
    }
    let cities = allowed.join("cities.csv");
    let outside_cities = outside.join("cities.csv");
    for c in [&cities, &outside_cities] {
        std::fs::write(c, "name\nLyon\n").unwrap();
    }

    for (name, sink) in [
        ("sink-outside", outside.join("out")),
        ("sink-sibling", cluster.root().join("allowed-2/out")),
        ("sink-dotdot", allowed.join("../outside/out")),
    ] {
        let spec = Spec::new(name, &sink).total_rows(10).to_yaml();
        refused(
            &cluster,
            &drivers,
            name,
            &spec,
            &["sink.files.path", &s(&sink), &prefixes],
        )
        .await;
    }
    assert!(!outside.join("out").exists());
    let spec = files_spec("source", &outside_input, &allowed.join("o1"), 1, "");
    let words = ["source.files.path", &s(&outside_input), &prefixes];
    refused(&cluster, &drivers, "source", &spec, &words).await;
    let spec = files_spec(
        "table",
        &input,
        &allowed.join("o2"),
        1,
        &table(&outside_cities),
    );
    let words = ["tables.cities.path", &s(&outside_cities), &prefixes];
    refused(&cluster, &drivers, "table", &spec, &words).await;

    // Everything inside: accepted, and the executor runs it.
    write_rows(&input, "a.jsonl", "in");
    let sink = allowed.join("ok");
    let spec = files_spec("inside", &input, &sink, 1, &table(&cities));
    let mut client = cluster.client(&drivers);
    client
        .submit(&spec)
        .await
        .expect("a spec inside is accepted");
    let done = client
        .wait_state("inside", QueryState::Finished, Duration::from_secs(60))
        .await;
    assert!(done.error.is_empty(), "{done:#?}");
    assert_eq!(sink_text(&sink).lines().count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_that_lead_outside_are_refused_at_submit() {
    let cluster = Cluster::new("paths-links");
    let (allowed, outside) = dirs(&cluster);
    let (_driver, _, drivers) = start(&cluster, &allowed, None).await;
    std::fs::create_dir_all(outside.join("in")).unwrap();
    std::fs::create_dir_all(outside.join("out")).unwrap();
    write_rows(&outside, "secret.jsonl", "secret");
    std::fs::write(outside.join("cities.csv"), "name\nLyon\n").unwrap();
    let input = allowed.join("in");
    std::fs::create_dir_all(&input).unwrap();
    let resolves = format!("resolves to {}", s(&outside));

    // The source directory is a link to one outside.
    let linked_dir = allowed.join("in-link");
    symlink(outside.join("in"), &linked_dir).unwrap();
    let spec = files_spec("dir-link", &linked_dir, &allowed.join("o1"), 1, "");
    let words = ["source.files.path", &s(&linked_dir), &resolves];
    refused(&cluster, &drivers, "dir-link", &spec, &words).await;

    // A file of an allowed source directory is a link to one outside.
    let linked_file = input.join("b.jsonl");
    symlink(outside.join("secret.jsonl"), &linked_file).unwrap();
    let spec = files_spec("file-link", &input, &allowed.join("o2"), 1, "");
    let words = ["source.files.path", &s(&linked_file), &resolves];
    refused(&cluster, &drivers, "file-link", &spec, &words).await;
    std::fs::remove_file(&linked_file).unwrap();

    // A table file that is a link.
    let linked_table = allowed.join("cities.csv");
    symlink(outside.join("cities.csv"), &linked_table).unwrap();
    let spec = files_spec(
        "table-link",
        &input,
        &allowed.join("o3"),
        1,
        &table(&linked_table),
    );
    let words = ["tables.cities.path", &s(&linked_table), &resolves];
    refused(&cluster, &drivers, "table-link", &spec, &words).await;

    // The sink directory, and a sink below a linked directory.
    let linked_sink = allowed.join("out-link");
    symlink(outside.join("out"), &linked_sink).unwrap();
    for (name, sink) in [
        ("sink-link", linked_sink.clone()),
        ("sink-below-link", linked_sink.join("new/deeper")),
    ] {
        let spec = Spec::new(name, &sink).total_rows(10).to_yaml();
        let words = ["sink.files.path", &s(&sink), &resolves];
        refused(&cluster, &drivers, name, &spec, &words).await;
    }
    assert_eq!(std::fs::read_dir(outside.join("out")).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_made_after_submit_fails_the_query_on_the_driver_by_default() {
    let cluster = Cluster::new("paths-late-link-default");
    let (allowed, outside) = dirs(&cluster);
    // The executor does not confine (no --allowed-paths): the driver checks
    // each file it discovers, as it checks a spec at submit.
    let (_driver, _, drivers) = start(&cluster, &allowed, None).await;
    let _executor = cluster.start_executor(&drivers);
    write_rows(&outside, "secret.jsonl", "secret");
    let input = allowed.join("in");
    std::fs::create_dir_all(&input).unwrap();
    let sink = allowed.join("out");
    let mut client = cluster.client(&drivers);
    let spec = files_spec("late", &input, &sink, 2, "");
    client.submit(&spec).await.expect("an empty source inside");
    write_rows(&input, "a.jsonl", "in");
    client
        .wait_committed("late", 0, Duration::from_secs(30))
        .await;
    let link = input.join("b.jsonl");
    symlink(outside.join("secret.jsonl"), &link).unwrap();
    let failed = client
        .wait_state("late", QueryState::Failed, Duration::from_secs(30))
        .await;
    for w in [
        "source.files.path",
        &s(&link),
        &format!("resolves to {}", s(&outside.join("secret.jsonl"))),
        &format!("[{}]", s(&allowed)),
    ] {
        assert!(failed.error.contains(w), "no {w:?} in {failed:#?}");
    }
    assert_eq!(failed.last_committed_batch, 0, "{failed:#?}");
    let text = sink_text(&sink);
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(
        !text.contains("secret"),
        "the outside file reached the sink:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_with_narrower_prefixes_refuses_the_task() {
    let cluster = Cluster::new("paths-narrow");
    let (allowed, _) = dirs(&cluster);
    let narrow = allowed.join("narrow");
    let (_driver, _executor, drivers) = start(&cluster, &allowed, Some(&narrow)).await;
    let sink = allowed.join("wide/out");
    let mut client = cluster.client(&drivers);
    let spec = Spec::new("wide", &sink).total_rows(100).to_yaml();
    client.submit(&spec).await.expect("the driver allows it");
    let failed = client
        .wait_state("wide", QueryState::Failed, Duration::from_secs(30))
        .await;
    for w in [
        "refused by this executor's --allowed-paths",
        "sink.files.path",
        &s(&sink),
        &format!("[{}]", s(&narrow)),
    ] {
        assert!(failed.error.contains(w), "no {w:?} in {failed:#?}");
    }
    assert_eq!(failed.committed_rows, 0, "{failed:#?}");
    assert!(sink_text(&sink).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_the_driver_allows_only_the_checkpoint_roots_directory() {
    let cluster = Cluster::new("paths-default");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let executor = cluster.start_executor(&drivers);
    let data_dir = cluster.root().display().to_string();
    assert_eq!(cluster.checkpoint_root().parent(), Some(cluster.root()));

    let elsewhere = tempfile::Builder::new()
        .prefix("sluice-paths-elsewhere-")
        .tempdir()
        .unwrap();
    let sink = elsewhere.path().join("out");
    let spec = Spec::new("elsewhere", &sink).total_rows(10).to_yaml();
    let words = ["sink.files.path", &s(&sink), &format!("[{data_dir}]")];
    refused(&cluster, &drivers, "elsewhere", &spec, &words).await;
    assert!(!sink.exists());

    // Next to the checkpoint root is fine.
    let mut client = cluster.client(&drivers);
    let inside = cluster.sink_path("inside");
    let spec = Spec::new("inside", &inside).total_rows(10).to_yaml();
    client
        .submit(&spec)
        .await
        .expect("inside the data directory");
    client
        .wait_state("inside", QueryState::Finished, Duration::from_secs(60))
        .await;

    let log = std::fs::read_to_string(driver.log_path()).unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("no --allowed-paths"))
        .unwrap_or_else(|| panic!("the driver does not log its default:\n{log}"));
    assert!(
        line.contains("INFO") && line.contains(&format!("allowed_paths=[{data_dir}]")),
        "{line}"
    );
    let log = std::fs::read_to_string(executor.log_path()).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("no --allowed-paths")),
        "the executor does not warn that it does not confine:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_prefix_stops_either_binary_at_start_naming_the_flag() {
    let cluster = Cluster::new("paths-bad-flag");
    let driver = cluster.start_driver_with(DriverOpts {
        extra_args: vec!["--allowed-paths".into(), "relative/dir".into()],
        ..DriverOpts::default()
    });
    let executor = cluster.start_executor_with(
        "127.0.0.1:1",
        ExecutorOpts {
            extra_args: vec!["--allowed-paths".into(), "http://host/x".into()],
            ..ExecutorOpts::default()
        },
    );
    for (p, bad) in [
        (driver.process(), "relative/dir"),
        (executor.process(), "http://host/x"),
    ] {
        let status = p
            .wait_exit(Duration::from_secs(30))
            .await
            .unwrap_or_else(|| panic!("{} is still up:\n{}", p.name(), p.log_tail(20)));
        assert!(!status.success(), "{status}");
        let log = std::fs::read_to_string(p.log_path()).unwrap();
        assert!(
            log.contains("--allowed-paths") && log.contains(bad),
            "{}: {log}",
            p.name()
        );
    }
}
