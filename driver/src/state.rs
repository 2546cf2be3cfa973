//! Process-wide driver state and the leader term.
//!
//! A [`Driver`] lives as long as the process. A [`Term`] lives as long as
//! this driver leads with one epoch: it owns the scheduler, the queries and
//! every task they spawned, all under one cancellation token. Losing the
//! leadership cancels the term, which stops dispatching and committing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sluice_common::checkpoint::Checkpoint;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

use crate::cluster::scheduler::Scheduler;
use crate::config::DriverConfig;
use crate::error::DriverError;
use crate::leader::leadership::Leadership;
use crate::metrics::Metrics;
use crate::query::registry::Queries;

/// What this driver is doing now.
#[derive(Clone)]
pub enum Role {
    Starting,
    Leader(Arc<Term>),
    /// Following the leader at `leader` (its gRPC address), whose web UI
    /// is at `leader_ui`, when known.
    Standby {
        leader: Option<String>,
        leader_ui: Option<String>,
    },
}

impl Role {
    /// A standby that does not know the leader.
    pub fn standby() -> Role {
        Role::Standby {
            leader: None,
            leader_ui: None,
        }
    }
}

pub struct Driver {
    pub config: DriverConfig,
    pub checkpoint: Checkpoint,
    pub metrics: Metrics,
    role: watch::Sender<Role>,
}

impl Driver {
    pub fn new(config: DriverConfig, checkpoint: Checkpoint, metrics: Metrics) -> Self {
        Driver {
            config,
            checkpoint,
            metrics,
            role: watch::Sender::new(Role::Starting),
        }
    }

    /// What this driver is doing now.
    pub fn role(&self) -> Role {
        self.role.borrow().clone()
    }

    /// The current term, or `NotLeader` with the leader's address if known.
    pub fn term(&self) -> Result<Arc<Term>, DriverError> {
        match &*self.role.borrow() {
            Role::Leader(t) if !t.cancel.is_cancelled() => Ok(t.clone()),
            Role::Standby { leader, .. } => Err(DriverError::NotLeader {
                leader: leader.clone(),
            }),
            _ => Err(DriverError::NotLeader { leader: None }),
        }
    }

    /// The current term once its queries are loaded: what the query API
    /// needs. Executors may attach before that (see [`Driver::term`]).
    pub fn ready_term(&self) -> Result<Arc<Term>, DriverError> {
        let term = self.term()?;
        if !term.loaded.load(Ordering::Acquire) {
            return Err(DriverError::Starting);
        }
        Ok(term)
    }

    /// True on a leader whose queries are loaded.
    pub fn is_ready(&self) -> bool {
        self.ready_term().is_ok()
    }

    pub fn set_role(&self, role: Role) {
        let leading = matches!(role, Role::Leader(_));
        self.metrics.is_leader.set(i64::from(leading));
        if let Role::Leader(t) = &role {
            self.metrics.epoch.set(t.epoch as i64);
        }
        self.role.send_replace(role);
    }

    /// Confirms that `term` still holds the leadership. Called whenever a
    /// create-only write finds a file this term did not write (docs/design-notes.md,
    /// invariant 4), and when an executor reports a newer epoch. A deposed
    /// term is cancelled at once.
    pub async fn confirm_leadership(&self, term: &Term) -> Result<(), DriverError> {
        term.fence()?;
        let current = term.leadership.leading_epoch(&self.checkpoint).await?;
        if current != term.epoch {
            warn!(
                epoch = term.epoch,
                current, "another epoch leads; stepping down"
            );
            term.cancel.cancel();
            return Err(DriverError::Deposed { epoch: term.epoch });
        }
        Ok(())
    }

    /// True while this driver holds a term (queries may still be loading).
    pub fn is_leader(&self) -> bool {
        self.term().is_ok()
    }
}

/// One leadership term.
pub struct Term {
    pub epoch: u64,
    pub cancel: CancellationToken,
    pub scheduler: Scheduler,
    pub queries: Queries,
    pub tasks: TaskTracker,
    /// Set once every query of the checkpoint is loaded.
    pub loaded: AtomicBool,
    pub leadership: Leadership,
}

impl Term {
    pub fn new(
        epoch: u64,
        driver: &Driver,
        cancel: CancellationToken,
        leadership: Leadership,
    ) -> Arc<Term> {
        let tasks = TaskTracker::new();
        let scheduler = Scheduler::spawn(
            epoch,
            driver.config.executor_timeout,
            driver.metrics.clone(),
            cancel.clone(),
            &tasks,
            leadership.lease(),
        );
        Arc::new(Term {
            epoch,
            cancel,
            scheduler,
            queries: Queries::default(),
            tasks,
            loaded: AtomicBool::new(false),
            leadership,
        })
    }

    /// Fails unless this term may still dispatch and commit: it is not
    /// cancelled and, when elected, its lease was renewed within 2/3 of the
    /// TTL. Checked right before every checkpoint write.
    pub fn fence(&self) -> Result<(), DriverError> {
        self.leadership.fence(self.epoch, &self.cancel)
    }

    /// Cancels everything the term started and waits for it to finish.
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}
