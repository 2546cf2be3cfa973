//! The batch loop of one query: from its checkpoint to each batch's
//! `commits/N`, under one leader's term. The control side (submit, stop,
//! restart, the registry of queries) is [`crate::query`]'s; this side
//! reads its query's spec and checkpoint and writes its batches.
//!
//! ```text
//!  runner ─► resume ─► plan N (offsets/N) ─► batch::execute ─► protocol::commit ─┬─ stages ─► attempts (tasks on executors)
//!                                                                                ├─ outcome (reports summed and checked)
//!                                                                                ├─ sink commit ─► commits/N ─► progress/N
//!                                                                                └─ retention (background)
//! ```
//!
//! Everything the loop works with is built once, in [`ctx::Ctx`], before
//! its first batch. Its commit rules (resume, replay, abandon, prepared
//! batches, adoption) are [`protocol`]'s, over narrow seams in front of the
//! checkpoint, the scheduler and the sink, and unit-tested there.

pub mod attempts;
pub mod batch;
pub mod ctx;
mod log;
pub mod outcome;
pub mod protocol;
pub mod retention;
pub mod retry;
pub mod runner;
pub mod stages;
pub mod summary;
