//! Named process exit codes, shared by every subcommand.

/// The submission is resolved (or the command succeeded).
pub const RESOLVED: u8 = 0;
/// The submission was graded and is not resolved.
pub const UNRESOLVED: u8 = 1;
/// Bad arguments, or a task/manifest problem: nothing about the submission was judged.
pub const USAGE_OR_TASK: u8 = 2;
/// Our infrastructure failed (Docker, image, runner): the submission is not to blame.
pub const INFRA: u8 = 3;
/// The submission was graded and caught rewriting its results (a canary contradicted).
pub const TAMPERED: u8 = 4;
