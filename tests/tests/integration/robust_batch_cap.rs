//! Every batch is capped by default (`--max-rows-per-batch`), whatever the
//! source offers: a rate source of 10^12 rows a second plans batches of
//! the cap, not of its backlog; a query's own `max_rows_per_batch` replaces
//! the default. The cap is recorded in `offsets/N`.

use std::time::Duration;

use sluice_tests::{Cluster, DriverOpts, Spec, offset_records};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_capped_by_default_and_by_the_spec() {
    let cluster = Cluster::new("batch-cap");
    let driver = cluster.start_driver_with(DriverOpts {
        extra_args: vec!["--max-rows-per-batch".into(), "5000".into()],
        ..DriverOpts::default()
    });
    driver.wait_ready(sluice_tests::READY_TIMEOUT).await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let flood = |name: &str| {
        Spec::new(name, &cluster.sink_path(name))
            .partitions(64)
            .rows_per_second(1_000_000_000_000)
    };
    client
        .submit(&flood("default").to_yaml())
        .await
        .expect("submit");
    client
        .submit(&flood("own").max_rows_per_batch(300).to_yaml())
        .await
        .expect("submit");
    for (name, cap) in [("default", 5000u64), ("own", 300)] {
        client
            .wait_committed(name, 2, Duration::from_secs(60))
            .await;
        let records = offset_records(&cluster.checkpoint_root(), name);
        assert!(records.len() >= 3, "{name}: {records:?}");
        for r in &records {
            let rows = r.source.end_value() - r.source.start_value();
            assert_eq!(rows, cap, "{name}: batch {} plans {rows} rows", r.batch_id);
            assert_eq!(r.max_rows_per_batch, Some(cap), "{name}: {r:?}");
        }
    }
}
