//! The limits every manifest is checked against.

/// The most reruns a manifest may ask for: each one is a sandbox phase.
pub const MAX_RETRIES: u32 = 5;

/// The largest group a probe may start.
pub const MAX_WORLD_SIZE: usize = 4;
