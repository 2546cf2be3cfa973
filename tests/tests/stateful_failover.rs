//! Stateful queries through a leader failover with etcd: two drivers, the
//! leader SIGKILLed while a batch is in flight. The standby takes over,
//! re-runs the batch from `offsets/N` against the state version N-1 on
//! storage, and the sinks hold DataFusion's one-piece result: the running
//! aggregate (update mode) and each window once (append mode).

use std::time::Duration;

use sluice_tests::ha::{Ha, wait_batch_in_flight, wait_leader_except};
use sluice_tests::stateful::{assert_append, assert_update};
use sluice_tests::{Cluster, QueryState, READY_TIMEOUT, Spec, assert_epochs_non_decreasing};

const RPS: u64 = 10_000;
const TOTAL: u64 = 60_000;

const COUNTS: &str =
    "SELECT value % 300 AS k, count(*) AS n, sum(value) AS s FROM input GROUP BY value % 300";
const WINDOWS: &str = "SELECT window(timestamp_ms, '500 milliseconds') AS w, value % 10 AS k, count(*) AS n FROM input GROUP BY window(timestamp_ms, '500 milliseconds'), value % 10";
const WINDOWS_ORACLE: &str = "SELECT named_struct('start', date_bin(INTERVAL '500 milliseconds', timestamp_ms), 'end', date_bin(INTERVAL '500 milliseconds', timestamp_ms) + INTERVAL '500 milliseconds') AS w, value % 10 AS k, count(*) AS n FROM input GROUP BY 1, 2";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_resumes_stateful_queries_from_the_checkpoint() {
    let cluster = Cluster::new("stateful-failover");
    let ha = Ha::start(&cluster, 1, 2, 2).await;
    let mut client = cluster.client(&ha.list);
    let queries = [
        ("counts", COUNTS, "output_mode: update"),
        ("windows", WINDOWS, "output_mode: append"),
    ];
    for (name, sql, mode) in queries {
        let spec = Spec::new(name, &cluster.sink_path(name))
            .partitions(4)
            .rows_per_second(RPS)
            .total_rows(TOTAL)
            .max_rows_per_batch(4000)
            .interval_ms(0)
            .sql(sql)
            .with(mode)
            .with("watermark: {column: timestamp_ms, delay_ms: 200}")
            .with("state_partitions: 4")
            .with("snapshot_interval: 2");
        client.submit(&spec.to_yaml()).await.expect("submit");
    }
    let root = cluster.checkpoint_root();
    client
        .wait_committed("counts", 4, Duration::from_secs(30))
        .await;
    assert!(
        wait_batch_in_flight(&root, "counts", Duration::from_secs(20)).await,
        "a batch in flight"
    );
    ha.drivers[ha.leader].kill();
    let next = wait_leader_except(&ha.drivers, Some(ha.leader), READY_TIMEOUT).await;
    eprintln!("driver {} took over from driver {}", next, ha.leader);
    for (name, _, _) in queries {
        let status = client
            .wait_state(name, QueryState::Finished, Duration::from_secs(120))
            .await;
        assert!(status.error.is_empty(), "{name}: {status:#?}");
        let epochs = assert_epochs_non_decreasing(&root, name);
        let (first, last) = (epochs[0].1, epochs.last().unwrap().1);
        assert!(
            last > first,
            "{name}: committed under the new leader too: {epochs:?}"
        );
    }
    let rate = (RPS, TOTAL);
    let sink = cluster.sink_path("counts");
    assert_update(&root, "counts", &sink, COUNTS, rate, &["k"]).await;
    let sink = cluster.sink_path("windows");
    assert_append(&root, "windows", &sink, WINDOWS_ORACLE, rate, &["w", "k"]).await;
}
