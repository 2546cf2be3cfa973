//! Executor membership and task scheduling.

pub mod identity;
pub mod placement;
pub mod scheduler;
#[cfg(test)]
mod scheduler_tests;
pub mod service;
