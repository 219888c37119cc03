//! Commands whose flow lives outside `cli.rs`: argument structs and their I/O, calling the
//! pipeline (`run`) and the pure aggregation (`stats`).

pub mod doctor;
pub mod run;
pub mod stats;
pub mod tasks_new;
