//! SQL that cannot run is refused at submit with INVALID_ARGUMENT, through
//! the CLI and gRPC alike, naming what is wrong: a syntax error with its
//! position, an unknown column or table, an unsupported construct. A
//! changed `sql` on an existing checkpoint is FAILED_PRECONDITION naming
//! the field. Nothing is created for a refused query.

use std::time::Duration;

use sluice_tests::{Cluster, QueryState, Spec, query_dir};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sql_is_refused_at_submit_naming_what_is_wrong() {
    let cluster = Cluster::new("bad-sql");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let cases = [
        (
            "SELEC value FROM input",
            &["field `sql`", "SELEC", "Line: 1, Column: 1"][..],
        ),
        ("SELECT value FROM input WHERE", &["Line: 1"][..]),
        ("SELECT nope FROM input", &["nope"][..]),
        ("SELECT * FROM elsewhere", &["elsewhere"][..]),
        (
            "SELECT count(*) FROM input",
            &["count", "not supported"][..],
        ),
        (
            "SELECT value % 3 AS k FROM input GROUP BY value % 3",
            &["GROUP BY", "not supported"][..],
        ),
        (
            "SELECT value FROM input ORDER BY value",
            &["ORDER BY", "not supported"][..],
        ),
        (
            "SELECT value FROM input LIMIT 10",
            &["LIMIT", "not supported"][..],
        ),
        (
            "SELECT value, row_number() OVER (ORDER BY value) AS n FROM input",
            &["row_number", "not supported"][..],
        ),
        (
            "SELECT a.value FROM input a JOIN input b ON a.value = b.value",
            &["join of the stream with itself", "not supported"][..],
        ),
    ];
    for (i, (sql, wanted)) in cases.iter().enumerate() {
        let name = format!("bad-{i}");
        let yaml = Spec::new(&name, &cluster.sink_path(&name))
            .total_rows(100)
            .sql(sql)
            .to_yaml();
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
