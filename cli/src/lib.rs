//! The commands of the `sluice` binary, as a library: the client of a
//! cluster (`client`, `commands`, `progress`), `sluice local` (`local`,
//! `inproc`), `sluice verify`, `sluice state`, `sluice certs`, `sluice
//! nexmark`, and the node entry points (`node`). `main.rs` owns the flags
//! and the dispatch; the benchmark runner (`sluice-bench`) builds its
//! clusters from `inproc`, `client` and `queries`.

pub mod certs;
pub mod client;
pub mod commands;
#[cfg(test)]
mod fake_driver;
pub mod inproc;
pub mod live;
pub mod local;
pub mod nexmark;
pub mod node;
pub mod output;
pub mod progress;
pub mod queries;
pub mod retry;
pub mod state;
pub mod stats;
pub mod verify;
