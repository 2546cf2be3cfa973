//! The names a user reads an aggregation's state by (`sluice state`): the
//! query's own names for its group keys and aggregates, as its output
//! (and so its sink) names them, rather than the engine's expressions.
//!
//! ```text
//!  state row:  input.value % Int64(5) │ count(Int64(1))[count] │ avg(input.value)[count] │ avg(input.value)[sum]
//!  SELECT value % 5 AS k, count(*) AS n, avg(value) AS a ... GROUP BY value % 5
//!  named:      k                      │ n                      │ a[count]                │ a[sum]
//! ```
//!
//! An aggregate with one state column takes the query's name; one with
//! several (`avg` keeps a count and a sum) takes it with each column's
//! suffix. A column the query does not name as it is (a key left out of
//! the SELECT, an aggregate only inside an expression) keeps the engine's
//! name, and so does a name that would be another column's too.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_schema::Schema;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::projection::ProjectionExec;

/// The names of the columns of `state` (the key columns, `keys` of them,
/// then the states of `aggregates`, in order), by the aliases of the
/// projection nearest above the aggregation `node` in `root`.
pub(crate) fn of_state(
    root: &Arc<dyn ExecutionPlan>,
    node: &Arc<dyn ExecutionPlan>,
    state: &Schema,
    keys: usize,
    aggregates: &[Arc<AggregateFunctionExpr>],
) -> Vec<String> {
    let engine: Vec<String> = state.fields().iter().map(|f| f.name().clone()).collect();
    let aliases = aliases(root, node);
    let alias = |name: &str| aliases.get(name).cloned();
    let mut names: Vec<Option<String>> = engine[..keys.min(engine.len())]
        .iter()
        .map(|n| alias(n))
        .collect();
    for a in aggregates {
        let Ok(fields) = a.state_fields() else {
            return engine;
        };
        let named = alias(a.name());
        for f in &fields {
            let suffix = f.name().strip_prefix(a.name()).unwrap_or(f.name());
            names.push(match (&named, fields.len()) {
                (Some(n), 1) => Some(n.clone()),
                (Some(n), _) => Some(format!("{n}{suffix}")),
                (None, _) => None,
            });
        }
    }
    if names.len() != engine.len() {
        return engine;
    }
    unique(names, engine)
}

/// Each name, or the engine's where there is none or it would be a
/// second column's; the engine's names alone if those collide too.
fn unique(names: Vec<Option<String>>, engine: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    let chosen: Vec<String> = names
        .into_iter()
        .zip(&engine)
        .map(|(n, e)| match n {
            Some(n) if !engine.contains(&n) && seen.insert(n.clone()) => n,
            _ => e.clone(),
        })
        .collect();
    let distinct: HashSet<&String> = chosen.iter().collect();
    match distinct.len() == chosen.len() {
        true => chosen,
        false => engine,
    }
}

/// The aliases that the projection nearest above `node` in `root` gives
/// the columns it passes as they are: column name to alias.
fn aliases(
    root: &Arc<dyn ExecutionPlan>,
    node: &Arc<dyn ExecutionPlan>,
) -> HashMap<String, String> {
    let mut found = HashMap::new();
    let Some(path) = path(root, node) else {
        return found;
    };
    let projection = path
        .iter()
        .rev()
        .find_map(|n| n.downcast_ref::<ProjectionExec>());
    for p in projection.map(|p| p.expr()).unwrap_or_default() {
        if let Some(c) = p.expr.downcast_ref::<Column>()
            && c.name() != p.alias
        {
            found
                .entry(c.name().to_string())
                .or_insert_with(|| p.alias.clone());
        }
    }
    found
}

/// The nodes from `root` down to `node`, `node` excluded; `None` when
/// `node` is not in `root`.
fn path(
    root: &Arc<dyn ExecutionPlan>,
    node: &Arc<dyn ExecutionPlan>,
) -> Option<Vec<Arc<dyn ExecutionPlan>>> {
    if Arc::ptr_eq(root, node) {
        return Some(Vec::new());
    }
    root.children().into_iter().find_map(|child| {
        let mut below = path(child, node)?;
        below.insert(0, root.clone());
        Some(below)
    })
}

#[cfg(test)]
mod tests {
    use super::unique;

    fn some(names: &[Option<&str>]) -> Vec<Option<String>> {
        names.iter().map(|n| n.map(str::to_string)).collect()
    }

    fn strings(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_name_taken_twice_keeps_the_engines() {
        let engine = strings(&["a + 1", "count(x)"]);
        assert_eq!(
            unique(some(&[Some("k"), Some("n")]), engine.clone()),
            ["k", "n"]
        );
        assert_eq!(
            unique(some(&[Some("k"), None]), engine.clone()),
            ["k", "count(x)"]
        );
        assert_eq!(
            unique(some(&[Some("k"), Some("k")]), engine.clone()),
            ["k", "count(x)"]
        );
        // A name that is another column's engine name.
        assert_eq!(
            unique(some(&[Some("count(x)"), Some("n")]), engine.clone()),
            ["a + 1", "n"]
        );
    }
}
