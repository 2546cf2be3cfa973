//! SQL planning is bounded: an operator chain deeper than the planner's
//! limit is refused with INVALID_ARGUMENT naming the limit (the driver does
//! not overflow its stack), and planning that outlives `--sql-plan-budget-ms`
//! is refused naming the budget, while the driver answers calls and a
//! running query goes on committing batches.

use std::time::Duration;

use sluice_tests::{Cluster, DriverOpts, QueryState, Spec};
use tonic::Code;

fn plus_chain(terms: usize) -> String {
    format!("SELECT value{} AS v FROM input", " + 1".repeat(terms))
}

fn or_chain(terms: usize) -> String {
    let ors: Vec<String> = (0..terms).map(|i| format!("value = {i}")).collect();
    format!("SELECT value FROM input WHERE {}", ors.join(" OR "))
}

fn wide(columns: usize) -> String {
    let cols: Vec<String> = (0..columns).map(|i| format!("value AS c{i}")).collect();
    format!("SELECT {} FROM input", cols.join(", "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_past_the_planning_bounds_is_refused_and_the_driver_runs_on() {
    let cluster = Cluster::new("sql-bounds");
    let driver = cluster.start_driver_with(DriverOpts {
        extra_args: vec!["--sql-plan-budget-ms".into(), "1500".into()],
        ..DriverOpts::default()
    });
    driver.wait_ready(sluice_tests::READY_TIMEOUT).await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let steady = Spec::new("steady", &cluster.sink_path("steady"));
    client
        .submit(&steady.to_yaml())
        .await
        .expect("submit steady");
    client
        .wait_committed("steady", 0, Duration::from_secs(60))
        .await;

    for (i, sql) in [plus_chain(2_500), or_chain(2_500)].iter().enumerate() {
        let name = format!("deep-{i}");
        let spec = Spec::new(&name, &cluster.sink_path(&name)).sql(sql);
        let err = client
            .submit(&spec.to_yaml())
            .await
            .expect_err("a 2,500-term chain must be refused");
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(
            err.message().contains("nest deeper than 1000 levels"),
            "{err:?}"
        );
    }

    // 20,000 columns plan for longer than the 1.5 s budget; meanwhile the
    // driver answers and the steady query commits.
    let before = client
        .get("steady")
        .await
        .expect("get")
        .last_committed_batch;
    let spec = Spec::new("wide", &cluster.sink_path("wide")).sql(&wide(20_000));
    let mut submitter = cluster.client(&drivers);
    let submit = tokio::spawn(async move { submitter.submit(&spec.to_yaml()).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let listed = client.list().await.expect("list during the plan");
    assert!(listed.iter().any(|q| q.name == "steady"));
    assert!(
        !submit.is_finished(),
        "the submit ended before the list call: it did not plan past its budget"
    );
    let err = submit
        .await
        .unwrap()
        .expect_err("planning past the budget must be refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("planning budget of 1.5s"), "{err:?}");
    let after = client.get("steady").await.expect("get");
    assert_eq!(after.state, QueryState::Running as i32, "{after:#?}");
    assert!(
        after.last_committed_batch > before,
        "the steady query committed nothing while a query planned: {before} -> {}",
        after.last_committed_batch
    );
    assert!(driver.process().is_running(), "the driver exited");
}
