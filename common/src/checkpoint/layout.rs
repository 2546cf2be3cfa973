//! The checkpoint layout: where each of a query's checkpoint files is,
//! by name. This table is the one description of the layout; this file
//! and [`crate::state`] (state and shuffle files) are the places that
//! spell its paths. Everything else names a file as a [`Record`], a
//! [`Log`] entry or through these constants.
//!
//! ```text
//! <checkpoint-root>/
//!   epochs/<E>                  a standalone driver's epoch claim (id, address)   create-only (crate::epochs)
//!   queries/<name>/
//!     metadata                  {"id", "name", "created_ms", "epoch"}; written last at submit   create-only
//!     spec.json                 the spec as submitted                             create-only
//!     stopped                   exists once the user has stopped it               create-only
//!     failed                    why it FAILED, until it is resubmitted            create-only, removed on resubmit
//!     offsets/<N>               the plan of batch N (the write-ahead log)         create-only
//!     commits/<N>               what batch N committed                            create-only
//!     progress/<N>              the progress batch N reported                     create-only
//!     transactions/<N>          the Kafka transactions batch N's tasks prepared, committed before commits/N   create-only
//!     rescales/<G>              the restart that began state generation G (G ≥ 1) with other state partitions   create-only
//!     sources/rate              the rate source's start time                      create-only
//!     sources/kafka             a Kafka source's start offset per partition, resolved at submit   create-only
//!     sources/nexmark           the Nexmark source's start time                   create-only
//!     sources/schema            a file source's input schema, fixed at submit     create-only
//!     sources/tables            each static table's schema and place, fixed at submit   create-only
//!     sources/files/<N>         the files batch N of a file source read (outlives offsets/)   create-only
//!     inputs/<table>/rate, kafka, nexmark, schema, files/<N>
//!                               the same source records, per input of a query with `sources:`
//!     shuffle/<N>/<map>.arrow   a map task's rows of stateful batch N, one IPC stream per bucket; removed after commits/N
//!     shuffle/<N>/<op + 1>-<p>.arrow   a reduce task's output for the operator it feeds
//!     state/<op>/<p>/<N>.delta  the rows batch N changed or removed in partition p   create-only
//!     state/<op>/<p>/<N>.snapshot   the whole partition after batch N             create-only
//!     state/<op>/g<G>/<p>/…     the same, in state generation G ≥ 1               create-only
//! ```
//!
//! `N`, `E` and `G` in file names are zero-padded to 20 digits
//! ([`super::padded`]) so that a listing's lexical order is the numeric
//! order; `<p>` and `<map>` to 5. A background task keeps the last
//! `--retain-batches` entries of `offsets/`, `commits/` and
//! `transactions/`, and the last 1000 of `progress/`.

use super::padded;

/// The directory of every query, under the checkpoint root.
pub const QUERIES_DIR: &str = "queries";

/// The directory of the standalone drivers' epoch claims, under the
/// checkpoint root.
pub const EPOCHS_DIR: &str = "epochs";

/// A stateful query's state files, under its directory.
pub const STATE_DIR: &str = "state";

/// A stateful query's shuffle files, under its directory.
pub const SHUFFLE_DIR: &str = "shuffle";

/// The location of query `name`'s checkpoint directory under the
/// checkpoint root `root` (a path or URL, as `--checkpoint-root` takes).
pub fn query_location(root: &str, name: &str) -> String {
    format!("{}/{QUERIES_DIR}/{name}", root.trim_end_matches('/'))
}

/// A file that a query has at most one of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// `metadata`: id, name, creation time and epoch; written last at
    /// submit, it marks a complete submit.
    Metadata,
    /// `spec.json`: the spec as submitted.
    Spec,
    /// `stopped`: the user's stop.
    Stopped,
    /// `failed`: why the query FAILED, until it is resubmitted.
    Failed,
    /// `sources/rate`: the rate source's fixed start.
    RateStart,
    /// `sources/kafka`: where a Kafka source starts in each partition.
    KafkaStart,
    /// `sources/nexmark`: the Nexmark source's fixed start.
    NexmarkStart,
    /// `sources/schema`: the input's schema, fixed at submit.
    Schema,
    /// `sources/tables`: each static table's schema, fixed at submit.
    Tables,
}

/// The directory of the source records of each input stream of a query
/// with `sources:`: `inputs/<table>/`. A query with `source:` keeps its
/// one input's records in `sources/`.
pub const INPUTS_DIR: &str = "inputs";

impl Record {
    /// Whether the record belongs to an input stream's source.
    fn of_source(self) -> bool {
        matches!(
            self,
            Record::RateStart | Record::KafkaStart | Record::NexmarkStart | Record::Schema
        )
    }

    /// The file's path relative to the query's directory, for the input
    /// stream `scope` names (`None`: the query's one `source:`).
    pub fn rel_in(self, scope: Option<&str>) -> String {
        match scope {
            Some(input) if self.of_source() => {
                let leaf = self.rel().trim_start_matches("sources/");
                format!("{INPUTS_DIR}/{input}/{leaf}")
            }
            _ => self.rel().to_string(),
        }
    }

    /// The file's path relative to the query's directory.
    pub fn rel(self) -> &'static str {
        match self {
            Record::Metadata => "metadata",
            Record::Spec => "spec.json",
            Record::Stopped => "stopped",
            Record::Failed => "failed",
            Record::RateStart => "sources/rate",
            Record::KafkaStart => "sources/kafka",
            Record::NexmarkStart => "sources/nexmark",
            Record::Schema => "sources/schema",
            Record::Tables => "sources/tables",
        }
    }
}

/// A log of one record per batch, each named by its zero-padded batch id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Log {
    /// `offsets/<N>`: the plan of batch N (the write-ahead log).
    Offsets,
    /// `commits/<N>`: what batch N committed.
    Commits,
    /// `progress/<N>`: the progress batch N reported.
    Progress,
    /// `sources/files/<N>`: the files batch N of a file source read; it
    /// outlives `offsets/`, so that no file is read twice.
    SourceFiles,
    /// `transactions/<N>`: the Kafka transactions batch N's tasks left
    /// open, which the driver commits before `commits/N`.
    Transactions,
    /// `rescales/<G>`: the restart that began state generation G with
    /// other state partitions (`N` here is the generation, from 1).
    Rescales,
}

impl Log {
    /// The log's directory relative to the query's directory.
    pub fn dir(self) -> &'static str {
        match self {
            Log::Offsets => "offsets",
            Log::Commits => "commits",
            Log::Progress => "progress",
            Log::SourceFiles => "sources/files",
            Log::Transactions => "transactions",
            Log::Rescales => "rescales",
        }
    }

    /// The log's directory for the input stream `scope` names (`None`: the
    /// query's one `source:`).
    pub fn dir_in(self, scope: Option<&str>) -> String {
        match (self, scope) {
            (Log::SourceFiles, Some(input)) => format!("{INPUTS_DIR}/{input}/files"),
            _ => self.dir().to_string(),
        }
    }

    /// Batch `batch`'s entry for the input stream `scope` names.
    pub fn entry_in(self, scope: Option<&str>, batch: u64) -> String {
        format!("{}/{}", self.dir_in(scope), padded(batch))
    }

    /// The path of batch `batch`'s entry relative to the query's directory,
    /// as messages name it (`offsets/00000000000000000007`).
    pub fn entry(self, batch: u64) -> String {
        format!("{}/{}", self.dir(), padded(batch))
    }
}

impl std::fmt::Display for Log {
    /// The log as messages name it: `offsets/`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/", self.dir())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_documented_layout() {
        assert_eq!(Log::Offsets.entry(7), "offsets/00000000000000000007");
        assert_eq!(
            Log::SourceFiles.entry(0),
            "sources/files/00000000000000000000"
        );
        assert_eq!(Log::Commits.to_string(), "commits/");
        assert_eq!(Record::Spec.rel(), "spec.json");
        assert_eq!(Record::Schema.rel_in(None), "sources/schema");
        assert_eq!(
            Record::Schema.rel_in(Some("orders")),
            "inputs/orders/schema"
        );
        assert_eq!(Record::Spec.rel_in(Some("orders")), "spec.json");
        assert_eq!(
            Log::SourceFiles.entry_in(Some("orders"), 1),
            "inputs/orders/files/00000000000000000001"
        );
        assert_eq!(
            Log::Offsets.entry_in(Some("orders"), 1),
            Log::Offsets.entry(1)
        );
        assert_eq!(Record::Failed.rel(), "failed");
        assert_eq!(
            Log::Transactions.entry(2),
            "transactions/00000000000000000002"
        );
        assert_eq!(Log::Rescales.entry(1), "rescales/00000000000000000001");
        assert_eq!(
            Record::KafkaStart.rel_in(Some("clicks")),
            "inputs/clicks/kafka"
        );
        assert_eq!(
            (STATE_DIR, SHUFFLE_DIR, EPOCHS_DIR),
            ("state", "shuffle", "epochs")
        );
        assert_eq!(query_location("s3://b/ckpt/", "q"), "s3://b/ckpt/queries/q");
        assert_eq!(query_location("/data/ckpt", "q"), "/data/ckpt/queries/q");
    }
}
