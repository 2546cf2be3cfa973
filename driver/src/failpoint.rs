//! Failpoints: every named point where a test may hold or steer the driver,
//! and their state. This module owns them all:
//!
//! | point                | where                  | what it does while armed                                   |
//! |----------------------|------------------------|------------------------------------------------------------|
//! | `kafka-prepared`     | `sink/kafka/commit.rs` | an exactly-once batch waits after its `transactions/N` is written, before any commit |
//! | `kafka-committed`    | `sink/kafka/commit.rs` | it waits after its transactions' commits, before `commits/N` |
//! | `revoke-live-leader` | `leader/detect.rs`     | a standby watching the leader treats it as dead and revokes its lease |
//! | `delta-prepared`     | `sink/delta/mod.rs`    | a batch waits after its data files are checked, before its commit to a Delta table |
//! | `delta-committed`    | `sink/delta/mod.rs`    | a batch waits after its commit to a Delta table, before `commits/N` |
//! | `iceberg-prepared`   | `sink/iceberg/mod.rs`  | a batch waits after its snapshot's files are written, before the catalog's update |
//! | `sink-committed`     | `batch_loop/log.rs`    | any sink's batch waits after its sink commit, before `commits/N`; a stop waits with it, up to its grace |
//!
//! Invariants, enforced here:
//! - Debug builds only. In a release build [`hold`] is an empty inline
//!   function and [`fire`] a future that never completes, so that call sites
//!   carry no `cfg` of their own; the registry and its control
//!   ([`set`], [`status`], the names) are not compiled.
//! - A batch held at a point waits, without polling, until the point is
//!   disarmed; its caller also ends the wait when the query stops or the
//!   term ends (`sink-committed`: only when the term ends, as a slow
//!   commit would).
//! - `revoke-live-leader` fires once per arming: the waiter that fires
//!   disarms it in the same step, so a second waiter waits for the next
//!   arming.
//! - Every hit is recorded (the held batch, or the epoch of the leader whose
//!   lease is revoked) and logged at WARN, as is every arming.
//!
//! Tests arm and read the points over the driver's HTTP port
//! (`ui/failpoints.rs`).

/// A named failpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    /// `kafka-prepared`
    KafkaPrepared,
    /// `kafka-committed`
    KafkaCommitted,
    /// `revoke-live-leader`
    RevokeLiveLeader,
    /// `delta-prepared`
    DeltaPrepared,
    /// `delta-committed`
    DeltaCommitted,
    /// `sink-committed`
    SinkCommitted,
    /// `iceberg-prepared`
    IcebergPrepared,
}

/// Holds batch `batch` at `point` while the point is armed.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub async fn hold(_point: Point, _batch: u64) {}

/// Completes when `point` is armed (never, in a release build).
#[cfg(not(debug_assertions))]
#[inline(always)]
pub async fn fire(_point: Point, _epoch: u64) {
    std::future::pending().await
}

#[cfg(debug_assertions)]
pub use armed::{Status, fire, hold, set, status};

#[cfg(debug_assertions)]
mod armed {
    use std::sync::{LazyLock, Mutex};

    use serde::Serialize;
    use tokio::sync::watch;
    use tracing::{info, warn};

    use super::Point;

    impl Point {
        /// Every point, in the order of the table above.
        pub const ALL: [Point; 7] = [
            Point::KafkaPrepared,
            Point::KafkaCommitted,
            Point::RevokeLiveLeader,
            Point::DeltaPrepared,
            Point::DeltaCommitted,
            Point::SinkCommitted,
            Point::IcebergPrepared,
        ];

        pub fn name(self) -> &'static str {
            match self {
                Point::KafkaPrepared => "kafka-prepared",
                Point::KafkaCommitted => "kafka-committed",
                Point::RevokeLiveLeader => "revoke-live-leader",
                Point::DeltaPrepared => "delta-prepared",
                Point::DeltaCommitted => "delta-committed",
                Point::SinkCommitted => "sink-committed",
                Point::IcebergPrepared => "iceberg-prepared",
            }
        }

        /// The point called `name`.
        pub fn named(name: &str) -> Option<Point> {
            Point::ALL.into_iter().find(|p| p.name() == name)
        }

        /// The names of every point, for an error that lists them.
        pub fn names() -> String {
            Point::ALL.map(Point::name).join(", ")
        }
    }

    /// What a test reads of a point.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
    pub struct Status {
        pub armed: bool,
        /// Each hit: the held batch, or the revoked leader's epoch.
        pub hits: Vec<u64>,
    }

    /// One point's state.
    struct State {
        armed: watch::Sender<bool>,
        hits: Mutex<Vec<u64>>,
    }

    /// Every point's state. The driver has one ([`POINTS`]); unit tests make
    /// their own.
    pub(super) struct Failpoints {
        points: [State; Point::ALL.len()],
    }

    static POINTS: LazyLock<Failpoints> = LazyLock::new(Failpoints::default);

    /// Arms (`on`) or disarms `point`. Disarming releases the batches it
    /// holds.
    pub fn set(point: Point, on: bool) {
        POINTS.set(point, on);
    }

    /// Whether `point` is armed, and its hits so far.
    pub fn status(point: Point) -> Status {
        POINTS.status(point)
    }

    /// Holds batch `batch` at `point` while the point is armed; returns at
    /// once when it is not.
    pub async fn hold(point: Point, batch: u64) {
        POINTS.hold(point, batch).await;
    }

    /// Completes when `point` is armed, having disarmed it: once per arming.
    /// `epoch` is recorded as the hit.
    pub async fn fire(point: Point, epoch: u64) {
        POINTS.fire(point, epoch).await;
    }

    impl Default for Failpoints {
        fn default() -> Self {
            Failpoints {
                points: std::array::from_fn(|_| State {
                    armed: watch::Sender::new(false),
                    hits: Mutex::default(),
                }),
            }
        }
    }

    impl Failpoints {
        fn state(&self, point: Point) -> &State {
            &self.points[point as usize]
        }

        pub(super) fn set(&self, point: Point, on: bool) {
            self.state(point).armed.send_replace(on);
            if on {
                warn!(point = point.name(), "failpoint armed");
            } else {
                info!(point = point.name(), "failpoint disarmed");
            }
        }

        pub(super) fn status(&self, point: Point) -> Status {
            let state = self.state(point);
            Status {
                armed: *state.armed.borrow(),
                hits: state.hits.lock().expect("failpoint hits").clone(),
            }
        }

        fn hit(&self, point: Point, value: u64) {
            self.state(point)
                .hits
                .lock()
                .expect("failpoint hits")
                .push(value);
        }

        pub(super) async fn hold(&self, point: Point, batch: u64) {
            let mut armed = self.state(point).armed.subscribe();
            if !*armed.borrow_and_update() {
                return;
            }
            self.hit(point, batch);
            warn!(
                point = point.name(),
                batch, "failpoint hit: the batch waits until the point is disarmed"
            );
            // The sender lives as long as `self`: the wait ends by a disarm.
            let _ = armed.wait_for(|on| !on).await;
        }

        pub(super) async fn fire(&self, point: Point, epoch: u64) {
            let state = self.state(point);
            let mut armed = state.armed.subscribe();
            loop {
                // The sender lives as long as `self`: the wait ends by an arming.
                let _ = armed.wait_for(|on| *on).await;
                // Disarming and the hit happen with no await between them,
                // so a waiter dropped here has not taken the arming.
                if state.armed.send_if_modified(std::mem::take) {
                    self.hit(point, epoch);
                    warn!(point = point.name(), epoch, "failpoint hit");
                    return;
                }
            }
        }
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use futures::FutureExt;

    use super::Point::{self, KafkaCommitted, KafkaPrepared, RevokeLiveLeader};
    use super::Status;
    use super::armed::Failpoints;

    /// Failpoints with `point` armed.
    fn armed(point: Point) -> Failpoints {
        let fp = Failpoints::default();
        fp.set(point, true);
        fp
    }

    fn status(armed: bool, hits: &[u64]) -> Status {
        Status {
            armed,
            hits: hits.to_vec(),
        }
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_none() {
        for p in Point::ALL {
            assert_eq!(Point::named(p.name()), Some(p));
        }
        assert_eq!(Point::named("kafka-prepare"), None);
        assert_eq!(
            Point::names(),
            "kafka-prepared, kafka-committed, revoke-live-leader, delta-prepared, delta-committed, \
             sink-committed, iceberg-prepared"
        );
    }

    #[tokio::test]
    async fn a_disarmed_point_holds_nothing_and_records_nothing() {
        let fp = Failpoints::default();
        assert_eq!(fp.hold(KafkaPrepared, 3).now_or_never(), Some(()));
        assert_eq!(fp.status(KafkaPrepared), status(false, &[]));
    }

    #[tokio::test]
    async fn an_armed_point_holds_each_batch_until_disarmed() {
        let fp = armed(KafkaPrepared);
        let mut first = Box::pin(fp.hold(KafkaPrepared, 7));
        let mut second = Box::pin(fp.hold(KafkaPrepared, 8));
        assert!((&mut first).now_or_never().is_none());
        assert!((&mut second).now_or_never().is_none());
        assert_eq!(fp.status(KafkaPrepared), status(true, &[7, 8]));
        // The other points are not armed.
        assert_eq!(fp.hold(KafkaCommitted, 7).now_or_never(), Some(()));
        assert_eq!(fp.status(KafkaCommitted), status(false, &[]));

        fp.set(KafkaPrepared, false);
        assert_eq!(first.now_or_never(), Some(()));
        assert_eq!(second.now_or_never(), Some(()));
        assert_eq!(fp.status(KafkaPrepared), status(false, &[7, 8]));
    }

    #[tokio::test]
    async fn a_batch_whose_wait_is_dropped_stays_recorded() {
        let fp = armed(KafkaCommitted);
        let held = tokio::time::timeout(
            std::time::Duration::from_millis(20),
            fp.hold(KafkaCommitted, 4),
        )
        .await;
        assert!(held.is_err(), "held until the caller gave up");
        assert_eq!(fp.status(KafkaCommitted), status(true, &[4]));
    }

    #[tokio::test]
    async fn fire_waits_for_an_arming_and_takes_it_once() {
        let fp = Failpoints::default();
        let mut a = Box::pin(fp.fire(RevokeLiveLeader, 5));
        let mut b = Box::pin(fp.fire(RevokeLiveLeader, 6));
        assert!((&mut a).now_or_never().is_none());
        assert!((&mut b).now_or_never().is_none());

        fp.set(RevokeLiveLeader, true);
        assert_eq!((&mut a).now_or_never(), Some(()));
        // Disarmed by the firing: the other waiter waits for the next arming.
        assert!((&mut b).now_or_never().is_none());
        assert_eq!(fp.status(RevokeLiveLeader), status(false, &[5]));

        fp.set(RevokeLiveLeader, true);
        assert_eq!(b.now_or_never(), Some(()));
        assert_eq!(fp.status(RevokeLiveLeader), status(false, &[5, 6]));
    }

    #[tokio::test]
    async fn fire_completes_at_once_when_already_armed() {
        let fp = armed(RevokeLiveLeader);
        assert_eq!(fp.fire(RevokeLiveLeader, 9).now_or_never(), Some(()));
        assert_eq!(fp.status(RevokeLiveLeader), status(false, &[9]));
    }
}
