//! Commands whose flow lives outside `cli.rs`: argument structs and their I/O, calling the
//! pipeline (`run`) and the pure aggregation (`stats`); `source` is where the grades behind
//! statistics come from.

pub mod doctor;
pub mod run;
pub mod source;
pub mod stats;
