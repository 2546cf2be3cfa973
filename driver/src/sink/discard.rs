//! The discard sink on the driver: its tasks write nothing, so a batch
//! has nothing to make visible before `commits/N`; what a task counted is
//! its report's bytes.

use futures::future::BoxFuture;
use sluice_common::sink::SinkFile;
use sluice_proto as pb;

use super::{Committed, Committer, Prepared, Reported, SinkIo, SinkKind};
use crate::error::DriverError;

/// The discard sink: nothing to check at submit, nothing to commit.
pub(super) struct Kind;

impl SinkKind for Kind {
    fn describe(&self) -> &'static str {
        "is discard"
    }

    fn reports(&self) -> Reported {
        Reported::Discard
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
        _files: &'a [SinkFile],
        _prepared: Prepared,
    ) -> BoxFuture<'a, Result<Committed, DriverError>> {
        Box::pin(async { Ok(Committed::default()) })
    }
}

/// The bytes a task's report says it discarded (0 for another sink's).
pub fn bytes(o: &pb::TaskOutput) -> u64 {
    match &o.sink {
        Some(pb::task_output::Sink::Discard(d)) => d.bytes,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_discard_report_has_discarded_bytes() {
        let report = |sink| pb::TaskOutput {
            sink,
            ..Default::default()
        };
        let discard = pb::task_output::Sink::Discard(pb::DiscardWritten { bytes: 7 });
        assert_eq!(bytes(&report(Some(discard))), 7);
        let files = pb::task_output::Sink::Files(pb::FilesWritten::default());
        assert_eq!(bytes(&report(Some(files))), 0);
        assert_eq!(bytes(&report(None)), 0);
    }
}
