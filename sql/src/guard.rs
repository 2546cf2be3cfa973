//! The bounds on planning a query's SQL, and the thread that plans it.
//!
//! ```text
//!  sql ─► tokens ≤ MAX_TOKENS ─► parse ─► nesting ≤ MAX_DEPTH ─► plan      (on a planning thread)
//!  caller ─► permit (≤ budget) ─► planning thread ─► result | budget spent (≤ budget)
//! ```
//!
//! DataFusion plans recursively, and the parser turns an operator chain
//! (`a + 1 + 1 …`, `x = 0 OR x = 1 OR …`) into a tree as deep as the chain
//! is long, without recursing itself. So the depth is bounded before any
//! recursive code sees the tree, and planning runs on a thread whose stack
//! holds what the bounds let through ([`STACK_BYTES`]), not on the
//! caller's: the driver's and the executor's other work runs meanwhile.
//!
//! Invariants:
//! - A query with more than [`MAX_TOKENS`] tokens or expressions nested
//!   deeper than [`MAX_DEPTH`] is refused before it is planned, naming the
//!   limit ([`SqlError::TooLarge`]).
//! - Planning that outlives its budget is refused, naming the budget; the
//!   thread runs on until it ends, holding one of [`planners`] permits, so
//!   runaway planning takes at most that many threads.

use std::ops::ControlFlow;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use datafusion::sql::parser::Statement;
use datafusion::sql::sqlparser::ast::{Expr, Visit, Visitor};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use tokio::sync::Semaphore;

use crate::SqlError;

/// The most tokens (names, literals, operators, punctuation) of a query.
pub const MAX_TOKENS: usize = 100_000;

/// The deepest nesting of expressions in a query: an operator chain of
/// this many terms, or calls nested this deep.
pub const MAX_DEPTH: usize = 1_000;

/// The stack of a planning thread. Reserved, not committed: only the pages
/// that deep plans touch are used.
pub const STACK_BYTES: usize = 256 << 20;

/// The stack that running a planned query needs: DataFusion evaluates an
/// expression recursively, as deep as it nests ([`MAX_DEPTH`]). A process
/// that runs queries gives its threads at least this much.
pub const RUN_STACK_BYTES: usize = 32 << 20;

/// How long a query may take to plan unless configured otherwise.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(10);

/// The budget of `ms` milliseconds; 0 (unset) is [`DEFAULT_BUDGET`].
pub fn budget_ms(ms: u64) -> Duration {
    match ms {
        0 => DEFAULT_BUDGET,
        ms => Duration::from_millis(ms),
    }
}

/// Planning threads that may run at once: each caller waits for one.
fn planners() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    (2 * cores).max(4)
}

static PERMITS: LazyLock<Arc<Semaphore>> = LazyLock::new(|| Arc::new(Semaphore::new(planners())));

/// Runs `plan` on a planning thread, within `budget`: the wait for a
/// thread and the planning together.
pub(crate) async fn on_planning_thread<T: Send + 'static>(
    budget: Duration,
    plan: impl FnOnce() -> Result<T, SqlError> + Send + 'static,
) -> Result<T, SqlError> {
    let started = Instant::now();
    let permit = tokio::time::timeout(budget, PERMITS.clone().acquire_owned())
        .await
        .map_err(|_| {
            SqlError::Busy(format!(
                "all {} planning threads stayed busy for the planning budget of {budget:?}",
                planners()
            ))
        })?
        .expect("the planning semaphore is never closed");
    let (tx, rx) = tokio::sync::oneshot::channel();
    let runtime = tokio::runtime::Handle::current();
    std::thread::Builder::new()
        .name("sql-plan".into())
        .stack_size(STACK_BYTES)
        .spawn(move || {
            let _permit = permit;
            let _entered = runtime.enter();
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(plan))
                .unwrap_or_else(|p| Err(SqlError::Panicked(panic_message(&p))));
            if tx.send(result).is_err() {
                tracing::warn!(
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "a query finished planning after its budget; its plan is dropped"
                );
            }
        })
        .map_err(|e| SqlError::Busy(format!("cannot start a planning thread: {e}")))?;
    let left = budget.saturating_sub(started.elapsed());
    match tokio::time::timeout(left, rx).await {
        Ok(result) => result.expect("a planning thread sends its result before it ends"),
        Err(_) => Err(SqlError::TooLarge(format!(
            "planning took longer than the planning budget of {budget:?}"
        ))),
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Refuses a query with more than [`MAX_TOKENS`] tokens. A query that
/// does not tokenize is left to the parser, which names the error.
pub(crate) fn check_tokens(sql: &str) -> Result<(), SqlError> {
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, sql).tokenize() else {
        return Ok(());
    };
    let n = tokens
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .count();
    if n > MAX_TOKENS {
        return Err(SqlError::TooLarge(format!(
            "the query has {n} tokens; Sluice plans at most {MAX_TOKENS}"
        )));
    }
    Ok(())
}

/// Refuses a statement whose expressions nest deeper than [`MAX_DEPTH`].
/// The walk stops at the first level past it, so its own recursion is
/// bounded too.
pub(crate) fn check_depth(statement: &Statement) -> Result<(), SqlError> {
    let mut depth = Depth(0);
    let deep = match statement {
        Statement::Statement(s) => s.visit(&mut depth).is_break(),
        Statement::Explain(e) => return check_depth(&e.statement),
        _ => false,
    };
    if deep {
        return Err(SqlError::TooLarge(format!(
            "expressions nest deeper than {MAX_DEPTH} levels (a chain of more than {MAX_DEPTH} \
             operators, or calls nested that deep); write a long OR of equalities as IN (...)"
        )));
    }
    Ok(())
}

/// The current nesting of the expression walk.
struct Depth(usize);

impl Visitor for Depth {
    type Break = ();

    fn pre_visit_expr(&mut self, _: &Expr) -> ControlFlow<()> {
        self.0 += 1;
        if self.0 > MAX_DEPTH {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, _: &Expr) -> ControlFlow<()> {
        self.0 -= 1;
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests;
