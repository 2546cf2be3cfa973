//! Retention: what a query's checkpoint no longer needs, deleted in
//! the background every ten batches, never on a batch's critical path.
//!
//! - `offsets/N` and `commits/N` older than the last `retain_batches`;
//! - `progress/N` older than the last `PROGRESS_RETAINED` batches;
//! - state files that no version from the oldest retained batch on needs
//!   to be rebuilt (see `sluice_common::state::expired`), and the files of
//!   state generations before a rescale once the new one stands alone
//!   (`sluice_common::state::standalone`);
//! - shuffle files of committed batches that a crash left behind.
//!
//! What a sink no longer needs is its own (`crate::sink::Committer::after_commit`).

use sluice_common::checkpoint::PROGRESS_RETAINED;
use tracing::warn;

use super::ctx::Ctx;

/// After batch `committed` commits: starts the purges that are due.
pub fn after_commit(ctx: &Ctx, committed: u64) {
    let retain = ctx.query.driver.config.retain_batches;
    if !committed.is_multiple_of(10) {
        return;
    }
    let qc = ctx.query.qc.clone();
    let keep_from = (committed + 1).saturating_sub(retain);
    let stateful = ctx.stateful.clone();
    ctx.query.term.tasks.spawn(async move {
        if keep_from > 0
            && let Err(e) = qc.purge_before(keep_from).await
        {
            warn!(error = %e, keep_from, "purging old batches failed; will try again later");
        }
        let progress_from = (committed + 1).saturating_sub(PROGRESS_RETAINED as u64);
        if progress_from > 0
            && let Err(e) = qc.purge_progress_before(progress_from).await
        {
            warn!(error = %e, progress_from, "purging old progress failed; will try again later");
        }
        let Some(stateful) = stateful else { return };
        let purged = async {
            let store = &stateful.store;
            let began = stateful.rescales.last();
            for op in &stateful.ops {
                for p in store.partitions(&op.name).await? {
                    store.retain(&op.name, p, keep_from).await?;
                }
                if let Some(rescale) = began {
                    store
                        .retain_generations(&op.name, rescale, keep_from)
                        .await?;
                }
            }
            for b in store.shuffled_batches().await? {
                if b <= committed {
                    store.remove_shuffle(b).await?;
                }
            }
            Ok::<_, sluice_common::Error>(())
        };
        if let Err(e) = purged.await {
            warn!(error = %e, keep_from, "purging old state failed; will try again later");
        }
    });
}
