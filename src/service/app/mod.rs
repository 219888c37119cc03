//! The GitHub App service: pure decisions (which PRs, which task, which commands) and the
//! loops that carry them out (processor, workers, outbox, reconcile). See docs/service-design.md.

pub mod bundle;
pub mod commands;
pub mod decide;
pub mod drain;
pub mod grades;
pub mod matching;
pub mod mirror;
pub mod outbox;
pub mod processor;
pub mod remote;
pub mod results;
mod resync;
pub mod service;
pub mod worker;
