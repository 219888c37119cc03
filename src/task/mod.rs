//! Tasks: the manifest format, the hidden-probe manifest, and discovery on disk.

mod error;
mod limits;
mod manifest;
mod power;
mod probes;
mod registry;
mod reject;
mod validation;

pub use error::ManifestError;
pub use limits::{MAX_RETRIES, MAX_WORLD_SIZE};
pub use manifest::{
    Area, Environment, FollowUpRelease, Gpus, OfficialTests, Release, Resources, Task, Timeouts,
    Upstream, UpstreamSource, load_task,
};
pub use power::{
    DEFAULT_THRESHOLD, Equivalent, OutOfScope, POWER_FILE, PowerConfig, ProbePort, Scope,
    load_power_config,
};
pub use probes::{Budget, Probe, ProbeSet, load_probes};
pub use registry::{CheckProblem, Registry, check_task};
pub use reject::Reject;
pub use validation::{
    VALIDATION_FILE, ValidationStamp, manifest_digest, probes_digest, read_probe_files, read_stamp,
    stamp_problems,
};
