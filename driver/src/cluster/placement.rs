//! Task placement: a pure function from the free slots of each executor to
//! the executor that each pending task goes to. Tasks go, in queue order,
//! to the executor they prefer when it has a free slot (state affinity: a
//! reduce task goes where its partition's state is held). A task whose
//! preferred executor is busy may wait for it a while (delay scheduling,
//! as Spark's `spark.locality.wait`): a reload of its state costs more
//! than the wait. Otherwise a task goes to the executor with the most free
//! slots (ties: fewest running tasks, then the lowest key), which spreads
//! a batch across the cluster.

/// One executor as placement sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    pub key: u64,
    pub slots: u32,
    pub running: u32,
}

/// What a pending task asks of placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Want {
    /// The executor it prefers (the one that holds its state).
    pub prefer: Option<u64>,
    /// Whether it waits for that executor while it is busy.
    pub wait: bool,
}

/// Returns, for each pending task in order, the executor it goes to now,
/// or `None` when it waits (for its preferred executor, or for any slot).
pub fn place(wants: &[Want], executors: &[Capacity]) -> Vec<Option<u64>> {
    let mut load: Vec<Capacity> = executors.to_vec();
    let mut out = Vec::with_capacity(wants.len());
    for want in wants {
        let preferred = want
            .prefer
            .and_then(|k| load.iter().position(|c| c.key == k && c.running < c.slots));
        if let Some(i) = preferred {
            load[i].running += 1;
            out.push(Some(load[i].key));
            continue;
        }
        let holder_alive = want.prefer.is_some_and(|k| load.iter().any(|c| c.key == k));
        if want.wait && holder_alive {
            out.push(None);
            continue;
        }
        let best = load
            .iter_mut()
            .filter(|c| c.running < c.slots)
            .max_by(|a, b| {
                (a.slots - a.running)
                    .cmp(&(b.slots - b.running))
                    .then(b.running.cmp(&a.running))
                    .then(b.key.cmp(&a.key))
            });
        out.push(best.map(|c| {
            c.running += 1;
            c.key
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(key: u64, slots: u32, running: u32) -> Capacity {
        Capacity {
            key,
            slots,
            running,
        }
    }

    fn any(n: usize) -> Vec<Want> {
        vec![Want::default(); n]
    }

    fn placed(out: Vec<Option<u64>>) -> Vec<u64> {
        out.into_iter().flatten().collect()
    }

    fn on(k: u64, wait: bool) -> Want {
        Want {
            prefer: Some(k),
            wait,
        }
    }

    #[test]
    fn spreads_across_executors() {
        assert_eq!(
            placed(place(&any(4), &[cap(1, 2, 0), cap(2, 2, 0)])),
            vec![1, 2, 1, 2]
        );
    }

    #[test]
    fn never_exceeds_slots() {
        assert_eq!(
            place(&any(3), &[cap(1, 2, 1), cap(2, 1, 0)]),
            vec![Some(2), Some(1), None]
        );
        assert!(placed(place(&any(3), &[])).is_empty());
        assert!(placed(place(&any(3), &[cap(1, 2, 2)])).is_empty());
    }

    #[test]
    fn prefers_the_idlest() {
        assert_eq!(place(&any(1), &[cap(1, 4, 3), cap(2, 4, 1)]), vec![Some(2)]);
    }

    #[test]
    fn a_task_goes_where_it_prefers_while_that_executor_has_a_slot() {
        let caps = [cap(1, 2, 0), cap(2, 2, 0)];
        let wants = [on(1, false), on(1, false), Want::default()];
        assert_eq!(place(&wants, &caps), vec![Some(1), Some(1), Some(2)]);
        // The preferred executor is full, or gone: the task goes elsewhere.
        let wants = [on(1, false), on(1, false), on(1, false)];
        assert_eq!(place(&wants, &caps), vec![Some(1), Some(1), Some(2)]);
        assert_eq!(place(&[on(9, true)], &caps), vec![Some(1)]);
    }

    #[test]
    fn a_task_that_may_wait_waits_for_its_busy_executor_and_others_pass_it() {
        let caps = [cap(1, 1, 1), cap(2, 2, 0)];
        let wants = [on(1, true), Want::default(), on(1, false)];
        assert_eq!(place(&wants, &caps), vec![None, Some(2), Some(2)]);
    }
}
