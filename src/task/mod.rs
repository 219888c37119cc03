//! Tasks: the manifest format, the hidden-probe manifest, and discovery on disk.

mod error;
mod manifest;
mod power;
mod probes;
mod registry;
mod reject;

pub use error::ManifestError;
pub use manifest::{
    Area, Environment, FollowUpRelease, Gpus, MAX_RETRIES, OfficialTests, Release, Resources, Task,
    Timeouts, Upstream, UpstreamSource, load_task,
};
pub use power::{Equivalent, OutOfScope, POWER_FILE, PowerConfig, Scope, load_power_config};
pub use probes::{Budget, Probe, ProbeSet, load_probes};
pub use registry::{CheckProblem, Registry, check_task};
pub use reject::Reject;
