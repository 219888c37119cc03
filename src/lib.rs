//! InfraDev: grades AI-written pull requests against ML-infrastructure repositories.
//!
//! See ARCHITECTURE.md for the codemap and the invariants each module keeps.

pub mod action;
pub mod app;
pub mod app_manifest;
pub mod backend;
pub mod canary;
pub mod cli;
pub mod commands;
pub mod config;
pub mod demo;
pub mod exit;
pub mod fetch;
pub mod github;
pub mod grade;
pub mod grading;
pub mod guard;
pub mod job_run;
pub mod lint;
pub mod logging;
pub mod power;
pub mod redact;
pub mod report;
pub mod results;
pub mod run;
pub mod sandbox;
pub mod server;
pub mod skill;
pub mod stats;
pub mod store;
pub mod task;
pub mod validate;
pub mod web;
pub mod webhook;
pub mod workspace;
