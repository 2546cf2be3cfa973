//! The discard sink on the driver: its tasks write nothing, so a batch
//! has nothing to make visible before `commits/N`; what a task counted is
//! its report's bytes.

use futures::future::BoxFuture;
use sluice_proto as pb;

use super::{Committed, Committer, Prepared, SinkIo, SinkKind, Written};
use crate::error::DriverError;

/// The discard sink: nothing to check at submit, nothing to commit.
pub(super) struct Kind;

impl SinkKind for Kind {
    fn describe(&self) -> &'static str {
        "is discard"
    }

    fn written(&self, report: &pb::task_output::Sink, into: &mut Written) -> bool {
        let pb::task_output::Sink::Discard(d) = report else {
            return false;
        };
        into.bytes += d.bytes;
        true
    }

    fn open<'a>(
        &'a self,
        _io: &'a SinkIo,
    ) -> BoxFuture<'a, Result<Box<dyn Committer>, DriverError>> {
        Box::pin(async { Ok(Box::new(Discard) as Box<dyn Committer>) })
    }
}

/// A running query's discard sink.
struct Discard;

impl Committer for Discard {
    fn commit<'a>(
        &'a self,
        _batch: u64,
        _written: &'a Written,
        _prepared: Prepared,
    ) -> BoxFuture<'a, Result<Committed, DriverError>> {
        Box::pin(async { Ok(Committed::default()) })
    }
}
