//! Executor membership and task scheduling.

pub mod placement;
pub mod scheduler;
pub mod service;
