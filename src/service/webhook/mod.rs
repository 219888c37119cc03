//! Webhook intake without I/O: signature verification, the closed [`Event`] enum, and parsing
//! of GitHub's webhook JSON into it.

pub mod event;
pub mod parse;
pub mod signature;

pub use event::{Event, PrAction, PullRequest, Repo};
pub use parse::{ParseError, parse};
pub use signature::{sign, verify_signature};
