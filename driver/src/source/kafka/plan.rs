//! Planning a Kafka batch: a pure function of where each partition stands
//! now, where the last batch left it, and the caps.
//!
//! ```text
//!  per partition:  position = previous batch's end
//!                           | the query's starting offset (no batch yet)
//!                           | earliest (a partition seen for the first time)
//!                  position < earliest  ─► records gone:   fail | skip to earliest
//!                  position > latest    ─► partition went back: fail | restart at earliest
//!                  end = min(latest, start + max_records_per_partition)
//!  then:           max_rows_per_batch splits the total in proportion to each backlog
//! ```
//!
//! Invariant: a range starts where the partition's previous range ended,
//! unless it records that end in `previous_end` (a loss the spec accepts).

use std::collections::BTreeMap;

use sluice_common::checkpoint::KafkaRange;

/// A partition as the broker describes it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub topic: String,
    pub partition: i32,
    pub earliest: i64,
    pub latest: i64,
}

/// Everything a plan depends on.
#[derive(Debug, Clone)]
pub struct PlanInput<'a> {
    /// Every partition of the source's topics, now.
    pub observed: &'a [Observed],
    /// The ranges of the last committed batch; `None` before the first.
    pub committed: Option<&'a [KafkaRange]>,
    /// Where a query with no batch yet starts, by partition (resolved
    /// when it was submitted).
    pub initial: &'a BTreeMap<(String, i32), i64>,
    pub max_records_per_partition: Option<u64>,
    pub max_rows_per_batch: Option<u64>,
    pub fail_on_data_loss: bool,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Planned {
    /// Run a batch over these ranges (every observed partition, in order).
    Batch(Vec<KafkaRange>),
    /// Nothing new in any partition.
    Nothing,
    /// Records the query has not read are gone, and the spec says to fail.
    DataLoss(String),
}

/// Plans the next batch.
pub fn plan(input: &PlanInput<'_>) -> Planned {
    let previous: BTreeMap<(&str, i32), i64> = input
        .committed
        .unwrap_or_default()
        .iter()
        .map(|r| ((r.topic.as_str(), r.partition), r.end))
        .collect();
    let mut ranges = Vec::with_capacity(input.observed.len());
    for o in input.observed {
        let key = (o.topic.as_str(), o.partition);
        // Where the last batch that listed the partition ended, else where
        // the query starts in it, else (a partition new since submit) its
        // earliest offset.
        let position = previous
            .get(&key)
            .or_else(|| input.initial.get(&(o.topic.clone(), o.partition)))
            .copied()
            .unwrap_or(o.earliest);
        let at = format!("topic {:?} partition {}", o.topic, o.partition);
        let (start, previous_end) = if position < o.earliest {
            if input.fail_on_data_loss {
                return Planned::DataLoss(format!(
                    "{at}: offsets {position}..{} are gone (the earliest kept is {}); \
                     the query had read up to {position}. Set fail_on_data_loss: false to skip them",
                    o.earliest, o.earliest
                ));
            }
            (o.earliest, Some(position))
        } else if position > o.latest {
            if input.fail_on_data_loss {
                return Planned::DataLoss(format!(
                    "{at}: its latest offset is {}, below offset {position} that the query had \
                     read up to (the topic was recreated or truncated). Set fail_on_data_loss: \
                     false to read it again from its earliest offset {}",
                    o.latest, o.earliest
                ));
            }
            (o.earliest, Some(position))
        } else {
            (position, None)
        };
        let cap = input.max_records_per_partition.unwrap_or(u64::MAX);
        let room = u64::try_from(o.latest - start).unwrap_or(0).min(cap);
        ranges.push(KafkaRange {
            topic: o.topic.clone(),
            partition: o.partition,
            start,
            end: start + room as i64,
            latest: o.latest,
            previous_end,
        });
    }
    if let Some(total) = input.max_rows_per_batch {
        share(&mut ranges, total);
    }
    let news = ranges
        .iter()
        .any(|r| r.end > r.start || r.previous_end.is_some());
    if news {
        Planned::Batch(ranges)
    } else {
        Planned::Nothing
    }
}

/// Cuts the ranges to `total` records in all, each in proportion to its
/// length (as Spark's `maxOffsetsPerTrigger`); what rounding leaves goes
/// to the first ranges with room.
fn share(ranges: &mut [KafkaRange], total: u64) {
    let lens: Vec<u64> = ranges.iter().map(|r| (r.end - r.start) as u64).collect();
    let sum: u64 = lens.iter().sum();
    if sum <= total {
        return;
    }
    let mut given = 0u64;
    let mut take: Vec<u64> = lens
        .iter()
        .map(|&l| {
            let t = (u128::from(l) * u128::from(total) / u128::from(sum)) as u64;
            given += t;
            t
        })
        .collect();
    for (t, &l) in take.iter_mut().zip(&lens) {
        if given >= total {
            break;
        }
        let extra = (l - *t).min(total - given);
        *t += extra;
        given += extra;
    }
    for (r, t) in ranges.iter_mut().zip(take) {
        r.end = r.start + t as i64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(p: i32, earliest: i64, latest: i64) -> Observed {
        Observed {
            topic: "t".into(),
            partition: p,
            earliest,
            latest,
        }
    }

    fn range(p: i32, start: i64, end: i64, latest: i64) -> KafkaRange {
        KafkaRange {
            topic: "t".into(),
            partition: p,
            start,
            end,
            latest,
            previous_end: None,
        }
    }

    fn input<'a>(
        observed: &'a [Observed],
        committed: Option<&'a [KafkaRange]>,
        initial: &'a BTreeMap<(String, i32), i64>,
    ) -> PlanInput<'a> {
        PlanInput {
            observed,
            committed,
            initial,
            max_records_per_partition: None,
            max_rows_per_batch: None,
            fail_on_data_loss: true,
        }
    }

    fn batch(p: Planned) -> Vec<KafkaRange> {
        match p {
            Planned::Batch(r) => r,
            other => panic!("expected a batch, got {other:?}"),
        }
    }

    #[test]
    fn first_batch_starts_at_the_starting_offsets_then_at_the_last_end() {
        let initial = [(("t".to_string(), 0), 5), (("t".to_string(), 1), 0)].into();
        let observed = [obs(0, 0, 10), obs(1, 0, 3)];
        let first = batch(plan(&input(&observed, None, &initial)));
        assert_eq!(first, vec![range(0, 5, 10, 10), range(1, 0, 3, 3)]);
        // After a batch, the starting offsets no longer matter.
        let observed = [obs(0, 0, 12), obs(1, 0, 3)];
        let next = batch(plan(&input(&observed, Some(&first), &initial)));
        assert_eq!(next, vec![range(0, 10, 12, 12), range(1, 3, 3, 3)]);
        let idle = [obs(0, 0, 12), obs(1, 0, 3)];
        assert_eq!(plan(&input(&idle, Some(&next), &initial)), Planned::Nothing);
    }

    #[test]
    fn a_new_partition_starts_at_its_earliest() {
        let initial = BTreeMap::new();
        let committed = [range(0, 0, 4, 4)];
        let observed = [obs(0, 0, 4), obs(1, 2, 7)];
        let next = batch(plan(&input(&observed, Some(&committed), &initial)));
        assert_eq!(next[1], range(1, 2, 7, 7));
    }

    #[test]
    fn caps_per_partition_and_per_batch() {
        let initial = BTreeMap::new();
        let observed = [obs(0, 0, 1000), obs(1, 0, 100), obs(2, 0, 0)];
        let mut i = input(&observed, None, &initial);
        i.max_records_per_partition = Some(300);
        let r = batch(plan(&i));
        assert_eq!((r[0].end, r[1].end, r[2].end), (300, 100, 0));
        i.max_rows_per_batch = Some(100);
        let r = batch(plan(&i));
        // 300:100 shared out as 75:25.
        assert_eq!((r[0].end, r[1].end, r[2].end), (75, 25, 0));
        i.max_rows_per_batch = Some(7);
        let r = batch(plan(&i));
        assert_eq!(r.iter().map(|r| r.end - r.start).sum::<i64>(), 7);
    }

    #[test]
    fn records_gone_fail_or_are_skipped_and_recorded() {
        let initial = BTreeMap::new();
        let committed = [range(0, 0, 10, 10)];
        let observed = [obs(0, 25, 40)];
        let mut i = input(&observed, Some(&committed), &initial);
        let Planned::DataLoss(why) = plan(&i) else {
            panic!("expected data loss")
        };
        assert!(
            why.contains("\"t\" partition 0") && why.contains("10..25"),
            "{why}"
        );
        i.fail_on_data_loss = false;
        let r = batch(plan(&i));
        assert_eq!(
            (r[0].start, r[0].end, r[0].previous_end),
            (25, 40, Some(10))
        );
        assert_eq!(r[0].lost(), 15);
    }

    #[test]
    fn a_partition_that_went_back_fails_or_restarts_at_earliest() {
        let initial = BTreeMap::new();
        let committed = [range(0, 0, 100, 100)];
        let observed = [obs(0, 0, 30)];
        let mut i = input(&observed, Some(&committed), &initial);
        let Planned::DataLoss(why) = plan(&i) else {
            panic!("expected data loss")
        };
        assert!(
            why.contains("latest offset is 30") && why.contains("100"),
            "{why}"
        );
        i.fail_on_data_loss = false;
        let r = batch(plan(&i));
        assert_eq!(
            (r[0].start, r[0].end, r[0].previous_end),
            (0, 30, Some(100))
        );
        assert_eq!(r[0].lost(), 0);
    }
}
