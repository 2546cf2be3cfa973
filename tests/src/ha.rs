//! Helpers of the HA and chaos tests: drivers elected through etcd, finding
//! the leader, and a [`Watch`] that records every checkpoint record (and
//! sink manifest) as it appears, with its epoch and the time it was
//! written, so that a test can time a failover and prove fencing.

use sluice_common::checkpoint::Log;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::check::{assert_epochs_non_decreasing, assert_exactly_once, log_entries, query_dir};
use crate::client::Client;
use crate::cluster::{Cluster, DriverOpts};
use crate::etcd::EtcdCluster;
use crate::node::READY_TIMEOUT;
use crate::node::{Driver, Executor};
use crate::spec::Spec;
use sluice_proto::QueryState;

/// The lease TTL of the HA tests (etcd grants whole seconds, about 2 s at
/// the least).
pub const TTL_MS: u64 = 2000;

/// Starts a driver that campaigns through `etcd` with [`TTL_MS`]. It logs
/// each committed batch (a DEBUG line), which the chaos tests read.
pub fn start_ha_driver(cluster: &Cluster, etcd: &EtcdCluster) -> Driver {
    start_ha_driver_with(cluster, etcd, Vec::new())
}

/// [`start_ha_driver`] with more flags.
pub fn start_ha_driver_with(cluster: &Cluster, etcd: &EtcdCluster, args: Vec<String>) -> Driver {
    cluster.start_driver_with(DriverOpts {
        etcd: etcd.endpoints(),
        lease_ttl_ms: Some(TTL_MS),
        extra_args: args,
        env: vec![(
            "RUST_LOG".into(),
            "info,sluice_driver::batch_loop::batch=debug".into(),
        )],
        ..DriverOpts::default()
    })
}

/// etcd, drivers elected through it, and executors that know every driver.
pub struct Ha {
    pub etcd: EtcdCluster,
    pub drivers: Vec<Driver>,
    pub executors: Vec<Executor>,
    /// Every driver's gRPC address, comma-separated.
    pub list: String,
    /// The index of the first leader.
    pub leader: usize,
}

impl Ha {
    /// Starts an etcd cluster of `members`, waits for its health, starts
    /// `drivers` drivers, waits for one leader, then starts `executors`.
    pub async fn start(cluster: &Cluster, members: usize, drivers: usize, executors: usize) -> Ha {
        Ha::start_with(cluster, members, drivers, executors, &[]).await
    }

    /// [`Ha::start`] with more flags for every driver.
    pub async fn start_with(
        cluster: &Cluster,
        members: usize,
        drivers: usize,
        executors: usize,
        driver_args: &[&str],
    ) -> Ha {
        let etcd = EtcdCluster::start_healthy(cluster, members).await;
        let args: Vec<String> = driver_args.iter().map(|a| a.to_string()).collect();
        let drivers: Vec<Driver> = (0..drivers)
            .map(|_| start_ha_driver_with(cluster, &etcd, args.clone()))
            .collect();
        let leader = wait_leader(&drivers, READY_TIMEOUT).await;
        let list = driver_list(&drivers);
        let executors = (0..executors)
            .map(|_| cluster.start_executor(&list))
            .collect();
        Ha {
            etcd,
            drivers,
            executors,
            list,
            leader,
        }
    }
}

impl Ha {
    /// Submits the chaos tests' bounded rate query (4 partitions, 1000
    /// rows/s, a 50 ms trigger, `total` rows) and waits for `commits/3`.
    /// Returns a client, a [`Watch`] of the query and its sink manifests,
    /// and that commit record.
    pub async fn run_query(
        &self,
        cluster: &Cluster,
        query: &str,
        total: u64,
    ) -> (Client, Watch, Record) {
        let sink = cluster.sink_path(query);
        let spec = Spec::new(query, &sink)
            .partitions(4)
            .rows_per_second(1000)
            .total_rows(total)
            .interval_ms(50);
        let mut client = cluster.client(&self.list);
        client.submit(&spec.to_yaml()).await.expect("submit");
        let mut watch = Watch::query(&cluster.checkpoint_root(), query).with_sink(&sink);
        let third = watch
            .wait_for(Duration::from_secs(30), |r| {
                r.log == Log::Commits.dir() && r.batch >= 3
            })
            .await
            .expect("commits/3 within 30 s");
        (client, watch, third)
    }
}

/// Waits for `query` to finish, then proves the sink exactly-once and the
/// commit epochs non-decreasing, both in the checkpoint and as `watch` saw
/// them. Returns every commit as (batch, epoch).
pub async fn finish_and_check(
    client: &mut Client,
    watch: &mut Watch,
    checkpoint_root: &Path,
    query: &str,
    sink: &Path,
    total: u64,
    timeout: Duration,
) -> Vec<(u64, u64)> {
    client
        .wait_state(query, QueryState::Finished, timeout)
        .await;
    assert_exactly_once(sink, total).await;
    let epochs = assert_epochs_non_decreasing(checkpoint_root, query);
    watch.poll();
    watch.assert_commit_epochs_non_decreasing();
    epochs
}

/// The comma-separated gRPC addresses of `drivers`.
/// Waits until `query` has committed a batch after `batch`, read from the
/// checkpoint under `root` (a paused leader may still hold its port, so a
/// client could wait on it); panics after `within`.
pub async fn wait_committed_past(root: &Path, query: &str, batch: u64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let last = crate::check::latest_entry(root, query, Log::Commits);
        if last.is_some_and(|(b, _)| b > batch) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{query} did not commit past batch {batch} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn driver_list(drivers: &[Driver]) -> String {
    drivers
        .iter()
        .map(|d| d.addr().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The indexes of the drivers whose `/readyz` answers 200 now.
pub async fn ready_drivers(drivers: &[Driver]) -> Vec<usize> {
    let mut out = Vec::new();
    for (i, d) in drivers.iter().enumerate() {
        if d.is_running() && !d.is_paused() && d.is_ready().await {
            out.push(i);
        }
    }
    out
}

/// Waits until exactly one driver, other than `except`, answers `/readyz`
/// with 200 and returns its index. Panics after `timeout`.
pub async fn wait_leader_except(
    drivers: &[Driver],
    except: Option<usize>,
    timeout: Duration,
) -> usize {
    let deadline = Instant::now() + timeout;
    loop {
        let ready = ready_drivers(drivers).await;
        if let [one] = ready.as_slice()
            && Some(*one) != except
        {
            return *one;
        }
        assert!(
            Instant::now() < deadline,
            "no single leader (other than {except:?}) after {timeout:?}; ready: {ready:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits for the one leader among `drivers`.
pub async fn wait_leader(drivers: &[Driver], timeout: Duration) -> usize {
    wait_leader_except(drivers, None, timeout).await
}

/// The leader's address and epoch as the cluster API reports them.
pub async fn leader_and_epoch(client: &mut Client) -> (String, u64) {
    let info = client.cluster_info().await.expect("Cluster RPC");
    (info.leader, info.epoch)
}

/// Milliseconds from `from` to `to` (negative when `to` is earlier).
pub fn ms_between(from: SystemTime, to: SystemTime) -> i64 {
    match to.duration_since(from) {
        Ok(d) => d.as_millis() as i64,
        Err(e) => -(e.duration().as_millis() as i64),
    }
}

/// One record file: which log, its batch, its epoch, when it was written.
#[derive(Debug, Clone)]
pub struct Record {
    pub log: String,
    pub batch: u64,
    pub epoch: u64,
    /// The file's modification time: when its bytes were written, just
    /// before the atomic rename made it visible.
    pub written: SystemTime,
    pub path: PathBuf,
}

/// Records every new file of some record directories as it appears.
#[derive(Debug)]
pub struct Watch {
    dirs: Vec<(String, PathBuf)>,
    seen: BTreeSet<PathBuf>,
    pub records: Vec<Record>,
}

impl Watch {
    /// Watches `offsets/` and `commits/` of `query`.
    pub fn query(checkpoint_root: &Path, query: &str) -> Watch {
        let dir = query_dir(checkpoint_root, query);
        Watch {
            dirs: vec![
                (Log::Offsets.dir().into(), dir.join(Log::Offsets.dir())),
                (Log::Commits.dir().into(), dir.join(Log::Commits.dir())),
            ],
            seen: BTreeSet::new(),
            records: Vec::new(),
        }
    }

    /// Also watches the sink manifests (`<sink>/_sluice/`) as `"sink"`.
    pub fn with_sink(mut self, sink: &Path) -> Watch {
        self.dirs.push(("sink".into(), sink.join("_sluice")));
        self
    }

    /// Reads the files that appeared since the last poll and returns them.
    /// A file purged before it could be read is skipped.
    pub fn poll(&mut self) -> Vec<Record> {
        let mut new = Vec::new();
        for (log, dir) in &self.dirs {
            let Ok(rd) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut paths: Vec<PathBuf> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
            paths.sort();
            for path in paths {
                if self.seen.contains(&path) {
                    continue;
                }
                let name = path.file_name().unwrap_or_default().to_string_lossy();
                let Some(batch) = name.parse::<u64>().ok() else {
                    continue;
                };
                let Some(record) = read_record(log, batch, &path) else {
                    continue;
                };
                self.seen.insert(path);
                new.push(record);
            }
        }
        self.records.extend(new.iter().cloned());
        new
    }

    /// Polls every 5 ms until a new record satisfies `pred`.
    pub async fn wait_for(
        &mut self,
        timeout: Duration,
        mut pred: impl FnMut(&Record) -> bool,
    ) -> Option<Record> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(r) = self.poll().into_iter().find(|r| pred(r)) {
                return Some(r);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits for the first commit under an epoch above `epoch`.
    pub async fn commit_after_epoch(&mut self, epoch: u64, timeout: Duration) -> Option<Record> {
        self.wait_for(timeout, |r| r.log == Log::Commits.dir() && r.epoch > epoch)
            .await
    }

    /// Every record of `log` seen so far, in batch order.
    pub fn of(&self, log: &str) -> Vec<&Record> {
        let mut out: Vec<&Record> = self.records.iter().filter(|r| r.log == log).collect();
        out.sort_by_key(|r| r.batch);
        out
    }

    /// Asserts that the epochs of every commit seen so far never decrease
    /// as the batch grows (this sees records that were purged since).
    pub fn assert_commit_epochs_non_decreasing(&self) {
        let commits: Vec<(u64, u64)> = self
            .of(Log::Commits.dir())
            .iter()
            .map(|r| (r.batch, r.epoch))
            .collect();
        for w in commits.windows(2) {
            assert!(
                w[0].1 <= w[1].1,
                "epoch decreased from batch {} (epoch {}) to batch {} (epoch {}); all: {commits:?}",
                w[0].0,
                w[0].1,
                w[1].0,
                w[1].1
            );
        }
    }
}

fn read_record(log: &str, batch: u64, path: &Path) -> Option<Record> {
    let bytes = std::fs::read(path).ok()?;
    let written = std::fs::metadata(path).ok()?.modified().ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    assert_eq!(
        v["batch_id"].as_u64(),
        Some(batch),
        "{} holds another batch: {v}",
        path.display()
    );
    let epoch = v["epoch"]
        .as_u64()
        .unwrap_or_else(|| panic!("{} has no epoch: {v}", path.display()));
    Some(Record {
        log: log.to_string(),
        batch,
        epoch,
        written,
        path: path.to_path_buf(),
    })
}

/// Waits until `query` has a batch in flight (its latest `offsets/N` has
/// no `commits/N` yet). Returns false after `timeout`.
pub async fn wait_batch_in_flight(root: &Path, query: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        let offsets = log_entries(root, query, Log::Offsets).last().map(|e| e.0);
        let commits = log_entries(root, query, Log::Commits).last().map(|e| e.0);
        if offsets.is_some() && offsets > commits {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    false
}

/// Prints `what` (a seed, for instance) when dropped during a panic.
pub struct OnPanic(pub String);

impl Drop for OnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.0);
        }
    }
}
