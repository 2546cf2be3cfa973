//! SQL that cannot run is refused at submit with INVALID_ARGUMENT, through
//! the CLI and gRPC alike, naming what is wrong: a syntax error with its
//! position, an unknown column or table, an unsupported construct, an
//! output mode the query cannot have, a window length that cannot run. A
//! changed `sql`, grouping key or state partition count on an existing
//! checkpoint is FAILED_PRECONDITION naming what differs (for a running
//! query's state partitions: stop it first). Nothing is created for a
//! refused query.

use std::time::Duration;

use sluice_tests::{Cluster, QueryState, Spec, query_dir};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sql_is_refused_at_submit_naming_what_is_wrong() {
    let cluster = Cluster::new("bad-sql");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let none: &[&str] = &[];
    let cases = [
        (
            "SELEC value FROM input",
            none,
            &["field `sql`", "SELEC", "Line: 1, Column: 1"][..],
        ),
        ("SELECT value FROM input WHERE", none, &["Line: 1"][..]),
        ("SELECT nope FROM input", none, &["nope"][..]),
        ("SELECT * FROM elsewhere", none, &["elsewhere"][..]),
        (
            "SELECT value % 3 AS k, median(value) AS m FROM input GROUP BY value % 3",
            none,
            &["median", "not supported", "merges exactly"][..],
        ),
        (
            "SELECT value % 3 AS k, sum(DISTINCT value) AS s FROM input GROUP BY value % 3",
            none,
            &["sum(DISTINCT ...)", "not supported"][..],
        ),
        (
            "SELECT n, count(*) AS c FROM (SELECT value % 3 AS k, count(*) AS n FROM input GROUP BY value % 3) GROUP BY n",
            &["output_mode: append"][..],
            &[
                "the aggregation `aggregate` feeds `aggregate-2`",
                "in append mode",
                "group by an event-time window",
            ][..],
        ),
        (
            "SELECT a.k, a.n, b.value FROM (SELECT value % 3 AS k, count(*) AS n FROM input GROUP BY value % 3) a \
             JOIN input b ON a.k = b.value",
            none,
            &[
                "the aggregation `aggregate` feeds `join`",
                "only an aggregation can take a group's changes",
            ][..],
        ),
        (
            "SELECT c, count(*) AS d FROM (SELECT n, count(*) AS c FROM \
             (SELECT value % 3 AS k, count(*) AS n FROM input GROUP BY value % 3) GROUP BY n) GROUP BY c",
            none,
            &[
                "the aggregation `aggregate` feeds `aggregate-2`",
                "an aggregation that reads changes must be the last stateful operator",
            ][..],
        ),
        (
            "SELECT value % 3 AS k, count(*) AS n FROM input GROUP BY value % 3",
            &["output_mode: append"][..],
            &["output_mode", "append needs a watermark"][..],
        ),
        (
            "SELECT value % 3 AS k, count(*) AS n FROM input GROUP BY value % 3",
            &[
                "output_mode: append",
                "watermark: {column: timestamp_ms, delay_ms: 100}",
            ][..],
            &["output_mode", "GROUP BY window(timestamp_ms"][..],
        ),
        (
            "SELECT value FROM input",
            &["watermark: {column: nope, delay_ms: 100}"][..],
            &["watermark.column", "\"nope\" is not a column of input"][..],
        ),
        (
            "SELECT value FROM input",
            &["watermark: {column: value, delay_ms: 100}"][..],
            &["watermark.column", "not a timestamp"][..],
        ),
        (
            "SELECT value, timestamp_ms FROM input",
            &["dedup: {columns: [value], within_ms: 1000}"][..],
            &["dedup", "needs a watermark"][..],
        ),
        (
            "SELECT value, timestamp_ms FROM input",
            &[
                "watermark: {column: timestamp_ms, delay_ms: 100}",
                "dedup: {columns: [nope], within_ms: 1000}",
            ][..],
            &["dedup.columns[0]", "\"nope\" is not an output column"][..],
        ),
        (
            "SELECT value FROM input",
            &[
                "watermark: {column: timestamp_ms, delay_ms: 100}",
                "dedup: {columns: [value], within_ms: 1000}",
            ][..],
            &[
                "dedup",
                "watermark column \"timestamp_ms\" must be an output column",
            ][..],
        ),
        (
            "SELECT value % 3 AS k, count(*) AS n FROM input GROUP BY value % 3",
            &[
                "watermark: {column: timestamp_ms, delay_ms: 100}",
                "dedup: {columns: [k], within_ms: 1000}",
            ][..],
            &["dedup", "has a stateful operator"][..],
        ),
        (
            "SELECT value FROM input",
            &["output_mode: complete"][..],
            &["output_mode", "complete needs an aggregation"][..],
        ),
        (
            "SELECT value FROM input ORDER BY value",
            none,
            &["ORDER BY", "not supported"][..],
        ),
        (
            "SELECT value FROM input LIMIT 10",
            none,
            &["LIMIT", "not supported"][..],
        ),
        (
            "SELECT value, row_number() OVER (ORDER BY value) AS n FROM input",
            none,
            &["row_number", "not supported"][..],
        ),
        (
            "SELECT * FROM generate_series(1, 10)",
            none,
            &["does not read the stream `input`", "not supported"][..],
        ),
        (
            "SELECT window(timestamp_ms, '1 day', '1 milliseconds') AS w, count(*) AS n FROM input \
             GROUP BY window(timestamp_ms, '1 day', '1 milliseconds')",
            none,
            &[
                "window(timestamp_ms, '1 day', '1 milliseconds')",
                "size / slide = 86,400,000 windows per row, above the cap of 10,000",
            ][..],
        ),
    ];
    for (i, (sql, extra, wanted)) in cases.iter().enumerate() {
        let name = format!("bad-{i}");
        let mut spec = Spec::new(&name, &cluster.sink_path(&name))
            .total_rows(100)
            .sql(sql);
        for line in *extra {
            spec = spec.with(line);
        }
        let yaml = spec.to_yaml();
        let file = cluster.write_spec(&yaml);
        let out = cluster
            .cli(&drivers, &["submit", file.to_str().unwrap()])
            .await;
        out.assert_failure();
        let err = cluster
            .client(&drivers)
            .submit(&yaml)
            .await
            .expect_err(&format!("{sql}: gRPC submit must fail"));
        assert_eq!(err.code(), Code::InvalidArgument, "{sql}: {err:?}");
        for w in *wanted {
            assert!(err.message().contains(w), "{sql}: must name {w:?}: {err:?}");
            assert!(
                out.stderr.contains(w),
                "{sql}: the CLI must name {w:?}: {out}"
            );
        }
        assert!(
            !query_dir(&cluster.checkpoint_root(), &name).exists(),
            "{sql}: a refused query leaves no checkpoint"
        );
    }
}

/// Window and session lengths are refused at submit, each naming the call
/// and the argument: zero, negative, not an interval, empty, of months, or
/// below the millisecond. (Before any task ran, not at batch 0.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_window_lengths_are_refused_at_submit() {
    let cluster = Cluster::new("bad-windows");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let fixed = "must be a positive fixed length such as '10 seconds'";
    let cases = [
        (
            "window(timestamp_ms, '0 seconds')",
            "the size '0 seconds'",
            fixed,
        ),
        (
            "window(timestamp_ms, '-1 seconds')",
            "the size '-1 seconds'",
            fixed,
        ),
        (
            "window(timestamp_ms, 'abc')",
            "the size 'abc'",
            "is not an interval",
        ),
        ("window(timestamp_ms, '')", "the size ''", "is empty"),
        (
            "window(timestamp_ms, '1 month')",
            "the size '1 month'",
            "months and years vary in length",
        ),
        (
            "window(timestamp_ms, '1 nanosecond')",
            "the size '1 nanosecond'",
            "is below the 1 millisecond resolution",
        ),
        (
            "hop(timestamp_ms, '10 seconds', '0 seconds')",
            "the slide '0 seconds'",
            fixed,
        ),
        (
            "session_window(timestamp_ms, '0 seconds')",
            "the gap '0 seconds'",
            fixed,
        ),
        (
            "session_window(timestamp_ms, '1 month')",
            "the gap '1 month'",
            "months and years vary in length",
        ),
    ];
    for (i, (call, argument, reason)) in cases.into_iter().enumerate() {
        let name = format!("window-{i}");
        let sql = format!(
            "SELECT value % 3 AS k, {call} AS w, count(*) AS n FROM input GROUP BY value % 3, {call}"
        );
        let yaml = Spec::new(&name, &cluster.sink_path(&name))
            .total_rows(100)
            .sql(&sql)
            .to_yaml();
        let err = cluster
            .client(&drivers)
            .submit(&yaml)
            .await
            .expect_err(&format!("{call}: submit must fail"));
        assert_eq!(err.code(), Code::InvalidArgument, "{call}: {err:?}");
        for wanted in ["field `sql`", call, argument, reason] {
            assert!(
                err.message().contains(wanted),
                "{call}: {wanted:?}: {err:?}"
            );
        }
        assert!(
            !query_dir(&cluster.checkpoint_root(), &name).exists(),
            "{call}: a refused query leaves no checkpoint"
        );
    }
}

/// A running query's `state_partitions` changes only through a stop: the
/// refusal says so, with the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_state_partition_count_of_a_running_query_says_to_stop_it_first() {
    let cluster = Cluster::new("running-rescale");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    // No executor: the query stays RUNNING.
    let spec = Spec::new("agg", &cluster.sink_path("agg"))
        .sql("SELECT value % 5 AS k, count(*) AS n FROM input GROUP BY value % 5");
    let mut client = cluster.client(&drivers);
    let two = spec.clone().with("state_partitions: 2");
    client.submit(&two.to_yaml()).await.expect("first submit");
    let err = client
        .submit(&spec.with("state_partitions: 4").to_yaml())
        .await
        .expect_err("a running query is not rescaled");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    for wanted in [
        "query \"agg\" is RUNNING",
        "state_partitions 2 -> 4",
        "stop it first (sluice stop agg)",
    ] {
        assert!(err.message().contains(wanted), "{wanted:?}: {err:?}");
    }
    let status = client.get("agg").await.expect("status");
    assert_eq!(status.state, QueryState::Running as i32, "still running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_sql_on_an_existing_checkpoint_is_refused() {
    let cluster = Cluster::new("changed-sql");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let spec = Spec::new("q", &cluster.sink_path("q"))
        .total_rows(200)
        .rows_per_second(2000)
        .sql("SELECT value FROM input WHERE value % 2 = 0");
    let mut client = cluster.client(&drivers);
    client.submit(&spec.to_yaml()).await.expect("first submit");
    client
        .wait_state("q", QueryState::Finished, Duration::from_secs(60))
        .await;
    let changed = spec
        .clone()
        .sql("SELECT value FROM input WHERE value % 2 = 1");
    let err = client
        .submit(&changed.to_yaml())
        .await
        .expect_err("a changed sql must be refused");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("sql"), "{err:?}");
    assert!(err.message().contains("value % 2 = 1"), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_grouping_key_or_state_partition_count_is_refused() {
    let cluster = Cluster::new("changed-state");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let spec = Spec::new("agg", &cluster.sink_path("agg"))
        .total_rows(200)
        .rows_per_second(2000)
        .sql("SELECT value % 5 AS k, count(*) AS n FROM input GROUP BY value % 5");
    let mut client = cluster.client(&drivers);
    client.submit(&spec.to_yaml()).await.expect("first submit");
    client
        .wait_state("agg", QueryState::Finished, Duration::from_secs(60))
        .await;
    let rekeyed = spec
        .clone()
        .sql("SELECT value % 7 AS k, count(*) AS n FROM input GROUP BY value % 7");
    let err = client
        .submit(&rekeyed.to_yaml())
        .await
        .expect_err("a changed grouping key must be refused");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("grouping key"), "{err:?}");
    assert!(err.message().contains("value % Int64(7)"), "{err:?}");
    let repartitioned = spec.clone().with("state_partitions: 4");
    let err = client
        .submit(&repartitioned.to_yaml())
        .await
        .expect_err("a changed state partition count must be refused");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("state_partitions"), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_past_max_state_bytes_fails_the_query_naming_it_and_the_size() {
    let cluster = Cluster::new("state-bound");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor_with(
        &drivers,
        sluice_tests::ExecutorOpts {
            extra_args: vec!["--max-state-bytes".into(), "200000".into()],
            ..Default::default()
        },
    );
    // 20 000 keys hold far more than 200 kB of state.
    let spec = Spec::new("wide", &cluster.sink_path("wide"))
        .total_rows(40_000)
        .rows_per_second(1_000_000)
        .interval_ms(0)
        .sql("SELECT value % 20000 AS k, count(*) AS n FROM input GROUP BY value % 20000")
        .with("state_partitions: 1");
    let mut client = cluster.client(&drivers);
    client.submit(&spec.to_yaml()).await.expect("submit");
    let status = client
        .wait_state("wide", QueryState::Failed, Duration::from_secs(60))
        .await;
    for wanted in ["query wide", "bytes", "--max-state-bytes 200000"] {
        assert!(status.error.contains(wanted), "{wanted}: {}", status.error);
    }
    // The batch whose state passed the bound is named in the error and was
    // never committed; the batches before it (smaller state) may have been.
    let failed: i64 = status
        .error
        .split("batch ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no failing batch named: {}", status.error));
    assert_eq!(
        status.last_committed_batch,
        failed - 1,
        "nothing past the bound committed: {}",
        status.error
    );
}
