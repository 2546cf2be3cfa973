//! Everything on: TLS on the drivers' port, mutual TLS for executors,
//! tokens for the API, etcd over TLS with client-certificate auth and
//! etcd's own authentication (a user limited to `/sluice/`). The leader is
//! SIGKILLed while a batch is in flight; the standby, whose stream to the
//! leader runs over TLS, sees it break and the port refuse, revokes the
//! lease through the secured etcd and takes over (counted as
//! `leader_refused`), and the query finishes exactly-once with commit
//! epochs that never decrease.

use sluice_common::checkpoint::Log;
use std::time::Duration;

use sluice_tests::etcd_tls::driver_tls_args;
use sluice_tests::ha::{Watch, driver_list, wait_batch_in_flight, wait_leader, wait_leader_except};
use sluice_tests::secure::ALL;
use sluice_tests::{
    Client, Cluster, DriverOpts, EtcdCluster, ExecutorOpts, Pki, READY_TIMEOUT, Spec, TTL_MS,
    finish_and_check,
};

const QUERY: &str = "secured";
const TOTAL: u64 = 8_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secured_cluster_fails_over_exactly_once() {
    let cluster = Cluster::new("security-full");
    let pki = Pki::init(&cluster);
    let (etcd, user) = EtcdCluster::start_secure(&cluster, &pki, true).await;
    let user = user.expect("etcd auth is on");
    let mut args = pki.driver_args(ALL);
    args.extend(driver_tls_args(&pki));
    args.extend(user.driver_args());
    let drivers: Vec<_> = (0..2)
        .map(|_| {
            cluster.start_driver_with(DriverOpts {
                etcd: etcd.endpoints(),
                lease_ttl_ms: Some(TTL_MS),
                extra_args: args.clone(),
                ..Default::default()
            })
        })
        .collect();
    let leader = wait_leader(&drivers, READY_TIMEOUT).await;
    let list = driver_list(&drivers);
    let _executors: Vec<_> = (0..2)
        .map(|_| {
            cluster.start_executor_with(
                &list,
                ExecutorOpts {
                    extra_args: pki.executor_args(ALL),
                    ..Default::default()
                },
            )
        })
        .collect();

    let sink = cluster.sink_path(QUERY);
    let spec = Spec::new(QUERY, &sink)
        .partitions(4)
        .rows_per_second(1000)
        .total_rows(TOTAL)
        .interval_ms(50);
    let mut client = Client::secured(&list, &pki.client_tls(), Some(&pki.token("admin")));
    client.submit(&spec.to_yaml()).await.expect("submit");
    let root = cluster.checkpoint_root();
    let mut watch = Watch::query(&root, QUERY).with_sink(&sink);
    let first = watch
        .wait_for(Duration::from_secs(30), |r| {
            r.log == Log::Commits.dir() && r.batch >= 2
        })
        .await
        .expect("commits/2 within 30 s");

    drivers[1 - leader]
        .wait_armed(Duration::from_secs(10))
        .await;
    assert!(wait_batch_in_flight(&root, QUERY, Duration::from_secs(5)).await);
    drivers[leader].kill();
    let next = watch
        .commit_after_epoch(first.epoch, Duration::from_secs(30))
        .await
        .expect("the standby commits under a higher epoch");
    let new_leader = wait_leader_except(&drivers, Some(leader), Duration::from_secs(10)).await;
    assert_eq!(
        drivers[new_leader].takeovers("leader_refused").await,
        1.0,
        "the standby detected the dead leader over its TLS stream"
    );
    eprintln!(
        "failover: batch {} committed at epoch {} by {}",
        next.batch,
        next.epoch,
        drivers[new_leader].name()
    );
    let epochs = finish_and_check(
        &mut client,
        &mut watch,
        &root,
        QUERY,
        &sink,
        TOTAL,
        Duration::from_secs(90),
    )
    .await;
    assert!(epochs.iter().any(|&(_, e)| e > first.epoch), "{epochs:?}");

    // The drivers reached etcd over TLS as the limited user, and logged no
    // secret.
    let password = std::fs::read_to_string(&user.password_file).unwrap();
    for d in &drivers {
        let log = std::fs::read_to_string(d.log_path()).unwrap();
        assert!(
            !log.contains(password.trim()),
            "{} logged the etcd password",
            d.name()
        );
        assert!(
            !log.contains(&pki.token("admin")),
            "{} logged a token",
            d.name()
        );
    }
}
