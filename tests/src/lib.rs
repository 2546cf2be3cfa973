//! `sluice-tests`: a harness that runs Sluice clusters of real processes
//! (the workspace's own `sluice` binary, as `sluice driver` and `sluice
//! executor`) on free ports with a temporary checkpoint root, and the
//! checks the integration tests make. The tests are the modules of one
//! test binary, `tests/tests/integration/`.
//!
//! Build the binaries before running the tests:
//! `cargo build --workspace --bins && cargo nextest run -p sluice-tests`
//! (or `cargo test -p sluice-tests -- --test-threads=2`: every cluster
//! test starts several processes, two at a time fit 2 cores).

pub mod bins;
pub mod browser;
pub mod check;
pub mod cli;
pub mod client;
pub mod cluster;
pub mod etcd;
pub mod etcd_tls;
pub mod ha;
pub mod http;
pub mod inputs;
pub mod kafka;
pub mod kafka_tls;
pub mod lake;
pub mod manifests;
pub mod netns;
pub mod node;
pub mod oracle;
pub mod ports;
pub mod process;
pub mod proxy;
pub mod s3;
pub mod scale;
pub mod secure;
pub mod seed;
pub mod spec;
pub mod stateful;

pub use check::{
    assert_epochs_non_decreasing, assert_exactly_once, assert_exactly_once_at, commit_epochs,
    file_log, files_under, json_has_query, latest_entry, log_entries, log_records, offset_records,
    query_dir,
};
pub use cli::CliOutput;
pub use client::{Client, state_name};
pub use cluster::{Cluster, DriverOpts, ExecutorOpts, addrs};
pub use etcd::{Etcd, EtcdCluster};
pub use ha::{OnPanic, Record, TTL_MS, Watch, finish_and_check};
pub use node::READY_TIMEOUT;
pub use node::{Driver, Executor};
pub use ports::{free_addr, free_port};
pub use process::{Process, ProcessSpec};
pub use s3::S3;
pub use secure::Pki;
pub use seed::{Rng, test_rng};
pub use sluice_proto::QueryState;
pub use spec::Spec;
