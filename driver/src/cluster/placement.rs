//! Task placement: a pure function from the free slots of each executor to
//! the executor that each pending task goes to. Tasks go, in queue order,
//! to the executor with the most free slots (ties: fewest running tasks,
//! then the lowest key), which spreads a batch across the cluster.

/// One executor as placement sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    pub key: u64,
    pub slots: u32,
    pub running: u32,
}

/// Returns the executor key for each of the first `pending` tasks that can
/// be placed now. Fewer than `pending` entries means the rest wait.
pub fn place(pending: usize, executors: &[Capacity]) -> Vec<u64> {
    let mut load: Vec<Capacity> = executors.to_vec();
    let mut out = Vec::with_capacity(pending);
    for _ in 0..pending {
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

    #[test]
    fn spreads_across_executors() {
        assert_eq!(place(4, &[cap(1, 2, 0), cap(2, 2, 0)]), vec![1, 2, 1, 2]);
    }

    #[test]
    fn never_exceeds_slots() {
        assert_eq!(place(5, &[cap(1, 2, 1), cap(2, 1, 0)]), vec![2, 1]);
        assert!(place(3, &[]).is_empty());
        assert!(place(3, &[cap(1, 2, 2)]).is_empty());
    }

    #[test]
    fn prefers_the_idlest() {
        assert_eq!(place(1, &[cap(1, 4, 3), cap(2, 4, 1)]), vec![2]);
    }
}
