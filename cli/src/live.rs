//! `sluice progress QUERY --follow` on a terminal: one block, redrawn in
//! place at each batch, with the batch, its rates, a sparkline of the
//! recent batch durations, the phases and the state. When stdout is not a
//! terminal, `progress` prints one plain line per batch instead.
//!
//! ```text
//!  batch ─► Live::push ─► Live::render (pure: the block's lines) ─► Screen::draw
//!                                                   (cursor up over the last block, clear, print)
//! ```

use std::collections::VecDeque;
use std::io::Write;

use crossterm::cursor::MoveToPreviousLine;
use crossterm::queue;
use crossterm::terminal::{Clear, ClearType};
use sluice_proto::BatchProgress;

use crate::output::human_bytes;

/// Batches the sparkline spans.
pub const RECENT: usize = 60;
const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// One bar per value, scaled to the largest.
pub fn sparkline(values: &[u64]) -> String {
    let max = values.iter().copied().max().unwrap_or(0);
    values
        .iter()
        .map(|&v| match max {
            0 => BARS[0],
            _ => BARS[((v.min(max) * 7 + max / 2) / max) as usize],
        })
        .collect()
}

/// `hh:mm:ss.mmm` UTC of a time in ms since the Unix epoch.
/// A watermark as [`clock`] shows it; the batch that ends a bounded
/// query's input has its watermark at the end of time.
fn watermark(ms: i64) -> String {
    if ms == i64::MAX {
        return "end of input".into();
    }
    clock(ms)
}

fn clock(ms: i64) -> String {
    let ms = ms.rem_euclid(86_400_000);
    let (h, m, s) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60);
    format!("{h:02}:{m:02}:{s:02}.{:03} UTC", ms % 1000)
}

/// The recent batches of one query.
#[derive(Debug, Default)]
pub struct Live {
    recent: VecDeque<BatchProgress>,
    skipped: u64,
}

impl Live {
    pub fn push(&mut self, p: &BatchProgress) {
        self.skipped += p.skipped_before;
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(p.clone());
    }

    /// The block's lines, each cut to `width` characters so that none
    /// wraps (the redraw counts lines).
    pub fn render(&self, width: usize) -> Vec<String> {
        let Some(p) = self.recent.back() else {
            return vec!["waiting for the first batch".into()];
        };
        let d = p.duration_ms.unwrap_or_default();
        let totals: Vec<u64> = self
            .recent
            .iter()
            .map(|r| r.duration_ms.unwrap_or_default().total)
            .collect();
        let (min, max) = (
            totals.iter().min().copied().unwrap_or(0),
            totals.iter().max().copied().unwrap_or(0),
        );
        let mut lines = vec![
            format!(
                "{}  batch {}  epoch {}  committed {}",
                p.name,
                p.batch_id,
                p.epoch,
                clock(p.timestamp_ms)
            ),
            format!(
                "rows      {} in the batch   input {:.1} rows/s   processed {:.1} rows/s",
                p.num_input_rows, p.input_rows_per_second, p.processed_rows_per_second
            ),
            format!(
                "duration  {}  last {} ms  min {min} ms  max {max} ms  ({} batches)",
                sparkline(&totals),
                d.total,
                totals.len()
            ),
            format!(
                "phases    offsets {}  wal {}  execution {}  sink {}  commit {} ms{}",
                d.latest_offset,
                d.wal_commit,
                d.execution,
                d.sink_commit,
                d.commit,
                if d.map + d.reduce > 0 {
                    format!("  (map {}, reduce {})", d.map, d.reduce)
                } else {
                    String::new()
                }
            ),
            format!(
                "state     {} rows  {}  watermark {}  late rows {}  bad records {}",
                p.state_rows_total,
                human_bytes(p.state_bytes),
                p.watermark_ms.map_or_else(|| "none".into(), watermark),
                p.rows_dropped_by_watermark,
                p.bad_records
            ),
        ];
        if !p.partitions.is_empty() {
            lines.push(format!(
                "kafka     {}{}",
                crate::output::partitions_text(p),
                if p.records_lost > 0 {
                    format!("  lost {}", p.records_lost)
                } else {
                    String::new()
                }
            ));
        }
        if self.skipped > 0 {
            lines.push(format!(
                "note      {} batches were not shown: the driver no longer held them",
                self.skipped
            ));
        }
        lines
            .into_iter()
            .map(|l| l.chars().take(width).collect())
            .collect()
    }
}

/// A terminal on which the block is redrawn.
pub struct Screen<W: Write> {
    out: W,
    drawn: u16,
}

impl<W: Write> Screen<W> {
    pub fn new(out: W) -> Self {
        Screen { out, drawn: 0 }
    }

    /// Replaces the block drawn last with `lines`.
    pub fn draw(&mut self, lines: &[String]) -> std::io::Result<()> {
        if self.drawn > 0 {
            queue!(self.out, MoveToPreviousLine(self.drawn))?;
        }
        queue!(self.out, Clear(ClearType::FromCursorDown))?;
        for line in lines {
            writeln!(self.out, "{line}")?;
        }
        self.drawn = u16::try_from(lines.len()).unwrap_or(u16::MAX);
        self.out.flush()
    }
}

/// The terminal's width, or 100 columns when it reports none.
pub fn width() -> usize {
    crossterm::terminal::size()
        .ok()
        .map(|(cols, _)| usize::from(cols))
        .filter(|c| *c >= 20)
        .unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_proto::Durations;

    fn batch(id: u64, total: u64) -> BatchProgress {
        BatchProgress {
            name: "q".into(),
            batch_id: id,
            num_input_rows: 500,
            input_rows_per_second: 2000.0,
            processed_rows_per_second: 8000.5,
            duration_ms: Some(Durations {
                total,
                execution: total - 4,
                wal_commit: 2,
                commit: 2,
                map: 10,
                reduce: 5,
                ..Default::default()
            }),
            timestamp_ms: 3_723_004,
            epoch: 2,
            state_rows_total: 40,
            state_bytes: 2048,
            watermark_ms: Some(3_722_000),
            ..Default::default()
        }
    }

    #[test]
    fn a_sparkline_scales_to_the_largest_value() {
        assert_eq!(sparkline(&[]), "");
        assert_eq!(sparkline(&[0, 0]), "▁▁");
        assert_eq!(sparkline(&[0, 50, 100]), "▁▅█");
        assert_eq!(sparkline(&[7]), "█");
    }

    #[test]
    fn the_block_shows_the_batch_rates_durations_phases_and_state() {
        let mut live = Live::default();
        assert_eq!(live.render(80), vec!["waiting for the first batch"]);
        for (i, t) in [10, 40, 20, 80].into_iter().enumerate() {
            live.push(&batch(i as u64, t));
        }
        let lines = live.render(200);
        assert_eq!(lines[0], "q  batch 3  epoch 2  committed 01:02:03.004 UTC");
        assert!(lines[1].contains("500 in the batch") && lines[1].contains("8000.5 rows/s"));
        assert_eq!(
            lines[2],
            "duration  ▂▅▃█  last 80 ms  min 10 ms  max 80 ms  (4 batches)"
        );
        assert!(lines[3].contains("execution 76") && lines[3].contains("(map 10, reduce 5)"));
        assert!(lines[4].starts_with("state     40 rows  2.0 KiB  watermark 01:02:02.000 UTC"));
        assert!(live.render(30).iter().all(|l| l.chars().count() <= 30));
        let mut end = batch(4, 10);
        end.watermark_ms = Some(i64::MAX);
        live.push(&end);
        assert!(live.render(200)[4].contains("watermark end of input"));
    }

    #[test]
    fn the_sparkline_keeps_the_recent_batches() {
        let mut live = Live::default();
        for i in 0..(RECENT as u64 + 25) {
            live.push(&batch(i, 10 + i));
        }
        let lines = live.render(500);
        assert!(
            lines[2].contains(&format!("({RECENT} batches)")),
            "{}",
            lines[2]
        );
        assert!(lines[2].contains("min 35 ms"), "{}", lines[2]);
    }

    #[test]
    fn a_redraw_moves_up_over_the_last_block_and_clears_it() {
        let mut screen = Screen::new(Vec::new());
        screen.draw(&["a".into(), "b".into()]).unwrap();
        screen.draw(&["c".into()]).unwrap();
        let text = String::from_utf8(screen.out).unwrap();
        assert_eq!(text, "\u{1b}[Ja\nb\n\u{1b}[2F\u{1b}[Jc\n");
    }
}
