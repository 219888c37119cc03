//! What may be drawn on standard error while a grade runs. When logs are JSON lines (set once
//! by the CLI's logging), nothing else may write free text there: progress bars stay off.

use std::sync::atomic::{AtomicBool, Ordering};

static JSON_LOGS: AtomicBool = AtomicBool::new(false);

/// Says whether logs are JSON lines; called once, when logging is set up.
pub fn set_json_logs(json: bool) {
    JSON_LOGS.store(json, Ordering::Relaxed);
}

/// Whether logs are JSON lines: then nothing else may write free text to standard error.
pub fn json_logs() -> bool {
    JSON_LOGS.load(Ordering::Relaxed)
}
