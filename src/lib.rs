//! InfraDev: grades AI-written pull requests against ML-infrastructure repositories.
//!
//! The folders are the architecture (ARCHITECTURE.md has the code map and the invariants).
//! Dependencies point one way, from the commands down to the pure core:
//!
//! ```text
//! cli ─▶ service ─▶ analysis ─▶ suite ─▶ grade ─▶ task ─▶ grading
//! ```
//!
//! A module may use any module to its right, never one to its left (`tests/layout.rs` checks
//! this, and that no two files import each other, directly or through others).

pub mod analysis;
pub mod cli;
pub mod grade;
pub mod grading;
pub mod service;
pub mod suite;
pub mod task;
