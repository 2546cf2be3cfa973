//! The UI's server-sent events. Each second a stream sends `overview`;
//! a query's stream also sends `query` (its detail) and `progress` (the
//! records committed since the last message; the first holds the whole
//! retained history, with `reset`). An `error` event says why the stream
//! ends: the credentials no longer pass, or the query is gone.
//!
//! ```text
//!  tick ─► access? ─► overview ─► [query detail] ─► [progress after last sent] ─► events
//! ```
//! Invariant: every stream ends when the server shuts down, so that an
//! open page never holds the driver's graceful shutdown.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, KeepAliveStream, Sse};
use futures::stream::BoxStream;
use futures::{StreamExt, stream};
use serde::Serialize;
use tokio::time::{Interval, MissedTickBehavior};

use super::{Ui, view};
use crate::auth::Role;

/// How often a stream sends.
const PERIOD: Duration = Duration::from_secs(1);
/// How long a new leader's first message waits for the stored history.
const HISTORY_WAIT: Duration = Duration::from_secs(10);

type Events = Sse<KeepAliveStream<BoxStream<'static, Result<Event, Infallible>>>>;

pub async fn overview(State(ui): State<Arc<Ui>>, headers: HeaderMap) -> Events {
    stream(ui, headers, None)
}

pub async fn query(
    State(ui): State<Arc<Ui>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Events {
    stream(ui, headers, Some(name))
}

/// One stream's position.
struct Feed {
    ui: Arc<Ui>,
    headers: HeaderMap,
    query: Option<String>,
    /// The last batch sent, and whether the history was sent at all.
    last: Option<u64>,
    started: bool,
    tick: Interval,
    done: bool,
}

fn stream(ui: Arc<Ui>, headers: HeaderMap, query: Option<String>) -> Events {
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let shutdown = ui.shutdown.clone().cancelled_owned();
    let feed = Feed {
        ui,
        headers,
        query,
        last: None,
        started: false,
        tick,
        done: false,
    };
    let events = stream::unfold(feed, |mut f| async move {
        if f.done {
            return None;
        }
        f.tick.tick().await;
        let events = f.next().await;
        Some((stream::iter(events.into_iter().map(Ok)), f))
    })
    .flatten()
    .take_until(shutdown);
    Sse::new(events.boxed()).keep_alive(KeepAlive::default())
}

impl Feed {
    /// The events of one tick.
    async fn next(&mut self) -> Vec<Event> {
        let role = match self.ui.access(&self.headers, Role::Viewer) {
            Ok(role) => role,
            Err(e) => return self.end(&e.to_string()),
        };
        let mut out = vec![event("overview", &self.ui.overview(role).await)];
        let Some(name) = self.query.clone() else {
            return out;
        };
        let Ok(term) = self.ui.driver.ready_term() else {
            // A standby, or a leader still loading: the overview says which.
            return out;
        };
        let entry = match term.queries.find(&name) {
            Ok(entry) => entry,
            Err(e) => {
                out.extend(self.end(&e.to_string()));
                return out;
            }
        };
        if !self.started {
            let _ = tokio::time::timeout(HISTORY_WAIT, entry.restored()).await;
        }
        let records = entry.progress_after(self.last);
        out.push(event(
            "query",
            &view::detail(&entry, entry.last_progress().as_ref()),
        ));
        if !self.started || !records.is_empty() {
            let update = view::ProgressUpdate {
                query: name,
                reset: !self.started,
                records: view::records(&records),
            };
            self.started = true;
            self.last = records.last().map(|p| p.batch_id).or(self.last);
            out.push(event("progress", &update));
        }
        out
    }

    fn end(&mut self, why: &str) -> Vec<Event> {
        self.done = true;
        vec![event("error", &serde_json::json!({ "error": why }))]
    }
}

fn event(name: &str, data: &impl Serialize) -> Event {
    // Plain view structs always serialize (serde_json writes NaN as null).
    let data = serde_json::to_string(data).expect("the UI views serialize");
    Event::default().event(name).data(data)
}
