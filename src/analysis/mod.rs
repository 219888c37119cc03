//! What is made of many grades: benchmark runs (`run`: a submissions file graded as one run,
//! with its records and report), statistics over grades (`stats`), and the agent skill
//! exported from them (`skill`). Pure except for `run`'s runner and records.
//!
//! May import `grade`, `task` and `grading`; never the service or the commands.

pub mod run;
pub mod skill;
pub mod stats;
