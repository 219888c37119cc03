//! Commands whose flow lives outside `cli.rs`: argument structs and their I/O, calling the
//! pipeline (`grade`, `run`), the App (`serve`), the pure aggregation (`stats`) and the skill
//! renderer (`skill`); `source` is where their grades come from.

pub mod doctor;
pub mod grade;
pub mod run;
pub mod serve;
pub mod skill;
pub mod source;
pub mod stats;
pub mod tasks_new;
