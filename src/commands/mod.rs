//! Commands whose flow lives outside `cli.rs`: argument structs and their I/O, calling the
//! pipeline (`grade`, `run`), the App (`serve`) and the pure aggregation (`stats`).

pub mod doctor;
pub mod grade;
pub mod run;
pub mod serve;
pub mod stats;
