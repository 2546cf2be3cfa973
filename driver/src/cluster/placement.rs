//! Task placement: a pure function from the free slots of each executor to
//! the executor that each pending task goes to. Tasks go, in queue order,
//! to the executor they prefer when it has a free slot (state affinity: a
//! reduce task goes where its partition's state is held), and otherwise to
//! the executor with the most free slots (ties: fewest running tasks, then
//! the lowest key), which spreads a batch across the cluster.

/// One executor as placement sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    pub key: u64,
    pub slots: u32,
    pub running: u32,
}

/// Returns the executor key for each of the first pending tasks that can
/// be placed now, given each task's preferred executor. Fewer entries than
/// `prefer` means the rest wait.
pub fn place(prefer: &[Option<u64>], executors: &[Capacity]) -> Vec<u64> {
    let mut load: Vec<Capacity> = executors.to_vec();
    let mut out = Vec::with_capacity(prefer.len());
    for want in prefer {
        let preferred =
            want.and_then(|k| load.iter().position(|c| c.key == k && c.running < c.slots));
        if let Some(i) = preferred {
            load[i].running += 1;
            out.push(load[i].key);
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
        match best {
            Some(c) => {
                c.running += 1;
                out.push(c.key);
            }
            None => break,
        }
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

    fn any(n: usize) -> Vec<Option<u64>> {
        vec![None; n]
    }

    #[test]
    fn spreads_across_executors() {
        assert_eq!(
            place(&any(4), &[cap(1, 2, 0), cap(2, 2, 0)]),
            vec![1, 2, 1, 2]
        );
    }

    #[test]
    fn never_exceeds_slots() {
        assert_eq!(place(&any(5), &[cap(1, 2, 1), cap(2, 1, 0)]), vec![2, 1]);
        assert!(place(&any(3), &[]).is_empty());
        assert!(place(&any(3), &[cap(1, 2, 2)]).is_empty());
    }

    #[test]
    fn prefers_the_idlest() {
        assert_eq!(place(&any(1), &[cap(1, 4, 3), cap(2, 4, 1)]), vec![2]);
    }

    #[test]
    fn a_task_goes_where_it_prefers_while_that_executor_has_a_slot() {
        let caps = [cap(1, 2, 0), cap(2, 2, 0)];
        assert_eq!(place(&[Some(1), Some(1), None], &caps), vec![1, 1, 2]);
        // The preferred executor is full, or gone: the task goes elsewhere.
        assert_eq!(place(&[Some(1), Some(1), Some(1)], &caps), vec![1, 1, 2]);
        assert_eq!(place(&[Some(9)], &caps), vec![1]);
    }
}
