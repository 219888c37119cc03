//! The task suite's tooling: what makes, checks and measures tasks, never what grades a PR.
//!
//! `fetch` fills the host's cache (wheels, release sdists); `validate` grades a task's base,
//! reference, null patch and wrong patches through the one grading flow; `power` measures the
//! probes against generated mutants; `lint` checks that the prompt names what the probes use;
//! `scaffold` proposes a new task from an upstream PR; `table` renders the README's task table;
//! `git` and `mutate` are the tools' shared steps (git as a fixed committer, runners/tasks/mutate.py).
//!
//! May import `grade`, `task` and `grading`; nothing of the service, the commands or `analysis`.

pub mod fetch;
pub mod git;
pub mod lint;
pub mod mutate;
pub mod power;
pub mod scaffold;
pub mod table;
pub mod validate;
