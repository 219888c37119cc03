//! The GitHub App: webhook intake, the durable store, deciding which PRs to grade, workers
//! that grade them (locally or on a remote engine), and everything written back to GitHub.
//!
//! `server` (axum routes) and `web` (pure page rendering) are what people and GitHub reach;
//! `webhook` verifies and parses deliveries; `app` holds the decisions and the loops; `store`
//! owns sqlx; `github` owns octocrab and jsonwebtoken; `backend` hands grades to Slurm or
//! GitHub Actions; `config` is `infradev.toml`.
//!
//! May import `analysis`, `suite`, `grade`, `task` and `grading`; never the commands.

pub mod app;
pub mod backend;
pub mod config;
pub mod github;
pub mod server;
pub mod store;
pub mod web;
pub mod webhook;
