//! How a file source's batch is cut into tasks: a pure function of the
//! files and the limits, recorded in `offsets/N` (so a replay never cuts
//! again).
//!
//! ```text
//!  files (name order) ─► pieces (a file larger than the target is cut
//!                        into byte ranges of `target`) ─► tasks (pieces
//!                        packed in order while the task stays within
//!                        `target`; each piece weighs its bytes + OPEN_COST)
//!  target = min(max_bytes_per_task, max(OPEN_COST, Σ(size + OPEN_COST) / parallelism))
//! ```
//!
//! As in Spark, small files share a task and a large one is spread over
//! several, so that every executor slot gets work. A jsonl or csv range is
//! realigned to line boundaries by its reader; a parquet range reads the
//! row groups whose middle lies in it.

use sluice_common::checkpoint::{FileRange, SourceFile};

/// What opening a file costs, in bytes of reading (Spark's default).
pub const OPEN_COST: u64 = 4 << 20;

/// The tasks of a batch over `files`: each a list of ranges. An empty file
/// is in no task.
pub fn split(
    files: &[SourceFile],
    max_bytes_per_task: u64,
    parallelism: u32,
) -> Vec<Vec<FileRange>> {
    let total: u64 = files.iter().map(|f| f.size.saturating_add(OPEN_COST)).sum();
    let per_slot = total.div_ceil(u64::from(parallelism.max(1)));
    let target = max_bytes_per_task.min(OPEN_COST.max(per_slot)).max(1);
    let mut tasks = Vec::new();
    let mut current: Vec<FileRange> = Vec::new();
    let mut weight = 0u64;
    for (i, f) in files.iter().enumerate() {
        let mut start = 0;
        while start < f.size {
            let end = f.size.min(start.saturating_add(target));
            if !current.is_empty() && weight.saturating_add(end - start) > target {
                tasks.push(std::mem::take(&mut current));
                weight = 0;
            }
            current.push(FileRange {
                file: u32::try_from(i).expect("a batch holds at most MAX_FILES_PER_BATCH files"),
                start,
                end,
            });
            weight = weight.saturating_add(end - start + OPEN_COST);
            start = end;
        }
    }
    if !current.is_empty() {
        tasks.push(current);
    }
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(sizes: &[u64]) -> Vec<SourceFile> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| SourceFile {
                path: format!("f{i}"),
                size,
            })
            .collect()
    }

    /// Every byte of every file is in exactly one range, in order.
    fn covers(files: &[SourceFile], tasks: &[Vec<FileRange>]) {
        let ranges: Vec<FileRange> = tasks.iter().flatten().copied().collect();
        let mut at = (0u32, 0u64);
        for r in &ranges {
            while files[at.0 as usize].size == at.1 && at.1 > 0 || files[at.0 as usize].size == 0 {
                at = (at.0 + 1, 0);
            }
            assert_eq!((r.file, r.start), at, "{ranges:?}");
            at = (r.file, r.end);
        }
        let last = files.iter().rposition(|f| f.size > 0);
        assert_eq!(
            last.map(|l| (l as u32, files[l].size)),
            ranges.last().map(|r| (r.file, r.end))
        );
    }

    #[test]
    fn small_files_share_a_task() {
        let f = files(&[100, 200, 300]);
        let t = split(&f, 64 << 20, 1);
        assert_eq!(t.len(), 1);
        // With more slots than files, each file is a task of its own.
        assert_eq!(split(&f, 64 << 20, 8).len(), 3);
        covers(&f, &t);
    }

    #[test]
    fn a_large_file_is_cut_into_ranges_of_the_cap() {
        let f = files(&[2500]);
        let t = split(&f, 1000, 8);
        assert_eq!(
            t.iter()
                .flatten()
                .map(|r| (r.start, r.end))
                .collect::<Vec<_>>(),
            vec![(0, 1000), (1000, 2000), (2000, 2500)]
        );
        assert_eq!(t.len(), 3);
        covers(&f, &t);
    }

    #[test]
    fn work_is_spread_over_the_slots() {
        let f = files(&[100 << 20, 100 << 20]);
        let t = split(&f, 1 << 30, 8);
        // 200 MiB over 8 slots: tasks of 25 MiB.
        assert_eq!(t.len(), 8);
        covers(&f, &t);
    }

    #[test]
    fn empty_files_are_in_no_task_and_the_cut_is_deterministic() {
        let f = files(&[0, 10, 0, 5000, 7, 0]);
        let t = split(&f, 1000, 3);
        covers(&f, &t);
        assert_eq!(t, split(&f, 1000, 3));
        assert!(
            t.iter()
                .flatten()
                .all(|r| r.file != 0 && r.file != 2 && r.file != 5)
        );
        assert!(split(&files(&[0, 0]), 1000, 3).is_empty());
    }
}
